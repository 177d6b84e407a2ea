//! [`FjallStore`]: the appended ops, the store thread that writes them, and opening a data
//! directory.

use crate::engine::{Engine, ReadError};
use crate::latency::{Latency, LatencyHistogram};
use crate::record::Unreadable;
use crate::writer::{self, Writer};
use hayate_core::store::{PageReply, Recovered, Store, StoreOp, Ticket};
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::Notify;

/// Where and how to keep the store.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// The data directory (created if missing). fjall keeps its files, and its lock, directly
    /// in it.
    pub dir: PathBuf,
    /// Longest time between a commit and the fsync that follows it (the window a power loss
    /// can take; a kill -9 of the process takes nothing that was committed).
    pub sync_interval: Duration,
    /// When an op counts as durable.
    pub mode: SyncMode,
    /// Injected write failures, for tests (`None`: none).
    pub faults: Option<Arc<Faults>>,
    /// What to do when the store cannot be read at start.
    pub on_corruption: OnCorruption,
    /// Below this much free space on the data directory's file system the store stops
    /// writing as on a write error, before the disk is full (0: no threshold).
    pub min_free_bytes: u64,
}

/// What to do when the store in the data directory cannot be read at start (a checksum that
/// does not match, a damaged table, a record Hayate cannot read). A torn last write is not
/// corruption: fjall drops it and the store opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCorruption {
    /// Refuse to start, naming the directory and the error.
    #[default]
    Fail,
    /// Rename the directory to `DIR.corrupt-<unix seconds>` (kept for inspection), log it at
    /// error level, and start with an empty store.
    MoveAside,
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
    /// The default free-space threshold: 64 MiB.
    pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

    /// `dir` with the default fsync interval.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StorageConfig {
            dir: dir.into(),
            sync_interval: Self::DEFAULT_SYNC_INTERVAL,
            mode: SyncMode::Batched,
            faults: None,
            on_corruption: OnCorruption::Fail,
            min_free_bytes: Self::DEFAULT_MIN_FREE_BYTES,
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
    #[error(
        "data directory {}: the store cannot be read: {source} (set [storage] on_corruption = \
         \"move_aside\" to move it aside and start empty)",
        dir.display()
    )]
    Engine {
        /// The directory.
        dir: PathBuf,
        /// fjall's error.
        source: fjall::Error,
    },
    /// A stored record could not be read (written by a newer Hayate, or damaged).
    #[error(
        "data directory {}: {what} (set [storage] on_corruption = \"move_aside\" to move it \
         aside and start empty)",
        dir.display()
    )]
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
    /// Total time spent in fsync, in microseconds (divide by `syncs` for the mean).
    pub sync_micros: u64,
    /// The longest fsync so far, in microseconds.
    pub sync_max_micros: u64,
    /// fsync latency by bucket (`sync_micros` and `sync_max_micros` are its sum and maximum).
    pub sync_latency: Latency,
    /// Latency of committing a write batch (handing it to the operating system: what a
    /// `batched` acknowledgement waits for), by bucket.
    pub commit_latency: Latency,
    /// False while writes fail: nothing more is acknowledged and QoS 1/2 publishes are refused
    /// until the store can write again.
    pub healthy: bool,
    /// Messages queued for sessions in the store (entries not yet released), as of the last
    /// commit.
    pub queued: u64,
    /// Message bodies in the store (each referred to by at least one entry), as of the last
    /// commit.
    pub bodies: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) ops_committed: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) syncs: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    sync: LatencyHistogram,
    commit: LatencyHistogram,
    pub(crate) queued: AtomicU64,
    pub(crate) bodies: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn committed(&self, ops: u64, queued: u64, bodies: u64) {
        Counters::add(&self.ops_committed, ops);
        Counters::add(&self.batches, 1);
        self.queued.store(queued, Ordering::Relaxed);
        self.bodies.store(bodies, Ordering::Relaxed);
    }

    pub(crate) fn record_sync(&self, took: Duration) {
        Counters::add(&self.syncs, 1);
        self.sync.observe(took);
    }

    pub(crate) fn record_commit(&self, took: Duration) {
        self.commit.observe(took);
    }
}

/// Write failures a test can switch on ([`StorageConfig::faults`]): while on, every commit
/// and fsync fails as a full disk would, and reopening the engine is not tried.
#[derive(Debug, Default)]
pub struct Faults {
    failing: AtomicBool,
}

