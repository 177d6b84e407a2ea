//! The `hayate` binary end to end: `hayate passwd` writes a password file that `hayate serve`
//! checks, SIGHUP reloads it, and a broker whose password file cannot be read does not start.

use hayate_codec::ProtocolVersion;
use hayate_testkit::{connect_packet, free_port, RawClient};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");

fn passwd(args: &[&str]) {
    let output = Command::new(HAYATE)
        .arg("passwd")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hayate passwd {args:?}: {output:?}"
    );
}

/// Kills the broker when the test ends, however it ends.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(config: &Path) -> Broker {
    let child = Command::new(HAYATE)
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Broker(child)
}

async fn login(addr: SocketAddr, version: ProtocolVersion, user: &str, password: &str) -> u8 {
    let mut client = RawClient::connect_tcp(addr, version).await;
    let mut connect = connect_packet(version, "cli-test", true);
    connect.username = Some(user.into());
    connect.password = Some(bytes::Bytes::copy_from_slice(password.as_bytes()));
    client.connect(connect).await.reason_code.0
}

async fn wait_until_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "hayate serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwd_then_serve_then_sighup_reload() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passwd");
    let file_arg = file.to_str().unwrap();
    passwd(&["-c", "-b", file_arg, "alice", "first"]);
    passwd(&["--argon2id", "-b", file_arg, "bob", "builder"]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("alice:$7$101$") && text.contains("bob:$argon2id$v=19$"),
        "{text}"
    );

    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let config = dir.path().join("hayate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"{addr}\"]\nsys_interval_secs = 0\n\
             [auth]\nallow_anonymous = false\npassword_file = \"{file_arg}\"\n"
        ),
    )
    .unwrap();
    let broker = serve(&config);
    wait_until_listening(addr).await;
    let (v3, v5) = (ProtocolVersion::V311, ProtocolVersion::V5);
    assert_eq!(login(addr, v3, "alice", "first").await, 0);
    assert_eq!(login(addr, v5, "bob", "builder").await, 0);
    assert_eq!(login(addr, v5, "alice", "second").await, 0x86);

    passwd(&["-b", file_arg, "alice", "second"]);
    let status = Command::new("kill")
        .args(["-HUP", &broker.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    // The address may be throttled for a moment after the failure above (0x9F).
    while login(addr, v5, "alice", "second").await != 0 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the password file"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(login(addr, v5, "bob", "builder").await, 0);
    assert_eq!(login(addr, v3, "alice", "first").await, 0x05);
    // A failure opens a penalty window for this address: refused unchecked (v5 0x9F).
    assert_eq!(login(addr, v5, "bob", "builder").await, 0x9F);
}

#[test]
fn serve_refuses_to_start_without_its_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hayate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{}\"]\n[auth]\npassword_file = \"{}\"\n",
            free_port(),
            dir.path().join("missing").display()
        ),
    )
    .unwrap();
    let output = Command::new(HAYATE)
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing"), "{stderr}");
}
