//! [`FjallStore`]: the appended ops, the store thread that writes them, and opening a data
//! directory.

use crate::engine::{Engine, OpError, Pending, ReadError};
use crate::record::Unreadable;
use fjall::PersistMode;
use hayate_core::store::{Recovered, Store, StoreOp, Ticket};
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Where and how to keep the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// The data directory (created if missing). fjall keeps its files, and its lock, directly
    /// in it.
    pub dir: PathBuf,
    /// Longest time between a commit and the fsync that follows it (the window a power loss
    /// can take; a kill -9 of the process takes nothing that was committed).
    pub sync_interval: Duration,
    /// When an op counts as durable.
    pub mode: SyncMode,
}

/// When an op counts as durable ([`Store::durable`]): what an acknowledgement waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Once its batch is committed: in the operating system, safe from a kill -9 of the
    /// broker; fsynced within [`StorageConfig::sync_interval`].
    #[default]
    Batched,
    /// Once its batch is committed and fsynced (`fdatasync`): safe from a power loss too.
    /// One fsync covers every op appended while the previous one ran (group commit).
    Sync,
}

impl StorageConfig {
    /// The default fsync interval: 200 ms.
    pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(200);

    /// `dir` with the default fsync interval.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StorageConfig {
            dir: dir.into(),
            sync_interval: Self::DEFAULT_SYNC_INTERVAL,
            mode: SyncMode::Batched,
        }
    }
}

/// Why a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The directory could not be created or used.
    #[error("data directory {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process (or another store in this one) holds the directory's lock.
    #[error("data directory {} is in use by another process", .0.display())]
    Locked(PathBuf),
    /// The engine refused to open the directory (damaged journal, unknown format...).
    #[error("data directory {}: the store cannot be opened: {source}", dir.display())]
    Engine {
        /// The directory.
        dir: PathBuf,
        /// fjall's error.
        source: fjall::Error,
    },
    /// A stored record could not be read (written by a newer Hayate, or damaged).
    #[error("data directory {}: {what}", dir.display())]
    Record {
        /// The directory.
        dir: PathBuf,
        /// Which kind of record.
        what: Unreadable,
    },
}

/// What the store thread has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Ops written by committed batches.
    pub ops_committed: u64,
    /// Write batches committed (one per drain of the queue that had something to write).
    pub batches: u64,
    /// fsyncs completed (`persist(SyncData)` every interval, `SyncAll` at close).
    pub syncs: u64,
    /// Failed writes: batches that failed to commit, fsyncs that failed, and ops refused
    /// because their key cannot be stored (empty, or longer than 65,535 bytes).
    pub write_errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    ops_committed: AtomicU64,
    batches: AtomicU64,
    syncs: AtomicU64,
    write_errors: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Queue {
    ops: Vec<StoreOp>,
    /// The ticket of the last op appended (the first is 1).
    appended: Ticket,
    closing: bool,
}

/// How far the written ops reach, and who waits for more. One lock, so a wait registered
/// after a check cannot miss the advance that would ring it.
#[derive(Default)]
struct Durable {
    /// Every op up to this ticket is committed.
    ticket: Ticket,
    /// A batch failed: no later ticket is reported durable until the store is opened again,
    /// so nothing that was not stored is acknowledged.
    failed: bool,
    waiting: Vec<(Ticket, Arc<Notify>)>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    counters: Counters,
    /// An op was appended after close (logged once).
    late_logged: AtomicBool,
    durable: Mutex<Durable>,
}

impl Shared {
    /// Every op up to `ticket` is committed: rings those waiting for it.
    fn advance(&self, ticket: Ticket) {
        let mut durable = self.durable.lock();
        if durable.failed {
            return;
        }
        durable.ticket = durable.ticket.max(ticket);
        let now = durable.ticket;
        durable.waiting.retain(|(wanted, doorbell)| {
            let due = *wanted <= now;
            if due {
                doorbell.notify_one();
            }
            !due
        });
    }
}

