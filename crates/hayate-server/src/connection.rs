//! One task per client connection: read, decode, hand packets to the channel, ring doorbells,
//! write. Waits on socket readiness, the session's doorbell, one deadline (connect timeout or
//! keep alive) and shutdown — nothing else per connection.

use crate::config::Config;
use crate::transport::{Progress, Transport};
use bytes::BytesMut;
use hayate_codec::{decode, ReasonCode};
use hayate_core::stats::Stats;
use hayate_core::{Broker, Channel, Close, ConnectionInfo, OutBuf, WakeList};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often a connection paused by back-pressure re-checks on its own (it is normally woken
/// when the subscriber drains; this notices a stalled subscriber, which sends no signal).
const BACKPRESSURE_RECHECK: Duration = Duration::from_millis(200);
/// Read at most this much per wake before letting other tasks run (fairness).
const READ_BUDGET: usize = 256 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// How long a connection the broker closes may take to flush its last bytes and drain the
/// client's, and how much it reads while draining.
const CLOSE_LINGER: Duration = Duration::from_secs(2);
const CLOSE_LINGER_MAX_BYTES: usize = 1024 * 1024;

/// Per-connection settings derived from the configuration once.
#[derive(Debug)]
pub(crate) struct ConnectionSettings {
    pub max_connections: usize,
    pub tcp_nodelay: bool,
    pub connect_timeout: Duration,
    pub max_packet_size: u32,
    pub max_pending_write_bytes: usize,
    /// Per-client inbound limit in bytes per second (0: none).
    pub max_inbound_bytes_per_sec: u64,
    /// Per-client inbound limit in PUBLISH packets per second (0: none).
    pub max_inbound_messages_per_sec: u64,
}

impl ConnectionSettings {
    pub fn from_config(config: &Config) -> ConnectionSettings {
        ConnectionSettings {
            max_connections: config.server.max_connections,
            tcp_nodelay: config.server.tcp_nodelay,
            connect_timeout: config.server.connect_timeout(),
            max_packet_size: config.broker.max_packet_size,
            max_pending_write_bytes: config.server.max_pending_write_bytes.max(64 * 1024),
            max_inbound_bytes_per_sec: config.server.max_inbound_bytes_per_sec,
            max_inbound_messages_per_sec: config.server.max_inbound_messages_per_sec,
        }
    }
}

pub(crate) struct Connection<T> {
    stream: T,
    broker: Arc<Broker>,
    settings: Arc<ConnectionSettings>,
    shutdown: Arc<ShutdownSignal>,
    channel: Channel,
    /// Bytes of a partial packet. Dropped when empty so an idle connection holds no buffer.
    read_buf: BytesMut,
    out: OutBuf,
    wake: WakeList,
    last_read: Instant,
    /// Complete packets were left in `read_buf` when back-pressure started.
    input_pending: bool,
    /// Inbound rate limit; only when configured.
    limit: Option<Box<InboundLimit>>,
    /// A decoded PUBLISH held back by back-pressure before routing (`Channel::must_defer`);
    /// handled first when reading resumes.
    deferred: Option<Box<hayate_codec::Packet>>,
}

/// A client's inbound rate limit: token buckets for bytes and PUBLISH packets, refilled
/// continuously, holding at most one second's worth. Reading stops while either is empty
/// (the client's bytes wait in TCP: nothing is dropped) and resumes when it has refilled.
#[derive(Debug)]
struct InboundLimit {
    bytes_per_sec: f64,
    messages_per_sec: f64,
    bytes: f64,
    messages: f64,
    refilled: Instant,
}

impl InboundLimit {
    fn new(settings: &ConnectionSettings, now: Instant) -> Option<Box<InboundLimit>> {
        let (bytes, messages) = (
            settings.max_inbound_bytes_per_sec,
            settings.max_inbound_messages_per_sec,
        );
        (bytes > 0 || messages > 0).then(|| {
            let rate = |r: u64| if r == 0 { f64::INFINITY } else { r as f64 };
            Box::new(InboundLimit {
                bytes_per_sec: rate(bytes),
                messages_per_sec: rate(messages),
                bytes: rate(bytes),
                messages: rate(messages),
                refilled: now,
            })
        })
    }

    /// `Some(when)` while a bucket is empty: reading may go on again then.
    fn resume_at(&mut self, now: Instant) -> Option<Instant> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.bytes = (self.bytes + elapsed * self.bytes_per_sec).min(self.bytes_per_sec);
        self.messages =
            (self.messages + elapsed * self.messages_per_sec).min(self.messages_per_sec);
        let wait = f64::max(
            -self.bytes / self.bytes_per_sec,
            -self.messages / self.messages_per_sec,
        );
        // Resume once the deficit is paid back; tiny waits are not worth a timer.
        (wait > 0.0005).then(|| now + Duration::from_secs_f64(wait))
    }
}

