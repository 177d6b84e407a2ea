//! Interoperability with the real Mosquitto tools.
//!
//! * a committed password file made by `mosquitto_passwd` 2.0.11 verifies;
//! * a fresh file made by the installed `mosquitto_passwd` verifies;
//! * `mosquitto_passwd` accepts (and edits) a file written by `hayate passwd`;
//! * the `mosquitto` broker accepts the `$7$` entries we write (good password: `mosquitto_pub`
//!   exits 0; bad password: it fails);
//! * ACL decisions match a real `mosquitto` broker on the same `acl_file`, for publishing and
//!   for delivery, named and anonymous clients, patterns and deny entries.
//!
//! The tests that need a Mosquitto binary print a note and pass when it is not installed.

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hayate_auth::password_file::{set_user, PasswordFile, PasswordHash};
use hayate_auth::{run_passwd, Access, AclFile, PasswdArgs};

const FIXTURE: &str = include_str!("fixtures/mosquitto-2.0.11.passwd");

/// (user, password) pairs of the fixture.
const FIXTURE_USERS: &[(&str, &str)] = &[
    ("alice", "secret"),
    ("bob", "pa ss:w0rd!"),
    ("legacy", "legacy-pw"),
    ("jürgen", "pässwörd"),
    ("empty", ""),
];

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn tool_or_skip(name: &str) -> Option<PathBuf> {
    let found = find_tool(name);
    if found.is_none() {
        println!("note: {name} is not installed; skipping this test");
    }
    found
}

fn passwd_args(argv: &[&str]) -> PasswdArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: PasswdArgs,
    }
    <Cli as clap::Parser>::parse_from(std::iter::once("passwd").chain(argv.iter().copied())).args
}

#[test]
fn committed_mosquitto_fixture_verifies() {
    let pf = PasswordFile::parse(FIXTURE).unwrap();
    assert_eq!(pf.len(), FIXTURE_USERS.len());
    for (user, pass) in FIXTURE_USERS {
        assert!(pf.verify(user, pass.as_bytes()), "{user}");
        assert!(!pf.verify(user, format!("{pass}x").as_bytes()), "{user}");
    }
    assert!(matches!(
        pf.get("legacy"),
        Some(PasswordHash::Sha512 { .. })
    ));
    assert!(matches!(
        pf.get("alice"),
        Some(PasswordHash::Pbkdf2Sha512 {
            iterations: 101,
            ..
        })
    ));
}

#[test]
fn fresh_mosquitto_passwd_file_verifies() {
    let Some(tool) = tool_or_skip("mosquitto_passwd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pw");
    let users = [
        ("u1", "first password", None),
        ("u2", "sëcond", Some("sha512")),
        ("u3", "third:with:colons", Some("sha512-pbkdf2")),
    ];
    for (i, (user, pass, hash)) in users.iter().enumerate() {
        let mut cmd = Command::new(&tool);
        if let Some(h) = hash {
            cmd.args(["-H", h]);
        }
        if i == 0 {
            cmd.arg("-c");
        }
        let status = cmd.arg("-b").arg(&f).arg(user).arg(pass).status().unwrap();
        assert!(status.success());
    }
    let pf = PasswordFile::load(&f).unwrap();
    for (user, pass, _) in users {
        assert!(pf.verify(user, pass.as_bytes()), "{user}");
        assert!(!pf.verify(user, b"wrong"), "{user}");
    }
}

#[test]
fn mosquitto_passwd_edits_our_file() {
    let Some(tool) = tool_or_skip("mosquitto_passwd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pw");
    let fs_ = f.to_str().unwrap();
    run_passwd(passwd_args(&["-c", "-b", fs_, "ours1", "p1"])).unwrap();
    run_passwd(passwd_args(&["-b", fs_, "ours2", "p2"])).unwrap();
    // mosquitto_passwd reads our file (it refuses "corrupt" lines) and adds a user to it...
    let status = Command::new(&tool)
        .args(["-b", fs_, "theirs", "p3"])
        .status()
        .unwrap();
    assert!(status.success());
    // ...and updates one of ours.
    let status = Command::new(&tool)
        .args(["-b", fs_, "ours1", "p1b"])
        .status()
        .unwrap();
    assert!(status.success());
    let pf = PasswordFile::load(&f).unwrap();
    assert!(pf.verify("ours1", b"p1b"));
    assert!(pf.verify("ours2", b"p2"));
    assert!(pf.verify("theirs", b"p3"));
    // And we edit theirs.
    run_passwd(passwd_args(&["-D", fs_, "ours2"])).unwrap();
    let status = Command::new(&tool)
        .args(["-D", fs_, "theirs"])
        .status()
        .unwrap();
    assert!(status.success());
    let pf = PasswordFile::load(&f).unwrap();
    assert_eq!(pf.usernames().collect::<Vec<_>>(), ["ours1"]);
}

