#!/usr/bin/env python3
"""kill -9 loop for queued QoS 1/2 messages of persistent sessions (issue 11, docs/DURABILITY.md).

Publishers with persistent sessions (MQTT 3.1.1 clean_session=0, or with --v5 Clean Start 0 and
a Session Expiry Interval) send numbered payloads "<publisher>:<n>" on kq/<publisher>, half at
QoS 1 and half at QoS 2, each with at most --window messages in flight. Subscribers with
persistent sessions subscribe once to kq/# at QoS 2. The "online" ones reconnect every round and
never subscribe again (the subscription must come back from the store); the "offline" ones come
back only every --offline-every rounds and at the end, to collect what was queued for them. Each
round starts the broker on the same data directory, publishes for a random 0.2-2 s and kills the
broker with SIGKILL. After each restart the subscribers that are due reconnect, the publishers
reconnect and their resent in-flight messages are answered (a broker may forward a QoS 2 message
only at its PUBREL), and the subscribers are drained and checked, so a failure names the round;
after the last round the broker starts once more, the publishers finish their resends, every
subscriber connects and drains, and for every subscriber:

- every acknowledged QoS 1 message was received at least once;
- every acknowledged QoS 2 message was received, and no QoS 2 message was received twice,
  acknowledged or not (a publisher resending an unacknowledged QoS 2 PUBLISH must not make a
  second copy);
- per publisher, first arrivals are in increasing order; nothing arrives that was not sent, or
  at another QoS than it was published with.

"Acknowledged" is the point where the broker took the message over: PUBACK for QoS 1 (a v5
failure reason code does not count), PUBREC for QoS 2 (after PUBREC the publisher may no longer
resend the PUBLISH, MQTT 4.3.3; paho's on_publish comes later, at PUBCOMP). An unacknowledged
message may or may not arrive.

paho-mqtt details this relies on (read in paho 2.2 client.py): each client id keeps one Client
object for the whole run, so its session state survives reconnects: unacknowledged QoS 1
PUBLISHes are resent with DUP, PUBRECed QoS 2 messages get their PUBREL resent, inbound QoS 2
messages awaiting PUBREL stay known (paho calls on_message at PUBREL, so a resent PUBLISH is
not delivered twice). paho's automatic reconnection is off: every reconnect attempt moves an
in-flight QoS 2 message one state on, and a second one turns "resend PUBREL" into "resend
PUBLISH", which would make duplicates that are paho's fault; the script also puts PUBRECed
messages back before each connect. New messages are published only after paho has resent the
old ones, so the order check is fair.

Run (not in CI; the broker is killed on every exit path):

    scripts/durability/kill9-queues.py [--rounds 50] [--durability batched|sync|off] [--v5]
    scripts/durability/kill9-queues.py --broker mosquitto --rounds 5   # kill -9 loses its state
    scripts/durability/kill9-queues.py --broker mosquitto --signal term --offline 0  # control

Exit status 1 on any violation. A missing QoS 2 message is also counted as "PUBRECed by paho,
PUBREL never came" when it sits in the subscriber's paho state: the broker lost the outbound
state of its PUBLISH. The control (--signal term: mosquitto saves its state at a clean exit)
passes; with offline subscribers it reports order violations, because Mosquitto 2.0.11 sends
messages that arrive while a client reconnects ahead of the rest of its queue. Use a fresh
--data-dir: sessions left from an earlier run would deliver old numbers.

What it cannot show: power loss (kill -9 keeps the page cache, so `batched` and `sync` look the
same here and the fsync window is not exercised); kills land at random, not between a commit
and its acknowledgement; one machine, loopback, few clients, one client library; QoS 2 PUBREC
reason codes are not seen (paho ignores them); delivery is to paho, not to an application.
"""
import argparse
import atexit
import collections
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

