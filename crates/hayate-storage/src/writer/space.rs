//! Free space on the data directory's file system. Below `[storage] min_free_mb` the store
//! stops writing as it does on a write error (QoS 1/2 publishes refused, acknowledgements held,
//! ops kept in the backlog) before the disk is full: the engine needs room to compact and to
//! write its journal, and a file system filled to the last block is slow to recover from.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a reading of the free space is trusted (one `statvfs` per interval at most).
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// See the module docs.
#[derive(Debug)]
pub(crate) struct SpaceGuard {
    dir: PathBuf,
    /// 0: no threshold.
    min_free: u64,
    free: Option<u64>,
    checked_at: Option<Instant>,
    /// Bytes of batches written since the last reading.
    written: u64,
}

impl SpaceGuard {
    pub(crate) fn new(dir: PathBuf, min_free: u64) -> SpaceGuard {
        SpaceGuard {
            dir,
            min_free,
            free: None,
            checked_at: None,
            written: 0,
        }
    }

    /// The threshold in bytes.
    pub(crate) fn min_free(&self) -> u64 {
        self.min_free
    }

    /// Before writing a batch of about `batch` bytes: `Err(free bytes)` when the free space is
    /// below the threshold. The space is read again when `fresh`, when the last reading is
    /// older than [`CHECK_EVERY`], or when what was written since could have used a quarter
    /// of the room above the threshold (the engine writes each byte more than once: journal,
    /// then tables), so a fast writer is stopped near the threshold, not past the disk's end.
    pub(crate) fn check(&mut self, fresh: bool, batch: u64) -> Result<(), u64> {
        if self.min_free == 0 {
            return Ok(());
        }
        self.written = self.written.saturating_add(batch);
        let stale = self.checked_at.is_none_or(|at| at.elapsed() >= CHECK_EVERY);
        let room = self
            .free
            .map_or(0, |free| free.saturating_sub(self.min_free));
        if fresh || stale || self.written.saturating_mul(4) >= room {
            self.free = free_bytes(&self.dir);
            self.checked_at = Some(Instant::now());
            self.written = 0;
        }
        match self.free {
            Some(free) if free < self.min_free => Err(free),
            // Unknown (the file system does not say): write, and let a full disk fail the write.
            _ => Ok(()),
        }
    }
}

/// Bytes available to this (unprivileged) process on the file system holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    match rustix::fs::statvfs(dir) {
        Ok(stat) => Some(stat.f_bavail.saturating_mul(stat.f_frsize)),
        Err(error) => {
            tracing::debug!(dir = %dir.display(), %error, "store_statvfs_failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_above_the_free_space_refuses_and_none_never_does() {
        let dir = tempfile::tempdir().expect("dir");
        let free = free_bytes(dir.path()).expect("statvfs works on a temporary directory");
        assert!(free > 0);
        let mut low = SpaceGuard::new(dir.path().to_path_buf(), u64::MAX);
        assert!(matches!(low.check(true, 0), Err(reported) if reported < u64::MAX));
        let mut off = SpaceGuard::new(dir.path().to_path_buf(), 0);
        assert_eq!(off.check(true, 0), Ok(()));
        let mut plenty = SpaceGuard::new(dir.path().to_path_buf(), 1);
        assert_eq!(plenty.check(false, 0), Ok(()));
        // A batch as large as the room above the threshold makes the next check read again.
        let checked = plenty.checked_at;
        assert_eq!(plenty.check(false, free), Ok(()));
        assert!(plenty.checked_at > checked, "read again");
    }
}
