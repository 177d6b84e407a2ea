//! Password authentication over real TCP: Mosquitto password files (made by the real
//! `mosquitto_passwd`, and by us, argon2id included), anonymous access, the per-listener
//! override, the failed-login throttle, reload, `$SYS` counters, and the real `mosquitto_pub`
//! logging in to Hayate.
//!
//! Refusals: a wrong password, an unknown user or a missing password is v5 CONNACK 0x86 (Bad
//! user name or password) and v3 0x05 (not authorised, as Mosquitto answers); a client without
//! a user name where anonymous access is off is 0x87 / 0x05 [MQTT-3.1.4-2].

mod auth_support;

use auth_support::*;
use hayate_auth::password_file::{set_user, PasswordHash};
use hayate_codec::QoS;
use hayate_server::config::ListenerConfig;
use hayate_server::Config;
use hayate_testkit::TestBroker;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn no_throttle(config: &mut Config) {
    config.auth.throttle.enabled = false;
}

async fn broker_with_password_file(path: &Path, allow_anonymous: bool) -> TestBroker {
    let path = path.to_path_buf();
    TestBroker::start_with(move |c| {
        c.auth.password_file = Some(path);
        c.auth.allow_anonymous = allow_anonymous;
        no_throttle(c);
    })
    .await
}

