//! Certificate TLS (rustls) on the socket, through rustls's *unbuffered* API: this
//! module owns every buffer, so an idle connection keeps none.
//!
//! A `tokio_rustls` stream keeps, per connection and for its whole life, rustls's receive
//! buffer (4 KiB once the first record was read, never released) and the queues around it. Here
//! a read goes to a per-thread scratch buffer, its records are decrypted there, and only what cannot
//! be handed out yet stays on the heap: the tail of a record that has not fully arrived, or
//! plaintext beyond the room the connection offered. Output is encrypted into a per-thread
//! scratch buffer and written at once; only what the socket did not take is kept. Both heap buffers are freed
//! as soon as they are empty. (WebSocket over TLS still uses `tokio_rustls`: the WebSocket layer
//! needs a byte stream.)

use super::{Progress, Transport};
use bytes::{Buf, BytesMut};
use hayate_session::OutBuf;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, UnbufferedStatus, WriteTraffic,
};
use rustls::ServerConfig;
use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use tokio::net::TcpStream;

/// The largest TLS record on the wire: a 5-byte header and 2^14 bytes of plaintext with at most
/// 256 bytes of expansion (RFC 8446 §5.2; TLS 1.2 allows more expansion, but not with the AEAD
/// suites rustls offers).
const MAX_RECORD: usize = 5 + 16_384 + 256;
/// Plaintext encrypted per write: one full record.
const MAX_PLAINTEXT: usize = 16_384;
/// Room for one encrypted record, plus a key update message rustls may put before it.
const RECORD_ROOM: usize = MAX_RECORD + 512;
thread_local! {
    /// Per worker thread: where reads land and their records are decrypted.
    static READ_SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; MAX_RECORD].into_boxed_slice());
    /// Per worker thread: plaintext gathered from several slices, then the record encrypted
    /// from it.
    static WRITE_SCRATCH: RefCell<Box<[u8]>> =
        RefCell::new(vec![0; MAX_PLAINTEXT + RECORD_ROOM].into_boxed_slice());
}
/// Most bytes of an unfinished handshake flight kept (rustls takes handshake messages of up to
/// 64 KiB, and a flight is read in pieces).
const MAX_HANDSHAKE_BUFFER: usize = 0x1_0000 + 2 * MAX_RECORD;

/// A server-side TLS connection on a socket. See the module docs.
pub(crate) struct TlsTcp {
    tcp: TcpStream,
    conn: UnbufferedServerConnection,
    /// Received TLS bytes not yet processed: the start of a record still arriving.
    incoming: Vec<u8>,
    /// Encrypted bytes the socket has not taken yet, in order.
    outgoing: Vec<u8>,
    /// Decrypted bytes not yet handed out.
    plain: BytesMut,
    /// The peer's close_notify or end of stream was seen: reads return 0 once `plain` is empty.
    read_closed: bool,
    /// Our close_notify is queued.
    close_queued: bool,
}

/// Where processing received records stopped.
enum Stop<R> {
    /// The handshake is complete and every complete record is processed; carries what the
    /// caller did with the write side (see [`process`]).
    Traffic(R),
    /// The handshake needs more bytes from the peer.
    Blocked,
    /// Both sides closed.
    Closed,
}

/// Where decrypted bytes go: up to `room` bytes into `out`, the rest into `rest`.
struct Sink<'a> {
    out: &'a mut BytesMut,
    room: usize,
    rest: &'a mut BytesMut,
}

impl Sink<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let direct = bytes.len().min(self.room);
        self.out.extend_from_slice(&bytes[..direct]);
        self.room -= direct;
        self.rest.extend_from_slice(&bytes[direct..]);
    }
}

/// A rustls error as an I/O error (the connection ends on it).
fn tls_error(error: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {error}"))
}

