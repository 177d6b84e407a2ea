//! One bridge's task: connect, run the link, back off, reconnect; until shutdown.

use crate::backoff::{AddressCycle, Backoff};
use crate::config::{BridgeConfig, BridgeStartType};
use crate::link::{Link, LinkEnd};
use crate::local::LocalSettings;
use crate::mapping::TopicMap;
use crate::retained::{RetainedChanges, Watcher};
use hayate_codec::{Properties, Publish, QoS, Will};
use hayate_core::{Broker, QueueLimits};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Counters of one bridge (exposed under `$SYS/broker/bridge/<name>/`).
#[derive(Debug, Default)]
pub struct BridgeStats {
    /// The link to the remote broker is up.
    pub connected: AtomicBool,
    /// Successful connections to the remote broker.
    pub connects: AtomicU64,
    /// Messages forwarded from the local broker to the remote one (resends included).
    pub messages_out: AtomicU64,
    /// Of those, resends after a link drop (DUP set): possible duplicates at the remote side.
    pub resent_out: AtomicU64,
    /// Messages forwarded from the remote broker to the local one.
    pub messages_in: AtomicU64,
    /// Messages received that no topic rule maps (acknowledged and dropped).
    pub dropped: AtomicU64,
    /// Retained messages (or deletions) sent again after an outage because they changed
    /// while the link was down.
    pub retained_replayed: AtomicU64,
    /// Outgoing messages dropped because the bridge's queue was full (the oldest waiting
    /// ones, to make room for newer ones).
    pub queue_dropped: Arc<AtomicU64>,
    /// Where the queue's figures are read: the broker and the bridge's local client id.
    queue: std::sync::OnceLock<(std::sync::Weak<Broker>, String)>,
}

/// What the bridge's outgoing queue holds now.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueFigures {
    /// Messages waiting or in flight (in memory or on disk).
    pub messages: u64,
    /// Payload + topic bytes of the messages in memory.
    pub bytes: u64,
}

impl BridgeStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The outgoing queue's figures now (zero before the bridge's local session exists).
    pub fn queue(&self) -> QueueFigures {
        let Some((broker, client_id)) = self.queue.get() else {
            return QueueFigures::default();
        };
        broker
            .upgrade()
            .and_then(|broker| broker.queue_figures(client_id))
            .map_or_else(QueueFigures::default, |(messages, bytes)| QueueFigures {
                messages: messages as u64,
                bytes: bytes as u64,
            })
    }
}

/// A running bridge.
#[derive(Debug)]
pub struct BridgeHandle {
    /// The bridge's name (`connection`).
    pub name: String,
    /// Its counters.
    pub stats: Arc<BridgeStats>,
    /// Its task; it ends after shutdown is signalled.
    pub task: JoinHandle<()>,
}

/// What of `config` this version cannot run, naming the key; `None` when it can run. It also
/// reads the TLS files, so that a bridge with an unreadable certificate is refused at start.
pub fn unsupported(config: &BridgeConfig) -> Option<String> {
    let name = &config.name;
    if config.require_ocsp {
        return Some(format!(
            "bridge {name}: bridge_require_ocsp is not supported (no OCSP checking)"
        ));
    }
    let tls = config.cafile.is_some() || config.capath.is_some();
    let psk = config.psk.is_some();
    let tls_only = [
        ("bridge_insecure", config.insecure),
        ("bridge_tls_version", config.tls_version.is_some()),
        ("bridge_alpn", config.alpn.is_some()),
    ];
    if let Some((key, _)) = tls_only.iter().find(|(_, set)| *set && !tls && !psk) {
        return Some(format!(
            "bridge {name}: {key} applies to TLS bridges only (set bridge_cafile, bridge_capath or bridge_psk)"
        ));
    }
    if config.insecure && psk {
        return Some(format!(
            "bridge {name}: bridge_insecure applies to certificate TLS, not to bridge_psk"
        ));
    }
    if let Some(address) = &config.bind_address {
        if address.parse::<std::net::IpAddr>().is_err() {
            return Some(format!(
                "bridge {name}: bridge_bind_address {address:?} is not an IP address"
            ));
        }
    }
    if let Err(error) = crate::transport::Connector::new(config) {
        return Some(format!("bridge {name}: {error}"));
    }
    None
}