/// A `mosquitto` broker on a free local port, killed on drop.
struct Broker {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_broker(
    mosquitto: &Path,
    password_file: &str,
    acl_file: Option<&str>,
    allow_anonymous: bool,
) -> Broker {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("passwd");
    std::fs::write(&pw, password_file).unwrap();
    let mut conf = String::new();
    for _attempt in 0..5 {
        let port = free_port();
        conf.clear();
        conf.push_str(&format!(
            "listener {port} 127.0.0.1\nallow_anonymous {allow_anonymous}\npassword_file {}\n\
             persistence false\nuser root\n",
            pw.display()
        ));
        if let Some(acl) = acl_file {
            let acl_path = dir.path().join("acl");
            std::fs::write(&acl_path, acl).unwrap();
            conf.push_str(&format!("acl_file {}\n", acl_path.display()));
        }
        let conf_path = dir.path().join("mosquitto.conf");
        std::fs::write(&conf_path, &conf).unwrap();
        let mut child = Command::new(mosquitto)
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // exited: port taken or bad config; try another port
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Broker {
                    child,
                    port,
                    _dir: dir,
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("mosquitto did not start; config:\n{conf}");
}

fn publish(
    pub_tool: &Path,
    broker: &Broker,
    creds: Option<(&str, &str)>,
    client_id: &str,
    topic: &str,
) -> bool {
    publish_payload(pub_tool, broker, creds, client_id, topic, topic)
}

fn publish_payload(
    pub_tool: &Path,
    broker: &Broker,
    creds: Option<(&str, &str)>,
    client_id: &str,
    topic: &str,
    payload: &str,
) -> bool {
    let mut cmd = Command::new(pub_tool);
    cmd.args(["-h", "127.0.0.1", "-p", &broker.port.to_string(), "-q", "1"])
        .args(["-i", client_id, "-t", topic, "-m", payload])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some((u, p)) = creds {
        cmd.args(["-u", u, "-P", p]);
    }
    cmd.status().unwrap().success()
}

#[test]
fn mosquitto_accepts_entries_we_write() {
    let (Some(mosquitto), Some(pub_tool)) =
        (tool_or_skip("mosquitto"), tool_or_skip("mosquitto_pub"))
    else {
        return;
    };
    // A file mixing our $7$ entries with the mosquitto_passwd fixture.
    let (text, _) = set_user(
        FIXTURE,
        "hayate",
        &PasswordHash::new_pbkdf2_sha512(b"w1 th:space"),
    )
    .unwrap();
    let (text, _) = set_user(&text, "alice", &PasswordHash::new_pbkdf2_sha512(b"changed")).unwrap();
    let (text, _) = set_user(
        &text,
        "émile",
        &PasswordHash::new_pbkdf2_sha512(b"\xc3\xa9t\xc3\xa9"),
    )
    .unwrap();
    assert!(PasswordFile::parse(&text)
        .unwrap()
        .verify("hayate", b"w1 th:space"));
    let broker = start_broker(&mosquitto, &text, None, false);
    let ok = |u: &str, p: &str| publish(&pub_tool, &broker, Some((u, p)), "hayate-test", "t");
    assert!(
        ok("hayate", "w1 th:space"),
        "our $7$ entry must be accepted"
    );
    assert!(
        !ok("hayate", "w1 th:spacE"),
        "wrong password must be refused"
    );
    assert!(ok("alice", "changed"), "updated entry accepted");
    assert!(!ok("alice", "secret"), "old password refused");
    assert!(ok("émile", "été"));
    assert!(
        ok("bob", "pa ss:w0rd!"),
        "untouched mosquitto_passwd entries still work"
    );
    assert!(ok("legacy", "legacy-pw"));
    assert!(!ok("nobody", "x"));
}

/// Starts `mosquitto_sub -v -t '#'` and waits until it receives a probe published (by
/// `admin`) on `end/<client_id>` with payload `ready`; lines arrive on the receiver.
fn subscribe_all(
    sub_tool: &Path,
    pub_tool: &Path,
    broker: &Broker,
    creds: Option<(&str, &str)>,
    client_id: &str,
    admin: Option<(&str, &str)>,
) -> (Child, mpsc::Receiver<String>) {
    let mut cmd = Command::new(sub_tool);
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &broker.port.to_string(),
        "-q",
        "1",
        "-v",
    ])
    .args(["-i", client_id, "-t", "#"])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some((u, p)) = creds {
        cmd.args(["-u", u, "-P", p]);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let probe_topic = marker(client_id);
    let ready = format!("{probe_topic} ready");
    let deadline = Instant::now() + Duration::from_secs(10);
    'outer: while Instant::now() < deadline {
        publish_payload(
            pub_tool,
            broker,
            admin,
            "admin-probe",
            &probe_topic,
            "ready",
        );
        let until = Instant::now() + Duration::from_millis(200);
        while let Ok(line) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            if line == ready {
                break 'outer;
            }
        }
    }
    // Drain any duplicate probes still in flight.
    std::thread::sleep(Duration::from_millis(100));
    while rx.try_recv().is_ok() {}
    (child, rx)
}

/// The marker topic of a client: `end/<client id>` with `+` replaced (it cannot be in a topic).
fn marker(client_id: &str) -> String {
    format!("end/{}", client_id.replace('+', "_"))
}

