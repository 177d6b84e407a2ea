//! Topic grammar and subscription index (crates/hayate-topic).
//!
//! Two halves, both driven from one input:
//!
//! 1. Arbitrary strings go through `validate_topic_name`, `validate_topic_filter`,
//!    `parse_shared` and `topic_level_count`, which must not panic and must agree with
//!    independent, spelled-out versions of the MQTT rules written here.
//! 2. A structured script (filters and topics built from a small alphabet of levels, so that
//!    matches really happen) inserts and removes `(filter, key)` entries in a
//!    `SubscriptionIndex` while a plain list mirrors it, and checks for every topic that
//!    `for_each_match` reports exactly the entries a naive matcher selects, each once, and that
//!    the crate's reference `matches_filter` agrees with the naive matcher too.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use hayate_topic::{
    matches_filter, parse_shared, topic_level_count, validate_topic_filter, validate_topic_name,
    SubscriptionIndex, TopicError, MAX_TOPIC_LEN,
};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

// ----- the rules, spelled out independently ---------------------------------------------------

/// MQTT 5.0 §4.7.3 and §4.7.0: what a topic name may be.
fn naive_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOPIC_LEN
        && !s.chars().any(|c| c == '\0' || c == '+' || c == '#')
}

/// MQTT 5.0 §4.7.1 and §4.7.3: what a topic filter may be.
fn naive_filter_ok(s: &str) -> bool {
    if s.is_empty() || s.len() > MAX_TOPIC_LEN || s.contains('\0') {
        return false;
    }
    let levels: Vec<&str> = s.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        let last = i + 1 == levels.len();
        if level.contains('#') && !(*level == "#" && last) {
            return false;
        }
        if level.contains('+') && *level != "+" {
            return false;
        }
    }
    true
}

/// MQTT 5.0 §4.8.2: `$share/{ShareName}/{filter}`; `None` when not a shared subscription,
/// `Some(None)` when malformed, `Some(Some((group, filter)))` when well formed.
fn naive_shared(s: &str) -> Option<Option<(&str, &str)>> {
    if !s.starts_with("$share/") {
        return None;
    }
    let rest = &s["$share/".len()..];
    let Some(slash) = rest.find('/') else {
        return Some(None);
    };
    let group = &rest[..slash];
    let inner = &rest[slash + 1..];
    let group_ok = !group.is_empty() && !group.contains(['+', '#', '\0']);
    if group_ok && naive_filter_ok(inner) {
        Some(Some((group, inner)))
    } else {
        Some(None)
    }
}

/// The matcher the index must agree with: level by level, `+` takes exactly one level (possibly
/// empty), `#` (always last) takes the rest including none at all (the parent level), and a
/// filter whose first level is a wildcard never matches a topic starting with `$`
/// [MQTT-4.7.2-1]. Iterative, so very deep inputs cannot overflow the stack.
fn naive_match(filter: &str, topic: &str) -> bool {
    let f: Vec<&str> = filter.split('/').collect();
    let t: Vec<&str> = topic.split('/').collect();
    if topic.starts_with('$') && (f[0] == "+" || f[0] == "#") {
        return false;
    }
    let mut i = 0;
    loop {
        if i == f.len() {
            return i == t.len();
        }
        if f[i] == "#" {
            return true;
        }
        if i == t.len() {
            return false;
        }
        if f[i] != "+" && f[i] != t[i] {
            return false;
        }
        i += 1;
    }
}

// ----- half 1: arbitrary strings --------------------------------------------------------------

