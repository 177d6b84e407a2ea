//! When appended ops become durable: failing writes, groups, tickets and their doorbells.

use crate::common::*;
use hayate_core::store::Store;
use hayate_storage::{Faults, FjallStore, StorageConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// While writes fail nothing more becomes durable and the store says it is not accepting;
/// once they work again it writes everything appended meanwhile, in order, by itself.
#[test]
fn failed_writes_hold_durability_and_recover_by_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let open_faulty = || {
        let mut config = StorageConfig::new(dir.path());
        config.faults = Some(faults.clone());
        FjallStore::open(config).expect("store opens")
    };
    let (store, _) = open_faulty();
    store.append(retain("before", b"1"));
    wait_until(|| store.durable() == store.appended());
    faults.set_failing(true);
    store.append(retain("during", b"2"));
    let during = store.appended();
    wait_until(|| !store.accepting());
    assert!(store.durable() < during, "a failed write is not durable");
    assert!(!store.stats().healthy);
    store.append(enqueue("c", 1, 5, 1));
    store.append(session("c", 60));
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(store.durable() < during, "still failing: still not durable");
    faults.set_failing(false);
    wait_until(|| store.accepting() && store.durable() == store.appended());
    assert!(store.stats().healthy);
    store.close();
    drop(store);
    let (_store, recovered) = open(dir.path());
    let recovered = sorted(recovered);
    assert_eq!(
        recovered
            .retained
            .iter()
            .map(|r| r.0.as_str())
            .collect::<Vec<_>>(),
        vec!["before", "during"]
    );
    assert_eq!(
        recovered.queues.len(),
        1,
        "the backlog was written in order"
    );
    assert_eq!(
        page(&_store, "c", 1, 10),
        vec![(entry(1, 5, 1), stored_message(5))]
    );
}

/// Ops appended while a group is open are written together once it closes, never in part;
/// ops appended before it go on being written.
#[test]
fn a_group_is_written_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    store.append(retain("before", b"1"));
    let group = store.begin_group();
    store.append(enqueue("c", 1, 5, 2));
    wait_until(|| store.durable() == 1);
    store.append(enqueue("d", 1, 5, 2));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(store.durable(), 1, "nothing of an open group is written");
    let batches = store.stats().batches;
    store.end_group(group);
    wait_until(|| store.durable() == store.appended());
    assert_eq!(store.stats().batches, batches + 1, "in one batch");
}

/// Held acknowledgements rely on this: an appended op gets the next ticket, the ticket becomes
/// durable once its batch is committed, and a doorbell registered for it is rung then.
#[test]
fn appended_ops_become_durable_and_ring_their_doorbell() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let dir = tempfile::tempdir().unwrap();
    // An fsync interval of an hour: durable in `batched` means committed, not fsynced.
    let (store, _) = open_with(dir.path(), Duration::from_secs(3600));
    assert_eq!((store.appended(), store.durable()), (0, 0));
    store.append(retain("t/1", b"a"));
    store.append(retain("t/2", b"b"));
    let ticket = store.appended();
    assert_eq!(ticket, 2);
    let doorbell = Arc::new(tokio::sync::Notify::new());
    store.notify_when_durable(ticket, doorbell.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.durable() < ticket {
        assert!(Instant::now() < deadline, "never durable");
        std::thread::sleep(Duration::from_millis(1));
    }
    let rung = std::pin::pin!(doorbell.notified())
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    assert!(rung, "the doorbell was rung when the ticket became durable");
    assert_eq!(store.stats().syncs, 0, "committed, not yet fsynced");
    // Asking for a ticket that is already durable rings at once.
    let late = Arc::new(tokio::sync::Notify::new());
    store.notify_when_durable(1, late.clone());
    let rung = std::pin::pin!(late.notified())
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    assert!(rung);
}
