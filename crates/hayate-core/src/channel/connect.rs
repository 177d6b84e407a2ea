//! CONNECT → CONNACK: client identifier rules, authentication, session open/resume/takeover,
//! negotiated limits.

use super::auth::AuthState;
use super::{Channel, Phase, HANDOVER_TIMEOUT};
use crate::close::{Close, CloseReason};
use crate::cluster::{ClusterEvent, SessionKind};
use crate::hooks::{Authenticated, ClientInfo, ListenerRole};
use crate::registry::{AwaitedHandover, Handover, PendingWill};
use crate::router::WakeList;
use bytes::Bytes;
use hayate_codec::{ConnAck, Connect, Packet, Properties, ProtocolVersion, QoS, ReasonCode};
use hayate_session::{ConnectionParams, OutBuf, Session};
use std::sync::Arc;
use std::time::Instant;

/// Session Expiry Interval meaning "never expires" (§3.1.2.11.2).
const NEVER_EXPIRES: u32 = u32::MAX;

impl Channel {
    pub(super) fn handle_connect(
        &mut self,
        connect: Connect,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        let version = connect.protocol;
        self.version = version;
        self.bridge = connect.bridge && !version.is_v5();
        let config = self.broker.config();
        let v5 = version.is_v5();

        if self.info.as_ref().is_some_and(|info| info.over_capacity) {
            return Err(self.refuse(ReasonCode::QUOTA_EXCEEDED, CloseReason::MaxConnections, out));
        }
        // Client identifier [MQTT-3.1.3-3] .. [MQTT-3.1.3-8].
        let mut assigned = None;
        let client_id: Arc<str> = if connect.client_id.is_empty() {
            // v3.1.1 allows an empty id only with Clean Session [3.1.1: MQTT-3.1.3-7] [3.1.1: MQTT-3.1.3-8];
            // 3.1 requires an id; v5 always assigns one [MQTT-3.1.3-6].
            if version == ProtocolVersion::V31
                || (version == ProtocolVersion::V311 && !connect.clean_start)
            {
                return Err(self.refuse(
                    ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
                    CloseReason::EmptyClientId,
                    out,
                ));
            }
            let id: Arc<str> = Arc::from(format!("hayate-{:016x}", rand::random::<u64>()));
            if v5 {
                assigned = Some(id.clone());
            }
            id
        } else if connect.client_id.len() > config.max_client_id_len {
            return Err(self.refuse(
                ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
                CloseReason::ClientIdTooLong,
                out,
            ));
        } else {
            Arc::from(connect.client_id.as_str())
        };
        // Peer sessions come through the cluster listener only, and only they do
        // (`crate::cluster`).
        let reserved = SessionKind::of(&client_id) == SessionKind::Peer;
        let refused = match self.listener().role {
            ListenerRole::Clients => reserved,
            ListenerRole::Cluster => !reserved,
            ListenerRole::PeerIngress => false,
        };
        if refused {
            return Err(self.refuse(
                ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
                CloseReason::ClientIdReserved,
                out,
            ));
        }

        // A client identifier the server assigned cannot be in use on the other side of a
        // split: only chosen identifiers need the registration the policy is about.
        let split_refusal = self.listener().role == ListenerRole::Clients
            && assigned.is_none()
            && !connect.client_id.is_empty()
            && self
                .broker
                .router
                .cluster()
                .is_some_and(|cluster| cluster.refuses_register());
        if split_refusal {
            return Err(self.refuse(
                ReasonCode::SERVER_UNAVAILABLE,
                CloseReason::ClusterSplit,
                out,
            ));
        }

        // Will checks: a valid topic name, and QoS / retain the server supports.
        if let Some(will) = &connect.will {
            if hayate_topic::validate_topic_name(&will.topic).is_err() {
                return Err(self.refuse(
                    ReasonCode::TOPIC_NAME_INVALID,
                    CloseReason::InvalidWillTopic,
                    out,
                ));
            }
            if will.qos > config.maximum_qos() {
                // [MQTT-3.2.2-12]
                return Err(self.refuse(
                    ReasonCode::QOS_NOT_SUPPORTED,
                    CloseReason::WillQosNotSupported,
                    out,
                ));
            }
            if will.retain && !config.retain_available {
                // [MQTT-3.2.2-13]
                return Err(self.refuse(
                    ReasonCode::RETAIN_NOT_SUPPORTED,
                    CloseReason::WillRetainNotSupported,
                    out,
                ));
            }
        }

        let mut client = ClientInfo::new(
            client_id,
            self.info
                .as_ref()
                .map_or_else(Default::default, |info| info.listener.clone()),
        );
        client.username = connect.username.as_ref().map(|u| Arc::from(u.as_str()));
        client.peer = self.peer();
        client.connected = self.arrival;
        client.set_transport_identity(
            self.info
                .as_ref()
                .and_then(|info| info.transport_identity.clone()),
        );
        let method = connect
            .properties
            .authentication_method
            .clone()
            .filter(|_| v5);
        if let Some(method) = method {
            // Enhanced authentication [MQTT-4.12.0-1]: the hook runs the exchange; the
            // password, if any, is not checked separately.
            let mut exchange = match self.broker.hooks.start_enhanced_auth(&client, &method) {
                Ok(exchange) => exchange,
                Err(reason) => {
                    return Err(self.auth_failed(reason, CloseReason::EnhancedAuthRefused, out))
                }
            };
            let data = connect.properties.authentication_data.clone();
            let step = exchange.step(data.as_deref().unwrap_or_default());
            self.rare_mut().auth = Some(AuthState::new(method));
            let pending = super::auth::PendingConnect {
                connect,
                client,
                assigned,
            };
            return self.connect_auth_step(step, exchange, Box::new(pending), now, out, wake);
        }
        if client.listener.is_cluster_internal() {
            return self.connect_node(connect, client, now, out, wake);
        }
        match self
            .broker
            .hooks
            .authenticate(&client, connect.password.as_deref())
        {
            Ok(authenticated) => {
                let client = admitted(client, authenticated);
                self.complete_connect(connect, client, assigned, None, now, out, wake)
            }
            Err(reason) => Err(self.auth_failed(reason, CloseReason::AuthenticationFailed, out)),
        }
    }

