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
//!
//! With arrival order kept (`[server] keep_arrival_order`), the socket asks the kernel to stamp
//! received data with the time it arrived (`SO_TIMESTAMPNS`) and reads with `recvmsg`, so
//! [`Transport::arrival`] tells when the bytes reached the machine, not when a worker thread
//! got round to them (`docs/design/arrival-order.md`).

use super::{Progress, Transport};
use bytes::BytesMut;
use hayate_session::{Arrival, OutBuf};
use std::io::{self, IoSlice, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
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
    /// Reads ask for the kernel's receive timestamp.
    stamped: bool,
    /// The receive timestamp of the last read (nanoseconds since the Unix epoch; 0 unknown).
    arrival: u64,
}

impl Tcp {
    /// Takes over an accepted socket (non-blocking) and registers it for reading; with
    /// `stamped`, reads report the kernel's receive timestamps.
    pub(crate) fn new(stream: tokio::net::TcpStream, stamped: bool) -> io::Result<Tcp> {
        let stream = stream.into_std()?;
        if stamped {
            enable_receive_timestamps(&stream)?;
        }
        Ok(Tcp {
            fd: Some(register(stream, Interest::READABLE)?),
            writing: false,
            stamped,
            arrival: 0,
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

/// Asks the kernel to attach each received segment's arrival time to reads (`SO_TIMESTAMPNS`).
fn enable_receive_timestamps(stream: &TcpStream) -> io::Result<()> {
    let on: libc::c_int = 1;
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open (owned by `stream`), and the option value points to a
    // live `c_int` whose size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            std::ptr::from_ref(&on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `recv` into `buf` that also returns the receive timestamp the kernel attached (0 when it
/// attached none).
fn recv_stamped(stream: &TcpStream, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, u64)> {
    // Room for one control message holding a `timespec`, aligned for `cmsghdr`.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    #[allow(unsafe_code)]
    // SAFETY: `msghdr` is a plain C struct for which all zeroes is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open; `msg` points to one iovec over `buf` (writable for its
    // length) and to `control` (writable for `msg_controllen` bytes), all alive for the call.
    let read = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
    let read = usize::try_from(read).map_err(|_| io::Error::last_os_error())?;
    let mut stamp = 0;
    #[allow(unsafe_code)]
    // SAFETY: `msg` was filled by `recvmsg`; the CMSG macros walk only the `msg_controllen`
    // bytes it reported inside `control`, and a `SCM_TIMESTAMPNS` message carries one
    // `timespec`, read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let time: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = (time.tv_sec as u64)
                    .saturating_mul(1_000_000_000)
                    .saturating_add(time.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((read, stamp))
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
        let fd = self.fd.as_ref().expect("registered");
        let mut guard = match fd.poll_read_ready(&mut cx) {
            Poll::Ready(Ok(guard)) => guard,
            Poll::Ready(Err(error)) => return Err(error),
            Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
        };
        let room = buf.spare_capacity_mut().len();
        let stamped = self.stamped;
        let read = guard.try_io(|stream| loop {
            let result = if stamped {
                recv_stamped(stream.get_ref(), buf.spare_capacity_mut())
            } else {
                let sock = socket2::SockRef::from(stream.get_ref());
                sock.recv(buf.spare_capacity_mut()).map(|n| (n, 0))
            };
            match result {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        });
        let (n, stamp) = match read {
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
        self.arrival = stamp;
        Ok(n)
    }

    fn arrival(&self) -> Arrival {
        if self.arrival != 0 {
            Arrival::from_nanos(self.arrival)
        } else {
            super::arrival_now()
        }
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
