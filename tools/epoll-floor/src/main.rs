//! Experiment: the floor of CPU per message for an epoll loop in the seed shape.
//! One thread, mio, QoS 0 only: CONNECT->CONNACK, SUBSCRIBE->SUBACK, PUBLISH forwarded raw to
//! every subscriber, writes coalesced per epoll batch.
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{ErrorKind, Read, Write};

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
    sub: bool,
}

fn main() {
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:1883".into());
    let mut poll = Poll::new().unwrap();
    let mut l = TcpListener::bind(addr.parse().unwrap()).unwrap();
    poll.registry()
        .register(&mut l, Token(usize::MAX), Interest::READABLE)
        .unwrap();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut subs: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut dirty = false;
    let mut scratch = [0u8; 2048];
    let spin_us: u64 = std::env::var("SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    loop {
        let spin_until = std::time::Instant::now() + std::time::Duration::from_micros(spin_us);
        loop {
            poll.poll(&mut events, Some(std::time::Duration::ZERO))
                .unwrap();
            if !events.is_empty() || std::time::Instant::now() >= spin_until {
                break;
            }
        }
        if events.is_empty() {
            poll.poll(&mut events, None).unwrap();
        }
        for ev in events.iter() {
            if ev.token() == Token(usize::MAX) {
                loop {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nodelay(true).ok();
                            let id = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            poll.registry()
                                .register(&mut s, Token(id), Interest::READABLE)
                                .unwrap();
                            conns[id] = Some(Conn {
                                s,
                                buf: Vec::new(),
                                out: Vec::new(),
                                sub: false,
                            });
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                continue;
            }
            let id = ev.token().0;
            let mut close = false;
            loop {
                let Some(c) = conns[id].as_mut() else { break };
                match c.s.read(&mut scratch) {
                    Ok(0) => {
                        close = true;
                        break;
                    }
                    Ok(n) => {
                        c.buf.extend_from_slice(&scratch[..n]);
                        // parse packets
                        let mut pos = 0;
                        let mut fwd: Vec<(usize, usize)> = Vec::new();
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
                            let t = b[0] >> 4;
                            match t {
                                1 => c.out.extend_from_slice(&[0x20, 2, 0, 0]),
                                8 => {
                                    let pid = [b[i], b[i + 1]];
                                    c.out.extend_from_slice(&[0x90, 3, pid[0], pid[1], 0]);
                                    c.sub = true;
                                    subs.push(id);
                                }
                                3 => fwd.push((pos, i + len)),
                                12 => c.out.extend_from_slice(&[0xd0, 0]),
                                14 => {
                                    close = true;
                                }
                                _ => {}
                            }
                            pos += i + len;
                        }
                        let data = std::mem::take(&mut c.buf);
                        if !c.out.is_empty() {
                            let _ = c.s.write(&c.out);
                            c.out.clear();
                        }
                        for &(p, l) in &fwd {
                            for &s in &subs {
                                if let Some(sc) = conns[s].as_mut() {
                                    sc.out.extend_from_slice(&data[p..p + l]);
                                    dirty = true;
                                }
                            }
                        }
                        let c = conns[id].as_mut().unwrap();
                        c.buf = data[pos..].to_vec();
                        if n < scratch.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        close = true;
                        break;
                    }
                }
            }
            if close {
                if let Some(mut c) = conns[id].take() {
                    poll.registry().deregister(&mut c.s).ok();
                }
                subs.retain(|&s| s != id);
                free.push(id);
            }
        }
        if dirty {
            for &s in &subs {
                if let Some(sc) = conns[s].as_mut() {
                    if !sc.out.is_empty() {
                        match sc.s.write(&sc.out) {
                            Ok(n) => {
                                sc.out.drain(..n);
                            }
                            Err(_) => {}
                        }
                    }
                }
            }
            dirty = subs
                .iter()
                .any(|&s| conns[s].as_ref().is_some_and(|c| !c.out.is_empty()));
        }
    }
}
