//! The broker: the shared state every connection works against, and the operations that span
//! sessions (publishing, ending sessions, wills, timers).

use crate::config::BrokerConfig;
use crate::hooks::AuthHook;
use crate::registry::{PendingWill, Registry, SessionCell};
use crate::router::{RouteOutcome, Router, WakeList};
use crate::stats::Stats;
use crate::timers::{TimerEntry, TimerKind, Timers};
use hayate_codec::Properties;
use hayate_session::{MemoryBudget, Message, MessageProperties, SessionLimits, SharedLimits};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The configuration in force: whole, for what is read at CONNECT (a short lock), and the
/// few settings read on every packet as atomics on cache lines of their own (relaxed loads
/// of lines written only by a reload).
#[derive(Debug)]
struct LiveConfig {
    current: parking_lot::Mutex<Arc<BrokerConfig>>,
    limits: LiveLimits,
}

/// The per-packet settings a reload changes for every connection.
#[derive(Debug)]
#[repr(align(128))]
pub struct LiveLimits {
    max_topic_levels: AtomicUsize,
    max_subscriptions_per_client: AtomicUsize,
    backpressure_stall_timeout_ms: AtomicU64,
    max_session_expiry_interval: AtomicU32,
}

impl LiveLimits {
    fn new(config: &BrokerConfig) -> LiveLimits {
        let limits = LiveLimits {
            max_topic_levels: AtomicUsize::new(0),
            max_subscriptions_per_client: AtomicUsize::new(0),
            backpressure_stall_timeout_ms: AtomicU64::new(0),
            max_session_expiry_interval: AtomicU32::new(0),
        };
        limits.set(config);
        limits
    }

    fn set(&self, config: &BrokerConfig) {
        let relaxed = Ordering::Relaxed;
        self.max_topic_levels
            .store(config.max_topic_levels, relaxed);
        self.max_subscriptions_per_client
            .store(config.max_subscriptions_per_client, relaxed);
        self.backpressure_stall_timeout_ms
            .store(config.backpressure_stall_timeout_ms, relaxed);
        self.max_session_expiry_interval
            .store(config.max_session_expiry_interval, relaxed);
    }

    /// `max_topic_levels` now.
    pub fn max_topic_levels(&self) -> usize {
        self.max_topic_levels.load(Ordering::Relaxed)
    }

    /// `max_subscriptions_per_client` now.
    pub fn max_subscriptions_per_client(&self) -> usize {
        self.max_subscriptions_per_client.load(Ordering::Relaxed)
    }

    /// `backpressure_stall_timeout_ms` now.
    pub fn backpressure_stall_timeout_ms(&self) -> u64 {
        self.backpressure_stall_timeout_ms.load(Ordering::Relaxed)
    }

    /// `max_session_expiry_interval` now.
    pub fn max_session_expiry_interval(&self) -> u32 {
        self.max_session_expiry_interval.load(Ordering::Relaxed)
    }
}

impl LiveConfig {
    fn new(config: BrokerConfig) -> LiveConfig {
        LiveConfig {
            limits: LiveLimits::new(&config),
            current: parking_lot::Mutex::new(Arc::new(config)),
        }
    }
}

fn session_limits(config: &BrokerConfig, budget: Option<Arc<MemoryBudget>>) -> SessionLimits {
    SessionLimits {
        max_queued_messages: config.max_queued_messages,
        max_queued_bytes: config.max_queued_bytes,
        max_inflight: config.max_inflight_messages,
        queue_qos0_offline: config.queue_qos0_offline,
        budget,
        queue_full: hayate_session::QueueFull::DropNewest,
    }
}

/// The broker's shared state. Cheap to share: connections hold an `Arc<Broker>`.
#[derive(Debug)]
pub struct Broker {
    /// Settings and limits, replaced as a whole by a configuration reload
    /// ([`Broker::reconfigure`]).
    config: LiveConfig,
    /// Subscriptions, shared groups and retained messages.
    pub router: Router,
    /// Client id → session.
    pub registry: Registry,
    /// Counters for `$SYS`.
    pub stats: Stats,
    /// The broker-wide account of queued message bytes (`max_queued_bytes_total`).
    pub memory: Arc<MemoryBudget>,
    session_limits: Arc<SharedLimits>,
    /// `retain_available` as the broker started (it needs a restart to change).
    retain_available: bool,
    /// Client id → its own queue limits (`crate::queues`: bridges).
    pub(crate) queue_overrides:
        parking_lot::Mutex<std::collections::HashMap<Arc<str>, Arc<SharedLimits>>>,
    /// Authentication and authorisation.
    pub hooks: Arc<dyn AuthHook>,
    timers: Timers,
    /// When the broker started (for `$SYS/broker/uptime`).
    pub started_at: Instant,
    /// The store, once attached (`crate::persist`).
    pub(crate) persistence: std::sync::OnceLock<Arc<crate::persist::Attached>>,
}

