//! Why a connection ends: [`CloseReason`], one variant per cause, each with a stable log name,
//! and [`Close`], the reason together with the reason code sent (or owed) to the client.
//!
//! Spec clauses follow the workspace convention described in `docs/ARCHITECTURE.md`
//! ("Spec citations").

use hayate_codec::ReasonCode;
use std::fmt;

/// The connection must close. For server-initiated closes of v5 connections a DISCONNECT with
/// `code` has already been written to the output (or a refusing CONNACK, before CONNECT
/// completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// The reason code: the client's own for [`CloseReason::ClientDisconnect`], otherwise the
    /// one the broker sent or would send to a v5 client.
    pub code: ReasonCode,
    /// Why.
    pub reason: CloseReason,
}

impl Close {
    /// A close for `reason` with `code`.
    pub fn new(code: ReasonCode, reason: CloseReason) -> Close {
        Close { code, reason }
    }

    /// True when the broker ended the connection (not the client's DISCONNECT).
    pub fn by_server(&self) -> bool {
        self.reason != CloseReason::ClientDisconnect
    }

    /// True when the transport should half-close and linger so the client can read what it
    /// was told before the socket goes: every close by the server except a connect timeout
    /// (which owes the client nothing, and must stay cheap under a slowloris attack).
    pub fn lingers(&self) -> bool {
        self.by_server() && self.reason != CloseReason::ConnectTimeout
    }
}

/// Why a connection ends. [`CloseReason::as_str`] is the stable snake_case name that log lines
/// and metrics use; it never changes once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CloseReason {
    /// The client sent DISCONNECT.
    ClientDisconnect,
    /// No CONNECT completed within the listener's connect timeout.
    ConnectTimeout,
    /// Nothing received for 1.5 × Keep Alive [MQTT-3.1.2-22] ([3.1.1: MQTT-3.1.2-24]).
    KeepAliveTimeout,
    /// The server is shutting down.
    ServerShutdown,
    /// A packet could not be decoded (the code says which rule it broke).
    MalformedPacket,
    /// The first packet was not CONNECT [MQTT-3.1.0-1].
    FirstPacketNotConnect,
    /// A packet arrived after the connection was already closing.
    PacketAfterClose,
    /// A second CONNECT [MQTT-3.1.0-2].
    SecondConnect,
    /// A packet only a server may send (CONNACK, SUBACK, UNSUBACK, PINGRESP).
    ServerPacketFromClient,
    /// Another connection took the session over [MQTT-3.1.4-3].
    SessionTakenOver,
    /// The connection has no session although it is connected (internal inconsistency).
    NoSession,
    /// DISCONNECT raised a Session Expiry Interval that CONNECT set to 0 (§3.14.2.2.2).
    DisconnectExpiryRaised,
    /// PUBLISH above the announced Maximum QoS [MQTT-3.2.2-11].
    QosNotSupported,
    /// PUBLISH from a client carrying a Subscription Identifier [MQTT-3.3.4-6].
    SubscriptionIdInPublish,
    /// Retained PUBLISH while Retain Available is 0 [MQTT-3.2.2-14].
    RetainNotSupported,
    /// A session-level protocol violation (receive maximum, topic alias).
    ProtocolViolation,
    /// Invalid topic name in PUBLISH [MQTT-3.3.2-2].
    InvalidTopicName,
    /// A v3 client published where it may not and the listener disconnects for that.
    PublishDenied,
    /// No Local on a shared subscription [MQTT-3.8.3-4].
    SharedNoLocal,
    /// A v3 client sent a QoS 1/2 PUBLISH while the store could not write: it cannot be
    /// acknowledged, and v3 has no way to refuse it.
    StoreUnavailable,
    /// AUTH that was not expected.
    UnexpectedAuth,
    /// AUTH with a reason code that does not fit the exchange.
    UnexpectedAuthReasonCode,
    /// AUTH with another Authentication Method than CONNECT's.
    AuthMethodChanged,
    /// AUTH on a connection that did not use enhanced authentication.
    AuthWithoutMethod,
    /// A packet other than AUTH or DISCONNECT during enhanced authentication.
    PacketDuringAuthentication,
    /// Re-authentication failed.
    ReauthenticationFailed,
    /// Re-authentication proved another user.
    ReauthenticationChangedUser,
    /// CONNECT refused: the listener or broker is at its connection limit.
    MaxConnections,
    /// CONNECT refused: empty client id not allowed here.
    EmptyClientId,
    /// CONNECT refused: client id longer than allowed.
    ClientIdTooLong,
    /// CONNECT refused: a peer session's client id on a client listener, or a client's on the
    /// cluster listener (`crate::cluster`).
    ClientIdReserved,
    /// CONNECT (or a v3 QoS 1/2 PUBLISH) refused: the cluster may be split and the netsplit
    /// policy refuses it.
    ClusterSplit,
    /// CONNECT refused: invalid will topic.
    InvalidWillTopic,
    /// CONNECT refused: will QoS above the Maximum QoS.
    WillQosNotSupported,
    /// CONNECT refused: retained will while Retain Available is 0.
    WillRetainNotSupported,
    /// CONNECT refused by the enhanced authentication method.
    EnhancedAuthRefused,
    /// CONNECT refused: bad user name or password, or not authorised.
    AuthenticationFailed,
    /// An operator closed the connection (the admin API's kick; v5: DISCONNECT 0x98).
    AdministrativeAction,
}

