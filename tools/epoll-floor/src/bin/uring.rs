//! Experiment: the floor of CPU per message for an io_uring loop in the seed shape (one thread,
//! one Recv SQE armed per connection, sends to subscribers coalesced per completion batch).
use io_uring::{opcode, squeue, types, IoUring};
use std::net::TcpListener;
use std::os::fd::AsRawFd;

const ACCEPT: u64 = 1 << 62;
const RECV: u64 = 2 << 62;
const SEND: u64 = 3 << 62;
const MASK: u64 = (1 << 62) - 1;

struct Conn {
    fd: i32,
    rbuf: Box<[u8; 2048]>,
    buf: Vec<u8>,
    out: Vec<u8>,
    sending: Vec<u8>,
    sent: usize,
    in_send: bool,
}

fn push(ring: &mut IoUring, e: squeue::Entry) {
    // SAFETY: every buffer an entry points to stays allocated and untouched until the entry's
    // completion: a connection (with its boxed receive buffer) is dropped only on the
    // completion of its last receive, with a send still in flight its `sending` vector is
    // leaked, and `sending` is only swapped while no send is in flight.
    unsafe {
        while ring.submission().push(&e).is_err() {
            ring.submit().unwrap();
        }
    }
}

fn recv(ring: &mut IoUring, id: usize, c: &mut Conn) {
    let e = opcode::Recv::new(types::Fd(c.fd), c.rbuf.as_mut_ptr(), 2048)
        .build()
        .user_data(RECV | id as u64);
    push(ring, e);
}

fn send(ring: &mut IoUring, id: usize, c: &mut Conn) {
    let e = opcode::Send::new(
        types::Fd(c.fd),
        c.sending[c.sent..].as_ptr(),
        (c.sending.len() - c.sent) as u32,
    )
    .build()
    .user_data(SEND | id as u64);
    push(ring, e);
    c.in_send = true;
}

fn main() {
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:1883".into());
    let l = TcpListener::bind(addr).unwrap();
    let mut ring = IoUring::new(8192).unwrap();
    let acc = opcode::AcceptMulti::new(types::Fd(l.as_raw_fd()))
        .build()
        .user_data(ACCEPT);
    push(&mut ring, acc);
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut subs: Vec<usize> = Vec::new();
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(8192);
    loop {
        ring.submit_and_wait(1).unwrap();
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &done {
            let id = (ud & MASK) as usize;
            match ud & !MASK {
                ACCEPT => {
                    if res < 0 {
                        continue;
                    }
                    let one: libc::c_int = 1;
                    // SAFETY: `res` is the socket the kernel just accepted; `one` outlives the call.
                    unsafe {
                        libc::setsockopt(
                            res,
                            libc::IPPROTO_TCP,
                            libc::TCP_NODELAY,
                            &one as *const _ as *const _,
                            4,
                        )
                    };
                    let id = conns.len();
                    conns.push(Some(Conn {
                        fd: res,
                        rbuf: Box::new([0; 2048]),
                        buf: Vec::new(),
                        out: Vec::new(),
                        sending: Vec::new(),
                        sent: 0,
                        in_send: false,
                    }));
                    recv(&mut ring, id, conns[id].as_mut().unwrap());
                }
                RECV => {
                    let Some(c) = conns[id].as_mut() else {
                        continue;
                    };
                    if res <= 0 {
                        // SAFETY: the connection's own socket, closed once (the slot is emptied).
                        unsafe { libc::close(c.fd) };
                        if c.in_send {
                            // The kernel may still read it: never freed.
                            std::mem::forget(std::mem::take(&mut c.sending));
                        }
                        conns[id] = None;
                        subs.retain(|&s| s != id);
                        continue;
                    }
                    let n = res as usize;
                    c.buf.extend_from_slice(&c.rbuf[..n]);
                    let mut pos = 0;
                    let mut fwd: Vec<(usize, usize)> = Vec::new();
                    let mut reply: Vec<u8> = Vec::new();
                    let mut sub = false;
                    loop {
                        let b = &c.buf[pos..];
                        if b.len() < 2 {
                            break;
                        }
                        let (mut len, mut mult, mut i) = (0usize, 1usize, 1usize);
                        loop {
                            if i >= b.len() {
                                len = usize::MAX;
                                break;
                            }
                            let d = b[i];
                            len += (d & 0x7f) as usize * mult;
                            mult *= 128;
                            i += 1;
                            if d & 0x80 == 0 {
                                break;
                            }
                        }
                        if len == usize::MAX || b.len() < i + len {
                            break;
                        }
                        match b[0] >> 4 {
                            1 => reply.extend_from_slice(&[0x20, 2, 0, 0]),
                            8 => {
                                reply.extend_from_slice(&[0x90, 3, b[i], b[i + 1], 0]);
                                sub = true;
                            }
                            3 => fwd.push((pos, i + len)),
                            12 => reply.extend_from_slice(&[0xd0, 0]),
                            _ => {}
                        }
                        pos += i + len;
                    }
                    // SAFETY: `reply` is valid for `reply.len()` bytes during the call.
                    if !reply.is_empty() {
                        unsafe { libc::write(c.fd, reply.as_ptr() as *const _, reply.len()) };
                    }
                    if sub {
                        subs.push(id);
                    }
                    let data = std::mem::take(&mut c.buf);
                    c.buf = data[pos..].to_vec();
                    recv(&mut ring, id, c);
                    for &(p, l) in &fwd {
                        for &s in &subs {
                            if let Some(sc) = conns[s].as_mut() {
                                sc.out.extend_from_slice(&data[p..p + l]);
                            }
                        }
                    }
                }
                SEND => {
                    let Some(c) = conns[id].as_mut() else {
                        continue;
                    };
                    c.in_send = false;
                    if res < 0 {
                        continue;
                    }
                    c.sent += res as usize;
                    if c.sent < c.sending.len() {
                        send(&mut ring, id, c);
                    } else {
                        c.sending.clear();
                        c.sent = 0;
                    }
                }
                _ => {}
            }
        }
        for &s in &subs {
            if let Some(c) = conns[s].as_mut() {
                if !c.in_send && !c.out.is_empty() {
                    std::mem::swap(&mut c.out, &mut c.sending);
                    c.sent = 0;
                    send(&mut ring, s, c);
                }
            }
        }
    }
}
