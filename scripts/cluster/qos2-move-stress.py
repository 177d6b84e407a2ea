#!/usr/bin/env python3
"""QoS 2 publishers that move between two nodes with a PUBLISH left unanswered, and send it
again on the other node with the same packet id (DUP set or not), while the third node is
killed and restarted every few seconds (not run in CI; scripts/cluster/README.md).

    scripts/cluster/qos2-move-stress.py HAYATE WORKDIR SECONDS [LOG_FILTER]

Four raw-socket publishers (persistent sessions) each loop: a few complete QoS 2 flows, then
one of three ways to leave: PUBLISH and DISCONNECT in one write; PUBLISH, a pause of up to
20 ms, DISCONNECT; or PUBREL and DISCONNECT in one write after the PUBREC. On the other node
they finish that message (PUBLISH again, or PUBREL again). Two persistent subscribers, one
on each of those nodes, count copies: every completed message must reach each of them
exactly once ([MQTT-4.3.3-10]: the session knows the packet id, whatever the DUP flag says).
Exits 1 otherwise.
"""
import collections
import os
import random
import shutil
import socket
import struct
import sys
import threading
import time

import paho.mqtt.client as mqtt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import Node  # noqa: E402

BIN, WD, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
LOG = sys.argv[4] if len(sys.argv) > 4 else "info,hayate_core::channel=debug,hayate_core::handoff=debug"
shutil.rmtree(WD, ignore_errors=True); os.makedirs(WD)
nodes = [Node(BIN, WD, f"n{i+1}", []) for i in range(3)]
for n in nodes:
    n.log_level = LOG
    n.join = [f"127.0.0.1:{m.cluster_port}" for m in nodes if m is not n]
for n in nodes: n.start()
for n in nodes: assert n.wait_listening()
time.sleep(3)
counts = [collections.Counter(), collections.Counter()]
subs = []
for i, node in enumerate(nodes[1:]):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"s{i}", clean_session=False)
    c.on_message = (lambda k: lambda cl, u, m: counts[k].update([m.payload.decode()]))(i)
    c.connect("127.0.0.1", node.mqtt_port, keepalive=60); c.subscribe("t/#", 2); c.loop_start(); subs.append(c)
time.sleep(2)

def s_(b): return struct.pack("!H", len(b)) + b
def pkt(t, body):
    n = len(body); rl = b""
    while True:
        d = n % 128; n //= 128
        rl += bytes([d | (0x80 if n else 0)])
        if not n: break
    return bytes([t]) + rl + body
def publish(pid, payload, dup=False):
    return pkt(0x34 | (0x08 if dup else 0), s_(b"t/x") + struct.pack("!H", pid) + payload)
def pubrel(pid): return pkt(0x62, struct.pack("!H", pid))
DISC = pkt(0xE0, b"")

class Conn:
    def __init__(self, port, cid):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.sendall(pkt(0x10, s_(b"MQTT") + bytes([4, 0x00]) + struct.pack("!H", 60) + s_(cid)))
        self.buf = b""
        t, body = self.read()
        assert t >> 4 == 2 and body[1] == 0, (t, body)
        self.present = body[0] & 1
    def recv(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d: raise ConnectionError("eof")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out
    def read(self):
        h = self.recv(1)[0]; mult, n = 1, 0
        while True:
            b = self.recv(1)[0]; n += (b & 127) * mult; mult *= 128
            if not b & 128: break
        return h, self.recv(n)
    def expect(self, kind, pid):
        t, body = self.read()
        assert t >> 4 == kind and struct.unpack("!H", body[:2])[0] == pid, (t, body, kind, pid)

stop = threading.Event()
done = {}
stats = collections.Counter()
def publisher(k):
    cid = f"p{k}".encode(); seq = 0; pid = 0
    node = random.choice(nodes[1:])
    conn = None
    open_msg = None   # (pid, payload, state) carried across a move: 'rec' = PUBREC awaited, 'comp' = PUBCOMP awaited
    while not stop.is_set():
        try:
            if conn is None:
                conn = Conn(node.mqtt_port, cid)
                if open_msg:
                    p, payload, st = open_msg
                    if st == 'rec':
                        conn.s.sendall(publish(p, payload, dup=random.random() < 0.5)); conn.expect(5, p); st = 'comp'
                    conn.s.sendall(pubrel(p)); conn.expect(7, p)
                    done[payload.decode()] = True; open_msg = None; stats["resent"] += 1
            for _ in range(random.randint(1, 5)):
                seq += 1; pid = pid % 65535 + 1; payload = f"{cid.decode()}:{seq}".encode()
                conn.s.sendall(publish(pid, payload)); conn.expect(5, pid)
                conn.s.sendall(pubrel(pid)); conn.expect(7, pid); done[payload.decode()] = True
            seq += 1; pid = pid % 65535 + 1; payload = f"{cid.decode()}:{seq}".encode()
            shape = random.choice(["together", "apart", "rel-together"])
            stats[shape] += 1
            if shape == "together":
                open_msg = (pid, payload, 'rec'); conn.s.sendall(publish(pid, payload) + DISC)
            elif shape == "apart":
                open_msg = (pid, payload, 'rec'); conn.s.sendall(publish(pid, payload)); time.sleep(random.uniform(0, 0.02)); conn.s.sendall(DISC)
            else:
                conn.s.sendall(publish(pid, payload)); conn.expect(5, pid)
                open_msg = (pid, payload, 'comp'); conn.s.sendall(pubrel(pid) + DISC)
            conn.s.close(); conn = None
            node = nodes[1] if node is nodes[2] else nodes[2]
        except (OSError, ConnectionError, AssertionError) as e:
            stats["errors"] += 1; print("error", cid, repr(e)[:200], flush=True)
            try: conn.s.close()
            except Exception: pass
            conn = None; time.sleep(0.2)

def killer():
    while not stop.is_set():
        time.sleep(random.uniform(3, 8))
        nodes[0].kill(); time.sleep(random.uniform(0.5, 3)); nodes[0].start()
pubs = [threading.Thread(target=publisher, args=(k,), daemon=True) for k in range(4)]
for t in pubs: t.start()
kt = threading.Thread(target=killer, daemon=True); kt.start()
time.sleep(SECS); stop.set()
for t in pubs: t.join(40)
time.sleep(3)
print(dict(stats), "completed", len(done))
bad = 0
for i, c in enumerate(counts):
    for p in done:
        if c[p] != 1:
            bad += 1
            if bad < 20: print("sub", i, p, "copies", c[p])
print("bad", bad)
for s in subs: s.loop_stop()
for n in nodes: n.terminate()
sys.exit(1 if bad or not done else 0)
