//! A v3 client with Mosquitto's bridge bit (protocol level 0x83/0x84): its subscriptions get
//! No Local and Retain As Published, so two bridged brokers do not send messages round in
//! circles and retain flags cross as published.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::publish_packet;

fn v3_client(h: &CoreHarness, client_id: &str, bridge: bool) -> TestChannel {
    let mut spec = ConnectSpec::v311(client_id);
    spec.0.bridge = bridge;
    h.client(spec)
}

fn publish_retained(client: &mut TestChannel, topic: &str, payload: &[u8]) {
    client
        .send(Packet::Publish(publish_packet(
            topic,
            payload,
            QoS::AtMostOnce,
            true,
            None,
        )))
        .expect("publish accepted");
}

#[test]
fn a_v3_bridge_is_not_sent_its_own_messages_and_gets_retain_as_published() {
    let h = CoreHarness::new();
    let mut bridge = v3_client(&h, "bridge", true);
    let mut plain = v3_client(&h, "plain", false);
    assert_eq!(bridge.subscribe("t/#", QoS::AtLeastOnce), vec![1]);
    assert_eq!(plain.subscribe("t/#", QoS::AtLeastOnce), vec![1]);

    // The bridge's own message: to the plain client, not back to the bridge.
    publish_retained(&mut bridge, "t/from-bridge", b"b");
    assert!(
        bridge.transmit_publishes().is_empty(),
        "echoed to the bridge"
    );
    let got = plain.transmit_publishes();
    assert_eq!(got.len(), 1);
    // A plain v3 subscriber sees retain 0 on a live message [MQTT-3.3.1-9].
    assert!(!got[0].retain);

    // The plain client's retained message reaches the bridge with its retain flag.
    publish_retained(&mut plain, "t/from-plain", b"p");
    let got = bridge.transmit_publishes();
    assert_eq!(got.len(), 1);
    assert!(got[0].retain, "retain as published for a bridge");
    // The plain client is sent its own message (no No Local in v3).
    assert_eq!(plain.transmit_publishes().len(), 1);
}

#[test]
fn the_bridge_bit_does_not_apply_to_v5_or_shared_subscriptions() {
    let h = CoreHarness::new();
    let mut spec = ConnectSpec::new(ProtocolVersion::V5, "v5");
    spec.0.bridge = true;
    let mut v5 = h.client(spec);
    v5.subscribe("t/#", QoS::AtMostOnce);
    publish_retained(&mut v5, "t/x", b"x");
    // A v5 client asks for No Local itself; the bit means nothing there.
    assert_eq!(v5.transmit_publishes().len(), 1);

    let mut bridge = v3_client(&h, "bridge", true);
    // No Local is not allowed on a shared subscription: the bridge bit leaves it off there.
    assert_eq!(bridge.subscribe("$share/g/s/#", QoS::AtMostOnce), vec![0]);
    publish_retained(&mut bridge, "s/1", b"s");
    assert_eq!(bridge.transmit_publishes().len(), 1);
}
