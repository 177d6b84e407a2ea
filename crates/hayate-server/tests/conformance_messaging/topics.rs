//! Topic names, topic filters and matching (MQTT 5.0 §4.7; 3.1.1 §4.7).

use crate::common::*;
use hayate_codec::{ProtocolVersion, QoS, ReasonCode};
use hayate_testkit::{publish_packet, RawClient, TestBroker};

both_versions!(
    mqtt_4_7_2_1_leading_wildcards_do_not_match_dollar_topics,
    mqtt_4_7_1_1_multi_level_wildcard_matches_parent_level,
    mqtt_4_7_1_2_single_level_wildcard_matches_exactly_one_level,
    mqtt_4_7_3_4_levels_compared_without_normalisation,
    mqtt_3_3_2_2_publish_topic_with_wildcard_closes_connection,
);

/// Subscribes `client` to each filter at QoS 1 (one SUBSCRIBE each, identifier = index + 1 in
/// v5 so a delivery tells which filters matched).
async fn subscribe_all(client: &mut RawClient, filters: &[&str]) {
    for (i, filter) in filters.iter().enumerate() {
        let id = u16::try_from(i + 1).unwrap();
        let codes = if client.version().is_v5() {
            subscribe_with_id(client, filter, opts(QoS::AtLeastOnce), u32::from(id), id).await
        } else {
            client.subscribe(filter, QoS::AtLeastOnce, id).await
        };
        assert_eq!(codes, vec![1], "subscription to {filter:?} refused");
    }
}

/// Publishes each topic at QoS 1 and returns, in order, the topics `subscriber` received.
async fn delivered(
    publisher: &mut RawClient,
    subscriber: &mut RawClient,
    topics: &[&str],
) -> Vec<String> {
    for (i, topic) in topics.iter().enumerate() {
        let id = u16::try_from(i + 1).unwrap();
        publish(
            publisher,
            topic,
            topic.as_bytes(),
            QoS::AtLeastOnce,
            false,
            id,
        )
        .await;
    }
    receive_until_quiet(subscriber, QUIET)
        .await
        .into_iter()
        .map(|p| p.topic.to_string())
        .collect()
}

/// [MQTT-4.7.2-1] "The Server MUST NOT match Topic Filters starting with a wildcard character
/// (# or +) with Topic Names beginning with a $ character" ([3.1.1: MQTT-4.7.2-1]).
async fn mqtt_4_7_2_1_leading_wildcards_do_not_match_dollar_topics(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut wild = client(&broker, version, "wild").await;
    subscribe_all(&mut wild, &["#", "+", "+/x", "+/+", "+/#"]).await;
    let mut dollar = client(&broker, version, "dollar").await;
    subscribe_all(&mut dollar, &["$SYS/#", "$foo", "$SYS/+"]).await;
    let mut publisher = client(&broker, version, "pub").await;
    for (i, topic) in ["$SYS/x", "$foo"].into_iter().enumerate() {
        publish(
            &mut publisher,
            topic,
            b"dollar",
            QoS::AtLeastOnce,
            false,
            i as u16 + 1,
        )
        .await;
    }
    expect_no_publish(&mut wild, "leading wildcard matched a $ topic").await;
    let got = receive_until_quiet(&mut dollar, QUIET).await;
    let topics: Vec<&str> = got.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(topics, ["$SYS/x", "$foo"], "explicit $ filters match");

    // A non-$ topic reaches the wildcard subscriber once.
    publish(&mut publisher, "x", b"plain", QoS::AtLeastOnce, false, 9).await;
    let got = receive_until_quiet(&mut wild, QUIET).await;
    assert_eq!(got.len(), 1);
    if version.is_v5() {
        let mut ids = got[0].properties.subscription_identifiers.clone();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2, 5], "\"x\" matches \"#\", \"+\" and \"+/#\"");
    }
}

