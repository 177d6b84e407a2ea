//! `--metrics-listen ADDR`: the run's live figures at `http://ADDR/metrics` in the Prometheus
//! text format, written by `prometheus-client` from the parts' live counters
//! ([`crate::engine::PartLive`], [`crate::live::LiveMetrics`]) when Prometheus scrapes. The
//! endpoint is up from the start of a run to the end of its last part; worker processes'
//! figures arrive through their coordinator (mirrored every 100 ms). The metrics are listed in
//! `crates/hayate-bench/README.md` ("Live metrics").

use crate::engine::PartLive;
use crate::error::{BenchError, Result};
use crate::live::{MetricsSnapshot, LATENCY_BUCKETS_SECONDS};
use axum::extract::State;
use axum::response::Response;
use hayate_prometheus::{text_response, Families, HistogramFigures, Labels};
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::watch;

/// Parses `--metrics-listen`: `HOST:PORT`, or a bare port for `127.0.0.1:PORT`.
pub fn parse_listen(text: &str) -> Result<SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        BenchError::invalid(format!(
            "--metrics-listen {text:?}: expected HOST:PORT (an IP address) or a port"
        ))
    })
}

/// The parts of a run, as the endpoint sees them.
#[derive(Default)]
struct Parts {
    scenario: &'static str,
    parts: Mutex<Vec<(&'static str, Arc<PartLive>)>>,
}

/// A running endpoint.
pub struct MetricsEndpoint {
    parts: Arc<Parts>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The address it listens on.
    pub local_addr: SocketAddr,
}

impl MetricsEndpoint {
    /// Binds `addr` and serves `/metrics` for a run of `scenario` until [`Self::stop`].
    pub async fn start(addr: SocketAddr, scenario: &'static str) -> Result<MetricsEndpoint> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| BenchError::io(format!("--metrics-listen {addr}"), e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| BenchError::io(format!("--metrics-listen {addr}"), e))?;
        let parts = Arc::new(Parts {
            scenario,
            parts: Mutex::new(Vec::new()),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(BenchCollector {
            parts: parts.clone(),
        }));
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(handler))
            .with_state(Arc::new(registry));
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let signal = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            if let Err(error) = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await
            {
                tracing::error!(%error, "metrics_endpoint_failed");
            }
        });
        tracing::info!(address = %local_addr, "metrics_listening");
        Ok(MetricsEndpoint {
            parts,
            stop,
            task,
            local_addr,
        })
    }

    /// Adds a part (`role`: `publisher`, `subscriber` or `idle`) to what is served.
    pub fn add(&self, role: &'static str, live: Arc<PartLive>) {
        self.parts.parts.lock().push((role, live));
    }

    /// Stops serving.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn handler(State(registry): State<Arc<Registry>>) -> Response {
    text_response(&registry)
}

/// Reads the parts' live counters when scraped.
struct BenchCollector {
    parts: Arc<Parts>,
}

impl fmt::Debug for BenchCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BenchCollector").finish_non_exhaustive()
    }
}

/// One role's connection figures.
#[derive(Default, Clone, Copy)]
struct Connections {
    established: u64,
    failed: u64,
    lost: u64,
}

fn by_qos(values: &[u64]) -> Vec<(Labels, u64)> {
    (0..3)
        .map(|q| {
            let value = values.get(q).copied().unwrap_or(0);
            (vec![("qos", q.to_string())], value)
        })
        .collect()
}

