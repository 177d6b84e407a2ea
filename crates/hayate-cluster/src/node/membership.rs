//! How this node follows gossip's view of the others ([`Node::reconcile`]): a link to each live
//! node, and the states of the others (docs/CLUSTER.md, "States of a node as another node
//! sees it"): leaving, stopping, dead, restarted, forgotten.

use super::{Node, Peer, DURABLE_KEY, LEAVING_KEY, STOPPING_KEY};
use crate::link::Link;
use crate::NodeStats;
use chitchat::{ChitchatId, NodeState};
use hayate_core::cluster::PEER_CLIENT_PREFIX;
use hayate_core::WakeList;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

impl Node {
    /// Starts a link to every live node that has none (or a link to an older incarnation),
    /// marks the others dead, and forgets those dead for longer than the grace period.
    pub(super) fn reconcile(
        &mut self,
        live: &[ChitchatId],
        states: &BTreeMap<ChitchatId, NodeState>,
    ) {
        let now = Instant::now();
        self.forget_leaving(states, now);
        self.note_stopping(states, now);
        for (id, state) in states {
            if let Some(peer) = self.peers.get_mut(&id.node_id) {
                if peer.generation == id.generation_id {
                    peer.durable = state.get(DURABLE_KEY).is_some();
                }
            }
        }
        let seen = self.link_live(live);
        let forget = self.note_dead(&seen, now);
        let split = self
            .peers
            .values()
            .any(|p| p.dead_since.is_some() && !p.stopping);
        if split != self.ctx.routes.is_split() {
            tracing::warn!(split, "cluster_split_state");
            self.ctx.routes.set_split(split);
        }
        for name in forget {
            self.drop_peer(&name, now);
            tracing::warn!(peer = %name, "cluster_node_forgotten");
        }
    }

    /// Stops `name`'s link and ends its peer session here (a node forgotten or leaving); no
    /// relay waits for its mark any more (`Broker::relay_node_gone`).
    fn drop_peer(&mut self, name: &str, now: Instant) {
        if let Some(peer) = self.peers.remove(name) {
            let _ = peer.stop.send(true);
        }
        self.end_peer_session(name, now);
        let mut wake = WakeList::new();
        self.ctx.broker.relay_node_gone(name, now, &mut wake);
        for doorbell in wake {
            doorbell.notify_one();
        }
    }

    /// Nodes that announced they leave for good are forgotten now.
    fn forget_leaving(&mut self, states: &BTreeMap<ChitchatId, NodeState>, now: Instant) {
        let leaving: Vec<Arc<str>> = states
            .iter()
            .filter(|(id, state)| {
                state.get(LEAVING_KEY).is_some()
                    && self
                        .peers
                        .get(&id.node_id)
                        .is_some_and(|p| p.generation == id.generation_id)
            })
            .map(|(id, _)| id.node_id.clone())
            .collect();
        for name in leaving {
            self.drop_peer(&name, now);
            tracing::info!(peer = %name, "cluster_node_left");
        }
    }

    /// Nodes that announced they are stopping: away on purpose, not a split. (Not forgotten
    /// yet: what waits for them here is theirs when they are back.)
    fn note_stopping(&mut self, states: &BTreeMap<ChitchatId, NodeState>, now: Instant) {
        for (id, state) in states {
            if state.get(STOPPING_KEY).is_none() {
                continue;
            }
            let Some(peer) = self.peers.get_mut(&id.node_id) else {
                continue;
            };
            if peer.generation != id.generation_id || peer.stopping {
                continue;
            }
            peer.stopping = true;
            peer.durable = state.get(DURABLE_KEY).is_some();
            tracing::info!(peer = %id.node_id, durable = peer.durable, "cluster_node_stopping");
            if peer.durable {
                // Its clients reconnect here as it stops (often before its notice arrives):
                // their CONNACKs wait for its return.
                let until = now + self.stopped_wait;
                for claim in self.pending.values_mut() {
                    if claim.waiting.contains(&id.node_id) {
                        claim.deadline = claim.deadline.max(until);
                    }
                }
            }
        }
    }

