//! Byte transports under the MQTT connection: plain TCP, TLS (rustls), TLS-PSK (OpenSSL) and
//! WebSocket over either. The connection task sees one small interface, [`Transport`], in the
//! readiness style: wait until reading or writing can make progress, then read or write what
//! is possible now without waiting.
//!
//! Plain TCP implements it directly on the socket ([`tcp::Tcp`]: readiness from epoll, read
//! interest registered apart from write interest so epoll reports sockets in the order their
//! data arrived, no buffer while idle). Certificate TLS does too ([`tls_tcp::TlsTcp`]: rustls's
//! unbuffered API, records decrypted and encrypted in per-thread scratch buffers, no buffer
//! while idle). Every other stream (TLS-PSK, WebSocket) is an `AsyncRead + AsyncWrite` and goes
//! through [`Polled`], which drives it with the task's waker while waiting and with a no-op
//! waker for the non-blocking calls.
//!
//! This module owns framing below MQTT (TLS records, WebSocket frames) and the handshakes; it
//! knows nothing of MQTT packets, sessions or routing.

pub(crate) mod psk;
pub(crate) mod tcp;
pub(crate) mod tls;
pub(crate) mod tls_tcp;
pub(crate) mod ws;

use bytes::BytesMut;
use hayate_session::{Arrival, OutBuf};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a wait on the transport found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Reading can make progress (data, end of stream or an error is waiting).
    Readable,
    /// Writing can make progress; `n` bytes of the output were already written while waiting.
    Writable(usize),
}

/// The interface the connection task drives. See the module docs.
pub(crate) trait Transport: Send + Unpin + 'static {
    /// Waits until reading (when `read`) or writing `out` (when not empty) can make progress.
    /// May write part of `out` itself (reported in [`Progress::Writable`]).
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        read: bool,
        out: &mut OutBuf,
    ) -> Poll<io::Result<Progress>>;

    /// Reads what is available now into `buf`'s spare capacity. `Ok(0)` is the end of the
    /// stream; `WouldBlock` means nothing is available.
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize>;

    /// When the bytes of the last successful [`Transport::try_read_buf`] reached the broker
    /// (`docs/design/arrival-order.md`): the kernel's receive timestamp where the transport
    /// has one, else the clock now.
    fn arrival(&self) -> Arrival {
        arrival_now()
    }

    /// Writes what the transport takes now. `WouldBlock` means nothing was taken.
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Ends the sending direction (TCP FIN, TLS close_notify, WebSocket close).
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// True while written bytes may still sit inside the transport (TLS records, WebSocket
    /// frames): the connection keeps waiting for write progress until they are out.
    fn wants_flush(&self) -> bool {
        false
    }
}

/// The clock now as an [`Arrival`], for input without a kernel receive timestamp.
pub(crate) fn arrival_now() -> Arrival {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Arrival::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
}

/// An `AsyncRead + AsyncWrite` stream behind a box: TLS, TLS-PSK and WebSocket connections.
pub(crate) type BoxedStream = Pin<Box<dyn AsyncStream>>;

/// What a boxed stream must be.
pub(crate) trait AsyncStream: AsyncRead + AsyncWrite + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + 'static> AsyncStream for T {}

/// Size of the stack buffer a readiness wait reads into: a poll-based stream can only tell
/// that it is readable by reading.
const PROBE_READ: usize = 4096;

/// Drives a poll-based stream through [`Transport`]. Bytes read while waiting are kept until
/// the next `try_read_buf`; nothing is allocated while the connection is idle.
pub(crate) struct Polled {
    inner: BoxedStream,
    /// Read while waiting for readiness, not yet handed out.
    stash: BytesMut,
    /// Written but possibly still buffered inside the stream (TLS records): flush when next
    /// waiting.
    needs_flush: bool,
}

impl Polled {
    pub(crate) fn new(inner: BoxedStream) -> Polled {
        Polled {
            inner,
            stash: BytesMut::new(),
            needs_flush: false,
        }
    }
}

impl Transport for Polled {
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        read: bool,
        out: &mut OutBuf,
    ) -> Poll<io::Result<Progress>> {
        let mut written = 0;
        while !out.is_empty() {
            let mut slices = [IoSlice::new(&[]); 64];
            let count = out.io_slices(&mut slices);
            match self
                .inner
                .as_mut()
                .poll_write_vectored(cx, &slices[..count])
            {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    out.advance(n);
                    written += n;
                    self.needs_flush = true;
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => break,
            }
        }
        if self.needs_flush {
            match self.inner.as_mut().poll_flush(cx) {
                Poll::Ready(Ok(())) => self.needs_flush = false,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
        }
        if written > 0 {
            return Poll::Ready(Ok(Progress::Writable(written)));
        }
        if read {
            if !self.stash.is_empty() {
                return Poll::Ready(Ok(Progress::Readable));
            }
            let mut probe = [0u8; PROBE_READ];
            let mut buf = ReadBuf::new(&mut probe);
            match self.inner.as_mut().poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    // An empty read is the end of the stream; try_read_buf reports it again.
                    self.stash.extend_from_slice(buf.filled());
                    return Poll::Ready(Ok(Progress::Readable));
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if !self.stash.is_empty() {
            let n = self.stash.len();
            buf.extend_from_slice(&self.stash);
            // Drop the allocation: an idle connection keeps no buffer.
            self.stash = BytesMut::new();
            return Ok(n);
        }
        let mut cx = Context::from_waker(Waker::noop());
        let spare = buf.spare_capacity_mut();
        let mut read_buf = ReadBuf::uninit(spare);
        match self.inner.as_mut().poll_read(&mut cx, &mut read_buf) {
            Poll::Ready(Ok(())) => {
                let n = read_buf.filled().len();
                // SAFETY: `poll_read` initialised and filled the first `n` bytes of the spare
                // capacity (ReadBuf tracks that); they are now part of the buffer.
                #[allow(unsafe_code)]
                unsafe {
                    buf.set_len(buf.len() + n);
                }
                Ok(n)
            }
            Poll::Ready(Err(error)) => Err(error),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut cx = Context::from_waker(Waker::noop());
        let result = match self.inner.as_mut().poll_write_vectored(&mut cx, bufs) {
            Poll::Ready(Ok(n)) => {
                self.needs_flush = true;
                Ok(n)
            }
            Poll::Ready(Err(error)) => Err(error),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        };
        if self.needs_flush {
            if let Poll::Ready(Ok(())) = self.inner.as_mut().poll_flush(&mut cx) {
                self.needs_flush = false;
            }
        }
        result
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }

    fn wants_flush(&self) -> bool {
        self.needs_flush
    }
}

/// A stream with some bytes already read from it (by a handshake that read past its end)
/// handed out first.
pub(crate) struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: BytesMut, inner: S) -> Prefixed<S> {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let chunk = self.prefix.split_to(n);
            buf.put_slice(&chunk);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