fn check_string(s: &str) {
    let name = validate_topic_name(s);
    assert_eq!(
        name.is_ok(),
        naive_name_ok(s),
        "validate_topic_name({s:?}) = {name:?}"
    );
    if let Err(e) = name {
        let expected = if s.is_empty() {
            TopicError::Empty
        } else if s.len() > MAX_TOPIC_LEN {
            TopicError::TooLong
        } else if s.contains('\0') {
            TopicError::NullChar
        } else {
            TopicError::WildcardInName
        };
        assert_eq!(e, expected, "name error for {s:?}");
    }

    let filter = validate_topic_filter(s);
    assert_eq!(
        filter.is_ok(),
        naive_filter_ok(s),
        "validate_topic_filter({s:?}) = {filter:?}"
    );
    if let Err(e) = filter {
        let expected = if s.is_empty() {
            TopicError::Empty
        } else if s.len() > MAX_TOPIC_LEN {
            TopicError::TooLong
        } else if s.contains('\0') {
            TopicError::NullChar
        } else {
            TopicError::InvalidWildcard
        };
        assert_eq!(e, expected, "filter error for {s:?}");
    }
    // Every valid name is a valid filter (with no wildcard), and matches itself.
    if name.is_ok() {
        assert!(filter.is_ok(), "name {s:?} is not a valid filter");
        assert!(matches_filter(s, s), "name {s:?} does not match itself");
    }

    match (parse_shared(s), naive_shared(s)) {
        (Ok(None), None) => {}
        (Err(TopicError::InvalidSharedSubscription), Some(None)) => {}
        (Ok(Some(shared)), Some(Some((group, inner)))) => {
            assert_eq!(
                (shared.group, shared.filter),
                (group, inner),
                "parse_shared({s:?})"
            );
            assert!(validate_topic_filter(shared.filter).is_ok());
            assert_eq!(format!("$share/{}/{}", shared.group, shared.filter), s);
        }
        (got, want) => panic!("parse_shared({s:?}) = {got:?}, expected {want:?}"),
    }

    assert_eq!(
        topic_level_count(s),
        s.split('/').count(),
        "topic_level_count({s:?})"
    );
}

/// For one arbitrary (filter, topic) pair that is valid: reference matcher, naive matcher and a
/// one-entry index must agree.
fn check_pair(filter: &str, topic: &str) {
    if validate_topic_filter(filter).is_err() || validate_topic_name(topic).is_err() {
        return;
    }
    let want = naive_match(filter, topic);
    assert_eq!(
        matches_filter(filter, topic),
        want,
        "matches_filter({filter:?}, {topic:?})"
    );
    let mut index = SubscriptionIndex::new();
    index.insert(filter, 0u8, ());
    let mut hits = 0;
    index.for_each_match(topic, |f, _, _| {
        assert_eq!(f, filter);
        hits += 1;
    });
    assert_eq!(
        hits,
        usize::from(want),
        "index match of {filter:?} on {topic:?}"
    );
}

// ----- half 2: structured index script --------------------------------------------------------

/// Topic levels from a small alphabet so that filters and topics meet.
const LEVELS: &[&str] = &["a", "b", "", "$SYS", "$", "a$", "sport", "+x", "c/d"];

#[derive(Debug, Arbitrary)]
enum FilterLevel {
    Lit(u8),
    Plus,
    Hash,
}

#[derive(Debug, Arbitrary)]
struct FilterSpec {
    /// Subscribe through `$share/{group}/...` (the index holds the inner filter).
    share: Option<u8>,
    levels: Vec<FilterLevel>,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Insert {
        filter: FilterSpec,
        key: u8,
        value: u8,
    },
    Remove {
        filter: FilterSpec,
        key: u8,
    },
    /// Remove a filter that is present (picked from the mirror).
    RemoveExisting {
        pick: u8,
    },
    Match {
        topic: Vec<u8>,
    },
}

#[derive(Debug, Arbitrary)]
struct Script {
    strings: Vec<String>,
    ops: Vec<Op>,
}

fn lit(i: u8) -> &'static str {
    LEVELS[usize::from(i) % LEVELS.len()]
}

/// Builds the subscribed filter string (may be invalid: `#` not last, `+x`, `$share` oddities).
fn build_filter(spec: &FilterSpec) -> String {
    let levels: Vec<&str> = spec
        .levels
        .iter()
        .take(8)
        .map(|l| match l {
            FilterLevel::Lit(i) => lit(*i),
            FilterLevel::Plus => "+",
            FilterLevel::Hash => "#",
        })
        .collect();
    let body = levels.join("/");
    match spec.share {
        None => body,
        Some(g) => {
            let group = ["g", "", "g+", "h"][usize::from(g) % 4];
            format!("$share/{group}/{body}")
        }
    }
}

fn build_topic(levels: &[u8]) -> String {
    levels
        .iter()
        .take(8)
        .map(|&i| lit(i))
        .collect::<Vec<_>>()
        .join("/")
}

/// What the broker does with a subscribed filter before it reaches the index: shared
/// subscriptions store their inner filter; anything invalid is refused.
fn index_filter(subscribed: &str) -> Option<String> {
    match parse_shared(subscribed) {
        Ok(Some(shared)) => Some(shared.filter.to_owned()),
        Ok(None) => validate_topic_filter(subscribed)
            .is_ok()
            .then(|| subscribed.to_owned()),
        Err(_) => None,
    }
}