/// Processes the complete records at the front of `data`: decrypted application data goes to
/// `sink`, TLS output (handshake messages, alerts, key updates) to the end of `outgoing`. Once
/// the handshake is complete and nothing is left to process, `on_traffic` gets the write side.
/// Returns how many bytes of `data` are used up (to be discarded) and where it stopped.
fn process<R>(
    conn: &mut UnbufferedServerConnection,
    data: &mut [u8],
    sink: &mut Sink<'_>,
    outgoing: &mut Vec<u8>,
    read_closed: &mut bool,
    mut on_traffic: impl FnMut(&mut WriteTraffic<'_, ServerConnectionData>) -> R,
) -> io::Result<(usize, Stop<R>)> {
    let mut used = 0;
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut data[used..]);
        let stop = match state.map_err(tls_error)? {
            ConnectionState::ReadTraffic(mut traffic) => {
                while let Some(record) = traffic.next_record() {
                    sink.put(record.map_err(tls_error)?.payload);
                }
                None
            }
            ConnectionState::ReadEarlyData(mut early) => {
                while let Some(record) = early.next_record() {
                    sink.put(record.map_err(tls_error)?.payload);
                }
                None
            }
            ConnectionState::EncodeTlsData(mut encode) => {
                append_sized(outgoing, 1024, |room| match encode.encode(room) {
                    Ok(n) => Ok(Ok(n)),
                    Err(EncodeError::InsufficientSize(size)) => Ok(Err(size.required_size)),
                    Err(error) => Err(tls_error(error)),
                })?;
                None
            }
            // What was encoded is in `outgoing`, which is written in order before anything
            // else: as good as transmitted.
            ConnectionState::TransmitTlsData(transmit) => {
                transmit.done();
                None
            }
            ConnectionState::BlockedHandshake => Some(Stop::Blocked),
            ConnectionState::WriteTraffic(mut traffic) => {
                Some(Stop::Traffic(on_traffic(&mut traffic)))
            }
            // Reported once; the next round goes on with the write side.
            ConnectionState::PeerClosed => {
                *read_closed = true;
                None
            }
            ConnectionState::Closed => {
                *read_closed = true;
                Some(Stop::Closed)
            }
            other => return Err(tls_error(format!("unexpected state {other:?}"))),
        };
        used += discard;
        if let Some(stop) = stop {
            return Ok((used, stop));
        }
    }
}

/// Appends what `fill` writes to `buf`, starting with `room` bytes of space and growing to the
/// size `fill` asks for (`Ok(Err(size))`).
fn append_sized(
    buf: &mut Vec<u8>,
    mut room: usize,
    mut fill: impl FnMut(&mut [u8]) -> io::Result<Result<usize, usize>>,
) -> io::Result<()> {
    let start = buf.len();
    loop {
        buf.resize(start + room, 0);
        match fill(&mut buf[start..]) {
            Ok(Ok(n)) => {
                buf.truncate(start + n);
                return Ok(());
            }
            Ok(Err(needed)) if needed > room => room = needed,
            Ok(Err(_)) => {
                buf.truncate(start);
                return Err(tls_error("output does not fit the size asked for"));
            }
            Err(error) => {
                buf.truncate(start);
                return Err(error);
            }
        }
    }
}

