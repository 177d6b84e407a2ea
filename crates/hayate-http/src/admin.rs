//! The admin JSON API (`/api/v1/...`; `docs/ADMIN.md`, `docs/admin-openapi.yaml`): clients
//! listed in pages, looked up and kicked; retained messages listed and deleted; publishing;
//! the subscriptions matching a topic; bridges.

use crate::AppState;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use hayate_codec::{Properties, QoS};
use hayate_core::admin::ClientSnapshot;
use hayate_core::{Message, WakeList};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Page size when none is asked for, and the largest allowed.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// A filtered listing looks at no more than this many pages' worth of sessions per request;
/// it answers with what it found and a cursor to continue.
const SCAN_PAGES: usize = 10;

/// A 4xx answer with a JSON body `{"error": "..."}`.
pub(crate) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

/// `Query` whose rejection is an [`ApiError`] (JSON, with axum's message).
pub(crate) struct ApiQuery<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError(rejection.status(), rejection.body_text()))
    }
}

/// `Json` whose rejection is an [`ApiError`] (400 malformed, 415 not JSON, 422 wrong shape).
pub(crate) struct ApiJson<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Json::<T>::from_request(request, state)
            .await
            .map(|Json(value)| ApiJson(value))
            .map_err(|rejection| ApiError(rejection.status(), rejection.body_text()))
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

fn not_found_error(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, message.into())
}

pub(crate) async fn not_found() -> ApiError {
    not_found_error("no such endpoint (see docs/ADMIN.md)")
}

fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(bad_request("limit must be at least 1")),
        n if n > MAX_LIMIT => Err(bad_request(format!("limit must be at most {MAX_LIMIT}"))),
        n => Ok(n),
    }
}

/// `GET /api/v1/clients` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientQuery {
    prefix: Option<String>,
    username: Option<String>,
    listener: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

fn summary(c: &ClientSnapshot) -> Value {
    json!({
        "client_id": &*c.client_id,
        "online": c.online,
        "username": c.username.as_deref(),
        "listener": c.listener.as_deref(),
        "peer": c.peer.map(|p| p.to_string()),
        "protocol": c.protocol,
        "expiry_interval": c.expiry_interval,
        "subscriptions": c.subscriptions.len(),
        "queued": c.queued,
        "inflight": c.inflight,
        "congested": c.congested,
    })
}

fn matches_filters(query: &ClientQuery, snapshot: &ClientSnapshot) -> bool {
    let username = query
        .username
        .as_deref()
        .is_none_or(|u| snapshot.username.as_deref() == Some(u));
    let listener = query
        .listener
        .as_deref()
        .is_none_or(|l| snapshot.listener.as_deref() == Some(l));
    username && listener
}

/// Clients in client id order, a page at a time (`next_cursor` continues; absent at the end).
pub(crate) async fn list_clients(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<ClientQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let registry = &state.sources.broker.registry;
    let mut clients = Vec::new();
    let mut after = query.cursor.clone();
    let mut next_cursor = None;
    for _ in 0..SCAN_PAGES {
        let page = registry.page(after.as_deref(), query.prefix.as_deref(), limit);
        let exhausted = page.len() < limit;
        let mut unexamined = false;
        for (index, cell) in page.iter().enumerate() {
            let snapshot = cell.snapshot();
            after = Some(snapshot.client_id.to_string());
            if matches_filters(&query, &snapshot) {
                clients.push(summary(&snapshot));
                if clients.len() == limit {
                    unexamined = index + 1 < page.len();
                    break;
                }
            }
        }
        // More may follow the last session examined unless the registry ran out.
        next_cursor = (unexamined || !exhausted).then(|| after.clone()).flatten();
        if clients.len() == limit || exhausted {
            break;
        }
    }
    Ok(Json(
        json!({ "clients": clients, "next_cursor": next_cursor }),
    ))
}

