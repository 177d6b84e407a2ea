#!/usr/bin/env python3
"""A real full disk under Hayate's store (docs/DURABILITY.md, "A full disk").

Needs root (it mounts a small tmpfs). Not run by CI, which tests the same path with injected
write failures (hayate-storage `failed_writes_hold_durability_and_recover_by_themselves`, and
the sans-IO refusal test in hayate-core `channel_queue.rs`). Steps:

1. mount a tmpfs of --size MiB, fill most of it with a filler file, start
   `hayate serve --data-dir` on it;
2. a persistent v5 subscriber subscribes to q/# and goes offline; a v5 publisher sends QoS 1
   messages of --payload bytes until the broker answers 0x97 (Quota exceeded): the disk is full;
3. while full: the broker is alive, QoS 0 reaches an online subscriber, QoS 1 is refused;
4. the filler is deleted; within --recover seconds QoS 1 is accepted again;
5. the broker is killed with SIGKILL and started again; the offline subscriber must receive
   every message that was acknowledged with 0x00, before and after the disk was full.

    sudo scripts/durability/enospc.py [--hayate target/release/hayate] [--size 24] [--min-free-mb 0]

With the default --min-free-mb 0 the store writes until the file system is full (a real
ENOSPC); with --min-free-mb N ([storage] min_free_mb) it stops at N MiB free, before the disk
is full, and the same steps must hold.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(hayate, data_dir, log, min_free_mb):
    port = free_port()
    config = os.path.join(tempfile.gettempdir(), "hayate-enospc.toml")
    with open(config, "w") as f:
        f.write(f"[storage]\nmin_free_mb = {min_free_mb}\n")
    proc = subprocess.Popen(
        [hayate, "serve", "-c", config, "--log-level", "warn", "-l", f"127.0.0.1:{port}",
         "--data-dir", data_dir],
        stdout=log, stderr=log,
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


def v5(port, client_id, clean=True, expiry=None):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    props = None
    if expiry is not None:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = expiry
    c.connect("127.0.0.1", port, clean_start=clean, properties=props)
    c.loop_start()
    return c


class Publisher:
    """A v5 QoS 1 publisher that records the PUBACK reason code of every message."""

    def __init__(self, port):
        self.codes = {}
        self.cond = threading.Condition()
        self.client = v5(port, "enospc-pub")
        self.client.on_publish = self.on_publish
        self.mids = {}

    def on_publish(self, client, userdata, mid, reason_code, properties):
        with self.cond:
            self.codes[self.mids.get(mid, mid)] = reason_code.value
            self.cond.notify_all()

    def send(self, n, payload, timeout=10):
        with self.cond:
            info = self.client.publish("q/x", f"{n}:".encode() + payload, qos=1)
            self.mids[info.mid] = n
            # The PUBACK may have come before the mapping: move it over.
            if info.mid in self.codes and info.mid != n:
                self.codes[n] = self.codes.pop(info.mid)
            deadline = time.time() + timeout
            while n not in self.codes:
                left = deadline - time.time()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.codes[n]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hayate", default="target/release/hayate")
    ap.add_argument("--size", type=int, default=24, help="tmpfs size in MiB")
    ap.add_argument("--payload", type=int, default=16384)
    ap.add_argument("--recover", type=float, default=15.0)
    ap.add_argument("--min-free-mb", type=int, default=0,
                    help="[storage] min_free_mb (0: write until the disk is full)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root to mount a tmpfs")
    mnt = tempfile.mkdtemp(prefix="hayate-enospc-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size}m", "tmpfs", mnt], check=True)
    proc = None
    log = open(os.path.join(tempfile.gettempdir(), "hayate-enospc.log"), "w")
    try:
        data = os.path.join(mnt, "data")
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * ((args.size - 8) * 1024 * 1024))
        proc, port = start(args.hayate, data, log, args.min_free_mb)
        sub = v5(port, "enospc-sub", clean=False, expiry=3600)
        sub.subscribe("q/#", qos=1)
        time.sleep(0.3)
        sub.disconnect()
        sub.loop_stop()
        live = v5(port, "enospc-live")
        got_live = []
        live.on_message = lambda c, u, m: got_live.append(m.payload)
        live.subscribe("live/#", qos=0)
        pub = Publisher(port)
        payload = os.urandom(args.payload)
        # A message accepted just before the write failed has its PUBACK held until the store
        # can write again. The next publish on that connection closes it (DISCONNECT 0x97: a
        # refusal may not overtake the held PUBACK); paho reconnects and sends both again,
        # and they are refused with 0x97.
        refused_at, held = None, []
        for n in range(1, 100_000):
            code = pub.send(n, payload, timeout=2)
            if code is None:
                held.append(n)
            elif code not in (0, 0x97):
                sys.exit(f"message {n}: unexpected PUBACK {code!r}")
            if 0x97 in pub.codes.values():
                refused_at = n
                break
        if refused_at is None:
            sys.exit("the disk never filled up")
        acked_before = sum(1 for c in pub.codes.values() if c == 0)
        print(f"disk full after {acked_before} acknowledged messages "
              f"({acked_before * args.payload >> 20} MiB); held: {held}")
        assert proc.poll() is None, "the broker died on a full disk"
        live_pub = v5(port, "enospc-live-pub")
        live_pub.publish("live/x", b"still flowing", qos=0)
        time.sleep(0.5)
        assert got_live == [b"still flowing"], f"QoS 0 while full: {got_live}"
        code = pub.send(refused_at + 1, payload)
        assert code == 0x97, f"QoS 1 while still full: {code!r}"
        print("while full: broker alive, QoS 0 delivered, QoS 1 refused with 0x97")
        os.remove(filler)
        deadline, n = time.time() + args.recover, refused_at + 2
        while True:
            code = pub.send(n, payload, timeout=2)
            if code == 0:
                break
            if time.time() > deadline:
                sys.exit(f"not recovered {args.recover} s after space returned (last code {code!r})")
            n += 1
            time.sleep(0.2)
        for m in range(n + 1, n + 21):
            assert pub.send(m, payload) == 0
        late = [h for h in held if pub.codes.get(h) == 0]
        print(f"recovered: QoS 1 accepted again (message {n}); held PUBACKs released: {late}")
        acked = sorted(m for m, c in pub.codes.items() if c == 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, port = start(args.hayate, data, log, args.min_free_mb)
        received = set()
        done = threading.Event()
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="enospc-sub", protocol=mqtt.MQTTv5)

        def on_message(client, userdata, message):
            received.add(int(message.payload.split(b":", 1)[0]))
            if received >= set(acked):
                done.set()

        sub.on_message = on_message
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        sub.connect("127.0.0.1", port, clean_start=False, properties=props)
        sub.loop_start()
        done.wait(60)
        missing = sorted(set(acked) - received)
        print(f"after kill -9: {len(acked)} acknowledged, {len(received)} received, {len(missing)} missing")
        if missing:
            print(f"missing: {missing[:20]}")
            sys.exit(1)
        print("OK")
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
