//! SUBSCRIBE / SUBACK and UNSUBSCRIBE / UNSUBACK (MQTT 5.0 §3.8–3.11; 3.1.1 §3.8–3.11), and
//! overlapping subscriptions (§3.3.4).

use crate::common::*;
use hayate_codec::{Properties, ProtocolVersion, QoS};
use hayate_testkit::TestBroker;

both_versions!(
    mqtt_3_9_3_1_suback_codes_in_filter_order,
    mqtt_3_8_4_7_granted_qos_capped_by_server_maximum,
    mqtt_4_7_1_1_invalid_filter_refused_while_others_granted,
    mqtt_3_8_4_3_resubscribe_replaces_subscription,
    mqtt_3_9_3_2_denied_subscription_refused_not_authorized,
    mqtt_3_10_4_2_unsubscribe_stops_delivery,
    mqtt_3_10_4_6_unsubscribe_several_filters_one_unsuback,
    mqtt_3_9_3_2_subscription_quota_exceeded,
    mqtt_3_3_4_2_overlapping_subscriptions_one_copy_at_maximum_qos,
);

/// [MQTT-3.9.3-1] "The order of Reason Codes in the SUBACK packet MUST match the order of
/// Topic Filters in the SUBSCRIBE packet"; [MQTT-3.8.4-5] several filters are handled as a
/// sequence of SUBSCRIBEs with one combined SUBACK ([3.1.1: MQTT-3.9.3-1],
/// [3.1.1: MQTT-3.8.4-4]).
async fn mqtt_3_9_3_1_suback_codes_in_filter_order(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    let filters = [
        ("order/2", opts(QoS::ExactlyOnce)),
        ("order/0", opts(QoS::AtMostOnce)),
        ("order/1", opts(QoS::AtLeastOnce)),
        ("order/+/x", opts(QoS::ExactlyOnce)),
        ("order/#", opts(QoS::AtMostOnce)),
    ];
    let codes = subscribe_many(&mut sub, &filters, Properties::default(), 11).await;
    assert_eq!(codes, vec![2, 0, 1, 2, 0]);
    // Each subscription is in place: "order/1" matches "order/1" (QoS 1) and "order/#" (QoS 0).
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "order/1", b"x", QoS::ExactlyOnce, false, 1).await;
    let got = receive_n(&mut sub, 1).await;
    assert_eq!(got[0].qos, QoS::AtLeastOnce);
    expect_no_publish(&mut sub, "overlapping subscriptions deliver one copy").await;
}

/// [MQTT-3.8.4-7] "This Reason Code MUST either show the maximum QoS that was granted for that
/// Subscription or indicate that the subscription failed"; the server may grant less than
/// requested (§3.8.4), here because `broker.max_qos` is 1 ([3.1.1: MQTT-3.8.4-6]).
async fn mqtt_3_8_4_7_granted_qos_capped_by_server_maximum(version: ProtocolVersion) {
    let broker = TestBroker::start_with(|c| c.broker.max_qos = 1).await;
    let mut sub = client(&broker, version, "sub").await;
    let filters = [
        ("cap/2", opts(QoS::ExactlyOnce)),
        ("cap/1", opts(QoS::AtLeastOnce)),
        ("cap/0", opts(QoS::AtMostOnce)),
    ];
    assert_eq!(
        subscribe_many(&mut sub, &filters, Properties::default(), 1).await,
        vec![1, 1, 0]
    );
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "cap/2", b"x", QoS::AtLeastOnce, false, 1).await;
    let got = receive_n(&mut sub, 1).await;
    assert_eq!(got[0].qos, QoS::AtLeastOnce);
}

/// [MQTT-4.7.1-1] "The multi-level wildcard character MUST be specified either on its own or
/// following a topic level separator. In either case it MUST be the last character specified
/// in the Topic Filter"; [MQTT-4.7.1-2] "+" "MUST occupy an entire level of the filter". An
/// invalid filter gets 0x8F (v5) / 0x80 (3.1.1) while the others in the SUBSCRIBE succeed
/// [MQTT-3.8.4-5].
async fn mqtt_4_7_1_1_invalid_filter_refused_while_others_granted(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    let failure = if version.is_v5() { 0x8F } else { 0x80 };
    let filters = [
        ("good/a", opts(QoS::AtLeastOnce)),
        ("a/#/b", opts(QoS::AtLeastOnce)),
        ("a+", opts(QoS::AtLeastOnce)),
        ("a/b#", opts(QoS::AtLeastOnce)),
        ("+a/b", opts(QoS::AtLeastOnce)),
        ("good/+", opts(QoS::ExactlyOnce)),
    ];
    let codes = subscribe_many(&mut sub, &filters, Properties::default(), 1).await;
    assert_eq!(codes, vec![1, failure, failure, failure, failure, 2]);
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "good/a", b"x", QoS::ExactlyOnce, false, 1).await;
    let got = receive_n(&mut sub, 1).await;
    assert_eq!(
        got[0].qos,
        QoS::ExactlyOnce,
        "maximum QoS of the two valid matching filters"
    );
    expect_no_publish(&mut sub, "one copy").await;
    // The connection is still usable.
    sync(&mut sub).await;
}

