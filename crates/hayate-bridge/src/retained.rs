//! Retained messages changed while the link is down (Mosquitto #1040).
//!
//! While the link is down, the bridge's session is offline: QoS 1/2 messages queue in it (and
//! go out with their retain flag when it resumes), but QoS 0 ones do not (unless
//! `queue_qos0_offline`), and a full queue drops messages. A retained message set or deleted
//! (empty payload) that way would never reach the remote broker, whose retained state would
//! stay stale for good.
//!
//! So, from the moment a link drops until the bridge's session is resumed, a watcher (a second
//! in-process client, `<local client id>.retained`, subscribed to the outgoing filters at QoS
//! 0 with Retain As Published and Retain Handling 2) records the names of the topics whose
//! retained message changed: at most [`MAX_TOPICS`] names and [`MAX_TOPIC_BYTES`] bytes of
//! them; past that it records that it overflowed. When the link is back and the session has
//! sent what it had queued, the bridge publishes the **current** retained state of each
//! recorded topic on the remote broker: the retained message, or an empty retained message
//! where there is none any more. After an overflow it also sends every retained message that
//! matches an outgoing filter (deletions of topics past the bound are then not propagated).
//! The replay is at QoS 0 (its packets carry no packet id, which belong to the local session)
//! and is confirmed by a PINGREQ/PINGRESP round trip after it; a link that drops before the
//! PINGRESP carries the topics over to the next outage.

use crate::local::{Local, LocalSettings};
use crate::mapping::TopicMap;
use hayate_codec::{ByteStr, Packet, Properties, Publish, QoS, SubscriptionOptions};
use hayate_core::Broker;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Most topic names remembered per bridge.
pub(crate) const MAX_TOPICS: usize = 10_000;
/// Most bytes of topic names remembered per bridge.
pub(crate) const MAX_TOPIC_BYTES: usize = 4 * 1024 * 1024;

/// The local topics whose retained message changed while the link was down.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RetainedChanges {
    topics: BTreeSet<String>,
    bytes: usize,
    /// A change was not recorded (a bound was reached, or the watcher stopped).
    overflow: bool,
}

impl RetainedChanges {
    /// Records that `topic`'s retained message changed.
    pub(crate) fn record(&mut self, topic: &str) {
        if self.topics.contains(topic) {
            return;
        }
        if self.topics.len() >= MAX_TOPICS || self.bytes + topic.len() > MAX_TOPIC_BYTES {
            self.overflow = true;
            return;
        }
        self.bytes += topic.len();
        self.topics.insert(topic.to_string());
    }

    /// Adds what `other` recorded.
    pub(crate) fn merge(&mut self, other: RetainedChanges) {
        self.overflow |= other.overflow;
        for topic in &other.topics {
            self.record(topic);
        }
    }

    /// Replays every retained message of the outgoing filters (a new session's first link).
    pub(crate) fn replay_everything(&mut self) {
        self.overflow = true;
    }

    /// Nothing to replay.
    pub(crate) fn is_empty(&self) -> bool {
        self.topics.is_empty() && !self.overflow
    }

