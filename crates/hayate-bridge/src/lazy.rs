//! `start_type lazy`, with Mosquitto's meaning: the bridge connects only once `threshold`
//! messages wait for it in its local session, and disconnects after `idle_timeout` seconds
//! without a message either way (nothing queued or in flight); then it waits for messages
//! again.
//!
//! Messages queue before the first connection as with every start type: the bridge's local
//! session is created when the bridge starts (`crate::session`).

use crate::bridge::Bridge;
use std::time::Duration;
use tokio::sync::watch;

/// How often the offline session's queue is looked at.
const POLL: Duration = Duration::from_millis(200);

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
