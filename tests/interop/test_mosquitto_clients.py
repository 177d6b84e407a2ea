"""Interoperability tests against Hayate with Mosquitto's command-line clients
(mosquitto_pub / mosquitto_sub, run as subprocesses; no mocks).

mosquitto_sub is always run with -d under `stdbuf -oL`, so that its "Subscribed (mid: N): ..."
debug line reaches us as soon as the SUBACK arrives: tests wait for it before publishing, instead
of sleeping. Debug lines start with "Client " or "Subscribed (mid"; every other stdout line is a
message printed in the requested format. Every wait is bounded by a timeout.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid

import pytest

VERSIONS = [pytest.param("mqttv311", id="v311"), pytest.param("mqttv5", id="v5")]
TIMEOUT = 15.0
QUIET = 1.5

for tool in ("mosquitto_pub", "mosquitto_sub", "stdbuf"):
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} not found on PATH (apt-get install mosquitto-clients coreutils)", pytrace=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def is_debug(line: str) -> bool:
    return line.startswith("Client ") or line.startswith("Subscribed (mid")


def pub(broker, version: str, *args: str, input: bytes | None = None, timeout: float = TIMEOUT):
    """Runs mosquitto_pub to completion and asserts it succeeded."""
    cmd = ["mosquitto_pub", "-h", broker.host, "-p", str(broker.port), "-V", version, *args]
    try:
        res = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mosquitto_pub did not finish within {timeout}s: {cmd}\n{e.stderr!r}")
    assert res.returncode == 0, f"{cmd} exited {res.returncode}: {res.stderr.decode(errors='replace')}"
    return res


class Sub:
    """A running mosquitto_sub with its output collected line by line in a background thread."""

    def __init__(self, broker, version: str, *args: str):
        self.cmd = [
            "stdbuf", "-oL",
            "mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-V", version, "-d", *args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.debug: list[str] = []
        self.stderr = b""
        self._suback = threading.Event()
        self.suback_codes: list[int] | None = None
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if is_debug(line):
                self.debug.append(line)
                m = re.match(r"Subscribed \(mid: \d+\): (.*)", line)
                if m and self.suback_codes is None:
                    self.suback_codes = [int(x) for x in m.group(1).split(",")]
                    self._suback.set()
            else:
                self.lines.put(line)

    def _read_stderr(self):
        self.stderr = self.proc.stderr.read()

    def wait_subscribed(self, timeout: float = TIMEOUT) -> list[int]:
        deadline = time.monotonic() + timeout
        while not self._suback.wait(0.05):
            if self.proc.poll() is not None:
                self._out.join(2)
                if self._suback.is_set():
                    break
                pytest.fail(f"mosquitto_sub exited {self.proc.returncode} before SUBACK: {self.report()}")
            if time.monotonic() > deadline:
                pytest.fail(f"mosquitto_sub got no SUBACK within {timeout}s: {self.report()}")
        return self.suback_codes

    def expect(self, count: int, timeout: float = TIMEOUT) -> list[str]:
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                got.append(self.lines.get(timeout=remaining))
            except queue.Empty:
                break
        assert len(got) == count, f"expected {count} messages, got {len(got)}: {got[:10]} {self.report()}"
        return got

    def drain(self, wait: float = QUIET) -> list[str]:
        got = []
        deadline = time.monotonic() + wait
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                got.append(self.lines.get(timeout=remaining))
            except queue.Empty:
                break
        return got

    def wait(self, timeout: float = TIMEOUT) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            pytest.fail(f"mosquitto_sub did not exit within {timeout}s: {self.report()}")
        self._out.join(5)
        self._err.join(5)
        return rc

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(5)

    def report(self) -> str:
        return f"\ncmd: {self.cmd}\ndebug: {self.debug[-8:]}\nstderr: {self.stderr!r}"


@pytest.fixture
def subs():
    made: list[Sub] = []

    def make(broker, version, *args) -> Sub:
        s = Sub(broker, version, *args)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.kill()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("version", VERSIONS)
def test_pub_sub_each_qos(broker, subs, version, qos):
    topic = unique("mosq/qos")
    n = 20
    s = subs(broker, version, "-t", topic, "-q", str(qos), "-C", str(n), "-F", "%q %r %t %p")
    assert s.wait_subscribed() == [qos]
    for i in range(n):
        pub(broker, version, "-t", topic, "-q", str(qos), "-m", f"msg-{i}")
    assert s.wait() == 0, s.report()
    got = s.expect(n, timeout=1)
    # Separate publisher connections: compare as a multiset (order is only per connection).
    assert sorted(got) == sorted(f"{qos} 0 {topic} msg-{i}" for i in range(n))
    assert s.drain(0.1) == []


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("version", VERSIONS)
def test_pub_stdin_lines_all_arrive_in_order(broker, subs, version, qos):
    topic = unique("mosq/lines")
    n = 2000
    s = subs(broker, version, "-t", topic, "-q", str(qos), "-C", str(n))
    s.wait_subscribed()
    lines = "".join(f"line {i}\n" for i in range(n)).encode()
    pub(broker, version, "-t", topic, "-q", str(qos), "-l", input=lines, timeout=60)
    assert s.wait(timeout=60) == 0, s.report()
    got = s.expect(n, timeout=1)
    assert got == [f"line {i}" for i in range(n)], "lines lost, duplicated or reordered"


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_flag_and_clear(broker, subs, version):
    topic = unique("mosq/retained")
    pub(broker, version, "-t", topic, "-q", "1", "-r", "-m", "kept")

    s = subs(broker, version, "-t", topic, "-q", "1", "-C", "1", "-F", "%r %q %t %p")
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == [f"1 1 {topic} kept"]

    # A live subscriber sees a new retained publish with RETAIN 0.
    live = subs(broker, version, "-t", topic, "-q", "1", "-F", "%r %p")
    assert live.expect(1) == ["1 kept"]
    pub(broker, version, "-t", topic, "-q", "1", "-r", "-m", "replaced")
    assert live.expect(1) == ["0 replaced"]

    # Clear it with a zero-length retained message (-n).
    pub(broker, version, "-t", topic, "-q", "1", "-r", "-n")
    assert live.expect(1) == ["0 "]
    later = subs(broker, version, "-t", topic, "-q", "1", "-F", "%r %p")
    later.wait_subscribed()
    stale = later.drain()
    assert stale == [], f"retained message not cleared: {stale}"


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_only_option(broker, subs, version):
    base = unique("mosq/retonly")
    for name in ("x", "y"):
        pub(broker, version, "-t", f"{base}/{name}", "-r", "-m", name)
    s = subs(broker, version, "-t", f"{base}/#", "--retained-only", "-F", "%t %p", "-W", "3")
    s.wait_subscribed()
    got = s.expect(2)
    assert sorted(got) == [f"{base}/x x", f"{base}/y y"]
    # The first non-retained message makes mosquitto_sub exit on its own.
    pub(broker, version, "-t", f"{base}/z", "-m", "live")
    assert s.wait() == 0, s.report()


@pytest.mark.parametrize("version", VERSIONS)
def test_will_published_when_client_killed(broker, subs, version):
    will_topic = unique("mosq/will")
    observer = subs(broker, version, "-t", will_topic, "-q", "1", "-C", "1", "-F", "%q %t %p")
    observer.wait_subscribed()

    victim = subs(
        broker, version, "-t", unique("mosq/idle"),
        "--will-topic", will_topic, "--will-payload", "victim died", "--will-qos", "1",
    )  # fmt: skip
    victim.wait_subscribed()
    assert observer.drain(0.3) == []
    victim.kill(signal.SIGKILL)

    assert observer.wait() == 0, observer.report()
    assert observer.expect(1, timeout=1) == [f"1 {will_topic} victim died"]


@pytest.mark.parametrize("version", VERSIONS)
def test_will_not_published_after_normal_exit(broker, subs, version):
    will_topic = unique("mosq/nowill")
    topic = unique("mosq/trigger")
    observer = subs(broker, version, "-t", will_topic, "-q", "1", "-F", "%t %p")
    observer.wait_subscribed()

    # -C 1: receive one message, then DISCONNECT normally and exit 0.
    polite = subs(
        broker, version, "-t", topic, "-C", "1",
        "--will-topic", will_topic, "--will-payload", "must not appear",
    )  # fmt: skip
    polite.wait_subscribed()
    pub(broker, version, "-t", topic, "-m", "bye")
    assert polite.wait() == 0, polite.report()
    assert polite.expect(1, timeout=1) == ["bye"]
    leaked = observer.drain(2.0)
    assert leaked == [], f"will published after a normal DISCONNECT: {leaked}"


def test_v5_properties_round_trip(broker, subs):
    topic = unique("mosq/props")
    fmt = "C=%C|D=%D|E=%E|F=%F|P=%P|R=%R|S=%S|t=%t|p=%p"
    s = subs(broker, "mqttv5", "-t", topic, "-q", "1", "-C", "1", "-F", fmt,
             "-D", "subscribe", "subscription-identifier", "17")  # fmt: skip
    s.wait_subscribed()
    pub(
        broker, "mqttv5", "-t", topic, "-q", "1", "-m", "payload text",
        "-D", "publish", "user-property", "a", "b",
        "-D", "publish", "user-property", "c", "d",
        "-D", "publish", "user-property", "a", "z",
        "-D", "publish", "content-type", "text/plain",
        "-D", "publish", "correlation-data", "corr-123",
        "-D", "publish", "response-topic", f"{topic}/response",
        "-D", "publish", "payload-format-indicator", "1",
        "-D", "publish", "message-expiry-interval", "120",
    )  # fmt: skip
    assert s.wait() == 0, s.report()
    [line] = s.expect(1, timeout=1)
    fields = dict(part.split("=", 1) for part in line.split("|"))
    assert fields["C"] == "text/plain"
    assert fields["D"] == "corr-123"
    assert fields["P"] == "a:b c:d a:z", "user properties lost or reordered"
    assert fields["R"] == f"{topic}/response"
    assert fields["F"] == "1"
    assert fields["E"] and 0 < int(fields["E"]) <= 120, f"message expiry interval {fields['E']!r}"
    assert fields["S"] == "17"
    assert fields["t"] == topic
    assert fields["p"] == "payload text"


def test_v5_user_property_seen_with_simple_format(broker, subs):
    topic = unique("mosq/userprop")
    s = subs(broker, "mqttv5", "-t", topic, "-C", "1", "-F", "%P %t %p")
    s.wait_subscribed()
    pub(broker, "mqttv5", "-t", topic, "-m", "hi", "-D", "publish", "user-property", "a", "b")
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == [f"a:b {topic} hi"]


@pytest.mark.parametrize(("pub_version", "sub_version"), [("mqttv5", "mqttv311"), ("mqttv311", "mqttv5")])
def test_cross_protocol_delivery(broker, subs, pub_version, sub_version):
    topic = unique("mosq/cross")
    s = subs(broker, sub_version, "-t", topic, "-q", "2", "-C", "1", "-v")
    s.wait_subscribed()
    extra = ["-D", "publish", "user-property", "k", "v"] if pub_version == "mqttv5" else []
    pub(broker, pub_version, "-t", topic, "-q", "2", "-m", "across versions", *extra)
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == [f"{topic} across versions"]


@pytest.mark.parametrize("version", VERSIONS)
def test_large_payload_from_file(broker, subs, version, tmp_path):
    topic = unique("mosq/large")
    data = os.urandom(300_000)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    s = subs(broker, version, "-t", topic, "-q", "1", "-C", "1", "-F", "%l %x")
    s.wait_subscribed()
    pub(broker, version, "-t", topic, "-q", "1", "-f", str(path))
    assert s.wait() == 0, s.report()
    [line] = s.expect(1, timeout=1)
    length, hexdata = line.split(" ", 1)
    assert int(length) == len(data)
    assert bytes.fromhex(hexdata) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_persistent_session_offline_queue(broker, subs, version):
    topic = unique("mosq/persist")
    cid = unique("mosqsub")
    session = ["-c", "-i", cid, "-q", "1"] + (["-x", "300"] if version == "mqttv5" else [])
    first = subs(broker, version, "-t", topic, *session, "-C", "1")
    first.wait_subscribed()
    pub(broker, version, "-t", topic, "-q", "1", "-m", "online")
    assert first.wait() == 0, first.report()
    assert first.expect(1, timeout=1) == ["online"]

    for i in range(5):
        pub(broker, version, "-t", topic, "-q", "1", "-m", f"offline-{i}")

    again = subs(broker, version, "-t", topic, *session, "-C", "5")
    assert again.wait() == 0, again.report()
    assert again.expect(5, timeout=1) == [f"offline-{i}" for i in range(5)]
    # (mosquitto_sub -d does not print the session-present flag; test_paho checks it.)


DENY_CONFIG = '[auth]\ndeny_subscribe = ["test/nosubscribe"]\n'


@pytest.mark.parametrize(("version", "code"), [("mqttv311", 128), ("mqttv5", 135)])
def test_denied_subscription(broker_factory, subs, version, code):
    broker = broker_factory(DENY_CONFIG)
    s = subs(broker, version, "-t", "test/nosubscribe", "-q", "1")
    assert s.wait_subscribed() == [code]
    # mosquitto_sub reports the refusal on stderr and exits by itself (status 0 in
    # mosquitto 2.0.11) rather than waiting for messages.
    rc = s.wait(timeout=TIMEOUT)
    assert rc in (0, 1), f"unexpected exit status {rc}: {s.report()}"
    assert b"All subscription requests were denied" in s.stderr, s.report()
    assert s.drain(0.1) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_denied_subscription_among_allowed(broker_factory, subs, version):
    broker = broker_factory(DENY_CONFIG)
    ok_topic = unique("test/allowed")
    s = subs(broker, version, "-t", "test/nosubscribe", "-t", ok_topic, "-q", "1", "-v")
    codes = s.wait_subscribed()
    assert codes[0] >= 128 and codes[1] == 1, codes
    pub(broker, version, "-t", "test/nosubscribe", "-q", "1", "-m", "secret")
    pub(broker, version, "-t", ok_topic, "-q", "1", "-m", "fine")
    assert s.expect(1) == [f"{ok_topic} fine"]
    assert s.drain() == [], "message delivered on a refused subscription"
    assert s.proc.poll() is None, "mosquitto_sub should keep running with one subscription granted"


def test_mqtt_v31_clients(broker, subs):
    topic = unique("mosq/v31")
    s = subs(broker, "mqttv31", "-t", topic, "-q", "2", "-C", "3", "-v")
    s.wait_subscribed()
    for qos in (0, 1, 2):
        pub(broker, "mqttv31", "-t", topic, "-q", str(qos), "-m", f"q{qos}")
    assert s.wait() == 0, s.report()
    assert sorted(s.expect(3, timeout=1)) == [f"{topic} q0", f"{topic} q1", f"{topic} q2"]


@pytest.mark.parametrize("version", VERSIONS)
def test_sys_topics(broker_factory, subs, version):
    broker = broker_factory("[server]\nsys_interval_secs = 1\n")
    s = subs(broker, version, "-t", "$SYS/broker/version", "-t", "$SYS/broker/uptime", "-C", "3", "-v")
    assert s.wait(timeout=10) == 0, s.report()
    got = s.expect(3, timeout=1)
    topics = {line.split(" ", 1)[0] for line in got}
    assert topics == {"$SYS/broker/version", "$SYS/broker/uptime"}, got
    for line in got:
        topic, value = line.split(" ", 1)
        if topic == "$SYS/broker/uptime":
            assert re.fullmatch(r"\d+ seconds", value), line
        else:
            assert "hayate" in value.lower(), line


@pytest.mark.parametrize("version", VERSIONS)
def test_remove_retained(broker, subs, version):
    base = unique("mosq/rmret")
    for name in ("a", "b", "c"):
        pub(broker, version, "-t", f"{base}/{name}", "-q", "1", "-r", "-m", name)
    cleaner = subs(broker, version, "-t", f"{base}/#", "--remove-retained", "--retained-only", "-W", "2", "-v")
    cleaner.wait_subscribed()
    assert sorted(cleaner.expect(3)) == [f"{base}/a a", f"{base}/b b", f"{base}/c c"]
    cleaner.wait(timeout=10)
    later = subs(broker, version, "-t", f"{base}/#", "-v")
    later.wait_subscribed()
    stale = later.drain()
    assert stale == [], f"--remove-retained did not clear: {stale}"