    /// CONNECT of another node on the cluster listener (or of this node's own ingress):
    /// admitted by the cluster secret, not by the client authentication hook.
    fn connect_node(
        &mut self,
        connect: Connect,
        client: ClientInfo,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        let admitted = match &client.listener.cluster_secret {
            None => true,
            Some(secret) => connect
                .password
                .as_deref()
                .is_some_and(|password| constant_time_eq(password, secret.as_bytes())),
        };
        if !admitted {
            tracing::warn!(client_id = %client.client_id, peer = ?client.peer, "cluster_node_refused");
            return Err(self.auth_failed(
                ReasonCode::NOT_AUTHORIZED,
                CloseReason::AuthenticationFailed,
                out,
            ));
        }
        self.complete_connect(connect, client, None, None, now, out, wake)
    }

    /// Refuses a CONNECT whose authentication failed, and counts it.
    pub(super) fn auth_failed(
        &mut self,
        reason: ReasonCode,
        close_reason: CloseReason,
        out: &mut OutBuf,
    ) -> Close {
        count_auth_failure(&self.broker.stats, reason);
        self.refuse(reason, close_reason, out)
    }

    /// The rest of CONNECT once the client is authenticated: keep alive, session open, resume
    /// or takeover, CONNACK (with the enhanced authentication's method and final data).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete_connect(
        &mut self,
        connect: Connect,
        client: ClientInfo,
        assigned: Option<Arc<str>>,
        auth_data: Option<Vec<u8>>,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        let version = connect.protocol;
        let config = self.broker.config();
        // What CONNACK announces holds for this connection until it ends, whatever a reload
        // changes meanwhile.
        self.max_qos = config.maximum_qos();
        let v5 = version.is_v5();
        let client_id = client.client_id.clone();
        let client = Arc::new(client);

        // Keep alive: v5 clients asking for more than the maximum (or for none while a
        // maximum is set) are told the Server Keep Alive [MQTT-3.2.2-21].
        let mut server_keep_alive = None;
        self.keep_alive = connect.keep_alive;
        if v5
            && config.max_keep_alive < u16::MAX
            && (connect.keep_alive == 0 || connect.keep_alive > config.max_keep_alive)
        {
            self.keep_alive = config.max_keep_alive;
            server_keep_alive = Some(config.max_keep_alive);
        }

        // Session expiry: v5 from the property (0 when absent, §3.1.2.11.2); v3 clean
        // sessions end with the connection, persistent ones use the broker's maximum.
        let requested_expiry = if v5 {
            connect.properties.session_expiry_interval.unwrap_or(0)
        } else if connect.clean_start {
            0
        } else {
            NEVER_EXPIRES
        };
        let expiry = requested_expiry.min(config.max_session_expiry_interval);
        self.connect_expiry_zero = requested_expiry == 0;

