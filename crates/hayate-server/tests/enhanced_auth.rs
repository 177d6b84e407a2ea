//! MQTT v5 enhanced authentication over real TCP (sections 3.1.2.11.9/10, 3.15, 4.12) with
//! SCRAM-SHA-256 and SCRAM-SHA-512. The client side is computed here from RFC 5802 with
//! `sha2`/`hmac`/`pbkdf2` directly, independently of the broker's SCRAM code, and checks the
//! server's signature too.

mod auth_support;

use auth_support::*;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hayate_auth::{Mechanism, ScramCredentials};
use hayate_codec::{Auth, ByteStr, Connect, Disconnect, Packet, Properties, QoS, ReasonCode};
use hayate_testkit::{RawClient, Received, TestBroker};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256, Sha512};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SCRAM_256: &str = "SCRAM-SHA-256";
const SCRAM_512: &str = "SCRAM-SHA-512";

/// The client side of SCRAM (RFC 5802 section 3), for SHA-256 or SHA-512.
struct ScramClient {
    sha512: bool,
    password: Vec<u8>,
    nonce: String,
    client_first_bare: String,
    server_signature: Vec<u8>,
}

impl ScramClient {
    fn new(method: &str, user: &str, password: &str) -> ScramClient {
        let nonce = STANDARD.encode(rand::random::<[u8; 18]>());
        let user = user.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            sha512: method == SCRAM_512,
            password: password.as_bytes().to_vec(),
            client_first_bare: format!("n={user},r={nonce}"),
            nonce,
            server_signature: Vec::new(),
        }
    }

    fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        if self.sha512 {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).unwrap();
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        } else {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }

    fn hash(&self, data: &[u8]) -> Vec<u8> {
        if self.sha512 {
            Sha512::digest(data).to_vec()
        } else {
            Sha256::digest(data).to_vec()
        }
    }

    /// `n,,n=user,r=nonce` (GS2 header: no channel binding, no authzid).
    fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// From server-first (`r=…,s=…,i=…`), the client-final message with the proof.
    fn client_final(&mut self, server_first: &[u8]) -> Vec<u8> {
        let server_first = std::str::from_utf8(server_first).unwrap();
        let field = |key: &str| {
            server_first
                .split(',')
                .find_map(|part| part.strip_prefix(key))
                .unwrap_or_else(|| panic!("server-first {server_first:?} lacks {key}"))
        };
        let nonce = field("r=");
        assert!(nonce.starts_with(&self.nonce) && nonce.len() > self.nonce.len());
        let salt = STANDARD.decode(field("s=")).unwrap();
        let iterations: u32 = field("i=").parse().unwrap();
        let mut salted = vec![0u8; if self.sha512 { 64 } else { 32 }];
        if self.sha512 {
            pbkdf2::pbkdf2_hmac::<Sha512>(&self.password, &salt, iterations, &mut salted);
        } else {
            pbkdf2::pbkdf2_hmac::<Sha256>(&self.password, &salt, iterations, &mut salted);
        }
        let client_key = self.hmac(&salted, b"Client Key");
        let stored_key = self.hash(&client_key);
        // c=biws is base64("n,,").
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = self.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = self.hmac(&salted, b"Server Key");
        self.server_signature = self.hmac(&server_key, auth_message.as_bytes());
        format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes()
    }

    /// Checks server-final (`v=…`): the server knew the credentials too.
    fn verify_server_final(&self, server_final: &[u8]) {
        let expected = format!("v={}", STANDARD.encode(&self.server_signature));
        assert_eq!(std::str::from_utf8(server_final).unwrap(), expected);
    }
}

fn scram_connect(method: &str, client_id: &str, data: Vec<u8>) -> Connect {
    let mut connect = login(V5, client_id, None, None);
    connect.properties = Properties {
        authentication_method: Some(method.into()),
        authentication_data: Some(data.into()),
        ..Properties::default()
    };
    connect
}

fn auth_packet(reason: u8, method: Option<&str>, data: Vec<u8>) -> Packet {
    Packet::Auth(Auth {
        reason_code: ReasonCode(reason),
        properties: Properties {
            authentication_method: method.map(ByteStr::from),
            authentication_data: Some(data.into()),
            ..Properties::default()
        },
    })
}

