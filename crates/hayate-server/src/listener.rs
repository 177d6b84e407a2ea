//! Listeners and the server's lifetime: bind, accept, spawn connection tasks, run the timer
//! and `$SYS` tasks, shut down.

mod set;

pub use set::ServerReload;

use crate::config::{Config, ListenerConfig, TransportKind};
use crate::connection::{spawn_connection, Connection, ConnectionSettings, ListenerConnections};
use crate::transport::psk::{PskAcceptorHandle, PskSettings};
use crate::transport::tls::{self, TlsAcceptorHandle, TlsFiles};
use crate::transport::tls_tcp::{self, TlsTcp};
use crate::transport::{ws, BoxedStream, Polled};
use hayate_core::{Broker, ConnectionInfo, ConnectionLimits, ListenerInfo, ListenerRole, WakeList};
use parking_lot::RwLock;
use set::{wanted_listeners, ListenerSet, Shared};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio::task::JoinSet;

/// How often delayed wills, session expiry and retained-message expiry are checked.
const TIMER_TICK: Duration = Duration::from_millis(250);
/// How long a cluster node waits at most at start to know and link with the other nodes
/// before it lets clients in.
const CLUSTER_SETTLE: Duration = Duration::from_secs(5);
/// After an accept error (e.g. out of file descriptors), wait this long before accepting again
/// instead of spinning; log at most once per this interval.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// A server ready to start.
#[derive(Debug)]
pub struct Server;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The broker state (for tests and embedding).
    pub broker: Arc<Broker>,
    /// The running bridges (replaced one by one by [`ServerHandle::reload_bridges`]).
    pub bridges: Arc<hayate_bridge::BridgeSet>,
    /// The embedded store, with a data directory (closed by `shutdown`).
    store: Option<Arc<hayate_storage::FjallStore>>,
    local_addrs: Vec<SocketAddr>,
    /// The HTTP edge's address, when `[http] listen` is set.
    http_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    /// The listeners running now (SIGHUP adds, changes and removes them) and the settings
    /// new connections get.
    listeners: Arc<ListenerSet>,
    /// Reads the node links' TLS files again (in a cluster with `[cluster] tls_*`).
    cluster_tls: Option<hayate_cluster::LinkTlsReload>,
}

