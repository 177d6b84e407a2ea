//! Broker settings: protocol limits and behaviour. Every limit a client can push against is a
//! named field here with a documented default; the server's TOML `[broker]` table maps onto it.

use hayate_codec::QoS;
use serde::Deserialize;

/// How a shared subscription group picks the member that receives a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SharedStrategy {
    /// Each member in turn (skipping offline members).
    #[default]
    RoundRobin,
    /// A random member.
    Random,
    /// The same member for the same publishing client (hash of its session).
    HashClientId,
}

/// Broker-wide protocol settings and limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerConfig {
    /// Largest packet accepted from a client, in bytes (fixed header included). Larger packets
    /// close the connection (v5: DISCONNECT 0x95). Announced in CONNACK as Maximum Packet Size.
    pub max_packet_size: u32,
    /// Receive Maximum announced to v5 clients: QoS 2 publishes a client may have awaiting
    /// PUBREL. Exceeding it closes the connection with DISCONNECT 0x93.
    pub receive_maximum: u16,
    /// Outbound QoS 1/2 messages in flight per client; the window is the smaller of this and
    /// the client's Receive Maximum. The only window for v3 clients.
    pub max_inflight_messages: u16,
    /// Messages held per session (waiting + in flight). Further messages are dropped and counted
    /// in `$SYS/broker/publish/messages/dropped`.
    pub max_queued_messages: usize,
    /// Payload + topic bytes held per session.
    pub max_queued_bytes: usize,
    /// Broker-wide budget for queued messages: payload + topic bytes plus 128 bytes of overhead
    /// per queued delivery, summed over every session. Past it deliveries are dropped (counted
    /// in `$SYS/broker/publish/messages/dropped` and `$SYS/broker/memory/queued/refused`); past
    /// half of it publishers feeding sessions that hold 64 KiB or more pause (back-pressure).
    /// 0 = no broker-wide limit.
    pub max_queued_bytes_total: usize,
    /// Queue QoS 0 messages for persistent sessions whose client is offline.
    pub queue_qos0_offline: bool,
    /// Topic Alias Maximum announced to v5 clients (0 disables inbound aliases).
    pub topic_alias_maximum: u16,
    /// Assign topic aliases on outbound PUBLISH to v5 clients that accept them.
    pub assign_outbound_topic_aliases: bool,
    /// Highest keep alive accepted, in seconds; v5 clients asking for more (or for 0) get this
    /// value as Server Keep Alive. 65535 means no limit.
    pub max_keep_alive: u16,
    /// Longest client identifier accepted, in bytes.
    pub max_client_id_len: usize,
    /// Most subscriptions one client may hold; more are refused with 0x97 (v5) / 0x80 (v3).
    pub max_subscriptions_per_client: usize,
    /// Most levels in a topic name or filter.
    pub max_topic_levels: usize,
    /// Highest session expiry interval granted, in seconds (v5 clients asking for more get this
    /// value back in CONNACK). Also the expiry of v3 persistent sessions; `u32::MAX` = never.
    pub max_session_expiry_interval: u32,
    /// Highest QoS supported; announced as Maximum QoS when below 2.
    pub max_qos: u8,
    /// Whether retained messages are supported.
    pub retain_available: bool,
    /// Back-pressure (`docs/design/backpressure.md`): a publisher whose messages fill a
    /// subscriber's queue past half of `max_queued_messages`/`max_queued_bytes` stops being read
    /// until that subscriber drains to a quarter, as long as the subscriber makes progress (a
    /// QoS 0 message written to its socket, a QoS 1/2 message acknowledged); one that completes
    /// no delivery for this many milliseconds is stalled and holds nobody back (its queue
    /// overflows and drops, counted) until it makes progress again. 0 disables back-pressure
    /// (messages beyond the queue limits are dropped).
    pub backpressure_stall_timeout_ms: u64,
    /// Arrival order (`docs/design/arrival-order.md`): a subscription put in place after a
    /// message that arrived later than its SUBSCRIBE was routed (another thread routed it
    /// first) still receives that message, if the SUBSCRIBE was handled within this many
    /// milliseconds of the message's arrival. 0 turns the catch-up off.
    pub arrival_window_ms: u64,
    /// Bytes the arrival-order record may hold: per message 64 plus its topic and payload,
    /// at least 16 KiB (a small message keeps its publisher's read buffer alive).
    pub arrival_window_bytes: usize,
    /// Strategy of shared subscription groups.
    pub shared_subscription_strategy: SharedStrategy,
    /// Answer Request Response Information with this prefix as Response Information (empty =
    /// do not offer one).
    pub response_information: String,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            max_packet_size: 1024 * 1024,
            receive_maximum: 1024,
            max_inflight_messages: 1024,
            max_queued_messages: 100_000,
            max_queued_bytes: 64 * 1024 * 1024,
            max_queued_bytes_total: 2 * 1024 * 1024 * 1024,
            queue_qos0_offline: false,
            topic_alias_maximum: 64,
            assign_outbound_topic_aliases: true,
            max_keep_alive: 65_535,
            max_client_id_len: 256,
            max_subscriptions_per_client: 10_000,
            max_topic_levels: 64,
            max_session_expiry_interval: u32::MAX,
            max_qos: 2,
            retain_available: true,
            backpressure_stall_timeout_ms: 5000,
            arrival_window_ms: 20,
            arrival_window_bytes: 32 * 1024 * 1024,
            shared_subscription_strategy: SharedStrategy::RoundRobin,
            response_information: String::new(),
        }
    }
}

/// Why a configuration is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A field has a value outside its allowed range.
    #[error("broker.{field}: {message}")]
    Invalid {
        /// Field name.
        field: &'static str,
        /// What is wrong.
        message: &'static str,
    },
}

impl BrokerConfig {
    /// The settings a running broker cannot change ([`crate::Broker::reconfigure`] keeps
    /// their values): `retain_available` (retained messages are kept, and clients were told
    /// in CONNACK whether they may send them).
    pub const RESTART_KEYS: &'static [&'static str] = &["retain_available"];

    /// Checks ranges that serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message| Err(ConfigError::Invalid { field, message });
        if self.max_packet_size < 64 || self.max_packet_size > hayate_codec::MAX_VARIABLE_INT + 5 {
            return invalid("max_packet_size", "must be between 64 and 268435460");
        }
        if self.receive_maximum == 0 {
            return invalid("receive_maximum", "must be at least 1");
        }
        if self.max_inflight_messages == 0 {
            return invalid("max_inflight_messages", "must be at least 1");
        }
        if self.max_qos > 2 {
            return invalid("max_qos", "must be 0, 1 or 2");
        }
        if self.max_queued_messages == 0 {
            return invalid("max_queued_messages", "must be at least 1");
        }
        if self.max_keep_alive == 0 {
            return invalid("max_keep_alive", "must be at least 1 (65535 = no limit)");
        }
        if self.max_client_id_len == 0 {
            return invalid("max_client_id_len", "must be at least 1");
        }
        Ok(())
    }

    /// The maximum QoS as a [`QoS`].
    pub fn maximum_qos(&self) -> QoS {
        QoS::from_u8(self.max_qos.min(2)).unwrap_or(QoS::ExactlyOnce)
    }
}
