//! The running bridges of a server, replaceable one by one: on reload (SIGHUP) a bridge whose
//! configuration is unchanged keeps running (its link is not touched), a removed one stops,
//! a changed one is stopped and started again with its new configuration, a new one starts.

use crate::bridge::{spawn, BridgeHandle, BridgeStats};
use crate::config::BridgeConfig;
use hayate_core::Broker;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// What a reload did, by bridge name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reload {
    /// Started: new in the configuration.
    pub added: Vec<String>,
    /// Stopped: gone from the configuration.
    pub removed: Vec<String>,
    /// Stopped and started again with their new configuration.
    pub changed: Vec<String>,
    /// Left running as they were.
    pub unchanged: Vec<String>,
}

struct Running {
    config: BridgeConfig,
    stop: watch::Sender<bool>,
    handle: BridgeHandle,
}

/// The bridges of a server.
pub struct BridgeSet {
    broker: Arc<Broker>,
    running: Mutex<Vec<Running>>,
    /// Serialises reloads and the final stop (each awaits bridges stopping).
    changing: tokio::sync::Mutex<bool>,
}

impl std::fmt::Debug for BridgeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeSet")
            .field("bridges", &self.names())
            .finish()
    }
}

impl BridgeSet {
    /// Starts `configs` (each must have passed [`BridgeConfig::validate`] and
    /// [`crate::unsupported`]) on the current Tokio runtime.
    pub fn start(broker: Arc<Broker>, configs: Vec<BridgeConfig>) -> Arc<BridgeSet> {
        let running = configs
            .into_iter()
            .map(|config| start_one(&broker, config))
            .collect();
        Arc::new(BridgeSet {
            broker,
            running: Mutex::new(running),
            changing: tokio::sync::Mutex::new(false),
        })
    }

    /// The names of the running bridges, in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|r| r.config.name.clone()).collect()
    }

    /// Each running bridge's name and counters (for `$SYS`).
    pub fn counters(&self) -> Vec<(String, Arc<BridgeStats>)> {
        self.lock()
            .iter()
            .map(|r| (r.handle.name.clone(), r.handle.stats.clone()))
            .collect()
    }

    /// Applies a new list of bridges (already validated): stops the removed and changed ones
    /// (waiting for them to close their links), then starts the changed and added ones. The
    /// others keep running untouched. Does nothing once [`BridgeSet::stop`] has run.
    pub async fn reload(&self, configs: Vec<BridgeConfig>) -> Reload {
        let stopped = self.changing.lock().await;
        let mut report = Reload::default();
        if *stopped {
            return report;
        }
        let mut stopping = Vec::new();
        {
            let mut running = self.lock();
            let mut kept = Vec::new();
            for bridge in running.drain(..) {
                match configs.iter().find(|c| c.name == bridge.config.name) {
                    Some(config) if *config == bridge.config => kept.push(bridge),
                    Some(_) => {
                        report.changed.push(bridge.config.name.clone());
                        stopping.push(bridge);
                    }
                    None => {
                        report.removed.push(bridge.config.name.clone());
                        stopping.push(bridge);
                    }
                }
            }
            *running = kept;
        }
        stop_all(stopping).await;
        let mut running = self.lock();
        let mut ordered = Vec::with_capacity(configs.len());
        for config in configs {
            match running.iter().position(|r| r.config.name == config.name) {
                Some(index) => {
                    report.unchanged.push(config.name.clone());
                    ordered.push(running.swap_remove(index));
                }
                None => {
                    if !report.changed.contains(&config.name) {
                        report.added.push(config.name.clone());
                    }
                    ordered.push(start_one(&self.broker, config));
                }
            }
        }
        *running = ordered;
        report
    }

    /// Stops every bridge and waits for them (server shutdown); later reloads do nothing.
    pub async fn stop(&self) {
        let mut stopped = self.changing.lock().await;
        *stopped = true;
        let all = std::mem::take(&mut *self.lock());
        stop_all(all).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn start_one(broker: &Arc<Broker>, config: BridgeConfig) -> Running {
    let (stop, stopped) = watch::channel(false);
    let handle = spawn(broker.clone(), config.clone(), stopped);
    Running {
        config,
        stop,
        handle,
    }
}

async fn stop_all(bridges: Vec<Running>) {
    for bridge in &bridges {
        let _ = bridge.stop.send(true);
    }
    for bridge in bridges {
        let _ = bridge.handle.task.await;
    }
}
