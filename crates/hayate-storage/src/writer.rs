//! The store thread (`hayate-store`): it drains the appended ops, writes each drain as one
//! fjall batch, fsyncs, and moves the durable ticket. Its states:
//!
//! ```text
//!            write or fsync fails
//! Healthy ----------------------------> Failed { backlog }
//!    ^                                     |  every RETRY_EVERY: drop the engine, open it
//!    |     reopened, backlog written       |  again (fjall truncates a torn batch), write
//!    +-------------------------------------+  the backlog (and fsync it)
//! ```
//!
//! While `Failed`, nothing more is reported durable (so nothing more is acknowledged), the
//! store is not [accepting](hayate_core::store::Store::accepting) (the core refuses QoS 1/2
//! publishes), and every op appended meanwhile joins the backlog in order, so that once the
//! disk has room again everything is written as if nothing had happened. A full disk
//! (ENOSPC), an I/O error and a poisoned engine all take this path, and so does free space
//! below `[storage] min_free_mb` (`space.rs`), checked before each write and before each retry.
//! Retained messages published at QoS 0 meanwhile are folded by topic in the backlog
//! (`backlog.rs`), so an outage of any length holds at most one per topic.

mod backlog;
mod space;

use crate::engine::{Engine, OpError, Pending};
use crate::store::{Counters, Faults, ReadRequest, Shared, SyncMode};
use backlog::Backlog;
use fjall::PersistMode;
use hayate_core::store::{StoreOp, Ticket};
use parking_lot::MutexGuard;
use space::SpaceGuard;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a failed store tries to open its engine again.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A drain woken with fewer ops than this yields the core once before it takes them.
const LINGER_BELOW: usize = 16;
/// Failure log lines after the first: at most one per this interval, with a count.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Logs failures: the first at once, later ones at most once per [`LOG_EVERY`] with a count.
#[derive(Debug, Default)]
struct ErrorLog {
    last_log: Option<Instant>,
    since_log: u64,
}

impl ErrorLog {
    fn failed(&mut self, what: &'static str, error: &dyn std::fmt::Display, ops: usize) {
        self.since_log += 1;
        if self.last_log.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::error!(
                %error,
                ops,
                failures = self.since_log,
                "{what}: QoS 1/2 publishes are refused and acknowledgements held until the store \
                 can write again (retried every second)"
            );
            self.last_log = Some(Instant::now());
            self.since_log = 0;
        }
    }
}

/// Why a write did not happen.
enum WriteError {
    Engine(fjall::Error),
    Injected,
    LowSpace { free: u64, min_free: u64 },
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Engine(error) => error.fmt(f),
            WriteError::Injected => f.write_str("injected write failure (test)"),
            WriteError::LowSpace { free, min_free } => write!(
                f,
                "{} MiB free on the data directory's file system, below [storage] min_free_mb = {}",
                free >> 20,
                min_free >> 20
            ),
        }
    }
}

/// The store thread's state.
pub(crate) struct Writer {
    dir: PathBuf,
    /// `None` while the engine is dropped to be opened again.
    engine: Option<Engine>,
    mode: SyncMode,
    faults: Option<Arc<Faults>>,
    errors: ErrorLog,
    /// When the first commit since the last fsync happened.
    unsynced_since: Option<Instant>,
    /// `Failed`: the ops not written yet.
    backlog: Option<Backlog>,
    space: SpaceGuard,
    next_retry: Instant,
}

impl Writer {
    pub(crate) fn new(
        dir: PathBuf,
        engine: Engine,
        mode: SyncMode,
        faults: Option<Arc<Faults>>,
        min_free_bytes: u64,
    ) -> Writer {
        Writer {
            space: SpaceGuard::new(dir.clone(), min_free_bytes),
            dir,
            engine: Some(engine),
            mode,
            faults,
            errors: ErrorLog::default(),
            unsynced_since: None,
            backlog: None,
            next_retry: Instant::now(),
        }
    }

    fn injected(&self) -> bool {
        self.faults.as_ref().is_some_and(|faults| faults.failing())
    }