/// A SCRAM file with alice (password "wonderland") for both mechanisms, and bob.
fn scram_file(dir: &std::path::Path) -> PathBuf {
    let mut text = String::from("# test credentials\n");
    for (user, password) in [("alice", "wonderland"), ("bob", "builder")] {
        for mechanism in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let credentials = ScramCredentials::generate(mechanism, password.as_bytes());
            text = hayate_auth::scram_file::set_user(&text, user, &credentials)
                .unwrap()
                .0;
        }
    }
    write(dir, "scram", &text)
}

async fn scram_broker(
    configure: impl FnOnce(&mut hayate_server::Config),
) -> (TestBroker, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let scram = scram_file(dir.path());
    let acl = write(dir.path(), "acl", "user alice\ntopic readwrite alice/#\n");
    let broker = TestBroker::start_with(move |c| {
        c.auth.scram_file = Some(scram);
        c.auth.acl_file = Some(acl);
        c.auth.throttle.enabled = false;
        configure(c);
    })
    .await;
    (broker, dir)
}

/// Runs the whole exchange; returns the client and the CONNACK's reason code.
async fn scram_login(
    broker: &TestBroker,
    method: &str,
    client_id: &str,
    user: &str,
    password: &str,
) -> (RawClient, u8) {
    let mut scram = ScramClient::new(method, user, password);
    let mut client = broker.raw(V5).await;
    client
        .send(Packet::Connect(Box::new(scram_connect(
            method,
            client_id,
            scram.client_first(),
        ))))
        .await;
    let (reason, sent_method, server_first) = match client.recv().await {
        Packet::Auth(auth) => (
            auth.reason_code.0,
            auth.properties.authentication_method,
            auth.properties.authentication_data.unwrap_or_default(),
        ),
        Packet::ConnAck(connack) => return (client, connack.reason_code.0),
        other => panic!("expected AUTH, got {other:?}"),
    };
    // [MQTT-4.12.0-2] AUTH 0x18; [MQTT-4.12.0-5] with the CONNECT's method.
    assert_eq!(reason, 0x18);
    assert_eq!(sent_method.as_deref(), Some(method));
    let client_final = scram.client_final(&server_first);
    client
        .send(auth_packet(0x18, Some(method), client_final))
        .await;
    match client.recv().await {
        Packet::ConnAck(connack) => {
            if connack.reason_code.0 == 0 {
                // [MQTT-4.12.0-5] the successful CONNACK carries the method and server-final.
                let properties = &connack.properties;
                assert_eq!(properties.authentication_method.as_deref(), Some(method));
                scram.verify_server_final(properties.authentication_data.as_deref().unwrap());
            } else {
                assert!(connack.properties.authentication_method.is_none());
            }
            (client, connack.reason_code.0)
        }
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

async fn expect_refused_and_closed(client: &mut RawClient, code: u8) {
    match client.recv().await {
        Packet::ConnAck(connack) => assert_eq!(connack.reason_code.0, code, "{connack:?}"),
        other => panic!("expected CONNACK {code:#x}, got {other:?}"),
    }
    assert!(client.expect_closed().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha256_and_sha512_full_exchange() {
    let (broker, _dir) = scram_broker(|_| {}).await;
    for method in [SCRAM_256, SCRAM_512] {
        let (mut client, code) = scram_login(&broker, method, "c1", "alice", "wonderland").await;
        assert_eq!(code, 0, "{method}");
        // The proved user name is the one the ACL sees.
        assert_eq!(
            client.publish_reason("alice/x", QoS::AtLeastOnce, 1).await,
            0x10
        );
        assert_eq!(
            client.publish_reason("bob/x", QoS::AtLeastOnce, 2).await,
            0x87
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha512_against_a_mosquitto_password_file() {
    let path = mosquitto_fixture();
    let broker = TestBroker::start_with(move |c| {
        c.auth.password_file = Some(path);
        c.auth.throttle.enabled = false;
    })
    .await;
    let (_client, code) = scram_login(&broker, SCRAM_512, "m", "alice", "secret").await;
    assert_eq!(code, 0);
    let (_client, code) = scram_login(&broker, SCRAM_512, "m", "alice", "wrong").await;
    assert_eq!(code, 0x87);
    // A $7$ hash is no SCRAM-SHA-256 credential: the method is not offered.
    let (_client, code) = scram_login(&broker, SCRAM_256, "m", "alice", "secret").await;
    assert_eq!(code, 0x8C);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_proof_unknown_user_and_other_user_refused_0x87() {
    let (broker, _dir) = scram_broker(|_| {}).await;
    for method in [SCRAM_256, SCRAM_512] {
        let (mut client, code) = scram_login(&broker, method, "c", "alice", "looking-glass").await;
        assert_eq!(code, 0x87);
        assert!(client.expect_closed().await.is_empty());
        // Unknown users go through the same exchange and fail the same way.
        let (_, code) = scram_login(&broker, method, "c", "mallory", "x").await;
        assert_eq!(code, 0x87);
    }
    // The CONNECT's user name must be the one the exchange proves.
    let mut scram = ScramClient::new(SCRAM_256, "bob", "builder");
    let mut connect = scram_connect(SCRAM_256, "c", scram.client_first());
    connect.username = Some("alice".into());
    let mut client = broker.raw(V5).await;
    client.send(Packet::Connect(Box::new(connect))).await;
    let (_, _, server_first) = recv_auth(&mut client).await;
    let client_final = scram.client_final(&server_first);
    client
        .send(auth_packet(0x18, Some(SCRAM_256), client_final))
        .await;
    expect_refused_and_closed(&mut client, 0x87).await;
    let failed = broker
        .handle
        .broker
        .stats
        .auth_failed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(failed, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_refused_0x8c() {
    let (broker, _dir) = scram_broker(|_| {}).await;
    for method in ["SCRAM-SHA-1", "PLAIN", "scram-sha-256"] {
        let mut client = broker.raw(V5).await;
        client
            .send(Packet::Connect(Box::new(scram_connect(
                method,
                "c",
                b"x".to_vec(),
            ))))
            .await;
        // [MQTT-4.12.0-1] CONNACK 0x8C and close; never an AUTH.
        expect_refused_and_closed(&mut client, 0x8C).await;
    }
    // Without any SCRAM credentials configured, SCRAM is unknown too.
    let broker = TestBroker::start().await;
    let scram = ScramClient::new(SCRAM_256, "alice", "wonderland");
    let mut client = broker.raw(V5).await;
    client
        .send(Packet::Connect(Box::new(scram_connect(
            SCRAM_256,
            "c",
            scram.client_first(),
        ))))
        .await;
    expect_refused_and_closed(&mut client, 0x8C).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reauthentication_while_connected() {
    let (broker, _dir) = scram_broker(|_| {}).await;
    let (mut client, code) = scram_login(&broker, SCRAM_256, "re", "alice", "wonderland").await;
    assert_eq!(code, 0);
    assert_eq!(client.subscribe("alice/#", QoS::AtLeastOnce, 1).await, [1]);

    // [MQTT-4.12.1-1] AUTH 0x19 with the same method starts it; other packets keep flowing.
    let mut scram = ScramClient::new(SCRAM_256, "alice", "wonderland");
    client
        .send(auth_packet(0x19, Some(SCRAM_256), scram.client_first()))
        .await;
    let (reason, method, server_first) = recv_auth(&mut client).await;
    assert_eq!((reason, method.as_deref()), (0x18, Some(SCRAM_256)));
    client
        .publish("alice/during", b"m", QoS::AtLeastOnce, false, 2)
        .await;
    assert_eq!(client.recv_publish().await.topic.as_str(), "alice/during");
    let client_final = scram.client_final(&server_first);
    client
        .send(auth_packet(0x18, Some(SCRAM_256), client_final))
        .await;
    let (reason, method, server_final) = recv_auth(&mut client).await;
    assert_eq!((reason, method.as_deref()), (0x00, Some(SCRAM_256)));
    scram.verify_server_final(&server_final);
    assert_eq!(
        client.publish_reason("bob/x", QoS::AtLeastOnce, 3).await,
        0x87
    );

    // A failed re-authentication: DISCONNECT 0x87 and close [MQTT-4.12.1-2].
    let mut scram = ScramClient::new(SCRAM_256, "alice", "not-the-password");
    client
        .send(auth_packet(0x19, Some(SCRAM_256), scram.client_first()))
        .await;
    let (_, _, server_first) = recv_auth(&mut client).await;
    let client_final = scram.client_final(&server_first);
    client
        .send(auth_packet(0x18, Some(SCRAM_256), client_final))
        .await;
    let closing = client.expect_closed().await;
    assert!(
        matches!(closing.as_slice(), [Packet::Disconnect(d)] if d.reason_code.0 == 0x87),
        "{closing:?}"
    );

    // Re-authenticating as somebody else is refused too.
    let (mut client, _) = scram_login(&broker, SCRAM_256, "re", "alice", "wonderland").await;
    let mut scram = ScramClient::new(SCRAM_256, "bob", "builder");
    client
        .send(auth_packet(0x19, Some(SCRAM_256), scram.client_first()))
        .await;
    let (_, _, server_first) = recv_auth(&mut client).await;
    client
        .send(auth_packet(
            0x18,
            Some(SCRAM_256),
            scram.client_final(&server_first),
        ))
        .await;
    let closing = client.expect_closed().await;
    assert!(
        matches!(closing.as_slice(), [Packet::Disconnect(d)] if d.reason_code.0 == 0x87),
        "{closing:?}"
    );
}

/// Protocol errors around AUTH: CONNACK 0x82 before the CONNACK, DISCONNECT 0x82 after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_protocol_errors() {
    let (broker, _dir) = scram_broker(|_| {}).await;
    let started = |client_id: &'static str| {
        let broker = &broker;
        async move {
            let scram = ScramClient::new(SCRAM_256, "alice", "wonderland");
            let mut client = broker.raw(V5).await;
            client
                .send(Packet::Connect(Box::new(scram_connect(
                    SCRAM_256,
                    client_id,
                    scram.client_first(),
                ))))
                .await;
            assert_eq!(recv_auth(&mut client).await.0, 0x18);
            client
        }
    };
    // During the exchange: AUTH without a method (3.15.2.2.2), with another method
    // [MQTT-4.12.0-5], with a reason other than 0x18 [MQTT-4.12.0-3], or another packet.
    let mut client = started("p1").await;
    client
        .send(Packet::Auth(Auth {
            reason_code: ReasonCode(0x18),
            properties: Properties::default(),
        }))
        .await;
    expect_refused_and_closed(&mut client, 0x82).await;
    let mut client = started("p2").await;
    client
        .send(auth_packet(0x18, Some(SCRAM_512), b"c=biws".to_vec()))
        .await;
    expect_refused_and_closed(&mut client, 0x82).await;
    let mut client = started("p3").await;
    client
        .send(auth_packet(0x19, Some(SCRAM_256), b"n,,n=a,r=b".to_vec()))
        .await;
    expect_refused_and_closed(&mut client, 0x82).await;
    let mut client = started("p4").await;
    client.send(Packet::PingReq).await;
    expect_refused_and_closed(&mut client, 0x82).await;
    // The client may give up with DISCONNECT.
    let mut client = started("p5").await;
    client
        .send(Packet::Disconnect(Disconnect {
            reason_code: ReasonCode(0),
            properties: Properties::default(),
        }))
        .await;
    assert!(client.expect_closed().await.is_empty());

    // After CONNACK: AUTH 0x18 with no re-authentication under way, AUTH 0x00, a changed
    // method.
    for (reason, method) in [(0x18, SCRAM_256), (0x00, SCRAM_256), (0x19, SCRAM_512)] {
        let (mut client, code) = scram_login(&broker, SCRAM_256, "q", "alice", "wonderland").await;
        assert_eq!(code, 0);
        client
            .send(auth_packet(
                reason,
                Some(method),
                b"n,,n=alice,r=x".to_vec(),
            ))
            .await;
        let closing = client.expect_closed().await;
        assert!(
            matches!(closing.as_slice(), [Packet::Disconnect(d)] if d.reason_code.0 == 0x82),
            "{reason:#x} {method}: {closing:?}"
        );
    }
    // A client that named no method must not send AUTH at all [MQTT-4.12.0-7].
    let mut client = broker.client(V5, "plain").await;
    client
        .send(auth_packet(
            0x19,
            Some(SCRAM_256),
            b"n,,n=alice,r=x".to_vec(),
        ))
        .await;
    let closing = client.expect_closed().await;
    assert!(matches!(closing.as_slice(), [Packet::Disconnect(d)] if d.reason_code.0 == 0x82));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_exchange_ends_at_the_connect_timeout() {
    let (broker, _dir) = scram_broker(|c| c.server.connect_timeout_secs = 1).await;
    let scram = ScramClient::new(SCRAM_256, "alice", "wonderland");
    let mut client = broker.raw(V5).await;
    let started = Instant::now();
    client
        .send(Packet::Connect(Box::new(scram_connect(
            SCRAM_256,
            "slow",
            scram.client_first(),
        ))))
        .await;
    assert_eq!(recv_auth(&mut client).await.0, 0x18);
    assert!(matches!(
        client.recv_timeout(Duration::from_secs(4)).await,
        Received::Closed
    ));
    assert!(started.elapsed() < Duration::from_secs(3));
}