PUBREC = re.compile(r"Received PUBREC \(Mid: (\d+)\)")
RESENDING = (mqtt.mqtt_ms_publish, mqtt.mqtt_ms_resend_pubrel)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, args, work):
        self.args, self.work, self.proc, self.crashes = args, work, None, 0
        self.data = args.data_dir or os.path.join(work, "data")
        os.makedirs(self.data, exist_ok=True)
        self.log = os.path.join(work, "broker.log")
        atexit.register(self.kill)

    def command(self, port):
        if self.args.broker == "mosquitto":
            conf = os.path.join(self.work, "mosquitto.conf")
            with open(conf, "w") as f:
                f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\nuser root\n"
                        f"persistence true\npersistence_location {self.data}/\n"
                        "max_queued_messages 0\n")
            return ["mosquitto", "-c", conf]
        return [self.args.hayate, "serve", "--log-level", os.environ.get("KQ_LOG", "warn"), "-l", f"127.0.0.1:{port}",
                "--data-dir", self.data, "--durability", self.args.durability]

    def start(self):
        port = free_port()
        offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.command(port), stdout=log, stderr=log)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                with open(self.log) as f:
                    f.seek(offset)
                    first = (f.read().strip().splitlines() or [""])[0]
                code, self.proc = self.proc.returncode, None
                sys.exit(f"broker exited at start ({code}): {first}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return port
            except OSError:
                time.sleep(0.02)
        sys.exit("broker did not start listening")

    def kill(self, sig=signal.SIGKILL):
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            print(f"!! broker exited by itself ({self.proc.returncode}); see {self.log}")
            self.crashes += 1
        else:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Peer:
    """One paho Client for the whole run: its session state lives in it."""

    def __init__(self, args, cid):
        self.v5, self.cid = args.v5, cid
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv5 if args.v5 else mqtt.MQTTv311,
                             clean_session=None if args.v5 else False, reconnect_on_failure=False)
        self.connected = threading.Event()
        self.connects = self.no_session = 0
        self.c.on_connect = self.on_connect

    def on_connect(self, _c, _u, flags, reason, _p):
        if reason.is_failure:
            return
        if self.connects and not flags.session_present:
            self.no_session += 1  # the broker forgot this session
        self.connects += 1
        self.connected.set()

    def connect(self, port):
        kw = {}
        if self.v5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
            kw = {"clean_start": False, "properties": props}
        self.connected.clear()
        self.c.connect("127.0.0.1", port, keepalive=30, **kw)
        self.c.loop_start()
        if not self.connected.wait(10):
            sys.exit(f"{self.cid}: no successful CONNACK")

    def stop(self):
        self.c.loop_stop()  # the network thread ends by itself once the broker is gone


class Publisher(Peer):
    def __init__(self, args, name, qos, state):
        super().__init__(args, f"kq-pub-{name}")
        self.name, self.qos, self.topic, self.state = name, qos, f"kq/{name}", state
        self.seq = self.refused = 0
        self.acked = {}  # seq -> round in which the broker acknowledged it
        self.pubrec = set()  # payloads PUBRECed and not yet PUBCOMPed
        self.c.max_inflight_messages = args.window
        self.c.on_publish = self.on_publish
        if qos == 2:
            self.c.on_log = self.on_log

    def lookup(self, mid):
        m = self.c._out_messages.get(mid)  # paho pops it only after on_publish returns
        return (m, int(m.payload.decode().rsplit(":", 1)[1])) if m is not None else (None, None)

    def on_publish(self, _c, _u, mid, reason, _p):
        m, seq = self.lookup(mid)
        if m is None:
            return
        self.pubrec.discard(m.payload)
        if self.qos == 1 and reason.is_failure:
            self.refused += 1
        elif self.qos == 1:
            self.acked.setdefault(seq, self.state["round"])

    def on_log(self, _c, _u, _level, buf):
        hit = PUBREC.match(buf)
        if hit:
            m, seq = self.lookup(int(hit.group(1)))
            if m is not None and m.qos == 2:
                self.pubrec.add(m.payload)
                self.acked.setdefault(seq, self.state["round"])

    def connect(self, port):
        with self.c._out_message_mutex:
            for m in self.c._out_messages.values():
                if m.payload in self.pubrec:  # paho's reconnect reset makes it "resend PUBREL"
                    m.state = mqtt.mqtt_ms_wait_for_pubcomp
        super().connect(port)
        deadline = time.time() + 10  # paho resends in-flight messages right after on_connect
        while any(m.state in RESENDING for m in list(self.c._out_messages.values())):
            if time.time() > deadline:
                sys.exit(f"{self.cid}: paho did not resend its in-flight messages")
            time.sleep(0.005)

    def run(self, stop, rate, window):
        due = time.time()
        while not stop.is_set():
            if len(self.c._out_messages) >= window:
                time.sleep(0.002)
                continue
            self.seq += 1
            self.c.publish(self.topic, f"{self.name}:{self.seq}", qos=self.qos)
            due = max(due, time.time() - 0.05) + 1.0 / rate
            time.sleep(max(0.0, due - time.time()))


