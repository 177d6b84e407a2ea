//! Opening the embedded store at start (`[storage]`, `--data-dir`): the engine lives in
//! `hayate-storage`; this attaches it to the broker and restores what it held
//! (`docs/DURABILITY.md`).

use crate::config::{Durability, OnCorruption, StoreConfig};
use hayate_core::Broker;
use hayate_storage::{FjallStore, StorageConfig, SyncMode};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Opens the store in `dir`, attaches it to `broker` and restores retained messages and
/// persistent sessions with their queues. Fails (and the server does not start) when the directory cannot be
/// used or another process holds it.
pub(crate) fn open(
    dir: &Path,
    config: &StoreConfig,
    broker: &Broker,
) -> io::Result<Arc<FjallStore>> {
    let (store, recovered) = FjallStore::open(StorageConfig {
        dir: dir.to_path_buf(),
        sync_interval: Duration::from_millis(config.sync_interval_ms),
        mode: match config.durability {
            Durability::Sync => SyncMode::Sync,
            Durability::Batched | Durability::Off => SyncMode::Batched,
        },
        faults: None,
        on_corruption: match config.on_corruption {
            OnCorruption::Fail => hayate_storage::OnCorruption::Fail,
            OnCorruption::MoveAside => hayate_storage::OnCorruption::MoveAside,
        },
        min_free_bytes: config.min_free_mb.saturating_mul(1 << 20),
    })
    .map_err(io::Error::other)?;
    let now = tokio::time::Instant::now().into_std();
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    broker.attach_store(store.clone(), now, unix_ms);
    let restored = broker.restore(recovered, now);
    tracing::info!(
        dir = %dir.display(),
        retained = restored.retained,
        retained_dropped = restored.retained_dropped,
        sessions = restored.sessions,
        sessions_expired = restored.sessions_expired,
        subscriptions = restored.subscriptions,
        queued = restored.queued,
        "store_opened"
    );
    Ok(store)
}