impl Faults {
    /// Turns failures on or off.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    pub(crate) fn failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) ops: Vec<StoreOp>,
    /// The ticket of the last op appended (the first is 1).
    pub(crate) appended: Ticket,
    pub(crate) closing: bool,
    /// The first ticket of every open group ([`Store::begin_group`]): a drain stops before
    /// the earliest, so a group's ops go into one batch.
    open_groups: Vec<Ticket>,
    /// Pages asked for ([`Store::read_page`]), each served once the ops appended before it
    /// are written.
    reads: Vec<ReadRequest>,
    /// The ticket of the last op a drain took.
    taken: Ticket,
}

/// A page to read for [`Store::read_page`].
pub(crate) struct ReadRequest {
    /// Served once every op up to this ticket was taken.
    after: Ticket,
    pub(crate) client_id: String,
    pub(crate) from_seq: u64,
    pub(crate) max: usize,
    pub(crate) reply: PageReply,
}

impl Queue {
    /// How many of the queued ops a drain may take now (all of them at close).
    pub(crate) fn ready(&self) -> usize {
        let first = self.appended + 1 - self.ops.len() as Ticket;
        match self.open_groups.iter().min() {
            Some(&start) if !self.closing => start.saturating_sub(first) as usize,
            _ => self.ops.len(),
        }
        .min(self.ops.len())
    }

    /// Takes the ops a drain may take, with the ticket of the last one taken, and the reads
    /// that may be served once they are written.
    pub(crate) fn take_ready(&mut self) -> (Vec<StoreOp>, Ticket, Vec<ReadRequest>) {
        let ready = self.ready();
        let left = self.ops.split_off(ready);
        let taken = std::mem::replace(&mut self.ops, left);
        self.taken = self.appended - self.ops.len() as Ticket;
        let upto = self.taken;
        let (reads, waiting) = std::mem::take(&mut self.reads)
            .into_iter()
            .partition(|read| read.after <= upto);
        self.reads = waiting;
        (taken, upto, reads)
    }

    /// True when a drain has something to do: ops it may take, or a page to read.
    pub(crate) fn has_work(&self) -> bool {
        self.ready() > 0 || self.reads.iter().any(|read| read.after <= self.taken)
    }
}

/// How far the written ops reach, and who waits for more. One lock, so a wait registered
/// after a check cannot miss the advance that would ring it.
#[derive(Default)]
struct Durable {
    /// Every op up to this ticket is committed.
    ticket: Ticket,
    /// A batch failed: no later ticket is reported durable until it is written, so nothing
    /// that was not stored is acknowledged.
    failed: bool,
    waiting: Vec<(Ticket, Arc<Notify>)>,
}

#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) queue: Mutex<Queue>,
    pub(crate) wake: Condvar,
    pub(crate) counters: Counters,
    /// An op was appended after close (logged once).
    late_logged: AtomicBool,
    durable: Mutex<Durable>,
    /// `durable.ticket`, for lock-free reads (written under that lock).
    durable_ticket: AtomicU64,
    /// Set while writes fail ([`Store::accepting`] is its negation).
    failing: AtomicBool,
}

impl Shared {
    /// Writes fail (`true`) or work again.
    pub(crate) fn set_failed(&self, failed: bool) {
        self.durable.lock().failed = failed;
        self.failing.store(failed, Ordering::SeqCst);
    }

    /// True while writes fail.
    pub(crate) fn is_failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    /// Every op up to this ticket is committed.
    pub(crate) fn durable_now(&self) -> Ticket {
        self.durable_ticket.load(Ordering::Acquire)
    }

    /// Every op up to `ticket` is committed: rings those waiting for it.
    pub(crate) fn advance(&self, ticket: Ticket) {
        let mut durable = self.durable.lock();
        if durable.failed {
            return;
        }
        durable.ticket = durable.ticket.max(ticket);
        let now = durable.ticket;
        self.durable_ticket.store(now, Ordering::Release);
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
        // Read without the lock: connections ask on every transmit of a stored session.
        self.shared.durable_now()
    }

    fn accepting(&self) -> bool {
        !self.shared.is_failing()
    }

