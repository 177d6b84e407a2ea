//! Topic handling for the Hayate MQTT broker.
//!
//! This crate owns:
//! - the topic grammar: validation of topic names and topic filters, and
//!   parsing of `$share/{ShareName}/{filter}` shared subscriptions
//!   (MQTT 5.0 §4.7, §4.8.2);
//! - matching of topic names against filters, including the `$` rule
//!   ([`matches_filter`] is the simple reference matcher);
//! - the subscription index ([`SubscriptionIndex`]), which finds every
//!   subscription matching a published topic without scanning all filters;
//! - the retained-topic tree ([`RetainedTree`]), which finds every retained
//!   message matching a newly subscribed filter.
//!
//! It must not touch sockets, sessions, clocks, the wire codec or an async
//! runtime: everything here is plain, synchronous, lock-free data structures
//! and functions. Callers (the broker core) do the locking, decide which
//! session a key stands for, and decide when a retained message expires
//! (e.g. via [`RetainedTree::retain`]).
//!
//! Spec clauses are cited as `[MQTT-x.y.z-n]` at the code implementing them;
//! numbering follows MQTT 5.0 (OASIS Standard, 7 March 2019).

mod grammar;
mod index;
mod retained;

pub use grammar::{
    matches_filter, parse_shared, topic_level_count, validate_topic_filter, validate_topic_name,
    SharedFilter, TopicError, MAX_TOPIC_LEN,
};
pub use index::SubscriptionIndex;
pub use retained::RetainedTree;
