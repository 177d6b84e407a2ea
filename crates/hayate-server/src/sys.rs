//! `$SYS/broker/...` statistics, published with Mosquitto's topic names.

use hayate_core::stats::Stats;
use hayate_core::Broker;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Exponentially weighted per-minute rates over 1, 5 and 15 minutes, as Mosquitto's
/// `$SYS/broker/load/...` topics report.
struct Load {
    name: &'static str,
    last: u64,
    averages: [f64; 3],
}

impl Load {
    fn new(name: &'static str) -> Load {
        Load {
            name,
            last: 0,
            averages: [0.0; 3],
        }
    }

    /// Folds in the counter's new value after `interval`.
    fn update(&mut self, value: u64, interval: Duration) {
        let per_minute = (value.saturating_sub(self.last)) as f64 * 60.0 / interval.as_secs_f64();
        self.last = value;
        for (average, minutes) in self.averages.iter_mut().zip([1.0, 5.0, 15.0]) {
            let alpha = 1.0 - (-interval.as_secs_f64() / (60.0 * minutes)).exp();
            *average += alpha * (per_minute - *average);
        }
    }
}

pub(crate) async fn sys_loop(
    broker: Arc<Broker>,
    store: Option<Arc<hayate_storage::FjallStore>>,
    bridges: Arc<hayate_bridge::BridgeSet>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    broker.publish_internal(
        "$SYS/broker/version",
        format!("hayate version {}", env!("CARGO_PKG_VERSION")).into(),
        true,
        tokio::time::Instant::now().into_std(),
    );
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stats = &broker.stats;
    type Read = fn(&Stats) -> u64;
    let mut loads: [(Load, Read); 8] = [
        (Load::new("messages/received"), |s| {
            Stats::get(&s.messages_received)
        }),
        (Load::new("messages/sent"), |s| s.publish_sent.total()),
        (Load::new("publish/received"), |s| {
            s.publish_received.total()
        }),
        (Load::new("publish/sent"), |s| s.publish_sent.total()),
        (Load::new("publish/dropped"), |s| {
            Stats::get(&s.publish_dropped)
        }),
        (Load::new("bytes/received"), |s| {
            Stats::get(&s.bytes_received)
        }),
        (Load::new("bytes/sent"), |s| Stats::get(&s.bytes_sent)),
        (Load::new("connections"), |s| {
            Stats::get(&s.connections_total)
        }),
    ];
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let now = tokio::time::Instant::now().into_std();
        let uptime = now.saturating_duration_since(broker.started_at);
        let publish =
            |topic: &str, value: String| broker.publish_internal(topic, value.into(), true, now);
        let counter = |counter: &AtomicU64| Stats::get(counter).to_string();
        publish(
            "$SYS/broker/uptime",
            format!("{} seconds", uptime.as_secs()),
        );
        let connected = Stats::get(&stats.clients_connected);
        let total = broker.registry.len() as u64;
        publish("$SYS/broker/clients/connected", connected.to_string());
        publish("$SYS/broker/clients/active", connected.to_string());
        publish(
            "$SYS/broker/clients/total",
            total.max(connected).to_string(),
        );
        publish(
            "$SYS/broker/clients/disconnected",
            total.saturating_sub(connected).to_string(),
        );
        publish(
            "$SYS/broker/clients/maximum",
            counter(&stats.clients_maximum),
        );
        publish(
            "$SYS/broker/messages/received",
            counter(&stats.messages_received),
        );
        let sent = stats.publish_sent.total().to_string();
        publish("$SYS/broker/messages/sent", sent.clone());
        publish(
            "$SYS/broker/publish/messages/received",
            stats.publish_received.total().to_string(),
        );
        publish("$SYS/broker/publish/messages/sent", sent);
        publish(
            "$SYS/broker/publish/messages/dropped",
            counter(&stats.publish_dropped),
        );
        publish(
            "$SYS/broker/publish/messages/arrival catch-up",
            counter(&stats.arrival_catch_up),
        );
        publish(
            "$SYS/broker/memory/queued/bytes",
            broker.memory.held().to_string(),
        );
        publish(
            "$SYS/broker/memory/queued/refused",
            broker.memory.refused().to_string(),
        );
        publish("$SYS/broker/bytes/received", counter(&stats.bytes_received));
        publish("$SYS/broker/bytes/sent", counter(&stats.bytes_sent));
        publish(
            "$SYS/broker/retained messages/count",
            broker.router.retained_count().to_string(),
        );
        publish(
            "$SYS/broker/subscriptions/count",
            counter(&stats.subscriptions),
        );
        // Hayate's own: authentication and authorisation refusals (Mosquitto has none).
        for (topic, value) in [
            ("$SYS/broker/auth/failed", &stats.auth_failed),
            ("$SYS/broker/auth/throttled", &stats.auth_throttled),
            ("$SYS/broker/auth/denied/publish", &stats.denied_publish),
            ("$SYS/broker/auth/denied/subscribe", &stats.denied_subscribe),
            ("$SYS/broker/auth/denied/delivery", &stats.denied_delivery),
        ] {
            publish(topic, counter(value));
        }
        for (name, bridge) in &bridges.counters() {
            publish_bridge(name, bridge, &publish);
        }
        if let Some(store) = &store {
            publish_store(store, &publish, Stats::get(&stats.store_refused));
            // The lifetime counters survive a restart (a crash loses one interval of them).
            broker.persist_totals();
        }
        for (load, source) in loads.iter_mut() {
            load.update((*source)(stats), interval);
            for (average, window) in load.averages.iter().zip(["1min", "5min", "15min"]) {
                publish(
                    &format!("$SYS/broker/load/{}/{}", load.name, window),
                    format!("{average:.2}"),
                );
            }
        }
    }
}

