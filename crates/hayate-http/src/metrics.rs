//! `GET /metrics`: the Prometheus text format (0.0.4), written by `prometheus-client`.
//!
//! Nothing here is updated on the broker's hot path: the broker keeps counting in its
//! relaxed atomics ([`hayate_core::Stats`]) as it does for `$SYS`, and [`BrokerCollector`]
//! reads them when Prometheus scrapes. Names follow the Prometheus conventions: a `hayate_`
//! prefix, the unit in the name (`_bytes`, `_seconds`), `_total` on counters; the standard
//! `process_*` names for the process. The reference is `docs/OPERATIONS.md`.

use crate::{AppState, Sources};
use axum::extract::State;
use axum::response::Response;
use hayate_codec::QoS;
use hayate_core::latency::{Latency, LATENCY_BUCKETS_MICROS};
use hayate_core::stats::QOS_LEVELS;
use hayate_core::{PublishCounts, Stats};
use hayate_prometheus::{label, text_response, Families, HistogramFigures, Labels};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A latency histogram of `hayate_core` (µs buckets), in seconds.
pub fn seconds(latency: &Latency) -> HistogramFigures {
    let bounds: Vec<f64> = LATENCY_BUCKETS_MICROS
        .iter()
        .map(|micros| *micros as f64 / 1e6)
        .collect();
    HistogramFigures::from_counts(&bounds, &latency.buckets, latency.sum_micros as f64 / 1e6)
}

/// The embedded store's figures (`docs/DURABILITY.md`, "Monitoring").
#[derive(Debug, Clone, Default)]
pub struct StoreFigures {
    /// Writing works.
    pub healthy: bool,
    /// Bytes on disk.
    pub disk_bytes: u64,
    /// Queued messages in the store.
    pub queued_messages: u64,
    /// fsyncs done.
    pub fsyncs: u64,
    /// Time spent in fsync, in microseconds, in total.
    pub fsync_micros: u64,
    /// The longest fsync, in microseconds.
    pub fsync_max_micros: u64,
    /// Write errors.
    pub write_errors: u64,
    /// fsync latency, in seconds.
    pub fsync_latency: HistogramFigures,
    /// Latency of committing a write batch, in seconds.
    pub commit_latency: HistogramFigures,
}

/// The connections open on one listener.
#[derive(Debug, Clone)]
pub struct ListenerConnections {
    /// The listener's name.
    pub listener: String,
    /// Its transport: `tcp`, `tls`, `psk`, `ws` or `wss`.
    pub transport: &'static str,
    /// Network connections open now, before and after CONNECT.
    pub open: u64,
}

/// One bridge's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct BridgeFigures {
    /// Connected to the remote broker now.
    pub connected: bool,
    /// Connections made to the remote broker.
    pub connects: u64,
    /// Messages sent to the remote broker.
    pub messages_out: u64,
    /// Messages received from the remote broker.
    pub messages_in: u64,
    /// Messages received from the remote broker that no topic rule maps (dropped).
    pub dropped: u64,
    /// Outgoing messages dropped because the bridge's queue was full (the oldest ones).
    pub queue_dropped: u64,
    /// Outgoing messages in the bridge's queue now (waiting and in flight).
    pub queued_messages: u64,
    /// Payload + topic bytes of the outgoing messages the bridge's queue holds in memory.
    pub queued_bytes: u64,
}

/// The registry served at `/metrics`: one collector reading everything at scrape time.
pub(crate) fn registry(sources: &Sources) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector {
        sources: sources.clone(),
    }));
    registry
}

pub(crate) async fn handler(State(state): State<Arc<AppState>>) -> Response {
    text_response(&state.registry)
}

/// Reads the broker's counters when scraped.
struct BrokerCollector {
    sources: Sources,
}

impl fmt::Debug for BrokerCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerCollector").finish_non_exhaustive()
    }
}

fn get(counter: &AtomicU64) -> u64 {
    Stats::get(counter)
}

impl Collector for BrokerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut out = Families::new(&mut encoder);
        self.clients(&mut out)?;
        self.messages(&mut out)?;
        self.flow_and_auth(&mut out)?;
        self.store(&mut out)?;
        self.cluster(&mut out)?;
        self.bridges(&mut out)?;
        process(&mut out)
    }
}

