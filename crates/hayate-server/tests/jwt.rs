//! JWT as the MQTT password, over real TCP: tokens signed here by hand (HMAC with `hmac`, RSA
//! and P-256 with `ring`) are admitted, their claims act as the client's ACL, and expired,
//! badly signed, wrong-user and algorithm-confused tokens are refused (v5 0x86, v3 0x05).

mod auth_support;

use auth_support::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hayate_codec::QoS;
use hayate_server::security::JwtSettings;
use hayate_testkit::TestBroker;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const SECRET: &str = "a shared secret for tests";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(sub: &str, exp: u64) -> String {
    format!(
        r#"{{"sub":"{sub}","exp":{exp},"publish":["{sub}/#"],"subscribe":["news/#","{sub}/#"]}}"#
    )
}

fn signing_input(alg: &str, claims: &str) -> String {
    let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    )
}

fn hs256(secret: &[u8], claims: &str) -> String {
    let input = signing_input("HS256", claims);
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(input.as_bytes());
    let signature = mac.finalize().into_bytes();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hayate-auth/tests/fixtures")
        .join(name)
}

fn pem_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).unwrap();
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(body).unwrap()
}

fn rs256(claims: &str) -> String {
    let key = ring::signature::RsaKeyPair::from_pkcs8(&pem_der(&fixture("jwt-rs256-private.pem")))
        .unwrap();
    let input = signing_input("RS256", claims);
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        input.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

fn es256(claims: &str) -> String {
    let rng = ring::rand::SystemRandom::new();
    let key = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &pem_der(&fixture("jwt-es256-private.pem")),
        &rng,
    )
    .unwrap();
    let input = signing_input("ES256", claims);
    let signature = key.sign(&rng, input.as_bytes()).unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
}

async fn jwt_broker(settings: JwtSettings) -> TestBroker {
    TestBroker::start_with(move |c| {
        c.auth.jwt = Some(settings);
        c.auth.throttle.enabled = false;
    })
    .await
}

fn hmac_settings() -> JwtSettings {
    JwtSettings {
        secret: Some(SECRET.into()),
        ..JwtSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_token_admits_and_its_claims_are_the_acl() {
    let broker = jwt_broker(hmac_settings()).await;
    let token = hs256(SECRET.as_bytes(), &claims("dave", now() + 300));
    // v5 may send the token without a user name: the username claim names the client.
    let mut dave = connected(&broker, V5, "dave-5", None, Some(token.as_bytes())).await;
    assert_eq!(
        dave.publish_reason("dave/x", QoS::AtLeastOnce, 1).await,
        0x10
    );
    assert_eq!(
        dave.publish_reason("erin/x", QoS::AtLeastOnce, 2).await,
        0x87
    );
    assert_eq!(dave.subscribe("news/#", QoS::AtLeastOnce, 3).await, [1]);
    assert_eq!(dave.subscribe("#", QoS::AtLeastOnce, 4).await, [0x87]);
    assert_eq!(dave.subscribe("erin/+", QoS::AtLeastOnce, 5).await, [0x87]);
    // v3 sends the user name, which must match the claim.
    let mut dave3 = connected(&broker, V3, "dave-3", Some("dave"), Some(token.as_bytes())).await;
    assert_eq!(dave3.subscribe("dave/#", QoS::AtLeastOnce, 1).await, [1]);
    assert_eq!(dave3.subscribe("erin/#", QoS::AtLeastOnce, 2).await, [0x80]);
    dave.publish("dave/hello", b"m", QoS::AtLeastOnce, false, 6)
        .await;
    assert_eq!(dave3.recv_publish().await.topic.as_str(), "dave/hello");
    // A token for dave does not log in erin.
    expect_connack(
        &broker,
        login(V5, "erin", Some("erin"), Some(token.as_bytes())),
        0x86,
    )
    .await;
    // With JWT configured (and no password file), a named client must bring a token.
    expect_connack(
        &broker,
        login(V3, "erin", Some("erin"), Some(b"letmein")),
        0x05,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_badly_signed_and_unsigned_tokens_refused() {
    let broker = jwt_broker(hmac_settings()).await;
    let expired = hs256(SECRET.as_bytes(), &claims("dave", now() - 60));
    let forged = hs256(b"another secret", &claims("dave", now() + 300));
    let unsigned = format!("{}.", signing_input("none", &claims("dave", now() + 300)));
    let no_exp = hs256(SECRET.as_bytes(), r##"{"sub":"dave","publish":["#"]}"##);
    for token in [&expired, &forged, &unsigned, &no_exp] {
        expect_connack(&broker, login(V5, "d", None, Some(token.as_bytes())), 0x86).await;
        expect_connack(
            &broker,
            login(V3, "d", Some("dave"), Some(token.as_bytes())),
            0x05,
        )
        .await;
    }
    let failed = broker
        .handle
        .broker
        .stats
        .auth_failed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(failed, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_and_ec_public_keys() {
    for (algorithm, public, sign) in [
        ("RS256", "jwt-rs256-public.pem", rs256 as fn(&str) -> String),
        ("ES256", "jwt-es256-public.pem", es256),
    ] {
        let broker = jwt_broker(JwtSettings {
            algorithms: vec![algorithm.into()],
            public_key_file: Some(fixture(public)),
            ..JwtSettings::default()
        })
        .await;
        let token = sign(&claims("dave", now() + 300));
        let mut dave = connected(&broker, V5, "dave", None, Some(token.as_bytes())).await;
        assert_eq!(
            dave.publish_reason("dave/x", QoS::AtLeastOnce, 1).await,
            0x10
        );
        // Algorithm confusion: an HS256 token keyed with the public key's bytes is refused.
        let public_pem = std::fs::read(fixture(public)).unwrap();
        let confused = hs256(&public_pem, &claims("dave", now() + 300));
        expect_connack(
            &broker,
            login(V5, "d", None, Some(confused.as_bytes())),
            0x86,
        )
        .await;
        let expired = sign(&claims("dave", now() - 60));
        expect_connack(
            &broker,
            login(V5, "d", None, Some(expired.as_bytes())),
            0x86,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_password_file_side_by_side() {
    let path = mosquitto_fixture();
    let broker = TestBroker::start_with(move |c| {
        c.auth.jwt = Some(hmac_settings());
        c.auth.password_file = Some(path);
        c.auth.throttle.enabled = false;
    })
    .await;
    connected(&broker, V3, "alice", Some("alice"), Some(b"secret")).await;
    let token = hs256(SECRET.as_bytes(), &claims("dave", now() + 300));
    connected(&broker, V3, "dave", Some("dave"), Some(token.as_bytes())).await;
    // A token is never checked against the password file (nor a password as a token).
    let alice_token = hs256(b"wrong", &claims("alice", now() + 300));
    expect_connack(
        &broker,
        login(V3, "a", Some("alice"), Some(alice_token.as_bytes())),
        0x05,
    )
    .await;
}