/// Runs the server side of the handshake on `tcp`.
pub(crate) async fn accept(config: Arc<ServerConfig>, tcp: TcpStream) -> io::Result<TlsTcp> {
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    let mut tls = TlsTcp {
        tcp,
        conn,
        incoming: Vec::new(),
        outgoing: Vec::new(),
        plain: BytesMut::new(),
        read_closed: false,
        close_queued: false,
    };
    loop {
        let stop = tls.process_incoming()?;
        std::future::poll_fn(|cx| tls.poll_flush_outgoing(cx)).await?;
        match stop {
            Stop::Traffic(()) => break,
            Stop::Closed => return Err(io::ErrorKind::UnexpectedEof.into()),
            Stop::Blocked => {}
        }
        if tls.incoming.len() >= MAX_HANDSHAKE_BUFFER {
            return Err(tls_error("handshake message too large"));
        }
        tls.tcp.readable().await?;
        tls.incoming.reserve(MAX_RECORD);
        match tls.tcp.try_read_buf(&mut tls.incoming) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    tls.release_empty();
    Ok(tls)
}

impl TlsTcp {
    /// The client certificate chain, leaf first, when the client sent one.
    pub(crate) fn peer_certificate(&self) -> Option<&[u8]> {
        self.conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.as_ref())
    }

    /// Processes `incoming` (during the handshake), keeping what is left of it.
    fn process_incoming(&mut self) -> io::Result<Stop<()>> {
        let mut none = BytesMut::new();
        let mut sink = Sink {
            out: &mut none,
            room: 0,
            rest: &mut self.plain,
        };
        let (used, stop) = process(
            &mut self.conn,
            &mut self.incoming,
            &mut sink,
            &mut self.outgoing,
            &mut self.read_closed,
            |_| (),
        )?;
        self.incoming.drain(..used);
        Ok(stop)
    }

    /// Frees the heap buffers that are empty: an idle connection keeps none.
    fn release_empty(&mut self) {
        if self.incoming.is_empty() && self.incoming.capacity() > 0 {
            self.incoming = Vec::new();
        }
        if self.outgoing.is_empty() && self.outgoing.capacity() > 0 {
            self.outgoing = Vec::new();
        }
        if self.plain.is_empty() && self.plain.capacity() > 0 {
            self.plain = BytesMut::new();
        }
    }

    /// Writes `outgoing` until it is empty (ready) or the socket stops taking bytes (pending,
    /// with `cx` woken when it takes more).
    fn poll_flush_outgoing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outgoing.is_empty() {
            ready!(self.tcp.poll_write_ready(cx))?;
            match self.tcp.try_write(&self.outgoing) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.outgoing.drain(..n);
                }
                // Readiness is cleared: the next round registers the waker.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        if self.outgoing.capacity() > 0 {
            self.outgoing = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Encrypts up to one record of `bufs` and writes it (what the socket does not take stays
    /// in `outgoing`). Returns the plaintext bytes taken. Call with `outgoing` empty.
    fn encrypt_and_send(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        WRITE_SCRATCH.with_borrow_mut(|scratch| {
            let (gathered, record) = scratch.split_at_mut(MAX_PLAINTEXT);
            let plaintext: &[u8] = match bufs {
                [] => return Ok(0),
                [first, ..] if bufs.len() == 1 || first.len() >= MAX_PLAINTEXT / 4 => {
                    &first[..first.len().min(MAX_PLAINTEXT)]
                }
                _ => {
                    let mut len = 0;
                    for buf in bufs {
                        let n = buf.len().min(MAX_PLAINTEXT - len);
                        gathered[len..len + n].copy_from_slice(&buf[..n]);
                        len += n;
                        if len == MAX_PLAINTEXT {
                            break;
                        }
                    }
                    &gathered[..len]
                }
            };
            if plaintext.is_empty() {
                return Ok(0);
            }
            self.encrypt_one(plaintext, record)?;
            Ok(plaintext.len())
        })
    }

    /// Encrypts `plaintext` (one record's worth) into `record` and writes it.
    fn encrypt_one(&mut self, plaintext: &[u8], record: &mut [u8]) -> io::Result<()> {
        let mut spill = Vec::new();
        let mut none = BytesMut::new();
        let mut sink = Sink {
            out: &mut none,
            room: 0,
            rest: &mut self.plain,
        };
        let (used, stop) = process(
            &mut self.conn,
            &mut self.incoming,
            &mut sink,
            &mut self.outgoing,
            &mut self.read_closed,
            |traffic| match traffic.encrypt(plaintext, record) {
                Ok(n) => Ok(n),
                // Not expected with one record's worth of plaintext: encrypted on the heap.
                Err(EncryptError::InsufficientSize(size)) => {
                    append_sized(&mut spill, size.required_size, |room| {
                        match traffic.encrypt(plaintext, room) {
                            Ok(n) => Ok(Ok(n)),
                            Err(EncryptError::InsufficientSize(size)) => {
                                Ok(Err(size.required_size))
                            }
                            Err(error) => Err(tls_error(error)),
                        }
                    })
                    .map(|()| 0)
                }
                Err(error) => Err(tls_error(error)),
            },
        )?;
        self.incoming.drain(..used);
        let encrypted = match stop {
            Stop::Traffic(result) => result?,
            Stop::Blocked | Stop::Closed => return Err(io::ErrorKind::BrokenPipe.into()),
        };
        let record = if spill.is_empty() {
            &record[..encrypted]
        } else {
            &spill[..]
        };
        if self.outgoing.is_empty() {
            // The usual case: written from the scratch buffer, keeping only what the socket
            // refuses.
            let sent = match self.tcp.try_write(record) {
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => 0,
                Err(error) => return Err(error),
            };
            self.outgoing.extend_from_slice(&record[sent..]);
        } else {
            // TLS output queued while processing (a key update) goes first.
            self.outgoing.extend_from_slice(record);
        }
        Ok(())
    }

    /// Reads from the socket and processes what arrived. `Ok(0)`: end of stream.
    fn read_and_process(&mut self, out: &mut BytesMut) -> io::Result<usize> {
        READ_SCRATCH.with_borrow_mut(|chunk| self.read_into(chunk, out))
    }

    /// [`TlsTcp::read_and_process`] with `chunk` to read into.
    fn read_into(&mut self, chunk: &mut [u8], out: &mut BytesMut) -> io::Result<usize> {
        let n = self.tcp.try_read(chunk)?;
        if n == 0 {
            self.read_closed = true;
            return Ok(0);
        }
        let mut sink = Sink {
            room: out.capacity().saturating_sub(out.len()).max(1),
            out,
            rest: &mut self.plain,
        };
        let before = sink.out.len();
        if self.incoming.is_empty() {
            // The usual case: whole records, decrypted where they were read.
            let (used, _) = process(
                &mut self.conn,
                &mut chunk[..n],
                &mut sink,
                &mut self.outgoing,
                &mut self.read_closed,
                |_| (),
            )?;
            self.incoming.extend_from_slice(&chunk[used..n]);
        } else {
            self.incoming.extend_from_slice(&chunk[..n]);
            let (used, _) = process(
                &mut self.conn,
                &mut self.incoming,
                &mut sink,
                &mut self.outgoing,
                &mut self.read_closed,
                |_| (),
            )?;
            self.incoming.drain(..used);
        }
        let handed = sink.out.len() - before;
        if !self.outgoing.is_empty() {
            // An alert or key update to answer: sent now if the socket takes it, else with the
            // next write.
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(Err(error)) = self.poll_flush_outgoing(&mut cx) {
                return Err(error);
            }
        }
        self.release_empty();
        Ok(handed)
    }
}

impl Transport for TlsTcp {
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        read: bool,
        out: &mut OutBuf,
    ) -> Poll<io::Result<Progress>> {
        let mut written = 0;
        loop {
            match self.poll_flush_outgoing(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => break,
            }
            if out.is_empty() {
                break;
            }
            let mut slices = [IoSlice::new(&[]); 64];
            let count = out.io_slices(&mut slices);
            match self.encrypt_and_send(&slices[..count]) {
                Ok(n) => {
                    out.advance(n);
                    written += n;
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        if written > 0 {
            return Poll::Ready(Ok(Progress::Writable(written)));
        }
        if read {
            if !self.plain.is_empty() || self.read_closed {
                return Poll::Ready(Ok(Progress::Readable));
            }
            match self.tcp.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(Progress::Readable)),
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            if !self.plain.is_empty() {
                let room = buf.capacity().saturating_sub(buf.len()).max(1);
                let n = self.plain.len().min(room);
                buf.extend_from_slice(&self.plain[..n]);
                self.plain.advance(n);
                self.release_empty();
                return Ok(n);
            }
            if self.read_closed {
                return Ok(0);
            }
            match self.read_and_process(buf)? {
                // Only part of a record arrived, or only TLS messages: read on (until the
                // socket has nothing, `WouldBlock`).
                0 if !self.read_closed => continue,
                n => return Ok(n),
            }
        }
    }

    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_flush_outgoing(&mut cx) {
            Poll::Ready(Ok(())) => self.encrypt_and_send(bufs),
            Poll::Ready(Err(error)) => Err(error),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_queued {
            self.close_queued = true;
            let mut alert = [0u8; 64];
            let mut none = BytesMut::new();
            let mut sink = Sink {
                out: &mut none,
                room: 0,
                rest: &mut self.plain,
            };
            // Best effort: a connection in a state that cannot send it just closes.
            if let Ok((used, Stop::Traffic(Ok(n)))) = process(
                &mut self.conn,
                &mut self.incoming,
                &mut sink,
                &mut self.outgoing,
                &mut self.read_closed,
                |traffic| traffic.queue_close_notify(&mut alert),
            ) {
                self.incoming.drain(..used);
                self.outgoing.extend_from_slice(&alert[..n]);
            }
        }
        ready!(self.poll_flush_outgoing(cx))?;
        Poll::Ready(
            match socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write) {
                Err(error) if error.kind() == io::ErrorKind::NotConnected => Ok(()),
                other => other,
            },
        )
    }

    fn wants_flush(&self) -> bool {
        !self.outgoing.is_empty()
    }
}