/// [MQTT-3.8.4-3] "If a Server receives a SUBSCRIBE packet containing a Topic Filter that is
/// identical to a Non-shared Subscription's Topic Filter for the current Session, then it MUST
/// replace that existing Subscription with a new Subscription" ([3.1.1: MQTT-3.8.4-3]).
async fn mqtt_3_8_4_3_resubscribe_replaces_subscription(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    let mut publisher = client(&broker, version, "pub").await;
    assert_eq!(sub.subscribe("re/t", QoS::AtLeastOnce, 1).await, vec![1]);
    assert_eq!(sub.subscribe("re/t", QoS::ExactlyOnce, 2).await, vec![2]);
    publish(&mut publisher, "re/t", b"up", QoS::ExactlyOnce, false, 1).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(got.len(), 1, "one subscription, one copy: {got:?}");
    assert_eq!(got[0].qos, QoS::ExactlyOnce, "the new subscription's QoS");

    assert_eq!(sub.subscribe("re/t", QoS::AtMostOnce, 3).await, vec![0]);
    publish(&mut publisher, "re/t", b"down", QoS::ExactlyOnce, false, 2).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(got.len(), 1, "one subscription, one copy: {got:?}");
    assert_eq!(got[0].qos, QoS::AtMostOnce, "the new subscription's QoS");
}

/// [MQTT-3.9.3-2] "The Server sending a SUBACK packet MUST use one of the Subscribe Reason
/// Codes for each Topic Filter received": a subscription the server does not authorise is
/// refused with 0x87 Not authorized (v5) / 0x80 Failure (3.1.1 §3.9.3), the others granted.
async fn mqtt_3_9_3_2_denied_subscription_refused_not_authorized(version: ProtocolVersion) {
    let broker =
        TestBroker::start_with(|c| c.auth.deny_subscribe = vec!["test/nosubscribe".into()]).await;
    let mut sub = client(&broker, version, "sub").await;
    let refused = if version.is_v5() { 0x87 } else { 0x80 };
    let filters = [
        ("test/nosubscribe", opts(QoS::AtLeastOnce)),
        ("test/ok", opts(QoS::AtLeastOnce)),
    ];
    assert_eq!(
        subscribe_many(&mut sub, &filters, Properties::default(), 1).await,
        vec![refused, 1]
    );
    let mut publisher = client(&broker, version, "pub").await;
    publish(
        &mut publisher,
        "test/nosubscribe",
        b"secret",
        QoS::AtLeastOnce,
        false,
        1,
    )
    .await;
    publish(
        &mut publisher,
        "test/ok",
        b"fine",
        QoS::AtLeastOnce,
        false,
        2,
    )
    .await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    let topics: Vec<&str> = got.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["test/ok"],
        "only the granted subscription delivers"
    );
}

/// [MQTT-3.10.4-2] "When a Server receives UNSUBSCRIBE It MUST stop adding any new messages
/// which match the Topic Filters, for delivery to the Client"; [MQTT-3.10.4-4]/-5 UNSUBACK with
/// the same Packet Identifier even when nothing was deleted; v5 reason 0x00 Success or 0x11
/// No subscription existed [MQTT-3.11.3-2] ([3.1.1: MQTT-3.10.4-2], [3.1.1: MQTT-3.10.4-4],
/// [3.1.1: MQTT-3.10.4-5]).
async fn mqtt_3_10_4_2_unsubscribe_stops_delivery(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    let mut publisher = client(&broker, version, "pub").await;
    sub.subscribe("un/t", QoS::AtLeastOnce, 1).await;
    sub.subscribe("un/+", QoS::AtLeastOnce, 2).await;
    publish(
        &mut publisher,
        "un/t",
        b"before",
        QoS::AtLeastOnce,
        false,
        1,
    )
    .await;
    assert_eq!(receive_n(&mut sub, 1).await[0].payload, &b"before"[..]);

    let unsuback = unsubscribe_many(&mut sub, &["un/t"], 77).await;
    if version.is_v5() {
        assert_eq!(
            unsuback.reason_codes,
            vec![hayate_codec::ReasonCode::SUCCESS]
        );
    } else {
        assert!(unsuback.reason_codes.is_empty());
    }
    // "un/+" is still there.
    publish(&mut publisher, "un/t", b"still", QoS::AtLeastOnce, false, 2).await;
    assert_eq!(receive_n(&mut sub, 1).await[0].payload, &b"still"[..]);

    let unsuback = unsubscribe_many(&mut sub, &["un/+"], 78).await;
    if version.is_v5() {
        assert_eq!(
            unsuback.reason_codes,
            vec![hayate_codec::ReasonCode::SUCCESS]
        );
    }
    publish(&mut publisher, "un/t", b"after", QoS::AtLeastOnce, false, 3).await;
    expect_no_publish(&mut sub, "no subscription left").await;

    let unsuback = unsubscribe_many(&mut sub, &["un/t"], 79).await;
    if version.is_v5() {
        assert_eq!(
            unsuback.reason_codes,
            vec![hayate_codec::ReasonCode::NO_SUBSCRIPTION_EXISTED]
        );
    } else {
        assert!(unsuback.reason_codes.is_empty());
    }
}

