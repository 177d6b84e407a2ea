//! The bridge's local session outside its links: created when the bridge starts, whatever its
//! `start_type` and whether or not the remote broker can be reached, so that messages for the
//! remote broker queue in it (bounded, `docs/BRIDGES.md`, "The outgoing queue") from the first
//! moment; ended when the bridge stops with `local_cleansession`.
//!
//! The session is connected once in-process, subscribed to the outgoing filters and left
//! offline; unless it exists already with those subscriptions (restored from the store): then
//! it is left untouched until the first link, so that its queue stays droppable (connecting
//! moves the head of the queue in flight). Its subscriptions are made with Retain Handling 2
//! (no retained messages): those would go in flight at once and reach the remote broker later
//! as resends, or, at QoS 0, be lost. Instead, when the session is new, the first link's
//! retained replay (`crate::retained`) sends every retained message of the outgoing filters,
//! and the watcher started here records the retained changes made before that link.

use crate::bridge::Bridge;
use crate::local::{Local, RemoteLimits, RETAINED_IF_NEW, RETAINED_NEVER};
use crate::BridgeError;
use hayate_codec::{Properties, QoS};
use std::time::Instant;

/// Receive Maximum of the session before the remote broker's is known (Mosquitto's
/// `max_inflight_messages`); the first link sets the real one.
const INITIAL_WINDOW: u16 = 20;

/// Creates the bridge's local session if it has not been connected yet, and leaves it offline
/// with its subscriptions, so that messages queue for the bridge before its first link.
pub(crate) fn prepare(bridge: &mut Bridge) -> Result<(), BridgeError> {
    if !bridge.first_local {
        return Ok(());
    }
    let now = Instant::now();
    let clean_start = bridge
        .config
        .local_cleansession
        .unwrap_or(bridge.config.cleansession);
    // Retained messages go out through the replay only where they go out at all.
    let replay = bridge.config.outgoing_retain && bridge.topics.outgoing().next().is_some();
    if replay && bridge.watcher.is_none() {
        // Watch before subscribing, so that no change between the two is missed.
        bridge.start_watcher(now);
    }
    if !clean_start && subscribed_already(bridge) {
        // A session restored from the store (or left by an earlier run of the bridge) queues
        // already. Connecting it would move the head of its queue in flight, where a full
        // queue can no longer drop it: it stays as it is until the first link.
        bridge.first_local = false;
        return Ok(());
    }
    let local = Local::connect(
        &bridge.broker,
        &bridge.local,
        &bridge.topics,
        clean_start,
        RemoteLimits {
            receive_maximum: INITIAL_WINDOW,
            max_packet_size: None,
            maximum_qos: QoS::ExactlyOnce,
        },
        if replay {
            RETAINED_NEVER
        } else {
            RETAINED_IF_NEW
        },
        now,
    )?;
    if replay && !local.session_present() {
        // New subscriptions: the remote broker gets the retained messages on the first link.
        bridge.carried.replay_everything();
    }
    local.close(false, now);
    bridge.first_local = false;
    Ok(())
}

/// The bridge's session exists with a subscription to each outgoing filter at its QoS.
fn subscribed_already(bridge: &Bridge) -> bool {
    let Some(cell) = bridge.broker.registry.get(&bridge.local.client_id) else {
        return false;
    };
    let state = cell.state.lock();
    bridge.topics.outgoing().all(|rule| {
        state.subscriptions.iter().any(|(filter, record)| {
            **filter == *rule.local_filter() && record.options.qos == rule.qos()
        })
    })
}

/// Ends the bridge's local session (a bridge stopping with `local_cleansession` while its
/// link is down): what queued in it is dropped, as Mosquitto's clean local session does.
pub(crate) fn end(bridge: &mut Bridge) {
    let now = Instant::now();
    let properties = Properties {
        session_expiry_interval: Some(0),
        ..Properties::default()
    };
    match Local::open(
        &bridge.broker,
        &bridge.local,
        &bridge.local.client_id,
        true,
        properties,
        now,
    ) {
        Ok(local) => {
            local.close(true, now);
            bridge.first_local = true;
        }
        Err(error) => {
            tracing::warn!(bridge = %bridge.config.name, %error, "bridge_local_session_end_failed");
        }
    }
}
