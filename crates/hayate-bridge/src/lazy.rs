//! `start_type lazy`, with Mosquitto's meaning: the bridge connects only once `threshold`
//! messages wait for it in its local session, and disconnects after `idle_timeout` seconds
//! without a message either way (nothing queued or in flight); then it waits for messages
//! again.
//!
//! So that messages queue before the first connection, the bridge's local session is created
//! (connected once, subscribed, left offline) when the bridge starts.

use crate::bridge::Bridge;
use crate::local::{Local, RemoteLimits};
use crate::BridgeError;
use hayate_codec::QoS;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the offline session's queue is looked at.
const POLL: Duration = Duration::from_millis(200);

/// Receive Maximum of the session before the remote broker's is known (Mosquitto's
/// `max_inflight_messages`); the first link sets the real one.
const INITIAL_WINDOW: u16 = 20;

/// Creates the bridge's local session if this is its first connection, so that messages
/// queue for the bridge before it ever connects.
pub(crate) fn prepare_session(bridge: &mut Bridge) -> Result<(), BridgeError> {
    if !bridge.first_local {
        return Ok(());
    }
    let now = Instant::now();
    let clean_start = bridge
        .config
        .local_cleansession
        .unwrap_or(bridge.config.cleansession);
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
        now,
    )?;
    local.close(false, now);
    bridge.first_local = false;
    Ok(())
}

/// Waits until at least `threshold` messages are held for the bridge; false on shutdown.
pub(crate) async fn wait_for_demand(bridge: &Bridge, shutdown: &mut watch::Receiver<bool>) -> bool {
    let threshold = usize::try_from(bridge.config.threshold.max(1)).unwrap_or(usize::MAX);
    let mut logged = false;
    loop {
        if *shutdown.borrow() {
            return false;
        }
        let held = bridge
            .broker
            .registry
            .get(&bridge.local.client_id)
            .map_or(0, |cell| cell.state.lock().session.held_messages());
        if held >= threshold {
            tracing::info!(bridge = %bridge.config.name, held, "bridge_lazy_start");
            return true;
        }
        if !logged {
            tracing::info!(bridge = %bridge.config.name, threshold, "bridge_lazy_waiting");
            logged = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.changed() => {}
        }
    }
}
