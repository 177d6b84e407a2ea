//! Subscription index: topic filter -> (key -> value), matched by topic name.
//!
//! Exact filters (no wildcard level) live in one hash map, so a publish costs a
//! single lookup for them. Wildcard filters live in a level trie whose nodes
//! are kept in an arena (`Vec`) and linked by index: walking, inserting and
//! dropping never recurse, so a filter with tens of thousands of levels cannot
//! overflow the stack of the thread that touches it.

use std::collections::HashMap;
use std::hash::Hash;
use std::str::Split;

const ROOT: usize = 0;

/// Entries of one filter, with the filter string kept for the callback.
#[derive(Debug, Clone)]
struct Entries<K, V> {
    filter: Box<str>,
    map: HashMap<K, V>,
}

/// One level of the wildcard trie.
#[derive(Debug, Clone)]
struct Node<K, V> {
    /// Literal child levels.
    children: HashMap<Box<str>, usize>,
    /// The `+` child level.
    plus: Option<usize>,
    /// Filters whose last level is this node (e.g. `a/+` at the `+` node).
    here: Option<Entries<K, V>>,
    /// Filters ending in `/#` below this node (or `#` itself at the root).
    hash: Option<Entries<K, V>>,
}

impl<K, V> Default for Node<K, V> {
    fn default() -> Self {
        Node {
            children: HashMap::new(),
            plus: None,
            here: None,
            hash: None,
        }
    }
}

impl<K, V> Node<K, V> {
    fn is_empty(&self) -> bool {
        self.children.is_empty()
            && self.plus.is_none()
            && self.here.is_none()
            && self.hash.is_none()
    }
}

/// Where a filter's entries live in the trie.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Here,
    Hash,
}

/// Whether a filter level is a wildcard, i.e. whether the filter goes in the trie.
fn is_wildcard_filter(filter: &str) -> bool {
    filter.split('/').any(|l| l == "+" || l == "#")
}

/// Subscription index: topic filter -> (key -> value), e.g. filter -> client
/// id -> subscription options.
///
/// A plain data structure with no locking; the broker wraps it in a lock.
/// Filters are assumed valid (see [`crate::validate_topic_filter`]); for a
/// shared subscription, store the filter part of [`crate::SharedFilter`].
/// Matching follows [`crate::matches_filter`], including the `$` rule
/// [MQTT-4.7.2-1] and `"a/#"` matching `"a"`.
#[derive(Debug, Clone)]
pub struct SubscriptionIndex<K, V> {
    /// Filters without wildcard levels, keyed by the filter (= the topic they match).
    exact: HashMap<Box<str>, HashMap<K, V>>,
    /// Arena of trie nodes; `nodes[ROOT]` always exists.
    nodes: Vec<Node<K, V>>,
    /// Indices of unused slots in `nodes`.
    free: Vec<usize>,
    /// Number of (filter, key) entries.
    len: usize,
    /// Number of distinct filters.
    filters: usize,
}

