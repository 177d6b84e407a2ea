//! MQTT v5 enhanced authentication (sections 3.1.2.11.9/10, 3.15 and 4.12): the AUTH
//! exchange between a CONNECT that names an Authentication Method and its CONNACK, and
//! re-authentication (AUTH 0x19) while connected. The method's logic is the hook's
//! ([`crate::hooks::EnhancedAuth`]); this module only enforces the packet rules.

use super::connect::{admitted, count_auth_failure};
use super::{Channel, Phase};
use crate::close::{Close, CloseReason};
use crate::hooks::{AuthStep, ClientInfo, EnhancedAuth};
use crate::router::WakeList;
use bytes::Bytes;
use hayate_codec::{Auth, ByteStr, Connect, Packet, Properties, ReasonCode};
use hayate_session::OutBuf;
use std::sync::Arc;
use std::time::Instant;

/// A connection's enhanced authentication: set when CONNECT carried an Authentication Method
/// and kept for the connection's life (re-authentication uses the same method).
#[derive(Debug)]
pub(crate) struct AuthState {
    /// The CONNECT's Authentication Method; every AUTH must carry it [MQTT-4.12.0-5].
    pub(crate) method: ByteStr,
    /// The exchange in progress, if any.
    exchange: Option<Box<dyn EnhancedAuth>>,
    /// The CONNECT waiting for its exchange to finish.
    pending: Option<Box<PendingConnect>>,
}

impl AuthState {
    pub(crate) fn new(method: ByteStr) -> AuthState {
        AuthState {
            method,
            exchange: None,
            pending: None,
        }
    }
}

/// A CONNECT accepted so far, waiting for its authentication exchange.
#[derive(Debug)]
pub(crate) struct PendingConnect {
    pub(crate) connect: Connect,
    pub(crate) client: ClientInfo,
    pub(crate) assigned: Option<Arc<str>>,
}

impl Channel {
    /// Acts on one step of the exchange started by CONNECT: AUTH 0x18 and wait, CONNACK
    /// success, or CONNACK refusal.
    pub(super) fn connect_auth_step(
        &mut self,
        step: AuthStep,
        exchange: Box<dyn EnhancedAuth>,
        pending: Box<PendingConnect>,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        match step {
            AuthStep::Continue(data) => {
                // [MQTT-4.12.0-2] more is needed: AUTH with 0x18.
                self.send_auth(ReasonCode::CONTINUE_AUTHENTICATION, Some(data), out);
                if let Some(state) = self.auth_mut() {
                    state.exchange = Some(exchange);
                    state.pending = Some(pending);
                }
                self.phase = Phase::Authenticating;
                Ok(())
            }
            AuthStep::Success(data, authenticated) => {
                let PendingConnect {
                    connect,
                    client,
                    assigned,
                } = *pending;
                let client = admitted(client, authenticated);
                self.complete_connect(connect, client, assigned, data, now, out, wake)
            }
            // [MQTT-4.12.0-4] refused: CONNACK with the reason, then close.
            AuthStep::Fail(reason) => {
                Err(self.auth_failed(reason, CloseReason::AuthenticationFailed, out))
            }
        }
    }

    /// A packet while the CONNECT's exchange is under way: only AUTH 0x18 with the same
    /// method continues it [MQTT-4.12.0-3]; DISCONNECT ends the connection; anything else is
    /// a protocol error, answered with CONNACK 0x82 (no DISCONNECT may precede a successful
    /// CONNACK [MQTT-3.14.0-1]).
    pub(super) fn handle_authenticating(
        &mut self,
        packet: Packet,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        let auth = match packet {
            Packet::Auth(auth) => auth,
            Packet::Disconnect(disconnect) => {
                self.phase = Phase::Closed;
                return Err(Close::new(
                    disconnect.reason_code,
                    CloseReason::ClientDisconnect,
                ));
            }
            _ => {
                return Err(self.refuse(
                    ReasonCode::PROTOCOL_ERROR,
                    CloseReason::PacketDuringAuthentication,
                    out,
                ))
            }
        };
        if let Err(event) = self.check_auth_packet(&auth, ReasonCode::CONTINUE_AUTHENTICATION) {
            return Err(self.refuse(ReasonCode::PROTOCOL_ERROR, event, out));
        }
        let taken = self
            .auth_mut()
            .and_then(|state| Some((state.exchange.take()?, state.pending.take()?)));
        let Some((mut exchange, pending)) = taken else {
            return Err(self.refuse(ReasonCode::PROTOCOL_ERROR, CloseReason::UnexpectedAuth, out));
        };
        let step = exchange.step(auth_data(&auth));
        self.connect_auth_step(step, exchange, pending, now, out, wake)
    }

