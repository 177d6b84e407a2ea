//! The listeners of a running server as a set a reload changes: listeners added start
//! accepting, listeners removed stop (their connections are closed, v5 clients with
//! DISCONNECT 0x8B), a listener whose address, transport or transport files changed is
//! removed and added again, and one whose limits or authentication settings changed keeps
//! running with the new settings for its new connections. The others, and their
//! connections, are left alone.

use super::{accept_loop, bind, Acceptor, ListenerRuntime, LiveConnections};
use crate::config::{Config, ListenerConfig};
use crate::connection::ConnectionSettings;
use hayate_core::Broker;
use parking_lot::{Mutex, RwLock};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How long a reload waits for a removed listener's socket to close before binding a
/// listener that replaces it.
const UNBIND_WAIT: Duration = Duration::from_secs(5);

/// What every accept loop shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) broker: Arc<Broker>,
    /// The settings new connections get (replaced by a reload; a connection keeps the ones
    /// it was accepted with).
    pub(crate) settings: RwLock<Arc<ConnectionSettings>>,
    /// Live connections of every listener (for `server.max_connections` and shutdown).
    pub(crate) active: Arc<LiveConnections>,
}

/// What stops an accept loop: it is sent the sender of its answer, which it sends once its
/// socket is closed.
type Stop = oneshot::Sender<oneshot::Sender<()>>;

/// One running listener.
struct Running {
    config: ListenerConfig,
    runtime: Arc<ListenerRuntime>,
    local: SocketAddr,
    /// Stops its accept loop; the loop answers once its socket is closed.
    stop: Stop,
}

/// The running listeners.
pub(crate) struct ListenerSet {
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    running: Mutex<Vec<Running>>,
    /// Accept loops, running or draining a removed listener's connections (awaited when the
    /// server stops).
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// `[cluster]` as started: a reload changes neither it nor the cluster listener.
    pub(crate) cluster: Option<hayate_cluster::ClusterConfig>,
}

impl std::fmt::Debug for ListenerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerSet")
            .field("listeners", &self.addrs())
            .finish_non_exhaustive()
    }
}

/// What a reload changed (listeners by name) and what it could not apply.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServerReload {
    /// Listeners started.
    pub added: Vec<String>,
    /// Listeners stopped (their connections closed).
    pub removed: Vec<String>,
    /// Listeners whose limits or authentication settings changed (new connections get them).
    pub updated: Vec<String>,
    /// `[broker]` keys whose new values need a restart (their running values were kept).
    pub kept_broker_keys: Vec<&'static str>,
    /// What failed (a listener that could not be bound, or invalid limits).
    pub errors: Vec<String>,
}

/// The listeners a configuration asks for: `server.listen`, `[[listener]]`, and the
/// cluster listener.
pub(crate) fn wanted_listeners(config: &Config) -> Vec<ListenerConfig> {
    config
        .server
        .listen
        .iter()
        .map(|addr| ListenerConfig::tcp(*addr))
        .chain(config.listeners.iter().cloned())
        .chain(config.cluster.iter().map(ListenerConfig::cluster_for))
        .collect()
}

impl ListenerSet {
    pub(crate) fn new(
        broker: Arc<Broker>,
        config: &Config,
        shutdown: watch::Receiver<bool>,
    ) -> ListenerSet {
        ListenerSet {
            shared: Arc::new(Shared {
                broker,
                settings: RwLock::new(Arc::new(ConnectionSettings::from_config(config))),
                active: Arc::new(LiveConnections::default()),
            }),
            shutdown,
            running: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            cluster: config.cluster.clone(),
        }
    }

