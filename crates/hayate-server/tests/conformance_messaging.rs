//! Black-box conformance tests of Hayate's messaging behaviour (server side of MQTT 3.1.1 and
//! MQTT 5.0): QoS flows, subscriptions, topic matching, retained messages, v5 properties,
//! shared subscriptions, flow control, and delivery counts under concurrent load.
//!
//! Every test starts its own in-process broker and talks to it with raw packets. Tests are
//! named after the normative statement they check, using the MQTT 5.0 numbering unless the
//! name says otherwise; the statement itself is quoted in the test's doc comment (with the
//! 3.1.1 number where it differs). Tests that apply to both protocol levels expand into one
//! test per level (`…::v3_1_1` and `…::v5`).

#[macro_use]
#[path = "conformance_messaging/common.rs"]
mod common;

#[path = "conformance_messaging/concurrency.rs"]
mod concurrency;
#[path = "conformance_messaging/flow_control.rs"]
mod flow_control;
#[path = "conformance_messaging/properties_v5.rs"]
mod properties_v5;
#[path = "conformance_messaging/publish_qos.rs"]
mod publish_qos;
#[path = "conformance_messaging/retained.rs"]
mod retained;
#[path = "conformance_messaging/shared.rs"]
mod shared;
#[path = "conformance_messaging/subscribe.rs"]
mod subscribe;
#[path = "conformance_messaging/topics.rs"]
mod topics;
