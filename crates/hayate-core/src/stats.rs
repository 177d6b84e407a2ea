//! Broker-wide counters, published under `$SYS` with Mosquitto's names.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters updated by connections and the router. Relaxed atomics: each is an independent
/// tally read for reporting only.
#[derive(Debug, Default)]
pub struct Stats {
    /// Clients currently connected.
    pub clients_connected: AtomicU64,
    /// Highest `clients_connected` seen.
    pub clients_maximum: AtomicU64,
    /// Network connections accepted in total.
    pub connections_total: AtomicU64,
    /// PUBLISH packets received from clients.
    pub publish_received: AtomicU64,
    /// PUBLISH packets sent to clients.
    pub publish_sent: AtomicU64,
    /// Messages dropped: queue full, offline QoS 0, expired, too large for the client.
    pub publish_dropped: AtomicU64,
    /// Of those, dropped because their message expiry interval passed while queued.
    pub dropped_expired: AtomicU64,
    /// Of those, dropped because they exceed the client's Maximum Packet Size.
    pub dropped_too_large: AtomicU64,
    /// PUBLISH packets from clients that matched no subscription.
    pub publish_no_subscribers: AtomicU64,
    /// All packets received.
    pub messages_received: AtomicU64,
    /// All packets sent (PUBLISH only is counted by `publish_sent`; this adds control packets
    /// where known).
    pub messages_sent: AtomicU64,
    /// Bytes read from clients.
    pub bytes_received: AtomicU64,
    /// Bytes written to clients.
    pub bytes_sent: AtomicU64,
    /// Retained messages stored.
    pub retained: AtomicU64,
    /// Subscriptions held.
    pub subscriptions: AtomicU64,
    /// Authentications refused (CONNECT, and re-authentication), throttled ones included.
    pub auth_failed: AtomicU64,
    /// Of those, refused without checking because the source address was inside its
    /// penalty window after earlier failures (v5 0x9F).
    pub auth_throttled: AtomicU64,
    /// PUBLISH packets (and wills) refused by authorisation.
    pub denied_publish: AtomicU64,
    /// Subscriptions refused by authorisation.
    pub denied_subscribe: AtomicU64,
    /// Deliveries withheld because the subscriber may not read the topic (retained messages
    /// and wills included).
    pub denied_delivery: AtomicU64,
    /// Times a publisher stopped being read from because a subscriber its messages reach was
    /// congested (back-pressure, `docs/design/backpressure.md`).
    pub backpressure_pauses: AtomicU64,
    /// Times a congested subscriber was found stalled (no progress for the stall window) and
    /// stopped holding its publishers back.
    pub backpressure_stalls: AtomicU64,
    /// Messages delivered to a new subscription because they arrived after its SUBSCRIBE but
    /// were routed before it was in place (`docs/design/arrival-order.md`).
    pub arrival_catch_up: AtomicU64,
    /// QoS 1/2 PUBLISH packets refused because the store could not write (v5: 0x97; v3: the
    /// connection closed).
    pub store_refused: AtomicU64,
}

impl Stats {
    /// The counters that count since the broker's data began, by name: kept across restarts
    /// when a store is attached ([`crate::store::StoreOp::PutTotals`]). Gauges (clients
    /// connected, retained messages, subscriptions) are not among them: they are counted
    /// again from what is restored.
    fn lifetime(&self) -> [(&'static str, &AtomicU64); 20] {
        [
            ("connections_total", &self.connections_total),
            ("publish_received", &self.publish_received),
            ("publish_sent", &self.publish_sent),
            ("publish_dropped", &self.publish_dropped),
            ("dropped_expired", &self.dropped_expired),
            ("dropped_too_large", &self.dropped_too_large),
            ("publish_no_subscribers", &self.publish_no_subscribers),
            ("messages_received", &self.messages_received),
            ("messages_sent", &self.messages_sent),
            ("bytes_received", &self.bytes_received),
            ("bytes_sent", &self.bytes_sent),
            ("auth_failed", &self.auth_failed),
            ("auth_throttled", &self.auth_throttled),
            ("denied_publish", &self.denied_publish),
            ("denied_subscribe", &self.denied_subscribe),
            ("denied_delivery", &self.denied_delivery),
            ("backpressure_pauses", &self.backpressure_pauses),
            ("backpressure_stalls", &self.backpressure_stalls),
            ("arrival_catch_up", &self.arrival_catch_up),
            ("store_refused", &self.store_refused),
        ]
    }

    /// The lifetime counters' current values, by name.
    pub fn totals(&self) -> Vec<(String, u64)> {
        self.lifetime()
            .iter()
            .map(|(name, counter)| ((*name).to_string(), Self::get(counter)))
            .collect()
    }

    /// Adds stored totals (from before a restart) to the lifetime counters; unknown names
    /// are ignored.
    pub fn restore_totals(&self, totals: &[(String, u64)]) {
        for (name, value) in totals {
            if let Some((_, counter)) = self.lifetime().iter().find(|(n, _)| n == name) {
                Self::add(counter, *value);
            }
        }
    }

    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Relaxed);
        }
    }

    /// Marks a client connected and updates the maximum.
    pub fn client_connected(&self) {
        let now = self.clients_connected.fetch_add(1, Relaxed) + 1;
        self.clients_maximum.fetch_max(now, Relaxed);
    }

    /// Marks a client disconnected.
    pub fn client_disconnected(&self) {
        self.clients_connected.fetch_sub(1, Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }
}
