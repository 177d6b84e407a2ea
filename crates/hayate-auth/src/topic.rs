//! Topic matching as ACL evaluation needs it: validity and matching come from `hayate-topic`
//! (the grammar the broker routes with); covering one filter by another is ACL-specific.
//!
//! Semantics follow MQTT and Mosquitto's `mosquitto_topic_matches_sub`: `+` matches one level,
//! `#` matches the rest including the parent level (`a/#` matches `a`), and a topic whose first
//! level starts with `$` is matched only by filters whose first level starts with `$`.

/// A valid topic *name* (the broker's grammar, `hayate-topic`).
pub(crate) fn valid_topic(topic: &str) -> bool {
    hayate_topic::validate_topic_name(topic).is_ok()
}

/// A valid topic *filter*: `+` and `#` only as whole levels, `#` only last.
pub(crate) fn valid_filter(filter: &str) -> bool {
    hayate_topic::validate_topic_filter(filter).is_ok()
}

fn is_wildcard(level: &str) -> bool {
    level == "+" || level == "#"
}

/// Whether `filter` matches the topic name `topic` (`hayate-topic`'s matcher, the one the
/// broker routes with). Invalid input never matches.
pub(crate) fn matches(filter: &str, topic: &str) -> bool {
    valid_filter(filter) && valid_topic(topic) && hayate_topic::matches_filter(filter, topic)
}

/// Whether every topic matched by `inner` is also matched by `outer` (both filters).
/// Invalid input is never covered.
pub(crate) fn covers(outer: &str, inner: &str) -> bool {
    if !valid_filter(outer) || !valid_filter(inner) {
        return false;
    }
    let outer_first = outer.split('/').next().unwrap_or("");
    let inner_first = inner.split('/').next().unwrap_or("");
    // `$` topics are matched only by filters whose first level starts with `$` literally.
    if inner_first.starts_with('$') && is_wildcard(outer_first) {
        return false;
    }
    if outer_first.starts_with('$') && is_wildcard(inner_first) {
        return false;
    }
    let mut o = outer.split('/');
    let mut i = inner.split('/');
    loop {
        match (o.next(), i.next()) {
            // `#` covers anything from here on, including the parent level (`a/#` ⊇ `a`).
            (Some("#"), _) => return true,
            (None, None) => return true,
            // `+` covers one level, literal or `+`, but not `#` (which spans several).
            (Some("+"), Some(il)) if il != "#" => {}
            (Some(ol), Some(il)) if ol == il && !is_wildcard(ol) => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_validity() {
        for ok in [
            "a", "a/b", "+", "#", "a/+/c", "a/#", "/", "+/+", "$SYS/#", "a//b",
        ] {
            assert!(valid_filter(ok), "{ok}");
        }
        for bad in ["", "a/#/b", "a+", "a/b#", "#/a", "a/+b/c", "x\0"] {
            assert!(!valid_filter(bad), "{bad:?}");
        }
    }

    #[test]
    fn matching() {
        assert!(matches("a/b", "a/b"));
        assert!(!matches("a/b", "a/c"));
        assert!(matches("a/+", "a/b"));
        assert!(!matches("a/+", "a/b/c"));
        assert!(matches("a/+", "a/"));
        assert!(matches("a/#", "a"));
        assert!(matches("a/#", "a/b/c"));
        assert!(matches("#", "a/b"));
        assert!(!matches("#", "$SYS/x"));
        assert!(!matches("+/x", "$SYS/x"));
        assert!(matches("$SYS/#", "$SYS/x"));
        assert!(
            !matches("a/b", "a/+"),
            "wildcards in topic names never match"
        );
        assert!(!matches("a/#/b", "a/x/b"), "invalid filters never match");
        assert!(matches("+/+", "/"));
    }

    #[test]
    fn covering() {
        assert!(covers("a/#", "a/+/c"));
        assert!(covers("a/#", "a/#"));
        assert!(covers("a/#", "a"));
        assert!(covers("#", "#"));
        assert!(covers("+/b", "x/b"));
        assert!(covers("+/b", "+/b"));
        assert!(!covers("a/+", "a/#"));
        assert!(!covers("a/b", "a/+"));
        assert!(!covers("a", "a/#"));
        assert!(!covers("a/+/#", "a/#"));
        assert!(!covers("#", "$SYS/#"));
        assert!(covers("$SYS/#", "$SYS/broker/+"));
        assert!(!covers("$SYS/#", "+/broker"));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn filter() -> impl Strategy<Value = String> {
            "(\\$s|a|b|\\+)(/(a|b|\\+)){0,3}(/#)?|#"
        }

        fn topic_name() -> impl Strategy<Value = String> {
            "(\\$s|a|b|c)(/(a|b|c)){0,4}"
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

            /// `covers(outer, inner)` is sound: every topic matched by `inner` is matched by `outer`.
            #[test]
            fn covers_is_sound(outer in filter(), inner in filter(), topics in prop::collection::vec(topic_name(), 1..30)) {
                if covers(&outer, &inner) {
                    for t in &topics {
                        if matches(&inner, t) {
                            prop_assert!(matches(&outer, t), "{outer} covers {inner} but not {t}");
                        }
                    }
                }
            }

            /// A filter without wildcards is covered exactly when it is matched as a topic.
            #[test]
            fn covers_literal_is_matches(outer in filter(), t in topic_name()) {
                prop_assert_eq!(covers(&outer, &t), matches(&outer, &t));
            }

            /// Every filter covers itself.
            #[test]
            fn covers_is_reflexive(f in filter()) {
                prop_assert!(covers(&f, &f));
            }

            #[test]
            fn never_panics(a in any::<String>(), b in any::<String>()) {
                let _ = (valid_topic(&a), valid_filter(&a), matches(&a, &b), covers(&a, &b));
            }
        }
    }
}
