//! Fences: a client that resumed its session on this node while the node that had it could
//! not be asked (dead, not stopped for a restart) starts a new session here; when it
//! subscribes, this node marks, for each such node, from when the other nodes' copies reach
//! the new session directly (`docs/CLUSTER.md`, "Relay after a handover", "After a kill -9").
//!
//! The cluster task records the fence when the claim could not reach those nodes
//! ([`crate::cluster::ClusterRoutes::await_fence`]); the client's first SUBSCRIBE runs it,
//! in the same exclusive section of the switch lock as the subscriptions it makes, through
//! the hook `hayate-cluster` installed (which owns the marks' format).

use crate::router::WakeList;
use crate::Broker;
use hayate_session::Arrival;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A fence waiting for its client's first SUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The nodes that could not be asked for the client's session.
    pub away: Vec<Arc<str>>,
    /// When the client's CONNECT arrived (its claim's `at`).
    pub at: Arrival,
    /// After this the fence is dropped unused.
    pub until: Instant,
}

/// Runs a fence (`hayate-cluster`): `(broker, client id, fence, now, wake)`. Called with the
/// switch lock held exclusively, before the SUBSCRIBE's subscriptions are made.
pub type FenceFn = dyn Fn(&Broker, &Arc<str>, &Fence, Instant, &mut WakeList) + Send + Sync;

/// See [`FenceFn`].
pub struct FenceHook(pub Box<FenceFn>);

impl std::fmt::Debug for FenceHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FenceHook")
    }
}

/// The fences waiting, by client identifier.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    waiting: Mutex<HashMap<Arc<str>, Fence>>,
    /// Whether any waits: while none does, a SUBSCRIBE pays one relaxed load.
    any: AtomicBool,
    hook: std::sync::OnceLock<FenceHook>,
}

impl Fences {
    /// Adds `fence` for `client_id`; one of the same claim (`at`) waiting already gets its
    /// away nodes added (a node found away at the claim, then one that did not answer it).
    pub(crate) fn insert(&self, client_id: Arc<str>, fence: Fence) {
        let mut waiting = self.waiting.lock();
        match waiting.get_mut(&client_id) {
            Some(same) if same.at == fence.at => {
                for node in fence.away {
                    if !same.away.contains(&node) {
                        same.away.push(node);
                    }
                }
                same.until = same.until.max(fence.until);
            }
            _ => {
                waiting.insert(client_id, fence);
            }
        }
        self.any.store(true, Ordering::Relaxed);
    }

    /// `client_id`'s fence, if one waits and is not out of date (taken: it runs once).
    pub(crate) fn take(&self, client_id: &str, now: Instant) -> Option<Fence> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let mut waiting = self.waiting.lock();
        let fence = waiting.remove(client_id).filter(|fence| now < fence.until);
        if waiting.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
        fence
    }

    /// `node` answered `client_id`'s claim after all (back within the wait for a lost node):
    /// it is no longer away for that fence, and a fence with no node left away is dropped.
    pub(crate) fn answered(&self, client_id: &str, node: &str) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut waiting = self.waiting.lock();
        if let Some(fence) = waiting.get_mut(client_id) {
            fence.away.retain(|away| &**away != node);
            if fence.away.is_empty() {
                waiting.remove(client_id);
            }
        }
        if waiting.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
    }

    /// Drops the fences out of date.
    pub(crate) fn expire(&self, now: Instant) {
        let mut waiting = self.waiting.lock();
        waiting.retain(|_, fence| now < fence.until);
        if waiting.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_hook(&self, hook: FenceHook) -> bool {
        self.hook.set(hook).is_ok()
    }

    pub(crate) fn run(
        &self,
        broker: &Broker,
        client_id: &Arc<str>,
        fence: &Fence,
        now: Instant,
        wake: &mut WakeList,
    ) {
        if let Some(hook) = &self.hook.get() {
            (hook.0)(broker, client_id, fence, now, wake);
        }
    }
}

#[cfg(test)]
// A fixed origin for injected time; every later instant is derived from it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fence(until: Instant) -> Fence {
        Fence {
            away: vec![Arc::from("n1")],
            at: Arrival::from_nanos(7),
            until,
        }
    }

    #[test]
    fn a_fence_runs_once_and_not_after_its_time() {
        let fences = Fences::default();
        let now = Instant::now();
        assert_eq!(fences.take("c", now), None);
        fences.insert(Arc::from("c"), fence(now + Duration::from_secs(1)));
        fences.insert(Arc::from("d"), fence(now + Duration::from_secs(1)));
        assert_eq!(
            fences.take("c", now),
            Some(fence(now + Duration::from_secs(1)))
        );
        assert_eq!(fences.take("c", now), None, "taken once");
        assert_eq!(
            fences.take("d", now + Duration::from_secs(2)),
            None,
            "out of date"
        );
        assert!(!fences.any.load(Ordering::Relaxed));
    }

    #[test]
    fn a_node_that_answers_after_all_is_no_longer_away() {
        let fences = Fences::default();
        let now = Instant::now();
        let until = now + Duration::from_secs(1);
        let mut two = fence(until);
        two.away.push(Arc::from("n3"));
        fences.insert(Arc::from("c"), two);
        fences.insert(Arc::from("d"), fence(until));
        fences.answered("c", "n1");
        fences.answered("d", "n1");
        fences.answered("e", "n1");
        let left = fences.take("c", now).expect("n3 is still away");
        assert_eq!(left.away, vec![Arc::<str>::from("n3")]);
        assert_eq!(fences.take("d", now), None, "no node left away: dropped");
        assert!(!fences.any.load(Ordering::Relaxed));
    }

    #[test]
    fn a_node_that_did_not_answer_joins_the_fence_of_the_same_claim() {
        let fences = Fences::default();
        let now = Instant::now();
        fences.insert(Arc::from("c"), fence(now + Duration::from_secs(1)));
        let mut silent = fence(now + Duration::from_secs(2));
        silent.away = vec![Arc::from("n3"), Arc::from("n1")];
        fences.insert(Arc::from("c"), silent);
        let merged = fences.take("c", now).expect("one fence");
        assert_eq!(
            merged.away,
            vec![Arc::<str>::from("n1"), Arc::from("n3")],
            "each node once"
        );
        assert_eq!(merged.until, now + Duration::from_secs(2));

        fences.insert(Arc::from("c"), fence(now + Duration::from_secs(1)));
        let mut later = fence(now + Duration::from_secs(1));
        later.at = Arrival::from_nanos(8);
        later.away = vec![Arc::from("n2")];
        fences.insert(Arc::from("c"), later.clone());
        assert_eq!(
            fences.take("c", now),
            Some(later),
            "a later claim's fence replaces the earlier one"
        );
    }

    #[test]
    fn expiry_drops_only_fences_out_of_date() {
        let fences = Fences::default();
        let now = Instant::now();
        fences.insert(Arc::from("old"), fence(now + Duration::from_secs(1)));
        fences.insert(Arc::from("new"), fence(now + Duration::from_secs(3)));
        fences.expire(now + Duration::from_secs(2));
        assert_eq!(fences.take("old", now), None);
        assert!(fences.take("new", now).is_some());
    }
}
