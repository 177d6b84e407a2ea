//! Authentication and authorisation hooks. The broker asks; the hook decides. Password files,
//! ACL files, SCRAM and JWT plug in here (see `hayate-server::security`) without the router
//! or channel knowing.
//!
//! Every method is synchronous and called from a connection's task (or the timer task), some
//! of them under a session lock: a hook must not block for long, and must never call back
//! into the broker. A hook that has to do something slow (an argon2id hash) does it in a way
//! that does not stall other connections (`tokio::task::block_in_place` on the server side).

use hayate_codec::ReasonCode;
use hayate_session::Arrival;
use hayate_topic::matches_filter;
use serde::Deserialize;
use std::any::Any;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Who is asking.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Client identifier (after assignment).
    pub client_id: Arc<str>,
    /// User name: from CONNECT, or the one authentication established (transport identity,
    /// JWT username claim, SCRAM user).
    pub username: Option<Arc<str>>,
    /// Remote address, if the transport has one.
    pub peer: Option<SocketAddr>,
    /// The listener the client connected through.
    pub listener: Arc<ListenerInfo>,
    /// The transport identity and the grant ([`Self::transport_identity`],
    /// [`Self::grant`]), which most clients have neither of: boxed, so that every session's
    /// `ClientInfo` is 24 bytes smaller.
    proofs: Option<Box<Proofs>>,
    /// When its CONNECT reached the broker ([`Arrival::UNKNOWN`] when not known): a new
    /// subscription never catches up on a message that arrived before it (`crate::arrival`).
    pub connected: Arrival,
}

/// What a client proved beyond its CONNECT.
#[derive(Debug, Clone, Default)]
struct Proofs {
    transport_identity: Option<Arc<str>>,
    grant: Option<Arc<dyn Any + Send + Sync>>,
}

impl ClientInfo {
    /// A client with this id on this listener; no user name, address, identity or grant,
    /// arrival unknown.
    pub fn new(client_id: Arc<str>, listener: Arc<ListenerInfo>) -> ClientInfo {
        ClientInfo {
            client_id,
            username: None,
            peer: None,
            listener,
            proofs: None,
            connected: Arrival::UNKNOWN,
        }
    }

    /// Identity proved by the transport (client certificate CN/SAN or TLS-PSK identity).
    pub fn transport_identity(&self) -> Option<&Arc<str>> {
        self.proofs.as_ref()?.transport_identity.as_ref()
    }

    /// Whatever the hook attached at authentication for its own later decisions (for
    /// example the ACL carried in a JWT). Opaque to the broker.
    pub fn grant(&self) -> Option<&Arc<dyn Any + Send + Sync>> {
        self.proofs.as_ref()?.grant.as_ref()
    }

    /// Sets the identity the transport proved.
    pub fn set_transport_identity(&mut self, identity: Option<Arc<str>>) {
        self.set_proofs(|proofs| proofs.transport_identity = identity);
    }

    /// Sets what the hook attached at authentication.
    pub fn set_grant(&mut self, grant: Option<Arc<dyn Any + Send + Sync>>) {
        self.set_proofs(|proofs| proofs.grant = grant);
    }

    fn set_proofs(&mut self, change: impl FnOnce(&mut Proofs)) {
        let mut proofs = self.proofs.take().unwrap_or_default();
        change(&mut proofs);
        if proofs.transport_identity.is_some() || proofs.grant.is_some() {
            self.proofs = Some(proofs);
        }
    }
}

/// A listener's name and the authentication settings that differ per listener.
#[derive(Debug, Clone, Default)]
pub struct ListenerInfo {
    /// The listener's name (from the configuration; its address when unnamed).
    pub name: Arc<str>,
    /// Overrides the authentication policy's `allow_anonymous` on this listener.
    pub allow_anonymous: Option<bool>,
    /// Use the transport identity (client certificate or PSK identity) as the user name.
    pub identity_as_username: bool,
    /// Time and rate limits of each connection on this listener.
    pub limits: ConnectionLimits,
    /// Who connects through it: MQTT clients, or the nodes of a cluster.
    pub role: ListenerRole,
    /// On a cluster listener, the password every node must present (`[cluster] secret`);
    /// `None` admits any node that can reach the listener.
    pub cluster_secret: Option<Arc<str>>,
}

