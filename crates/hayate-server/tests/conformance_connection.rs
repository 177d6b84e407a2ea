//! Black-box conformance tests of the connection life cycle against a real Hayate broker over
//! TCP: CONNECT/CONNACK, sessions, wills, keep alive, and malformed or hostile input, for MQTT
//! 3.1.1 and 5.0 (server side). Each test is named after the specification clause it checks.

#[path = "conformance_connection/common.rs"]
mod common;
#[path = "conformance_connection/connect.rs"]
mod connect;
#[path = "conformance_connection/keepalive.rs"]
mod keepalive;
#[path = "conformance_connection/malformed.rs"]
mod malformed;
#[path = "conformance_connection/session.rs"]
mod session;
#[path = "conformance_connection/will.rs"]
mod will;
