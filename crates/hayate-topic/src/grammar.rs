//! Topic grammar: validation of names and filters, the reference matcher, and
//! shared-subscription parsing. Clause numbers refer to MQTT 5.0 (OASIS
//! Standard, 7 March 2019), chapter 4.7 "Topic Names and Topic Filters" and
//! 4.8.2 "Shared Subscriptions".

/// Why a topic name or topic filter was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The name or filter is the empty string [MQTT-4.7.3-1].
    #[error("topic is empty")]
    Empty,
    /// The name or filter encodes to more than [`MAX_TOPIC_LEN`] bytes [MQTT-4.7.3-3].
    #[error("topic is longer than 65535 bytes")]
    TooLong,
    /// A topic name contains a `+` or `#` wildcard character [MQTT-4.7.0-1].
    #[error("wildcard character in topic name")]
    WildcardInName,
    /// A topic filter uses `+` or `#` other than as a whole level, or `#`
    /// other than as the last level [MQTT-4.7.1-1] [MQTT-4.7.1-2].
    #[error("invalid use of a wildcard in topic filter")]
    InvalidWildcard,
    /// The name or filter contains U+0000 [MQTT-4.7.3-2].
    #[error("topic contains the null character")]
    NullChar,
    /// A filter starting with `$share/` is not a well-formed shared
    /// subscription [MQTT-4.8.2-1] [MQTT-4.8.2-2].
    #[error("malformed shared subscription")]
    InvalidSharedSubscription,
}

/// Largest topic name or filter, in bytes, that MQTT can carry: a UTF-8
/// string with a two-byte length prefix [MQTT-4.7.3-3].
pub const MAX_TOPIC_LEN: usize = 65535;

/// Topic level separator (MQTT 5.0 §4.7.1.1).
const SEP: char = '/';
/// Multi-level wildcard, as a whole level (MQTT 5.0 §4.7.1.2).
const MULTI: &str = "#";
/// Single-level wildcard, as a whole level (MQTT 5.0 §4.7.1.3).
const SINGLE: &str = "+";

/// Checks the rules shared by names and filters: non-empty, length, no U+0000.
fn validate_common(s: &str) -> Result<(), TopicError> {
    // [MQTT-4.7.3-1] Topic Names and Topic Filters MUST be at least one character long.
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    // [MQTT-4.7.3-3] They MUST NOT encode to more than 65,535 bytes.
    if s.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong);
    }
    // [MQTT-4.7.3-2] They MUST NOT include the null character (Unicode U+0000).
    if s.contains('\0') {
        return Err(TopicError::NullChar);
    }
    Ok(())
}