/// [MQTT-4.7.1-1] the multi-level wildcard is the last character of the filter; §4.7.1.2:
/// "sport/tennis/player1/#" would receive "sport/tennis/player1" — "#" also matches the
/// parent level, so "sport/#" matches "sport".
async fn mqtt_4_7_1_1_multi_level_wildcard_matches_parent_level(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    subscribe_all(&mut sub, &["sport/#"]).await;
    let mut publisher = client(&broker, version, "pub").await;
    let topics = [
        "sport",
        "sport/tennis",
        "sport/tennis/player1",
        "sport/",
        "sports",
        "sport2/x",
    ];
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(
        got,
        ["sport", "sport/tennis", "sport/tennis/player1", "sport/"]
    );

    let mut all = client(&broker, version, "all").await;
    subscribe_all(&mut all, &["#"]).await;
    let got = delivered(&mut publisher, &mut all, &["a", "/", "a/b/c", "/a"]).await;
    assert_eq!(
        got,
        ["a", "/", "a/b/c", "/a"],
        "\"#\" matches every non-$ topic"
    );
}

/// [MQTT-4.7.1-2] "The single-level wildcard can be used at any level in the Topic Filter,
/// including first and last levels. Where it is used, it MUST occupy an entire level of the
/// filter"; it matches exactly one level, which may be empty (§4.7.1.3).
async fn mqtt_4_7_1_2_single_level_wildcard_matches_exactly_one_level(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    let topics = [
        "sport",
        "sport/",
        "sport/tennis",
        "sport/tennis/player1",
        "/finance",
        "a//b",
    ];

    let mut sub = client(&broker, version, "s1").await;
    subscribe_all(&mut sub, &["sport/+"]).await;
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(got, ["sport/", "sport/tennis"], "sport/+");

    let mut sub = client(&broker, version, "s2").await;
    subscribe_all(&mut sub, &["+"]).await;
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(got, ["sport"], "+");

    let mut sub = client(&broker, version, "s3").await;
    subscribe_all(&mut sub, &["+/+"]).await;
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(got, ["sport/", "sport/tennis", "/finance"], "+/+");

    let mut sub = client(&broker, version, "s4").await;
    subscribe_all(&mut sub, &["/+"]).await;
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(got, ["/finance"], "/+");

    let mut sub = client(&broker, version, "s5").await;
    subscribe_all(&mut sub, &["a/+/b", "+/+/+"]).await;
    let got = delivered(&mut publisher, &mut sub, &["a//b", "a/x/b", "a/b", "//"]).await;
    assert_eq!(got, ["a//b", "a/x/b", "//"], "empty levels are levels");
}

/// [MQTT-4.7.3-4] "When it performs subscription matching the Server MUST NOT perform any
/// normalization of Topic Names or Topic Filters, or any modification or substitution of
/// unrecognized characters": case, empty levels and a trailing "/" all make different topics.
async fn mqtt_4_7_3_4_levels_compared_without_normalisation(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    subscribe_all(&mut sub, &["ACCOUNTS", "a//b", "x/", "caf\u{e9}"]).await;
    let mut publisher = client(&broker, version, "pub").await;
    let topics = [
        "ACCOUNTS",
        "Accounts",
        "accounts",
        "a//b",
        "a/b",
        "a///b",
        "x/",
        "x",
        "caf\u{e9}",
        "cafe\u{301}",
    ];
    let got = delivered(&mut publisher, &mut sub, &topics).await;
    assert_eq!(got, ["ACCOUNTS", "a//b", "x/", "caf\u{e9}"]);
}

/// [MQTT-3.3.2-2] "The Topic Name in the PUBLISH packet MUST NOT contain wildcard characters";
/// the server closes the connection, in v5 with DISCONNECT 0x90 Topic Name invalid (§4.13),
/// and the message is not delivered ([3.1.1: MQTT-3.3.2-2], [3.1.1: MQTT-4.8.0-1]).
async fn mqtt_3_3_2_2_publish_topic_with_wildcard_closes_connection(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    sub.subscribe("#", QoS::AtLeastOnce, 1).await;
    for (i, topic) in ["wild/+", "wild/#", "+", "#", "a/+/b"]
        .into_iter()
        .enumerate()
    {
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            let mut publisher = client(&broker, version, &format!("pub{i}-{}", qos as u8)).await;
            let id = (qos != QoS::AtMostOnce).then_some(1);
            send_publish(
                &mut publisher,
                publish_packet(topic, b"bad", qos, false, id),
            )
            .await;
            expect_server_disconnect(&mut publisher, ReasonCode::TOPIC_NAME_INVALID).await;
        }
    }
    expect_no_publish(&mut sub, "PUBLISH with a wildcard topic was routed").await;
}