impl Broker {
    /// A broker with the given settings and hooks, started at `now`.
    pub fn new(config: BrokerConfig, hooks: Arc<dyn AuthHook>, now: Instant) -> Arc<Broker> {
        let memory = Arc::new(MemoryBudget::new(config.max_queued_bytes_total));
        Arc::new(Broker {
            router: Router::new(&config),
            memory: memory.clone(),
            session_limits: Arc::new(SharedLimits::new(session_limits(&config, Some(memory)))),
            retain_available: config.retain_available,
            queue_overrides: parking_lot::Mutex::default(),
            config: LiveConfig::new(config),
            registry: Registry::default(),
            stats: Stats::default(),
            hooks,
            timers: Timers::default(),
            started_at: now,
            persistence: std::sync::OnceLock::new(),
        })
    }

    /// Session limits from the configuration, shared by every session (and changed for all
    /// of them by [`Broker::reconfigure`]).
    pub fn session_limits(&self) -> Arc<SharedLimits> {
        self.session_limits.clone()
    }

    /// The settings in force now (a short lock; read at CONNECT, not per packet).
    pub fn config(&self) -> Arc<BrokerConfig> {
        self.config.current.lock().clone()
    }

    /// The settings checked on every packet, as a reload leaves them.
    pub fn limits(&self) -> &LiveLimits {
        &self.config.limits
    }

    /// Whether retained messages are supported (fixed for the broker's life).
    pub fn retain_available(&self) -> bool {
        self.retain_available
    }