/// Right password admitted, wrong password / unknown user / no password refused, for both
/// protocol families.
async fn check_logins(broker: &TestBroker, users: &[(&str, &str)]) {
    for (n, version) in [V3, V5].into_iter().enumerate() {
        let bad = if version.is_v5() { 0x86 } else { 0x05 };
        for (user, password) in users {
            let id = format!("{user}-{n}");
            let mut client =
                connected(broker, version, &id, Some(user), Some(password.as_bytes())).await;
            client.publish("t", b"x", QoS::AtLeastOnce, false, 1).await;
            let wrong = format!("{password}x");
            expect_connack(
                broker,
                login(version, &id, Some(user), Some(wrong.as_bytes())),
                bad,
            )
            .await;
            expect_connack(broker, login(version, &id, Some(user), None), bad).await;
        }
        expect_connack(
            broker,
            login(version, "nobody", Some("nobody"), Some(b"secret")),
            bad,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_file_made_by_mosquitto_passwd() {
    // The file committed from mosquitto_passwd 2.0.11 ($7$ entries, and a $6$ one).
    let broker = broker_with_password_file(&mosquitto_fixture(), true).await;
    check_logins(&broker, FIXTURE_USERS).await;
    broker.handle.shutdown().await;

    // A fresh one from the installed mosquitto_passwd.
    let Some(tool) = tool_or_skip("mosquitto_passwd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("passwd");
    for (n, (user, password)) in [("carol", "c4rol pw"), ("dave", "d:ave")]
        .iter()
        .enumerate()
    {
        let mut command = std::process::Command::new(&tool);
        if n == 0 {
            command.arg("-c");
        }
        let status = command
            .arg("-b")
            .arg(&path)
            .arg(user)
            .arg(password)
            .status()
            .expect("mosquitto_passwd runs");
        assert!(status.success());
    }
    let broker = broker_with_password_file(&path, true).await;
    check_logins(&broker, &[("carol", "c4rol pw"), ("dave", "d:ave")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_file_written_by_hayate_with_pbkdf2_and_argon2id() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = set_user("", "erin", &PasswordHash::new_pbkdf2_sha512(b"erin-pw")).unwrap();
    let argon = PasswordHash::new_argon2id(b"frank-pw").unwrap();
    let (text, _) = set_user(&text, "frank", &argon).unwrap();
    let path = write(dir.path(), "passwd", &text);
    let broker = broker_with_password_file(&path, true).await;
    check_logins(&broker, &[("erin", "erin-pw"), ("frank", "frank-pw")]).await;
    // Several argon2id logins at once: verified off the worker threads' task queues, so the
    // other connection keeps being served meanwhile.
    let mut other = broker.client(V5, "bystander").await;
    let logins: Vec<_> = (0..4)
        .map(|i| {
            let addr = broker.addr;
            tokio::spawn(async move {
                let mut client = hayate_testkit::RawClient::connect_tcp(addr, V5).await;
                let connack = client
                    .connect(login(
                        V5,
                        &format!("f{i}"),
                        Some("frank"),
                        Some(b"frank-pw"),
                    ))
                    .await;
                connack.reason_code.0
            })
        })
        .collect();
    other.publish("t", b"x", QoS::AtLeastOnce, false, 7).await;
    for login in logins {
        assert_eq!(login.await.unwrap(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_refused_when_off_and_per_listener_override() {
    let path = mosquitto_fixture();
    let broker = TestBroker::start_with(move |c| {
        c.auth.password_file = Some(path);
        c.auth.allow_anonymous = false;
        no_throttle(c);
        // A second listener where anonymous clients are welcome.
        let mut open = ListenerConfig::tcp(([127, 0, 0, 1], 0).into());
        open.name = Some("open".into());
        open.allow_anonymous = Some(true);
        c.listeners.push(open);
    })
    .await;
    for version in [V3, V5] {
        let refused = if version.is_v5() { 0x87 } else { 0x05 };
        expect_connack(&broker, login(version, "anon", None, None), refused).await;
        connected(&broker, version, "named", Some("alice"), Some(b"secret")).await;
    }
    let open_addr = broker.handle.local_addrs()[1];
    let mut client = hayate_testkit::RawClient::connect_tcp(open_addr, V5).await;
    let connack = client.connect(login(V5, "anon", None, None)).await;
    assert_eq!(connack.reason_code.0, 0);
    // Named clients are still checked there.
    let mut client = hayate_testkit::RawClient::connect_tcp(open_addr, V5).await;
    let connack = client
        .connect(login(V5, "named", Some("alice"), Some(b"wrong")))
        .await;
    assert_eq!(connack.reason_code.0, 0x86);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failures_from_one_address_are_refused_fast() {
    let path = mosquitto_fixture();
    let broker = TestBroker::start_with(move |c| {
        c.auth.password_file = Some(path);
        c.auth.throttle.base_delay_ms = 1500;
        c.auth.throttle.max_delay_ms = 1500;
    })
    .await;
    expect_connack(
        &broker,
        login(V5, "a", Some("alice"), Some(b"guess1")),
        0x86,
    )
    .await;
    // Inside the penalty window even the right password is refused, unchecked and at once:
    // v5 0x9F Connection rate exceeded, v3 0x03 server unavailable.
    let started = Instant::now();
    expect_connack(
        &broker,
        login(V5, "a", Some("alice"), Some(b"secret")),
        0x9F,
    )
    .await;
    expect_connack(
        &broker,
        login(V3, "a", Some("alice"), Some(b"secret")),
        0x03,
    )
    .await;
    for n in 0..20 {
        let guess = format!("guess{n}");
        expect_connack(
            &broker,
            login(V5, "a", Some("alice"), Some(guess.as_bytes())),
            0x9F,
        )
        .await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "throttled refusals took {:?}",
        started.elapsed()
    );
    // After the window the right password works (and clears the address).
    tokio::time::sleep(Duration::from_millis(1600).saturating_sub(started.elapsed())).await;
    connected(&broker, V5, "a", Some("alice"), Some(b"secret")).await;
    connected(&broker, V5, "b", Some("bob"), Some(b"pa ss:w0rd!")).await;
    let stats = &broker.handle.broker.stats;
    assert_eq!(stats.auth_failed.load(Ordering::Relaxed), 23);
    assert_eq!(stats.auth_throttled.load(Ordering::Relaxed), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_picks_up_a_changed_password_file_and_keeps_the_old_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let entry = |password: &[u8]| {
        set_user("", "alice", &PasswordHash::new_pbkdf2_sha512(password))
            .unwrap()
            .0
    };
    let path = write(dir.path(), "passwd", &entry(b"first"));
    let broker = broker_with_password_file(&path, true).await;
    connected(&broker, V5, "a", Some("alice"), Some(b"first")).await;

    write(dir.path(), "passwd", &entry(b"second"));
    // Not yet reloaded: the file in force is the one read at start.
    connected(&broker, V5, "a", Some("alice"), Some(b"first")).await;
    broker.handle.broker.hooks.reload();
    expect_connack(&broker, login(V5, "a", Some("alice"), Some(b"first")), 0x86).await;
    connected(&broker, V5, "a", Some("alice"), Some(b"second")).await;

    // A broken file is not taken: the rules in force stay.
    write(dir.path(), "passwd", "alice:$7$not-a-hash\n");
    broker.handle.broker.hooks.reload();
    connected(&broker, V5, "a", Some("alice"), Some(b"second")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_counted_in_sys() {
    let path = mosquitto_fixture();
    let broker = TestBroker::start_with(move |c| {
        c.auth.password_file = Some(path);
        c.server.sys_interval_secs = 1;
        no_throttle(c);
    })
    .await;
    expect_connack(&broker, login(V5, "x", Some("alice"), Some(b"nope")), 0x86).await;
    expect_connack(
        &broker,
        login(V3, "y", Some("mallory"), Some(b"nope")),
        0x05,
    )
    .await;
    let mut watcher = connected(&broker, V5, "w", Some("alice"), Some(b"secret")).await;
    watcher
        .subscribe("$SYS/broker/auth/failed", QoS::AtMostOnce, 1)
        .await;
    // The retained value may predate the failures; the next update (every second) has them.
    for _ in 0..5 {
        let message = watcher.recv_publish().await;
        if &message.payload[..] == b"2" {
            return;
        }
    }
    panic!("$SYS/broker/auth/failed never reported 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_mosquitto_pub_logs_in_with_user_and_password() {
    let Some(pub_tool) = tool_or_skip("mosquitto_pub") else {
        return;
    };
    let broker = broker_with_password_file(&mosquitto_fixture(), false).await;
    let mut watcher = connected(&broker, V5, "watch", Some("bob"), Some(b"pa ss:w0rd!")).await;
    watcher.subscribe("interop/#", QoS::AtLeastOnce, 1).await;
    let run = |version: &'static str, password: &'static str| {
        let tool = pub_tool.clone();
        let port = broker.addr.port().to_string();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(tool)
                .args(["-h", "127.0.0.1", "-p", &port, "-V", version, "-q", "1"])
                .args(["-i", "mosq-pub", "-u", "alice", "-P", password])
                .args(["-t", &format!("interop/{version}"), "-m", "hello"])
                .output()
                .expect("mosquitto_pub runs")
        })
    };
    for version in ["mqttv311", "mqttv5"] {
        let output = run(version, "secret").await.unwrap();
        assert!(output.status.success(), "{output:?}");
        let message = watcher.recv_publish().await;
        assert_eq!(message.topic.as_str(), format!("interop/{version}"));
        let output = run(version, "wrong").await.unwrap();
        assert!(!output.status.success(), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
        assert!(
            stderr.contains("not authori") || stderr.contains("bad user name or password"),
            "{stderr}"
        );
    }
    watcher.expect_nothing(Duration::from_millis(200)).await;
}