/// One client with its subscriptions and queue depth.
pub(crate) async fn get_client(
    State(state): State<Arc<AppState>>,
    Path(client_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let cell = state
        .sources
        .broker
        .registry
        .get(&client_id)
        .ok_or_else(|| not_found_error(format!("no session for client id {client_id:?}")))?;
    let snapshot = cell.snapshot();
    let mut body = summary(&snapshot);
    body["subscriptions"] = snapshot
        .subscriptions
        .iter()
        .map(|(filter, qos)| json!({ "filter": &**filter, "qos": *qos as u8 }))
        .collect();
    Ok(Json(body))
}

/// Closes the client's connection (v5: DISCONNECT 0x98).
pub(crate) async fn kick_client(
    State(state): State<Arc<AppState>>,
    Path(client_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if state.sources.broker.kick(&client_id) {
        tracing::info!(client_id, "admin_kick");
        Ok(Json(json!({ "kicked": client_id })))
    } else {
        Err(not_found_error(format!(
            "no connected client with id {client_id:?}"
        )))
    }
}

/// `GET /api/v1/retained` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetainedQuery {
    filter: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

fn payload_json(payload: &[u8]) -> (&'static str, Value) {
    match std::str::from_utf8(payload) {
        Ok(text) => ("payload", json!(text)),
        Err(_) => (
            "payload_base64",
            json!(base64::engine::general_purpose::STANDARD.encode(payload)),
        ),
    }
}

/// Retained messages matching a filter (default `#`), in topic order, a page at a time.
pub(crate) async fn list_retained(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<RetainedQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let filter = query.filter.as_deref().unwrap_or("#");
    hayate_topic::validate_topic_filter(filter)
        .map_err(|e| bad_request(format!("filter {filter:?}: {e}")))?;
    let page = state.sources.broker.router.retained_page(
        filter,
        query.cursor.as_deref(),
        limit,
        tokio::time::Instant::now().into_std(),
    );
    let next_cursor = (page.len() == limit).then(|| page.last().map(|m| m.topic.to_string()));
    let messages: Vec<Value> = page
        .iter()
        .map(|m| {
            let (key, payload) = payload_json(&m.payload);
            let mut entry =
                json!({ "topic": &*m.topic, "qos": m.qos as u8, "bytes": m.payload.len() });
            entry[key] = payload;
            entry
        })
        .collect();
    Ok(Json(
        json!({ "messages": messages, "next_cursor": next_cursor.flatten() }),
    ))
}

/// `DELETE /api/v1/retained` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicQuery {
    topic: String,
}

/// Deletes one topic's retained message.
pub(crate) async fn delete_retained(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<TopicQuery>,
) -> Result<Json<Value>, ApiError> {
    hayate_topic::validate_topic_name(&query.topic)
        .map_err(|e| bad_request(format!("topic {:?}: {e}", query.topic)))?;
    if state.sources.broker.delete_retained(&query.topic) {
        tracing::info!(topic = %query.topic, "admin_retained_deleted");
        Ok(Json(json!({ "deleted": query.topic })))
    } else {
        Err(not_found_error(format!(
            "no retained message on {:?}",
            query.topic
        )))
    }
}

/// `POST /api/v1/publish` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishRequest {
    topic: String,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    #[serde(default)]
    qos: u8,
    #[serde(default)]
    retain: bool,
}

/// Publishes a message as the broker (no ACL applies), to subscribers and, if `retain`, as
/// the topic's retained message.
pub(crate) async fn publish(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<PublishRequest>,
) -> Result<Json<Value>, ApiError> {
    hayate_topic::validate_topic_name(&request.topic)
        .map_err(|e| bad_request(format!("topic {:?}: {e}", request.topic)))?;
    let qos = QoS::from_u8(request.qos).ok_or_else(|| bad_request("qos must be 0, 1 or 2"))?;
    let payload = match (request.payload, request.payload_base64) {
        (Some(_), Some(_)) => return Err(bad_request("give payload or payload_base64, not both")),
        (Some(text), None) => bytes::Bytes::from(text),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| bad_request(format!("payload_base64: {e}")))?
            .into(),
        (None, None) => bytes::Bytes::new(),
    };
    let broker = &state.sources.broker;
    if payload.len() > broker.config().max_packet_size as usize {
        return Err(bad_request(
            "payload larger than the broker's max_packet_size",
        ));
    }
    let message = Message::new(
        request.topic.as_str().into(),
        payload,
        qos,
        request.retain,
        Properties::default(),
        None,
        // Not broker-made: kept in the store like a client's message (No Local never matches).
        Some(0),
    );
    let mut wake = WakeList::new();
    let outcome = broker.publish(
        Arc::new(message),
        tokio::time::Instant::now().into_std(),
        &mut wake,
    );
    wake.iter().for_each(|doorbell| doorbell.notify_one());
    tracing::info!(topic = %request.topic, delivered = outcome.delivered, "admin_publish");
    Ok(Json(json!({
        "delivered": outcome.delivered,
        "dropped": outcome.dropped,
        "denied": outcome.denied,
    })))
}

