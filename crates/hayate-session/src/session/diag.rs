//! What holds a session's output back, for a diagnostic log line: a peer session that stops
//! sending (`docs/CLUSTER.md`, "A peer session that stopped sending") shows which gate is shut.

use super::*;

/// A session's output and what may hold it back, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputState {
    /// A connection is attached.
    pub attached: bool,
    /// Deliveries waiting to be sent (in memory).
    pub pending: usize,
    /// Of them, direct copies (own and forwarded) held at the back (`hold.rs`).
    pub direct_held: usize,
    /// Outbound QoS 1/2 in flight.
    pub inflight: usize,
    /// The in-flight window.
    pub window: u16,
    /// Entries on disk only (spilled).
    pub spilled: u64,
    /// A page of the disk part is being read.
    pub page_reading: bool,
    /// Output waits for this store ticket (0: no barrier).
    pub barrier: u64,
    /// The oldest QoS 2 entry not yet known durable: (seq, ticket; 0 unstamped).
    pub qos2_gate: Option<(u64, u64)>,
    /// PUBRELs waiting for the store.
    pub pubrels_waiting: usize,
    /// The first waiting delivery may not go out now (window, gate, barrier, id in flight).
    pub head_blocked: bool,
}

impl Session {
    /// What holds this session's output back now (a diagnostic).
    pub fn output_state(&self) -> OutputState {
        let journal = self.journal();
        let window = self.window();
        OutputState {
            attached: self.connection.is_some(),
            pending: self.pending.len(),
            direct_held: self.direct_held(),
            inflight: self.inflight.len(),
            window,
            spilled: self.spilled(),
            page_reading: journal.and_then(|j| j.spill_reading()).unwrap_or(false),
            barrier: journal.map_or(0, |j| j.barrier_ticket()),
            qos2_gate: journal.and_then(|j| j.first_gate()),
            pubrels_waiting: journal.map_or(0, |j| j.pubrels_waiting()),
            head_blocked: self.pending.front().is_some_and(|front| {
                front.qos != QoS::AtMostOnce
                    && (self.inflight.len() >= usize::from(window) || self.journal_blocks(front))
            }),
        }
    }
}
