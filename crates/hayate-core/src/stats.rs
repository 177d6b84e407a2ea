//! Broker-wide counters, published under `$SYS` with Mosquitto's names.

use crate::latency::LatencyHistogram;
use hayate_codec::QoS;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// PUBLISH packets and their payload bytes, by QoS: one relaxed counter of packets and one of
/// bytes per QoS, so counting a PUBLISH touches the two counters of its QoS and nothing else.
/// The total is their sum, read when reported.
#[derive(Debug, Default)]
pub struct PublishCounts {
    /// `[packets, payload bytes]` for QoS 0, 1 and 2.
    by_qos: [[AtomicU64; 2]; 3],
    /// Packets counted before they were counted by QoS (restored from a data directory
    /// written by an earlier version): part of [`PublishCounts::total`], of no QoS.
    earlier: AtomicU64,
}

/// The three QoS levels, in the order of their index.
pub const QOS_LEVELS: [QoS; 3] = [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce];

impl PublishCounts {
    /// Counts one PUBLISH of `qos` carrying `payload_bytes`.
    #[inline]
    pub fn count(&self, qos: QoS, payload_bytes: usize) {
        self.add(qos, 1, payload_bytes as u64);
    }

    /// Counts `packets` PUBLISH packets of `qos` carrying `payload_bytes` in all.
    #[inline]
    pub fn add(&self, qos: QoS, packets: u64, payload_bytes: u64) {
        let [count, bytes] = &self.by_qos[qos as usize];
        Stats::add(count, packets);
        Stats::add(bytes, payload_bytes);
    }

    /// PUBLISH packets of `qos`.
    pub fn packets(&self, qos: QoS) -> u64 {
        Stats::get(&self.by_qos[qos as usize][0])
    }

    /// Payload bytes of the PUBLISH packets of `qos`.
    pub fn payload_bytes(&self, qos: QoS) -> u64 {
        Stats::get(&self.by_qos[qos as usize][1])
    }

    /// Every PUBLISH packet: the sum over QoS, plus those counted before counts were kept by
    /// QoS.
    pub fn total(&self) -> u64 {
        QOS_LEVELS.iter().map(|qos| self.packets(*qos)).sum::<u64>() + Stats::get(&self.earlier)
    }

    /// The lifetime counters, by name (`prefix`, then `prefix_qosN` and `prefix_qosN_bytes`);
    /// `prefix` alone holds the total an earlier version stored.
    fn lifetime(&self, prefix: &'static str) -> Vec<(String, &AtomicU64)> {
        let mut all = vec![(prefix.to_string(), &self.earlier)];
        for (qos, [count, bytes]) in self.by_qos.iter().enumerate() {
            all.push((format!("{prefix}_qos{qos}"), count));
            all.push((format!("{prefix}_qos{qos}_bytes"), bytes));
        }
        all
    }
}

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
    /// PUBLISH packets received from clients (and their payload bytes), by QoS.
    pub publish_received: PublishCounts,
    /// PUBLISH packets sent to clients (and their payload bytes), by the QoS they were sent
    /// with.
    pub publish_sent: PublishCounts,
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
    /// In a cluster: round trips of the node links' keep-alive probe (PINGREQ queued on a
    /// link to its PINGRESP handled), one observation per link every keep-alive interval,
    /// never per message. Recorded by `hayate-cluster`.
    pub cluster_link_round_trip: LatencyHistogram,
    /// In a cluster: relayed copies (`$cluster/relay`) that reached this node for a session
    /// it no longer has, relaying or not, and that could not be passed on to where the
    /// session went (`docs/CLUSTER.md`, "A late answer goes on to where the session went").
    /// Counted by `hayate-cluster`.
    pub cluster_relayed_dropped: AtomicU64,
    /// In a cluster: QoS 2 PUBLISH packets a client sent again (DUP) that were held until the
    /// node that had its older session answered (`docs/CLUSTER.md`, "A QoS 2 message sent
    /// again past the wait").
    pub qos2_resends_held: AtomicU64,
}

impl Stats {
    /// The counters that count since the broker's data began, by name: kept across restarts
    /// when a store is attached ([`crate::store::StoreOp::PutTotals`]). Gauges (clients
    /// connected, retained messages, subscriptions) are not among them: they are counted
    /// again from what is restored.
    fn lifetime(&self) -> Vec<(String, &AtomicU64)> {
        let mut all: Vec<(String, &AtomicU64)> = [
            ("connections_total", &self.connections_total),
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
        .into_iter()
        .map(|(name, counter)| (name.to_string(), counter))
        .collect();
        all.extend(self.publish_received.lifetime("publish_received"));
        all.extend(self.publish_sent.lifetime("publish_sent"));
        all
    }

    /// The lifetime counters' current values, by name.
    pub fn totals(&self) -> Vec<(String, u64)> {
        self.lifetime()
            .iter()
            .map(|(name, counter)| (name.clone(), Self::get(counter)))
            .collect()
    }

    /// Adds stored totals (from before a restart) to the lifetime counters; unknown names
    /// are ignored.
    pub fn restore_totals(&self, totals: &[(String, u64)]) {
        let lifetime = self.lifetime();
        for (name, value) in totals {
            if let Some((_, counter)) = lifetime.iter().find(|(n, _)| n == name) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_counts_by_qos_sum_to_the_total() {
        let stats = Stats::default();
        stats.publish_received.count(QoS::AtMostOnce, 10);
        stats.publish_received.count(QoS::AtLeastOnce, 3);
        stats.publish_received.add(QoS::ExactlyOnce, 2, 7);
        stats.publish_received.add(QoS::AtLeastOnce, 0, 0);
        let received = &stats.publish_received;
        assert_eq!(received.packets(QoS::AtMostOnce), 1);
        assert_eq!(received.packets(QoS::AtLeastOnce), 1);
        assert_eq!(received.packets(QoS::ExactlyOnce), 2);
        assert_eq!(received.payload_bytes(QoS::AtMostOnce), 10);
        assert_eq!(received.payload_bytes(QoS::ExactlyOnce), 7);
        assert_eq!(received.total(), 4);
        assert_eq!(stats.publish_sent.total(), 0);
    }

    /// Stored totals come back by QoS; a total stored before counts were kept by QoS stays
    /// in the total without being given a QoS, and is stored again under its name.
    #[test]
    fn totals_round_trip_and_an_earlier_total_is_kept() {
        let stats = Stats::default();
        stats.publish_sent.count(QoS::AtLeastOnce, 5);
        let totals = stats.totals();
        assert!(totals.contains(&("publish_sent_qos1".into(), 1)));
        assert!(totals.contains(&("publish_sent_qos1_bytes".into(), 5)));

        let restored = Stats::default();
        restored.restore_totals(&totals);
        restored.restore_totals(&[("publish_received".into(), 40)]);
        assert_eq!(restored.publish_sent.packets(QoS::AtLeastOnce), 1);
        assert_eq!(restored.publish_sent.payload_bytes(QoS::AtLeastOnce), 5);
        assert_eq!(restored.publish_received.total(), 40);
        assert_eq!(restored.publish_received.packets(QoS::AtMostOnce), 0);
        restored.publish_received.count(QoS::AtMostOnce, 1);
        assert_eq!(restored.publish_received.total(), 41);
        assert!(restored.totals().contains(&("publish_received".into(), 40)));
    }
}
