//! A TCP proxy for link-fault tests: it forwards every connection it accepts to one target and
//! can cut all of them at once (both sockets dropped, no FIN handshake awaited) or refuse new
//! ones for a while (accepted, then closed at once: the client sees a failed connection).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A proxy on 127.0.0.1 forwarding to `target`; its tasks end when it is dropped.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    /// Bumped by [`Proxy::cut`]: every pipe of an older generation ends.
    generation: watch::Sender<u64>,
    acceptor: JoinHandle<()>,
}

struct Shared {
    blocked: AtomicBool,
    /// Connections forwarded since the start (refused ones not counted).
    accepted: AtomicU64,
    /// Pipes open now.
    open: AtomicU64,
}

impl Proxy {
    /// Starts a proxy to `target` on a free loopback port.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared {
            blocked: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
        });
        let (generation, _) = watch::channel(0u64);
        let acceptor = tokio::spawn(accept_loop(
            listener,
            target,
            shared.clone(),
            generation.clone(),
        ));
        Proxy {
            addr,
            shared,
            generation,
            acceptor,
        }
    }

    /// Drops every connection open now (both sides); returns how many there were.
    pub fn cut(&self) -> u64 {
        let open = self.shared.open.load(Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
        open
    }

    /// While blocked, new connections are closed as soon as they are accepted.
    pub fn set_blocked(&self, blocked: bool) {
        self.shared.blocked.store(blocked, Ordering::SeqCst);
    }

    /// Connections forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    shared: Arc<Shared>,
    generation: watch::Sender<u64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if shared.blocked.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let Ok(server) = TcpStream::connect(target).await else {
            drop(client);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        shared.open.fetch_add(1, Ordering::SeqCst);
        let mut cut = generation.subscribe();
        cut.mark_unchanged();
        let shared = shared.clone();
        tokio::spawn(async move {
            let (mut client, mut server) = (client, server);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = cut.changed() => {}
            }
            shared.open.fetch_sub(1, Ordering::SeqCst);
            // Both sockets are dropped here: the bridge and the broker each see the link end.
        });
    }
}
