//! Plain TCP, registered with the reactor for **reading only**; the registration asks for write
//! readiness too only while output waits for the socket (a connection whose output is
//! backlogged), and goes back to reading only once the output is written.
//!
//! Why not Tokio's `TcpStream`: it registers every socket for readable and writable readiness
//! at once. The client's ACK of our last output then puts the socket on epoll's ready list, and
//! when data arrives later the socket keeps that earlier place: one `epoll_wait` reports it
//! before a socket that got its data first, and its task runs first. A SUBSCRIBE from one client
//! followed microseconds later by a PUBLISH from another is then handled in the wrong order and
//! the subscriber misses the message (see `docs/design/backpressure.md`, "Arrival order"). A
//! socket registered for reading only enters the ready list when its data arrives. Changing the
//! interest means registering again (Tokio has no way to modify it): two `epoll_ctl` calls when
//! output starts waiting and two when it is written, no extra descriptor. A new registration
//! reports the socket's current readiness, so no event is lost in between.

use super::{Progress, Transport};
use bytes::BytesMut;
use hayate_session::OutBuf;
use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A plain TCP connection. See the module docs.
#[derive(Debug)]
pub(crate) struct Tcp {
    /// Always `Some` outside `set_write_interest`.
    fd: Option<AsyncFd<TcpStream>>,
    /// The registration includes write readiness.
    writing: bool,
}

impl Tcp {
    /// Takes over an accepted socket (non-blocking) and registers it for reading.
    pub(crate) fn new(stream: tokio::net::TcpStream) -> io::Result<Tcp> {
        Ok(Tcp {
            fd: Some(register(stream.into_std()?, Interest::READABLE)?),
            writing: false,
        })
    }

    fn fd(&self) -> &AsyncFd<TcpStream> {
        self.fd.as_ref().expect("registered")
    }

    /// Registers the socket again, for reading and (with `writing`) writing.
    fn set_write_interest(&mut self, writing: bool) -> io::Result<()> {
        let stream = self.fd.take().expect("registered").into_inner();
        let interest = if writing {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        self.fd = Some(register(stream, interest)?);
        self.writing = writing;
        Ok(())
    }
}

/// Registers a socket with the reactor for `interest`.
fn register(stream: TcpStream, interest: Interest) -> io::Result<AsyncFd<TcpStream>> {
    #[allow(unsafe_code)]
    // SAFETY: the `AsyncFd` takes ownership of `stream`, whose descriptor is valid and open,
    // is closed only when the stream is dropped (with the `AsyncFd`), and is the same for the
    // stream's whole life, as `register_with_interest` requires.
    let registered = unsafe { AsyncFd::register_with_interest(stream, interest) };
    registered.map_err(|error| error.into_parts().1)
}

/// Writes as much of `out` as the socket takes now.
fn write_out(stream: &TcpStream, out: &mut OutBuf) -> io::Result<usize> {
    let mut written = 0;
    while !out.is_empty() {
        let mut slices = [IoSlice::new(&[]); 64];
        let count = out.io_slices(&mut slices);
        match (&*stream).write_vectored(&slices[..count]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                out.advance(n);
                written += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && written > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

impl Transport for Tcp {
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        read: bool,
        out: &mut OutBuf,
    ) -> Poll<io::Result<Progress>> {
        let want_write = !out.is_empty();
        if want_write != self.writing {
            // Changed before any waker is stored, so none is lost with the old registration.
            if let Err(error) = self.set_write_interest(want_write) {
                return Poll::Ready(Err(error));
            }
        }
        let fd = self.fd();
        if read {
            match fd.poll_read_ready(cx) {
                // Readiness stays set until a read finds nothing (`try_read_buf`).
                Poll::Ready(Ok(_)) => return Poll::Ready(Ok(Progress::Readable)),
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
        }
        if !want_write {
            return Poll::Pending;
        }
        loop {
            let mut guard = match fd.poll_write_ready(cx) {
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            };
            // A `WouldBlock` clears the readiness, and the loop registers the waker again.
            match guard.try_io(|stream| write_out(stream.get_ref(), out)) {
                Ok(Ok(written)) => return Poll::Ready(Ok(Progress::Writable(written))),
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                Err(_would_block) => continue,
            }
        }
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        // Called after `poll_progress` reported the socket readable, so readiness is normally
        // set and the no-op waker is never stored; if it is (readiness already cleared), the
        // connection's next `poll_progress` stores its own waker before the task sleeps.
        let mut cx = Context::from_waker(Waker::noop());
        let mut guard = match self.fd().poll_read_ready(&mut cx) {
            Poll::Ready(Ok(guard)) => guard,
            Poll::Ready(Err(error)) => return Err(error),
            Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
        };
        let room = buf.spare_capacity_mut().len();
        let read = guard.try_io(|stream| {
            let sock = socket2::SockRef::from(stream.get_ref());
            loop {
                match sock.recv(buf.spare_capacity_mut()) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            }
        });
        let n = match read {
            Ok(result) => result?,
            // `WouldBlock`: readiness cleared by `try_io`.
            Err(_would_block) => return Err(io::ErrorKind::WouldBlock.into()),
        };
        #[allow(unsafe_code)]
        // SAFETY: `recv` initialised the first `n` bytes of the spare capacity (it never reports
        // more than it was given), so they may become part of the buffer.
        unsafe {
            buf.set_len(buf.len() + n);
        }
        if n > 0 && n < room {
            // A short read emptied the socket's receive queue: readiness is cleared now instead
            // of by one more `recv` that would only return `WouldBlock` (one syscall per
            // wake-up saved). Data arriving after that `recv` raises a new edge, which sets
            // readiness again (Tokio clears only the readiness this guard observed).
            guard.clear_ready();
        }
        Ok(n)
    }

    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // Written directly: write readiness is only waited for (in `poll_progress`) once the
        // socket stopped taking bytes.
        self.fd().get_ref().write_vectored(bufs)
    }

    fn poll_shutdown(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(match self.fd().get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}