    /// A link to each live node: kept for the same incarnation (back from dead), kept and
    /// retried at once for one restarted at the same address, started for a new node. Returns
    /// the live nodes' names.
    fn link_live(&mut self, live: &[ChitchatId]) -> Vec<Arc<str>> {
        let mut seen: Vec<Arc<str>> = Vec::new();
        for id in live.iter().filter(|id| id.node_id != self.self_id.node_id) {
            seen.push(id.node_id.clone());
            let current = self.peers.get_mut(&id.node_id);
            match current {
                Some(peer) if peer.generation == id.generation_id => {
                    if peer.dead_since.take().is_some() {
                        tracing::info!(peer = %id.node_id, "cluster_node_back");
                        peer.retry.notify_one();
                    }
                }
                Some(peer) if peer.address == id.gossip_advertise_addr => {
                    // Restarted at the same address: the link keeps what it knows of its
                    // session there and reconnects by itself.
                    tracing::info!(peer = %id.node_id, generation = id.generation_id, "cluster_node_restarted");
                    peer.generation = id.generation_id;
                    peer.dead_since = None;
                    peer.stopping = false;
                    // Claims queued for it wait for this link: no back-off left over from
                    // while it was dead.
                    peer.retry.notify_one();
                }
                _ => {
                    if let Some(old) = self.peers.remove(&id.node_id) {
                        tracing::info!(peer = %id.node_id, generation = id.generation_id, "cluster_node_restarted");
                        let _ = old.stop.send(true);
                    } else {
                        tracing::info!(peer = %id.node_id, address = %id.gossip_advertise_addr, "cluster_node_joined");
                    }
                    let peer = self.spawn_link(id);
                    self.peers.insert(id.node_id.clone(), peer);
                }
            }
        }
        seen
    }

    /// Marks the nodes not `seen` dead (stopped, if they said so); returns those dead for
    /// longer than the grace period.
    fn note_dead(&mut self, seen: &[Arc<str>], now: Instant) -> Vec<Arc<str>> {
        let mut forget = Vec::new();
        for (name, peer) in &mut self.peers {
            if seen.contains(name) {
                continue;
            }
            match peer.dead_since {
                None => {
                    if peer.stopping {
                        tracing::info!(peer = %name, "cluster_node_stopped");
                    } else {
                        tracing::warn!(peer = %name, "cluster_node_down");
                    }
                    peer.dead_since = Some(now);
                }
                Some(since) if now.duration_since(since) >= self.grace => forget.push(name.clone()),
                Some(_) => {}
            }
        }
        forget
    }

    fn spawn_link(&self, id: &ChitchatId) -> Peer {
        let stats = Arc::new(NodeStats::default());
        let (stop, stopped) = watch::channel(false);
        let retry = Arc::new(tokio::sync::Notify::new());
        let link = Link::new(
            self.ctx.clone(),
            id.node_id.clone(),
            id.gossip_advertise_addr,
            stats.clone(),
            retry.clone(),
        );
        Peer {
            generation: id.generation_id,
            address: id.gossip_advertise_addr,
            stats,
            stop,
            task: tokio::spawn(link.run(stopped)),
            retry,
            dead_since: None,
            stopping: false,
            durable: false,
        }
    }

    /// Ends the session a forgotten node had here (what it subscribed to, what was queued
    /// for it), unless a connection of it is attached after all.
    fn end_peer_session(&self, name: &str, now: Instant) {
        let client_id = format!("{PEER_CLIENT_PREFIX}{name}");
        let Some(cell) = self.ctx.broker.registry.get(&client_id) else {
            return;
        };
        if cell.state.lock().owner != 0 {
            return;
        }
        let mut wake = WakeList::new();
        self.ctx.broker.end_session(&cell, now, &mut wake);
        for doorbell in wake {
            doorbell.notify_one();
        }
    }
}
