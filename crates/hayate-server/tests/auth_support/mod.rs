//! Helpers shared by the security tests (auth.rs, acl.rs, enhanced_auth.rs, jwt.rs): CONNECT
//! packets with credentials, files in a temporary directory, the real Mosquitto tools.

#![allow(dead_code)]

use hayate_codec::{ConnAck, Connect, Packet, ProtocolVersion};
use hayate_testkit::{connect_packet, RawClient, Received, TestBroker};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const V3: ProtocolVersion = ProtocolVersion::V311;
pub const V5: ProtocolVersion = ProtocolVersion::V5;

/// The password file made by the real `mosquitto_passwd` 2.0.11, committed in hayate-auth.
pub fn mosquitto_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hayate-auth/tests/fixtures/mosquitto-2.0.11.passwd")
}

/// (user, password) pairs of the fixture.
pub const FIXTURE_USERS: &[(&str, &str)] = &[
    ("alice", "secret"),
    ("bob", "pa ss:w0rd!"),
    ("legacy", "legacy-pw"),
];

/// A CONNECT (clean start, keep alive 60) with optional credentials.
pub fn login(
    version: ProtocolVersion,
    client_id: &str,
    username: Option<&str>,
    password: Option<&[u8]>,
) -> Connect {
    let mut connect = connect_packet(version, client_id, true);
    connect.username = username.map(Into::into);
    connect.password = password.map(bytes::Bytes::copy_from_slice);
    connect
}

/// Sends CONNECT and returns the client with the CONNACK's reason code.
pub async fn try_connect(broker: &TestBroker, connect: Connect) -> (RawClient, ConnAck) {
    let mut client = broker.raw(connect.protocol).await;
    let connack = client.connect(connect).await;
    (client, connack)
}

/// Connects and asserts CONNACK `code`; a refused client must then be disconnected.
pub async fn expect_connack(broker: &TestBroker, connect: Connect, code: u8) -> RawClient {
    let what = format!("{:?} {}", connect.protocol, connect.client_id.as_str());
    let (mut client, connack) = try_connect(broker, connect).await;
    assert_eq!(connack.reason_code.0, code, "{what}: {connack:?}");
    if code != 0 {
        assert!(matches!(
            client.recv_timeout(Duration::from_secs(5)).await,
            Received::Closed
        ));
    }
    client
}

/// A connected client with credentials (panics unless accepted).
pub async fn connected(
    broker: &TestBroker,
    version: ProtocolVersion,
    client_id: &str,
    username: Option<&str>,
    password: Option<&[u8]>,
) -> RawClient {
    expect_connack(broker, login(version, client_id, username, password), 0).await
}

/// Writes `contents` to `name` in `dir`.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write test file");
    path
}

/// A tool from PATH or the usual system directories, or `None` with a printed note.
pub fn tool_or_skip(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        println!("note: {name} is not installed; skipping this part of the test");
    }
    found
}

/// Receives the next packet, which must be an AUTH; returns (reason code, method, data).
pub async fn recv_auth(client: &mut RawClient) -> (u8, Option<String>, Vec<u8>) {
    match client.recv().await {
        Packet::Auth(auth) => (
            auth.reason_code.0,
            auth.properties
                .authentication_method
                .map(|m| m.as_str().to_string()),
            auth.properties
                .authentication_data
                .map(|d| d.to_vec())
                .unwrap_or_default(),
        ),
        other => panic!("expected AUTH, got {other:?}"),
    }
}