/// Starts the task that serves one accepted plain-TCP connection. `guard` is dropped when the
/// task ends.
///
/// The connection is built here, outside the task, and the task's future is `Connection::run`
/// itself: arguments of an async fn (or captures of an async block) keep their space in the
/// future for its whole life even after being moved, and every connection pays for that space
/// while idle.
pub(crate) fn spawn_connection<G: Send + 'static>(
    stream: TcpStream,
    info: ConnectionInfo,
    broker: Arc<Broker>,
    settings: Arc<ConnectionSettings>,
    shutdown: Arc<ShutdownSignal>,
    guard: G,
) {
    let connection = Connection::new(stream, info, broker, settings, shutdown);
    tokio::spawn(connection.run(guard));
}

/// Server shutdown as connections see it: a flag and a wake-up. Every connection's task holds
/// the wait for its whole life, and this one is half the size of a `watch::Receiver::changed`.
#[derive(Debug, Default)]
pub(crate) struct ShutdownSignal {
    started: AtomicBool,
    notify: Notify,
}

impl ShutdownSignal {
    /// Starts shutdown for every connection waiting on this signal, now or later.
    pub fn trigger(&self) {
        self.started.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Completes once shutdown has started.
    async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a trigger in between is not missed.
        notified.as_mut().enable();
        if self.started.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }
}

/// While paused: until the inbound rate limit's buckets have refilled, or (back-pressure) until
/// the awaited subscriber drains or the re-check interval passes. Never completes when not paused. The timer and the wait live on the heap, only while
/// paused: inline they would enlarge every connection's task for a rare state.
async fn wait_while_paused(
    drained: Option<Pin<Box<OwnedNotified>>>,
    paused: bool,
    throttled_until: Option<Instant>,
) {
    if !paused {
        return std::future::pending().await;
    }
    if let Some(until) = throttled_until {
        // Over the inbound rate limit: until the buckets have refilled.
        return Box::pin(tokio::time::sleep_until(until)).await;
    }
    let recheck = Box::pin(tokio::time::sleep(BACKPRESSURE_RECHECK));
    match drained {
        Some(drained) => {
            tokio::select! {
                _ = recheck => {}
                _ = drained => {}
            }
        }
        None => recheck.await,
    }
}

impl<T: Transport> Connection<T> {
    /// A connection over `stream`, ready to [`run`](Connection::run).
    pub(crate) fn new(
        stream: T,
        info: ConnectionInfo,
        broker: Arc<Broker>,
        settings: Arc<ConnectionSettings>,
        shutdown: Arc<ShutdownSignal>,
    ) -> Connection<T> {
        let channel = Channel::new(broker.clone(), info);
        let limit = InboundLimit::new(&settings, Instant::now());
        Connection {
            stream,
            broker,
            settings,
            shutdown,
            channel,
            read_buf: BytesMut::new(),
            out: OutBuf::new(),
            wake: WakeList::new(),
            last_read: Instant::now(),
            input_pending: false,
            limit,
            deferred: None,
        }
    }