impl ListenerInfo {
    /// Connections of the cluster itself (nodes, and a node's own ingress of forwarded
    /// messages): the authentication and ACL hooks, which are about clients, do not apply.
    /// A message was authorised where its client published it, and a subscriber where it
    /// subscribed.
    pub fn is_cluster_internal(&self) -> bool {
        self.role != ListenerRole::Clients
    }
}

/// Who connects through a listener (`crate::cluster`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListenerRole {
    /// MQTT clients. The client identifiers reserved for peer sessions are refused.
    #[default]
    Clients,
    /// Other nodes of the cluster, each opening a peer session (client identifier
    /// `$cluster/NODE`); no other client identifier is accepted.
    Cluster,
    /// The in-process connection through which a node's link publishes what it received from
    /// a peer node: its messages go to this node's clients only, never on to another node.
    PeerIngress,
}

/// Time and rate limits that apply to each connection (from the server configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a new connection may take to complete CONNECT (and enhanced authentication).
    pub connect_timeout: Duration,
    /// Inbound bytes per second per client, enforced by pausing reads (0: none).
    pub max_inbound_bytes_per_sec: u64,
    /// Inbound PUBLISH packets per second per client, enforced by pausing reads (0: none).
    pub max_inbound_messages_per_sec: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            connect_timeout: Duration::from_secs(10),
            max_inbound_bytes_per_sec: 0,
            max_inbound_messages_per_sec: 0,
        }
    }
}

/// What a successful authentication established about the client.
#[derive(Debug, Default, Clone)]
pub struct Authenticated {
    /// Replaces the CONNECT user name (transport identity, JWT username claim, SCRAM user).
    pub username: Option<Arc<str>>,
    /// Stored in [`ClientInfo::grant`].
    pub grant: Option<Arc<dyn Any + Send + Sync>>,
}

/// One step of an MQTT v5 enhanced authentication exchange (section 4.12).
#[derive(Debug)]
pub enum AuthStep {
    /// Send this Authentication Data in an AUTH packet with reason 0x18 (Continue
    /// authentication) and wait for the client's next AUTH.
    Continue(Vec<u8>),
    /// Authenticated: the data (if any) goes into the CONNACK (or, on re-authentication, the
    /// AUTH 0x00 Success packet).
    Success(Option<Vec<u8>>, Authenticated),
    /// Refused with this reason code: CONNACK (or, on re-authentication, DISCONNECT), then
    /// the connection is closed [MQTT-4.12.0-4] [MQTT-4.12.1-2].
    Fail(ReasonCode),
}

/// The server side of one enhanced authentication exchange, owned by the connection for as
/// long as the exchange lasts.
pub trait EnhancedAuth: Send + std::fmt::Debug {
    /// Feeds the client's Authentication Data (from CONNECT, or from an AUTH packet; empty
    /// when the packet carried none).
    fn step(&mut self, data: &[u8]) -> AuthStep;
}

/// Decides who may connect and what they may publish, subscribe to and receive.
pub trait AuthHook: Send + Sync + std::fmt::Debug {
    /// Authenticates a CONNECT without an Authentication Method. `Ok` admits the client (with
    /// what it established); `Err(code)` refuses it with that v5 reason code (mapped to the
    /// v3 return code by the caller).
    fn authenticate(
        &self,
        client: &ClientInfo,
        password: Option<&[u8]>,
    ) -> Result<Authenticated, ReasonCode>;

    /// Starts an enhanced authentication exchange for `method` (the CONNECT's, or a
    /// re-authentication's, Authentication Method). `Err(code)` refuses at once: 0x8C Bad
    /// authentication method for a method the hook does not support [MQTT-4.12.0-1].
    fn start_enhanced_auth(
        &self,
        client: &ClientInfo,
        method: &str,
    ) -> Result<Box<dyn EnhancedAuth>, ReasonCode> {
        let _ = (client, method);
        Err(ReasonCode::BAD_AUTHENTICATION_METHOD)
    }

    /// May `client` publish to `topic`? (Will messages are asked too, with the ClientInfo of
    /// the connection that set them.)
    fn authorize_publish(&self, client: &ClientInfo, topic: &str) -> bool;

