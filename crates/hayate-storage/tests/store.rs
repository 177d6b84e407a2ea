//! `FjallStore` on a real directory: what is appended comes back after close and reopen, in
//! the order it was appended; a random op sequence ends as an in-memory model says; a writer
//! killed with SIGKILL after its batches were committed (and not fsynced) loses none of them.

#[path = "store/common.rs"]
mod common;
#[path = "store/durability.rs"]
mod durability;
#[path = "store/lifecycle.rs"]
mod lifecycle;
#[path = "store/model.rs"]
mod model;
#[path = "store/round_trips.rs"]
mod round_trips;

use bytes::Bytes;
use common::{open, open_with, session, subscribe, wait_committed};
use hayate_core::store::{Store, StoreOp};
use model::{comparable, Model};
use std::path::Path;
use std::time::Duration;

// The kill -9 tests stay at the crate root: the writer is run again by its exact test name,
// `kill_9_child`, which a module would prefix.

const CHILD_ENV: &str = "HAYATE_STORAGE_KILL9_DIR";
const CHILD_OPS: u64 = 3_000;

/// The ops of the kill -9 writer: retained messages, sessions and their subscriptions, some
/// deleted again.
fn child_op(i: u64) -> StoreOp {
    match i % 3 {
        0 => StoreOp::PutRetained {
            topic: format!("t/{i}"),
            expires_at_ms: Some(i),
            publish: Bytes::from(i.to_be_bytes().to_vec()),
        },
        1 => session(&format!("c{i}"), 60),
        _ => subscribe(&format!("c{}", i - 1), &format!("f/{i}"), 1),
    }
}

/// The writer process of `committed_batches_survive_kill_9` (does nothing in a normal run):
/// appends, waits until the store thread has committed everything, says so, and waits to be
/// killed, never closing the store. Its fsync interval is an hour: nothing it commits is
/// fsynced by it.
#[test]
fn kill_9_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (store, _) = open_with(Path::new(&dir), Duration::from_secs(3600));
    for i in 0..CHILD_OPS {
        store.append(child_op(i));
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    wait_committed(&store, CHILD_OPS);
    let stats = store.stats();
    println!(
        "committed ops={} batches={} syncs={}",
        stats.ops_committed, stats.batches, stats.syncs
    );
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn committed_batches_survive_kill_9() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_9_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("child");
    // libtest prints "test kill_9_child ... " before the child's own output, on that line.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("committed ops=") {
                let _ = tx.send(line[at..].to_string());
                break;
            }
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(line) => line,
        Err(error) => {
            let _ = child.kill();
            panic!(
                "the child never said it committed ({error}): {:?}",
                child.wait()
            );
        }
    };
    eprintln!("child: {line}");
    assert!(line.ends_with("syncs=0"), "the child fsynced: {line}");
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");

    let (store, recovered) = open(dir.path());
    let mut model = Model::default();
    for i in 0..CHILD_OPS {
        model.apply(&child_op(i));
    }
    assert_eq!(recovered.retained.len(), 1_000);
    assert_eq!(recovered.sessions.len(), 1_000);
    assert_eq!(
        comparable(recovered, &store, &model),
        model.recovered(),
        "every committed op survived"
    );
}
