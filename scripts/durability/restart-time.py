#!/usr/bin/env python3
"""Restart time and memory with many queued messages (docs/DURABILITY.md, "Restart").

Fills a broker's store through MQTT, then restarts it and measures how long until it accepts
a connection (TCP accept and a CONNACK), and its resident memory then and a few seconds later:

1. start the broker on a fresh data directory;
2. --sessions persistent v3.1.1 sessions (clean session off) each subscribe at QoS 1 to their
   own topic and disconnect;
3. one publisher sends --per-session QoS 1 messages of --payload bytes to every topic,
   pipelined (a window of PUBACKs outstanding); every message is queued for one offline
   session;
4. the broker is stopped (--stop kill: SIGKILL, the journal is replayed at start; term:
   SIGTERM, a clean stop) and started again; the time to the first CONNACK and VmRSS are taken;
5. one session reconnects and must receive its --per-session messages.

Usage (Hayate, or Mosquitto with `persistence true` for comparison; Mosquitto only saves its
state at a clean stop, so use --stop term with it):

    scripts/durability/restart-time.py [--hayate target/release/hayate] [--sessions 10000]
        [--per-session 100] [--stop kill|term] [--broker hayate|mosquitto]
"""
import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def varint(n):
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def packet(first, body):
    return bytes([first]) + varint(len(body)) + body


def connect_packet(client_id, clean):
    flags = 0x02 if clean else 0x00
    body = utf8("MQTT") + bytes([4, flags]) + struct.pack(">H", 60) + utf8(client_id)
    return packet(0x10, body)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def read_packet(sock):
    first = recv_exact(sock, 1)[0]
    mult, length = 1, 0
    while True:
        b = recv_exact(sock, 1)[0]
        length += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
    return first, recv_exact(sock, length)


def session(port, client_id, clean=False):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_packet(client_id, clean))
    first, body = read_packet(sock)
    assert first >> 4 == 2 and body[1] == 0, f"CONNACK {body!r}"
    return sock, bool(body[0] & 1)


def start(args, data_dir, log):
    port = free_port()
    if args.broker == "hayate":
        cmd = [args.hayate, "serve", "--log-level", "warn", "-l", f"127.0.0.1:{port}",
               "--data-dir", data_dir]
    else:
        conf = os.path.join(data_dir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                    f"persistence_location {data_dir}/\nmax_queued_messages 0\n"
                    "max_inflight_messages 0\nlog_type error\nlog_type warning\n")
        cmd = ["mosquitto", "-c", conf]
    began = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = began + 300
    while True:
        if proc.poll() is not None:
            sys.exit(f"broker exited: {proc.returncode}")
        try:
            sock, _ = session(port, "restart-probe", clean=True)
            sock.close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                sys.exit("broker did not start")
            time.sleep(0.005)
    return proc, port, time.monotonic() - began


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def fill(port, sessions, per_session, payload, window):
    for i in range(sessions):
        sock, _ = session(port, f"rt-{i}")
        topic = f"rt/{i}"
        sock.sendall(packet(0x82, struct.pack(">H", 1) + utf8(topic) + bytes([1])))
        first, _ = read_packet(sock)
        assert first >> 4 == 9, "SUBACK"
        sock.sendall(b"\xe0\x00")
        sock.close()
    pub, _ = session(port, "rt-publisher", clean=True)
    body = os.urandom(payload)
    total = sessions * per_session
    sent = acked = 0
    pid = 0
    out = bytearray()
    while acked < total:
        while sent < total and sent - acked < window:
            pid = pid % 65535 + 1
            topic = f"rt/{sent % sessions}"
            out += packet(0x32, utf8(topic) + struct.pack(">H", pid) + body)
            sent += 1
        if out:
            pub.sendall(out)
            out.clear()
        first, _ = read_packet(pub)
        if first >> 4 == 4:
            acked += 1
    pub.close()
    return total


def drain(port, client_id, expected):
    sock, present = session(port, client_id)
    sock.settimeout(10)
    got = 0
    try:
        while got < expected:
            first, body = read_packet(sock)
            if first >> 4 == 3:
                got += 1
                tlen = struct.unpack(">H", body[:2])[0]
                pid = body[2 + tlen:4 + tlen]
                sock.sendall(b"\x40\x02" + pid)
    except socket.timeout:
        pass
    sock.close()
    return present, got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hayate", default="target/release/hayate")
    ap.add_argument("--broker", choices=("hayate", "mosquitto"), default="hayate")
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--payload", type=int, default=64)
    ap.add_argument("--window", type=int, default=2_000)
    ap.add_argument("--stop", choices=("kill", "term"), default="kill")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="hayate-restart-")
    log = open(os.path.join(data, "broker.log"), "w")
    proc = None
    try:
        proc, port, _ = start(args, data, log)
        t0 = time.monotonic()
        total = fill(port, args.sessions, args.per_session, args.payload, args.window)
        fill_secs = time.monotonic() - t0
        rss_full = rss_mib(proc.pid)
        if args.stop == "kill":
            proc.send_signal(signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait()
        disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
        proc, port, secs = start(args, data, log)
        rss_start = rss_mib(proc.pid)
        time.sleep(3)
        rss_later = rss_mib(proc.pid)
        present, got = drain(port, "rt-0", args.per_session)
        print(f"{args.broker}: {total:,} messages queued for {args.sessions:,} offline sessions "
              f"in {fill_secs:.1f} s ({total / fill_secs:,.0f} msg/s); RSS {rss_full:.0f} MiB; "
              f"data dir {disk / 2**20:.0f} MiB")
        print(f"restart after {args.stop}: CONNACK after {secs:.2f} s; RSS {rss_start:.0f} MiB "
              f"then, {rss_later:.0f} MiB 3 s later")
        print(f"session rt-0: present {present}, {got} of {args.per_session} messages")
        if not present or got != args.per_session:
            sys.exit(1)
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", data])


if __name__ == "__main__":
    main()