impl Server {
    /// Binds every listener and starts serving on the current tokio runtime.
    pub async fn start(config: Config) -> io::Result<ServerHandle> {
        // Reads the password, ACL, SCRAM and JWT files now: a server with unusable security
        // settings does not start.
        let hooks = config.auth.prepare().map_err(io::Error::other)?;
        let broker = Broker::new(
            config.broker.clone(),
            hooks,
            tokio::time::Instant::now().into_std(),
        );
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        // In a cluster: attached before stored sessions come back (their subscriptions count
        // in the node's route set), joined once they are back (a resumed link delivers what
        // the other nodes queued for this one's sessions at once).
        let cluster_routes = match &config.cluster {
            Some(cluster) => {
                Some(hayate_cluster::attach(&broker, cluster).map_err(io::Error::other)?)
            }
            None => None,
        };
        let store = match config.storage.enabled_dir() {
            Some(dir) => Some(crate::storage::open(dir, &config.storage, &broker)?),
            None => None,
        };
        let mut leave_cluster: Option<Arc<dyn Fn() + Send + Sync>> = None;
        let mut cluster_settled = None;
        let mut cluster_tls = None;
        if let (Some(cluster), Some(routes)) = (&config.cluster, cluster_routes) {
            let handle = hayate_cluster::start(
                broker.clone(),
                routes,
                cluster.clone(),
                store.is_some(),
                shutdown_rx.clone(),
            )
            .await
            .map_err(io::Error::other)?;
            cluster_settled = Some(handle.settled_signal());
            cluster_tls = handle.tls_reload();
            // `hayate cluster leave` (the admin API): leave for good, then shut down.
            let switch = handle.leave_switch();
            let trigger = shutdown.clone();
            leave_cluster = Some(Arc::new(move || {
                switch.set();
                let _ = trigger.send(true);
            }));
            tasks.spawn(handle.wait());
        }
        let listeners = Arc::new(ListenerSet::new(
            broker.clone(),
            &config,
            shutdown_rx.clone(),
        ));
        let mut local_addrs = Vec::new();
        let (cluster_listeners, client_listeners): (Vec<_>, Vec<_>) = wanted_listeners(&config)
            .into_iter()
            .partition(|l| l.role == hayate_core::ListenerRole::Cluster);
        for listener_config in cluster_listeners {
            local_addrs.push(listeners.add(listener_config, &config)?);
        }
        // Clients are let in once this node knows the other nodes and is linked with them
        // both ways, so that a resumed session's claim reaches every node that may hold it (at
        // most `CLUSTER_SETTLE`; a node whose peers are away starts listening then anyway).
        if let Some(settled) = cluster_settled {
            if !hayate_cluster::wait_settled(settled, CLUSTER_SETTLE).await {
                tracing::warn!(
                    waited_secs = CLUSTER_SETTLE.as_secs(),
                    "cluster_not_settled_listening_anyway"
                );
            }
        }
        for listener_config in client_listeners {
            local_addrs.push(listeners.add(listener_config, &config)?);
        }
        warn_if_fd_limit_low(config.server.max_connections);
        tasks.spawn(timer_loop(broker.clone(), shutdown_rx.clone()));
        // Bridges stop with the server; SIGHUP may add, remove or change them meanwhile.
        let bridges = hayate_bridge::BridgeSet::start(broker.clone(), config.bridges.clone());
        {
            let bridges = bridges.clone();
            let mut shutdown = shutdown_rx.clone();
            tasks.spawn(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
                bridges.stop().await;
            });
        }
        let connections = {
            let listeners = listeners.clone();
            move || listeners.connections()
        };
        let http_addr = crate::http::start(
            &config.http,
            &broker,
            store.as_ref(),
            &bridges,
            Arc::new(connections),
            leave_cluster,
            shutdown_rx.clone(),
        )
        .await?;
        if config.server.sys_interval_secs > 0 {
            let interval = Duration::from_secs(config.server.sys_interval_secs);
            tasks.spawn(crate::sys::sys_loop(
                broker.clone(),
                store.clone(),
                bridges.clone(),
                interval,
                shutdown_rx.clone(),
            ));
        }
        Ok(ServerHandle {
            broker,
            bridges,
            store,
            local_addrs,
            http_addr,
            shutdown,
            tasks,
            listeners,
            cluster_tls,
        })
    }
}