    /// When a v3 client's PUBLISH is refused, close its connection instead of acknowledging
    /// and dropping the message (v3 has no way to say no).
    fn disconnect_v3_on_denied_publish(&self) -> bool {
        false
    }

    /// May `client` subscribe to `filter`? (Shared subscriptions are asked with the inner
    /// filter.) `Err(code)` refuses with that v5 SUBACK reason code (v3 clients get 0x80).
    fn authorize_subscribe(&self, client: &ClientInfo, filter: &str) -> Result<(), ReasonCode>;

    /// Whether [`AuthHook::authorize_read`] can ever say no. Asked once per routed message;
    /// when false the per-delivery check is skipped entirely.
    fn has_read_rules(&self) -> bool {
        false
    }

    /// May a message on `topic` be delivered to `client` (the subscriber, or for an offline
    /// persistent session the client that last used it)? Asked for every delivery, retained
    /// messages and wills included, while the subscriber's session is locked: keep it cheap.
    fn authorize_read(&self, client: &ClientInfo, topic: &str) -> bool {
        let _ = (client, topic);
        true
    }

    /// Re-reads whatever the hook loaded from files (SIGHUP). Keeps the old rules when the
    /// new ones cannot be read.
    fn reload(&self) {}
}

/// The built-in policy: anonymous access on or off, and deny lists of topic patterns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StaticPolicy {
    /// Admit clients that send no user name.
    pub allow_anonymous: bool,
    /// Subscriptions refused (SUBACK 0x87 / 0x80) when the requested filter matches one of these
    /// patterns (MQTT filter syntax; `test/nosubscribe` refuses exactly that filter).
    pub deny_subscribe: Vec<String>,
    /// v5 SUBACK reason code for subscriptions refused by `deny_subscribe`: 135 (0x87, Not
    /// authorized) by default; 128 (0x80, Unspecified error) is what the Paho interoperability
    /// suite expects for its `test/nosubscribe` topic.
    pub deny_subscribe_reason_code: u8,
    /// Publishes refused (v5 PUBACK/PUBREC 0x87; v3 acknowledged and dropped) when the topic
    /// matches one of these patterns.
    pub deny_publish: Vec<String>,
}

impl Default for StaticPolicy {
    fn default() -> Self {
        StaticPolicy {
            allow_anonymous: true,
            deny_subscribe: Vec::new(),
            deny_subscribe_reason_code: ReasonCode::NOT_AUTHORIZED.0,
            deny_publish: Vec::new(),
        }
    }
}

impl StaticPolicy {
    /// Whether `deny_publish` refuses `topic`.
    pub fn publish_denied(&self, topic: &str) -> bool {
        self.deny_publish
            .iter()
            .any(|pattern| matches_filter(pattern, topic))
    }

    /// The SUBACK reason code when `deny_subscribe` refuses `filter`.
    pub fn subscribe_denied(&self, filter: &str) -> Option<ReasonCode> {
        let denied = self
            .deny_subscribe
            .iter()
            .any(|pattern| pattern == filter || matches_filter(pattern, filter));
        if !denied {
            return None;
        }
        // Only failure codes may refuse a subscription; anything else means Not authorized.
        let code = ReasonCode(self.deny_subscribe_reason_code);
        Some(if code.is_error() {
            code
        } else {
            ReasonCode::NOT_AUTHORIZED
        })
    }
}

impl AuthHook for StaticPolicy {
    fn authenticate(
        &self,
        client: &ClientInfo,
        _password: Option<&[u8]>,
    ) -> Result<Authenticated, ReasonCode> {
        let allow_anonymous = client
            .listener
            .allow_anonymous
            .unwrap_or(self.allow_anonymous);
        if client.username.is_none() && !allow_anonymous {
            return Err(ReasonCode::NOT_AUTHORIZED);
        }
        Ok(Authenticated::default())
    }

    fn authorize_publish(&self, _client: &ClientInfo, topic: &str) -> bool {
        !self.publish_denied(topic)
    }

    fn authorize_subscribe(&self, _client: &ClientInfo, filter: &str) -> Result<(), ReasonCode> {
        match self.subscribe_denied(filter) {
            Some(code) => Err(code),
            None => Ok(()),
        }
    }
}
