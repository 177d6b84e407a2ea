//! Opening, closing and fsyncing a store: locked or unusable directories, close and drop, damage.

use crate::common::*;
use bytes::Bytes;
use hayate_core::store::{Store, StoreOp};
use hayate_storage::{FjallStore, OnCorruption, StorageConfig, StorageError};
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let error = FjallStore::open(StorageConfig::new(dir.path())).expect_err("second open");
    assert!(matches!(error, StorageError::Locked(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    // Released on close.
    store.close();
    let (_again, _) = open(dir.path());
}

#[test]
fn a_directory_that_cannot_be_created_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let error = FjallStore::open(StorageConfig::new(file.join("data"))).expect_err("not a dir");
    assert!(matches!(error, StorageError::Dir { .. }), "{error:?}");
    assert!(error.to_string().contains("file/data"), "{error}");
}

/// `close` is idempotent, ops appended after it are dropped, and dropping a store that was
/// never closed writes and releases everything too.
#[test]
fn close_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    store.append(retain("before", b"x"));
    store.close();
    let stats = store.stats();
    assert_eq!((stats.ops_committed, stats.batches), (1, 1));
    assert!(stats.syncs >= 1, "close fsyncs: {stats:?}");
    // One commit and each fsync observed once in the latency histograms.
    assert_eq!(stats.commit_latency.count(), 1, "{stats:?}");
    assert_eq!(stats.sync_latency.count(), stats.syncs, "{stats:?}");
    assert_eq!(stats.sync_latency.sum_micros, stats.sync_micros);
    store.close();
    store.append(retain("after", b"x"));
    assert_eq!(store.queued(), 0);
    drop(store);

    let (store, recovered) = open(dir.path());
    assert_eq!(retained_topics(&recovered), vec![("before", &b"x"[..])]);
    store.append(retain("dropped-not-closed", b"y"));
    drop(store);
    let (_store, recovered) = open(dir.path());
    assert_eq!(recovered.retained.len(), 2);
}

/// Something committed is fsynced about one interval later, without a close.
#[test]
fn committed_ops_are_fsynced_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_with(dir.path(), Duration::from_millis(50));
    store.append(retain("t", b"x"));
    wait_committed(&store, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().syncs == 0 {
        assert!(Instant::now() < deadline, "never fsynced");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Nothing new: no more fsyncs.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(store.stats().syncs, 1);
}

/// Fills a store in `dir` with 200 retained messages and closes it.
fn filled(dir: &Path) {
    let (store, _) = open(dir);
    for i in 0..200 {
        store.append(StoreOp::PutRetained {
            topic: format!("t/{i}"),
            expires_at_ms: None,
            publish: Bytes::from(vec![i as u8; 100]),
        });
    }
    store.close();
}

/// The files fjall keeps in `dir` (not its lock), with their sizes.
fn store_files(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files.push((entry.path(), meta.len()));
            }
        }
    }
    files.sort();
    files
}

/// The table files of a closed store (fjall writes the memtables out at close).
fn tables(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let tables: Vec<_> = store_files(dir)
        .into_iter()
        .filter(|(path, len)| *len > 0 && path.parent().is_some_and(|p| p.ends_with("tables")))
        .collect();
    assert!(!tables.is_empty(), "a closed store has a table file");
    tables
}

/// A bit flipped in a table file, or a table file cut short, is damage: the store does not
/// open, and the error names the directory and the way out; with `OnCorruption::MoveAside`
/// the directory is renamed and the broker gets an empty store.
#[test]
fn a_damaged_store_is_refused_or_moved_aside() {
    for damage in ["bit flip", "truncated"] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        filled(&data);
        for (path, len) in tables(&data) {
            let mut bytes = std::fs::read(&path).unwrap();
            match damage {
                "bit flip" => bytes[(len / 2) as usize] ^= 0x10,
                _ => bytes.truncate((len / 2) as usize),
            }
            std::fs::write(&path, bytes).unwrap();
        }
        let error = FjallStore::open(StorageConfig::new(&data))
            .err()
            .unwrap_or_else(|| panic!("{damage}: a damaged store opened"));
        assert!(error.is_corruption(), "{damage}: {error}");
        let message = error.to_string();
        assert!(
            message.contains(&data.display().to_string()) && message.contains("move_aside"),
            "{damage}: {message}"
        );
        let mut config = StorageConfig::new(&data);
        config.on_corruption = OnCorruption::MoveAside;
        let (store, recovered) = FjallStore::open(config).expect("moved aside, opened empty");
        assert!(recovered.retained.is_empty(), "{damage}: starts empty");
        store.close();
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("data.corrupt-"))
            .collect();
        assert_eq!(
            aside.len(),
            1,
            "{damage}: the damaged store is kept beside it"
        );
    }
}
