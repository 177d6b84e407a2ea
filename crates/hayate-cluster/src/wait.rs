//! How long a resumed session's CONNACK waits for the other nodes' answers to its claim once
//! its first deadline has passed (`docs/CLUSTER.md`, "The wait goes on while the awaited node
//! reconnects"). Pure: the node task (`node.rs`) gives it what gossip and the links know of
//! each node and the time.

use crate::LinkHold;
use hayate_core::Arrival;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a claim waits for answers before its CONNACK goes out anyway (the channel's own
/// limit is a little longer).
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a claim past its deadline looks again whether a node it waits for, back, has
/// its link up.
const RELINK_POLL: Duration = Duration::from_millis(250);

/// A resumed session's claim whose CONNACK waits for the other nodes' answers.
#[derive(Debug)]
pub(crate) struct PendingClaim {
    /// The nodes still to answer.
    pub waiting: Vec<Arc<str>>,
    /// When the CONNACK goes out without them.
    pub deadline: Instant,
    /// When the client's CONNECT arrived (the claim's `at`).
    pub at: Arrival,
    /// The latest `deadline` may move to ([`relink_wait`]).
    pub cap: Instant,
    /// The latest it may move to for a held link: the first deadline plus one hold
    /// (`relay_order_hold_ms`) and `ANSWER_TIMEOUT`. A claim waits out the hold there is, not
    /// one hold after another (a link from a node whose old sessions' relay ends cannot come,
    /// its next node being dead, may hold again and again).
    pub held_cap: Instant,
    /// The nodes it waits for that were seen dead since the claim (or at it).
    pub was_away: Vec<Arc<str>>,
    /// Those of them whose link came up again while it waited, and were given
    /// `ANSWER_TIMEOUT` from then.
    pub relinked: Vec<Arc<str>>,
}

/// What the wait needs to know of one other node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerState {
    /// Since when gossip has it dead (`None` while live).
    pub dead_since: Option<Instant>,
    /// It announced that it is stopping.
    pub stopping: bool,
    /// It keeps its sessions in a store.
    pub durable: bool,
    /// This node's link to it is connected.
    pub link_up: bool,
    /// That link's hold (`NodeStats::hold`): while it holds, the node's answer cannot come.
    pub hold: LinkHold,
}