impl BrokerCollector {
    fn clients(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let broker = &self.sources.broker;
        let stats = &broker.stats;
        let connected = get(&stats.clients_connected);
        let sessions = broker.registry.len() as u64;
        out.family(
            "hayate_build_info",
            "Hayate's version (always 1).",
            MetricType::Gauge,
            &[(label("version", env!("CARGO_PKG_VERSION")), 1)],
        )?;
        out.gauge(
            "hayate_clients_connected",
            "MQTT clients connected now (CONNECT accepted).",
            None,
            connected,
        )?;
        out.gauge(
            "hayate_clients_connected_maximum",
            "Highest number of clients connected at once since start.",
            None,
            get(&stats.clients_maximum),
        )?;
        if let Some(connections) = &self.sources.connections {
            let samples: Vec<(Labels, u64)> = connections()
                .into_iter()
                .map(|l| {
                    let labels = vec![("listener", l.listener), ("transport", l.transport.into())];
                    (labels, l.open)
                })
                .collect();
            out.family(
                "hayate_network_connections",
                "Network connections open now (before and after CONNECT), by listener and transport.",
                MetricType::Gauge,
                &samples,
            )?;
        }
        out.counter(
            "hayate_network_connections_accepted",
            "Network connections accepted.",
            None,
            get(&stats.connections_total),
        )?;
        out.family(
            "hayate_sessions",
            "Sessions by state: online (a connection attached) or offline (kept for a returning client).",
            MetricType::Gauge,
            &[
                (label("state", "online"), connected.min(sessions)),
                (label("state", "offline"), sessions.saturating_sub(connected)),
            ],
        )?;
        out.gauge(
            "hayate_subscriptions",
            "Subscriptions held (shared ones included).",
            None,
            get(&stats.subscriptions),
        )?;
        out.gauge(
            "hayate_retained_messages",
            "Retained messages stored.",
            None,
            broker.router.retained_count() as u64,
        )
    }

    fn messages(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let stats = &self.sources.broker.stats;
        out.counter(
            "hayate_packets_received",
            "MQTT packets received from clients.",
            None,
            get(&stats.messages_received),
        )?;
        let by_qos = |counts: &PublishCounts, read: fn(&PublishCounts, QoS) -> u64| {
            QOS_LEVELS
                .iter()
                .map(|qos| (label("qos", &(*qos as u8).to_string()), read(counts, *qos)))
                .collect::<Vec<_>>()
        };
        out.family(
            "hayate_publish_received",
            "PUBLISH packets received from clients, by QoS.",
            MetricType::Counter,
            &by_qos(&stats.publish_received, PublishCounts::packets),
        )?;
        out.family(
            "hayate_publish_sent",
            "PUBLISH packets sent to clients, by the QoS they were sent with.",
            MetricType::Counter,
            &by_qos(&stats.publish_sent, PublishCounts::packets),
        )?;
        out.family(
            "hayate_publish_received_payload_bytes",
            "Payload bytes of the PUBLISH packets received from clients, by QoS.",
            MetricType::Counter,
            &by_qos(&stats.publish_received, PublishCounts::payload_bytes),
        )?;
        out.family(
            "hayate_publish_sent_payload_bytes",
            "Payload bytes of the PUBLISH packets sent to clients, by QoS.",
            MetricType::Counter,
            &by_qos(&stats.publish_sent, PublishCounts::payload_bytes),
        )?;
        out.counter(
            "hayate_network_received",
            "Bytes read from clients.",
            Some(Unit::Bytes),
            get(&stats.bytes_received),
        )?;
        out.counter(
            "hayate_network_sent",
            "Bytes written to clients.",
            Some(Unit::Bytes),
            get(&stats.bytes_sent),
        )?;
        let dropped = get(&stats.publish_dropped);
        let expired = get(&stats.dropped_expired);
        let too_large = get(&stats.dropped_too_large);
        out.family(
            "hayate_messages_dropped",
            "Deliveries dropped, by reason: queue (a session's queue or the broker-wide budget full, or QoS 0 for an offline session), expired (message expiry passed while queued), too_large (above the client's Maximum Packet Size).",
            MetricType::Counter,
            &[
                (label("reason", "queue"), dropped.saturating_sub(expired + too_large)),
                (label("reason", "expired"), expired),
                (label("reason", "too_large"), too_large),
            ],
        )?;
        out.counter(
            "hayate_publish_no_subscribers",
            "PUBLISH packets from clients that matched no subscription.",
            None,
            get(&stats.publish_no_subscribers),
        )?;
        out.counter(
            "hayate_arrival_catch_up_messages",
            "Messages delivered to a new subscription that arrived after its SUBSCRIBE but were routed before it was in place.",
            None,
            get(&stats.arrival_catch_up),
        )
    }