    /// Serves the connection to its end. Written as a block capturing `self` rather than an
    /// `async fn` taking `mut self`, which would hold the connection twice (argument and local).
    pub(crate) fn run<G: Send + 'static>(
        self,
        guard: G,
    ) -> impl std::future::Future<Output = ()> + Send {
        let mut connection = self;
        async move {
            let _guard = &guard;
            let close = connection.serve().await;
            connection.close(close).await;
        }
    }

    async fn serve(&mut self) -> Option<Close> {
        let shutdown = self.shutdown.clone();
        let doorbell = self.channel.doorbell().clone();
        // One timer per connection: the connect timeout, then the keep-alive deadline. It is
        // not moved on every read; when it fires early (traffic arrived since it was set) it is
        // re-armed from the last read, so a busy connection touches the timer wheel about once
        // per keep-alive period.
        let timer = tokio::time::sleep_until(Instant::now() + self.settings.connect_timeout);
        tokio::pin!(timer);
        let mut timer_armed_for_keep_alive = false;
        loop {
            if let Err(error) = self.flush() {
                tracing::debug!(peer = ?self.channel.peer(), %error, "write_failed");
                return None;
            }
            let backlogged = self.out.len() >= self.settings.max_pending_write_bytes;
            if !backlogged && self.channel.has_more_to_send() {
                // The last drain stopped at its budget: continue without waiting for a ring.
                let now = Instant::now().into_std();
                if let Err(close) = self.channel.poll_transmit(now, &mut self.out) {
                    return Some(close);
                }
                continue;
            }
            if self.channel.is_connected() && !timer_armed_for_keep_alive {
                timer_armed_for_keep_alive = true;
                timer.as_mut().reset(self.keep_alive_deadline());
            }
            // Back-pressure: while a subscriber this client feeds is congested but draining,
            // leave the client's bytes in its socket (TCP slows it down) instead of queueing
            // messages that would be dropped.
            let drained = if self.channel.is_waiting() {
                self.channel.backpressure_signal()
            } else {
                None
            };
            let (paused, throttled_until) = {
                let now = Instant::now();
                let throttled_until = self.limit.as_mut().and_then(|limit| limit.resume_at(now));
                let backpressured = self.channel.is_backpressured(now.into_std());
                (
                    !backlogged && (backpressured || throttled_until.is_some()),
                    throttled_until,
                )
            };
            if self.input_pending && !paused && !backlogged {
                // Resume with what was already read before reading more.
                if let Some(close) = self.process_buffered(false) {
                    return Some(close);
                }
                continue;
            }
            let want_read = !(backlogged || paused);
            let want_write = !self.out.is_empty() || self.stream.wants_flush();
            tokio::select! {
                progress = std::future::poll_fn(|cx| self.stream.poll_progress(cx, want_read, &mut self.out)), if want_read || want_write => {
                    match progress {
                        Ok(Progress::Readable) => {
                            if let Some(close) = self.read_and_process()? {
                                return Some(close);
                            }
                        }
                        Ok(Progress::Writable(written)) => {
                            Stats::add(&self.broker.stats.bytes_sent, written as u64);
                        }
                        Err(_) => return None,
                    }
                }
                _ = doorbell.notified(), if self.channel.is_connected() && !backlogged => {
                    let now = Instant::now().into_std();
                    if let Err(close) = self.channel.poll_transmit(now, &mut self.out) {
                        return Some(close);
                    }
                }
                _ = wait_while_paused(drained, paused, throttled_until) => {}
                _ = &mut timer => {
                    if paused {
                        // Not reading is our doing, not the client's silence.
                        self.last_read = Instant::now();
                        timer.as_mut().reset(self.keep_alive_deadline());
                        continue;
                    }
                    if !self.channel.is_connected() {
                        // Debug, not info: a slowloris attack would otherwise write one line per socket.
                        tracing::debug!(peer = ?self.channel.peer(), "connect_timeout");
                        return None;
                    }
                    let deadline = self.keep_alive_deadline();
                    if Instant::now() >= deadline {
                        // [MQTT-3.1.2-24] nothing received for 1.5 × keep alive.
                        tracing::info!(peer = ?self.channel.peer(), client_id = ?self.channel.client_id(), "keep_alive_timeout");
                        return Some(self.channel.close_with(ReasonCode::KEEP_ALIVE_TIMEOUT, "keep_alive_timeout", &mut self.out));
                    }
                    timer.as_mut().reset(deadline);
                }
                _ = shutdown.wait() => {
                    return Some(self.channel.close_with(ReasonCode::SERVER_SHUTTING_DOWN, "server_shutdown", &mut self.out));
                }
            }
        }
    }

    /// When the connection times out if nothing more arrives: 1.5 × keep alive after the last
    /// read, or far away when keep alive is off.
    fn keep_alive_deadline(&self) -> Instant {
        match self.channel.keep_alive_timeout() {
            Some(timeout) => self.last_read + timeout,
            None => Instant::now() + Duration::from_secs(24 * 3600),
        }
    }

    /// Reads what the socket has (up to a budget) and handles every complete packet, chunk by
    /// chunk: what one read brought is decoded and handled before the next read, so a
    /// publisher paused by back-pressure mid-way holds at most one chunk of unhandled input
    /// (with thousands of paused publishers, reading the whole budget first would park
    /// gigabytes in their buffers). Doorbells are rung once per chunk.
    /// `None` (outer) means the socket is gone; `Some(Some(close))` means close it.
    fn read_and_process(&mut self) -> Option<Option<Close>> {
        let mut read_total = 0;
        let mut eof = false;
        // Under a byte-rate limit read no more than the bucket holds (at least a little, so a
        // packet header can always be read).
        let budget = match &self.limit {
            Some(limit) => (limit.bytes.max(0.0) as usize).clamp(1024, READ_BUDGET),
            None => READ_BUDGET,
        };
        while read_total < budget {
            if self.read_buf.capacity() - self.read_buf.len() < READ_CHUNK / 4 {
                self.read_buf.reserve(READ_CHUNK);
            }
            match self.stream.try_read_buf(&mut self.read_buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    read_total += n;
                    if let Some(limit) = &mut self.limit {
                        limit.bytes -= n as f64;
                    }
                    if let Some(close) = self.process_buffered(false) {
                        self.account_read(read_total);
                        return Some(Some(close));
                    }
                    if self.input_pending {
                        // Paused (back-pressure or rate limit): read no further.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        self.account_read(read_total);
        if self.read_buf.is_empty() {
            // The last attempt reserved room and found nothing: keep no buffer while idle.
            self.read_buf = BytesMut::new();
        }
        if !eof {
            return Some(None);
        }
        // At end of stream everything the client sent is handled, paused or not (its last
        // packet may be a DISCONNECT that decides about its will).
        self.process_buffered(true).map(Some)
    }

    fn account_read(&mut self, read_total: usize) {
        if read_total > 0 {
            self.last_read = Instant::now();
            Stats::add(&self.broker.stats.bytes_received, read_total as u64);
        }
    }

    /// Decodes and handles the complete packets in the read buffer, then rings the doorbells
    /// of the sessions that got messages, once each. Stops early, leaving the rest buffered,
    /// when back-pressure starts (unless `drain_all`), so a paused publisher adds at most one
    /// message to a congested queue.
    fn process_buffered(&mut self, drain_all: bool) -> Option<Close> {
        let now = Instant::now().into_std();
        let mut close = None;
        self.input_pending = false;
        loop {
            let throttled = self
                .limit
                .as_ref()
                .is_some_and(|limit| limit.messages < 0.0);
            if !drain_all && (self.channel.is_waiting() || throttled) {
                self.input_pending = !self.read_buf.is_empty() || self.deferred.is_some();
                break;
            }
            let next = match self.deferred.take() {
                Some(packet) => Ok(Some(*packet)),
                None => decode(
                    &mut self.read_buf,
                    self.channel.version(),
                    self.settings.max_packet_size,
                ),
            };
            match next {
                Ok(Some(packet)) => {
                    if let hayate_codec::Packet::Publish(publish) = &packet {
                        if !drain_all && self.channel.must_defer(publish, now) {
                            self.deferred = Some(Box::new(packet));
                            self.input_pending = true;
                            break;
                        }
                    }
                    if let (Some(limit), hayate_codec::Packet::Publish(_)) =
                        (&mut self.limit, &packet)
                    {
                        limit.messages -= 1.0;
                    }
                    if let Err(c) =
                        self.channel
                            .handle_packet(packet, now, &mut self.out, &mut self.wake)
                    {
                        close = Some(c);
                        break;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::info!(peer = ?self.channel.peer(), client_id = ?self.channel.client_id(), %error, "malformed_packet");
                    close = Some(self.channel.decode_error(error, &mut self.out));
                    break;
                }
            }
        }
        self.ring_doorbells();
        if self.read_buf.is_empty() {
            // Keep no buffer while idle.
            self.read_buf = BytesMut::new();
        }
        close
    }

    fn ring_doorbells(&mut self) {
        for doorbell in self.wake.drain(..) {
            doorbell.notify_one();
        }
    }

    /// Writes as much of the output as the socket takes now, in vectored writes.
    fn flush(&mut self) -> io::Result<()> {
        while !self.out.is_empty() {
            let mut slices = [IoSlice::new(&[]); 64];
            let count = self.out.io_slices(&mut slices);
            match self.stream.try_write_vectored(&slices[..count]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    Stats::add(&self.broker.stats.bytes_sent, n as u64);
                    self.out.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Flushes what is owed (a DISCONNECT, a refused CONNACK), lets the channel settle the
    /// session and will, then closes. When the broker ended the connection it half-closes and
    /// discards what the client still sends for a moment: closing at once would make the kernel
    /// answer the client's in-flight packets with a reset, and the client could lose our
    /// DISCONNECT (and its reason code) before reading it.
    async fn close(&mut self, close: Option<Close>) {
        let mut wake = WakeList::new();
        self.channel.finish(Instant::now().into_std(), &mut wake);
        wake.iter().for_each(|doorbell| doorbell.notify_one());
        let Some(close) = close else { return };
        tracing::debug!(peer = ?self.channel.peer(), reason = %close.reason, event = close.event, "connection_closing");
        let deadline = Instant::now() + CLOSE_LINGER;
        let flush = async {
            while !self.out.is_empty() || self.stream.wants_flush() {
                if self.flush().is_err() {
                    return;
                }
                if self.out.is_empty() && !self.stream.wants_flush() {
                    return;
                }
                let (stream, out) = (&mut self.stream, &mut self.out);
                if std::future::poll_fn(|cx| stream.poll_progress(cx, false, out))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, flush).await;
        if close.event == "client_disconnect" {
            return;
        }
        let stream = &mut self.stream;
        let _ = tokio::time::timeout_at(
            deadline,
            std::future::poll_fn(|cx| stream.poll_shutdown(cx)),
        )
        .await;
        let mut discarded = 0usize;
        // Allocated only while lingering.
        let mut sink = BytesMut::new();
        let mut nothing = OutBuf::new();
        while discarded < CLOSE_LINGER_MAX_BYTES {
            let stream = &mut self.stream;
            let readable = std::future::poll_fn(|cx| stream.poll_progress(cx, true, &mut nothing));
            match tokio::time::timeout_at(deadline, readable).await {
                Ok(Ok(_)) => {}
                _ => break,
            }
            sink.clear();
            sink.reserve(READ_CHUNK);
            match self.stream.try_read_buf(&mut sink) {
                Ok(0) => break,
                Ok(n) => discarded += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection's task holds this future for its whole life, idle or not, so its size
    /// is memory per connection (P6). Guards against a change that quietly puts a large value
    /// or future into it; move rare state to the heap instead.
    #[tokio::test]
    async fn connection_task_state_stays_small() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let client = TcpStream::connect(addr).await.expect("connect");
        let config = Config::default();
        let broker = Broker::new(
            config.broker.clone(),
            Arc::new(hayate_core::StaticPolicy::default()),
            std::time::Instant::now(),
        );
        let settings = Arc::new(ConnectionSettings::from_config(&config));
        let shutdown = Arc::new(ShutdownSignal::default());
        let info = ConnectionInfo {
            peer: Some(addr),
            ..ConnectionInfo::default()
        };
        let connection = Connection::new(client, info, broker, settings, shutdown);
        let task = connection.run(());
        let size = std::mem::size_of_val(&task);
        assert!(size <= 830, "connection future is {size} bytes");
        let session = std::mem::size_of::<hayate_core::registry::SessionState>();
        assert!(session <= 512, "SessionState is {session} bytes");
    }
}
