//! Topic mapping between the local and the remote broker, as Mosquitto documents the bridge
//! `topic` line: `topic pattern [[[ out | in | both ] qos-level] local-prefix remote-prefix]`.
//!
//! The local topic is `local_prefix + pattern`, the remote topic is `remote_prefix + pattern`.
//! A message going out on local topic `T` (which matches `local_prefix + pattern`) is published
//! remotely on `remote_prefix + T[local_prefix.len()..]`; a message coming in the other way is
//! mapped back the same way. An empty pattern names one topic: the prefixes themselves.

use crate::config::{BridgeDirection, BridgeTopic};
use hayate_codec::QoS;
use hayate_topic::matches_filter;

/// One `topic` line, ready to subscribe with and to map topics through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRule {
    direction: BridgeDirection,
    qos: QoS,
    local_prefix: String,
    remote_prefix: String,
    /// `local_prefix + pattern`: what the bridge subscribes to locally (out, both).
    local_filter: String,
    /// `remote_prefix + pattern`: what the bridge subscribes to remotely (in, both).
    remote_filter: String,
}

impl TopicRule {
    /// The rule of one configured topic line.
    pub fn new(topic: &BridgeTopic) -> TopicRule {
        TopicRule {
            direction: topic.direction,
            qos: QoS::from_u8(topic.qos.min(2)).unwrap_or(QoS::AtMostOnce),
            local_filter: format!("{}{}", topic.local_prefix, topic.pattern),
            remote_filter: format!("{}{}", topic.remote_prefix, topic.pattern),
            local_prefix: topic.local_prefix.clone(),
            remote_prefix: topic.remote_prefix.clone(),
        }
    }

    /// The maximum QoS of messages on this rule.
    pub fn qos(&self) -> QoS {
        self.qos
    }

    /// Messages go from the local broker to the remote one.
    pub fn is_out(&self) -> bool {
        matches!(self.direction, BridgeDirection::Out | BridgeDirection::Both)
    }

    /// Messages go from the remote broker to the local one.
    pub fn is_in(&self) -> bool {
        matches!(self.direction, BridgeDirection::In | BridgeDirection::Both)
    }

    /// The filter subscribed to on the local broker.
    pub fn local_filter(&self) -> &str {
        &self.local_filter
    }

    /// The filter subscribed to on the remote broker.
    pub fn remote_filter(&self) -> &str {
        &self.remote_filter
    }
}

/// Every topic rule of a bridge, in configuration order (the first matching rule wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicMap {
    rules: Vec<TopicRule>,
}

impl TopicMap {
    /// The map of a bridge's `topic` lines.
    pub fn new(topics: &[BridgeTopic]) -> TopicMap {
        TopicMap {
            rules: topics.iter().map(TopicRule::new).collect(),
        }
    }

    /// Rules that forward local messages out, each subscribed to locally.
    pub fn outgoing(&self) -> impl Iterator<Item = &TopicRule> {
        self.rules.iter().filter(|rule| rule.is_out())
    }

    /// Rules that bring remote messages in, each subscribed to remotely.
    pub fn incoming(&self) -> impl Iterator<Item = &TopicRule> {
        self.rules.iter().filter(|rule| rule.is_in())
    }

    /// The remote topic (and the rule's QoS) of a message received locally on `local`, or
    /// `None` when no outgoing rule covers it.
    pub fn to_remote(&self, local: &str) -> Option<(String, QoS)> {
        self.outgoing().find_map(|rule| {
            let rest = local.strip_prefix(rule.local_prefix.as_str())?;
            matches_filter(&rule.local_filter, local)
                .then(|| (format!("{}{rest}", rule.remote_prefix), rule.qos))
        })
    }