    fn flow_and_auth(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let broker = &self.sources.broker;
        let stats = &broker.stats;
        out.counter(
            "hayate_backpressure_pauses",
            "Times a publisher stopped being read because a subscriber it feeds was congested.",
            None,
            get(&stats.backpressure_pauses),
        )?;
        out.counter(
            "hayate_backpressure_stalls",
            "Times a congested subscriber was found stalled and stopped holding publishers back.",
            None,
            get(&stats.backpressure_stalls),
        )?;
        out.gauge(
            "hayate_sessions_congested",
            "Subscriber sessions congested now (their publishers are paused).",
            None,
            broker.router.congested_count() as u64,
        )?;
        out.gauge(
            "hayate_queued_messages_memory",
            "Bytes of queued messages held in memory, broker-wide.",
            Some(Unit::Bytes),
            broker.memory.held() as u64,
        )?;
        out.gauge(
            "hayate_queued_messages_memory_limit",
            "The broker-wide budget for queued message bytes (max_queued_bytes_total).",
            Some(Unit::Bytes),
            broker.memory.limit() as u64,
        )?;
        out.counter(
            "hayate_queued_messages_memory_refused",
            "Deliveries refused because the broker-wide queued-bytes budget was full.",
            None,
            broker.memory.refused(),
        )?;
        out.counter(
            "hayate_auth_failures",
            "Authentications refused (CONNECT and re-authentication), throttled ones included.",
            None,
            get(&stats.auth_failed),
        )?;
        out.counter(
            "hayate_auth_throttled",
            "Authentications refused unchecked because the address was in its penalty window.",
            None,
            get(&stats.auth_throttled),
        )?;
        out.family(
            "hayate_authorization_denied",
            "Operations refused by authorisation, by action.",
            MetricType::Counter,
            &[
                (label("action", "publish"), get(&stats.denied_publish)),
                (label("action", "subscribe"), get(&stats.denied_subscribe)),
                (label("action", "delivery"), get(&stats.denied_delivery)),
            ],
        )
    }

    fn store(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let Some(store) = &self.sources.store else {
            return Ok(());
        };
        let figures = store();
        let refused = get(&self.sources.broker.stats.store_refused);
        out.gauge(
            "hayate_store_healthy",
            "1 while the store writes, 0 while it is failing (QoS 1/2 refused).",
            None,
            u64::from(figures.healthy),
        )?;
        out.gauge(
            "hayate_store_disk",
            "Bytes the store occupies on disk.",
            Some(Unit::Bytes),
            figures.disk_bytes,
        )?;
        out.gauge(
            "hayate_store_queued_messages",
            "Queued messages kept in the store.",
            None,
            figures.queued_messages,
        )?;
        out.counter(
            "hayate_store_fsyncs",
            "fsyncs of the store.",
            None,
            figures.fsyncs,
        )?;
        out.counter_f64(
            "hayate_store_fsync",
            "Time spent in the store's fsyncs (divide by hayate_store_fsyncs_total for the mean).",
            Unit::Seconds,
            figures.fsync_micros as f64 / 1e6,
        )?;
        out.gauge(
            "hayate_store_fsync_max",
            "The longest fsync of the store since start.",
            Some(Unit::Seconds),
            figures.fsync_max_micros as f64 / 1e6,
        )?;
        out.histogram(
            "hayate_store_fsync_duration",
            "Latency of the store's fsyncs (one observation per fsync).",
            &figures.fsync_latency,
        )?;
        out.histogram(
            "hayate_store_commit_duration",
            "Latency of committing one write batch of the store to the operating system (one observation per batch).",
            &figures.commit_latency,
        )?;
        out.counter(
            "hayate_store_write_errors",
            "Failed writes of the store.",
            None,
            figures.write_errors,
        )?;
        out.counter(
            "hayate_store_refused_publishes",
            "QoS 1/2 PUBLISH packets refused because the store could not write.",
            None,
            refused,
        )
    }