impl Collector for BenchCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut total = MetricsSnapshot::default();
        let mut roles: Vec<(&'static str, Connections)> = Vec::new();
        for (role, live) in self.parts.parts.lock().iter() {
            let snapshot = live.metrics.snapshot();
            total.add(&snapshot);
            let at = match roles.iter().position(|(r, _)| r == role) {
                Some(at) => at,
                None => {
                    roles.push((*role, Connections::default()));
                    roles.len() - 1
                }
            };
            let c = &mut roles[at].1;
            c.established += live.connected.load(Relaxed);
            c.lost += live.dropped.load(Relaxed);
            c.failed += snapshot.connect_failed;
        }
        let e = &mut Families::new(&mut encoder);
        e.family(
            "hayate_bench_run_info",
            "The scenario being run (always 1).",
            MetricType::Gauge,
            &[(vec![("scenario", self.parts.scenario.to_string())], 1)],
        )?;
        let per_role = |value: fn(&Connections) -> u64| -> Vec<(Labels, u64)> {
            roles
                .iter()
                .map(|(role, c)| (vec![("role", role.to_string())], value(c)))
                .collect()
        };
        e.family(
            "hayate_bench_connections",
            "Connections open now (established and not lost), by role.",
            MetricType::Gauge,
            &per_role(|c| c.established.saturating_sub(c.lost)),
        )?;
        e.family(
            "hayate_bench_connections_established",
            "Connections established (CONNACK accepted), by role.",
            MetricType::Counter,
            &per_role(|c| c.established),
        )?;
        e.family(
            "hayate_bench_connections_failed",
            "Connection attempts that failed (refused, timed out, unreachable), by role.",
            MetricType::Counter,
            &per_role(|c| c.failed),
        )?;
        e.family(
            "hayate_bench_connections_lost",
            "Connections lost during the run, by role.",
            MetricType::Counter,
            &per_role(|c| c.lost),
        )?;
        messages(e, &total)?;
        latency(e, &total)
    }
}

fn messages(e: &mut Families<'_, '_>, total: &MetricsSnapshot) -> fmt::Result {
    e.family(
        "hayate_bench_publish_sent",
        "PUBLISH packets the publishers wrote, by QoS.",
        MetricType::Counter,
        &by_qos(&total.sent),
    )?;
    e.family(
        "hayate_bench_publish_sent_payload_bytes",
        "Payload bytes of the PUBLISH packets written, by QoS.",
        MetricType::Counter,
        &by_qos(&total.sent_bytes),
    )?;
    e.family(
        "hayate_bench_publish_received",
        "PUBLISH packets the subscribers received (duplicates included), by the QoS they arrived with.",
        MetricType::Counter,
        &by_qos(&total.received),
    )?;
    e.family(
        "hayate_bench_publish_received_payload_bytes",
        "Payload bytes of the PUBLISH packets received, by QoS.",
        MetricType::Counter,
        &by_qos(&total.received_bytes),
    )?;
    e.counter(
        "hayate_bench_messages_duplicate",
        "Copies of messages already received.",
        None,
        total.duplicates,
    )?;
    e.counter(
        "hayate_bench_messages_out_of_order",
        "Messages that arrived after a later message of the same publisher.",
        None,
        total.reordered,
    )?;
    e.counter(
        "hayate_bench_messages_foreign",
        "PUBLISH packets received whose payload is not a bench payload.",
        None,
        total.foreign,
    )?;
    e.counter(
        "hayate_bench_publish_errors",
        "Negative acknowledgements (PUBACK or PUBREC with an error reason code).",
        None,
        total.publish_errors,
    )?;
    e.counter(
        "hayate_bench_subscribe_failures",
        "Subscriptions the broker refused.",
        None,
        total.subscribe_failed,
    )
}

fn latency(e: &mut Families<'_, '_>, total: &MetricsSnapshot) -> fmt::Result {
    let figures = HistogramFigures::from_counts(
        &LATENCY_BUCKETS_SECONDS,
        &total.latency,
        total.latency_sum_ns as f64 / 1e9,
    );
    e.histogram(
        "hayate_bench_latency",
        "End-to-end latency of the bench messages received, from their intended send time (coordinated-omission corrected).",
        &figures,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_listen("0.0.0.0:9464").unwrap(),
            "0.0.0.0:9464".parse().unwrap()
        );
        let error = parse_listen("localhost:x").unwrap_err().to_string();
        assert!(error.contains("--metrics-listen"), "{error}");
    }
}
