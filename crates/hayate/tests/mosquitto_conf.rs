//! `hayate serve -c mosquitto.conf` end to end: a Mosquitto file with a listener, a password
//! file and an ACL file starts the broker, and MQTT clients (the test kit's, and the real
//! `mosquitto_pub` when installed) are authenticated and authorised as configured. Also
//! `hayate config check` / `config convert` and the refusal to serve a bridge.

use hayate_codec::{ProtocolVersion, QoS};
use hayate_testkit::process::{wait_until_listening, KillOnDrop};
use hayate_testkit::{connect_packet, free_port, RawClient};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");
const V5: ProtocolVersion = ProtocolVersion::V5;

/// The password file written by the real `mosquitto_passwd` 2.0.11 (hayate-auth's fixture):
/// alice / "secret", bob / "pa ss:w0rd!".
fn mosquitto_passwd_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hayate-auth/tests/fixtures/mosquitto-2.0.11.passwd")
}

fn server_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hayate-server/tests/fixtures/mosquitto")
        .join(name)
}

const ACL: &str = "\
# alice owns alice/#; bob reads it and writes shared/#.
user alice
topic readwrite alice/#
topic read shared/#

user bob
topic read alice/#
topic write shared/#
";

fn hayate(args: &[&str]) -> Output {
    Command::new(HAYATE).args(args).output().unwrap()
}

async fn login(addr: SocketAddr, id: &str, user: Option<&str>, password: &str) -> (RawClient, u8) {
    let mut client = RawClient::connect_tcp(addr, V5).await;
    let mut connect = connect_packet(V5, id, true);
    connect.username = user.map(Into::into);
    connect.password = user.map(|_| bytes::Bytes::copy_from_slice(password.as_bytes()));
    let code = client.connect(connect).await.reason_code.0;
    (client, code)
}

/// `mosquitto_pub` from PATH, or `None` with a note.
fn mosquitto_pub() -> Option<&'static str> {
    let found = Command::new("mosquitto_pub")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        eprintln!("note: mosquitto_pub not installed, its part of the test is skipped");
    }
    found.then_some("mosquitto_pub")
}

fn mosquitto_pub_as(addr: SocketAddr, user: &str, password: &str, topic: &str) -> bool {
    let port = addr.port().to_string();
    let args = ["-h", "127.0.0.1", "-p", &port, "-V", "mqttv311", "-q", "1"];
    Command::new("mosquitto_pub")
        .args(args)
        .args([
            "-i", "cli-pub", "-u", user, "-P", password, "-t", topic, "-m", "from-cli",
        ])
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_mosquitto_conf_with_password_and_acl_files() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl");
    std::fs::write(&acl, ACL).unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let conf = dir.path().join("mosquitto.conf");
    let text = format!(
        "# Written as for Mosquitto 2.\npid_file {}\nsys_interval 0\n\nlistener {} 127.0.0.1\nallow_anonymous false\npassword_file {}\nacl_file {}\n",
        dir.path().join("m.pid").display(),
        addr.port(),
        mosquitto_passwd_fixture().display(),
        acl.display()
    );
    std::fs::write(&conf, text).unwrap();
    let log = dir.path().join("log");
    let child = Command::new(HAYATE)
        .args(["serve", "-c"])
        .arg(&conf)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _broker = KillOnDrop(child);
    wait_until_listening(addr).await;

    // Authentication: the users of the password file log in.
    let (mut bob, code) = login(addr, "bob", Some("bob"), "pa ss:w0rd!").await;
    assert_eq!(code, 0);
    let (mut alice, code) = login(addr, "alice", Some("alice"), "secret").await;
    assert_eq!(code, 0);

    // Authorisation: bob may read alice/#, not secret/#; alice may not write bob/#.
    assert_eq!(bob.subscribe("alice/#", QoS::AtLeastOnce, 1).await, [1]);
    assert_eq!(bob.subscribe("secret/#", QoS::AtLeastOnce, 2).await, [0x87]);
    assert_eq!(alice.subscribe("shared/#", QoS::AtLeastOnce, 1).await, [1]);
    assert_eq!(
        alice
            .publish_reason("alice/news", QoS::AtLeastOnce, 1)
            .await,
        0
    );
    assert_eq!(bob.recv_publish().await.topic.as_str(), "alice/news");
    assert_eq!(
        alice.publish_reason("bob/x", QoS::AtLeastOnce, 2).await,
        0x87
    );
    assert_eq!(
        bob.publish_reason("shared/note", QoS::AtLeastOnce, 3).await,
        0
    );
    assert_eq!(alice.recv_publish().await.topic.as_str(), "shared/note");
    assert_eq!(
        alice
            .publish_reason("shared/note", QoS::AtLeastOnce, 4)
            .await,
        0x87
    );

    // The real Mosquitto client, with the same credentials.
    if mosquitto_pub().is_some() {
        assert!(mosquitto_pub_as(addr, "alice", "secret", "alice/cli"));
        assert_eq!(bob.recv_publish().await.topic.as_str(), "alice/cli");
        assert!(!mosquitto_pub_as(addr, "alice", "wrong", "alice/cli"));
        // A failed login opens a short penalty window for this address.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Refusals last: each failure opens a penalty window (v5 0x9F) for this address.
    assert_eq!(login(addr, "anon", None, "").await.1, 0x87);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(login(addr, "alice2", Some("alice"), "wrong").await.1, 0x86);

    // The key without effect was named in the warning line at start.
    let logged = std::fs::read_to_string(&log).unwrap();
    let warning: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("without effect"))
        .collect();
    assert_eq!(warning.len(), 1, "{logged}");
    assert!(warning[0].contains("pid_file (line 2:"), "{logged}");
}