/// The state a bridge keeps across its links.
pub(crate) struct Bridge {
    pub config: BridgeConfig,
    pub broker: Arc<Broker>,
    pub topics: TopicMap,
    pub stats: Arc<BridgeStats>,
    pub local: LocalSettings,
    pub remote_client_id: String,
    /// The next local connection is the bridge's first (`local_cleansession` applies).
    pub first_local: bool,
    /// Inbound QoS 2 messages delivered locally at QoS 1 whose local PUBACK has not come yet.
    pub q2_over_q1: HashSet<u16>,
    /// Inbound QoS 2 messages answered with PUBREC by the bridge itself, waiting for PUBREL.
    pub rel_direct: HashSet<u16>,
    /// Inbound QoS 2 messages passed to the local session at QoS 2 whose PUBCOMP has not come
    /// back: released locally if the remote session turns out to be new (see `Link::open`).
    pub in_q2: HashSet<u16>,
    /// While the link is down: the watcher of retained changes (`crate::retained`).
    pub watcher: Option<Watcher>,
    /// Retained changes not replayed yet (a replay cut short, or a watcher that failed).
    pub carried: RetainedChanges,
}

impl Bridge {
    /// The retained state topic (`notification_topic`, by default
    /// `$SYS/broker/connection/<remote_clientid>/state`).
    pub(crate) fn notification_topic(&self) -> String {
        self.config
            .notification_topic
            .clone()
            .unwrap_or_else(|| format!("$SYS/broker/connection/{}/state", self.remote_client_id))
    }

    /// Publishes the link state locally (retained "1" or "0") when notifications are on.
    pub(crate) fn notify_local(&self, up: bool) {
        if self.config.notifications {
            let payload = bytes::Bytes::from_static(if up { b"1" } else { b"0" });
            let now = tokio::time::Instant::now().into_std();
            self.broker
                .publish_internal(&self.notification_topic(), payload, true, now);
        }
    }
}

impl Bridge {
    /// Starts watching retained changes for the outage that begins (only where retained
    /// messages go out: an `out`/`both` topic and `bridge_outgoing_retain`).
    pub(crate) fn start_watcher(&mut self, now: std::time::Instant) {
        if !self.config.outgoing_retain || self.topics.outgoing().next().is_none() {
            return;
        }
        let carried = std::mem::take(&mut self.carried);
        match Watcher::start(&self.broker, &self.local, &self.topics, carried, now) {
            Ok(watcher) => self.watcher = Some(watcher),
            Err(carried) => self.carried = carried,
        }
    }

    /// The will set on the remote connection: the state "0", retained, so the remote side
    /// learns when the link drops (unless notifications are off or local only).
    pub(crate) fn notification_will(&self) -> Option<Will> {
        self.remote_notifications().then(|| Will {
            topic: self.notification_topic().into(),
            payload: bytes::Bytes::from_static(b"0"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: Properties::default(),
        })
    }

    /// The state published on the remote broker when the link comes up.
    pub(crate) fn remote_notification(&self, up: bool) -> Option<Publish> {
        self.remote_notifications().then(|| Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: true,
            topic: self.notification_topic().into(),
            packet_id: None,
            properties: Properties::default(),
            payload: bytes::Bytes::from_static(if up { b"1" } else { b"0" }),
        })
    }

    fn remote_notifications(&self) -> bool {
        self.config.notifications && !self.config.notifications_local_only
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "hayate".to_string())
}

/// Starts `config`'s bridge on the current Tokio runtime; it stops when `shutdown` becomes
/// true. The configuration must have passed [`BridgeConfig::validate`] and [`unsupported`].
pub fn spawn(
    broker: Arc<Broker>,
    config: BridgeConfig,
    shutdown: watch::Receiver<bool>,
) -> BridgeHandle {
    // Mosquitto's defaults: `<hostname>.<connection>` remotely, `local.<that>` locally.
    let remote_client_id = config
        .remote_clientid
        .clone()
        .unwrap_or_else(|| format!("{}.{}", hostname(), config.name));
    let local = LocalSettings {
        client_id: config
            .local_clientid
            .clone()
            .unwrap_or_else(|| format!("local.{remote_client_id}")),
        username: config.local_username.clone(),
        password: config.local_password.clone(),
        bridge_name: config.name.clone(),
    };
    let stats = Arc::new(BridgeStats::default());
    let _ = stats
        .queue
        .set((Arc::downgrade(&broker), local.client_id.clone()));
    let max_messages = config
        .max_queued_messages
        .unwrap_or(broker.config().max_queued_messages);
    if config.start_type == BridgeStartType::Lazy
        && usize::try_from(config.threshold).unwrap_or(usize::MAX) > max_messages
    {
        // The queue never holds that many: the bridge would never connect.
        tracing::warn!(bridge = %config.name, threshold = config.threshold, max_queued_messages = max_messages, "bridge_lazy_threshold_above_queue_limit");
    }
    broker.set_queue_limits(
        &local.client_id,
        Some(QueueLimits {
            max_messages,
            max_bytes: config
                .max_queued_bytes
                .unwrap_or(broker.config().max_queued_bytes),
            dropped: stats.queue_dropped.clone(),
        }),
    );
    tokio::spawn(log_queue_drops(
        config.name.clone(),
        stats.clone(),
        shutdown.clone(),
    ));
    let bridge = Bridge {
        topics: TopicMap::new(&config.topics),
        broker,
        stats: stats.clone(),
        local,
        remote_client_id,
        first_local: true,
        q2_over_q1: HashSet::new(),
        rel_direct: HashSet::new(),
        in_q2: HashSet::new(),
        watcher: None,
        carried: RetainedChanges::default(),
        config,
    };
    let name = bridge.config.name.clone();
    let task = tokio::spawn(run(bridge, shutdown));
    BridgeHandle { name, stats, task }
}