class Subscriber(Peer):
    def __init__(self, args, name, offline):
        super().__init__(args, f"kq-sub-{name}")
        self.name, self.offline, self.subscribed, self.last = name, offline, False, 0.0
        self.got = collections.defaultdict(list)  # publisher -> seqs in arrival order
        self.qos = collections.defaultdict(set)  # publisher -> QoS levels received
        self.c.on_message = self.on_message

    def on_message(self, _c, _u, msg):
        name, seq = msg.payload.decode().rsplit(":", 1)
        self.got[name].append(int(seq))
        self.qos[name].add(msg.qos)
        self.last = time.time()

    def connect(self, port):
        super().connect(port)
        if self.subscribed:
            return  # the broker must have kept the subscription
        granted = []
        done = threading.Event()
        self.c.on_subscribe = lambda _c, _u, _m, codes, _p: (granted.extend(codes), done.set())
        self.c.subscribe("kq/#", qos=2)
        if not done.wait(10) or granted[0].is_failure:
            sys.exit(f"{self.cid}: SUBSCRIBE refused or not answered: {granted}")
        self.subscribed = True


def settle(pubs, limit):
    """Wait for answers to the publishers' resent in-flight messages; return how many lack one."""
    deadline = time.time() + limit
    while time.time() < deadline and any(p.c._out_messages for p in pubs):
        time.sleep(0.02)
    return sum(len(p.c._out_messages) for p in pubs)


def wait_quiet(subs, quiet, limit):
    start = time.time()
    while time.time() - start < limit:
        if time.time() - max([s.last for s in subs] + [start]) >= quiet:
            return
        time.sleep(0.05)


MISSING = {}  # subscriber -> the messages it misses (for the report)


def check(sub, pubs):
    """Counts for one subscriber against everything acknowledged so far."""
    r = collections.Counter()
    by_round = collections.Counter()
    stuck = {m.payload.decode() for m in list(sub.c._in_messages.values())}  # awaiting PUBREL
    for p in pubs:
        arrivals = sub.got.get(p.name, [])
        counts = collections.Counter(arrivals)
        r["acknowledged"] += len(p.acked)
        r["received"] += len(counts)
        for seq, rnd in p.acked.items():
            if not counts[seq]:
                r[f"missing_q{p.qos}"] += 1
                MISSING.setdefault(sub.name, set()).add(f"{p.name}:{seq}")
                r["stuck"] += f"{p.name}:{seq}" in stuck
                by_round[rnd] += 1
        if p.qos == 2:
            for seq, k in counts.items():
                if k > 1:
                    r["dup_q2" if seq in p.acked else "dup_q2_unacked"] += k - 1
        r["dup_q1"] += sum(k - 1 for k in counts.values()) if p.qos == 1 else 0
        firsts = list(dict.fromkeys(arrivals))
        r["order"] += sum(1 for a, b in zip(firsts, firsts[1:]) if b < a)
        r["unsent"] += sum(1 for seq in counts if not 1 <= seq <= p.seq)
        r["wrong_qos"] += len(sub.qos[p.name] - {p.qos})
    r["violations"] = sum(r[k] for k in ("missing_q1", "missing_q2", "dup_q2", "dup_q2_unacked",
                                         "order", "unsent", "wrong_qos"))
    return r, by_round


