//! The store's share of a persistent QoS 1 fan-in, without sockets: the op stream one
//! subscriber's session makes (an `Enqueue` per message, its `Dequeue` when the PUBACK comes a
//! few messages later) appended to a real [`FjallStore`] in `batched` mode, a few ops per drain
//! as the broker appends them. It prints the store thread's CPU time per message; run it under
//! `valgrind --tool=callgrind` (or `perf stat -e instructions:u`) for counts that do not
//! depend on the machine's load:
//!
//! ```sh
//! cargo build --release -p hayate-storage --example store-fanin
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/store-fanin 20000      # instructions, whole process
//! ```
//!
//! Arguments: messages (default 100,000), ops per drain (6), PUBACK lag in messages (50).

use bytes::Bytes;
use hayate_core::store::{MessageBody, QueueEntry, SessionRecord, Store, StoreOp};
use hayate_core::Message;
use hayate_storage::{FjallStore, StorageConfig};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let messages = args.next().unwrap_or(100_000);
    let per_drain = args.next().unwrap_or(6).max(1);
    let lag = args.next().unwrap_or(50);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let (store, _) = FjallStore::open(StorageConfig::new(dir.path())).expect("open");
    let client_id = "subscriber";
    store.append(StoreOp::PutSession(SessionRecord {
        client_id: client_id.into(),
        expiry_interval: u32::MAX,
        protocol: 4,
        disconnected_at_ms: None,
        will: None,
    }));
    wait(&store);
    let started = Instant::now();
    let cpu_before = thread_cpu_ms();
    let mut drain = Vec::new();
    for seq in 1..=messages + lag {
        if seq <= messages {
            drain.push(enqueue(client_id, seq));
        }
        if seq > lag {
            drain.push(StoreOp::Dequeue {
                client_id: client_id.into(),
                seq: seq - lag,
                released: false,
            });
        }
        if drain.len() >= per_drain as usize {
            store.append_all(std::mem::take(&mut drain));
            wait(&store);
        }
    }
    store.append_all(drain);
    wait(&store);
    let elapsed = started.elapsed();
    let cpu = thread_cpu_ms() - cpu_before;
    let stats = store.stats();
    println!(
        "{messages} messages, {} batches, {:.1} ops per batch: {:?} wall, store thread \
         {cpu} ms CPU ({:.2} us per message), queued left {}",
        stats.batches,
        stats.ops_committed as f64 / stats.batches.max(1) as f64,
        elapsed,
        cpu as f64 * 1000.0 / messages as f64,
        stats.queued,
    );
}

fn enqueue(client_id: &str, seq: u64) -> StoreOp {
    let message = Message::new(
        "fanin/publisher/42".into(),
        Bytes::from(vec![0x5a; 64]),
        hayate_codec::QoS::AtLeastOnce,
        false,
        Default::default(),
        None,
        Some(1),
    );
    StoreOp::Enqueue {
        client_id: client_id.into(),
        entry: QueueEntry {
            seq,
            message_id: seq,
            qos: 1,
            retain: false,
            subscription_ids: Vec::new(),
            shared_group: None,
        },
        body: MessageBody {
            expires_at_ms: None,
            message: Arc::new(message),
        },
    }
}

/// Waits until everything appended so far is committed.
fn wait(store: &FjallStore) {
    let target = store.appended();
    while store.durable() < target {
        std::thread::yield_now();
    }
}

/// CPU time of the `hayate-store` thread so far, in milliseconds (Linux).
fn thread_cpu_ms() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == "hayate-store" {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split(' ').collect();
            let ticks: u64 = fields.get(11).and_then(|t| t.parse().ok()).unwrap_or(0)
                + fields.get(12).and_then(|t| t.parse().ok()).unwrap_or(0);
            return ticks * 10; // USER_HZ is 100 on Linux
        }
    }
    0
}
