//! Authentication and authorisation hooks. The broker asks; the hook decides. Password files,
//! ACL files and JWT plug in here later without the router or channel knowing.

use hayate_codec::ReasonCode;
use hayate_topic::matches_filter;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// Who is asking.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Client identifier (after assignment).
    pub client_id: Arc<str>,
    /// User name from CONNECT, if any.
    pub username: Option<Arc<str>>,
    /// Remote address, if the transport has one.
    pub peer: Option<SocketAddr>,
    /// The listener the client connected through.
    pub listener: Arc<ListenerInfo>,
    /// Identity proved by the transport (client certificate CN/SAN or TLS-PSK identity).
    pub transport_identity: Option<Arc<str>>,
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
}

/// Decides who may connect and what they may publish and subscribe to.
pub trait AuthHook: Send + Sync + std::fmt::Debug {
    /// `Ok(())` admits the client; `Err(code)` refuses it with that v5 reason code (mapped to
    /// the v3 return code by the caller).
    fn authenticate(&self, client: &ClientInfo, password: Option<&[u8]>) -> Result<(), ReasonCode>;
    /// May `client` publish to `topic`?
    fn authorize_publish(&self, client: &ClientInfo, topic: &str) -> bool;
    /// May `client` subscribe to `filter`? (Shared subscriptions are asked with the inner
    /// filter.) `Err(code)` refuses with that v5 SUBACK reason code (v3 clients get 0x80).
    fn authorize_subscribe(&self, client: &ClientInfo, filter: &str) -> Result<(), ReasonCode>;
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

impl AuthHook for StaticPolicy {
    fn authenticate(
        &self,
        client: &ClientInfo,
        _password: Option<&[u8]>,
    ) -> Result<(), ReasonCode> {
        if client.username.is_none() && !self.allow_anonymous {
            return Err(ReasonCode::NOT_AUTHORIZED);
        }
        Ok(())
    }

    fn authorize_publish(&self, _client: &ClientInfo, topic: &str) -> bool {
        !self
            .deny_publish
            .iter()
            .any(|pattern| matches_filter(pattern, topic))
    }

    fn authorize_subscribe(&self, _client: &ClientInfo, filter: &str) -> Result<(), ReasonCode> {
        let denied = self
            .deny_subscribe
            .iter()
            .any(|pattern| pattern == filter || matches_filter(pattern, filter));
        if denied {
            // Only failure codes may refuse a subscription; anything else means Not authorized.
            let code = ReasonCode(self.deny_subscribe_reason_code);
            return Err(if code.is_error() {
                code
            } else {
                ReasonCode::NOT_AUTHORIZED
            });
        }
        Ok(())
    }
}