    /// Applies a new configuration while the broker runs (a reload). What each setting
    /// applies to is in `docs/OPERATIONS.md`: the session limits and the memory budget hold
    /// for every session from its next message on, the shared-group strategy and the
    /// arrival-order window for the next message routed, the per-packet limits for every
    /// connection's next packet; what a CONNACK announced (receive maximum, maximum packet
    /// size, topic alias maximum, maximum QoS, keep alive) stays as announced for the
    /// connections that have it. The settings in [`BrokerConfig::RESTART_KEYS`] keep their
    /// running values; the names of those that differ are returned.
    pub fn reconfigure(
        &self,
        mut new: BrokerConfig,
    ) -> Result<Vec<&'static str>, crate::config::ConfigError> {
        new.validate()?;
        let mut kept = Vec::new();
        if new.retain_available != self.retain_available {
            new.retain_available = self.retain_available;
            kept.push("retain_available");
        }
        self.session_limits
            .set(&session_limits(&new, self.session_limits.budget().cloned()));
        self.memory.set_limit(new.max_queued_bytes_total);
        self.router.reconfigure(&new);
        self.config.limits.set(&new);
        *self.config.current.lock() = Arc::new(new);
        Ok(kept)
    }

    /// Accepts an application message: stores it as retained if flagged, then routes it to
    /// matching subscribers. Sessions to wake are added to `wake`.
    pub fn publish(
        &self,
        message: Arc<Message>,
        now: Instant,
        wake: &mut WakeList,
    ) -> RouteOutcome {
        let mut ticket = None;
        if message.retain && self.retain_available {
            let (stored, appended) = self.router.retain(&message, self.attached());
            ticket = appended;
            self.stats
                .retained
                .store(stored as u64, std::sync::atomic::Ordering::Relaxed);
        }
        let mut outcome = self.router.route(&message, self.reader(), now, wake);
        outcome.stored = outcome.stored.max(ticket);
        Stats::add(&self.stats.publish_dropped, outcome.dropped as u64);
        Stats::add(&self.stats.denied_delivery, outcome.denied as u64);
        outcome
    }

    /// The hook when it has read rules, to check each delivery with; `None` (no per-delivery
    /// cost) otherwise.
    pub fn reader(&self) -> Option<&dyn AuthHook> {
        self.hooks.has_read_rules().then_some(&*self.hooks)
    }

    /// Publishes a broker-made message (e.g. `$SYS`) and wakes its receivers.
    pub fn publish_internal(&self, topic: &str, payload: bytes::Bytes, retain: bool, now: Instant) {
        let message = Message::new(
            topic.into(),
            payload,
            hayate_codec::QoS::AtMostOnce,
            retain,
            Properties::default(),
            None,
            None,
        );
        let mut wake = WakeList::new();
        self.publish(Arc::new(message), now, &mut wake);
        wake.iter().for_each(|doorbell| doorbell.notify_one());
    }

    /// Publishes a will message, if the client that set it may publish to its topic (asked
    /// now, with the rules in force now).
    pub(crate) fn publish_will(
        &self,
        client_id: &str,
        will: Box<PendingWill>,
        now: Instant,
        wake: &mut WakeList,
    ) {
        if !self.hooks.authorize_publish(&will.client, &will.will.topic) {
            tracing::info!(client_id, username = ?will.client.username, topic = %will.will.topic, "will_denied");
            Stats::add(&self.stats.denied_publish, 1);
            return;
        }
        let properties = forwardable_properties(&will.will.properties);
        let expires_at = will
            .will
            .properties
            .message_expiry_interval
            .map(|secs| now + Duration::from_secs(u64::from(secs)));
        let message = Message::new(
            will.will.topic.clone(),
            will.will.payload.clone(),
            will.will.qos,
            will.will.retain,
            properties,
            expires_at,
            Some(will.publisher),
        )
        .with_publisher_key(hayate_session::publisher_key(&will.client.client_id));
        tracing::debug!(client_id, topic = %will.will.topic, "will_published");
        self.publish(Arc::new(message), now, wake);
    }

    /// Ends a session for good: removes its subscriptions and registry entry, publishes a will
    /// still pending [MQTT-3.1.3-9], and drops its queued messages.
    pub fn end_session(&self, cell: &Arc<SessionCell>, now: Instant, wake: &mut WakeList) {
        let (filters, will, shared, persisted) = {
            let mut state = cell.state.lock();
            if state.ended {
                return;
            }
            state.ended = true;
            state.epoch += 1;
            let hint = state.congestion.reset();
            self.router.apply_hint(cell, hint);
            let filters: Vec<Box<str>> = state.subscriptions.drain().map(|(f, _)| f).collect();
            let shared = state.session.take_shared_deliveries();
            state.session.clear();
            state.will_due = None;
            (filters, state.will.take(), shared, state.persisted)
        };
        if let Some(cluster) = self.router.cluster() {
            cluster.peer_ended(cell);
        }
        for filter in &filters {
            if self.router.unsubscribe(filter, cell.id) {
                self.stats
                    .subscriptions
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.router
            .redistribute_shared(cell.id, shared, self.reader(), now, wake);
        // A session replaced by a clean start is no longer current; CONNECT deletes its record.
        if self.registry.remove_if_current(cell) && persisted {
            if let Some(attached) = self.attached() {
                attached.store.append(crate::store::StoreOp::DeleteSession {
                    client_id: cell.client_id.to_string(),
                });
            }
        }
        if let Some(will) = will {
            self.publish_will(&cell.client_id, will, now, wake);
        }
    }

    /// Called when connection `conn_id` leaves its session (any reason but takeover): ends the
    /// session if its expiry interval is 0, otherwise starts the expiry and will-delay clocks.
    /// `publish_will` is false after a normal DISCONNECT [MQTT-3.1.2-10]. Does nothing when the
    /// session has another owner by now (taken over, here or by another node): checked under
    /// the same lock as the detach, so a takeover between the two cannot be undone.
    pub fn session_detached(
        &self,
        cell: &Arc<SessionCell>,
        conn_id: u64,
        publish_will: bool,
        now: Instant,
        wake: &mut WakeList,
    ) {
        let (expiry, will_now, shared) = {
            let mut state = cell.state.lock();
            if state.owner != conn_id {
                return;
            }
            state.session.detach();
            let hint = state.congestion.reset();
            self.router.apply_hint(cell, hint);
            state.owner = 0;
            state.epoch += 1;
            if !publish_will {
                state.will = None;
            }
            let expiry = state.expiry_interval;
            let delay = state
                .will
                .as_ref()
                .and_then(|w| w.will.properties.will_delay_interval)
                .unwrap_or(0);
            let mut will_now = None;
            if state.will.is_some() && expiry != 0 {
                if delay == 0 {
                    will_now = state.will.take();
                } else {
                    // [MQTT-3.1.3-9] the will is sent when the delay passes or the session
                    // ends, whichever comes first.
                    let due = now + Duration::from_secs(u64::from(delay.min(expiry)));
                    state.will_due = Some(due);
                    self.timers.schedule(TimerEntry {
                        at: due,
                        kind: TimerKind::Will,
                        epoch: state.epoch,
                        cell: cell.clone(),
                    });
                }
            }
            if expiry != 0 && expiry != u32::MAX {
                self.schedule_expiry(
                    cell,
                    state.epoch,
                    now + Duration::from_secs(u64::from(expiry)),
                );
            }
            if expiry != 0 && state.persisted {
                self.persist_session(cell, &mut state, Some(now));
            }
            let shared = state.session.take_shared_deliveries();
            if let Some(attached) = self.attached() {
                attached.flush(&cell.client_id, &mut state);
            }
            (expiry, will_now, shared)
        };
        self.router
            .redistribute_shared(cell.id, shared, self.reader(), now, wake);
        if let Some(will) = will_now {
            self.publish_will(&cell.client_id, will, now, wake);
        }
        if expiry == 0 {
            self.end_session(cell, now, wake);
        }
    }

    /// Publishes `cell`'s pending will at `at` unless it is attached again (its epoch moves on)
    /// before then.
    pub(crate) fn schedule_will(&self, cell: &Arc<SessionCell>, epoch: u64, at: Instant) {
        self.timers.schedule(TimerEntry {
            at,
            kind: TimerKind::Will,
            epoch,
            cell: cell.clone(),
        });
    }

    /// Ends `cell` at `at` unless it is attached again (its epoch moves on) before then.
    pub(crate) fn schedule_expiry(&self, cell: &Arc<SessionCell>, epoch: u64, at: Instant) {
        self.timers.schedule(TimerEntry {
            at,
            kind: TimerKind::Expiry,
            epoch,
            cell: cell.clone(),
        });
    }

    /// Fires due will and expiry deadlines, and prunes expired retained messages. The server
    /// calls this periodically.
    pub fn run_timers(&self, now: Instant, wake: &mut WakeList) {
        for entry in self.timers.take_due(now) {
            let stale = {
                let state = entry.cell.state.lock();
                state.epoch != entry.epoch || state.ended || state.owner != 0
            };
            if stale {
                continue;
            }
            match entry.kind {
                TimerKind::Will => {
                    let will = {
                        let mut state = entry.cell.state.lock();
                        state.will_due = None;
                        let will = state.will.take();
                        if will.is_some() {
                            self.persist_for(&state, || crate::store::StoreOp::DeleteWill {
                                client_id: entry.cell.client_id.to_string(),
                            });
                        }
                        will
                    };
                    if let Some(will) = will {
                        self.publish_will(&entry.cell.client_id, will, now, wake);
                    }
                }
                TimerKind::Expiry => {
                    tracing::debug!(client_id = %entry.cell.client_id, "session_expired");
                    self.end_session(&entry.cell, now, wake);
                }
            }
        }
        let pruned = self.router.prune_retained(now);
        if pruned > 0 {
            self.stats.retained.store(
                self.router.retained_count() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Deadlines waiting (for tests and metrics).
    pub fn pending_timers(&self) -> usize {
        self.timers.len()
    }
}

/// The properties a PUBLISH or will passes on to subscribers unchanged: payload format
/// indicator [MQTT-3.3.2-4], content type [MQTT-3.3.2-20], response topic [MQTT-3.3.2-15],
/// correlation data [MQTT-3.3.2-16] and user properties in order [MQTT-3.3.2-17]
/// [MQTT-3.3.2-18].
pub fn forwardable_properties(properties: &Properties) -> MessageProperties {
    let nothing_to_forward = properties.payload_format_indicator.is_none()
        && properties.content_type.is_none()
        && properties.response_topic.is_none()
        && properties.correlation_data.is_none()
        && properties.user_properties.is_empty();
    if nothing_to_forward {
        // The common case (every v3 message, most v5 ones): skip the clones.
        return Properties::default();
    }
    Properties {
        payload_format_indicator: properties.payload_format_indicator,
        content_type: properties.content_type.clone(),
        response_topic: properties.response_topic.clone(),
        correlation_data: properties.correlation_data.clone(),
        user_properties: properties.user_properties.clone(),
        ..Properties::default()
    }
}