        let params = ConnectionParams {
            version,
            client_receive_maximum: if v5 {
                connect.properties.receive_maximum.unwrap_or(u16::MAX)
            } else {
                u16::MAX
            },
            client_maximum_packet_size: connect.properties.maximum_packet_size.unwrap_or(u32::MAX),
            client_topic_alias_maximum: connect.properties.topic_alias_maximum.unwrap_or(0),
            server_receive_maximum: config.receive_maximum,
            server_topic_alias_maximum: if v5 { config.topic_alias_maximum } else { 0 },
            assign_outbound_aliases: config.assign_outbound_topic_aliases,
        };

        let limits = self.broker.session_limits_for(&client_id);
        let opened = self
            .broker
            .registry
            .open(&client_id, connect.clean_start, || {
                Session::with_shared_limits(limits)
            });
        if let Some(replaced) = &opened.replaced {
            // Clean start over an existing session: that session ends now, and a connection
            // still attached to it is closed [MQTT-3.1.4-3].
            let old_doorbell = {
                let mut state = replaced.state.lock();
                state.owner = 0;
                state.doorbell.take()
            };
            if let Some(doorbell) = old_doorbell {
                doorbell.notify_one();
            }
            self.broker.end_session(replaced, now, wake);
            if replaced.state.lock().persisted {
                if let Some(attached) = self.broker.attached() {
                    attached.store.append(crate::store::StoreOp::DeleteSession {
                        client_id: replaced.client_id.to_string(),
                    });
                }
            }
        }

        // In a cluster, a client resuming its session waits for the other nodes to hand over
        // what they hold of it before CONNACK says whether a session is present.
        let await_handover = !connect.clean_start
            && self.listener().role == ListenerRole::Clients
            && self
                .broker
                .router
                .cluster()
                .is_some_and(|cluster| !cluster.peers().is_empty());
        let cell = opened.cell;
        let (old_will, old_doorbell, session_present) = {
            let mut state = cell.state.lock();
            // A session an earlier connection's wait made was never there for the client
            // (`SessionState::unconfirmed`).
            let session_present = opened.session_present && !state.unconfirmed;
            // Until a CONNACK goes out, no client knows of a session made for this one.
            state.unconfirmed = await_handover && (state.unconfirmed || !session_present);
            let taking_over = state.owner != 0;
            state.owner = self.conn_id;
            state.epoch += 1;
            state.expiry_interval = expiry;
            state.will_due = None;
            state.protocol = self.version.level();
            let old_doorbell = state.doorbell.replace(self.doorbell.clone());
            // A will still pending from the previous connection is not sent when the client
            // is back before its delay ran out [MQTT-3.1.3-9]; on takeover of a live
            // connection with no delay it is sent as that connection's end.
            let previous_will = state.will.take();
            let old_will = previous_will
                .filter(|w| taking_over && w.will.properties.will_delay_interval.unwrap_or(0) == 0);
            state.will = connect.will.clone().map(|will| {
                Box::new(PendingWill {
                    will,
                    publisher: cell.id,
                    client: client.clone(),
                })
            });
            state.client = Some(client.clone());
            if expiry != 0 {
                // With its will: a broker that stops with this connection open publishes it
                // after the restart, as a connection that failed.
                self.broker.persist_session(&cell, &mut state, None);
            }
            state.session.attach(params);
            (
                old_will,
                old_doorbell.filter(|_| taking_over),
                session_present,
            )
        };
        if let Some(doorbell) = old_doorbell {
            doorbell.notify_one();
        }
        if let Some(will) = old_will {
            self.broker.publish_will(&cell.client_id, will, now, wake);
        }

        if let Some(cluster) = self.broker.router.cluster() {
            match self.listener().role {
                ListenerRole::Cluster => cluster.peer_attached(&cell),
                ListenerRole::Clients => {
                    // Whatever kept other nodes' copies from an earlier session of this client
                    // here is over: this connection's session takes them.
                    cluster.clear_suppression(cell.id);
                    cluster.event(ClusterEvent::ClientConnected {
                        client_id: cell.client_id.clone(),
                        clean_start: connect.clean_start,
                        await_handover,
                        at: self.arrival,
                    });
                }
                ListenerRole::PeerIngress => {}
            }
        }
        self.cell = Some(cell);
        self.client = Some(client);
        // The client has what the transport told from here on (`Channel::info`).
        self.info = None;
        self.phase = Phase::Connected;
        // The keep-alive clock starts at CONNECT, not when the connection opened.
        self.last_input = now;
        self.broker.stats.client_connected();

