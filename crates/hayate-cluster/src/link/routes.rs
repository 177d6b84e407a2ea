//! What a batch of route deltas changes on the other node.
//!
//! The link's route feed (`RouteDelta`) says, in order, which filters this node's route set
//! gained and lost. A batch read at once goes out as one SUBSCRIBE and one UNSUBSCRIBE; what
//! they carry is the batch's net effect per filter, against what the other node's session
//! had before it. Sent delta by delta as two lists (every SUBSCRIBE, then every UNSUBSCRIBE),
//! a filter removed and added again in one batch (one session's relay ended as another
//! session with the same filter was taken over, within microseconds) was unsubscribed last:
//! the other node stopped forwarding it here while this node's link believed it subscribed,
//! until the filter's next change (the 30-minute kill soak of 2026-11-30 lost 720 QoS 1 and
//! 930 QoS 2 deliveries that way, published on one node for 34 s).

use hayate_core::cluster::{Route, RouteDelta};
use std::collections::HashMap;
use std::sync::Arc;

/// Filters (with their subscription identifiers) the other node's session for us has.
pub(super) type Subscribed = HashMap<Arc<str>, u32>;

/// The deltas of one batch, applied to the link's [`Subscribed`] as they come; remembers
/// what each filter touched was before the batch.
#[derive(Debug, Default)]
pub(super) struct RouteBatch {
    before: HashMap<Arc<str>, Option<u32>>,
}

impl RouteBatch {
    /// Applies `delta` to `subscribed`.
    pub(super) fn apply(&mut self, subscribed: &mut Subscribed, delta: RouteDelta) {
        let (filter, old) = match delta {
            RouteDelta::Add(route) => {
                let old = subscribed.insert(route.filter.clone(), route.id);
                (route.filter, old)
            }
            RouteDelta::Remove(filter) => {
                let old = subscribed.remove(&filter);
                (filter, old)
            }
        };
        self.before.entry(filter).or_insert(old);
    }

    /// What the other node must be told, net of the batch: the filters to subscribe (new, or
    /// with another identifier) and those to unsubscribe. A filter removed and added again
    /// with its identifier, or added and removed, needs nothing.
    pub(super) fn changes(self, subscribed: &Subscribed) -> (Vec<Route>, Vec<Arc<str>>) {
        let mut add = Vec::new();
        let mut remove = Vec::new();
        for (filter, before) in self.before {
            match (before, subscribed.get(&filter)) {
                (before, Some(id)) if before != Some(*id) => add.push(Route { filter, id: *id }),
                (Some(_), None) => remove.push(filter),
                _ => {}
            }
        }
        (add, remove)
    }

    /// Puts `subscribed` back as it was before the batch (nothing of it was sent: the feed
    /// lagged, and the whole set is compared again).
    pub(super) fn undo(self, subscribed: &mut Subscribed) {
        for (filter, before) in self.before {
            match before {
                Some(id) => subscribed.insert(filter, id),
                None => subscribed.remove(&filter),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(filter: &str, id: u32) -> RouteDelta {
        RouteDelta::Add(Route {
            filter: Arc::from(filter),
            id,
        })
    }

    fn remove(filter: &str) -> RouteDelta {
        RouteDelta::Remove(Arc::from(filter))
    }

    fn run(subscribed: &mut Subscribed, deltas: Vec<RouteDelta>) -> (Vec<String>, Vec<String>) {
        let mut batch = RouteBatch::default();
        for delta in deltas {
            batch.apply(subscribed, delta);
        }
        let (add, remove) = batch.changes(subscribed);
        let mut add: Vec<String> = add
            .iter()
            .map(|r| format!("{}#{}", r.filter, r.id))
            .collect();
        let mut remove: Vec<String> = remove.iter().map(|f| f.to_string()).collect();
        add.sort();
        remove.sort();
        (add, remove)
    }

    fn subscribed(filters: &[(&str, u32)]) -> Subscribed {
        filters.iter().map(|(f, id)| (Arc::from(*f), *id)).collect()
    }

    /// The soak's loss: removed then added again in one batch. Sent as "SUBSCRIBE, then
    /// UNSUBSCRIBE" the other node ended without the filter; net, nothing changes there.
    #[test]
    fn a_filter_removed_and_added_again_in_one_batch_stays_subscribed() {
        let mut set = subscribed(&[("soak/q1/#", 1), ("soak/q2/#", 1)]);
        let deltas = vec![
            remove("soak/q1/#"),
            remove("soak/q2/#"),
            add("soak/q1/#", 1),
            add("soak/q2/#", 1),
        ];
        assert_eq!(run(&mut set, deltas), (vec![], vec![]));
        assert_eq!(set, subscribed(&[("soak/q1/#", 1), ("soak/q2/#", 1)]));
    }

    #[test]
    fn a_filter_added_and_removed_in_one_batch_needs_nothing() {
        let mut set = Subscribed::new();
        assert_eq!(
            run(&mut set, vec![add("a/#", 1), remove("a/#")]),
            (vec![], vec![])
        );
        assert!(set.is_empty());
    }

    #[test]
    fn new_filters_are_subscribed_and_gone_ones_unsubscribed() {
        let mut set = subscribed(&[("old", 1)]);
        assert_eq!(
            run(&mut set, vec![add("new", 1), remove("old")]),
            (vec!["new#1".to_string()], vec!["old".to_string()])
        );
    }

    /// A shared group's filter that comes back with another identifier is subscribed again
    /// with it (a SUBSCRIBE replaces the subscription there).
    #[test]
    fn a_filter_back_with_another_identifier_is_subscribed_with_it() {
        let mut set = subscribed(&[("$share/g/t", 7)]);
        assert_eq!(
            run(&mut set, vec![remove("$share/g/t"), add("$share/g/t", 9)]),
            (vec!["$share/g/t#9".to_string()], vec![])
        );
    }

    #[test]
    fn an_undone_batch_leaves_the_set_as_it_was() {
        let before = subscribed(&[("a", 1), ("b", 1)]);
        let mut set = before.clone();
        let mut batch = RouteBatch::default();
        for delta in [remove("a"), add("c", 1), add("b", 2)] {
            batch.apply(&mut set, delta);
        }
        batch.undo(&mut set);
        assert_eq!(set, before);
    }
}