    fn read_page(&self, client_id: &str, from_seq: u64, max: usize, reply: PageReply) {
        let mut queue = self.shared.queue.lock();
        if queue.closing {
            drop(queue);
            reply(Vec::new());
            return;
        }
        let after = queue.appended;
        queue.reads.push(ReadRequest {
            after,
            client_id: client_id.to_string(),
            from_seq,
            max,
            reply,
        });
        drop(queue);
        self.shared.wake.notify_one();
    }

    fn begin_group(&self) -> u64 {
        let mut queue = self.shared.queue.lock();
        let start = queue.appended + 1;
        queue.open_groups.push(start);
        start
    }

    fn end_group(&self, group: u64) {
        let mut queue = self.shared.queue.lock();
        if let Some(at) = queue.open_groups.iter().position(|start| *start == group) {
            queue.open_groups.swap_remove(at);
        }
        let ready = queue.ready() > 0;
        drop(queue);
        if ready {
            self.shared.wake.notify_one();
        }
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
        let (engine, recovered) = match load(&dir) {
            Ok(loaded) => loaded,
            Err(error)
                if error.is_corruption() && config.on_corruption == OnCorruption::MoveAside =>
            {
                let aside = move_aside(&dir)?;
                tracing::error!(
                    dir = %dir.display(),
                    moved_to = %aside.display(),
                    %error,
                    "store_moved_aside: the store could not be read; starting empty"
                );
                load(&dir)?
            }
            Err(error) => return Err(error),
        };
        let shared = Arc::new(Shared::default());
        shared
            .counters
            .queued
            .store(engine.queued(), Ordering::Relaxed);
        shared
            .counters
            .bodies
            .store(engine.bodies(), Ordering::Relaxed);
        let thread = {
            let shared = shared.clone();
            let sync_interval = config.sync_interval;
            let writer = Writer::new(
                dir.clone(),
                engine,
                config.mode,
                config.faults,
                config.min_free_bytes,
            );
            std::thread::Builder::new()
                .name("hayate-store".into())
                .spawn(move || writer::run(writer, &shared, sync_interval))
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
        let sync_latency = c.sync.read();
        StoreStats {
            ops_committed: c.ops_committed.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            sync_micros: sync_latency.sum_micros,
            sync_max_micros: sync_latency.max_micros,
            sync_latency,
            commit_latency: c.commit.read(),
            healthy: !self.shared.is_failing(),
            queued: c.queued.load(Ordering::Relaxed),
            bodies: c.bodies.load(Ordering::Relaxed),
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

    /// Bytes the data directory takes (every file in it, walked now).
    pub fn disk_bytes(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return 0;
            };
            entries
                .flatten()
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => walk(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.dir)
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// Opens the engine in `dir` (created if missing) and reads back what it holds.
fn load(dir: &Path) -> Result<(Engine, Recovered), StorageError> {
    std::fs::create_dir_all(dir).map_err(|source| StorageError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut engine = Engine::open(dir).map_err(|error| engine_error(dir, error))?;
    let recovered = engine.read_all().map_err(|read| match read {
        ReadError::Engine(error) => engine_error(dir, error),
        ReadError::Record(what) => StorageError::Record {
            dir: dir.to_path_buf(),
            what,
        },
    })?;
    Ok((engine, recovered))
}

/// Renames `dir` to `DIR.corrupt-<unix seconds>` beside it; returns the new path.
fn move_aside(dir: &Path) -> Result<PathBuf, StorageError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".corrupt-{secs}"));
    let aside = dir.with_file_name(name);
    std::fs::rename(dir, &aside).map_err(|source| StorageError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok(aside)
}

impl StorageError {
    /// The store is there but cannot be read ([`OnCorruption`] applies); not a directory
    /// that cannot be used or is in use.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            StorageError::Engine { .. } | StorageError::Record { .. }
        )
    }
}

fn engine_error(dir: &Path, error: fjall::Error) -> StorageError {
    match error {
        fjall::Error::Locked => StorageError::Locked(dir.to_path_buf()),
        // A file shorter than its contents say, or bytes that make no sense: damage.
        fjall::Error::Io(source)
            if matches!(
                source.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
            ) =>
        {
            StorageError::Engine {
                dir: dir.to_path_buf(),
                source: fjall::Error::Io(source),
            }
        }
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