    /// Applies `ops` in order and commits them as one batch (and fsyncs it in `sync` mode).
    /// Ops refused for their keys count as done: they can never be stored.
    fn write(&mut self, ops: &[StoreOp], counters: &Counters) -> Result<(), WriteError> {
        if self.injected() {
            return Err(WriteError::Injected);
        }
        let engine = self.engine.as_mut().ok_or(WriteError::Injected)?;
        let mut pending = Pending::default();
        let mut applied = 0u64;
        let mut refused: Vec<&'static str> = Vec::new();
        for op in ops {
            match engine.apply(&mut pending, op) {
                Ok(()) => applied += 1,
                Err(OpError::Key(what)) => refused.push(what),
                Err(OpError::Read(error)) => return Err(WriteError::Engine(error)),
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
        engine.finish(&mut pending);
        if !pending.is_empty() {
            // Refused here, the batch joins the backlog; the counts it changed in the engine's
            // cache are dropped with the engine before the backlog is written (`retry`).
            if let Err(free) = self.space.check(false, pending.approx_bytes()) {
                return Err(WriteError::LowSpace {
                    free,
                    min_free: self.space.min_free(),
                });
            }
            let started = Instant::now();
            engine.commit(pending).map_err(WriteError::Engine)?;
            counters.record_commit(started.elapsed());
            counters.committed(applied, engine.queued(), engine.bodies());
            self.unsynced_since.get_or_insert_with(Instant::now);
        }
        if self.mode == SyncMode::Sync {
            self.sync(PersistMode::SyncData, counters)?;
        }
        Ok(())
    }

    /// fsyncs what was committed.
    fn sync(&mut self, mode: PersistMode, counters: &Counters) -> Result<(), WriteError> {
        if self.injected() {
            return Err(WriteError::Injected);
        }
        let Some(engine) = &self.engine else {
            return Err(WriteError::Injected);
        };
        let started = Instant::now();
        engine.db.persist(mode).map_err(WriteError::Engine)?;
        counters.record_sync(started.elapsed());
        self.unsynced_since = None;
        Ok(())
    }

    /// Writes one drain (`ops`, the last with ticket `last`), or adds it to the backlog.
    pub(crate) fn drain(&mut self, ops: Vec<StoreOp>, last: Ticket, shared: &Shared) {
        if let Some(backlog) = &mut self.backlog {
            backlog.extend(ops, last);
            return;
        }
        if ops.is_empty() {
            return;
        }
        match self.write(&ops, &shared.counters) {
            Ok(()) => shared.advance(last),
            Err(error) => self.fail("store_write_failed", &error, ops, last, shared),
        }
    }

    fn fail(
        &mut self,
        what: &'static str,
        error: &WriteError,
        ops: Vec<StoreOp>,
        last: Ticket,
        shared: &Shared,
    ) {
        Counters::add(&shared.counters.write_errors, 1);
        self.errors.failed(what, error, ops.len());
        shared.set_failed(true);
        self.backlog = Some(Backlog::new(ops, last));
        self.next_retry = Instant::now() + RETRY_EVERY;
    }

    /// How long the thread may sleep before [`Writer::tick`] has something to do.
    pub(crate) fn next_deadline(&self, sync_interval: Duration) -> Option<Instant> {
        if self.backlog.is_some() {
            return Some(self.next_retry);
        }
        self.unsynced_since.map(|since| since + sync_interval)
    }

    /// The periodic work: the batched-mode fsync when due, or a retry while failed.
    pub(crate) fn tick(&mut self, sync_interval: Duration, shared: &Shared) {
        if self.backlog.is_some() {
            if Instant::now() >= self.next_retry {
                self.retry(shared);
            }
            return;
        }
        if self
            .unsynced_since
            .is_some_and(|since| since.elapsed() >= sync_interval)
        {
            if let Err(error) = self.sync(PersistMode::SyncData, &shared.counters) {
                // Committed but not fsynced: still safe from a kill -9, and this mode's
                // acknowledgements did not wait for it. Try again an interval later.
                Counters::add(&shared.counters.write_errors, 1);
                self.errors.failed("store_sync_failed", &error, 0);
                self.unsynced_since = Some(Instant::now());
            }
        }
    }

    /// Drops the engine, opens it again and writes the backlog.
    fn retry(&mut self, shared: &Shared) {
        self.next_retry = Instant::now() + RETRY_EVERY;
        if self.injected() {
            return;
        }
        if let Err(free) = self.space.check(true, 0) {
            let error = WriteError::LowSpace {
                free,
                min_free: self.space.min_free(),
            };
            let held = self.backlog.as_ref().map_or(0, Backlog::len);
            self.errors.failed("store_disk_space_low", &error, held);
            return;
        }
        // fjall refuses every write once poisoned: only a new instance writes again.
        self.engine = None;
        let mut engine = match Engine::open(&self.dir) {
            Ok(engine) => engine,
            Err(error) => {
                self.errors.failed("store_reopen_failed", &error, 0);
                return;
            }
        };
        if let Err(error) = engine.reload() {
            self.errors.failed("store_reopen_failed", &error, 0);
            return;
        }
        self.engine = Some(engine);
        let Some(backlog) = self.backlog.take() else {
            return;
        };
        let (ops, last) = (backlog.ops(), backlog.last());
        match self.write(&ops, &shared.counters) {
            Ok(()) => {
                tracing::info!(ops = ops.len(), "store_recovered");
                self.errors = ErrorLog::default();
                shared.set_failed(false);
                shared.advance(last);
            }
            Err(error) => self.fail("store_write_failed", &error, ops, last, shared),
        }
    }

    /// Reads a page (after the ops appended before it were written) and hands it over. While
    /// failing, it reads what is on disk.
    fn serve(&self, read: ReadRequest) {
        let page = match &self.engine {
            Some(engine) => engine
                .read_page(&read.client_id, read.from_seq, read.max)
                .unwrap_or_else(|error| {
                    tracing::error!(%error, client_id = read.client_id, "store_read_failed");
                    Vec::new()
                }),
            None => Vec::new(),
        };
        (read.reply)(page);
    }

    /// At close: writes what is left (one more try if failed) and fsyncs with `SyncAll`.
    pub(crate) fn close(&mut self, shared: &Shared) {
        if self.backlog.is_some() {
            self.retry(shared);
        }
        if let Some(backlog) = &self.backlog {
            tracing::error!(
                ops = backlog.len(),
                "store_closed_with_unwritten_ops: they were never acknowledged"
            );
            return;
        }
        if let Err(error) = self.sync(PersistMode::SyncAll, &shared.counters) {
            Counters::add(&shared.counters.write_errors, 1);
            tracing::error!(%error, "store_sync_failed at close");
        }
    }
}

/// The store thread: waits for ops (or the next deadline), drains them, writes them.
pub(crate) fn run(mut writer: Writer, shared: &Shared, sync_interval: Duration) {
    loop {
        let (ops, last, reads, closing) = {
            let mut queue = shared.queue.lock();
            let mut slept = false;
            while !queue.has_work() && !queue.closing {
                slept = true;
                match writer.next_deadline(sync_interval) {
                    None => shared.wake.wait(&mut queue),
                    Some(at) => {
                        if Instant::now() >= at
                            || shared.wake.wait_until(&mut queue, at).timed_out()
                        {
                            break;
                        }
                    }
                }
            }
            if slept && !queue.closing && queue.ready() < LINGER_BELOW {
                // Woken by the first op of a drain: let the threads about to append more (the
                // other connections of a burst) run first, so that one batch takes them all.
                // One sched_yield, which returns at once when no other thread wants this core.
                MutexGuard::unlocked(&mut queue, std::thread::yield_now);
            }
            let (ops, last, reads) = queue.take_ready();
            (ops, last, reads, queue.closing)
        };
        writer.drain(ops, last, shared);
        for read in reads {
            writer.serve(read);
        }
        if closing {
            // `append` refuses ops once `closing` is set, so this drain was the last.
            writer.close(shared);
            return;
        }
        writer.tick(sync_interval, shared);
    }
}

#[cfg(test)]
mod tests;
