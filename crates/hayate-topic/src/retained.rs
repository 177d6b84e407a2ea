//! Retained messages by topic name (MQTT 5.0 §3.3.1.3), matched by a filter
//! when a client subscribes.
//!
//! A level trie over topic names whose nodes live in an arena (`Vec`) linked
//! by index, so walks and drops never recurse however many levels a topic has.

use std::collections::HashMap;
use std::str::Split;

const ROOT: usize = 0;

#[derive(Debug, Clone)]
struct Node<V> {
    /// Child levels, keyed by the level string (possibly empty).
    children: HashMap<Box<str>, usize>,
    /// The full topic name ending at this node, with its value.
    value: Option<(Box<str>, V)>,
}

impl<V> Default for Node<V> {
    fn default() -> Self {
        Node {
            children: HashMap::new(),
            value: None,
        }
    }
}

impl<V> Node<V> {
    fn is_empty(&self) -> bool {
        self.children.is_empty() && self.value.is_none()
    }
}

/// Retained messages by topic name; matched by a filter when a client
/// subscribes.
///
/// Topic names are assumed valid (see [`crate::validate_topic_name`]), and
/// filters valid (see [`crate::validate_topic_filter`]). Matching follows
/// [`crate::matches_filter`], including the `$` rule [MQTT-4.7.2-1].
#[derive(Debug, Clone)]
pub struct RetainedTree<V> {
    /// Arena of trie nodes; `nodes[ROOT]` always exists and never holds a value
    /// (every topic has at least one level).
    nodes: Vec<Node<V>>,
    /// Indices of unused slots in `nodes`.
    free: Vec<usize>,
    len: usize,
}

impl<V> Default for RetainedTree<V> {
    fn default() -> Self {
        RetainedTree {
            nodes: vec![Node::default()],
            free: Vec::new(),
            len: 0,
        }
    }
}

/// Work items for the iterative match walk.
enum Walk<'a> {
    /// Match the remaining filter levels starting at this node.
    Filter(usize, Split<'a, char>),
    /// Emit this node and everything below it (`#`).
    Subtree(usize),
}

