//! `FjallStore` on a real directory: what is appended comes back after close and reopen, in
//! the order it was appended; a random op sequence ends as an in-memory model says; a writer
//! killed with SIGKILL after its batches were committed loses none of them.

use bytes::Bytes;
use hayate_core::store::{Recovered, SessionRecord, Store, StoreOp, SubscriptionData};
use hayate_storage::{FjallStore, StorageConfig, StorageError};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open(dir: &Path) -> (Arc<FjallStore>, Recovered) {
    FjallStore::open(StorageConfig {
        dir: dir.to_path_buf(),
        sync_interval: Duration::from_millis(200),
    })
    .expect("store opens")
}

fn session(client_id: &str, expiry: u32) -> StoreOp {
    StoreOp::PutSession(SessionRecord {
        client_id: client_id.into(),
        expiry_interval: expiry,
        protocol: 5,
        disconnected_at_ms: Some(1_800_000_000_000),
    })
}

fn subscribe(client_id: &str, filter: &str, options: u8) -> StoreOp {
    StoreOp::PutSubscription {
        client_id: client_id.into(),
        subscription: SubscriptionData {
            filter: filter.into(),
            options,
            subscription_id: Some(7),
        },
    }
}

fn retain(topic: &str, payload: &'static [u8]) -> StoreOp {
    StoreOp::PutRetained {
        topic: topic.into(),
        expires_at_ms: None,
        publish: Bytes::from_static(payload),
    }
}

/// Appends `ops`, closes, reopens, and returns what came back (sorted).
fn round_trip(dir: &Path, ops: Vec<StoreOp>) -> Recovered {
    let (store, _) = open(dir);
    for op in ops {
        store.append(op);
    }
    store.close();
    drop(store);
    let (_store, recovered) = open(dir);
    sorted(recovered)
}

fn sorted(mut recovered: Recovered) -> Recovered {
    recovered.retained.sort_by(|a, b| a.0.cmp(&b.0));
    recovered
        .sessions
        .sort_by(|a, b| a.0.client_id.cmp(&b.0.client_id));
    for (_, subs) in &mut recovered.sessions {
        subs.sort_by(|a, b| a.filter.cmp(&b.filter));
    }
    recovered
}

#[test]
fn every_kind_of_record_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let recovered = round_trip(
        dir.path(),
        vec![
            session("dev-1", 3600),
            subscribe("dev-1", "cmd/#", 0b10_1101),
            subscribe("dev-1", "$share/g/x", 1),
            retain("state/a", b"publish-a"),
            StoreOp::PutRetained {
                topic: "state/b".into(),
                expires_at_ms: Some(42),
                publish: Bytes::from_static(b"publish-b"),
            },
        ],
    );
    assert_eq!(
        recovered.retained,
        vec![
            ("state/a".into(), None, Bytes::from_static(b"publish-a")),
            ("state/b".into(), Some(42), Bytes::from_static(b"publish-b")),
        ]
    );
    assert_eq!(recovered.sessions.len(), 1);
    let (record, subs) = &recovered.sessions[0];
    assert_eq!(record.client_id, "dev-1");
    assert_eq!(record.expiry_interval, 3600);
    assert_eq!(record.disconnected_at_ms, Some(1_800_000_000_000));
    let filters: Vec<(&str, u8)> = subs
        .iter()
        .map(|s| (s.filter.as_str(), s.options))
        .collect();
    assert_eq!(filters, vec![("$share/g/x", 1), ("cmd/#", 0b10_1101)]);
}

#[test]
fn later_ops_win_within_and_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let recovered = round_trip(
        dir.path(),
        vec![
            retain("t/1", b"old"),
            retain("t/1", b"new"),
            retain("t/2", b"gone"),
            StoreOp::DeleteRetained {
                topic: "t/2".into(),
            },
            StoreOp::DeleteRetained {
                topic: "t/3".into(),
            },
            retain("t/3", b"back"),
        ],
    );
    let topics: Vec<(&str, &[u8])> = recovered
        .retained
        .iter()
        .map(|(t, _, p)| (t.as_str(), &p[..]))
        .collect();
    assert_eq!(topics, vec![("t/1", &b"new"[..]), ("t/3", &b"back"[..])]);
    // A second session of appends on top of the first.
    let recovered = round_trip(
        dir.path(),
        vec![StoreOp::DeleteRetained {
            topic: "t/1".into(),
        }],
    );
    assert_eq!(recovered.retained.len(), 1);
}

#[test]
fn deleting_a_session_removes_its_subscriptions_only() {
    let dir = tempfile::tempdir().unwrap();
    let recovered = round_trip(
        dir.path(),
        vec![
            session("a", 60),
            subscribe("a", "x/#", 0),
            session("ab", 60),
            subscribe("ab", "y/#", 0),
            StoreOp::DeleteSession {
                client_id: "a".into(),
            },
            // A new session under the same id after the delete keeps what comes after it.
            session("a", 60),
            subscribe("a", "z", 1),
        ],
    );
    let got: Vec<(String, Vec<String>)> = recovered
        .sessions
        .iter()
        .map(|(r, s)| {
            (
                r.client_id.clone(),
                s.iter().map(|s| s.filter.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".to_string(), vec!["z".to_string()]),
            ("ab".to_string(), vec!["y/#".to_string()]),
        ]
    );
}

#[test]
fn a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, _) = open(dir.path());
    let error = FjallStore::open(StorageConfig {
        dir: dir.path().to_path_buf(),
        sync_interval: Duration::from_millis(200),
    })
    .expect_err("second open");
    assert!(matches!(error, StorageError::Locked { .. }), "{error:?}");
    assert!(error
        .to_string()
        .contains(&dir.path().display().to_string()));
}

