#!/usr/bin/env python3
"""kill -9 loop for what Hayate's store keeps today (docs/DURABILITY.md): retained messages.

Each round starts `hayate serve --data-dir DIR`, publishes retained QoS 1 messages with paho-mqtt
(a client we did not write) on TOPICS topics, each value numbered by round, and kills the broker
with SIGKILL at a random moment while publishing. After restarting, every retained message whose
PUBACK arrived must be back with a value at least as new as the last acknowledged one (a message
sent but not acknowledged may or may not be there). Not run by CI; usage:

    scripts/durability/kill9-retained.py [--rounds 50] [--hayate target/release/hayate]
"""
import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as mqtt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(hayate, data_dir):
    port = free_port()
    proc = subprocess.Popen(
        [hayate, "serve", "--log-level", "warn", "-l", f"127.0.0.1:{port}", "--data-dir", data_dir],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"hayate exited: {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    sys.exit("hayate did not start")


def client(port, client_id):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def read_retained(port, topics):
    got = {}
    done = threading.Event()

    def on_message(_c, _u, msg):
        got[msg.topic] = msg.payload.decode()
        if len(got) == topics:
            done.set()

    c = client(port, "reader")
    c.on_message = on_message
    c.subscribe("kill9/#", qos=1)
    done.wait(5)
    time.sleep(0.3)
    c.loop_stop()
    c.disconnect()
    return got


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--hayate", default="target/release/hayate")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="hayate-kill9-")
    acked = {}  # topic -> (round, seq) of the newest acknowledged value
    lock = threading.Lock()
    lost = 0

    def check(port, rnd):
        missing = 0
        got = read_retained(port, len(acked)) if acked else {}
        for topic, (r, n) in acked.items():
            value = got.get(topic)
            parsed = tuple(map(int, value.split(":"))) if value else None
            if parsed is None or parsed < (r, n):
                missing += 1
                print(f"after round {rnd - 1}: {topic} acknowledged {r}:{n}, found {value}")
        return missing

    for rnd in range(1, args.rounds + 1):
        proc, port = start(args.hayate, data_dir)
        lost += check(port, rnd)
        pub = client(port, "kill9-publisher")
        pending = {}
        early = set()  # PUBACKs that came before their publish() call returned

        def on_publish(_c, _u, mid, _rc, _props):
            with lock:
                if mid in pending:
                    topic, value = pending.pop(mid)
                    acked[topic] = max(acked.get(topic, (0, 0)), value)
                else:
                    early.add(mid)

        pub.on_publish = on_publish
        kill_at = time.time() + random.uniform(0.05, 0.5)
        seq = 0
        while time.time() < kill_at:
            seq += 1
            topic = f"kill9/{random.randrange(args.topics)}"
            # Not under `lock`: paho calls on_publish holding its own lock, which publish()
            # takes too (holding both in opposite orders could deadlock).
            info = pub.publish(topic, f"{rnd}:{seq}", qos=1, retain=True)
            with lock:
                if info.mid in early:
                    early.discard(info.mid)
                    acked[topic] = max(acked.get(topic, (0, 0)), (rnd, seq))
                else:
                    pending[info.mid] = (topic, (rnd, seq))
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        pub.loop_stop()
        print(f"round {rnd}: {seq} published, {len(acked)} topics acknowledged so far")
    proc, port = start(args.hayate, data_dir)
    lost += check(port, args.rounds + 1)
    proc.kill()
    proc.wait()
    print(f"{args.rounds} rounds, {lost} acknowledged retained values missing or older")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
