//! Shared subscriptions with the `hash_client_id` strategy: the same publisher's messages go
//! to the same group member, also after its session ended and a new one was made (the strategy
//! hashes the client identifier, not anything tied to one session).

use hayate_codec::QoS;
use hayate_core::SharedStrategy;
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};

/// The index of the member that received `count` messages in one go, after checking that
/// nobody else got any.
fn receiver(members: &mut [TestChannel], count: usize) -> usize {
    let got: Vec<usize> = members
        .iter_mut()
        .map(|member| member.transmit_publishes().len())
        .collect();
    let chosen: Vec<usize> = (0..members.len()).filter(|&i| got[i] > 0).collect();
    assert_eq!(
        chosen.len(),
        1,
        "one member gets a publisher's messages: {got:?}"
    );
    assert_eq!(got[chosen[0]], count, "{got:?}");
    chosen[0]
}

#[test]
fn hash_client_id_keeps_a_publisher_on_one_member_across_sessions() {
    let h = CoreHarness::with_config(|config| {
        config.shared_subscription_strategy = SharedStrategy::HashClientId;
    });
    let mut members: Vec<TestChannel> = (0..5)
        .map(|i| {
            let mut member = h.client(ConnectSpec::v5(&format!("member-{i}")));
            assert_eq!(
                member.subscribe("$share/g/sensors/#", QoS::AtMostOnce),
                vec![0]
            );
            member
        })
        .collect();
    let publishers = [
        "device-a", "device-b", "device-c", "device-d", "device-e", "device-f",
    ];
    let mut first_choice = Vec::new();
    for id in publishers {
        let mut publisher = h.client(ConnectSpec::v5(id));
        for n in 0..3 {
            publisher
                .publish(&format!("sensors/{id}/{n}"), b"x", QoS::AtMostOnce)
                .expect("publish");
        }
        first_choice.push(receiver(&mut members, 3));
        publisher.finish();
    }
    // New sessions (clean start, session expiry 0: the old ones ended) with the same ids; other
    // clients come and go in between, so nothing session-bound (ids handed out in sequence)
    // stays the same by chance.
    for (i, (id, expected)) in publishers.iter().zip(&first_choice).enumerate() {
        for k in 0..=i {
            h.client(ConnectSpec::v5(&format!("other-{i}-{k}")))
                .finish();
        }
        let mut publisher = h.client(ConnectSpec::v5(id));
        for n in 0..3 {
            publisher
                .publish(&format!("sensors/{id}/{n}"), b"y", QoS::AtMostOnce)
                .expect("publish");
        }
        assert_eq!(
            receiver(&mut members, 3),
            *expected,
            "{id} moved to another member after its session was recreated"
        );
        publisher.finish();
    }
}