/// [MQTT-3.10.4-6] "If a Server receives an UNSUBSCRIBE packet that contains multiple Topic
/// Filters, it MUST process that packet as if it had received a sequence of multiple
/// UNSUBSCRIBE packets, except that it sends just one UNSUBACK response"; [MQTT-3.11.3-1] v5
/// reason codes in filter order ([3.1.1: MQTT-3.10.4-6]).
async fn mqtt_3_10_4_6_unsubscribe_several_filters_one_unsuback(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    sub.subscribe("multi/a", QoS::AtLeastOnce, 1).await;
    sub.subscribe("multi/c", QoS::AtLeastOnce, 2).await;
    let unsuback = unsubscribe_many(&mut sub, &["multi/a", "multi/b", "multi/c"], 3).await;
    if version.is_v5() {
        let codes: Vec<u8> = unsuback.reason_codes.iter().map(|c| c.0).collect();
        assert_eq!(codes, vec![0x00, 0x11, 0x00]);
    }
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "multi/a", b"x", QoS::AtLeastOnce, false, 1).await;
    publish(&mut publisher, "multi/c", b"x", QoS::AtLeastOnce, false, 2).await;
    expect_no_publish(&mut sub, "both subscriptions removed").await;
    sync(&mut sub).await;
}

/// [MQTT-3.9.3-2] SUBACK uses the Subscribe Reason Codes: a subscription beyond
/// `broker.max_subscriptions_per_client` is refused with 0x97 Quota exceeded (v5) / 0x80
/// (3.1.1), while replacing an existing subscription still succeeds [MQTT-3.8.4-3].
async fn mqtt_3_9_3_2_subscription_quota_exceeded(version: ProtocolVersion) {
    let broker = TestBroker::start_with(|c| c.broker.max_subscriptions_per_client = 2).await;
    let mut sub = client(&broker, version, "sub").await;
    let refused = if version.is_v5() { 0x97 } else { 0x80 };
    let filters = [
        ("quota/1", opts(QoS::AtLeastOnce)),
        ("quota/2", opts(QoS::AtLeastOnce)),
        ("quota/3", opts(QoS::AtLeastOnce)),
    ];
    assert_eq!(
        subscribe_many(&mut sub, &filters, Properties::default(), 1).await,
        vec![1, 1, refused]
    );
    assert_eq!(
        sub.subscribe("quota/2", QoS::ExactlyOnce, 2).await,
        vec![2],
        "replacement"
    );
    assert_eq!(
        sub.subscribe("quota/4", QoS::AtLeastOnce, 3).await,
        vec![refused]
    );
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "quota/3", b"x", QoS::AtLeastOnce, false, 1).await;
    publish(&mut publisher, "quota/4", b"x", QoS::AtLeastOnce, false, 2).await;
    expect_no_publish(&mut sub, "refused subscriptions deliver nothing").await;
    // After an UNSUBSCRIBE there is room again.
    unsubscribe_many(&mut sub, &["quota/1"], 4).await;
    assert_eq!(sub.subscribe("quota/4", QoS::AtLeastOnce, 5).await, vec![1]);
}

/// [MQTT-3.3.4-2] "the Server MUST deliver the message to the Client respecting the maximum
/// QoS of all the matching subscriptions" ([3.1.1: MQTT-3.3.5-1]); this broker sends a single
/// copy, which in v5 then carries the Subscription Identifiers of all matching subscriptions
/// [MQTT-3.3.4-4].
async fn mqtt_3_3_4_2_overlapping_subscriptions_one_copy_at_maximum_qos(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    if version.is_v5() {
        subscribe_with_id(&mut sub, "a/#", opts(QoS::AtLeastOnce), 1, 1).await;
        subscribe_with_id(&mut sub, "a/+", opts(QoS::ExactlyOnce), 2, 2).await;
    } else {
        sub.subscribe("a/#", QoS::AtLeastOnce, 1).await;
        sub.subscribe("a/+", QoS::ExactlyOnce, 2).await;
    }
    let mut publisher = client(&broker, version, "pub").await;
    publish(
        &mut publisher,
        "a/b",
        b"overlap",
        QoS::ExactlyOnce,
        false,
        1,
    )
    .await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(got.len(), 1, "exactly one copy: {got:?}");
    assert_eq!(got[0].qos, QoS::ExactlyOnce);
    if version.is_v5() {
        let mut ids = got[0].properties.subscription_identifiers.clone();
        ids.sort_unstable();
        assert_eq!(
            ids,
            vec![1, 2],
            "[MQTT-3.3.4-4] identifiers of all matching subscriptions"
        );
    }
    // Only "a/#" matches "a/b/c": QoS 1, identifier 1.
    publish(&mut publisher, "a/b/c", b"deep", QoS::ExactlyOnce, false, 2).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(got.len(), 1, "exactly one copy: {got:?}");
    assert_eq!(got[0].qos, QoS::AtLeastOnce);
    if version.is_v5() {
        assert_eq!(got[0].properties.subscription_identifiers, vec![1]);
    }
}
