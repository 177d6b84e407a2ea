#!/usr/bin/env python3
"""Load and measurement for scripts/bench/bridge-swarm.sh (not run in CI).

One process: a publisher per edge broker (MQTT 3.1.1, QoS 1, topic swarm/<edge>, RATE messages
per second each for SECONDS), and one subscriber on the central broker (swarm/#, QoS 1) that
counts what arrives through the bridges. After the publishers stop it waits up to DRAIN seconds
for the rest, then prints one JSON object: sent, received (distinct), duplicates, delivered_pct,
edges_complete (edges whose every message arrived), seconds, and the latency from publishing on
an edge to arriving at the central subscriber (first copies; p50, p99 and max in ms). Both ends
are this process's event loop, so the latency includes its own scheduling delays.

Usage: bridge_swarm_load.py CENTRAL_PORT EDGE_PORTS_FILE RATE SECONDS DRAIN
(EDGE_PORTS_FILE: one port per line; all on 127.0.0.1.) The process holds one socket per edge
plus one: keep the edges below the file descriptor limit (ulimit -n).
"""

import asyncio
import json
import struct
import sys
import time


def remaining_length(n):
    out = bytearray()
    while True:
        byte = n % 128
        n //= 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def connect_packet(client_id, clean=True):
    body = utf8("MQTT") + bytes([4, 0x02 if clean else 0]) + struct.pack("!H", 60) + utf8(client_id)
    return b"\x10" + remaining_length(len(body)) + body


async def read_packet(reader):
    first = (await reader.readexactly(1))[0]
    mult, length = 1, 0
    while True:
        b = (await reader.readexactly(1))[0]
        length += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
    return first, await reader.readexactly(length)


async def open_client(port, client_id):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(connect_packet(client_id))
    first, body = await read_packet(reader)
    if first >> 4 != 2 or body[1] != 0:
        raise RuntimeError(f"{client_id}: CONNACK refused ({body!r})")
    return reader, writer


async def subscriber(port, state, ready):
    reader, writer = await open_client(port, "swarm-central-sub")
    topic = utf8("swarm/#")
    body = struct.pack("!H", 1) + topic + b"\x01"
    writer.write(b"\x82" + remaining_length(len(body)) + body)
    first, _ = await read_packet(reader)
    assert first >> 4 == 9, "expected SUBACK"
    ready.set()
    while True:
        first, body = await read_packet(reader)
        if first >> 4 != 3:
            continue
        qos = (first >> 1) & 3
        tlen = struct.unpack("!H", body[:2])[0]
        pos = 2 + tlen
        if qos:
            writer.write(b"\x40\x02" + body[pos:pos + 2])
            pos += 2
        now = time.monotonic_ns()
        key, _, sent_ns = body[pos:].decode(errors="replace").rpartition(":")
        if key in state["seen"]:
            state["duplicates"] += 1
        else:
            state["seen"].add(key)
            state["latencies"].append(now - int(sent_ns))


async def publisher(index, port, rate, seconds, state):
    reader, writer = await open_client(port, f"swarm-pub-{index}")

    async def acks():
        while True:
            await read_packet(reader)

    drainer = asyncio.ensure_future(acks())
    topic = utf8(f"swarm/{index}")
    interval = 1.0 / rate
    start = time.monotonic()
    seq = 0
    # Spread the edges' first messages over one interval.
    await asyncio.sleep(interval * (index % 100) / 100)
    while time.monotonic() - start < seconds:
        seq += 1
        payload = f"{index}:{seq}:{time.monotonic_ns()}".encode()
        body = topic + struct.pack("!H", seq % 65535 + 1) + payload
        writer.write(b"\x32" + remaining_length(len(body)) + body)
        state["sent"] += 1
        state["per_edge"][index] = seq
        await asyncio.sleep(interval)
    await asyncio.sleep(1)
    drainer.cancel()
    writer.close()


async def main():
    central, ports_file, rate, seconds, drain = sys.argv[1:6]
    central, rate, seconds, drain = int(central), float(rate), float(seconds), float(drain)
    ports = [int(line) for line in open(ports_file) if line.strip()]
    state = {"sent": 0, "seen": set(), "duplicates": 0, "per_edge": {}, "latencies": []}
    ready = asyncio.Event()
    sub = asyncio.ensure_future(subscriber(central, state, ready))
    await asyncio.wait_for(ready.wait(), 10)
    started = time.monotonic()
    await asyncio.gather(*(publisher(i, p, rate, seconds, state) for i, p in enumerate(ports)))
    deadline = time.monotonic() + drain
    while len(state["seen"]) < state["sent"] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    sub.cancel()
    received = len(state["seen"])
    complete = sum(
        1
        for i, last in state["per_edge"].items()
        if all(f"{i}:{s}" in state["seen"] for s in range(1, last + 1))
    )
    latencies = sorted(state["latencies"])

    def latency_ms(q):
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6, 2)

    print(json.dumps({
        "edges": len(ports),
        "sent": state["sent"],
        "received": received,
        "duplicates": state["duplicates"],
        "delivered_pct": round(100.0 * received / max(state["sent"], 1), 3),
        "edges_complete": complete,
        "seconds": round(time.monotonic() - started, 1),
        "latency_p50_ms": latency_ms(0.50),
        "latency_p99_ms": latency_ms(0.99),
        "latency_max_ms": latency_ms(1.0),
    }))


if __name__ == "__main__":
    asyncio.run(main())
