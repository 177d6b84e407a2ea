#!/usr/bin/env python3
"""Reproduces a QoS 2 duplicate found by soak.py (issue 13; not in CI). Two nodes; a QoS 2
subscriber (paho) on n2. A raw MQTT 3.1.1 publisher with clean session off sends a QoS 2
PUBLISH (packet id 7) to n1, gets its PUBREC, disconnects before PUBREL, reconnects with the
same client id and resends the PUBLISH with DUP (as paho does after a reconnection), then
PUBREL. The subscriber must receive the message once.

    scripts/cluster/repro-qos2-move.py          # the publisher reconnects to n2 (another node)
    SAME=1 scripts/cluster/repro-qos2-move.py   # the publisher reconnects to n1 (control)

HAYATE: the binary (default target/release/hayate)."""

import os
import socket
import subprocess
import tempfile
import time

import paho.mqtt.client as mqtt

H = os.environ.get("HAYATE") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "../../target/release/hayate")
W = tempfile.mkdtemp(prefix="hayate-repro-qos2-")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(name, mqtt_port, cluster_port, join):
    log = open(f"{W}/{name}.log", "a")
    return subprocess.Popen(
        [H, "serve", "--log-level", "info", "-l", f"127.0.0.1:{mqtt_port}", "--node-name", name,
         "--cluster-listen", f"127.0.0.1:{cluster_port}", "--join", f"127.0.0.1:{join}"],
        stdout=log, stderr=subprocess.STDOUT)


def wait(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)


def string(s):
    b = s.encode()
    return len(b).to_bytes(2, "big") + b


def packet(first, body):
    n, rl = len(body), b""
    while True:
        d, n = n % 128, n // 128
        rl += bytes([d | (0x80 if n else 0)])
        if not n:
            return bytes([first]) + rl + body


def read(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("closed")
        out += chunk
    return out


def connect(port, client_id):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(packet(0x10, string("MQTT") + bytes([4, 0x00, 0, 60]) + string(client_id)))
    ack = read(s, 4)
    return s, ack[2] & 1


def main():
    m1, m2, c1, c2 = free_port(), free_port(), free_port(), free_port()
    nodes = [start("n1", m1, c1, c2), start("n2", m2, c2, c1)]
    wait(m1)
    wait(m2)
    time.sleep(3)
    got = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="repro-q2-sub",
                      protocol=mqtt.MQTTv311)
    sub.on_message = lambda c, u, msg: got.append(msg.payload)
    sub.connect("127.0.0.1", m2)
    sub.loop_start()
    sub.subscribe("d/#", 2)
    time.sleep(2)
    publish = string("d/x") + (7).to_bytes(2, "big") + b"exactly-once"
    s, present = connect(m1, "repro-q2-pub")
    s.sendall(packet(0x34, publish))
    assert read(s, 4) == bytes([0x50, 2, 0, 7]), "PUBREC"
    s.sendall(bytes([0xE0, 0]))
    s.close()
    time.sleep(0.5)
    again = m1 if os.environ.get("SAME") else m2
    s, present = connect(again, "repro-q2-pub")
    s.sendall(packet(0x3C, publish))  # DUP resend of packet id 7
    rec = read(s, 4)
    s.sendall(bytes([0x62, 2, 0, 7]))  # PUBREL
    comp = read(s, 4)
    time.sleep(2)
    print(f"reconnected to {'n1 (same node)' if again == m1 else 'n2 (another node)'}: "
          f"session present {present}, then PUBREC {rec.hex()}, PUBCOMP {comp.hex()}")
    print(f"subscriber received the QoS 2 message {len(got)} time(s) (must be 1)")
    for n in nodes:
        n.kill()
    print("node logs:", W)


if __name__ == "__main__":
    main()
