//! Clients whose inbound QoS 2 packet ids this node does not know yet: the client resumed its
//! session here while the node that had it could not be asked (away past the wait, or it did
//! not answer in time: `docs/CLUSTER.md`, "After a kill -9, past the wait"). Its old session
//! may have routed a QoS 2 message that the client now sends again (DUP) because the PUBREC
//! was lost with that node; only the old session's ids, which come with that node's answer,
//! tell whether it did. Until the answer (or a deadline), such a PUBLISH is held back
//! (`channel/resend_hold.rs`) instead of being routed a second time.
//!
//! States of one client's record: waiting for nodes (`away` not empty, before `until`) →
//! dropped (each away node answered, with the session or with none; or `until` passed).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug)]
struct Waiting {
    away: Vec<Arc<str>>,
    until: Instant,
}

/// The records, by client identifier.
#[derive(Debug, Default)]
pub(crate) struct UnknownQos2 {
    waiting: Mutex<HashMap<Arc<str>, Waiting>>,
    /// Whether any record exists: while none does, a QoS 2 resend pays one relaxed load.
    any: AtomicBool,
}

impl UnknownQos2 {
    /// `client_id`'s ids may be on `away` until `until`; added to a record already there.
    pub(crate) fn insert(&self, client_id: Arc<str>, away: Vec<Arc<str>>, until: Instant) {
        if away.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock();
        let record = waiting.entry(client_id).or_insert_with(|| Waiting {
            away: Vec::new(),
            until,
        });
        for node in away {
            if !record.away.contains(&node) {
                record.away.push(node);
            }
        }
        record.until = record.until.max(until);
        self.any.store(true, Ordering::Relaxed);
    }

    /// `node` answered for `client_id` (what it had is merged here now, or it had nothing).
    /// True when that ended the client's record (every away node answered).
    pub(crate) fn answered(&self, client_id: &str, node: &str) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let mut waiting = self.waiting.lock();
        let mut ended = false;
        if let Some(record) = waiting.get_mut(client_id) {
            record.away.retain(|away| &**away != node);
            if record.away.is_empty() {
                waiting.remove(client_id);
                ended = true;
            }
        }
        self.any.store(!waiting.is_empty(), Ordering::Relaxed);
        ended
    }

    /// Until when `client_id`'s inbound QoS 2 ids are not known here, if they are not.
    pub(crate) fn until(&self, client_id: &str, now: Instant) -> Option<Instant> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.waiting
            .lock()
            .get(client_id)
            .map(|record| record.until)
            .filter(|until| now < *until)
    }

    /// Drops the records past their time.
    pub(crate) fn expire(&self, now: Instant) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut waiting = self.waiting.lock();
        waiting.retain(|_, record| now < record.until);
        self.any.store(!waiting.is_empty(), Ordering::Relaxed);
    }
}

#[cfg(test)]
// A fixed origin for injected time; every later instant is derived from it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn nodes(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn ids_are_unknown_until_every_away_node_answered() {
        let unknown = UnknownQos2::default();
        let now = Instant::now();
        let until = now + Duration::from_secs(30);
        assert_eq!(unknown.until("c", now), None);
        unknown.insert(Arc::from("c"), nodes(&["n1"]), until);
        unknown.insert(Arc::from("c"), nodes(&["n3", "n1"]), until);
        unknown.answered("c", "n1");
        assert_eq!(unknown.until("c", now), Some(until), "n3 has not answered");
        unknown.answered("other", "n3");
        unknown.answered("c", "n3");
        assert_eq!(unknown.until("c", now), None);
        assert!(!unknown.any.load(Ordering::Relaxed));
    }

    #[test]
    fn a_record_ends_at_its_time() {
        let unknown = UnknownQos2::default();
        let now = Instant::now();
        unknown.insert(Arc::from("c"), nodes(&["n1"]), now + Duration::from_secs(1));
        unknown.insert(Arc::from("d"), nodes(&["n1"]), now + Duration::from_secs(3));
        assert_eq!(unknown.until("c", now + Duration::from_secs(1)), None);
        unknown.expire(now + Duration::from_secs(2));
        assert_eq!(unknown.until("c", now), None, "dropped");
        assert!(unknown.until("d", now).is_some());
        unknown.insert(Arc::from("e"), Vec::new(), now + Duration::from_secs(3));
        assert_eq!(unknown.until("e", now), None, "no node away: no record");
    }
}