/// A data directory kept with fjall. [`Store::append`] queues an op in memory; one thread
/// (`hayate-store`) writes the queued ops in order, as one fjall write batch per drain, and
/// fsyncs at most every [`StorageConfig::sync_interval`]. Dropping it [closes](Self::close) it.
pub struct FjallStore {
    dir: PathBuf,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("dir", &self.dir)
            .field("queued", &self.queued())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Store for FjallStore {
    fn append(&self, op: StoreOp) {
        let mut queue = self.shared.queue.lock();
        if queue.closing {
            drop(queue);
            if !self.shared.late_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %self.dir.display(), "store_append_after_close");
            }
            return;
        }
        queue.ops.push(op);
        queue.appended += 1;
        let first = queue.ops.len() == 1;
        drop(queue);
        if first {
            // Later ops of the same drain find the thread awake (or about to take them).
            self.shared.wake.notify_one();
        }
    }

    fn append_all(&self, ops: Vec<StoreOp>) -> Ticket {
        let mut queue = self.shared.queue.lock();
        if queue.closing {
            drop(queue);
            if !self.shared.late_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %self.dir.display(), "store_append_after_close");
            }
            return Ticket::MAX;
        }
        let first = queue.ops.is_empty();
        queue.appended += ops.len() as u64;
        queue.ops.extend(ops);
        let ticket = queue.appended;
        drop(queue);
        if first {
            self.shared.wake.notify_one();
        }
        ticket
    }

    fn appended(&self) -> Ticket {
        self.shared.queue.lock().appended
    }

    /// In `batched` mode an op is durable once its batch is committed (it survives a kill -9
    /// of the broker; the fsync follows within the sync interval).
    fn durable(&self) -> Ticket {
        self.shared.durable.lock().ticket
    }

    fn notify_when_durable(&self, ticket: Ticket, doorbell: Arc<Notify>) {
        let mut durable = self.shared.durable.lock();
        if durable.ticket >= ticket {
            doorbell.notify_one();
        } else {
            durable.waiting.push((ticket, doorbell));
        }
    }
}

impl FjallStore {
    /// Opens (creating if needed) the data directory, reads back everything it holds and
    /// starts the store thread.
    pub fn open(config: StorageConfig) -> Result<(Arc<FjallStore>, Recovered), StorageError> {
        let dir = config.dir;
        std::fs::create_dir_all(&dir).map_err(|source| StorageError::Dir {
            dir: dir.clone(),
            source,
        })?;
        let mut engine = Engine::open(&dir).map_err(|error| engine_error(&dir, error))?;
        let recovered = engine.read_all().map_err(|read| match read {
            ReadError::Engine(error) => engine_error(&dir, error),
            ReadError::Record(what) => StorageError::Record {
                dir: dir.clone(),
                what,
            },
        })?;
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            let (sync_interval, mode) = (config.sync_interval, config.mode);
            std::thread::Builder::new()
                .name("hayate-store".into())
                .spawn(move || run(engine, &shared, sync_interval, mode))
                .map_err(|source| StorageError::Dir {
                    dir: dir.clone(),
                    source,
                })?
        };
        let store = Arc::new(FjallStore {
            dir,
            shared,
            thread: Mutex::new(Some(thread)),
        });
        Ok((store, recovered))
    }

    /// Writes everything queued, fsyncs (`SyncAll`), stops the store thread and releases the
    /// directory. Blocks until done; calling it again (or concurrently) returns once the
    /// first call is done. Ops appended afterwards are dropped (logged once).
    pub fn close(&self) {
        let mut thread = self.thread.lock();
        let Some(handle) = thread.take() else {
            return;
        };
        self.shared.queue.lock().closing = true;
        self.shared.wake.notify_one();
        if handle.join().is_err() {
            tracing::error!(dir = %self.dir.display(), "store_thread_panicked");
        }
    }

    /// What the store thread has done so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.shared.counters;
        StoreStats {
            ops_committed: c.ops_committed.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
        }
    }

    /// Ops appended and not yet taken by the store thread.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().ops.len()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn engine_error(dir: &Path, error: fjall::Error) -> StorageError {
    match error {
        fjall::Error::Locked => StorageError::Locked(dir.to_path_buf()),
        fjall::Error::Io(source) => StorageError::Dir {
            dir: dir.to_path_buf(),
            source,
        },
        source => StorageError::Engine {
            dir: dir.to_path_buf(),
            source,
        },
    }
}

/// Logs write failures: every failed batch or fsync, except once fjall is poisoned (every
/// later write fails the same way), then at most once per [`ErrorLog::POISONED_EVERY`].
#[derive(Debug, Default)]
struct ErrorLog {
    last_poisoned_log: Option<Instant>,
    poisoned_since_log: u64,
}

impl ErrorLog {
    const POISONED_EVERY: Duration = Duration::from_secs(10);