#[test]
fn serve_refuses_a_bridge_setting_it_cannot_run_that_config_check_accepts() {
    let conf = server_fixture("bridge.conf");
    let conf = conf.to_str().unwrap();
    let output = hayate(&["serve", "-c", conf]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        // The bridge's CA file is read at start (the fixture's does not exist here).
        stderr.contains("bridge cloud: bridge_cafile /etc/mosquitto/ca_certificates/cloud-ca.crt"),
        "{stderr}"
    );

    let output = hayate(&["config", "check", conf]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("valid (Mosquitto)"), "{stdout}");
}

#[test]
fn config_check_exit_codes_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "listener 1883 127.0.0.1\n\nmax_conections 10\n").unwrap();
    let output = hayate(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.conf:3: max_conections: unknown key"),
        "{stderr}"
    );

    // A password file that cannot be read fails the check too.
    let missing = dir.path().join("missing.conf");
    std::fs::write(&missing, "password_file /nonexistent/passwd\n").unwrap();
    let output = hayate(&["config", "check", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));

    let toml = dir.path().join("hayate.toml");
    std::fs::write(&toml, "[server]\nlisten = [\"127.0.0.1:1883\"]\n").unwrap();
    let output = hayate(&["config", "check", toml.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("valid (Hayate TOML)"));
}

#[test]
fn config_convert_prints_toml_that_checks_and_warnings_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "listeners-tls.conf",
        "limits-persistence-logging.conf",
        "bridge.conf",
    ] {
        let output = hayate(&["config", "convert", server_fixture(name).to_str().unwrap()]);
        assert!(output.status.success(), "{name}: {output:?}");
        let toml = String::from_utf8(output.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if name == "limits-persistence-logging.conf" {
            assert!(stderr.contains("autosave_interval (line 21:"), "{stderr}");
            assert!(toml.contains("max_inflight_messages = 40"), "{toml}");
        }
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, &toml).unwrap();
        // `config check` reads the password files; check the TOML's syntax and values only.
        let back =
            hayate_server::Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}\n{toml}"));
        assert!(back.listeners.len() + back.server.listen.len() > 0);
    }
    let toml = dir.path().join("x.toml");
    std::fs::write(&toml, "").unwrap();
    let output = hayate(&["config", "convert", toml.to_str().unwrap()]);
    assert!(!output.status.success());
}
