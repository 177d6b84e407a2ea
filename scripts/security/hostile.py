#!/usr/bin/env python3
"""Opens thousands of hostile connections against a running broker and measures what an
honest client sees meanwhile, and the broker's memory (issue 5: "10,000 hostile connections
leave the broker serving honest clients with bounded memory").

    scripts/security/hostile.py --port 1883 --tls-port 8883 --pid $(pidof hayate) -n 10000

Kinds, in equal shares: silent sockets (slowloris: never send CONNECT), half a CONNECT,
an oversized remaining length (268,435,455 bytes announced), half a TLS ClientHello (on
--tls-port, when given), and connected clients flooding SUBSCRIBE. While they are open an
honest client publishes QoS 1 messages to itself every 100 ms through the broker (with
mosquitto_pub/mosquitto_sub's protocol done here by hand, to stay dependency-free) and the
round-trip times are reported, with the broker's RSS before, at the peak and after, and how
many hostile sockets the broker closed within the connect timeout.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import struct
import sys
import time


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def encode_len(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n % 128
        n //= 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def connect_packet(client_id: str) -> bytes:
    body = utf8("MQTT") + bytes([4, 0x02]) + struct.pack("!H", 60) + utf8(client_id)
    return bytes([0x10]) + encode_len(len(body)) + body


def subscribe_packet(packet_id: int, filters: list[str], qos: int = 1) -> bytes:
    body = struct.pack("!H", packet_id) + b"".join(utf8(f) + bytes([qos]) for f in filters)
    return bytes([0x82]) + encode_len(len(body)) + body


def publish_packet(topic: str, payload: bytes, packet_id: int) -> bytes:
    body = utf8(topic) + struct.pack("!H", packet_id) + payload
    return bytes([0x32]) + encode_len(len(body)) + body


def read_packet(sock: socket.socket, timeout: float) -> tuple[int, bytes]:
    sock.settimeout(timeout)
    header = sock.recv(1)
    if not header:
        raise ConnectionError("closed")
    length, shift = 0, 0
    while True:
        b = sock.recv(1)[0]
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return header[0], body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls-port", type=int)
    ap.add_argument("--pid", type=int, required=True, help="broker pid (RSS from /proc)")
    ap.add_argument("-n", type=int, default=10000, help="hostile connections in total")
    ap.add_argument("--hold", type=float, default=15.0, help="seconds to keep the attack up")
    args = ap.parse_args()

    kinds = ["silent", "half-connect", "oversized", "subscribe-flood"] + (["half-tls"] if args.tls_port else [])
    per_kind = args.n // len(kinds)
    rss_before = rss_kib(args.pid)
    hostile: list[tuple[str, socket.socket]] = []
    started = time.monotonic()
    for kind in kinds:
        for i in range(per_kind):
            port = args.tls_port if kind == "half-tls" else args.port
            s = socket.create_connection((args.host, port))
            s.setblocking(True)
            if kind == "half-connect":
                s.sendall(bytes([0x10, 0x20, 0x00, 0x04]) + b"MQ")
            elif kind == "oversized":
                s.sendall(bytes([0x10, 0xFF, 0xFF, 0xFF, 0x7F]))
            elif kind == "half-tls":
                s.sendall(bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]))
            elif kind == "subscribe-flood":
                s.sendall(connect_packet(f"flood-{i}"))
                for pid in range(1, 21):
                    s.sendall(subscribe_packet(pid, [f"flood/{i}/{pid}/{k}" for k in range(10)]))
            hostile.append((kind, s))
    opened = time.monotonic() - started
    print(f"opened {len(hostile)} hostile connections ({per_kind} each of {', '.join(kinds)}) in {opened:.1f} s")

    honest = socket.create_connection((args.host, args.port))
    honest.sendall(connect_packet("honest"))
    read_packet(honest, 10)
    honest.sendall(subscribe_packet(1, ["honest/echo"]))
    read_packet(honest, 10)
    rtts: list[float] = []
    failures = 0
    peak = rss_before
    closed_by_broker = {k: 0 for k in kinds}
    open_socks = {s.fileno(): (k, s) for k, s in hostile}
    pid = 1
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline:
        pid = pid % 65535 + 1
        sent = time.monotonic()
        try:
            honest.sendall(publish_packet("honest/echo", b"ping", pid))
            got_publish = False
            while not got_publish:
                kind, body = read_packet(honest, 5)
                if kind >> 4 == 3:
                    got_publish = True
                    honest.sendall(bytes([0x40, 0x02]) + body[2 + len("honest/echo"):][:2])
            rtts.append(time.monotonic() - sent)
        except (OSError, ConnectionError):
            failures += 1
        peak = max(peak, rss_kib(args.pid))
        # Which hostile sockets has the broker closed?
        poller = select.poll()
        for fd in open_socks:
            poller.register(fd, select.POLLIN)
        for fd, _event in poller.poll(0):
            k, s = open_socks[fd]
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data and k != "subscribe-flood":
                closed_by_broker[k] += 1
                del open_socks[fd]
                s.close()
        time.sleep(0.1)
    # Sweep the rest once more.
    for fd, (k, s) in list(open_socks.items()):
        s.setblocking(False)
        try:
            data = s.recv(65536)
            if data == b"" and k != "subscribe-flood":
                closed_by_broker[k] += 1
        except BlockingIOError:
            pass
        except OSError:
            if k != "subscribe-flood":
                closed_by_broker[k] += 1
    for _, s in hostile:
        s.close()
    time.sleep(2)
    rss_after = rss_kib(args.pid)
    rtts.sort()
    def pct(p: float) -> str:
        return f"{rtts[min(len(rtts) - 1, int(p * len(rtts)))] * 1000:.2f} ms" if rtts else "-"
    print(f"honest client: {len(rtts)} round trips, {failures} failures, p50 {pct(0.5)}, p99 {pct(0.99)}, max {pct(1.0)}")
    print(f"broker RSS: before {rss_before / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, after closing {rss_after / 1024:.1f} MiB")
    print("closed by the broker during the hold: " + ", ".join(f"{k} {v}/{per_kind}" for k, v in closed_by_broker.items() if k != "subscribe-flood"))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