    /// The local topic (and the rule's QoS) of a message received remotely on `remote`, or
    /// `None` when no incoming rule covers it.
    pub fn to_local(&self, remote: &str) -> Option<(String, QoS)> {
        self.incoming().find_map(|rule| {
            let rest = remote.strip_prefix(rule.remote_prefix.as_str())?;
            matches_filter(&rule.remote_filter, remote)
                .then(|| (format!("{}{rest}", rule.local_prefix), rule.qos))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(
        pattern: &str,
        direction: BridgeDirection,
        qos: u8,
        local: &str,
        remote: &str,
    ) -> BridgeTopic {
        BridgeTopic {
            pattern: pattern.into(),
            direction,
            qos,
            local_prefix: local.into(),
            remote_prefix: remote.into(),
        }
    }

    #[test]
    fn no_prefixes_keep_the_topic() {
        let map = TopicMap::new(&[topic("sensors/#", BridgeDirection::Both, 1, "", "")]);
        assert_eq!(
            map.to_remote("sensors/a/b"),
            Some(("sensors/a/b".into(), QoS::AtLeastOnce))
        );
        assert_eq!(
            map.to_local("sensors/a"),
            Some(("sensors/a".into(), QoS::AtLeastOnce))
        );
        assert_eq!(map.to_remote("other/a"), None);
    }

    #[test]
    fn prefixes_are_swapped_both_ways() {
        let map = TopicMap::new(&[topic("#", BridgeDirection::Both, 2, "local/", "remote/")]);
        let rule = map.outgoing().next().expect("one rule");
        assert_eq!(rule.local_filter(), "local/#");
        assert_eq!(rule.remote_filter(), "remote/#");
        assert_eq!(
            map.to_remote("local/x/y"),
            Some(("remote/x/y".into(), QoS::ExactlyOnce))
        );
        assert_eq!(
            map.to_local("remote/x"),
            Some(("local/x".into(), QoS::ExactlyOnce))
        );
        // Not under the prefix: not bridged.
        assert_eq!(map.to_remote("remote/x"), None);
        assert_eq!(map.to_local("local/x"), None);
    }

    #[test]
    fn an_empty_prefix_on_one_side_only() {
        let map = TopicMap::new(&[topic("t/+", BridgeDirection::Out, 0, "", "site1/")]);
        assert_eq!(
            map.to_remote("t/1"),
            Some(("site1/t/1".into(), QoS::AtMostOnce))
        );
        assert_eq!(map.to_remote("t/1/2"), None);
    }

    #[test]
    fn an_empty_pattern_maps_one_topic_to_another() {
        let map = TopicMap::new(&[topic(
            "",
            BridgeDirection::Both,
            1,
            "here/status",
            "there/state",
        )]);
        assert_eq!(
            map.to_remote("here/status"),
            Some(("there/state".into(), QoS::AtLeastOnce))
        );
        assert_eq!(
            map.to_local("there/state"),
            Some(("here/status".into(), QoS::AtLeastOnce))
        );
        assert_eq!(map.to_remote("here/status/x"), None);
    }

    #[test]
    fn directions_select_the_rules() {
        let map = TopicMap::new(&[
            topic("a/#", BridgeDirection::Out, 1, "", ""),
            topic("b/#", BridgeDirection::In, 1, "", ""),
        ]);
        assert!(map.to_remote("a/1").is_some());
        assert_eq!(map.to_local("a/1"), None);
        assert!(map.to_local("b/1").is_some());
        assert_eq!(map.to_remote("b/1"), None);
        assert_eq!(map.outgoing().count(), 1);
        assert_eq!(map.incoming().count(), 1);
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let map = TopicMap::new(&[
            topic("x/#", BridgeDirection::Out, 0, "", "first/"),
            topic("#", BridgeDirection::Out, 2, "", "second/"),
        ]);
        assert_eq!(
            map.to_remote("x/1"),
            Some(("first/x/1".into(), QoS::AtMostOnce))
        );
        assert_eq!(
            map.to_remote("y/1"),
            Some(("second/y/1".into(), QoS::ExactlyOnce))
        );
    }
}
