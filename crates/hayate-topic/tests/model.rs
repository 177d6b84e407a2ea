//! Property tests: the indexed structures agree with the naive reference
//! matcher and with a `HashMap` model.

use std::collections::{BTreeSet, HashMap};

use hayate_topic::{
    matches_filter, validate_topic_filter, validate_topic_name, RetainedTree, SubscriptionIndex,
};
use proptest::prelude::*;

/// Topic levels from a small alphabet, so that collisions (and therefore
/// matches) are frequent. Includes empty and `$` levels.
fn level() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("$s"), Just("")]
}

fn topic() -> impl Strategy<Value = String> {
    // A single empty level would be the empty string, which is not a valid name
    // [MQTT-4.7.3-1].
    prop::collection::vec(level(), 1..5)
        .prop_map(|v| v.join("/"))
        .prop_filter("topic names are non-empty", |t| !t.is_empty())
}

fn filter() -> impl Strategy<Value = String> {
    let lvl = prop_oneof![4 => level(), 2 => Just("+")];
    (prop::collection::vec(lvl, 0..5), any::<bool>())
        .prop_map(|(mut v, hash)| {
            if hash || v.is_empty() {
                v.push("#");
            }
            v.join("/")
        })
        .prop_filter("topic filters are non-empty", |f| !f.is_empty())
}

#[derive(Debug, Clone)]
enum Op {
    Insert(String, u8, u16),
    Remove(String, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (filter(), 0u8..3, any::<u16>()).prop_map(|(f, k, v)| Op::Insert(f, k, v)),
        2 => (filter(), 0u8..3).prop_map(|(f, k)| Op::Remove(f, k)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_inputs_are_valid(f in filter(), t in topic()) {
        prop_assert_eq!(validate_topic_filter(&f), Ok(()));
        prop_assert_eq!(validate_topic_name(&t), Ok(()));
    }

    #[test]
    fn index_matches_naive_scan(
        filters in prop::collection::vec((filter(), 0u8..3), 0..40),
        topics in prop::collection::vec(topic(), 1..20),
    ) {
        let mut idx = SubscriptionIndex::new();
        let mut model: HashMap<(String, u8), usize> = HashMap::new();
        for (i, (f, k)) in filters.iter().enumerate() {
            idx.insert(f, *k, i);
            model.insert((f.clone(), *k), i);
        }
        for t in &topics {
            let mut got = Vec::new();
            idx.for_each_match(t, |f, k, v| got.push((f.to_owned(), *k, *v)));
            let n = got.len();
            let got: BTreeSet<_> = got.into_iter().collect();
            prop_assert_eq!(n, got.len(), "duplicate match for {}", t);
            let want: BTreeSet<_> = model
                .iter()
                .filter(|((f, _), _)| matches_filter(f, t))
                .map(|((f, k), v)| (f.clone(), *k, *v))
                .collect();
            prop_assert_eq!(got, want, "topic {}", t);
        }
    }

    #[test]
    fn retained_matches_naive_scan(
        stored in prop::collection::vec(topic(), 0..40),
        filters in prop::collection::vec(filter(), 1..20),
    ) {
        let mut tree = RetainedTree::new();
        let mut model: HashMap<String, usize> = HashMap::new();
        for (i, t) in stored.iter().enumerate() {
            prop_assert_eq!(tree.insert(t, i), model.insert(t.clone(), i));
        }
        prop_assert_eq!(tree.len(), model.len());
        for f in &filters {
            let mut got = Vec::new();
            tree.for_each_match(f, |t, v| got.push((t.to_owned(), *v)));
            let n = got.len();
            let got: BTreeSet<_> = got.into_iter().collect();
            prop_assert_eq!(n, got.len(), "duplicate match for {}", f);
            let want: BTreeSet<_> = model
                .iter()
                .filter(|(t, _)| matches_filter(f, t))
                .map(|(t, v)| (t.clone(), *v))
                .collect();
            prop_assert_eq!(got, want, "filter {}", f);
        }
    }

    #[test]
    fn index_agrees_with_hashmap_model(ops in prop::collection::vec(op(), 0..80)) {
        let mut idx = SubscriptionIndex::new();
        let mut model: HashMap<(String, u8), u16> = HashMap::new();
        for op in &ops {
            match op {
                Op::Insert(f, k, v) => {
                    prop_assert_eq!(idx.insert(f, *k, *v), model.insert((f.clone(), *k), *v));
                }
                Op::Remove(f, k) => {
                    prop_assert_eq!(idx.remove(f, k), model.remove(&(f.clone(), *k)));
                }
            }
            prop_assert_eq!(idx.len(), model.len());
            prop_assert_eq!(idx.is_empty(), model.is_empty());
            let distinct: BTreeSet<&str> = model.keys().map(|(f, _)| f.as_str()).collect();
            prop_assert_eq!(idx.filter_count(), distinct.len());
        }
        for ((f, k), v) in &model {
            prop_assert_eq!(idx.get(f, k), Some(v));
        }
        // Matching still agrees after churn.
        for t in ["a", "a/b", "$s/a", "/", "a//b", "b/a/$s", ""] {
            let mut got = BTreeSet::new();
            idx.for_each_match(t, |f, k, v| { got.insert((f.to_owned(), *k, *v)); });
            let want: BTreeSet<_> = model
                .iter()
                .filter(|((f, _), _)| matches_filter(f, t))
                .map(|((f, k), v)| (f.clone(), *k, *v))
                .collect();
            prop_assert_eq!(got, want, "topic {}", t);
        }
        // Draining everything leaves an empty index.
        for (f, k) in model.keys() {
            prop_assert!(idx.remove(f, k).is_some());
        }
        prop_assert!(idx.is_empty());
        prop_assert_eq!(idx.filter_count(), 0);
    }

    #[test]
    fn retained_agrees_with_hashmap_model(
        ops in prop::collection::vec((topic(), prop::option::of(any::<u16>())), 0..80),
        cutoff in any::<u16>(),
    ) {
        let mut tree = RetainedTree::new();
        let mut model: HashMap<String, u16> = HashMap::new();
        for (t, v) in &ops {
            match v {
                Some(v) => prop_assert_eq!(tree.insert(t, *v), model.insert(t.clone(), *v)),
                None => prop_assert_eq!(tree.remove(t), model.remove(t)),
            }
            prop_assert_eq!(tree.len(), model.len());
            prop_assert_eq!(tree.get(t), model.get(t));
        }
        let before = model.len();
        model.retain(|_, v| *v < cutoff);
        let removed = tree.retain(|_, v| *v < cutoff);
        prop_assert_eq!(removed, before - model.len());
        prop_assert_eq!(tree.len(), model.len());
        let mut got = BTreeSet::new();
        tree.for_each_match("#", |t, v| { got.insert((t.to_owned(), *v)); });
        tree.for_each_match("$s/#", |t, v| { got.insert((t.to_owned(), *v)); });
        let want: BTreeSet<_> = model.iter().map(|(t, v)| (t.clone(), *v)).collect();
        prop_assert_eq!(got, want);
        for t in model.keys() {
            prop_assert!(tree.remove(t).is_some());
        }
        prop_assert!(tree.is_empty());
    }
}