fn run_script(script: &Script) {
    for s in &script.strings {
        check_string(s);
    }
    for pair in script.strings.windows(2) {
        check_pair(&pair[0], &pair[1]);
    }

    let mut index: SubscriptionIndex<u8, u8> = SubscriptionIndex::new();
    // Mirror: (filter, key) -> value.
    let mut mirror: BTreeMap<(String, u8), u8> = BTreeMap::new();
    for op in script.ops.iter().take(64) {
        match op {
            Op::Insert { filter, key, value } => {
                let subscribed = build_filter(filter);
                check_string(&subscribed);
                let Some(f) = index_filter(&subscribed) else {
                    continue;
                };
                let key = key % 4;
                let old = index.insert(&f, key, *value);
                assert_eq!(old, mirror.insert((f, key), *value), "insert return value");
            }
            Op::Remove { filter, key } => {
                let Some(f) = index_filter(&build_filter(filter)) else {
                    continue;
                };
                let key = key % 4;
                let old = index.remove(&f, &key);
                assert_eq!(old, mirror.remove(&(f, key)), "remove return value");
            }
            Op::RemoveExisting { pick } => {
                if mirror.is_empty() {
                    continue;
                }
                let k = mirror
                    .keys()
                    .nth(usize::from(*pick) % mirror.len())
                    .cloned();
                let (f, key) = k.expect("picked within len");
                let old = index.remove(&f, &key);
                assert_eq!(
                    old,
                    mirror.remove(&(f.clone(), key)),
                    "remove of present {f:?}"
                );
                assert_eq!(index.remove(&f, &key), None, "second remove of {f:?}");
            }
            Op::Match { topic } => {
                let topic = build_topic(topic);
                check_string(&topic);
                check_matches(&index, &mirror, &topic);
            }
        }
        assert_eq!(index.len(), mirror.len(), "len");
        assert_eq!(index.is_empty(), mirror.is_empty(), "is_empty");
        let mut filters: Vec<&String> = mirror.keys().map(|(f, _)| f).collect();
        filters.dedup();
        assert_eq!(index.filter_count(), filters.len(), "filter_count");
        for ((f, key), value) in &mirror {
            assert_eq!(index.get(f, key), Some(value), "get({f:?}, {key})");
        }
    }
    // Every topic of up to two levels from the alphabet, against the final index.
    let n = LEVELS.len() as u8;
    for a in 0..n {
        check_matches(&index, &mirror, &build_topic(&[a]));
        for b in 0..n {
            check_matches(&index, &mirror, &build_topic(&[a, b]));
        }
    }
    // Removing everything leaves an empty index that matches nothing.
    for (f, key) in mirror.keys() {
        assert!(index.remove(f, key).is_some(), "final remove of {f:?}");
    }
    assert!(index.is_empty());
    assert_eq!(index.filter_count(), 0);
    let mut any = false;
    index.for_each_match("a", |_, _, _| any = true);
    assert!(!any, "empty index matched");
}

fn check_matches(
    index: &SubscriptionIndex<u8, u8>,
    mirror: &BTreeMap<(String, u8), u8>,
    topic: &str,
) {
    if validate_topic_name(topic).is_err() {
        // Not a topic a client can publish to; only require that matching does not panic.
        index.for_each_match(topic, |_, _, _| {});
        return;
    }
    let mut got: Vec<(String, u8, u8)> = Vec::new();
    index.for_each_match(topic, |f, k, v| got.push((f.to_owned(), *k, *v)));
    got.sort();
    let len = got.len();
    got.dedup();
    assert_eq!(len, got.len(), "duplicate match for {topic:?}: {got:?}");
    let want: Vec<(String, u8, u8)> = mirror
        .iter()
        .filter(|((f, _), _)| naive_match(f, topic))
        .map(|((f, k), v)| (f.clone(), *k, *v))
        .collect();
    assert_eq!(got, want, "index matches for topic {topic:?}");
    for (f, _) in mirror.keys() {
        assert_eq!(
            matches_filter(f, topic),
            naive_match(f, topic),
            "matches_filter({f:?}, {topic:?})"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    // The whole input as one string too, so plain text seeds reach the grammar directly.
    if let Ok(s) = std::str::from_utf8(data) {
        check_string(s);
        if let Some((f, t)) = s.split_once('\n') {
            check_pair(f, t);
        }
    }
    let mut u = Unstructured::new(data);
    if let Ok(script) = Script::arbitrary(&mut u) {
        run_script(&script);
    }
});
