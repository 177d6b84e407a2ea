#!/usr/bin/env python3
"""Reproduces a loss found by soak.py (issue 13; not in CI). Two nodes with data directories;
a persistent QoS 1 subscriber on n2, a publisher on n1. n2 is killed with kill -9; n1
acknowledges 10 QoS 1 messages while n2 is down; then

  OTHER=1 scripts/cluster/repro-node-down.py   the subscriber reconnects to n1 (as a client
                                                does when its node dies), n2 is restarted:
                                                the 10 messages never arrived before the
                                                stored queue went with the handover (now
                                                they do);
  scripts/cluster/repro-node-down.py            n2 is restarted and the subscriber returns to
                                                n2: the 10 messages arrive.

Arguments: [SECONDS_DOWN (3)] [N (0): 1 KB messages queued for an offline session on n2
before the kill, to lengthen n2's recovery]. HAYATE: the binary (default
target/release/hayate). Node logs in a temporary directory, printed at the end."""
import os, socket, subprocess, sys, time, shutil
import paho.mqtt.client as mqtt
import tempfile
H = os.environ.get("HAYATE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/release/hayate")
W = tempfile.mkdtemp(prefix="hayate-repro-")
def fp():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
m1, m2, c1, c2 = fp(), fp(), fp(), fp()
def start(name, m, c, join):
    log = open(f"{W}/{name}.log", "a")
    return subprocess.Popen([H, "serve", "--log-level", "info", "-l", f"127.0.0.1:{m}", "--data-dir", f"{W}/{name}",
        "--node-name", name, "--cluster-listen", f"127.0.0.1:{c}", "--join", f"127.0.0.1:{join}"], stdout=log, stderr=subprocess.STDOUT)
def wait(port):
    for _ in range(200):
        try: socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError: time.sleep(0.05)
n1 = start("n1", m1, c1, c2); n2 = start("n2", m2, c2, c1); wait(m1); wait(m2); time.sleep(3)
got = []
def sub_client():
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="repro-sub", clean_session=False, protocol=mqtt.MQTTv311)
    c.on_message = lambda cl, u, msg: got.append(msg.payload.decode())
    return c
s = sub_client(); s.connect("127.0.0.1", m2); s.loop_start()
time.sleep(0.5); s.subscribe("r/#", 1); time.sleep(1.5)
p = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="repro-pub", protocol=mqtt.MQTTv311)
p.connect("127.0.0.1", m1); p.loop_start(); time.sleep(0.5)
p.publish("r/x", "before", qos=1).wait_for_publish(5); time.sleep(0.5)
print("before kill, received:", got)
# an offline persistent session on n2 with a big queue: a long journal to recover after kill -9
o = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="repro-offline", clean_session=False, protocol=mqtt.MQTTv311)
o.connect("127.0.0.1", m2); o.loop_start(); o.subscribe("big/#", 1); time.sleep(0.5); o.disconnect(); o.loop_stop()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 0
body = "x" * 1000
infos = [p.publish("big/y", body, qos=1) for _ in range(N)]
for i in infos: i.wait_for_publish(30)
print(N, "messages queued for the offline session on n2")
s.loop_stop(); n2.kill(); n2.wait(); s._sock_close() if hasattr(s, "_sock_close") else None
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3)
for i in range(10):
    p.publish("r/x", f"while-down-{i}", qos=1).wait_for_publish(5)
print("10 published and acknowledged by n1 while n2 is down")
if os.environ.get("OTHER"):
    s2 = sub_client(); sp = []
    s2.on_connect = lambda cl, u, f, rc, pr: (sp.append(f.session_present), cl.subscribe("r/#", 1) if not f.session_present else None)
    s2.connect("127.0.0.1", m1); s2.loop_start(); time.sleep(1)
    print("subscriber reconnected to n1 while n2 is down: session_present", sp)
    n2 = start("n2", m2, c2, c1); wait(m2); time.sleep(5)
    print("n2 restarted, 5 s later the subscriber on n1 has received", got)
else:
    n2 = start("n2", m2, c2, c1); wait(m2); time.sleep(2)
    s2 = sub_client(); sp = []
    s2.on_connect = lambda cl, u, f, rc, pr: sp.append(f.session_present)
    s2.connect("127.0.0.1", m2); s2.loop_start(); time.sleep(3)
    print("after restart, reconnect to the same node n2: session_present", sp, "received", got)
for x in (n1, n2): x.kill()
print("node logs:", W)
