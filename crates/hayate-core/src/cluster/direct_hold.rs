//! Direct copies (this node's own and those other nodes forward, not relayed by the old node)
//! held back after a take-over (`docs/CLUSTER.md`, "Direct copies after a take-over").
//! A node that takes a client's session over from another node routes its own publishers'
//! messages for it to the session directly from then on; the ones it routed to the old node
//! before come back relayed, later, and the old node queues its end of relaying this node's
//! copies behind them. Until that end arrives (or a deadline passes), the session sends what
//! this node's publishers send it only after everything relayed (`hayate-session`
//! `session/hold.rs`).
//!
//! | state of a session here | entered | left |
//! |---|---|---|
//! | not holding | — | taken over with a relay from the old node: holding |
//! | holding (direct copies queued behind the relayed ones) | `Broker::hold_direct_copies` | the old node's end for this node (`Broker::release_direct_copies`), the deadline (`Broker::expire_direct_holds`), or the queue rearranged (spilled, handed on): not holding |

use crate::cluster::SessionKind;
use crate::router::WakeList;
use crate::Broker;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Sessions holding back their direct copies, by client identifier: the claim's `at` and the
/// deadline.
#[derive(Debug, Default)]
pub(crate) struct DirectHolds(Mutex<HashMap<Arc<str>, (u64, Instant)>>);

impl Broker {
    /// `client_id`'s session here, taken over from another node on the claim `at` (with the
    /// switch lock held exclusively, before the take-over's mark: what this node routes after
    /// it reaches the session directly), holds back what this node's publishers send it until
    /// the old node's end of relaying this node's copies ([`Broker::release_direct_copies`]), or
    /// until `until`. False when there is no such session (or no cluster).
    pub fn hold_direct_copies(&self, client_id: &str, at: u64, until: Instant) -> bool {
        let (Some(cluster), Some(cell)) = (self.router.cluster(), self.registry.get(client_id))
        else {
            return false;
        };
        if cell.kind != SessionKind::Client {
            return false;
        }
        let holds = {
            let mut state = cell.state.lock();
            state.session.hold_direct();
            state.session.holds_direct()
        };
        if holds {
            cluster
                .direct_holds
                .0
                .lock()
                .insert(cell.client_id.clone(), (at, until));
            tracing::debug!(client_id, at, "cluster_direct_copies_held");
        }
        holds
    }

    /// The old node's end of relaying this node's copies for `client_id` (claim `at`)
    /// arrived: the copies held back go out, behind the relayed ones. An end for another
    /// claim releases nothing.
    pub fn release_direct_copies(&self, client_id: &str, at: u64, wake: &mut WakeList) {
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        let released = {
            let mut holds = cluster.direct_holds.0.lock();
            match holds.get(client_id) {
                Some((held_at, _)) if *held_at == at => holds.remove(client_id).is_some(),
                _ => false,
            }
        };
        if released {
            tracing::debug!(client_id, at, "cluster_direct_copies_released");
            self.release_direct(client_id, wake);
        }
    }

    /// Releases the holds past their deadline (the old node's end never came: it died again,
    /// or dropped the relay).
    pub fn expire_direct_holds(&self, now: Instant, wake: &mut WakeList) {
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        let expired: Vec<Arc<str>> = {
            let mut holds = cluster.direct_holds.0.lock();
            let expired: Vec<Arc<str>> = holds
                .iter()
                .filter(|(_, (_, until))| *until <= now)
                .map(|(client_id, _)| client_id.clone())
                .collect();
            for client_id in &expired {
                holds.remove(client_id);
            }
            expired
        };
        for client_id in expired {
            tracing::info!(%client_id, "cluster_direct_copies_hold_expired");
            self.release_direct(&client_id, wake);
        }
    }

    fn release_direct(&self, client_id: &str, wake: &mut WakeList) {
        let Some(cell) = self.registry.get(client_id) else {
            return;
        };
        let state = &mut *cell.state.lock();
        if state.session.release_direct() {
            if let Some(doorbell) = &state.doorbell {
                wake.push(doorbell.clone());
            }
        }
    }
}