impl CloseReason {
    /// The stable snake_case name for log lines and metrics.
    pub fn as_str(self) -> &'static str {
        use CloseReason::*;
        match self {
            ClientDisconnect => "client_disconnect",
            ConnectTimeout => "connect_timeout",
            KeepAliveTimeout => "keep_alive_timeout",
            ServerShutdown => "server_shutdown",
            MalformedPacket => "malformed_packet",
            FirstPacketNotConnect => "first_packet_not_connect",
            PacketAfterClose => "packet_after_close",
            SecondConnect => "second_connect",
            ServerPacketFromClient => "server_packet_from_client",
            SessionTakenOver => "session_taken_over",
            StoreUnavailable => "store_unavailable",
            NoSession => "no_session",
            DisconnectExpiryRaised => "disconnect_expiry_raised",
            QosNotSupported => "qos_not_supported",
            SubscriptionIdInPublish => "subscription_id_in_publish",
            RetainNotSupported => "retain_not_supported",
            ProtocolViolation => "protocol_violation",
            InvalidTopicName => "invalid_topic_name",
            PublishDenied => "publish_denied",
            SharedNoLocal => "shared_no_local",
            UnexpectedAuth => "unexpected_auth",
            UnexpectedAuthReasonCode => "unexpected_auth_reason_code",
            AuthMethodChanged => "auth_method_changed",
            AuthWithoutMethod => "auth_without_method",
            PacketDuringAuthentication => "packet_during_authentication",
            ReauthenticationFailed => "reauthentication_failed",
            ReauthenticationChangedUser => "reauthentication_changed_user",
            MaxConnections => "max_connections",
            EmptyClientId => "empty_client_id",
            ClientIdTooLong => "client_id_too_long",
            ClientIdReserved => "client_id_reserved",
            ClusterSplit => "cluster_split",
            InvalidWillTopic => "invalid_will_topic",
            WillQosNotSupported => "will_qos_not_supported",
            WillRetainNotSupported => "will_retain_not_supported",
            EnhancedAuthRefused => "enhanced_auth_refused",
            AuthenticationFailed => "authentication_failed",
            AdministrativeAction => "administrative_action",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_client_disconnect_is_not_by_server() {
        let client = Close::new(ReasonCode::SUCCESS, CloseReason::ClientDisconnect);
        let server = Close::new(
            ReasonCode::KEEP_ALIVE_TIMEOUT,
            CloseReason::KeepAliveTimeout,
        );
        assert!(!client.by_server());
        assert!(server.by_server());
        assert!(server.lingers());
        let timeout = Close::new(
            ReasonCode::MAXIMUM_CONNECT_TIME,
            CloseReason::ConnectTimeout,
        );
        assert!(timeout.by_server() && !timeout.lingers());
        assert_eq!(server.reason.to_string(), "keep_alive_timeout");
    }
}