        let mut properties = Properties::default();
        if v5 {
            if expiry != requested_expiry {
                properties.session_expiry_interval = Some(expiry);
            }
            if config.receive_maximum != u16::MAX {
                properties.receive_maximum = Some(config.receive_maximum);
            }
            if config.maximum_qos() < QoS::ExactlyOnce {
                properties.maximum_qos = Some(config.max_qos);
            }
            if !config.retain_available {
                properties.retain_available = Some(0);
            }
            properties.maximum_packet_size = Some(self.max_packet_size);
            properties.assigned_client_identifier = assigned.map(|id| id.as_ref().into());
            if config.topic_alias_maximum > 0 {
                properties.topic_alias_maximum = Some(config.topic_alias_maximum);
            }
            properties.server_keep_alive = server_keep_alive;
            if connect.properties.request_response_information == Some(1)
                && !config.response_information.is_empty()
            {
                properties.response_information = Some(config.response_information.as_str().into());
            }
            // [MQTT-4.12.0-5] a successful CONNACK after enhanced authentication carries the
            // method; [MQTT-4.12.0-6] never without one in CONNECT.
            if let Some(auth) = self.auth() {
                properties.authentication_method = Some(auth.method.clone());
                properties.authentication_data = auth_data.map(Bytes::from);
            }
        }
        let connack = ConnAck {
            session_present,
            reason_code: ReasonCode::SUCCESS,
            properties,
        };
        if await_handover {
            // Written by `poll_handover` once the other nodes answered (or gave up).
            if let Some(cell) = &self.cell {
                let mut state = cell.state.lock();
                // Claims held for an earlier connection's wait now wait for this one's.
                let claims = match &mut state.handover {
                    Handover::Awaited(earlier) => std::mem::take(&mut earlier.claims),
                    _ => Default::default(),
                };
                state.handover = Handover::Awaited(Box::new(AwaitedHandover {
                    connack,
                    deadline: now
                        + self
                            .broker
                            .router
                            .cluster()
                            .map_or(HANDOVER_TIMEOUT, |cluster| cluster.handover_timeout()),
                    received: false,
                    answered: false,
                    claims,
                }));
            }
            self.awaiting_handover = true;
            return Ok(());
        }
        self.write(&Packet::ConnAck(connack), out);
        tracing::debug!(
            client_id = %client_id,
            version = ?version,
            clean_start = connect.clean_start,
            session_present,
            "client_connected"
        );
        // Resend what was in flight and send what was queued while offline.
        self.poll_transmit(now, out)
    }

    /// Refuses a CONNECT with CONNACK (v5 reason, or the matching v3 return code)
    /// [MQTT-3.2.2-6] [MQTT-3.2.2-7] and closes.
    pub(super) fn refuse(
        &mut self,
        reason: ReasonCode,
        close_reason: CloseReason,
        out: &mut OutBuf,
    ) -> Close {
        let code = if self.version.is_v5() {
            reason
        } else {
            v3_return_code(reason)
        };
        let connack = ConnAck {
            session_present: false,
            reason_code: code,
            properties: Properties::default(),
        };
        self.write(&Packet::ConnAck(connack), out);
        self.phase = Phase::Closed;
        tracing::info!(peer = ?self.peer(), code = %reason, reason = %close_reason, "connect_refused");
        Close::new(reason, close_reason)
    }
}

/// Maps a v5 CONNACK reason to the nearest v3.1.1 return code (3.1.1 §3.2.2.3, Table 3.1).
fn v3_return_code(reason: ReasonCode) -> ReasonCode {
    match reason {
        ReasonCode::UNSUPPORTED_PROTOCOL_VERSION => ReasonCode::V3_UNACCEPTABLE_PROTOCOL_VERSION,
        ReasonCode::CLIENT_IDENTIFIER_NOT_VALID => ReasonCode::V3_IDENTIFIER_REJECTED,
        // A wrong password is "not authorised" (0x05), as Mosquitto answers; 3.1.1's 0x04 is
        // for a user name or password that is malformed.
        ReasonCode::BAD_USER_NAME_OR_PASSWORD
        | ReasonCode::NOT_AUTHORIZED
        | ReasonCode::BANNED
        | ReasonCode::BAD_AUTHENTICATION_METHOD => ReasonCode::V3_NOT_AUTHORIZED,
        _ => ReasonCode::V3_SERVER_UNAVAILABLE,
    }
}

/// The client as admitted: the user name and grant that authentication established.
pub(super) fn admitted(mut client: ClientInfo, authenticated: Authenticated) -> ClientInfo {
    if let Some(username) = authenticated.username {
        client.username = Some(username);
    }
    client.set_grant(authenticated.grant);
    client
}

/// Counts a refused authentication (and whether it was refused for throttling).
pub(super) fn count_auth_failure(stats: &crate::stats::Stats, reason: ReasonCode) {
    crate::stats::Stats::add(&stats.auth_failed, 1);
    if reason == ReasonCode::CONNECTION_RATE_EXCEEDED {
        crate::stats::Stats::add(&stats.auth_throttled, 1);
    }
}

/// Compares two byte strings in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