/// `GET /api/v1/subscriptions` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubscriptionQuery {
    topic: String,
    limit: Option<usize>,
}

/// The subscriptions a message on `topic` would reach.
pub(crate) async fn subscriptions(
    State(state): State<Arc<AppState>>,
    ApiQuery(query): ApiQuery<SubscriptionQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    hayate_topic::validate_topic_name(&query.topic)
        .map_err(|e| bad_request(format!("topic {:?}: {e}", query.topic)))?;
    let mut found = state.sources.broker.router.subscribers(&query.topic);
    found.sort_unstable_by(|a, b| (&a.1.client_id, &a.0).cmp(&(&b.1.client_id, &b.0)));
    let truncated = found.len() > limit;
    let subscriptions: Vec<Value> = found
        .iter()
        .take(limit)
        .map(|(filter, cell, qos)| {
            json!({ "client_id": &*cell.client_id, "filter": &**filter, "qos": *qos as u8 })
        })
        .collect();
    Ok(Json(json!({
        "topic": query.topic,
        "subscriptions": subscriptions,
        "truncated": truncated,
    })))
}

/// Each bridge's state and counters.
pub(crate) async fn bridges(State(state): State<Arc<AppState>>) -> Json<Value> {
    let bridges: Vec<Value> = (state.sources.bridges)()
        .into_iter()
        .map(|(name, f)| {
            json!({
                "name": name,
                "connected": f.connected,
                "connects": f.connects,
                "messages_out": f.messages_out,
                "messages_in": f.messages_in,
                "dropped": f.dropped,
                "queue_dropped": f.queue_dropped,
                "queued_messages": f.queued_messages,
                "queued_bytes": f.queued_bytes,
            })
        })
        .collect();
    Json(json!({ "bridges": bridges }))
}

/// Where a node of a cluster publishes its view (`hayate-cluster`, retained).
const CLUSTER_STATUS_TOPIC: &str = "$SYS/broker/cluster/nodes";

/// This node's view of its cluster: the members, their state and links (`docs/CLUSTER.md`,
/// "Status"), as the node publishes it; 404 on a node that is not in a cluster.
pub(crate) async fn cluster(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let broker = &state.sources.broker;
    let retained = broker
        .router
        .retained_matching(CLUSTER_STATUS_TOPIC, std::time::Instant::now());
    let Some(message) = retained.first() else {
        return Err(not_found_error("this node is not in a cluster"));
    };
    serde_json::from_slice(&message.payload)
        .map(Json)
        .map_err(|error| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cluster status: {error}"),
            )
        })
}

/// Makes this node leave its cluster for good and shut down (`hayate cluster leave`): the
/// other nodes forget it at once (`docs/CLUSTER.md`, "Status"); 202, as the shutdown goes on
/// after the answer. 404 on a node that is not in a cluster.
pub(crate) async fn leave_cluster(
    State(state): State<Arc<AppState>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Some(leave) = &state.sources.leave_cluster else {
        return Err(not_found_error("this node is not in a cluster"));
    };
    tracing::warn!("admin_cluster_leave");
    leave();
    Ok((StatusCode::ACCEPTED, Json(json!({ "leaving": true }))))
}