impl<K, V> Default for SubscriptionIndex<K, V> {
    fn default() -> Self {
        SubscriptionIndex {
            exact: HashMap::new(),
            nodes: vec![Node::default()],
            free: Vec::new(),
            len: 0,
            filters: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V> SubscriptionIndex<K, V> {
    /// Creates an empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the entry for (`filter`, `key`); returns the old value.
    /// The filter is assumed valid.
    pub fn insert(&mut self, filter: &str, key: K, value: V) -> Option<V> {
        let map = if is_wildcard_filter(filter) {
            let (node, slot) = self.descend_or_create(filter);
            let entries = match slot {
                Slot::Here => &mut self.nodes[node].here,
                Slot::Hash => &mut self.nodes[node].hash,
            };
            if entries.is_none() {
                self.filters += 1;
            }
            &mut entries
                .get_or_insert_with(|| Entries {
                    filter: filter.into(),
                    map: HashMap::new(),
                })
                .map
        } else {
            if !self.exact.contains_key(filter) {
                self.filters += 1;
            }
            self.exact.entry(filter.into()).or_default()
        };
        let old = map.insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the entry for (`filter`, `key`) and returns its value. Trie
    /// nodes left empty are freed, so memory does not grow with churn.
    pub fn remove(&mut self, filter: &str, key: &K) -> Option<V> {
        if !is_wildcard_filter(filter) {
            let map = self.exact.get_mut(filter)?;
            let old = map.remove(key)?;
            self.len -= 1;
            if map.is_empty() {
                self.exact.remove(filter);
                self.filters -= 1;
            }
            return Some(old);
        }
        // Path of (parent, child, child-is-plus, literal level) for pruning.
        let mut path: Vec<(usize, usize, Option<&str>)> = Vec::new();
        let mut node = ROOT;
        let mut levels = filter.split('/').peekable();
        let mut slot = Slot::Here;
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                slot = Slot::Hash;
                break;
            }
            let (child, lit) = if level == "+" {
                (self.nodes[node].plus?, None)
            } else {
                (*self.nodes[node].children.get(level)?, Some(level))
            };
            path.push((node, child, lit));
            node = child;
        }
        let n = &mut self.nodes[node];
        let entries = match slot {
            Slot::Here => &mut n.here,
            Slot::Hash => &mut n.hash,
        };
        let e = entries.as_mut()?;
        let old = e.map.remove(key)?;
        self.len -= 1;
        if e.map.is_empty() {
            *entries = None;
            self.filters -= 1;
            // Prune now-empty nodes from the leaf upwards.
            for &(parent, child, lit) in path.iter().rev() {
                if !self.nodes[child].is_empty() {
                    break;
                }
                let p = &mut self.nodes[parent];
                match lit {
                    Some(level) => {
                        p.children.remove(level);
                    }
                    None => p.plus = None,
                }
                self.release(child);
            }
        }
        Some(old)
    }

    /// Returns the value stored for (`filter`, `key`), if any.
    pub fn get(&self, filter: &str, key: &K) -> Option<&V> {
        if !is_wildcard_filter(filter) {
            return self.exact.get(filter)?.get(key);
        }
        let mut node = ROOT;
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                return self.nodes[node].hash.as_ref()?.map.get(key);
            }
            node = if level == "+" {
                self.nodes[node].plus?
            } else {
                *self.nodes[node].children.get(level)?
            };
        }
        self.nodes[node].here.as_ref()?.map.get(key)
    }

