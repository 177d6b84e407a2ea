//! The ops appended while the store cannot write, kept in order to be written once it can.
//!
//! While the store is failing the core refuses QoS 1/2 publishes, so what still arrives is
//! bounded by what clients do to their sessions (connects, subscriptions, acknowledgements), with
//! one exception that is not: retained messages published at QoS 0, which may keep coming at any
//! rate for as long as the disk is full. Those are folded: a retained op replaces the earlier
//! one for its topic (the `retained` keyspace is touched by nothing else, so only the last op
//! per topic matters), and the backlog holds at most one per topic however long the outage.
//! The lifetime counters (`PutTotals`, every `$SYS` interval) fold the same way.

use hayate_core::store::{StoreOp, Ticket};
use std::collections::HashMap;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Backlog {
    /// In append order; `None` where a later retained op for the same topic replaced one.
    ops: Vec<Option<StoreOp>>,
    /// Fold key → index in `ops` of its latest op.
    folded: HashMap<String, usize>,
    /// Ops held (`ops` without the replaced ones).
    live: usize,
    /// The ticket of the last op appended.
    last: Ticket,
}

/// The key under which later ops replace `op`: its topic for a retained op (prefixed so that
/// no topic can collide with the counters' key), one key for the counters.
fn fold_key(op: &StoreOp) -> Option<String> {
    match op {
        StoreOp::PutRetained { topic, .. } | StoreOp::DeleteRetained { topic } => {
            Some(format!("t{topic}"))
        }
        StoreOp::PutTotals { .. } => Some("c".to_string()),
        _ => None,
    }
}

impl Backlog {
    /// A backlog of `ops` (the drain whose write failed), the last with ticket `last`.
    pub(crate) fn new(ops: Vec<StoreOp>, last: Ticket) -> Backlog {
        let mut backlog = Backlog {
            ops: Vec::with_capacity(ops.len()),
            folded: HashMap::new(),
            live: 0,
            last,
        };
        backlog.extend(ops, last);
        backlog
    }

    /// Appends `ops`, the last with ticket `last`, folding retained ops by topic.
    pub(crate) fn extend(&mut self, ops: Vec<StoreOp>, last: Ticket) {
        for op in ops {
            if let Some(key) = fold_key(&op) {
                let index = self.ops.len();
                match self.folded.insert(key, index) {
                    Some(earlier) => {
                        self.ops[earlier] = None;
                    }
                    None => self.live += 1,
                }
            } else {
                self.live += 1;
            }
            self.ops.push(Some(op));
            if self.ops.len() > 2 * self.live + 1024 {
                self.compact();
            }
        }
        self.last = last;
    }

    /// Drops the slots of replaced ops (amortised: when they outnumber the live ones).
    fn compact(&mut self) {
        self.ops.retain(Option::is_some);
        self.folded.clear();
        for (index, op) in self.ops.iter().enumerate() {
            if let Some(key) = op.as_ref().and_then(fold_key) {
                self.folded.insert(key, index);
            }
        }
    }

    /// Ops held.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The ticket of the last op appended.
    pub(crate) fn last(&self) -> Ticket {
        self.last
    }

    /// The ops to write, in order.
    pub(crate) fn ops(&self) -> Vec<StoreOp> {
        self.ops.iter().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn put(topic: &str, payload: &'static [u8]) -> StoreOp {
        StoreOp::PutRetained {
            topic: topic.into(),
            expires_at_ms: None,
            publish: Bytes::from_static(payload),
        }
    }

    fn topics_and_payloads(ops: &[StoreOp]) -> Vec<(String, Option<Bytes>)> {
        ops.iter()
            .map(|op| match op {
                StoreOp::PutRetained { topic, publish, .. } => {
                    (topic.clone(), Some(publish.clone()))
                }
                StoreOp::DeleteRetained { topic } => (topic.clone(), None),
                StoreOp::DeleteSession { client_id } => (format!("session {client_id}"), None),
                other => panic!("unexpected op {other:?}"),
            })
            .collect()
    }

    /// A retained stream during an outage holds one op per topic, the last, in the place of
    /// the last; other ops keep their order around it.
    #[test]
    fn retained_ops_fold_by_topic() {
        let mut backlog = Backlog::new(vec![put("a", b"1"), put("b", b"1")], 2);
        for round in 0..10_000u64 {
            let payload: &'static [u8] = if round % 2 == 0 { b"2" } else { b"3" };
            backlog.extend(vec![put("a", payload)], 3 + round);
        }
        backlog.extend(
            vec![
                StoreOp::DeleteSession {
                    client_id: "c".into(),
                },
                StoreOp::DeleteRetained { topic: "b".into() },
            ],
            20_000,
        );
        assert_eq!(backlog.len(), 3);
        assert_eq!(backlog.last(), 20_000);
        assert!(backlog.ops.len() < 2_000, "replaced slots are dropped");
        assert_eq!(
            topics_and_payloads(&backlog.ops()),
            vec![
                ("a".to_string(), Some(Bytes::from_static(b"3"))),
                ("session c".to_string(), None),
                ("b".to_string(), None),
            ]
        );
    }
}