    /// The current retained state of the recorded topics, as PUBLISHes to the remote broker
    /// (QoS 0, retained; an empty payload where the local broker has no retained message).
    pub(crate) fn replay(&self, broker: &Broker, topics: &TopicMap, now: Instant) -> Vec<Publish> {
        let mut names = self.topics.clone();
        if self.overflow {
            for rule in topics.outgoing() {
                for message in broker.router.retained_matching(rule.local_filter(), now) {
                    names.insert(message.topic.to_string());
                }
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for local in &names {
            let Some((remote, _)) = topics.to_remote(local) else {
                continue;
            };
            let current = broker
                .router
                .retained_matching(local, now)
                .into_iter()
                .find(|message| message.topic.as_str() == local);
            let (payload, properties) = match current {
                Some(message) => {
                    let mut properties =
                        crate::link::forwarded_properties(message.properties.clone());
                    if let Some(expires_at) = message.expires_at {
                        let left = expires_at.saturating_duration_since(now).as_secs();
                        properties.message_expiry_interval =
                            Some(u32::try_from(left.max(1)).unwrap_or(u32::MAX));
                    }
                    (message.payload.clone(), properties)
                }
                None => (bytes::Bytes::new(), Properties::default()),
            };
            out.push(Publish {
                dup: false,
                qos: QoS::AtMostOnce,
                retain: true,
                topic: remote.into(),
                packet_id: None,
                properties,
                payload,
            });
        }
        out
    }
}

/// A running watcher; [`Watcher::finish`] stops it and returns what it recorded.
#[derive(Debug)]
pub(crate) struct Watcher {
    stop: oneshot::Sender<()>,
    task: JoinHandle<RetainedChanges>,
}

impl Watcher {
    /// Starts watching the outgoing filters of `topics`, adding to `carried` (topics of a
    /// replay that did not complete). When the watcher cannot connect (logged), `carried` comes
    /// back marked as overflowed: the replay then covers every retained message of the
    /// outgoing filters.
    pub(crate) fn start(
        broker: &Arc<Broker>,
        settings: &LocalSettings,
        topics: &TopicMap,
        mut carried: RetainedChanges,
        now: Instant,
    ) -> Result<Watcher, RetainedChanges> {
        let properties = Properties {
            session_expiry_interval: Some(0),
            ..Properties::default()
        };
        let client_id = format!("{}.retained", settings.client_id);
        let filters: Vec<(ByteStr, SubscriptionOptions)> = topics
            .outgoing()
            .map(|rule| {
                let options = SubscriptionOptions {
                    qos: QoS::AtMostOnce,
                    no_local: false,
                    retain_as_published: true,
                    // Not the retained messages already there: changes only.
                    retain_handling: 2,
                };
                (rule.local_filter().into(), options)
            })
            .collect();
        let local = Local::open(broker, settings, &client_id, true, properties, now)
            .and_then(|mut local| local.subscribe(filters, now).map(|()| local));
        match local {
            Ok(local) => {
                let (stop, stopped) = oneshot::channel();
                let task = tokio::spawn(watch(local, carried, stopped));
                Ok(Watcher { stop, task })
            }
            Err(error) => {
                tracing::warn!(bridge = %settings.bridge_name, %error, "bridge_retained_watch_failed");
                carried.overflow = true;
                Err(carried)
            }
        }
    }

    /// Stops the watcher (after taking what it has received) and returns what it recorded.
    pub(crate) async fn finish(self) -> RetainedChanges {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_else(|_| RetainedChanges {
            overflow: true,
            ..RetainedChanges::default()
        })
    }
}

async fn watch(
    mut local: Local,
    mut changes: RetainedChanges,
    mut stopped: oneshot::Receiver<()>,
) -> RetainedChanges {
    let doorbell = local.doorbell();
    loop {
        if drain(&mut local, &mut changes).is_err() {
            // The watcher's session was closed (taken over): changes may be missed.
            changes.overflow = true;
            break;
        }
        tokio::select! {
            _ = doorbell.notified() => {}
            _ = &mut stopped => {
                if drain(&mut local, &mut changes).is_err() {
                    changes.overflow = true;
                }
                break;
            }
        }
    }
    local.close(true, Instant::now());
    changes
}

/// Takes what the watcher's session has and records the retained topics among it.
fn drain(local: &mut Local, changes: &mut RetainedChanges) -> Result<(), crate::BridgeError> {
    loop {
        local.transmit(Instant::now())?;
        for packet in local.take_output()? {
            if let Packet::Publish(publish) = packet {
                if publish.retain {
                    changes.record(publish.topic.as_str());
                }
            }
        }
        if !local.has_more_to_send() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_bounded() {
        let mut changes = RetainedChanges::default();
        assert!(changes.is_empty());
        for i in 0..MAX_TOPICS + 5 {
            changes.record(&format!("t/{i}"));
        }
        changes.record("t/0");
        assert_eq!(changes.topics.len(), MAX_TOPICS);
        assert!(changes.overflow);
        let mut big = RetainedChanges::default();
        big.record(&"x".repeat(MAX_TOPIC_BYTES));
        assert!(!big.overflow);
        big.record("y");
        assert!(big.overflow);
        let mut merged = RetainedChanges::default();
        merged.record("a");
        merged.merge(changes);
        assert!(merged.overflow && merged.topics.contains("a"));
    }
}
