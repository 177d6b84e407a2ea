//! Hayate's durable store: the changes `hayate-core` describes as [`StoreOp`]s, kept in a data
//! directory with the embedded LSM-tree engine [fjall](https://docs.rs/fjall) (3.1).
//! `docs/design/persistence.md` is the design; `docs/DURABILITY.md` says what a user gets.
//!
//! # What is stored
//!
//! Ten fjall keyspaces in the data directory (fjall owns the files, the journal, the
//! checksums and the directory lock; Hayate has no file format of its own, only small values
//! that start with a format version byte, see the `record` module): `retained`, `sessions`,
//! `subs` (subscriptions), `queue` (queued QoS 1/2 entries by client and seq), `rel` (released
//! entries waiting for PUBCOMP), `inq2` (inbound QoS 2 ids awaiting PUBREL), `msg` (message
//! bodies, one per message, removed with the last entry that refers to them), and the counts
//! kept beside them (`msgref`, `qmeta`, `meta`: `engine/counts.rs`). Keys of one client start
//! with its id's length and bytes, so `DeleteSession` removes exactly its keys by prefix.
//! [`FjallStore::open`] reads back sessions, subscriptions, retained messages and each
//! session's queue summary into a [`Recovered`]; queue entries stay on disk until a page of
//! them is read ([`Store::read_page`]).
//!
//! # What a queued message costs
//!
//! A queued entry and its body are written once; the entry's removal (and the body's, with the
//! last entry) is a removal in the same keyspaces. An entry queued and removed within one
//! drain (its PUBACK came before the store thread took it) writes nothing at all. Removing an
//! entry written lately reads nothing (`engine/recent.rs` keeps its message id), and the counts
//! are written once per batch, with their final value.

//! # Durability
//!
//! [`Store::append`] only queues the op in memory: it never blocks on I/O. One thread,
//! `hayate-store` (`writer.rs`), drains the queue and writes each drain, in append order, as one
//! fjall write batch, which it commits: then it survives a kill -9 of the broker. In
//! [`SyncMode::Batched`] that is durable, and the thread fsyncs at most
//! [`StorageConfig::sync_interval`] later; in [`SyncMode::Sync`] it fsyncs every batch before
//! moving the durable ticket (a group commit: one fsync for everything appended meanwhile). A
//! drain never takes part of an open group ([`Store::begin_group`]). [`FjallStore::close`]
//! (also run on drop) writes what is queued and fsyncs with `SyncAll`.
//!
//! # Write errors
//!
//! A failed commit or fsync never panics and never stops the broker. The thread turns
//! *failing*: the durable ticket stops, [`Store::accepting`] turns false (the core refuses QoS
//! 1/2 publishes), and the failed ops plus everything appended later wait in a backlog. Every
//! second it drops the engine, opens it again and writes the backlog; once that works it is
//! healthy again. Tests inject failures with [`Faults`].
//!
//! # At start
//!
//! A torn last batch (a crash in the middle of a write) is dropped by fjall and is not an
//! error. A store that cannot be read (a checksum that does not match, a damaged table, a
//! record this version cannot read) stops the open with a message naming the directory, or,
//! with [`OnCorruption::MoveAside`], is renamed to `DIR.corrupt-<unix seconds>` and replaced by
//! an empty one. A directory in use by another process is refused ([`StorageError::Locked`]).
//!
//! [`StoreOp`]: hayate_core::store::StoreOp
//! [`Store::append`]: hayate_core::store::Store::append
//! [`Store::accepting`]: hayate_core::store::Store::accepting
//! [`Store::begin_group`]: hayate_core::store::Store::begin_group
//! [`Store::read_page`]: hayate_core::store::Store::read_page
//! [`Recovered`]: hayate_core::store::Recovered

mod engine;
mod latency;
mod record;
mod store;
mod writer;

pub use latency::{Latency, LATENCY_BUCKETS_MICROS};
pub use record::Unreadable;
pub use store::{
    Faults, FjallStore, OnCorruption, StorageConfig, StorageError, StoreStats, SyncMode,
};