impl<V> RetainedTree<V> {
    /// Creates an empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` as the retained message for `topic`, returning the value
    /// it replaces.
    pub fn insert(&mut self, topic: &str, value: V) -> Option<V> {
        let mut node = ROOT;
        for level in topic.split('/') {
            node = match self.nodes[node].children.get(level) {
                Some(&child) => child,
                None => {
                    let child = self.alloc();
                    self.nodes[node].children.insert(level.into(), child);
                    child
                }
            };
        }
        let slot = &mut self.nodes[node].value;
        match slot {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                *slot = Some((topic.into(), value));
                self.len += 1;
                None
            }
        }
    }

    /// Removes the retained message for `topic` and returns it; nodes left
    /// empty are freed.
    pub fn remove(&mut self, topic: &str) -> Option<V> {
        let mut path: Vec<(usize, usize, &str)> = Vec::new();
        let mut node = ROOT;
        for level in topic.split('/') {
            let child = *self.nodes[node].children.get(level)?;
            path.push((node, child, level));
            node = child;
        }
        let (_, old) = self.nodes[node].value.take()?;
        self.len -= 1;
        for &(parent, child, level) in path.iter().rev() {
            if !self.nodes[child].is_empty() {
                break;
            }
            self.nodes[parent].children.remove(level);
            self.release(child);
        }
        Some(old)
    }

    /// Returns the retained message for `topic`, if any.
    pub fn get(&self, topic: &str) -> Option<&V> {
        let mut node = ROOT;
        for level in topic.split('/') {
            node = *self.nodes[node].children.get(level)?;
        }
        self.nodes[node].value.as_ref().map(|(_, v)| v)
    }

    /// Calls `f(topic, value)` for every stored topic matching `filter`,
    /// walking only the branches the filter allows: a literal level follows one
    /// child, `+` all children of that level, `#` the whole subtree (including
    /// the parent level itself, §4.7.1.2). A leading `+` or `#` skips topics
    /// starting with `$` [MQTT-4.7.2-1].
    pub fn for_each_match(&self, filter: &str, mut f: impl FnMut(&str, &V)) {
        if self.len == 0 {
            return;
        }
        let mut emit = |node: &Node<V>| {
            if let Some((t, v)) = &node.value {
                f(t, v);
            }
        };
        let mut stack = vec![Walk::Filter(ROOT, filter.split('/'))];
        while let Some(item) = stack.pop() {
            match item {
                Walk::Subtree(idx) => {
                    let node = &self.nodes[idx];
                    emit(node);
                    stack.extend(node.children.values().map(|&c| Walk::Subtree(c)));
                }
                Walk::Filter(idx, mut levels) => {
                    let node = &self.nodes[idx];
                    let Some(level) = levels.next() else {
                        emit(node);
                        continue;
                    };
                    // [MQTT-4.7.2-1] A filter starting with a wildcard must not match
                    // topics whose first level starts with '$'.
                    let allowed = |key: &str| idx != ROOT || !key.starts_with('$');
                    match level {
                        "#" => {
                            // '#' matches the parent level too ("a/#" matches "a").
                            emit(node);
                            stack.extend(
                                node.children
                                    .iter()
                                    .filter(|(k, _)| allowed(k))
                                    .map(|(_, &c)| Walk::Subtree(c)),
                            );
                        }
                        "+" => stack.extend(
                            node.children
                                .iter()
                                .filter(|(k, _)| allowed(k))
                                .map(|(_, &c)| Walk::Filter(c, levels.clone())),
                        ),
                        _ => {
                            if let Some(&c) = node.children.get(level) {
                                stack.push(Walk::Filter(c, levels));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Keeps only the entries for which `keep(topic, value)` is true (e.g. to
    /// drop expired messages), freeing nodes left empty. Returns how many
    /// entries were removed. Visits every node once.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) -> usize {
        // Pre-order list of live nodes; processing it in reverse handles every
        // child before its parent, so emptiness propagates upwards in one pass.
        let mut order = Vec::with_capacity(self.nodes.len() - self.free.len());
        let mut stack = vec![ROOT];
        while let Some(idx) = stack.pop() {
            order.push(idx);
            stack.extend(self.nodes[idx].children.values().copied());
        }
        let mut dead = vec![false; self.nodes.len()];
        let mut removed = 0;
        for &idx in order.iter().rev() {
            let node = &mut self.nodes[idx];
            if let Some((t, v)) = &node.value {
                if !keep(t, v) {
                    node.value = None;
                    removed += 1;
                }
            }
            node.children.retain(|_, c| !dead[*c]);
            if idx != ROOT && node.is_empty() {
                dead[idx] = true;
            }
        }
        self.len -= removed;
        for (idx, _) in dead.iter().enumerate().filter(|(_, d)| **d) {
            self.release(idx);
        }
        removed
    }

    /// Number of retained topics.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no topic is retained.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    fn topics(tree: &RetainedTree<u32>, filter: &str) -> Vec<String> {
        let mut v = Vec::new();
        tree.for_each_match(filter, |t, val| {
            assert_eq!(tree.get(t), Some(val));
            v.push(t.to_owned());
        });
        v.sort();
        let n = v.len();
        v.dedup();
        assert_eq!(n, v.len(), "duplicate match");
        v
    }

    fn tree(ts: &[&str]) -> RetainedTree<u32> {
        let mut t = RetainedTree::new();
        for (i, topic) in ts.iter().enumerate() {
            assert_eq!(t.insert(topic, i as u32), None);
        }
        t
    }

    #[test]
    fn wildcard_walks() {
        let t = tree(&["a", "a/b", "a/c", "a/b/c", "b", "a/", "/"]);
        assert_eq!(topics(&t, "a/+"), ["a/", "a/b", "a/c"]);
        assert_eq!(topics(&t, "a/#"), ["a", "a/", "a/b", "a/b/c", "a/c"]);
        assert_eq!(topics(&t, "+"), ["a", "b"]);
        assert_eq!(topics(&t, "+/+"), ["/", "a/", "a/b", "a/c"]);
        assert_eq!(topics(&t, "a/b"), ["a/b"]);
        assert_eq!(topics(&t, "a/b/#"), ["a/b", "a/b/c"]);
        assert_eq!(topics(&t, "#").len(), 7);
        assert!(topics(&t, "c/#").is_empty());
        assert!(topics(&t, "a/b/c/d").is_empty());
    }

    #[test]
    fn multi_level_wildcard_matches_parent() {
        // MQTT 5.0 §4.7.1.2: "sport/#" also matches "sport".
        let t = tree(&["sport", "sports"]);
        assert_eq!(topics(&t, "sport/#"), ["sport"]);
    }

    #[test]
    fn mqtt_4_7_2_1_dollar_rule() {
        let t = tree(&["$SYS", "$SYS/a", "x/$y", "x"]);
        assert_eq!(topics(&t, "#"), ["x", "x/$y"]);
        assert_eq!(topics(&t, "+"), ["x"]);
        assert_eq!(topics(&t, "+/+"), ["x/$y"]);
        assert_eq!(topics(&t, "+/#"), ["x", "x/$y"]);
        assert_eq!(topics(&t, "$SYS/#"), ["$SYS", "$SYS/a"]);
        assert_eq!(topics(&t, "$SYS/+"), ["$SYS/a"]);
        assert_eq!(topics(&t, "x/+"), ["x/$y"]);
    }

    #[test]
    fn empty_levels() {
        let t = tree(&["/", "//", "/a", "a//b", ""]);
        assert_eq!(topics(&t, "/+"), ["/", "/a"]);
        // "" is one empty level: the parent level of "/#".
        assert_eq!(topics(&t, "/#"), ["", "/", "//", "/a"]);
        assert_eq!(topics(&t, "a/+/b"), ["a//b"]);
        assert_eq!(topics(&t, "+"), [""]);
        assert_eq!(t.get(""), Some(&4));
        assert_eq!(t.get("/"), Some(&0));
    }

    #[test]
    fn replace_remove_prune() {
        let mut t = RetainedTree::new();
        assert_eq!(t.insert("a/b/c", 1), None);
        assert_eq!(t.insert("a/b/c", 2), Some(1));
        assert_eq!(t.insert("a", 3), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get("a/b"), None);
        assert_eq!(t.remove("a/b"), None);
        assert_eq!(t.remove("a/b/c/d"), None);
        assert_eq!(t.remove("a/b/c"), Some(2));
        assert_eq!(t.live_nodes(), 2);
        assert_eq!(t.remove("a/b/c"), None);
        assert_eq!(t.remove("a"), Some(3));
        assert_eq!(t.len(), 0);
        assert!(t.is_empty());
        assert_eq!(t.nodes.len(), 1);
        assert!(topics(&t, "#").is_empty());
    }

    #[test]
    fn retain_removes_and_prunes() {
        let mut t = tree(&["a", "a/b", "a/b/c", "x/y/z", "x", "q/r"]);
        let removed = t.retain(|topic, _| topic.len() == 1);
        assert_eq!(removed, 4);
        assert_eq!(t.len(), 2);
        assert_eq!(topics(&t, "#"), ["a", "x"]);
        assert_eq!(t.live_nodes(), 3);
        assert_eq!(t.retain(|_, _| true), 0);
        assert_eq!(t.retain(|_, _| false), 2);
        assert!(t.is_empty());
        assert_eq!(t.nodes.len(), 1);
        // Still usable afterwards.
        t.insert("k", 9);
        assert_eq!(topics(&t, "+"), ["k"]);
    }

    #[test]
    fn very_deep_topics_do_not_overflow_the_stack() {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let mut t = RetainedTree::new();
                let deep = "/".repeat(65535);
                t.insert(&deep, 1u32);
                t.insert(&"a/".repeat(32767), 2);
                let mut n = 0;
                t.for_each_match("#", |_, _| n += 1);
                assert_eq!(n, 2);
                let mut n = 0;
                t.for_each_match(&"+/".repeat(32767), |_, _| n += 1);
                assert_eq!(n, 1);
                let c = t.clone();
                drop(c);
                assert_eq!(t.retain(|topic, _| topic.starts_with('a')), 1);
                drop(t);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