/// How often, at most, a bridge logs the messages its full queue dropped.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Logs `bridge_queue_full_dropped_oldest` at most once per [`DROP_LOG_INTERVAL`] while the
/// bridge's queue drops messages, until shutdown.
async fn log_queue_drops(
    name: String,
    stats: Arc<BridgeStats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut logged = stats.queue_dropped.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(DROP_LOG_INTERVAL) => {}
            _ = shutdown.changed() => {}
        }
        let total = stats.queue_dropped.load(Ordering::Relaxed);
        if total > logged {
            let queue = stats.queue();
            tracing::warn!(
                bridge = %name,
                dropped = total - logged,
                total,
                queued = queue.messages,
                queued_bytes = queue.bytes,
                "bridge_queue_full_dropped_oldest"
            );
            logged = total;
        }
        if *shutdown.borrow() {
            break;
        }
    }
}

async fn run(mut bridge: Bridge, mut shutdown: watch::Receiver<bool>) {
    let name = bridge.config.name.clone();
    let mut backoff = Backoff::new(
        Duration::from_secs(bridge.config.restart_timeout_secs),
        Duration::from_secs(bridge.config.restart_timeout_cap_secs),
    );
    let mut addresses =
        AddressCycle::new(bridge.config.addresses.clone(), bridge.config.round_robin);
    let lazy = bridge.config.start_type == BridgeStartType::Lazy;
    // Lazy: wait for messages before connecting (at start and after each link).
    let mut wait_for_demand = lazy;
    // The local session exists from the start, so that messages queue for the remote broker
    // even when it cannot be reached yet (the first link resumes it). Then the state says 0.
    if let Err(error) = crate::session::prepare(&mut bridge) {
        tracing::warn!(bridge = %name, %error, "bridge_local_session_failed");
    }
    bridge.notify_local(false);
    loop {
        if *shutdown.borrow() {
            break;
        }
        if wait_for_demand {
            if let Err(error) = crate::session::prepare(&mut bridge) {
                tracing::warn!(bridge = %name, %error, "bridge_local_session_failed");
            } else if !crate::lazy::wait_for_demand(&bridge, &mut shutdown).await {
                break;
            }
            wait_for_demand = false;
        }
        let address = addresses.current().to_string();
        tracing::info!(bridge = %name, %address, "bridge_connecting");
        let end = Link::run(&mut bridge, &address, &mut shutdown).await;
        bridge.stats.connected.store(false, Ordering::Relaxed);
        match end {
            LinkEnd::Shutdown => break,
            LinkEnd::Idle => {
                tracing::info!(bridge = %name, %address, "bridge_idle_disconnected");
                bridge.notify_local(false);
                backoff.reset();
                wait_for_demand = true;
                continue;
            }
            LinkEnd::Failed(error) => {
                tracing::warn!(bridge = %name, %address, %error, "bridge_connect_failed");
                addresses.failed();
            }
            LinkEnd::Dropped(error) => {
                tracing::warn!(bridge = %name, %address, %error, "bridge_disconnected");
                bridge.notify_local(false);
                backoff.reset();
                addresses.dropped();
                wait_for_demand = lazy;
            }
        }
        if bridge.config.start_type == BridgeStartType::Once {
            tracing::info!(bridge = %name, "bridge_stopped_start_type_once");
            break;
        }
        let delay = backoff.next_delay();
        tracing::info!(bridge = %name, delay_ms = delay.as_millis() as u64, next = %addresses.current(), "bridge_backing_off");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => {}
        }
    }
    if let Some(watcher) = bridge.watcher.take() {
        watcher.finish().await;
    }
    let end_session = bridge
        .config
        .local_cleansession
        .unwrap_or(bridge.config.cleansession);
    if end_session && !bridge.first_local {
        // Stopped while the link was down (a link up at shutdown ended the session itself).
        crate::session::end(&mut bridge);
    }
    bridge.notify_local(false);
    // A bridge stopped for good leaves its session (when it stays) with the broker's limits;
    // one started again sets its own again.
    bridge
        .broker
        .set_queue_limits(&bridge.local.client_id, None);
    tracing::info!(bridge = %name, "bridge_stopped");
}
