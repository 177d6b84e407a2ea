//! Authorisation with a Mosquitto `acl_file`, over real TCP: PUBLISH refused (v5 PUBACK/PUBREC
//! 0x87; v3 acknowledged and dropped, or disconnected when configured), SUBSCRIBE refused
//! (SUBACK v5 0x87 / v3 0x80), and every delivery checked against the subscriber's read
//! access: live messages, retained messages sent on SUBSCRIBE, wills, messages queued for an
//! offline session, shared-subscription groups. `%u`/`%c` patterns and reload.

mod auth_support;

use auth_support::*;
use hayate_codec::{Packet, Properties, ProtocolVersion, QoS};
use hayate_server::security::V3PublishDenied;
use hayate_testkit::{publish_packet, will, RawClient, TestBroker};
use std::path::PathBuf;
use std::time::Duration;

const ACL: &str = "\
# Clients without a user name
topic read public/#

user alice
topic readwrite alice/#
topic read shared/#
topic deny shared/secret/#

user bob
topic write shared/#
topic write public/#
topic read bob/#

user carol
topic read shared/#

pattern readwrite users/%u/#
pattern read clients/%c/inbox
";

const QUIET: Duration = Duration::from_millis(300);

async fn broker_with_acl(
    acl: &str,
    configure: impl FnOnce(&mut hayate_server::Config),
) -> (TestBroker, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "acl", acl);
    let acl_path = path.clone();
    let broker = TestBroker::start_with(move |c| {
        c.auth.acl_file = Some(acl_path);
        configure(c);
    })
    .await;
    (broker, dir, path)
}

async fn as_user(broker: &TestBroker, version: ProtocolVersion, id: &str, user: &str) -> RawClient {
    connected(broker, version, id, Some(user), None).await
}

