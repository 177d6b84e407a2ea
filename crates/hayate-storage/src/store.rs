//! [`FjallStore`]: the appended ops, the store thread that writes them, and opening a data
//! directory.

use crate::record::{self, Unreadable};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use hayate_core::store::{Recovered, Store, StoreOp, SubscriptionData};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where and how to keep the store.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// Longest time between fsyncs while there is something committed and not fsynced.
    pub sync_interval: Duration,
}

/// Why a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The directory could not be created or used.
    #[error("data directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error("data directory {dir} is in use by another process")]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// The engine refused to open the directory (damaged journal, unknown format...).
    #[error("data directory {dir}: the store cannot be opened: {message}")]
    Engine {
        /// The directory.
        dir: PathBuf,
        /// The engine's error.
        message: String,
    },
    /// A record could not be read.
    #[error("data directory {dir}: {what}")]
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
    /// Batches committed.
    pub batches: u64,
    /// fsyncs completed.
    pub syncs: u64,
    /// Ops lost to write errors (batches that failed to commit).
    pub write_errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    ops_committed: AtomicU64,
    batches: AtomicU64,
    syncs: AtomicU64,
    write_errors: AtomicU64,
}

#[derive(Debug, Default)]
struct Queue {
    ops: Vec<StoreOp>,
    closing: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    counters: Counters,
}

/// The engine's handles, owned by the store thread.
struct Engine {
    db: Database,
    retained: Keyspace,
    sessions: Keyspace,
    subs: Keyspace,
}

/// A data directory kept with fjall. [`Store::append`] queues an op in memory; one thread
/// (`hayate-store`) writes the queued ops in order, as one fjall write batch per drain, and
/// fsyncs at most every [`StorageConfig::sync_interval`].
#[derive(Debug)]
pub struct FjallStore {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Store for FjallStore {
    fn append(&self, op: StoreOp) {
        self.shared.queue.lock().ops.push(op);
        self.shared.wake.notify_one();
    }
}

impl FjallStore {
    /// Opens (creating if needed) the data directory, reads back everything it holds and
    /// starts the store thread.
    pub fn open(config: StorageConfig) -> Result<(Arc<FjallStore>, Recovered), StorageError> {
        let dir = config.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|source| StorageError::Dir {
            dir: dir.clone(),
            source,
        })?;
        let engine_error = |error: fjall::Error| match error {
            fjall::Error::Locked => StorageError::Locked { dir: dir.clone() },
            fjall::Error::Io(source) => StorageError::Dir {
                dir: dir.clone(),
                source,
            },
            other => StorageError::Engine {
                dir: dir.clone(),
                message: format!("{other:?}"),
            },
        };
        let db = Database::builder(&dir).open().map_err(engine_error)?;
        let keyspace = |name: &str| db.keyspace(name, KeyspaceCreateOptions::default);
        let engine = Engine {
            retained: keyspace("retained").map_err(engine_error)?,
            sessions: keyspace("sessions").map_err(engine_error)?,
            subs: keyspace("subs").map_err(engine_error)?,
            db: db.clone(),
        };
        let recovered = engine.read_all().map_err(|read| match read {
            ReadError::Engine(error) => engine_error(error),
            ReadError::Record(what) => StorageError::Record {
                dir: dir.clone(),
                what,
            },
        })?;
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("hayate-store".into())
                .spawn(move || run(engine, &shared, config.sync_interval))
                .map_err(|source| StorageError::Dir {
                    dir: dir.clone(),
                    source,
                })?
        };
        let store = Arc::new(FjallStore {
            shared,
            thread: Mutex::new(Some(thread)),
        });
        Ok((store, recovered))
    }

    /// Writes everything queued, fsyncs, and stops the store thread. Ops appended later are
    /// dropped. Blocks until done; calling it again does nothing.
    pub fn close(&self) {
        let Some(thread) = self.thread.lock().take() else {
            return;
        };
        self.shared.queue.lock().closing = true;
        self.shared.wake.notify_one();
        if thread.join().is_err() {
            tracing::error!("store_thread_panicked");
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
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        self.close();
    }
}

enum ReadError {
    Engine(fjall::Error),
    Record(Unreadable),
}

impl From<fjall::Error> for ReadError {
    fn from(error: fjall::Error) -> Self {
        ReadError::Engine(error)
    }
}

impl From<Unreadable> for ReadError {
    fn from(what: Unreadable) -> Self {
        ReadError::Record(what)
    }
}

