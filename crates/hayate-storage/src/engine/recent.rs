//! The message ids of queue entries written lately, so that removing an entry soon after it
//! was queued (the usual case for a connected subscriber: PUBACK, or PUBREC's release) needs
//! no read of the entry from the `queue` keyspace. An entry here exists, in the batch being
//! built or on disk, with that message id; one not here is read. Bounded: when it holds
//! [`RECENT_MAX`] entries it is emptied, and the entries written before are read as they
//! leave.

use std::collections::HashMap;

/// Entries kept at most (about 2 MiB).
pub(super) const RECENT_MAX: usize = 65_536;

#[derive(Debug, Default)]
pub(super) struct Recent {
    /// By client id, seq -> message id. A client with none left is removed.
    by_client: HashMap<String, HashMap<u64, u64>>,
    len: usize,
}

impl Recent {
    /// Entry `seq` of `client_id`, referring to `message_id`, was written.
    pub fn insert(&mut self, client_id: &str, seq: u64, message_id: u64) {
        if self.len >= RECENT_MAX {
            self.clear();
        }
        let entries = match self.by_client.get_mut(client_id) {
            Some(entries) => entries,
            None => self.by_client.entry(client_id.to_string()).or_default(),
        };
        if entries.insert(seq, message_id).is_none() {
            self.len += 1;
        }
    }

    /// The message id of entry `seq` of `client_id`, which is being removed; `None` when it
    /// is not known here (it may still exist: read it).
    pub fn take(&mut self, client_id: &str, seq: u64) -> Option<u64> {
        let entries = self.by_client.get_mut(client_id)?;
        let message_id = entries.remove(&seq)?;
        self.len -= 1;
        if entries.is_empty() {
            self.by_client.remove(client_id);
        }
        Some(message_id)
    }

    /// Forgets every entry of `client_id` (its session was deleted).
    pub fn forget_client(&mut self, client_id: &str) {
        if let Some(entries) = self.by_client.remove(client_id) {
            self.len -= entries.len();
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.by_client = HashMap::new();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_taken_once_and_the_bound_holds() {
        let mut recent = Recent::default();
        recent.insert("a", 1, 10);
        recent.insert("a", 2, 11);
        recent.insert("b", 1, 10);
        assert_eq!(recent.take("a", 1), Some(10));
        assert_eq!(recent.take("a", 1), None, "taken already");
        assert_eq!(recent.take("c", 1), None);
        recent.forget_client("a");
        assert_eq!(recent.take("a", 2), None);
        assert_eq!(recent.take("b", 1), Some(10));
        assert_eq!((recent.len, recent.by_client.len()), (0, 0));
        for seq in 0..RECENT_MAX as u64 + 1 {
            recent.insert("a", seq, seq);
        }
        assert_eq!(recent.len, 1, "emptied when full, then the new entry");
        assert_eq!(recent.take("a", RECENT_MAX as u64), Some(RECENT_MAX as u64));
        assert_eq!(recent.take("a", 0), None);
    }
}