    /// AUTH while connected: re-authentication [MQTT-4.12.1-1]. 0x19 starts an exchange (with
    /// the CONNECT's method), 0x18 continues it; success is answered with AUTH 0x00, failure
    /// with DISCONNECT and close [MQTT-4.12.1-2]. Other packets flow meanwhile. A client that
    /// gave no Authentication Method at CONNECT must not send AUTH [MQTT-4.12.0-7].
    pub(super) fn handle_reauth(&mut self, auth: Auth, out: &mut OutBuf) -> Result<(), Close> {
        if self.auth().is_none() {
            return Err(self.close_with(
                ReasonCode::PROTOCOL_ERROR,
                CloseReason::UnexpectedAuth,
                out,
            ));
        }
        let in_progress = self.auth().is_some_and(|state| state.exchange.is_some());
        let expected = if in_progress {
            ReasonCode::CONTINUE_AUTHENTICATION
        } else {
            ReasonCode::REAUTHENTICATE
        };
        if let Err(event) = self.check_auth_packet(&auth, expected) {
            return Err(self.close_with(ReasonCode::PROTOCOL_ERROR, event, out));
        }
        let Some(client) = self.client.clone() else {
            return Err(self.close_with(ReasonCode::PROTOCOL_ERROR, CloseReason::NoSession, out));
        };
        let existing = self.auth_mut().and_then(|state| state.exchange.take());
        let mut exchange = match existing {
            Some(exchange) => exchange,
            None => {
                let method = auth
                    .properties
                    .authentication_method
                    .clone()
                    .unwrap_or_default();
                match self.broker.hooks.start_enhanced_auth(&client, &method) {
                    Ok(exchange) => exchange,
                    Err(reason) => {
                        count_auth_failure(&self.broker.stats, reason);
                        return Err(self.close_with(
                            disconnect_reason(reason),
                            CloseReason::ReauthenticationFailed,
                            out,
                        ));
                    }
                }
            }
        };
        match exchange.step(auth_data(&auth)) {
            AuthStep::Continue(data) => {
                self.send_auth(ReasonCode::CONTINUE_AUTHENTICATION, Some(data), out);
                if let Some(state) = self.auth_mut() {
                    state.exchange = Some(exchange);
                }
                Ok(())
            }
            AuthStep::Success(data, authenticated) => {
                let renewed = admitted((*client).clone(), authenticated);
                if renewed.username != client.username {
                    // Re-authentication renews the credentials of the same identity; it does
                    // not turn this session into another user's.
                    tracing::info!(
                        client_id = %client.client_id,
                        username = ?client.username,
                        peer = ?client.peer,
                        "reauthentication_changed_user"
                    );
                    count_auth_failure(&self.broker.stats, ReasonCode::NOT_AUTHORIZED);
                    return Err(self.close_with(
                        ReasonCode::NOT_AUTHORIZED,
                        CloseReason::ReauthenticationChangedUser,
                        out,
                    ));
                }
                let renewed = Arc::new(renewed);
                self.with_session(out, |state, _| state.client = Some(renewed.clone()))?;
                self.client = Some(renewed);
                self.send_auth(ReasonCode::SUCCESS, data, out);
                tracing::debug!(client_id = %client.client_id, "reauthenticated");
                Ok(())
            }
            AuthStep::Fail(reason) => {
                count_auth_failure(&self.broker.stats, reason);
                Err(self.close_with(
                    disconnect_reason(reason),
                    CloseReason::ReauthenticationFailed,
                    out,
                ))
            }
        }
    }

    /// Checks an AUTH from the client: the reason code is the one expected now (a client may
    /// send only 0x18 and 0x19 [MQTT-3.15.2-1]) and the method is the CONNECT's
    /// [MQTT-4.12.0-5] (omitting it is a protocol error, §3.15.2.2.2).
    fn check_auth_packet(&self, auth: &Auth, expected: ReasonCode) -> Result<(), CloseReason> {
        if auth.reason_code != expected {
            return Err(CloseReason::UnexpectedAuthReasonCode);
        }
        let method = self.auth().map(|state| &state.method);
        match &auth.properties.authentication_method {
            Some(sent) if Some(sent) == method => Ok(()),
            Some(_) => Err(CloseReason::AuthMethodChanged),
            None => Err(CloseReason::AuthWithoutMethod),
        }
    }

    /// Writes an AUTH with the connection's method and `data`.
    fn send_auth(&self, reason: ReasonCode, data: Option<Vec<u8>>, out: &mut OutBuf) {
        let properties = Properties {
            authentication_method: self.auth().map(|state| state.method.clone()),
            authentication_data: data.map(Bytes::from),
            ..Properties::default()
        };
        let auth = Auth {
            reason_code: reason,
            properties,
        };
        self.write(&Packet::Auth(auth), out);
    }
}

fn auth_data(auth: &Auth) -> &[u8] {
    auth.properties
        .authentication_data
        .as_deref()
        .unwrap_or_default()
}

/// A refusal reason as a DISCONNECT may carry it: 0x86 (Bad user name or password) and 0x8C
/// (Bad authentication method) exist only in CONNACK, so they become 0x87 Not authorized.
fn disconnect_reason(reason: ReasonCode) -> ReasonCode {
    match reason.0 {
        0x80 | 0x83 | 0x87 | 0x89 | 0x97 | 0x98 | 0x9F => reason,
        _ => ReasonCode::NOT_AUTHORIZED,
    }
}