/// A claim past its deadline waits on while a node it waits for, seen dead since the claim,
/// is live again and its link from here is down, and for `ANSWER_TIMEOUT` once that link is
/// up: the node may have answered already, into its session for this node, which only that
/// link brings here (the kill soak of 2026-11-29 lost a session to an answer that came 0.4 s
/// after the timeout). Never past `claim.cap`.
///
/// And while such a node (with a store, not stopping) is still dead, less than `lost_wait`
/// after it went away: killed as the claim reached it, before gossip saw it dead, it was asked
/// like a live node, and it may hold the session with the client's QoS 2 packet ids; the claim
/// waits for it as for a node found away at the claim (the 20-minute default kill soak of
/// `aa7f2b4`: a publisher whose node was killed as it published got its CONNACK elsewhere
/// before that node was back, and its resent QoS 2 PUBLISH was routed a second time, 3 times
/// in 43 kills). The cap moves to `lost_wait` after its death plus twice `ANSWER_TIMEOUT`.
///
/// `peer` tells the state of a node by name. `None`: the wait is over.
pub(crate) fn relink_wait(
    claim: &mut PendingClaim,
    peer: impl Fn(&str) -> Option<PeerState>,
    lost_wait: Duration,
    now: Instant,
) -> Option<Instant> {
    let awaited: Vec<(Arc<str>, PeerState)> = claim
        .was_away
        .iter()
        .filter(|name| claim.waiting.contains(name))
        .filter_map(|name| peer(name).map(|state| (name.clone(), state)))
        .collect();
    for (_, state) in &awaited {
        if let (Some(dead_since), true, false) = (state.dead_since, state.durable, state.stopping) {
            claim.cap = claim.cap.max(dead_since + lost_wait + 2 * ANSWER_TIMEOUT);
        }
    }
    if now >= claim.cap {
        return None;
    }
    let mut until: Option<Instant> = None;
    // A live node whose link holds what it sends (another client's order after a take-over,
    // `[cluster] relay_order_hold_ms`, up to 3 s by default, longer than `ANSWER_TIMEOUT`)
    // cannot deliver its answer meanwhile: the claim waits for it while the hold lasts, and
    // `ANSWER_TIMEOUT` from its end (what the node sent during the hold is read first). Until
    // then a plain move whose answer sat behind such a hold got Session Present 0 and its old
    // session merged later (the lose-node soak of `c710fdc`; `tests/cluster_held.rs`).
    if now < claim.held_cap {
        for state in claim.waiting.iter().filter_map(|name| peer(name)) {
            if state.dead_since.is_some() || !state.link_up {
                continue;
            }
            let next = match state.hold {
                LinkHold { held: true, .. } => now + RELINK_POLL,
                LinkHold {
                    last_ended: Some(ended),
                    ..
                } if ended + ANSWER_TIMEOUT > now => ended + ANSWER_TIMEOUT,
                _ => continue,
            };
            let next = next.min(claim.held_cap);
            until = Some(until.map_or(next, |u| u.max(next)));
        }
    }
    for (name, state) in awaited {
        let next = if let Some(dead_since) = state.dead_since {
            let lost_until = dead_since + lost_wait;
            if !state.durable || state.stopping || now >= lost_until {
                continue;
            }
            (now + RELINK_POLL).min(lost_until)
        } else if !state.link_up {
            claim.relinked.retain(|n| *n != name);
            now + RELINK_POLL
        } else if !claim.relinked.contains(&name) {
            claim.relinked.push(name);
            now + ANSWER_TIMEOUT
        } else {
            continue;
        };
        until = Some(until.map_or(next, |u| u.max(next)));
    }
    until.map(|until| until.min(claim.cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOST_WAIT: Duration = Duration::from_secs(10);

    fn claim(now: Instant, n1_seen_dead: bool) -> PendingClaim {
        PendingClaim {
            waiting: vec![Arc::from("n1")],
            deadline: now,
            at: Arrival::from_nanos(1),
            cap: now + Duration::from_secs(4),
            held_cap: now + Duration::from_secs(4),
            was_away: if n1_seen_dead {
                vec![Arc::from("n1")]
            } else {
                Vec::new()
            },
            relinked: Vec::new(),
        }
    }

    fn state(dead_since: Option<Instant>, durable: bool, link_up: bool) -> PeerState {
        PeerState {
            dead_since,
            stopping: false,
            durable,
            link_up,
            hold: LinkHold::default(),
        }
    }

    #[test]
    fn a_node_whose_link_holds_its_answer_is_waited_for_while_the_hold_lasts() {
        let now = Instant::now();
        let mut claim = claim(now, false);
        let held = PeerState {
            hold: LinkHold {
                held: true,
                last_ended: None,
            },
            ..state(None, true, true)
        };
        assert_eq!(
            relink_wait(&mut claim, |_| Some(held), LOST_WAIT, now),
            Some(now + RELINK_POLL)
        );
        // The hold ended a moment ago: what the node sent meanwhile is read first, its
        // answer among it.
        let later = now + Duration::from_millis(500);
        let ended = PeerState {
            hold: LinkHold {
                held: false,
                last_ended: Some(now),
            },
            ..state(None, true, true)
        };
        assert_eq!(
            relink_wait(&mut claim, |_| Some(ended), LOST_WAIT, later),
            Some(now + ANSWER_TIMEOUT)
        );
        // And that long after it, the deadline is the deadline.
        assert_eq!(
            relink_wait(&mut claim, |_| Some(ended), LOST_WAIT, now + ANSWER_TIMEOUT),
            None
        );
        // Not past one hold: a link that holds again and again is not waited for.
        claim.held_cap = now + Duration::from_secs(3);
        assert_eq!(
            relink_wait(
                &mut claim,
                |_| Some(held),
                LOST_WAIT,
                now + Duration::from_secs(3)
            ),
            None
        );
        assert_eq!(
            relink_wait(
                &mut claim,
                |_| Some(held),
                LOST_WAIT,
                now + Duration::from_millis(2_900)
            ),
            Some(now + Duration::from_secs(3))
        );
        // Never past the cap.
        let late = claim.cap;
        assert_eq!(
            relink_wait(&mut claim, |_| Some(held), LOST_WAIT, late),
            None
        );
    }

    #[test]
    fn a_node_live_throughout_is_not_waited_for_past_the_deadline() {
        let now = Instant::now();
        let mut claim = claim(now, false);
        let n1 = state(None, true, true);
        assert_eq!(relink_wait(&mut claim, |_| Some(n1), LOST_WAIT, now), None);
    }

    #[test]
    fn a_durable_node_killed_after_it_was_asked_is_waited_for_until_the_lost_wait() {
        let t0 = Instant::now();
        let died = t0 + Duration::from_millis(500);
        let mut claim = claim(t0, true);
        let dead = state(Some(died), true, false);
        // At the deadline (2 s), still dead: the wait goes on, past the old cap of 4 s.
        let now = t0 + Duration::from_secs(2);
        let until = relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, now).expect("waits");
        assert_eq!(until, now + RELINK_POLL);
        assert_eq!(claim.cap, died + LOST_WAIT + 2 * ANSWER_TIMEOUT);
        let now = t0 + Duration::from_secs(9);
        assert!(relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, now).is_some());
        // Never past the lost wait while it stays dead.
        let now = died + LOST_WAIT - Duration::from_millis(100);
        assert_eq!(
            relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, now),
            Some(died + LOST_WAIT)
        );
        assert_eq!(
            relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, died + LOST_WAIT),
            None
        );
    }

    #[test]
    fn back_within_the_lost_wait_it_gets_the_answer_time_once_its_link_is_up() {
        let t0 = Instant::now();
        let died = t0 + Duration::from_millis(500);
        let mut claim = claim(t0, true);
        let now = t0 + Duration::from_secs(2);
        let dead = state(Some(died), true, false);
        assert!(relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, now).is_some());
        // Back at 6 s, link still down: polled.
        let back = state(None, true, false);
        let now = t0 + Duration::from_secs(6);
        assert_eq!(
            relink_wait(&mut claim, |_| Some(back), LOST_WAIT, now),
            Some(now + RELINK_POLL)
        );
        // Link up at 7 s: the answer time, once.
        let linked = state(None, true, true);
        let now = t0 + Duration::from_secs(7);
        assert_eq!(
            relink_wait(&mut claim, |_| Some(linked), LOST_WAIT, now),
            Some(now + ANSWER_TIMEOUT)
        );
        let now = now + ANSWER_TIMEOUT;
        assert_eq!(
            relink_wait(&mut claim, |_| Some(linked), LOST_WAIT, now),
            None
        );
    }

    #[test]
    fn a_node_without_a_store_or_stopping_is_not_waited_for_while_dead() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(2);
        let mut claim1 = claim(t0, true);
        let no_store = state(Some(t0), false, false);
        assert_eq!(
            relink_wait(&mut claim1, |_| Some(no_store), LOST_WAIT, now),
            None
        );
        let mut claim2 = claim(t0, true);
        let stopping = PeerState {
            stopping: true,
            ..state(Some(t0), true, false)
        };
        assert_eq!(
            relink_wait(&mut claim2, |_| Some(stopping), LOST_WAIT, now),
            None
        );
        assert_eq!(claim2.cap, t0 + Duration::from_secs(4), "the cap stays");
    }

    #[test]
    fn a_node_that_answered_is_not_waited_for() {
        let t0 = Instant::now();
        let mut claim = claim(t0, true);
        claim.waiting.clear();
        let dead = state(Some(t0), true, false);
        let now = t0 + Duration::from_secs(2);
        assert_eq!(
            relink_wait(&mut claim, |_| Some(dead), LOST_WAIT, now),
            None
        );
    }
}
