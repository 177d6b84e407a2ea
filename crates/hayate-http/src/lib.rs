//! Hayate's HTTP edge (`[http]`, `hayate serve --http ADDR`): `GET /metrics` in the Prometheus
//! text format, `GET /health` and `GET /ready`, the admin JSON API under `/api/v1`
//! (`docs/ADMIN.md`, `docs/admin-openapi.yaml`) and the dashboard at `/`.
//!
//! It reads the broker through `hayate_core` (the counters in `Stats`, read at scrape time;
//! the registry a page at a time) and acts through the few operations `hayate_core::admin`
//! offers. The broker core does not know this crate exists.

mod admin;
mod auth;
pub mod config;
mod dashboard;
mod metrics;
pub mod passwords;
pub mod process;

pub use config::{Access, HttpConfig, HttpConfigError};
pub use hayate_prometheus::HistogramFigures;
pub use metrics::{seconds, BridgeFigures, ListenerConnections, StoreFigures};

use axum::routing::{get, post};
use axum::Router;
use hayate_core::Broker;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A figure the server reads on demand (a closure over something this crate does not know).
pub type Probe<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// What the HTTP edge reads: the broker, and what the server adds around it.
#[derive(Clone)]
pub struct Sources {
    /// The broker.
    pub broker: Arc<Broker>,
    /// Network connections open now on each listener, before and after CONNECT.
    pub connections: Option<Probe<Vec<ListenerConnections>>>,
    /// The embedded store's figures, with a data directory.
    pub store: Option<Probe<StoreFigures>>,
    /// Each running bridge's name and figures, read at every request (bridges come and go
    /// on reload).
    pub bridges: Probe<Vec<(String, BridgeFigures)>>,
    /// In a cluster: makes this node leave the cluster for good and shut down.
    pub leave_cluster: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("store", &self.store.is_some())
            .field("leave_cluster", &self.leave_cluster.is_some())
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// Just the broker.
    pub fn new(broker: Arc<Broker>) -> Sources {
        Sources {
            broker,
            connections: None,
            store: None,
            bridges: Arc::new(Vec::new),
            leave_cluster: None,
        }
    }
}

/// Shared by every request.
pub(crate) struct AppState {
    pub(crate) sources: Sources,
    pub(crate) access: Access,
    pub(crate) registry: prometheus_client::registry::Registry,
    pub(crate) history: dashboard::History,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// A bound HTTP edge, serving until shutdown.
#[derive(Debug)]
pub struct HttpServer {
    /// The address it listens on.
    pub local_addr: SocketAddr,
    /// The serving task (ends after shutdown).
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds `addr` and serves on the current runtime until `shutdown` turns true. The dashboard's
/// history is sampled every few seconds from then on.
pub async fn serve(
    addr: SocketAddr,
    access: Access,
    sources: Sources,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<HttpServer> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let state = Arc::new(AppState {
        registry: metrics::registry(&sources),
        history: dashboard::History::default(),
        sources,
        access,
        shutdown: shutdown.clone(),
    });
    tokio::spawn(dashboard::sample_loop(state.clone(), shutdown.clone()));
    let app = router(state);
    let mut stop = shutdown;
    let task = tokio::spawn(async move {
        let signal = async move {
            let _ = stop.wait_for(|stopping| *stopping).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::error!(%error, "http_server_failed");
        }
    });
    tracing::info!(address = %local_addr, "http_listening");
    Ok(HttpServer { local_addr, task })
}

fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics::handler))
        .route("/api/v1/overview", get(dashboard::overview))
        .route("/api/v1/clients", get(admin::list_clients))
        .route("/api/v1/clients/{client_id}", get(admin::get_client))
        .route("/api/v1/clients/{client_id}/kick", post(admin::kick_client))
        .route(
            "/api/v1/retained",
            get(admin::list_retained).delete(admin::delete_retained),
        )
        .route("/api/v1/publish", post(admin::publish))
        .route("/api/v1/subscriptions", get(admin::subscriptions))
        .route("/api/v1/bridges", get(admin::bridges))
        .route("/api/v1/cluster", get(admin::cluster))
        .route("/api/v1/cluster/leave", post(admin::leave_cluster))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_credentials,
        ));
    Router::new()
        .route("/", get(dashboard::page))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(protected)
        .fallback(admin::not_found)
        .with_state(state)
}

/// Liveness: the process answers.
async fn health() -> &'static str {
    "ok\n"
}

/// Readiness: listeners bound and the store restored (the HTTP edge starts after both), and
/// not shutting down.
async fn ready(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> (axum::http::StatusCode, &'static str) {
    if *state.shutdown.borrow() {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n",
        )
    } else {
        (axum::http::StatusCode::OK, "ready\n")
    }
}

#[cfg(test)]
mod tests {
    /// Every route the router serves is in the OpenAPI file, and every path there is served.
    #[test]
    fn openapi_file_lists_every_route() {
        // The router's code, not this test's.
        let source = include_str!("lib.rs").split("#[cfg(test)]").next().unwrap();
        let served: std::collections::BTreeSet<&str> = source
            .split(".route(")
            .skip(1)
            .filter_map(|rest| rest.trim_start().strip_prefix('"')?.split('"').next())
            .collect();
        let openapi = include_str!("../../../docs/admin-openapi.yaml");
        let documented: std::collections::BTreeSet<&str> = openapi
            .lines()
            .filter_map(|line| line.strip_prefix("  /")?.strip_suffix(':'))
            .collect();
        let served: std::collections::BTreeSet<String> = served
            .iter()
            .map(|p| p.trim_start_matches('/').to_string())
            .collect();
        let documented: std::collections::BTreeSet<String> =
            documented.iter().map(|p| p.to_string()).collect();
        assert_eq!(served, documented);
    }
}
