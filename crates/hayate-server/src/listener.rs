//! Listeners and the server's lifetime: bind, accept, spawn connection tasks, run the timer
//! and `$SYS` tasks, shut down.

use crate::config::Config;
use crate::connection::{spawn_connection, ConnectionSettings, ShutdownSignal};
use hayate_core::{Broker, WakeList};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

/// How often delayed wills, session expiry and retained-message expiry are checked.
const TIMER_TICK: Duration = Duration::from_millis(250);
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
    local_addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Server {
    /// Binds every listener and starts serving on the current tokio runtime.
    pub async fn start(config: Config) -> io::Result<ServerHandle> {
        let hooks = Arc::new(config.auth.clone());
        let broker = Broker::new(
            config.broker.clone(),
            hooks,
            tokio::time::Instant::now().into_std(),
        );
        let (shutdown, shutdown_rx) = watch::channel(false);
        let settings = Arc::new(ConnectionSettings::from_config(&config));
        let active = Arc::new(LiveConnections::default());
        let mut tasks = JoinSet::new();
        let mut local_addrs = Vec::new();
        for addr in &config.server.listen {
            let listener = bind(*addr)?;
            let local = listener.local_addr()?;
            tracing::info!(address = %local, "listening");
            local_addrs.push(local);
            tasks.spawn(accept_loop(
                listener,
                broker.clone(),
                settings.clone(),
                active.clone(),
                shutdown_rx.clone(),
            ));
        }
        warn_if_fd_limit_low(config.server.max_connections);
        tasks.spawn(timer_loop(broker.clone(), shutdown_rx.clone()));
        if config.server.sys_interval_secs > 0 {
            let interval = Duration::from_secs(config.server.sys_interval_secs);
            tasks.spawn(crate::sys::sys_loop(
                broker.clone(),
                interval,
                shutdown_rx.clone(),
            ));
        }
        Ok(ServerHandle {
            broker,
            local_addrs,
            shutdown,
            tasks,
        })
    }
}

impl ServerHandle {
    /// The bound addresses, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// Stops accepting, tells every connection to close (v5 clients get DISCONNECT 0x8B), and
    /// waits for the listeners and background tasks to stop.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        while self.tasks.join_next().await.is_some() {}
    }

    /// Waits until the server stops (it stops only through `shutdown`).
    pub async fn wait(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }

    /// A sender that triggers shutdown when `true` is sent (for signal handlers).
    pub fn shutdown_trigger(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
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

async fn accept_loop(
    listener: TcpListener,
    broker: Arc<Broker>,
    settings: Arc<ConnectionSettings>,
    active: Arc<LiveConnections>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections_shutdown = Arc::new(ShutdownSignal::default());
    let mut last_error_log: Option<tokio::time::Instant> = None;
    loop {
        let accepted: io::Result<(TcpStream, SocketAddr)> = tokio::select! {
            result = listener.accept() => result,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                if settings.tcp_nodelay {
                    let _ = stream.set_nodelay(true);
                }
                let over_capacity = active.count() >= settings.max_connections;
                let guard = LiveConnections::enter(&active);
                let broker = broker.clone();
                let settings = settings.clone();
                let shutdown = connections_shutdown.clone();
                // Detached: a JoinSet entry per connection would cost memory for nothing; the
                // guard counts it and lets shutdown wait for it.
                spawn_connection(
                    stream,
                    peer,
                    broker,
                    settings,
                    over_capacity,
                    shutdown,
                    guard,
                );
            }
            Err(error) => {
                // EMFILE/ENFILE and friends: back off instead of spinning, log once per interval.
                let now = tokio::time::Instant::now();
                if last_error_log.is_none_or(|at| now - at >= ACCEPT_ERROR_LOG_INTERVAL) {
                    tracing::warn!(%error, "accept_failed");
                    last_error_log = Some(now);
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    // Shutdown: tell this listener's connections, wait for them to flush and close.
    connections_shutdown.trigger();
    active.all_closed().await;
}

/// Live connection tasks of all listeners: the count (for `max_connections`) and a signal when
/// it reaches zero (for shutdown).
#[derive(Debug, Default)]
struct LiveConnections {
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