    /// Calls `f(filter, key, value)` for every entry whose filter matches
    /// `topic` (a valid topic name). Costs one hash lookup for the exact
    /// filters plus a walk of the trie along the topic's levels (literal and
    /// `+` branches, collecting `#` entries on the way); it never scans all
    /// filters.
    pub fn for_each_match(&self, topic: &str, mut f: impl FnMut(&str, &K, &V)) {
        if let Some((filter, map)) = self.exact.get_key_value(topic) {
            for (k, v) in map {
                f(filter, k, v);
            }
        }
        let root = &self.nodes[ROOT];
        if root.is_empty() {
            return;
        }
        let emit = |e: &Option<Entries<K, V>>, f: &mut dyn FnMut(&str, &K, &V)| {
            if let Some(e) = e {
                for (k, v) in &e.map {
                    f(&e.filter, k, v);
                }
            }
        };
        // [MQTT-4.7.2-1] Filters starting with '+' or '#' must not match topics
        // starting with '$': skip the root's '#' entries and '+' branch for them.
        let dollar = topic.starts_with('$');
        // Branch points are pushed here; the literal branch is followed in place,
        // so the stack (and its allocation) is only used where '+' forks the walk.
        let mut stack: Vec<(usize, Split<'_, char>)> = Vec::new();
        let mut current = Some((ROOT, topic.split('/')));
        while let Some((idx, mut levels)) = current.take().or_else(|| stack.pop()) {
            let node = &self.nodes[idx];
            let guarded = dollar && idx == ROOT;
            // '#' matches the parent level and any number of children (§4.7.1.2).
            if !guarded {
                emit(&node.hash, &mut f);
            }
            let Some(level) = levels.next() else {
                emit(&node.here, &mut f);
                continue;
            };
            let lit = node.children.get(level).copied();
            let plus = if guarded { None } else { node.plus };
            match (lit, plus) {
                (Some(a), Some(b)) => {
                    stack.push((b, levels.clone()));
                    current = Some((a, levels));
                }
                (Some(a), None) | (None, Some(a)) => current = Some((a, levels)),
                (None, None) => {}
            }
        }
    }

    /// Number of (filter, key) entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of distinct filters with at least one entry.
    pub fn filter_count(&self) -> usize {
        self.filters
    }

    /// Finds (creating as needed) the node and slot for a wildcard filter.
    fn descend_or_create(&mut self, filter: &str) -> (usize, Slot) {
        let mut node = ROOT;
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                return (node, Slot::Hash);
            }
            let existing = if level == "+" {
                self.nodes[node].plus
            } else {
                self.nodes[node].children.get(level).copied()
            };
            node = match existing {
                Some(child) => child,
                None => {
                    let child = self.alloc();
                    let n = &mut self.nodes[node];
                    if level == "+" {
                        n.plus = Some(child);
                    } else {
                        n.children.insert(level.into(), child);
                    }
                    child
                }
            };
        }
        (node, Slot::Here)
    }

    fn alloc(&mut self) -> usize {
        match self.free.pop() {
            Some(idx) => idx,
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        }
    }

    fn release(&mut self, idx: usize) {
        debug_assert_ne!(idx, ROOT);
        // Drop the node's (empty) maps so their capacity is returned.
        self.nodes[idx] = Node::default();
        self.free.push(idx);
        if self.free.len() + 1 == self.nodes.len() {
            // Only the root is left: give the arena back.
            self.nodes.truncate(1);
            self.nodes.shrink_to_fit();
            self.free = Vec::new();
        }
    }

    /// Number of live trie nodes, root included (for tests).
    #[cfg(test)]
    fn live_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matches_filter;
    use std::collections::BTreeSet;

    fn matches(idx: &SubscriptionIndex<u32, u32>, topic: &str) -> BTreeSet<(String, u32, u32)> {
        let mut out = BTreeSet::new();
        idx.for_each_match(topic, |f, k, v| {
            assert!(out.insert((f.to_owned(), *k, *v)), "duplicate match");
        });
        out
    }

    fn filters(idx: &SubscriptionIndex<u32, u32>, topic: &str) -> Vec<String> {
        let mut v: Vec<String> = matches(idx, topic).into_iter().map(|(f, _, _)| f).collect();
        v.dedup();
        v
    }

    #[test]
    fn exact_and_wildcard_matching() {
        let mut idx = SubscriptionIndex::new();
        for (i, f) in ["a/b", "a/+", "a/#", "#", "+/b", "+/+", "a/b/c", "+"]
            .iter()
            .enumerate()
        {
            idx.insert(f, 1, i as u32);
        }
        assert_eq!(
            filters(&idx, "a/b"),
            ["#", "+/+", "+/b", "a/#", "a/+", "a/b"]
        );
        assert_eq!(filters(&idx, "a"), ["#", "+", "a/#"]);
        assert_eq!(filters(&idx, "a/b/c"), ["#", "a/#", "a/b/c"]);
        assert_eq!(filters(&idx, "x"), ["#", "+"]);
        for t in ["a/b", "a", "a/b/c", "x", "/", "a//b", "$x/b"] {
            for f in filters(&idx, t) {
                assert!(matches_filter(&f, t), "{f} {t}");
            }
        }
    }

    #[test]
    fn multi_level_wildcard_matches_parent() {
        // MQTT 5.0 §4.7.1.2: "sport/#" also matches "sport".
        let mut idx = SubscriptionIndex::new();
        idx.insert("sport/#", 7, 0);
        assert_eq!(filters(&idx, "sport"), ["sport/#"]);
        assert_eq!(filters(&idx, "sport/"), ["sport/#"]);
        assert_eq!(filters(&idx, "sport/tennis/x"), ["sport/#"]);
        assert!(filters(&idx, "sports").is_empty());
        assert!(filters(&idx, "spor").is_empty());
    }

    #[test]
    fn mqtt_4_7_2_1_dollar_rule() {
        let mut idx = SubscriptionIndex::new();
        for f in ["#", "+/x", "+", "+/#", "$SYS/#", "$SYS/+", "$SYS"] {
            idx.insert(f, 1, 0);
        }
        assert_eq!(filters(&idx, "$SYS"), ["$SYS", "$SYS/#"]);
        assert_eq!(filters(&idx, "$SYS/x"), ["$SYS/#", "$SYS/+"]);
        assert_eq!(filters(&idx, "a/x"), ["#", "+/#", "+/x"]);
        assert_eq!(filters(&idx, "a/$x"), ["#", "+/#"]);
    }

    #[test]
    fn empty_levels() {
        let mut idx = SubscriptionIndex::new();
        for f in ["/", "//", "+/", "/+", "a//b", "a/+/b", "/#", "a/", "+"] {
            idx.insert(f, 1, 0);
        }
        assert_eq!(filters(&idx, "/"), ["+/", "/", "/#", "/+"]);
        assert_eq!(filters(&idx, "a//b"), ["a/+/b", "a//b"]);
        assert_eq!(filters(&idx, "a/"), ["+/", "a/"]);
        // "" (not a valid name, but one empty level) is the parent level of "/#".
        assert_eq!(filters(&idx, ""), ["+", "/#"]);
        assert_eq!(filters(&idx, "//"), ["/#", "//"]);
    }

    #[test]
    fn replacement_and_keys() {
        let mut idx = SubscriptionIndex::new();
        assert_eq!(idx.insert("a/+", 1, 10), None);
        assert_eq!(idx.insert("a/+", 1, 11), Some(10));
        assert_eq!(idx.insert("a/+", 2, 20), None);
        assert_eq!(idx.insert("a/b", 1, 30), None);
        assert_eq!(idx.insert("a/b", 1, 31), Some(30));
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.filter_count(), 2);
        assert_eq!(idx.get("a/+", &1), Some(&11));
        assert_eq!(idx.get("a/+", &2), Some(&20));
        assert_eq!(idx.get("a/+", &3), None);
        assert_eq!(idx.get("a/#", &1), None);
        assert_eq!(idx.get("a/b", &1), Some(&31));
        assert_eq!(
            matches(&idx, "a/b").into_iter().collect::<Vec<_>>(),
            [
                ("a/+".into(), 1, 11),
                ("a/+".into(), 2, 20),
                ("a/b".into(), 1, 31)
            ]
        );
    }

    #[test]
    fn removal_prunes_everything() {
        let mut idx = SubscriptionIndex::new();
        let fs = [
            "a/b", "a/+", "a/#", "#", "+/b", "+/+", "a/b/c/+", "+", "/+", "a//#", "$s/+/#",
        ];
        for f in fs {
            for k in 0..3 {
                idx.insert(f, k, k);
            }
        }
        assert_eq!(idx.len(), fs.len() * 3);
        assert_eq!(idx.filter_count(), fs.len());
        assert!(idx.live_nodes() > 1);
        assert_eq!(idx.remove("a/+", &9), None);
        assert_eq!(idx.remove("x/+", &0), None);
        assert_eq!(idx.remove("x", &0), None);
        for f in fs {
            for k in 0..3 {
                assert_eq!(idx.remove(f, &k), Some(k), "{f}");
                assert_eq!(idx.remove(f, &k), None, "{f}");
            }
            assert_eq!(idx.get(f, &0), None);
        }
        assert_eq!(idx.len(), 0);
        assert!(idx.is_empty());
        assert_eq!(idx.filter_count(), 0);
        assert_eq!(idx.live_nodes(), 1);
        assert_eq!(idx.nodes.len(), 1);
        assert!(idx.exact.is_empty());
        assert!(matches(&idx, "a/b").is_empty());
    }

    #[test]
    fn partial_removal_keeps_siblings() {
        let mut idx = SubscriptionIndex::new();
        idx.insert("a/+/c", 1, 1);
        idx.insert("a/+/d", 1, 2);
        idx.insert("a/+", 1, 3);
        let before = idx.live_nodes();
        assert_eq!(idx.remove("a/+/c", &1), Some(1));
        assert_eq!(idx.live_nodes(), before - 1);
        assert_eq!(filters(&idx, "a/x/d"), ["a/+/d"]);
        assert_eq!(filters(&idx, "a/x"), ["a/+"]);
        assert_eq!(idx.remove("a/+", &1), Some(3));
        assert_eq!(idx.live_nodes(), before - 1);
        assert_eq!(idx.remove("a/+/d", &1), Some(2));
        assert_eq!(idx.live_nodes(), 1);
    }

    #[test]
    fn churn_reuses_slots() {
        let mut idx = SubscriptionIndex::new();
        idx.insert("keep/+", 0, 0);
        for i in 0..1000u32 {
            let f = format!("x/{i}/+/#");
            idx.insert(&f, i, i);
            assert_eq!(idx.remove(&f, &i), Some(i));
        }
        assert!(idx.nodes.len() <= 8, "{}", idx.nodes.len());
        assert_eq!(idx.len(), 1);
    }

    #[test]
    fn very_deep_filters_do_not_overflow_the_stack() {
        // 65535 bytes of '/' is 65536 empty levels; walking and dropping such a
        // trie must not recurse. Run on a small stack to prove it.
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let mut idx = SubscriptionIndex::new();
                let deep_plus = "+/".repeat(32767) + "+";
                let deep_hash = "/".repeat(65533) + "#";
                idx.insert(&deep_plus, 1u32, 1u32);
                idx.insert(&deep_hash, 2, 2);
                let topic = "/".repeat(32767);
                let mut n = 0;
                idx.for_each_match(&topic, |_, _, _| n += 1);
                assert_eq!(n, 1);
                let topic = "/".repeat(65534);
                let mut n = 0;
                idx.for_each_match(&topic, |_, _, _| n += 1);
                assert_eq!(n, 1);
                let clone = idx.clone();
                drop(clone);
                drop(idx);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
