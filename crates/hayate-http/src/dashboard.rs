//! The dashboard at `/`: one self-contained page (`dashboard.html`, embedded in the binary; no
//! external script, style or font) that polls `GET /api/v1/overview` with the bearer token and
//! draws connections, message rates, drops and memory over the last minutes, and the first
//! page of clients. The history is kept here, sampled every [`SAMPLE_EVERY`], so a page
//! opened now shows the last minutes at once.

use crate::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use hayate_core::Stats;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// How often the history is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Samples kept: ten minutes.
const KEEP: usize = 300;
/// Clients shown on the dashboard (the first page in client id order).
const CLIENTS_SHOWN: usize = 50;

const PAGE: &str = include_str!("dashboard.html");

/// One point of the history.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    /// Unix time in milliseconds.
    t: u64,
    clients: u64,
    /// Per second over the interval before this sample.
    publish_in_rate: f64,
    publish_out_rate: f64,
    dropped_rate: f64,
    bytes_in_rate: f64,
    bytes_out_rate: f64,
    resident_bytes: u64,
    queued_bytes: u64,
}

/// The last samples, and the counters of the previous one (for rates).
#[derive(Debug, Default)]
pub(crate) struct History {
    inner: Mutex<HistoryInner>,
}

#[derive(Debug, Default)]
struct HistoryInner {
    samples: VecDeque<Sample>,
    last: Option<(std::time::Instant, [u64; 5])>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl History {
    /// Takes a sample of the broker now.
    pub(crate) fn sample(&self, state: &AppState) {
        let broker = &state.sources.broker;
        let stats = &broker.stats;
        let counters = [
            stats.publish_received.total(),
            stats.publish_sent.total(),
            Stats::get(&stats.publish_dropped),
            Stats::get(&stats.bytes_received),
            Stats::get(&stats.bytes_sent),
        ];
        let now = std::time::Instant::now();
        let mut inner = self.inner.lock();
        let rates = match inner.last {
            Some((then, before)) => {
                let secs = now.duration_since(then).as_secs_f64().max(1e-3);
                let mut rates = [0.0; 5];
                for (rate, (a, b)) in rates.iter_mut().zip(counters.iter().zip(before)) {
                    *rate = a.saturating_sub(b) as f64 / secs;
                }
                rates
            }
            None => [0.0; 5],
        };
        inner.last = Some((now, counters));
        if inner.samples.len() == KEEP {
            inner.samples.pop_front();
        }
        inner.samples.push_back(Sample {
            t: now_ms(),
            clients: Stats::get(&stats.clients_connected),
            publish_in_rate: rates[0],
            publish_out_rate: rates[1],
            dropped_rate: rates[2],
            bytes_in_rate: rates[3],
            bytes_out_rate: rates[4],
            resident_bytes: crate::process::read().resident_bytes,
            queued_bytes: broker.memory.held() as u64,
        });
    }

    fn samples(&self) -> Vec<Sample> {
        self.inner.lock().samples.iter().copied().collect()
    }
}

pub(crate) async fn sample_loop(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => state.history.sample(&state),
            _ = shutdown.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// The page.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ],
        PAGE,
    )
}

/// What the page polls: current figures, the history, and the first clients.
pub(crate) async fn overview(State(state): State<Arc<AppState>>) -> Json<Value> {
    let broker = &state.sources.broker;
    let stats = &broker.stats;
    let clients: Vec<Value> = broker
        .registry
        .page(None, None, CLIENTS_SHOWN)
        .iter()
        .map(|cell| {
            let c = cell.snapshot();
            json!({
                "client_id": &*c.client_id,
                "online": c.online,
                "username": c.username.as_deref(),
                "listener": c.listener.as_deref(),
                "peer": c.peer.map(|p| p.to_string()),
                "subscriptions": c.subscriptions.len(),
                "queued": c.queued,
            })
        })
        .collect();
    let sessions = broker.registry.len() as u64;
    let connected = Stats::get(&stats.clients_connected);
    let uptime = tokio::time::Instant::now()
        .into_std()
        .saturating_duration_since(broker.started_at);
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": uptime.as_secs(),
        "clients_connected": connected,
        "sessions": sessions,
        "sessions_offline": sessions.saturating_sub(connected),
        "subscriptions": Stats::get(&stats.subscriptions),
        "retained": broker.router.retained_count(),
        "publish_received": stats.publish_received.total(),
        "publish_sent": stats.publish_sent.total(),
        "publish_dropped": Stats::get(&stats.publish_dropped),
        "queued_bytes": broker.memory.held(),
        "queued_bytes_limit": broker.memory.limit(),
        "resident_bytes": crate::process::read().resident_bytes,
        "history": state.history.samples(),
        "clients": clients,
        "clients_total": sessions,
    }))
}
