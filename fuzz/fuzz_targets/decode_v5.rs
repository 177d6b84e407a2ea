//! Decodes arbitrary bytes as an MQTT 5.0 session and checks that every decoded packet
//! survives an encode/decode round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| common::run(data, hayate_codec::ProtocolVersion::V5));