/// Validates a topic name as carried by PUBLISH (and Will Topic): non-empty
/// [MQTT-4.7.3-1], at most [`MAX_TOPIC_LEN`] bytes [MQTT-4.7.3-3], no U+0000
/// [MQTT-4.7.3-2], and no `+` or `#` anywhere [MQTT-4.7.0-1]. Empty levels
/// (`"a//b"`, `"/a"`, `"a/"`) are legal.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    validate_common(name)?;
    // [MQTT-4.7.0-1] Wildcard characters MUST NOT be used within a Topic Name.
    if name.contains(['+', '#']) {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Validates a topic filter as carried by SUBSCRIBE/UNSUBSCRIBE: non-empty
/// [MQTT-4.7.3-1], at most [`MAX_TOPIC_LEN`] bytes [MQTT-4.7.3-3], no U+0000
/// [MQTT-4.7.3-2], `#` only alone in the last level [MQTT-4.7.1-1], `+` only
/// alone in its level [MQTT-4.7.1-2]. A `$share/...` filter is checked as a
/// plain filter here; use [`parse_shared`] for the shared-subscription rules.
pub fn validate_topic_filter(filter: &str) -> Result<(), TopicError> {
    validate_common(filter)?;
    let mut levels = filter.split(SEP).peekable();
    while let Some(level) = levels.next() {
        let is_last = levels.peek().is_none();
        if level.contains('#') {
            // [MQTT-4.7.1-1] The multi-level wildcard MUST be specified either on its own or
            // following a topic level separator, and MUST be the last character of the filter.
            if level != MULTI || !is_last {
                return Err(TopicError::InvalidWildcard);
            }
        } else if level.contains('+') && level != SINGLE {
            // [MQTT-4.7.1-2] Where the single-level wildcard is used, it MUST occupy an
            // entire level of the filter.
            return Err(TopicError::InvalidWildcard);
        }
    }
    Ok(())
}

/// Number of `/`-separated levels: `"a"` = 1, `"a/b"` = 2, `"/"` = 2,
/// `"a//b"` = 3. The empty string counts as one (empty) level.
pub fn topic_level_count(topic: &str) -> usize {
    topic.bytes().filter(|&b| b == b'/').count() + 1
}

/// Whether the first level of `filter` is a wildcard (`+` or `#`), which
/// matters for the `$` rule [MQTT-4.7.2-1].
pub(crate) fn starts_with_wildcard(filter: &str) -> bool {
    let first = filter.split(SEP).next().unwrap_or("");
    first == SINGLE || first == MULTI
}

/// Reference matcher (simple, obviously right): does `topic` match `filter`?
///
/// Both arguments are assumed valid (see [`validate_topic_name`] and
/// [`validate_topic_filter`]). Levels are compared byte for byte, without
/// normalisation [MQTT-4.7.3-4]. Filters starting with a wildcard never match
/// topics starting with `$` [MQTT-4.7.2-1]; `"sport/#"` matches `"sport"`
/// (MQTT 5.0 §4.7.1.2); `+` matches exactly one level, including an empty one.
pub fn matches_filter(filter: &str, topic: &str) -> bool {
    // [MQTT-4.7.2-1] The Server MUST NOT match Topic Filters starting with a wildcard
    // character (# or +) with Topic Names beginning with a $ character.
    if topic.starts_with('$') && starts_with_wildcard(filter) {
        return false;
    }
    let mut f = filter.split(SEP);
    let mut t = topic.split(SEP);
    loop {
        match (f.next(), t.next()) {
            // '#' matches the parent level and any number of child levels (§4.7.1.2).
            (Some(MULTI), _) => return true,
            // '+' matches exactly one level, possibly empty (§4.7.1.3).
            (Some(SINGLE), Some(_)) => {}
            (Some(fl), Some(tl)) if fl == tl => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// A `$share/{ShareName}/{filter}` subscription (MQTT 5.0 §4.8.2), borrowed
/// from the subscribed filter string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SharedFilter<'a> {
    /// The ShareName: non-empty, without `/`, `+` or `#`.
    pub group: &'a str,
    /// The topic filter that messages are matched against; valid and non-empty.
    pub filter: &'a str,
}

/// Prefix that marks a shared subscription (MQTT 5.0 §4.8.2).
const SHARE_PREFIX: &str = "$share/";

/// Splits a subscribed filter into its shared-subscription parts.
///
/// Returns `Ok(None)` for a filter that does not start with `$share/`,
/// `Ok(Some(..))` for a well-formed shared subscription, and
/// `Err(TopicError::InvalidSharedSubscription)` for a malformed one: empty
/// ShareName [MQTT-4.8.2-1], a ShareName containing `+` or `#`, no `/` after
/// the ShareName, or an empty or invalid filter after it [MQTT-4.8.2-2].
/// A normal filter is not validated here; call [`validate_topic_filter`].
pub fn parse_shared(filter: &str) -> Result<Option<SharedFilter<'_>>, TopicError> {
    let Some(rest) = filter.strip_prefix(SHARE_PREFIX) else {
        return Ok(None);
    };
    // [MQTT-4.8.2-2] The ShareName MUST NOT contain "/", "+" or "#", but MUST be followed
    // by a "/" character, which MUST be followed by a Topic Filter.
    let Some((group, inner)) = rest.split_once(SEP) else {
        return Err(TopicError::InvalidSharedSubscription);
    };
    // [MQTT-4.8.2-1] The ShareName MUST be at least one character long.
    if group.is_empty() || group.contains(['+', '#', '\0']) {
        return Err(TopicError::InvalidSharedSubscription);
    }
    if validate_topic_filter(inner).is_err() {
        return Err(TopicError::InvalidSharedSubscription);
    }
    Ok(Some(SharedFilter {
        group,
        filter: inner,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mqtt_4_7_3_1_empty_name_and_filter_rejected() {
        assert_eq!(validate_topic_name(""), Err(TopicError::Empty));
        assert_eq!(validate_topic_filter(""), Err(TopicError::Empty));
    }

    #[test]
    fn mqtt_4_7_3_2_null_char_rejected() {
        assert_eq!(validate_topic_name("a\0b"), Err(TopicError::NullChar));
        assert_eq!(validate_topic_filter("a/\0"), Err(TopicError::NullChar));
        assert_eq!(validate_topic_filter("\0/#"), Err(TopicError::NullChar));
    }

    #[test]
    fn mqtt_4_7_3_3_length_limit() {
        let ok = "a".repeat(MAX_TOPIC_LEN);
        assert_eq!(validate_topic_name(&ok), Ok(()));
        assert_eq!(validate_topic_filter(&ok), Ok(()));
        let long = "a".repeat(MAX_TOPIC_LEN + 1);
        assert_eq!(validate_topic_name(&long), Err(TopicError::TooLong));
        assert_eq!(validate_topic_filter(&long), Err(TopicError::TooLong));
        // The limit is in bytes, not characters.
        let multibyte = "é".repeat(MAX_TOPIC_LEN / 2 + 1);
        assert_eq!(validate_topic_name(&multibyte), Err(TopicError::TooLong));
    }

    #[test]
    fn mqtt_4_7_0_1_wildcards_not_allowed_in_names() {
        for name in ["+", "#", "a/+", "a/#", "a+b", "a#", "+/a"] {
            assert_eq!(
                validate_topic_name(name),
                Err(TopicError::WildcardInName),
                "{name}"
            );
        }
    }

    #[test]
    fn mqtt_4_7_1_1_multi_level_wildcard_placement() {
        for ok in ["#", "a/#", "/#", "a/+/#", "+/#", "$SYS/#", "a//#"] {
            assert_eq!(validate_topic_filter(ok), Ok(()), "{ok}");
        }
        for bad in ["a#", "#/a", "a/#/b", "a/b#", "##", "a/#/", "#a", "#/#"] {
            assert_eq!(
                validate_topic_filter(bad),
                Err(TopicError::InvalidWildcard),
                "{bad}"
            );
        }
    }

    #[test]
    fn mqtt_4_7_1_2_single_level_wildcard_occupies_level() {
        for ok in ["+", "+/+", "a/+", "+/a", "a/+/b", "/+", "+/", "+//+"] {
            assert_eq!(validate_topic_filter(ok), Ok(()), "{ok}");
        }
        for bad in ["a+", "+a", "a/b+/c", "++", "a/++", "a/+b"] {
            assert_eq!(
                validate_topic_filter(bad),
                Err(TopicError::InvalidWildcard),
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_levels_are_legal() {
        for t in ["/", "//", "a//b", "/a", "a/", "/a/"] {
            assert_eq!(validate_topic_name(t), Ok(()), "{t}");
            assert_eq!(validate_topic_filter(t), Ok(()), "{t}");
        }
        assert!(matches_filter("a//b", "a//b"));
        assert!(matches_filter("a/+/b", "a//b"));
        assert!(matches_filter("+", ""));
        assert!(matches_filter("+/+", "/"));
        assert!(matches_filter("/+", "/a"));
        assert!(matches_filter("/+", "/"));
        assert!(matches_filter("a/+", "a/"));
        assert!(!matches_filter("a/+", "a"));
        assert!(!matches_filter("a", "a/"));
        assert!(!matches_filter("/a", "a"));
        assert!(matches_filter("#", "/"));
        assert!(matches_filter("/#", "/"));
        assert!(matches_filter("/#", "/a/b"));
        assert!(!matches_filter("/#", "a"));
    }

    #[test]
    fn level_count() {
        assert_eq!(topic_level_count("a"), 1);
        assert_eq!(topic_level_count("a/b"), 2);
        assert_eq!(topic_level_count("/"), 2);
        assert_eq!(topic_level_count("a//b"), 3);
        assert_eq!(topic_level_count("/a/"), 3);
        assert_eq!(topic_level_count(""), 1);
    }

    #[test]
    fn multi_level_wildcard_matches_parent() {
        // MQTT 5.0 §4.7.1.2: "sport/#" also matches the singular "sport".
        assert!(matches_filter("sport/#", "sport"));
        assert!(matches_filter("sport/#", "sport/"));
        assert!(matches_filter("sport/#", "sport/tennis/player1"));
        assert!(matches_filter(
            "sport/tennis/player1/#",
            "sport/tennis/player1"
        ));
        assert!(matches_filter(
            "sport/tennis/player1/#",
            "sport/tennis/player1/ranking"
        ));
        assert!(!matches_filter("sport/#", "sports"));
        assert!(!matches_filter("sport/tennis/#", "sport"));
        assert!(matches_filter("#", "sport"));
    }

    #[test]
    fn single_level_wildcard_examples() {
        // MQTT 5.0 §4.7.1.3 examples.
        assert!(matches_filter("sport/tennis/+", "sport/tennis/player1"));
        assert!(!matches_filter(
            "sport/tennis/+",
            "sport/tennis/player1/ranking"
        ));
        assert!(!matches_filter("sport/+", "sport"));
        assert!(matches_filter("sport/+", "sport/"));
        assert!(matches_filter("+/+", "/finance"));
        assert!(matches_filter("/+", "/finance"));
        assert!(!matches_filter("+", "/finance"));
    }

    #[test]
    fn mqtt_4_7_2_1_dollar_topics_not_matched_by_leading_wildcard() {
        assert!(!matches_filter("#", "$SYS/broker/load"));
        assert!(!matches_filter("+/broker/load", "$SYS/broker/load"));
        assert!(!matches_filter("+", "$SYS"));
        assert!(!matches_filter("+/#", "$SYS/x"));
        assert!(matches_filter("$SYS/#", "$SYS/broker/load"));
        assert!(matches_filter("$SYS/#", "$SYS"));
        assert!(matches_filter("$SYS/+/load", "$SYS/broker/load"));
        assert!(matches_filter("$SYS", "$SYS"));
        // Only a leading '$' counts.
        assert!(matches_filter("#", "a/$SYS"));
        assert!(matches_filter("+/+", "a/$b"));
    }

    #[test]
    fn mqtt_4_7_3_4_no_normalisation() {
        assert!(!matches_filter("a", "A"));
        assert!(!matches_filter("a/b", "a/b/"));
        assert!(!matches_filter("a b", "a  b"));
        assert!(matches_filter("ACCOUNTS", "ACCOUNTS"));
    }

    #[test]
    fn mqtt_4_8_2_shared_subscriptions() {
        assert_eq!(parse_shared("a/b"), Ok(None));
        assert_eq!(parse_shared("#"), Ok(None));
        assert_eq!(parse_shared("$share"), Ok(None));
        assert_eq!(parse_shared("$shared/g/a"), Ok(None));
        assert_eq!(parse_shared("$SYS/a"), Ok(None));
        assert_eq!(
            parse_shared("$share/g/a/+/#"),
            Ok(Some(SharedFilter {
                group: "g",
                filter: "a/+/#"
            }))
        );
        assert_eq!(
            parse_shared("$share/group1/#"),
            Ok(Some(SharedFilter {
                group: "group1",
                filter: "#"
            }))
        );
        assert_eq!(
            parse_shared("$share/g//"),
            Ok(Some(SharedFilter {
                group: "g",
                filter: "/"
            }))
        );
        let bad = TopicError::InvalidSharedSubscription;
        // [MQTT-4.8.2-1] ShareName at least one character.
        assert_eq!(parse_shared("$share//a"), Err(bad));
        // [MQTT-4.8.2-2] ShareName without '+'/'#', followed by '/' and a filter.
        assert_eq!(parse_shared("$share/"), Err(bad));
        assert_eq!(parse_shared("$share/g"), Err(bad));
        assert_eq!(parse_shared("$share/g/"), Err(bad));
        assert_eq!(parse_shared("$share/+/a"), Err(bad));
        assert_eq!(parse_shared("$share/#/a"), Err(bad));
        assert_eq!(parse_shared("$share/g+/a"), Err(bad));
        assert_eq!(parse_shared("$share/g/a#"), Err(bad));
        assert_eq!(parse_shared("$share/g/#/a"), Err(bad));
        assert_eq!(parse_shared("$share/g/a\0"), Err(bad));
    }

    #[test]
    fn errors_display() {
        assert_eq!(TopicError::Empty.to_string(), "topic is empty");
        let e: &dyn std::error::Error = &TopicError::InvalidWildcard;
        assert!(!e.to_string().is_empty());
    }
}