/// Collect the topics of `topic payload` lines until `end` arrives with payload `done`,
/// ignoring the `end/…` marker topics.
fn collect_until(rx: &mpsc::Receiver<String>, end: &str) -> Vec<String> {
    let mut got = Vec::new();
    let done = format!("{end} done");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {done:?} message; got {got:?}"));
        if line == done {
            return got;
        }
        let topic = line.split(' ').next().unwrap_or("").to_owned();
        if !topic.starts_with("end/") {
            got.push(topic);
        }
    }
}

const ACL: &str = "\
# anonymous section
topic read public/#
topic write anon/in

user admin
topic readwrite #

user alice
topic readwrite alice/#
topic deny alice/secret/#
topic read shared/+/status
topic write cmd/alice
topic read end/#

pattern readwrite users/%u/#
pattern deny users/%u/private
pattern read devices/%c/in
pattern write devices/%c/out
pattern read end/%c
";

const TOPICS: &[&str] = &[
    "public/x",
    "public",
    "anon/in",
    "alice/a",
    "alice/a/b",
    "alice/secret",
    "alice/secret/x",
    "shared/dev/status",
    "shared/dev/other",
    "cmd/alice",
    "users/alice/inbox",
    "users/alice/private",
    "users/alice",
    "users/bob/inbox",
    "devices/alicedev/in",
    "devices/alicedev/out",
    "devices/anon1/in",
    "devices/anon1/out",
    "other",
];

#[test]
fn acl_decisions_match_mosquitto() {
    let (Some(mosquitto), Some(pub_tool), Some(sub_tool)) = (
        tool_or_skip("mosquitto"),
        tool_or_skip("mosquitto_pub"),
        tool_or_skip("mosquitto_sub"),
    ) else {
        return;
    };
    let acl = AclFile::parse(ACL).unwrap();
    let mut pw = String::new();
    for (u, p) in [("admin", "admin-pw"), ("alice", "alice-pw")] {
        pw = set_user(&pw, u, &PasswordHash::new_pbkdf2_sha512(p.as_bytes()))
            .unwrap()
            .0;
    }
    let broker = start_broker(&mosquitto, &pw, Some(ACL), true);
    let admin = Some(("admin", "admin-pw"));
    let alice = Some(("alice", "alice-pw"));

    // Delivery (read): alice and an anonymous client subscribe to everything (Mosquitto grants
    // every SUBSCRIBE and filters each message); admin publishes every topic.
    let readers: [(Option<(&str, &str)>, &str); 3] =
        [(alice, "alicedev"), (None, "anon1"), (alice, "bad+id")];
    let mut subs = Vec::new();
    for (creds, cid) in readers {
        let username = creds.map(|(u, _)| u);
        assert!(acl.check(username, cid, &marker(cid), Access::Read));
        subs.push(subscribe_all(
            &sub_tool, &pub_tool, &broker, creds, cid, admin,
        ));
    }
    for t in TOPICS {
        assert!(publish(&pub_tool, &broker, admin, "admin-pub", t));
    }
    for (_, cid) in readers {
        let end = marker(cid);
        assert!(publish_payload(
            &pub_tool,
            &broker,
            admin,
            "admin-pub",
            &end,
            "done"
        ));
    }
    for ((creds, cid), (mut child, rx)) in readers.into_iter().zip(subs) {
        let username = creds.map(|(u, _)| u);
        let end = marker(cid);
        let got = collect_until(&rx, &end);
        let expected: Vec<String> = TOPICS
            .iter()
            .filter(|t| acl.check(username, cid, t, Access::Read))
            .map(|t| t.to_string())
            .collect();
        assert!(!expected.is_empty() && expected.len() < TOPICS.len());
        assert_eq!(got, expected, "delivered to {cid}");
        let _ = child.kill();
        let _ = child.wait();
    }

    // Publishing (write): admin subscribes to everything; each writer publishes every topic.
    let writers: [(Option<(&str, &str)>, &str); 3] =
        [(alice, "alicedev"), (None, "anon1"), (alice, "bad+id")];
    for (creds, cid) in writers {
        let (mut child, rx) =
            subscribe_all(&sub_tool, &pub_tool, &broker, admin, "admin-sub", admin);
        for t in TOPICS {
            // Mosquitto acknowledges a denied QoS 1 publish from a v3.1.1 client and drops it.
            assert!(publish(&pub_tool, &broker, creds, cid, t));
        }
        assert!(publish_payload(
            &pub_tool,
            &broker,
            admin,
            "admin-pub",
            "end/admin-sub",
            "done"
        ));
        let got = collect_until(&rx, "end/admin-sub");
        let username = creds.map(|(u, _)| u);
        let expected: Vec<String> = TOPICS
            .iter()
            .filter(|t| acl.check(username, cid, t, Access::Write))
            .map(|t| t.to_string())
            .collect();
        assert!(!expected.is_empty() && expected.len() < TOPICS.len());
        assert_eq!(got, expected, "published by {cid}");
        let _ = child.kill();
        let _ = child.wait();
    }
}