impl Engine {
    /// Everything the keyspaces hold.
    fn read_all(&self) -> Result<Recovered, ReadError> {
        let mut recovered = Recovered::default();
        for item in self.retained.iter() {
            let (key, value) = item.into_inner()?;
            let topic = std::str::from_utf8(&key).map_err(|_| Unreadable("retained"))?;
            let (expiry, publish) = record::read_retained(&value)?;
            recovered
                .retained
                .push((topic.to_string(), expiry, publish));
        }
        let mut subscriptions: BTreeMap<String, Vec<SubscriptionData>> = BTreeMap::new();
        for item in self.subs.iter() {
            let (key, value) = item.into_inner()?;
            let (client_id, subscription) = record::read_subscription(&key, &value)?;
            subscriptions
                .entry(client_id)
                .or_default()
                .push(subscription);
        }
        for item in self.sessions.iter() {
            let (key, value) = item.into_inner()?;
            let session = record::read_session(&key, &value)?;
            let own = subscriptions.remove(&session.client_id).unwrap_or_default();
            recovered.sessions.push((session, own));
        }
        if !subscriptions.is_empty() {
            // Written for sessions that are gone (a crash between the two writes cannot cause
            // this: one batch holds both); ignored.
            tracing::warn!(
                clients = subscriptions.len(),
                "stored_subscriptions_without_session"
            );
        }
        Ok(recovered)
    }

    /// Writes `ops` in order, committing a batch before each `DeleteSession` (which scans the
    /// committed subscriptions of its client). Returns how many ops were committed.
    fn write(&self, ops: Vec<StoreOp>, counters: &Counters) -> Result<(), (fjall::Error, u64)> {
        let mut batch = self.db.batch();
        let mut in_batch = 0u64;
        let commit = |batch: fjall::OwnedWriteBatch, n: &mut u64| {
            let count = std::mem::take(n);
            if count == 0 {
                return Ok(());
            }
            batch.commit().map_err(|error| (error, count))?;
            counters.ops_committed.fetch_add(count, Ordering::Relaxed);
            counters.batches.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        for op in ops {
            match op {
                StoreOp::PutRetained {
                    topic,
                    expires_at_ms,
                    publish,
                } => batch.insert(
                    &self.retained,
                    topic.into_bytes(),
                    record::retained_value(expires_at_ms, &publish),
                ),
                StoreOp::DeleteRetained { topic } => {
                    batch.remove(&self.retained, topic.into_bytes())
                }
                StoreOp::PutSession(session) => batch.insert(
                    &self.sessions,
                    session.client_id.as_bytes().to_vec(),
                    record::session_value(&session),
                ),
                StoreOp::DeleteSession { client_id } => {
                    commit(
                        std::mem::replace(&mut batch, self.db.batch()),
                        &mut in_batch,
                    )?;
                    batch.remove(&self.sessions, client_id.as_bytes().to_vec());
                    for item in self.subs.prefix(record::subscription_prefix(&client_id)) {
                        let key = item.key().map_err(|error| (error, 1))?;
                        batch.remove(&self.subs, key);
                    }
                }
                StoreOp::PutSubscription {
                    client_id,
                    subscription,
                } => batch.insert(
                    &self.subs,
                    record::subscription_key(&client_id, &subscription.filter),
                    record::subscription_value(&subscription),
                ),
                StoreOp::DeleteSubscription { client_id, filter } => {
                    batch.remove(&self.subs, record::subscription_key(&client_id, &filter));
                }
            }
            in_batch += 1;
        }
        commit(batch, &mut in_batch)
    }
}

/// The store thread: drains the queue, writes each drain as a batch, fsyncs when the interval
/// has passed since the first unsynced commit, and on close writes the rest and fsyncs.
fn run(engine: Engine, shared: &Shared, sync_interval: Duration) {
    let mut unsynced_since: Option<Instant> = None;
    let mut last_error_log: Option<Instant> = None;
    loop {
        let (ops, closing) = {
            let mut queue = shared.queue.lock();
            while queue.ops.is_empty() && !queue.closing {
                match unsynced_since {
                    None => shared.wake.wait(&mut queue),
                    Some(since) => {
                        let left = sync_interval.saturating_sub(since.elapsed());
                        if left.is_zero() || shared.wake.wait_for(&mut queue, left).timed_out() {
                            break;
                        }
                    }
                }
            }
            (std::mem::take(&mut queue.ops), queue.closing)
        };
        if !ops.is_empty() {
            match engine.write(ops, &shared.counters) {
                Ok(()) => {
                    unsynced_since.get_or_insert_with(Instant::now);
                }
                Err((error, lost)) => {
                    shared
                        .counters
                        .write_errors
                        .fetch_add(lost, Ordering::Relaxed);
                    if last_error_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::error!(?error, lost, "store_write_failed");
                        last_error_log = Some(Instant::now());
                    }
                }
            }
        }
        let due = unsynced_since.is_some_and(|since| since.elapsed() >= sync_interval);
        if closing || due {
            let mode = if closing {
                PersistMode::SyncAll
            } else {
                PersistMode::SyncData
            };
            match engine.db.persist(mode) {
                Ok(()) => {
                    shared.counters.syncs.fetch_add(1, Ordering::Relaxed);
                    unsynced_since = None;
                }
                Err(error) => {
                    if last_error_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::error!(?error, "store_sync_failed");
                        last_error_log = Some(Instant::now());
                    }
                }
            }
        }
        if closing && shared.queue.lock().ops.is_empty() {
            return;
        }
    }
}