    fn cluster(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let broker = &self.sources.broker;
        if broker.router.cluster().is_none() {
            return Ok(());
        }
        out.histogram(
            "hayate_cluster_link_round_trip",
            "Round trip of the node links' keep-alive probe (PINGREQ queued to PINGRESP handled, one observation per link every 5 s): the network and what was queued on the link ahead of it.",
            &seconds(&broker.stats.cluster_link_round_trip.read()),
        )?;
        out.counter(
            "hayate_cluster_relayed_dropped_messages",
            "Relayed copies that reached this node for a session it no longer has and could not be passed on.",
            None,
            get(&broker.stats.cluster_relayed_dropped),
        )?;
        out.counter(
            "hayate_cluster_qos2_resends_held",
            "QoS 2 PUBLISH packets sent again (DUP) by a client that were held until the node that had its older session answered.",
            None,
            get(&broker.stats.qos2_resends_held),
        )
    }

    fn bridges(&self, out: &mut Families<'_, '_>) -> fmt::Result {
        let figures = (self.sources.bridges)();
        let each = |value: fn(&BridgeFigures) -> u64| -> Vec<(Labels, u64)> {
            figures
                .iter()
                .map(|(name, f)| (label("bridge", name), value(f)))
                .collect()
        };
        out.family(
            "hayate_bridge_up",
            "1 while the bridge is connected to its remote broker.",
            MetricType::Gauge,
            &each(|f| u64::from(f.connected)),
        )?;
        out.family(
            "hayate_bridge_connects",
            "Connections the bridge made to its remote broker.",
            MetricType::Counter,
            &each(|f| f.connects),
        )?;
        let mut directions = Vec::new();
        for (name, f) in &figures {
            let labels = |direction: &str| {
                vec![
                    ("bridge", name.to_string()),
                    ("direction", direction.to_string()),
                ]
            };
            directions.push((labels("out"), f.messages_out));
            directions.push((labels("in"), f.messages_in));
        }
        out.family(
            "hayate_bridge_messages",
            "Messages the bridge forwarded, by direction.",
            MetricType::Counter,
            &directions,
        )?;
        out.family(
            "hayate_bridge_dropped_messages",
            "Messages received from the remote broker that no topic rule maps.",
            MetricType::Counter,
            &each(|f| f.dropped),
        )?;
        out.family(
            "hayate_bridge_queue_dropped_messages",
            "Outgoing messages dropped because the bridge's queue was full (the oldest).",
            MetricType::Counter,
            &each(|f| f.queue_dropped),
        )?;
        out.family(
            "hayate_bridge_queued_messages",
            "Outgoing messages in the bridge's queue (waiting and in flight).",
            MetricType::Gauge,
            &each(|f| f.queued_messages),
        )?;
        out.family(
            "hayate_bridge_queued_bytes",
            "Payload and topic bytes of the outgoing messages the bridge's queue holds in memory.",
            MetricType::Gauge,
            &each(|f| f.queued_bytes),
        )
    }
}

/// The standard `process_*` metrics, from `/proc/self`.
fn process(out: &mut Families<'_, '_>) -> fmt::Result {
    let p = crate::process::read();
    out.counter_f64(
        "process_cpu",
        "Total user and system CPU time spent.",
        Unit::Seconds,
        p.cpu_seconds,
    )?;
    out.gauge(
        "process_resident_memory",
        "Resident memory size.",
        Some(Unit::Bytes),
        p.resident_bytes,
    )?;
    out.gauge(
        "process_virtual_memory",
        "Virtual memory size.",
        Some(Unit::Bytes),
        p.virtual_bytes,
    )?;
    out.gauge(
        "process_start_time",
        "Start time of the process since the Unix epoch.",
        Some(Unit::Seconds),
        p.start_time_seconds,
    )?;
    out.gauge(
        "process_open_fds",
        "Open file descriptors.",
        None,
        p.open_fds,
    )?;
    out.gauge(
        "process_max_fds",
        "Maximum number of open file descriptors.",
        None,
        p.max_fds,
    )?;
    out.gauge("process_threads", "OS threads.", None, p.threads)
}