async fn expect_topics(client: &mut RawClient, topics: &[&str]) {
    for topic in topics {
        let message = client.recv_publish().await;
        assert_eq!(message.topic.as_str(), *topic);
    }
    client.expect_nothing(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_denied_v5_0x87_v3_acknowledged_and_dropped() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    let mut bob = as_user(&broker, V5, "bob", "bob").await;
    assert_eq!(bob.subscribe("bob/#", QoS::AtLeastOnce, 1).await, [1]);
    let mut watcher = as_user(&broker, V5, "alice-watch", "alice").await;
    assert_eq!(watcher.subscribe("alice/#", QoS::AtLeastOnce, 1).await, [1]);
    let mut alice = as_user(&broker, V5, "alice", "alice").await;

    // Not authorized: PUBACK / PUBREC 0x87 (§3.4.2.1, §3.5.2.1), nothing routed.
    assert_eq!(
        alice.publish_reason("bob/x", QoS::AtLeastOnce, 1).await,
        0x87
    );
    assert_eq!(
        alice.publish_reason("bob/y", QoS::ExactlyOnce, 2).await,
        0x87
    );
    // The QoS 2 flow ended with the refusal: the packet id is free again [MQTT-4.3.3-9].
    assert_eq!(
        alice.publish_reason("alice/z", QoS::ExactlyOnce, 2).await,
        0x00
    );
    expect_topics(&mut watcher, &["alice/z"]).await;
    bob.expect_nothing(QUIET).await;

    // v3: acknowledged as usual, dropped.
    let mut alice3 = as_user(&broker, V3, "alice3", "alice").await;
    alice3
        .publish("bob/x", b"m", QoS::AtLeastOnce, false, 5)
        .await;
    alice3
        .publish("bob/x", b"m", QoS::ExactlyOnce, false, 6)
        .await;
    alice3
        .publish("alice/v3", b"m", QoS::AtLeastOnce, false, 7)
        .await;
    expect_topics(&mut watcher, &["alice/v3"]).await;
    bob.expect_nothing(QUIET).await;
    let stats = &broker.handle.broker.stats;
    assert_eq!(
        stats
            .denied_publish
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_publish_denied_disconnects_when_configured() {
    let (broker, _dir, _) = broker_with_acl(ACL, |c| {
        c.auth.v3_publish_denied = V3PublishDenied::Disconnect
    })
    .await;
    let mut alice3 = as_user(&broker, V3, "alice3", "alice").await;
    alice3
        .publish("alice/ok", b"m", QoS::AtLeastOnce, false, 1)
        .await;
    alice3
        .send(Packet::Publish(publish_packet(
            "bob/x",
            b"m",
            QoS::AtLeastOnce,
            false,
            Some(2),
        )))
        .await;
    assert!(alice3.expect_closed().await.is_empty());
    // v5 clients are told instead, and stay.
    let mut alice5 = as_user(&broker, V5, "alice5", "alice").await;
    assert_eq!(
        alice5.publish_reason("bob/x", QoS::AtLeastOnce, 1).await,
        0x87
    );
    assert_eq!(
        alice5.publish_reason("alice/x", QoS::AtLeastOnce, 2).await,
        0x10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_denied_v5_0x87_v3_0x80() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    for version in [V5, V3] {
        let denied = if version.is_v5() { 0x87 } else { 0x80 };
        let mut alice = as_user(&broker, version, "alice", "alice").await;
        assert_eq!(alice.subscribe("bob/#", QoS::AtMostOnce, 1).await, [denied]);
        assert_eq!(
            alice.subscribe("shared/secret/#", QoS::AtMostOnce, 2).await,
            [denied]
        );
        assert_eq!(alice.subscribe("#", QoS::AtMostOnce, 3).await, [denied]);
        // Covered by a read entry; the deny entry inside it is enforced per delivery.
        assert_eq!(alice.subscribe("shared/#", QoS::AtLeastOnce, 4).await, [1]);
        assert_eq!(
            alice
                .subscribe("$share/g/shared/+", QoS::AtLeastOnce, 5)
                .await,
            [1]
        );
        // Write-only access does not allow subscribing.
        let mut bob = as_user(&broker, version, "bob", "bob").await;
        assert_eq!(
            bob.subscribe("shared/#", QoS::AtMostOnce, 1).await,
            [denied]
        );
        // Anonymous clients get the section before the first `user` line.
        let mut anonymous = connected(&broker, version, "anon", None, None).await;
        assert_eq!(
            anonymous.subscribe("public/#", QoS::AtMostOnce, 1).await,
            [0]
        );
        assert_eq!(
            anonymous.subscribe("alice/#", QoS::AtMostOnce, 2).await,
            [denied]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_filtered_for_messages_retained_messages_and_wills() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    let mut alice = as_user(&broker, V5, "alice", "alice").await;
    assert_eq!(alice.subscribe("shared/#", QoS::AtLeastOnce, 1).await, [1]);
    let mut carol = as_user(&broker, V3, "carol", "carol").await;
    assert_eq!(carol.subscribe("shared/#", QoS::AtLeastOnce, 1).await, [1]);

    // Live messages.
    let mut bob = as_user(&broker, V5, "bob", "bob").await;
    bob.publish("shared/open", b"m", QoS::AtLeastOnce, false, 1)
        .await;
    bob.publish("shared/secret/x", b"m", QoS::AtLeastOnce, false, 2)
        .await;
    expect_topics(&mut alice, &["shared/open"]).await;
    expect_topics(&mut carol, &["shared/open", "shared/secret/x"]).await;

    // Retained messages sent on SUBSCRIBE.
    bob.publish("shared/secret/r", b"r", QoS::AtLeastOnce, true, 3)
        .await;
    bob.publish("shared/open/r", b"r", QoS::AtLeastOnce, true, 4)
        .await;
    expect_topics(&mut alice, &["shared/open/r"]).await;
    expect_topics(&mut carol, &["shared/secret/r", "shared/open/r"]).await;
    let mut alice2 = as_user(&broker, V5, "alice2", "alice").await;
    assert_eq!(alice2.subscribe("shared/#", QoS::AtLeastOnce, 1).await, [1]);
    expect_topics(&mut alice2, &["shared/open/r"]).await;

    // Wills: read access of each subscriber...
    for (id, topic) in [
        ("bob-w1", "shared/secret/will"),
        ("bob-w2", "shared/open/will"),
    ] {
        let mut connect = login(V5, id, Some("bob"), None);
        connect.will = Some(will(topic, b"gone", QoS::AtLeastOnce, false));
        let (client, connack) = try_connect(&broker, connect).await;
        assert_eq!(connack.reason_code.0, 0);
        client.drop_connection().await;
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(carol.recv_publish().await.topic.as_str().to_string());
    }
    got.sort();
    assert_eq!(got, ["shared/open/will", "shared/secret/will"]);
    expect_topics(&mut alice, &["shared/open/will"]).await;
    // ...and the write access of the client that set it (carol may only read).
    let mut connect = login(V5, "carol-w", Some("carol"), None);
    connect.will = Some(will("shared/open/carol", b"gone", QoS::AtLeastOnce, false));
    let (client, _) = try_connect(&broker, connect).await;
    client.drop_connection().await;
    alice.expect_nothing(QUIET).await;
    carol.expect_nothing(QUIET).await;
    let stats = &broker.handle.broker.stats;
    assert!(
        stats
            .denied_delivery
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_for_an_offline_session_are_filtered() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    let persistent = || {
        let mut connect = login(V5, "alice-p", Some("alice"), None);
        connect.clean_start = false;
        connect.properties = Properties {
            session_expiry_interval: Some(300),
            ..Properties::default()
        };
        connect
    };
    let mut alice = expect_connack(&broker, persistent(), 0).await;
    assert_eq!(alice.subscribe("shared/#", QoS::AtLeastOnce, 1).await, [1]);
    alice.drop_connection().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut bob = as_user(&broker, V5, "bob", "bob").await;
    bob.publish("shared/secret/q", b"m", QoS::AtLeastOnce, false, 1)
        .await;
    bob.publish("shared/open/q", b"m", QoS::AtLeastOnce, false, 2)
        .await;
    let (mut alice, connack) = try_connect(&broker, persistent()).await;
    assert!(connack.session_present);
    expect_topics(&mut alice, &["shared/open/q"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_group_skips_members_that_may_not_read() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    let mut alice = as_user(&broker, V5, "alice", "alice").await;
    let mut carol = as_user(&broker, V5, "carol", "carol").await;
    for client in [&mut alice, &mut carol] {
        assert_eq!(
            client
                .subscribe("$share/g/shared/#", QoS::AtLeastOnce, 1)
                .await,
            [1]
        );
    }
    let mut bob = as_user(&broker, V5, "bob", "bob").await;
    for id in 1..=6 {
        bob.publish("shared/secret/s", b"m", QoS::AtLeastOnce, false, id)
            .await;
    }
    for _ in 0..6 {
        assert_eq!(carol.recv_publish().await.topic.as_str(), "shared/secret/s");
    }
    alice.expect_nothing(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_substitute_user_name_and_client_id() {
    let (broker, _dir, _) = broker_with_acl(ACL, |_| {}).await;
    let mut alice = as_user(&broker, V5, "alice-dev", "alice").await;
    assert_eq!(
        alice
            .publish_reason("users/alice/x", QoS::AtLeastOnce, 1)
            .await,
        0x10
    );
    assert_eq!(
        alice
            .publish_reason("users/bob/x", QoS::AtLeastOnce, 2)
            .await,
        0x87
    );
    assert_eq!(
        alice.subscribe("users/alice/#", QoS::AtMostOnce, 3).await,
        [0]
    );
    assert_eq!(
        alice.subscribe("users/+/x", QoS::AtMostOnce, 4).await,
        [0x87]
    );
    assert_eq!(
        alice
            .subscribe("clients/alice-dev/inbox", QoS::AtLeastOnce, 5)
            .await,
        [1]
    );
    assert_eq!(
        alice
            .subscribe("clients/other/inbox", QoS::AtMostOnce, 6)
            .await,
        [0x87]
    );
    // %c applies to anonymous clients too; %u patterns do not.
    let mut device = connected(&broker, V3, "dev1", None, None).await;
    assert_eq!(
        device
            .subscribe("clients/dev1/inbox", QoS::AtMostOnce, 1)
            .await,
        [0]
    );
    assert_eq!(
        device.subscribe("users/dev1/#", QoS::AtMostOnce, 2).await,
        [0x80]
    );
    // A client id that would substitute into another subtree gets no pattern rights.
    let mut sneaky = connected(&broker, V5, "dev1/../x", None, None).await;
    assert_eq!(
        sneaky
            .subscribe("clients/dev1/../x/inbox", QoS::AtMostOnce, 1)
            .await,
        [0x87]
    );
    // Alice's own subtree works end to end.
    assert_eq!(
        alice
            .publish_reason("users/alice/y", QoS::AtLeastOnce, 7)
            .await,
        0
    );
    expect_topics(&mut alice, &["users/alice/y"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_reload_takes_new_rules_and_keeps_old_ones_on_error() {
    let (broker, dir, _) = broker_with_acl(ACL, |_| {}).await;
    let mut dave = as_user(&broker, V5, "dave", "dave").await;
    assert_eq!(
        dave.publish_reason("dave/x", QoS::AtLeastOnce, 1).await,
        0x87
    );
    write(
        dir.path(),
        "acl",
        &format!("{ACL}\nuser dave\ntopic readwrite dave/#\n"),
    );
    broker.handle.broker.hooks.reload();
    // Rules apply from the next check on, to clients already connected.
    assert_eq!(
        dave.publish_reason("dave/x", QoS::AtLeastOnce, 2).await,
        0x10
    );
    write(dir.path(), "acl", "user dave\ntopic sometimes dave/#\n");
    broker.handle.broker.hooks.reload();
    assert_eq!(
        dave.publish_reason("dave/x", QoS::AtLeastOnce, 3).await,
        0x10
    );
}
