//! Hayate's durable store: the changes `hayate-core` describes as [`StoreOp`]s (retained
//! messages, persistent sessions and their subscriptions), kept in a data directory with the
//! embedded LSM-tree engine [fjall](https://docs.rs/fjall). See `docs/DURABILITY.md` for what
//! is kept and `docs/design/persistence.md` for the design.
//!
//! Durability (`batched`): [`Store::append`] only queues the op in memory. The store thread
//! writes the queue in order, one fjall write batch per drain. Once a batch is committed it is
//! in the operating system's hands and survives a kill -9 of the broker. An fsync follows at
//! most [`StorageConfig::sync_interval`] later, and that interval is the window a power loss
//! can take. [`FjallStore::close`] writes the rest and fsyncs.
//!
//! Not done yet:
//! - queued and in-flight messages;
//! - acknowledgements held until their op is durable, and the `sync` mode;
//! - the ENOSPC policy: a failed write is counted and logged, and the broker keeps serving from
//!   memory;
//! - `on_corruption` (an unreadable record stops the start).
//!
//! [`StoreOp`]: hayate_core::store::StoreOp
//! [`Store::append`]: hayate_core::store::Store::append

mod record;
mod store;

pub use record::Unreadable;
pub use store::{FjallStore, StorageConfig, StorageError, StoreStats};
