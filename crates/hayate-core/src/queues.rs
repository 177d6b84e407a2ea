//! Queue limits of their own for some sessions: a bridge's local session gets a bounded queue
//! that drops its **oldest** waiting messages when full (`docs/BRIDGES.md`, "The outgoing
//! queue"), where a client's session drops the new message. The policy itself lives in
//! `hayate-session` (`QueueFull`); this keeps, per client id, the limits a session of that id
//! gets when it is created or restored, and applies them to one that exists already.

use crate::Broker;
use hayate_session::{QueueFull, SessionLimits, SharedLimits};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A bounded drop-oldest queue.
#[derive(Debug, Clone)]
pub struct QueueLimits {
    /// Most messages held (waiting plus in flight).
    pub max_messages: usize,
    /// Most payload + topic bytes held (waiting plus in flight).
    pub max_bytes: usize,
    /// Counts the messages dropped to make room (the oldest waiting ones).
    pub dropped: Arc<AtomicU64>,
}

impl Broker {
    /// Gives the session of `client_id` its own drop-oldest queue limits from now on (`None`:
    /// the broker's limits again). A session that exists already gets them at once (trimmed
    /// to them, its oldest waiting messages dropped); one restored from the store with its
    /// queue on disk reads that queue back into memory.
    pub fn set_queue_limits(&self, client_id: &str, limits: Option<QueueLimits>) {
        let limits = {
            let mut overrides = self.queue_overrides.lock();
            match limits {
                Some(queue) => {
                    let limits = Arc::new(SharedLimits::new(SessionLimits {
                        max_queued_messages: queue.max_messages,
                        max_queued_bytes: queue.max_bytes,
                        queue_full: QueueFull::DropOldest(queue.dropped),
                        ..self.session_limits().snapshot()
                    }));
                    overrides.insert(Arc::from(client_id), limits.clone());
                    limits
                }
                None => {
                    overrides.remove(client_id);
                    self.session_limits()
                }
            }
        };
        let Some(cell) = self.registry.get(client_id) else {
            return;
        };
        let mut state = cell.state.lock();
        if state.ended {
            return;
        }
        state.session.set_limits(limits);
        let page = state.session.take_page_request();
        let attached = self.persistence.get();
        if let Some(attached) = attached {
            attached.flush(&cell.client_id, &mut state);
        }
        drop(state);
        if let (Some((from_seq, max)), Some(attached)) = (page, attached) {
            attached.read_page(&cell, from_seq, max);
        }
    }

    /// What the session of `client_id` holds: messages (waiting and in flight, in memory or
    /// on disk) and the payload + topic bytes of those in memory; `None` without a session.
    pub fn queue_figures(&self, client_id: &str) -> Option<(usize, usize)> {
        let cell = self.registry.get(client_id)?;
        let state = cell.state.lock();
        let session = &state.session;
        Some((
            session.held_messages() + session.spilled() as usize,
            session.held_bytes(),
        ))
    }

    /// The limits a new session of `client_id` gets.
    pub(crate) fn session_limits_for(&self, client_id: &str) -> Arc<SharedLimits> {
        self.queue_overrides
            .lock()
            .get(client_id)
            .cloned()
            .unwrap_or_else(|| self.session_limits())
    }
}