impl ServerHandle {
    /// The bound addresses, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The HTTP edge's bound address (metrics, admin API, dashboard), when it is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// Stops accepting, tells every connection to close (v5 clients get DISCONNECT 0x8B), and
    /// waits for the listeners and background tasks to stop.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        self.wait().await;
        if let Some(store) = self.store.take() {
            self.broker.persist_totals();
            // Writes what is queued and fsyncs; blocking, so off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || store.close()).await;
        }
    }

    /// Waits until the server stops (it stops only through `shutdown`).
    pub async fn wait(&mut self) {
        self.listeners.wait().await;
        while self.tasks.join_next().await.is_some() {}
    }

    /// The addresses the listeners are bound to now (after reloads; the cluster listener
    /// included).
    pub fn listener_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.addrs()
    }

    /// Applies a configuration read again (on SIGHUP; already validated): the broker's
    /// limits, the connection settings of new connections, and the listeners (added, changed
    /// or removed; see [`ListenerSet::reload`]). The cluster, the store, `[http]` and the
    /// other settings a reload cannot change are left as they are (the caller names them).
    pub async fn reload(&self, config: &Config) -> ServerReload {
        let kept_broker_keys = match self.broker.reconfigure(config.broker.clone()) {
            Ok(kept) => kept,
            Err(error) => {
                tracing::error!(%error, "limits_reload_failed");
                return ServerReload {
                    errors: vec![error.to_string()],
                    ..ServerReload::default()
                };
            }
        };
        // The cluster and its listener stay as started.
        let config = &Config {
            cluster: self.listeners.cluster.clone(),
            ..config.clone()
        };
        let mut report = self
            .listeners
            .reload(wanted_listeners(config), config)
            .await;
        report.kept_broker_keys = kept_broker_keys;
        tracing::info!(
            added = ?report.added,
            removed = ?report.removed,
            updated = ?report.updated,
            "config_reloaded"
        );
        report
    }

    /// Re-reads the certificates, keys and PSK files of every listener that has them, and
    /// those of TLS on node links (on SIGHUP). A file that fails to load keeps the previous
    /// settings of its listener (or of the links); the errors are returned (and logged). New
    /// connections and links use the new settings.
    pub fn reload_transports(&self) -> Vec<String> {
        let mut errors = self.listeners.reload_transports();
        if let Some(tls) = &self.cluster_tls {
            match tls.reload() {
                Ok(()) => tracing::info!("cluster_link_tls_reloaded"),
                Err(error) => {
                    tracing::error!(%error, "cluster_link_tls_reload_failed");
                    errors.push(error.to_string());
                }
            }
        }
        errors
    }

    /// Applies the bridges of a configuration read again (on SIGHUP; each already
    /// validated and runnable): unchanged bridges keep running, removed ones stop, changed
    /// ones restart, new ones start.
    pub async fn reload_bridges(
        &self,
        bridges: Vec<hayate_bridge::config::BridgeConfig>,
    ) -> hayate_bridge::Reload {
        let report = self.bridges.reload(bridges).await;
        tracing::info!(
            added = ?report.added,
            removed = ?report.removed,
            changed = ?report.changed,
            unchanged = report.unchanged.len(),
            "bridges_reloaded"
        );
        report
    }

    /// A sender that triggers shutdown when `true` is sent (for signal handlers).
    pub fn shutdown_trigger(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// The transport's name in metrics (`hayate_network_connections{transport=...}`).
fn transport_name(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Mqtt => "tcp",
        TransportKind::Mqtts => "tls",
        TransportKind::Psk => "psk",
        TransportKind::Ws => "ws",
        TransportKind::Wss => "wss",
    }
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// Why an accept loop ended.
enum Ended {
    /// The server shuts down: wait for every connection of every listener.
    Shutdown,
    /// This listener was removed (a reload): tell the reload once the socket is closed, then
    /// wait for this listener's connections only.
    Removed(Option<oneshot::Sender<()>>),
}

async fn accept_loop(
    listener: TcpListener,
    runtime: Arc<ListenerRuntime>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    mut stop: oneshot::Receiver<oneshot::Sender<()>>,
) {
    let connections_shutdown = ListenerConnections::start();
    let mut last_error_log: Option<tokio::time::Instant> = None;
    let mut next_accept = tokio::time::Instant::now();
    let ended = loop {
        let limits = runtime.limits();
        if let Some(interval) = limits.accept_interval {
            // Connection-rate limit: the excess waits in the kernel's accept queue.
            let now = tokio::time::Instant::now();
            if next_accept > now {
                tokio::select! {
                    _ = tokio::time::sleep_until(next_accept) => {}
                    _ = shutdown.changed() => break Ended::Shutdown,
                    ack = &mut stop => break Ended::Removed(ack.ok()),
                }
            }
            next_accept = next_accept.max(now) + interval;
        }
        let accepted: io::Result<(TcpStream, SocketAddr)> = tokio::select! {
            result = listener.accept() => result,
            _ = shutdown.changed() => break Ended::Shutdown,
            ack = &mut stop => break Ended::Removed(ack.ok()),
        };
        match accepted {
            Ok((stream, peer)) => {
                // The settings and limits in force now (a reload may have changed them since
                // the last accept); the connection keeps these for its life.
                let limits = runtime.limits();
                let settings = shared.settings.read().clone();
                if settings.tcp_nodelay {
                    let _ = stream.set_nodelay(true);
                }
                let over_capacity = shared.active.count() >= settings.max_connections
                    || runtime.live.count() >= limits.max_connections;
                let guard = (
                    LiveConnections::enter(&shared.active),
                    LiveConnections::enter(&runtime.live),
                );
                let info = ConnectionInfo {
                    peer: Some(peer),
                    over_capacity,
                    listener: limits.info.clone(),
                    transport_identity: None,
                };
                let broker = shared.broker.clone();
                let shutdown = connections_shutdown.clone();
                // Detached: a JoinSet entry per connection would cost memory for nothing; the
                // guard counts it and lets shutdown wait for it.
                if matches!(runtime.acceptor, Acceptor::Tcp) {
                    spawn_connection(stream, info, broker, settings, shutdown, guard);
                } else {
                    tokio::spawn(handshake_then_serve(
                        stream,
                        info,
                        runtime.clone(),
                        broker,
                        settings,
                        shutdown,
                        guard,
                    ));
                }
            }
            Err(error) => {
                // EMFILE/ENFILE and friends: back off instead of spinning, log once per interval.
                let now = tokio::time::Instant::now();
                if last_error_log.is_none_or(|at| now - at >= ACCEPT_ERROR_LOG_INTERVAL) {
                    tracing::warn!(%error, listener = %runtime.name(), "accept_failed");
                    last_error_log = Some(now);
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    };
    // No more connections: the socket closes now (its port is free for a listener that
    // replaces this one), then this listener's connections are told to close (v5 clients get
    // DISCONNECT 0x8B) and waited for.
    drop(listener);
    connections_shutdown.trigger();
    match ended {
        Ended::Shutdown => shared.active.all_closed().await,
        Ended::Removed(ack) => {
            if let Some(ack) = ack {
                let _ = ack.send(());
            }
            tracing::info!(listener = %runtime.name(), open = runtime.live.count(), "listener_stopped");
            runtime.live.all_closed().await;
        }
    }
}

/// Runs the TLS / PSK / WebSocket handshake (at most `max_concurrent_handshakes` at once per
/// listener, all within the connect timeout), then starts the connection's task.
async fn handshake_then_serve<G: Send + 'static>(
    stream: TcpStream,
    mut info: ConnectionInfo,
    runtime: Arc<ListenerRuntime>,
    broker: Arc<Broker>,
    settings: Arc<ConnectionSettings>,
    shutdown: Arc<ListenerConnections>,
    guard: G,
) {
    let handshake = async {
        let _permit = runtime
            .handshakes
            .acquire()
            .await
            .map_err(io::Error::other)?;
        runtime.handshake(stream, settings.max_packet_size).await
    };
    let (transport, identity) = match tokio::time::timeout(settings.connect_timeout, handshake)
        .await
    {
        Ok(Ok(done)) => done,
        Ok(Err(error)) if info.listener.role == ListenerRole::Cluster => {
            // Another node (or something posing as one) whose certificate was refused.
            tracing::warn!(listener = %info.listener.name, peer = ?info.peer, %error, "cluster_link_handshake_failed");
            return;
        }
        Ok(Err(error)) => {
            tracing::debug!(listener = %info.listener.name, peer = ?info.peer, %error, "handshake_failed");
            return;
        }
        Err(_) => {
            tracing::debug!(listener = %info.listener.name, peer = ?info.peer, "handshake_timeout");
            return;
        }
    };
    info.transport_identity = identity.map(Arc::from);
    // The connection gets a task of its own, the size of its `Connection::run`: served from
    // this one, every connection would keep the space of this future's arguments and of the
    // handshake (several KiB) for its whole life.
    match transport {
        Handshaken::Stream(stream) => {
            let connection = Connection::new(Polled::new(stream), info, broker, settings, shutdown);
            tokio::spawn(connection.run(guard));
        }
        Handshaken::Tls(tls) => {
            let connection = Connection::new(*tls, info, broker, settings, shutdown);
            tokio::spawn(connection.run(guard));
        }
    }
}

/// A connection after its transport handshake.
enum Handshaken {
    /// A byte stream, driven through [`Polled`].
    Stream(BoxedStream),
    /// Certificate TLS on the socket (boxed: it is large, and only moved once).
    Tls(Box<TlsTcp>),
}

/// What a listener does with an accepted socket before MQTT starts.
#[derive(Debug)]
enum Acceptor {
    Tcp,
    Tls(Arc<TlsAcceptorHandle>),
    Psk(Arc<PskAcceptorHandle>),
    Ws,
    Wss(Arc<TlsAcceptorHandle>),
}

/// A listener's transport, limits and identity, shared by its accept loop and handshakes.
#[derive(Debug)]
pub(crate) struct ListenerRuntime {
    acceptor: Acceptor,
    /// Replaced by a reload that changes only limits or authentication settings; each
    /// connection keeps the ones it was accepted with.
    limits: RwLock<Arc<ListenerLimits>>,
    live: Arc<LiveConnections>,
    handshakes: Semaphore,
    ws_path: String,
    /// The transport's name in metrics.
    transport: &'static str,
}

/// What a reload may change on a listener without restarting it.
#[derive(Debug)]
struct ListenerLimits {
    info: Arc<ListenerInfo>,
    max_connections: usize,
    accept_interval: Option<Duration>,
}

impl ListenerLimits {
    fn new(listener: &ListenerConfig, config: &Config) -> ListenerLimits {
        ListenerLimits {
            info: Arc::new(ListenerInfo {
                name: Arc::from(listener.display_name()),
                allow_anonymous: listener.allow_anonymous,
                identity_as_username: listener.use_identity_as_username,
                role: listener.role,
                cluster_secret: match listener.role {
                    ListenerRole::Cluster => config
                        .cluster
                        .as_ref()
                        .and_then(|c| c.secret.as_deref())
                        .map(Arc::from),
                    _ => None,
                },
                limits: ConnectionLimits {
                    connect_timeout: config.server.connect_timeout(),
                    max_inbound_bytes_per_sec: listener
                        .max_inbound_bytes_per_sec
                        .unwrap_or(config.server.max_inbound_bytes_per_sec),
                    max_inbound_messages_per_sec: listener
                        .max_inbound_messages_per_sec
                        .unwrap_or(config.server.max_inbound_messages_per_sec),
                },
            }),
            max_connections: listener.max_connections.unwrap_or(usize::MAX),
            accept_interval: (listener.max_connection_rate > 0)
                .then(|| Duration::from_secs(1) / listener.max_connection_rate),
        }
    }
}

impl ListenerRuntime {
    fn new(listener: &ListenerConfig, config: &Config) -> io::Result<ListenerRuntime> {
        let tls_files = || TlsFiles {
            cert_file: listener.cert_file.clone().unwrap_or_default(),
            key_file: listener.key_file.clone().unwrap_or_default(),
            ca_file: listener.ca_file.clone(),
            require_certificate: listener.require_certificate,
        };
        let load_tls = || {
            TlsAcceptorHandle::load(tls_files())
                .map(Arc::new)
                .map_err(io::Error::other)
        };
        let acceptor = match listener.transport {
            TransportKind::Mqtt => Acceptor::Tcp,
            TransportKind::Ws => Acceptor::Ws,
            TransportKind::Mqtts => Acceptor::Tls(load_tls()?),
            TransportKind::Wss => Acceptor::Wss(load_tls()?),
            TransportKind::Psk => Acceptor::Psk(Arc::new(
                PskAcceptorHandle::load(PskSettings {
                    psk_file: listener.psk_file.clone().unwrap_or_default(),
                    hint: listener.psk_hint.clone(),
                    ciphers: listener.psk_ciphers.clone(),
                })
                .map_err(io::Error::other)?,
            )),
        };
        Ok(ListenerRuntime {
            acceptor,
            limits: RwLock::new(Arc::new(ListenerLimits::new(listener, config))),
            live: Arc::new(LiveConnections::default()),
            handshakes: Semaphore::new(listener.max_concurrent_handshakes),
            ws_path: listener.ws_path.clone(),
            transport: transport_name(listener.transport),
        })
    }

    /// The limits and identity new connections get.
    fn limits(&self) -> Arc<ListenerLimits> {
        self.limits.read().clone()
    }

    /// The listener's name (logs, metrics).
    pub(crate) fn name(&self) -> Arc<str> {
        self.limits.read().info.name.clone()
    }

    /// Applies a reloaded listener's limits and authentication settings to the connections
    /// accepted from now on.
    fn update(&self, listener: &ListenerConfig, config: &Config) {
        *self.limits.write() = Arc::new(ListenerLimits::new(listener, config));
    }

    /// The transport handshake; returns the byte stream and the identity it proved.
    async fn handshake(
        &self,
        tcp: TcpStream,
        max_packet_size: u32,
    ) -> io::Result<(Handshaken, Option<String>)> {
        // A WebSocket frame may carry one whole MQTT packet, and a little more when a client
        // packs several into one frame.
        let max_frame = max_packet_size as usize + 64 * 1024;
        match &self.acceptor {
            Acceptor::Tcp => Err(io::Error::other("plain TCP has no handshake")),
            Acceptor::Tls(handle) => {
                let tls = tls_tcp::accept(handle.config(), tcp).await?;
                let identity = tls.peer_certificate().and_then(tls::certificate_identity);
                Ok((Handshaken::Tls(Box::new(tls)), identity))
            }
            Acceptor::Psk(handle) => {
                let (stream, identity) = handle.accept(tcp).await?;
                Ok((Handshaken::Stream(Box::pin(stream)), identity))
            }
            Acceptor::Ws => {
                let stream = ws::accept(tcp, &self.ws_path, max_frame)
                    .await
                    .map_err(io::Error::other)?;
                Ok((Handshaken::Stream(Box::pin(stream)), None))
            }
            Acceptor::Wss(handle) => {
                let tls_stream = handle.acceptor().accept(tcp).await?;
                let identity = tls::client_identity(&tls_stream);
                let stream = ws::accept(tls_stream, &self.ws_path, max_frame)
                    .await
                    .map_err(io::Error::other)?;
                Ok((Handshaken::Stream(Box::pin(stream)), identity))
            }
        }
    }
}

/// Live connection tasks of all listeners: the count (for `max_connections`) and a signal when
/// it reaches zero (for shutdown).
#[derive(Debug, Default)]
pub(crate) struct LiveConnections {
    count: AtomicUsize,
    none_left: Notify,
}

/// Held by a connection task; leaving (also by panic) decrements the count.
struct LiveGuard(Arc<LiveConnections>);

impl LiveConnections {
    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    fn enter(this: &Arc<LiveConnections>) -> LiveGuard {
        this.count.fetch_add(1, Ordering::Relaxed);
        LiveGuard(this.clone())
    }

    async fn all_closed(&self) {
        loop {
            let notified = self.none_left.notified();
            tokio::pin!(notified);
            // Registered before the check, so a last connection leaving in between is seen.
            notified.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_waiters();
        }
    }
}

async fn timer_loop(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TIMER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let mut wake = WakeList::new();
        broker.run_timers(tokio::time::Instant::now().into_std(), &mut wake);
        wake.iter().for_each(|doorbell| doorbell.notify_one());
    }
}

/// Warns at start when the process may open fewer files than `max_connections` needs.
fn warn_if_fd_limit_low(max_connections: usize) {
    let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else {
        return;
    };
    let soft = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|value| value.parse::<usize>().ok());
    if let Some(soft) = soft {
        if soft < max_connections + 64 {
            tracing::warn!(
                fd_limit = soft,
                max_connections,
                "open file limit is below server.max_connections; connections beyond it will be refused"
            );
        }
    }
}