/// A bridge's state and counters (Hayate's own topics; Mosquitto has the state topic only,
/// `$SYS/broker/connection/<id>/state`, which the bridge itself publishes).
fn publish_bridge(
    name: &str,
    bridge: &hayate_bridge::BridgeStats,
    publish: &impl Fn(&str, String),
) {
    use std::sync::atomic::Ordering::Relaxed;
    let connected = u8::from(bridge.connected.load(Relaxed));
    publish(
        &format!("$SYS/broker/bridge/{name}/connected"),
        connected.to_string(),
    );
    for (key, value) in [
        ("connects", &bridge.connects),
        ("messages/out", &bridge.messages_out),
        ("messages/out/resent", &bridge.resent_out),
        ("messages/in", &bridge.messages_in),
        ("messages/dropped", &bridge.dropped),
        ("messages/retained_replayed", &bridge.retained_replayed),
        ("queue/dropped", &bridge.queue_dropped),
    ] {
        publish(
            &format!("$SYS/broker/bridge/{name}/{key}"),
            value.load(Relaxed).to_string(),
        );
    }
    let queue = bridge.queue();
    publish(
        &format!("$SYS/broker/bridge/{name}/queue/messages"),
        queue.messages.to_string(),
    );
    publish(
        &format!("$SYS/broker/bridge/{name}/queue/bytes"),
        queue.bytes.to_string(),
    );
}

/// The store's figures (`docs/DURABILITY.md`, "Monitoring").
fn publish_store(
    store: &hayate_storage::FjallStore,
    publish: &impl Fn(&str, String),
    refused: u64,
) {
    let stats = store.stats();
    let state = if stats.healthy { "ok" } else { "failing" };
    publish("$SYS/broker/store/state", state.into());
    publish("$SYS/broker/store/bytes", store.disk_bytes().to_string());
    publish(
        "$SYS/broker/store/queued messages",
        stats.queued.to_string(),
    );
    publish("$SYS/broker/store/fsyncs", stats.syncs.to_string());
    for (name, latency) in [
        ("fsync", &stats.sync_latency),
        ("commit", &stats.commit_latency),
    ] {
        let topic = |figure: &str| format!("$SYS/broker/store/{name} latency/{figure} us");
        publish(&topic("mean"), latency.mean_micros().to_string());
        publish(&topic("max"), latency.max_micros.to_string());
        // The bucket bound under which 99% of them fell (0 before the first).
        let p99 = latency.quantile_bound_micros(0.99).unwrap_or(0);
        publish(&topic("p99"), p99.to_string());
    }
    publish(
        "$SYS/broker/store/write errors",
        stats.write_errors.to_string(),
    );
    publish("$SYS/broker/store/refused", refused.to_string());
}