    fn failed(&mut self, what: &'static str, error: &fjall::Error, ops: usize) {
        if !matches!(error, fjall::Error::Poisoned) {
            tracing::error!(%error, ops, "{what}");
            return;
        }
        self.poisoned_since_log += 1;
        if self
            .last_poisoned_log
            .is_none_or(|at| at.elapsed() >= Self::POISONED_EVERY)
        {
            tracing::error!(
                %error,
                ops,
                failures = self.poisoned_since_log,
                "{what}: the engine refuses writes after an earlier failure; nothing is being \
                 stored until a restart"
            );
            self.last_poisoned_log = Some(Instant::now());
            self.poisoned_since_log = 0;
        }
    }
}

/// The store thread's state.
struct Writer {
    engine: Engine,
    errors: ErrorLog,
    /// When the first commit since the last fsync happened.
    unsynced_since: Option<Instant>,
}

impl Writer {
    /// Applies `ops` in order and commits them as one batch. False when the batch (or a read
    /// it needed) failed; ops refused for their keys count as done (they can never be stored).
    fn write(&mut self, ops: Vec<StoreOp>, counters: &Counters) -> bool {
        let count = ops.len();
        let mut pending = Pending::default();
        let mut applied = 0u64;
        let mut refused: Vec<&'static str> = Vec::new();
        for op in ops {
            match self.engine.apply(&mut pending, op) {
                Ok(()) => applied += 1,
                Err(OpError::Key(what)) => refused.push(what),
                Err(OpError::Read(error)) => {
                    Counters::add(&counters.write_errors, 1);
                    self.errors.failed("store_read_failed", &error, count);
                    return false;
                }
            }
        }
        if !refused.is_empty() {
            Counters::add(&counters.write_errors, refused.len() as u64);
            tracing::error!(
                refused = refused.len(),
                first = refused[0],
                "store_op_refused: key empty or longer than 65535 bytes"
            );
        }
        if pending.is_empty() {
            return true;
        }
        match self.engine.commit(pending) {
            Ok(()) => {
                Counters::add(&counters.ops_committed, applied);
                Counters::add(&counters.batches, 1);
                self.unsynced_since.get_or_insert_with(Instant::now);
                true
            }
            Err(error) => {
                Counters::add(&counters.write_errors, 1);
                self.errors.failed("store_write_failed", &error, count);
                false
            }
        }
    }

    /// fsyncs what was committed; false if that failed.
    fn sync(&mut self, mode: PersistMode, counters: &Counters) -> bool {
        match self.engine.db.persist(mode) {
            Ok(()) => {
                Counters::add(&counters.syncs, 1);
                self.unsynced_since = None;
                true
            }
            Err(error) => {
                Counters::add(&counters.write_errors, 1);
                self.errors.failed("store_sync_failed", &error, 0);
                // Try again an interval later, not at once.
                self.unsynced_since = Some(Instant::now());
                false
            }
        }
    }
}

/// The store thread: drains the queue, writes each drain as one batch, fsyncs once
/// `sync_interval` has passed since the first commit after the last fsync (in
/// [`SyncMode::Sync`]: after every batch, before it counts as durable), and on close writes the
/// rest and fsyncs with `SyncAll`.
fn run(engine: Engine, shared: &Shared, sync_interval: Duration, mode: SyncMode) {
    let mut writer = Writer {
        engine,
        errors: ErrorLog::default(),
        unsynced_since: None,
    };
    loop {
        let (ops, last, closing) = {
            let mut queue = shared.queue.lock();
            while queue.ops.is_empty() && !queue.closing {
                match writer.unsynced_since {
                    None => shared.wake.wait(&mut queue),
                    Some(since) => {
                        let left = sync_interval.saturating_sub(since.elapsed());
                        if left.is_zero() || shared.wake.wait_for(&mut queue, left).timed_out() {
                            break;
                        }
                    }
                }
            }
            (
                std::mem::take(&mut queue.ops),
                queue.appended,
                queue.closing,
            )
        };
        if !ops.is_empty() {
            let stored = writer.write(ops, &shared.counters)
                && (mode == SyncMode::Batched
                    || writer.sync(PersistMode::SyncData, &shared.counters));
            if stored {
                shared.advance(last);
            } else {
                shared.durable.lock().failed = true;
            }
        }
        if closing {
            // `append` refuses ops once `closing` is set, so this drain was the last.
            writer.sync(PersistMode::SyncAll, &shared.counters);
            return;
        }
        if writer
            .unsynced_since
            .is_some_and(|since| since.elapsed() >= sync_interval)
        {
            writer.sync(PersistMode::SyncData, &shared.counters);
        }
    }
}

#[cfg(test)]
mod tests;