/// What a sequence of ops leaves, as plain maps.
#[derive(Debug, Default, PartialEq)]
struct Model {
    retained: BTreeMap<String, Vec<u8>>,
    sessions: BTreeMap<String, u32>,
    subs: BTreeMap<(String, String), u8>,
}

impl Model {
    fn apply(&mut self, op: &StoreOp) {
        match op {
            StoreOp::PutRetained { topic, publish, .. } => {
                self.retained.insert(topic.clone(), publish.to_vec());
            }
            StoreOp::DeleteRetained { topic } => {
                self.retained.remove(topic);
            }
            StoreOp::PutSession(r) => {
                self.sessions.insert(r.client_id.clone(), r.expiry_interval);
            }
            StoreOp::DeleteSession { client_id } => {
                self.sessions.remove(client_id);
                self.subs.retain(|(c, _), _| c != client_id);
            }
            StoreOp::PutSubscription {
                client_id,
                subscription,
            } => {
                self.subs.insert(
                    (client_id.clone(), subscription.filter.clone()),
                    subscription.options,
                );
            }
            StoreOp::DeleteSubscription { client_id, filter } => {
                self.subs.remove(&(client_id.clone(), filter.clone()));
            }
        }
    }

    fn of(recovered: &Recovered) -> Model {
        let mut model = Model::default();
        for (topic, _, publish) in &recovered.retained {
            model.retained.insert(topic.clone(), publish.to_vec());
        }
        for (record, subs) in &recovered.sessions {
            model
                .sessions
                .insert(record.client_id.clone(), record.expiry_interval);
            for sub in subs {
                model
                    .subs
                    .insert((record.client_id.clone(), sub.filter.clone()), sub.options);
            }
        }
        model
    }
}

fn op_strategy() -> impl Strategy<Value = StoreOp> {
    let client = prop::sample::select(vec!["a", "ab", "b", "c"]);
    let name = prop::sample::select(vec!["x", "x/y", "+/y", "#"]);
    prop_oneof![
        (name.clone(), any::<u8>()).prop_map(|(t, b)| StoreOp::PutRetained {
            topic: t.into(),
            expires_at_ms: None,
            publish: Bytes::from(vec![b; 3]),
        }),
        name.clone()
            .prop_map(|t| StoreOp::DeleteRetained { topic: t.into() }),
        (client.clone(), 1u32..100).prop_map(|(c, e)| session(c, e)),
        client.clone().prop_map(|c| StoreOp::DeleteSession {
            client_id: c.into()
        }),
        (client.clone(), name.clone(), 0u8..3).prop_map(|(c, f, o)| subscribe(c, f, o)),
        (client, name).prop_map(|(c, f)| StoreOp::DeleteSubscription {
            client_id: c.into(),
            filter: f.into(),
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_ops_end_as_the_model_says(ops in prop::collection::vec(op_strategy(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = open(dir.path());
        let mut model = Model::default();
        for (i, op) in ops.iter().enumerate() {
            model.apply(op);
            store.append(op.clone());
            if i % 7 == 0 {
                // Let the store thread take several batches.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        store.close();
        drop(store);
        let (_store, recovered) = open(dir.path());
        // Subscriptions of clients without a session are not given back; the model keeps them.
        let sessions = model.sessions.clone();
        model.subs.retain(|(c, _), _| sessions.contains_key(c));
        prop_assert_eq!(Model::of(&recovered), model);
    }
}

const CHILD_ENV: &str = "HAYATE_STORAGE_KILL_CHILD";
const CHILD_OPS: usize = 2_000;

/// The writer process of `committed_batches_survive_kill_9`: appends, waits until the store
/// thread committed everything, says so, and waits to be killed (never closing the store).
#[test]
fn kill_9_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (store, _) = open(Path::new(&dir));
    for i in 0..CHILD_OPS {
        store.append(retain(&format!("t/{i}"), b"payload"));
    }
    while store.stats().ops_committed < CHILD_OPS as u64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("committed");
    std::mem::forget(store);
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
    let stdout = child.stdout.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = BufReader::new(stdout).lines();
    loop {
        assert!(Instant::now() < deadline, "the child never committed");
        match lines.next() {
            Some(Ok(line)) if line.contains("committed") => break,
            Some(_) => continue,
            None => panic!("the child exited: {:?}", child.wait()),
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let (_store, recovered) = open(dir.path());
    assert_eq!(
        recovered.retained.len(),
        CHILD_OPS,
        "every committed op survived"
    );
}