def describe(r):
    return (f"acknowledged {r['acknowledged']}, received {r['received']}, missing "
            f"{r['missing_q1']} QoS 1 + {r['missing_q2']} QoS 2 ({r['stuck']} of them PUBRECed by "
            f"paho, PUBREL never came), QoS 2 duplicates {r['dup_q2']} "
            f"(+{r['dup_q2_unacked']} unacknowledged), order violations {r['order']}, "
            f"unsent {r['unsent']}, wrong QoS {r['wrong_qos']}, QoS 1 duplicates {r['dup_q1']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--broker", choices=("hayate", "mosquitto"), default="hayate")
    ap.add_argument("--hayate", default="target/release/hayate")
    ap.add_argument("--durability", choices=("batched", "sync", "off"), default="batched")
    ap.add_argument("--data-dir", help="a fresh broker data directory (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--publishers", type=int, default=2, help="publishers per QoS (1 and 2)")
    ap.add_argument("--online", type=int, default=2, help="subscribers reconnecting every round")
    ap.add_argument("--offline", type=int, default=2, help="subscribers back every few rounds")
    ap.add_argument("--offline-every", type=int, default=3)
    ap.add_argument("--rate", type=float, default=250.0, help="messages/s per publisher")
    ap.add_argument("--window", type=int, default=20, help="messages in flight per publisher")
    ap.add_argument("--signal", choices=("kill", "term"), default="kill",
                    help="term: stop the broker cleanly (a control run: nothing may be lost)")
    ap.add_argument("--v5", action="store_true", help="MQTT 5 with Session Expiry, not 3.1.1")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    random.seed(seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix="hayate-kq-")
    broker = Broker(args, work)
    what = f"{args.hayate} --durability {args.durability}"
    what = "mosquitto" if args.broker == "mosquitto" else what
    print(f"{what}, SIG{args.signal.upper()}, MQTT {'5' if args.v5 else '3.1.1'}, seed {seed}, "
          f"data {broker.data}, log {broker.log}")
    state = {"round": 0}
    pubs = [Publisher(args, f"q{q}p{i}", q, state) for q in (1, 2) for i in range(args.publishers)]
    subs = [Subscriber(args, f"on{i}", False) for i in range(args.online)]
    subs += [Subscriber(args, f"off{i}", True) for i in range(args.offline)]
    first_bad = None
    try:
        for rnd in range(1, args.rounds + 1):
            state["round"] = rnd
            port = broker.start()
            present = [s for s in subs if not s.offline or rnd == 1
                       or (rnd + int(s.name[3:])) % args.offline_every == 0]
            for s in present:
                s.connect(port)
            if rnd == 1:  # offline subscribers: subscribe once, then go away
                for s in [s for s in present if s.offline]:
                    s.c.disconnect()
                    s.stop()
                    present.remove(s)
            for p in pubs:  # a broker may forward a QoS 2 message only at its PUBREL
                p.connect(port)
            settle(pubs, 5)
            if rnd > 1:
                wait_quiet(present, 0.5, 20)
                results = [check(s, pubs)[0] for s in present]
                total = sum(results, collections.Counter())
                print(f"  after restart {rnd - 1}, {'+'.join(s.name for s in present)} so far: "
                      f"missing {total['missing_q1']} QoS 1 + {total['missing_q2']} QoS 2, QoS 2 "
                      f"duplicates {total['dup_q2'] + total['dup_q2_unacked']}, "
                      f"order {total['order']}")
                if total["violations"] and first_bad is None:
                    first_bad = rnd - 1
            stop = threading.Event()
            threads = [threading.Thread(target=p.run, args=(stop, args.rate, args.window),
                                        daemon=True) for p in pubs]
            for t in threads:
                t.start()
            time.sleep(random.uniform(0.2, 2.0))
            broker.kill(signal.SIGTERM if args.signal == "term" else signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join()
            for x in pubs + present:
                x.stop()
            print(f"round {rnd}: published {sum(p.seq for p in pubs)}, acknowledged "
                  f"{sum(len(p.acked) for p in pubs)} in all")
        state["round"] = args.rounds + 1
        port = broker.start()
        for p in pubs:
            p.connect(port)
        left = settle(pubs, 10)
        for s in subs:
            s.connect(port)
        wait_quiet(subs, 1.0, 60)
        print(f"final: {left} publisher messages still unacknowledged after 10 s; "
              f"refused (v5 PUBACK failure) {sum(p.refused for p in pubs)}; "
              f"reconnects without session: {sum(x.no_session for x in pubs + subs)}")
        bad = broker.crashes
        for s in subs:
            r, by_round = check(s, pubs)
            bad += r["violations"]
            print(f"{s.name} ({'offline' if s.offline else 'online'}): {describe(r)}")
            if by_round:
                named = {("final" if k > args.rounds else k): n
                         for k, n in sorted(by_round.items())}
                print(f"    missing by round acknowledged: {named}")
                print(f"    missing: {sorted(MISSING.get(s.name, ()))[:10]}")
        for x in pubs + subs:
            x.c.disconnect()
            x.stop()
    finally:
        broker.kill()
    where = f"; first seen after restart {first_bad}" if first_bad else ""
    print(f"{args.rounds} rounds, {bad} violations{where}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