    /// Binds `listener` and starts accepting on it; returns the bound address.
    pub(crate) fn add(&self, listener: ListenerConfig, config: &Config) -> io::Result<SocketAddr> {
        let runtime = Arc::new(ListenerRuntime::new(&listener, config)?);
        let socket = bind(listener.bind)?;
        let local = socket.local_addr()?;
        tracing::info!(address = %local, listener = %runtime.name(), "listening");
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            socket,
            runtime.clone(),
            self.shared.clone(),
            self.shutdown.clone(),
            stop_rx,
        ));
        self.tasks.lock().push(task);
        self.running.lock().push(Running {
            config: listener,
            runtime,
            local,
            stop,
        });
        Ok(local)
    }

    /// Applies a reloaded configuration's connection settings and listeners.
    pub(crate) async fn reload(
        &self,
        wanted: Vec<ListenerConfig>,
        config: &Config,
    ) -> ServerReload {
        *self.shared.settings.write() = Arc::new(ConnectionSettings::from_config(config));
        let mut report = ServerReload::default();
        let (stopping, to_add) = self.sort(wanted, config, &mut report);
        // Removed and changed listeners close their sockets before any listener is bound, so
        // a changed listener can take its own address again.
        for (name, stop) in stopping {
            let (ack, closed) = oneshot::channel();
            if stop.send(ack).is_ok() {
                let _ = tokio::time::timeout(UNBIND_WAIT, closed).await;
            }
            report.removed.push(name);
        }
        for listener in to_add {
            let name = listener.display_name();
            match self.add(listener, config) {
                Ok(_) => report.added.push(name),
                Err(error) => {
                    tracing::error!(listener = %name, %error, "listener_start_failed");
                    report.errors.push(format!("listener {name}: {error}"));
                }
            }
        }
        report
    }

    /// Splits the running listeners into kept (updated in place when their limits changed)
    /// and stopping, and returns those to stop and the listeners to add. A listener is the
    /// same one when its address, transport and transport settings are
    /// ([`ListenerConfig::same_endpoint`]).
    fn sort(
        &self,
        mut wanted: Vec<ListenerConfig>,
        config: &Config,
        report: &mut ServerReload,
    ) -> (Vec<(String, Stop)>, Vec<ListenerConfig>) {
        let mut running = self.running.lock();
        let mut stopping = Vec::new();
        let mut kept = Vec::new();
        for mut listener in running.drain(..) {
            match wanted
                .iter()
                .position(|w| w.same_endpoint(&listener.config))
            {
                Some(index) => {
                    let new = wanted.remove(index);
                    if new != listener.config {
                        listener.runtime.update(&new, config);
                        report.updated.push(new.display_name());
                        listener.config = new;
                    } else {
                        // Server-wide settings (connect timeout, inbound rates) may have
                        // changed.
                        listener.runtime.update(&listener.config, config);
                    }
                    kept.push(listener);
                }
                None => stopping.push((listener.runtime.name().to_string(), listener.stop)),
            }
        }
        *running = kept;
        (stopping, wanted)
    }

    /// Waits for every accept loop to end (after shutdown was sent).
    pub(crate) async fn wait(&self) {
        loop {
            let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                let _ = task.await;
            }
        }
    }

    /// The bound addresses of the running listeners.
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        self.running.lock().iter().map(|r| r.local).collect()
    }

    /// Open connections per running listener (for `/metrics`).
    pub(crate) fn connections(&self) -> Vec<hayate_http::ListenerConnections> {
        self.running
            .lock()
            .iter()
            .map(|r| hayate_http::ListenerConnections {
                listener: r.runtime.name().to_string(),
                transport: r.runtime.transport,
                open: r.runtime.live.count() as u64,
            })
            .collect()
    }

    /// Re-reads the certificates, keys and PSK files of every listener that has them. A
    /// file that fails to load keeps the previous settings of its listener; the errors are
    /// returned (and logged). New connections use the new settings.
    pub(crate) fn reload_transports(&self) -> Vec<String> {
        let runtimes: Vec<Arc<ListenerRuntime>> = self
            .running
            .lock()
            .iter()
            .map(|r| r.runtime.clone())
            .collect();
        let mut errors = Vec::new();
        for runtime in runtimes {
            let result = match &runtime.acceptor {
                Acceptor::Tls(handle) | Acceptor::Wss(handle) => {
                    handle.reload().map_err(|e| e.to_string())
                }
                Acceptor::Psk(handle) => handle.reload().map_err(|e| e.to_string()),
                Acceptor::Tcp | Acceptor::Ws => continue,
            };
            let name = runtime.name();
            match result {
                Ok(()) => tracing::info!(listener = %name, "listener_reloaded"),
                Err(error) => {
                    tracing::error!(listener = %name, %error, "listener_reload_failed");
                    errors.push(format!("{name}: {error}"));
                }
            }
        }
        errors
    }
}
