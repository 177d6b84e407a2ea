//! Hayate's durable store: the changes `hayate-core` describes as [`StoreOp`]s, kept in a data
//! directory with the embedded LSM-tree engine [fjall](https://docs.rs/fjall) (3.1). This is
//! step 1 of `docs/design/persistence.md`; `docs/DURABILITY.md` says what a user gets.
//!
//! # What is stored
//!
//! Three fjall keyspaces in the data directory (fjall owns the files, the journal, the
//! checksums and the directory lock; Hayate has no file format of its own, only small values
//! that start with a format version byte, see the `record` module):
//!
//! - `retained`: key = topic; value = expiry (ms since the Unix epoch, optional) and the
//!   retained message as an encoded MQTT 5 PUBLISH.
//! - `sessions`: key = client id; value = Session Expiry Interval, protocol level and when its
//!   last connection ended.
//! - `subs`: key = client id length (u16, big-endian), client id, topic filter; value = the
//!   SUBSCRIBE options byte and the Subscription Identifier. The length prefix keeps client
//!   `a`'s keys apart from client `ab`'s, so `DeleteSession` removes exactly its client's
//!   subscriptions (a prefix scan in the same batch as the session's removal).
//!
//! [`FjallStore::open`] reads all of it back eagerly into a [`Recovered`].
//!
//! # Durability (`batched`)
//!
//! [`Store::append`] only queues the op in memory: it never blocks on I/O. One thread,
//! `hayate-store`, drains the queue and writes each drain, in append order, as one fjall write
//! batch, which it commits. A committed batch is in the operating system's page cache: it
//! survives a kill -9 of the broker (tested with SIGKILL in a child process). It is fsynced
//! (`persist(SyncData)`) at most [`StorageConfig::sync_interval`] (default 200 ms) after the
//! first commit that followed the previous fsync: that interval is the window a power loss or
//! kernel crash can take. [`FjallStore::close`] (also run on drop) writes what is queued and
//! fsyncs with `SyncAll`. The ops between an `append` and the commit of its batch (normally
//! well under a millisecond) are lost to a kill -9.
//!
//! # Write errors
//!
//! A failed commit or fsync never panics and never stops the broker: it is counted in
//! [`StoreStats::write_errors`] and logged once per failed batch. After such a failure fjall
//! poisons the database and refuses every later write; those refusals are still counted but
//! logged at most once per 10 s. Nothing is stored again until the broker restarts. A key
//! fjall cannot hold (empty, or over 65,535 bytes) makes its op refused and counted, and a
//! failed read of the committed subscriptions a `DeleteSession` removes drops its batch; both
//! are logged.
//!
//! # Not done yet
//!
//! - queued and in-flight messages (offline queues, PUBREL pending, inbound QoS 2 ids);
//! - the `sync` mode (durable = fsynced). In `batched` mode an op counts as durable once its
//!   batch is committed: `hayate-core` holds a retained PUBLISH's acknowledgement until
//!   then ([`Store::durable`], [`Store::notify_when_durable`]);
//! - the ENOSPC policy of the design (refusing QoS 1/2 while the disk is full, keeping a
//!   backlog and reopening the engine by itself): today a full disk poisons fjall as above;
//! - `on_corruption`: a record that cannot be read makes [`FjallStore::open`] fail;
//! - the design's `meta` keyspace (format version, clean-stop flag, liveness tick).
//!
//! [`StoreOp`]: hayate_core::store::StoreOp
//! [`Store::append`]: hayate_core::store::Store::append
//! [`Store::durable`]: hayate_core::store::Store::durable
//! [`Store::notify_when_durable`]: hayate_core::store::Store::notify_when_durable
//! [`Recovered`]: hayate_core::store::Recovered

mod engine;
mod record;
mod store;
mod writer;

pub use record::Unreadable;
pub use store::{Faults, FjallStore, StorageConfig, StorageError, StoreStats, SyncMode};
