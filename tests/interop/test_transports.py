"""Interoperability tests of Hayate's `[[listener]]` transports with real clients (no mocks):
MQTT over TLS (`mqtts`, server certificate only and mutual TLS), TLS-PSK (`psk`), WebSocket
(`ws`) and WebSocket over TLS (`wss`).

Certificates are made once per session with the `cryptography` package: a CA, a server
certificate for 127.0.0.1 / localhost, a client certificate CN=alice from the CA, and a rogue CA
with a client certificate CN=mallory. Every test starts a broker (conftest's `broker_factory`,
which also gives it a plain TCP listener) with one listener of each kind on free ports and waits
until each of them accepts TCP connections.

Clients: mosquitto_pub / mosquitto_sub (TCP, TLS, PSK) and paho-mqtt 2.x (TCP, TLS, WebSocket,
WebSocket over TLS; Python's ssl module cannot easily speak TLS 1.2 PSK). As in
test_mosquitto_clients.py, mosquitto_sub runs with -d under `stdbuf -oL` and tests wait for its
"Subscribed (mid: N)" line before publishing. Every wait is bounded by a timeout.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import queue
import re
import selectors
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from conftest import free_port
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

V311 = MQTTProtocolVersion.MQTTv311
V5 = MQTTProtocolVersion.MQTTv5
PROTOCOLS = [pytest.param(V311, id="v311"), pytest.param(V5, id="v5")]
VERSIONS = [pytest.param("mqttv311", id="v311"), pytest.param("mqttv5", id="v5")]

TIMEOUT = 15.0  # seconds for any single expected event
QUIET = 1.5  # seconds to wait when checking that nothing (more) arrives
LISTENER_TIMEOUT = 15.0  # seconds for the [[listener]] ports to accept connections
CONNECT_TIMEOUT_SECS = 2  # server.connect_timeout_secs in every broker of this file
CLOSE_SLACK = 2.5  # seconds allowed past the connect timeout for an idle socket to be closed
IDLE_SOCKETS = 50

PSK_KEYS = {"alice": "0123456789abcdef0123456789abcdef", "bob": "fedcba9876543210fedcba9876543210"}
PSK_HINT = "hayate-interop"

for tool in ("mosquitto_pub", "mosquitto_sub", "stdbuf"):
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} not found on PATH (apt-get install mosquitto-clients coreutils)", pytrace=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"




# ---------------------------------------------------------------------------------------------
# Certificates and keys


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    alice_cert: Path
    alice_key: Path
    rogue_ca: Path
    mallory_cert: Path
    mallory_key: Path
    psk_file: Path


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hayate interop"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _make_ca(cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _make_leaf(ca_key, ca_cert, cn: str, *, server: bool):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca_cert = _make_ca("Hayate interop CA")
    server_key, server_cert = _make_leaf(ca_key, ca_cert, "localhost", server=True)
    alice_key, alice_cert = _make_leaf(ca_key, ca_cert, "alice", server=False)
    rogue_key, rogue_cert = _make_ca("Rogue CA")
    mallory_key, mallory_cert = _make_leaf(rogue_key, rogue_cert, "mallory", server=False)
    p = Pki(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        alice_cert=d / "alice.pem",
        alice_key=d / "alice.key",
        rogue_ca=d / "rogue-ca.pem",
        mallory_cert=d / "mallory.pem",
        mallory_key=d / "mallory.key",
        psk_file=d / "psk.txt",
    )
    _write_cert(ca_cert, p.ca)
    _write_cert(server_cert, p.server_cert)
    _write_key(server_key, p.server_key)
    _write_cert(alice_cert, p.alice_cert)
    _write_key(alice_key, p.alice_key)
    _write_cert(rogue_cert, p.rogue_ca)
    _write_cert(mallory_cert, p.mallory_cert)
    _write_key(mallory_key, p.mallory_key)
    p.psk_file.write_text("".join(f"{identity}:{key}\n" for identity, key in PSK_KEYS.items()))
    return p


# ---------------------------------------------------------------------------------------------
# A broker with one listener of each kind


KINDS = ("mqtts", "mtls", "psk", "ws", "wss")


@dataclass
class Endpoint:
    """Where a client connects."""

    host: str
    port: int


@dataclass
class TransportBroker:
    broker: object  # conftest.Broker
    ports: dict[str, int]

    @property
    def tcp(self) -> Endpoint:
        return Endpoint(self.broker.host, self.broker.port)

    def ep(self, kind: str) -> Endpoint:
        return Endpoint(self.broker.host, self.ports[kind])

    def log(self) -> str:
        return self.broker.log()


def _toml_str(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def transports_config(
    pki: Pki, ports: dict[str, int], *, ws_path: str | None = None, extra: dict[str, str] | None = None
) -> str:
    """One [[listener]] per kind; `extra` adds TOML lines to the listener of a kind, and to an
    `[auth]` table under the key "auth"."""
    tls = f"cert_file = {_toml_str(pki.server_cert)}\nkey_file = {_toml_str(pki.server_key)}\n"
    path = f"ws_path = {_toml_str(ws_path)}\n" if ws_path is not None else ""
    x = {kind: (extra or {}).get(kind, "") for kind in KINDS}
    return (
        "[server]\n"
        f"connect_timeout_secs = {CONNECT_TIMEOUT_SECS}\n"
        'log_level = "info,hayate_server::listener=debug"\n'
        "\n[[listener]]\n"
        'name = "mqtts"\ntransport = "mqtts"\n'
        f'bind = "127.0.0.1:{ports["mqtts"]}"\n{tls}{x["mqtts"]}'
        "\n[[listener]]\n"
        'name = "mtls"\ntransport = "mqtts"\n'
        f'bind = "127.0.0.1:{ports["mtls"]}"\n{tls}'
        f"ca_file = {_toml_str(pki.ca)}\nrequire_certificate = true\n{x['mtls']}"
        "\n[[listener]]\n"
        'name = "psk"\ntransport = "psk"\n'
        f'bind = "127.0.0.1:{ports["psk"]}"\n'
        f"psk_file = {_toml_str(pki.psk_file)}\npsk_hint = {_toml_str(PSK_HINT)}\n{x['psk']}"
        "\n[[listener]]\n"
        'name = "ws"\ntransport = "ws"\n'
        f'bind = "127.0.0.1:{ports["ws"]}"\n{path}{x["ws"]}'
        "\n[[listener]]\n"
        'name = "wss"\ntransport = "wss"\n'
        f'bind = "127.0.0.1:{ports["wss"]}"\n{tls}{path}{x["wss"]}'
        + (f"\n[auth]\n{extra['auth']}" if extra and "auth" in extra else "")
    )


def wait_port(broker, port: int, timeout: float = LISTENER_TIMEOUT) -> None:
    """Waits until `port` accepts a TCP connection, failing if the broker exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        if broker.process.poll() is not None:
            pytest.fail(f"broker exited with {broker.process.returncode}:\n{broker.log()}", pytrace=False)
        try:
            with socket.create_connection((broker.host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"listener 127.0.0.1:{port} not accepting within {timeout}s:\n{broker.log()}", pytrace=False
                )
            time.sleep(0.05)


@pytest.fixture
def start_transports(broker_factory, pki):
    """Returns start(ws_path=None, extra=None) -> TransportBroker with listeners mqtts, mtls, psk,
    ws, wss (see transports_config)."""

    def start(*, ws_path: str | None = None, extra: dict[str, str] | None = None) -> TransportBroker:
        ports = {kind: free_port() for kind in KINDS}
        broker = broker_factory(transports_config(pki, ports, ws_path=ws_path, extra=extra))
        for port in ports.values():
            wait_port(broker, port)
        return TransportBroker(broker, ports)

    return start


@pytest.fixture
def tb(start_transports) -> TransportBroker:
    return start_transports()


def wait_log(tb: TransportBroker, needle: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in tb.log():
            return True
        time.sleep(0.05)
    return needle in tb.log()


# ---------------------------------------------------------------------------------------------
# mosquitto_pub / mosquitto_sub


def mosq_args(pki: Pki, kind: str, *, psk_identity: str = "alice", psk_key: str | None = None) -> list[str]:
    """The connection options of mosquitto_pub/sub for a listener kind (tcp, mqtts, mtls, psk)."""
    if kind == "tcp":
        return []
    if kind == "mqtts":
        return ["--cafile", str(pki.ca)]
    if kind == "mtls":
        return ["--cafile", str(pki.ca), "--cert", str(pki.alice_cert), "--key", str(pki.alice_key)]
    if kind == "psk":
        return ["--psk", psk_key if psk_key is not None else PSK_KEYS[psk_identity], "--psk-identity", psk_identity]
    raise ValueError(kind)


def run_pub(
    ep: Endpoint, version: str, *args: str, input: bytes = b"", timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    """Runs mosquitto_pub to completion (it must finish within `timeout`) and returns the result."""
    cmd = ["mosquitto_pub", "-h", ep.host, "-p", str(ep.port), "-V", version, *args]
    try:
        return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mosquitto_pub did not finish within {timeout}s: {cmd}\n{e.stderr!r}")


def pub(
    ep: Endpoint, version: str, *args: str, input: bytes = b"", timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    res = run_pub(ep, version, *args, input=input, timeout=timeout)
    assert res.returncode == 0, f"{res.args} exited {res.returncode}: {res.stderr.decode(errors='replace')}"
    return res


def is_debug(line: str) -> bool:
    return line.startswith("Client ") or line.startswith("Subscribed (mid")


class Sub:
    """A running mosquitto_sub with its output collected line by line in a background thread."""

    def __init__(self, ep: Endpoint, version: str, *args: str):
        self.cmd = [
            "stdbuf", "-oL",
            "mosquitto_sub", "-h", ep.host, "-p", str(ep.port), "-V", version, "-d", *args,
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
                self._err.join(2)
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

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def report(self) -> str:
        return f"\ncmd: {self.cmd}\ndebug: {self.debug[-8:]}\nstderr: {self.stderr!r}"


@pytest.fixture
def subs():
    made: list[Sub] = []

    def make(ep: Endpoint, version: str, *args: str) -> Sub:
        s = Sub(ep, version, *args)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.kill()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# paho-mqtt


class Paho:
    """A paho client for one listener kind (tcp, mqtts, mtls, ws, wss), its network loop in a
    thread, with blocking, bounded helpers."""

    def __init__(
        self,
        ep: Endpoint,
        protocol: MQTTProtocolVersion,
        *,
        websockets: bool = False,
        ws_path: str = "/mqtt",
        ca: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
    ) -> None:
        self.ep = ep
        self.protocol = protocol
        self.client_id = unique("paho")
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=protocol,
            transport="websockets" if websockets else "tcp",
            reconnect_on_failure=False,
        )
        if websockets:
            self.client.ws_set_options(path=ws_path)
        if ca is not None:
            self.client.tls_set(ca_certs=str(ca), certfile=cert and str(cert), keyfile=key and str(key))
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connack = threading.Event()
        self._disconnected = threading.Event()
        self.connect_rc = None
        self.disconnect_rc = None
        self._subacks: dict[int, list] = {}
        self._suback_cond = threading.Condition()
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        self._loop_started = False

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.connect_rc = reason_code
        self._connack.set()

    def _on_message(self, client, userdata, msg):
        self.messages.put(msg)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._suback_cond:
            self._subacks[mid] = list(reason_codes)
            self._suback_cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self.disconnect_rc = reason_code
        self._disconnected.set()

    def try_connect(self, timeout: float = TIMEOUT) -> str | None:
        """Connects; returns None once a successful CONNACK arrived, else why it did not."""
        try:
            self.client.connect(self.ep.host, self.ep.port, keepalive=30)
        except OSError as e:  # ssl.SSLError and paho's WebsocketConnectionError included
            return f"connect() raised {type(e).__name__}: {e}"
        self.client.loop_start()
        self._loop_started = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._connack.wait(0.05):
                if self.connect_rc.is_failure:
                    return f"CONNACK refused: {self.connect_rc}"
                return None
            if self._disconnected.is_set():
                return f"disconnected before CONNACK: {self.disconnect_rc}"
        return f"no CONNACK within {timeout}s"

    def connect(self) -> Paho:
        why = self.try_connect()
        assert why is None, f"{self.client_id} to port {self.ep.port}: {why}"
        return self

    def subscribe(self, topic: str, qos: int) -> list[int]:
        rc, mid = self.client.subscribe(topic, qos)
        assert rc == mqtt.MQTT_ERR_SUCCESS, f"subscribe({topic}) failed to send: {rc}"
        with self._suback_cond:
            ok = self._suback_cond.wait_for(lambda: mid in self._subacks, timeout=TIMEOUT)
            assert ok, f"no SUBACK for {topic} within {TIMEOUT}s"
            codes = self._subacks.pop(mid)
        return [c.value if hasattr(c, "value") else int(c) for c in codes]

    def publish(self, topic: str, payload, qos: int = 0, retain: bool = False, wait: bool = True):
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, f"publish to {topic} failed: {info.rc}"
        if wait:
            info.wait_for_publish(timeout=TIMEOUT)
            assert info.is_published(), f"publish to {topic} (qos {qos}) not completed within {TIMEOUT}s"
        return info

    def expect(self, count: int, timeout: float = TIMEOUT) -> list[mqtt.MQTTMessage]:
        deadline = time.monotonic() + timeout
        got: list[mqtt.MQTTMessage] = []
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                got.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                break
        assert len(got) == count, (
            f"{self.client_id}: expected {count} messages, got {len(got)} within {timeout}s: "
            f"{[(m.topic, m.payload[:40]) for m in got[:10]]}"
        )
        return got

    def drain(self, wait: float = QUIET) -> list[mqtt.MQTTMessage]:
        deadline = time.monotonic() + wait
        got = []
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                got.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                break
        return got

    def close(self) -> None:
        if self.client.is_connected():
            self.client.disconnect()
            self._disconnected.wait(TIMEOUT)
        if self._loop_started:
            self.client.loop_stop()
        else:
            try:
                self.client.socket() and self.client.socket().close()
            except OSError:
                pass


def paho_options(pki: Pki, kind: str) -> dict:
    """paho options for a listener kind."""
    return {
        "tcp": {},
        "mqtts": {"ca": pki.ca},
        "mtls": {"ca": pki.ca, "cert": pki.alice_cert, "key": pki.alice_key},
        "ws": {"websockets": True},
        "wss": {"websockets": True, "ca": pki.ca},
    }[kind]


@pytest.fixture
def clients(pki):
    """make(tb, kind, protocol, **overrides) -> Paho (not yet connected); closed at teardown."""
    made: list[Paho] = []

    def make(tb: TransportBroker, kind: str, protocol, **overrides) -> Paho:
        ep = tb.tcp if kind == "tcp" else tb.ep(kind)
        c = Paho(ep, protocol, **{**paho_options(pki, kind), **overrides})
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass


def paho_round_trip(clients, tb: TransportBroker, kind: str, protocol, qos_levels=(0, 1, 2)) -> None:
    """A subscriber and a publisher on `kind` exchange one message per QoS level."""
    sub = clients(tb, kind, protocol).connect()
    pub_ = clients(tb, kind, protocol).connect()
    topic = unique(f"{kind}/rt")
    assert sub.subscribe(f"{topic}/#", 2) == [2]
    for qos in qos_levels:
        pub_.publish(f"{topic}/{qos}", f"{kind} qos {qos}".encode(), qos=qos)
    msgs = sub.expect(len(qos_levels))
    assert sorted((m.topic, m.payload, m.qos) for m in msgs) == sorted(
        (f"{topic}/{qos}", f"{kind} qos {qos}".encode(), qos) for qos in qos_levels
    )
    assert sub.drain(0.3) == []


# =============================================================================================
# 1. MQTT over TLS (server certificate)


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("version", VERSIONS)
def test_mqtts_mosquitto_clients_deliver(tb, pki, subs, version, qos):
    topic = unique("mqtts/mosq")
    ep = tb.ep("mqtts")
    tls = mosq_args(pki, "mqtts")
    s = subs(ep, version, *tls, "-t", topic, "-q", str(qos), "-C", "3", "-F", "%q %t %p")
    assert s.wait_subscribed() == [qos]
    for i in range(3):
        pub(ep, version, *tls, "-t", topic, "-q", str(qos), "-m", f"over tls {i}")
    assert s.wait() == 0, s.report()
    assert s.expect(3, timeout=1) == [f"{qos} {topic} over tls {i}" for i in range(3)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mqtts_paho_round_trip(tb, clients, protocol):
    paho_round_trip(clients, tb, "mqtts", protocol)


@pytest.mark.parametrize("version", VERSIONS)
def test_mqtts_retained_message(tb, pki, subs, version):
    topic = unique("mqtts/retained")
    ep = tb.ep("mqtts")
    tls = mosq_args(pki, "mqtts")
    pub(ep, version, *tls, "-t", topic, "-q", "1", "-r", "-m", "kept over tls")
    s = subs(ep, version, *tls, "-t", topic, "-q", "1", "-C", "1", "-F", "%r %q %t %p")
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == [f"1 1 {topic} kept over tls"]
    # The same retained message reaches a plain TCP subscriber too.
    t = subs(tb.tcp, version, "-t", topic, "-q", "1", "-C", "1", "-F", "%r %q %t %p")
    assert t.wait() == 0, t.report()
    assert t.expect(1, timeout=1) == [f"1 1 {topic} kept over tls"]


def test_mqtts_untrusted_server_certificate_fails(tb, pki, subs, clients):
    """Clients that trust only the rogue CA refuse Hayate's certificate; nothing is delivered."""
    topic = unique("mqtts/untrusted")
    watcher = subs(tb.tcp, "mqttv5", "-t", topic, "-q", "1", "-v")
    watcher.wait_subscribed()
    ep = tb.ep("mqtts")

    res = run_pub(ep, "mqttv311", "--cafile", str(pki.rogue_ca), "-t", topic, "-q", "1", "-m", "must not arrive")
    assert res.returncode != 0, f"mosquitto_pub trusted a certificate from another CA: {res.stderr!r}"

    c = clients(tb, "mqtts", V5, ca=pki.rogue_ca)
    why = c.try_connect()
    assert why is not None and "SSLCertVerificationError" in why, f"paho connected or failed otherwise: {why}"
    assert watcher.drain() == [], "a message got through an untrusted TLS connection"

    # Control: the same publish with the right CA arrives.
    pub(ep, "mqttv311", *mosq_args(pki, "mqtts"), "-t", topic, "-q", "1", "-m", "trusted")
    assert watcher.expect(1) == [f"{topic} trusted"]


def test_mqtts_plain_mqtt_client_refused(tb, subs):
    """A plain MQTT client talking to the TLS port gets no CONNACK and delivers nothing."""
    topic = unique("mqtts/plain")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-v")
    watcher.wait_subscribed()
    res = run_pub(tb.ep("mqtts"), "mqttv311", "-t", topic, "-q", "1", "-m", "cleartext")
    assert res.returncode != 0, "mosquitto_pub without TLS succeeded against the mqtts listener"
    assert watcher.drain() == []


# =============================================================================================
# 2. Mutual TLS (require_certificate = true, ca_file)


@pytest.mark.parametrize("version", VERSIONS)
def test_mtls_client_certificate_delivers(tb, pki, subs, version):
    topic = unique("mtls/alice")
    ep = tb.ep("mtls")
    alice = mosq_args(pki, "mtls")
    s = subs(ep, version, *alice, "-t", topic, "-q", "2", "-C", "2", "-F", "%q %t %p")
    assert s.wait_subscribed() == [2]
    pub(ep, version, *alice, "-t", topic, "-q", "1", "-m", "from alice q1")
    pub(ep, version, *alice, "-t", topic, "-q", "2", "-m", "from alice q2")
    assert s.wait() == 0, s.report()
    assert s.expect(2, timeout=1) == [f"1 {topic} from alice q1", f"2 {topic} from alice q2"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mtls_paho_round_trip(tb, clients, protocol):
    paho_round_trip(clients, tb, "mtls", protocol, qos_levels=(1, 2))


def test_mtls_without_client_certificate_refused(tb, pki, subs, clients):
    topic = unique("mtls/nocert")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-q", "1", "-v")
    watcher.wait_subscribed()
    ep = tb.ep("mtls")

    for version in ("mqttv311", "mqttv5"):
        res = run_pub(ep, version, "--cafile", str(pki.ca), "-t", topic, "-q", "1", "-m", "no certificate")
        assert res.returncode != 0, f"mosquitto_pub {version} without a client certificate succeeded"
    why = clients(tb, "mtls", V5, cert=None, key=None).try_connect()
    assert why is not None, "paho connected to a require_certificate listener without a certificate"
    assert watcher.drain() == [], "a client without a certificate delivered a message"

    pub(ep, "mqttv311", *mosq_args(pki, "mtls"), "-t", topic, "-q", "1", "-m", "with certificate")
    assert watcher.expect(1) == [f"{topic} with certificate"]


def test_mtls_certificate_from_rogue_ca_refused(tb, pki, subs, clients):
    topic = unique("mtls/mallory")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-q", "1", "-v")
    watcher.wait_subscribed()
    ep = tb.ep("mtls")
    mallory = ["--cafile", str(pki.ca), "--cert", str(pki.mallory_cert), "--key", str(pki.mallory_key)]

    for version in ("mqttv311", "mqttv5"):
        res = run_pub(ep, version, *mallory, "-t", topic, "-q", "1", "-m", "from mallory")
        assert res.returncode != 0, f"mosquitto_pub {version} with mallory's certificate succeeded"
    why = clients(tb, "mtls", V311, cert=pki.mallory_cert, key=pki.mallory_key).try_connect()
    assert why is not None, "paho connected with a certificate from an untrusted CA"
    assert watcher.drain() == [], "mallory delivered a message"

    pub(ep, "mqttv311", *mosq_args(pki, "mtls"), "-t", topic, "-q", "1", "-m", "from alice")
    assert watcher.expect(1) == [f"{topic} from alice"]


def test_mtls_listener_alongside_plain_tls(tb, pki, subs):
    """The certificate requirement is per listener: the mqtts listener still takes clients
    without a certificate, while the mtls one in the same broker refuses them."""
    topic = unique("mtls/perlistener")
    s = subs(tb.ep("mtls"), "mqttv5", *mosq_args(pki, "mtls"), "-t", topic, "-q", "1", "-C", "1", "-v")
    s.wait_subscribed()
    pub(tb.ep("mqtts"), "mqttv5", *mosq_args(pki, "mqtts"), "-t", topic, "-q", "1", "-m", "no cert needed here")
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == [f"{topic} no cert needed here"]


# =============================================================================================
# 3. TLS-PSK


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("version", VERSIONS)
def test_psk_mosquitto_clients_deliver(tb, pki, subs, version, qos):
    topic = unique("psk/mosq")
    ep = tb.ep("psk")
    alice = mosq_args(pki, "psk", psk_identity="alice")
    s = subs(ep, version, *alice, "-t", topic, "-q", str(qos), "-C", "3", "-F", "%q %t %p")
    assert s.wait_subscribed() == [qos]
    for i in range(3):
        pub(ep, version, *mosq_args(pki, "psk", psk_identity="bob"), "-t", topic, "-q", str(qos), "-m", f"psk {i}")
    assert s.wait() == 0, s.report()
    assert s.expect(3, timeout=1) == [f"{qos} {topic} psk {i}" for i in range(3)]


def test_psk_wrong_key_fails(tb, pki, subs):
    topic = unique("psk/wrongkey")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-q", "1", "-v")
    watcher.wait_subscribed()
    ep = tb.ep("psk")
    wrong = "00" * 16
    assert wrong != PSK_KEYS["alice"]
    for version in ("mqttv311", "mqttv5"):
        wrong_key = mosq_args(pki, "psk", psk_identity="alice", psk_key=wrong)
        res = run_pub(ep, version, *wrong_key, "-t", topic, "-q", "1", "-m", "wrong key")
        assert res.returncode != 0, f"mosquitto_pub {version} with a wrong PSK succeeded"
    # Bob's key under alice's identity is wrong too.
    bobs_key = mosq_args(pki, "psk", psk_identity="alice", psk_key=PSK_KEYS["bob"])
    res = run_pub(ep, "mqttv311", *bobs_key, "-t", topic, "-q", "1", "-m", "bob's key")
    assert res.returncode != 0, "mosquitto_pub with another identity's key succeeded"
    assert watcher.drain() == [], "a client with a wrong PSK delivered a message"

    pub(ep, "mqttv311", *mosq_args(pki, "psk", psk_identity="alice"), "-t", topic, "-q", "1", "-m", "right key")
    assert watcher.expect(1) == [f"{topic} right key"]


def test_psk_unknown_identity_fails(tb, pki, subs):
    topic = unique("psk/unknown")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-q", "1", "-v")
    watcher.wait_subscribed()
    ep = tb.ep("psk")
    eve = ["--psk", PSK_KEYS["alice"], "--psk-identity", "eve"]
    res = run_pub(ep, "mqttv5", *eve, "-t", topic, "-q", "1", "-m", "from eve")
    assert res.returncode != 0, "mosquitto_pub with an unknown PSK identity succeeded"
    assert watcher.drain() == [], "a client with an unknown PSK identity delivered a message"
    assert wait_log(tb, "psk_unknown_identity"), "broker did not log psk_unknown_identity"
    assert '"eve"' in tb.log(), "the unknown identity is not named in the broker log"


def test_psk_plain_tls_client_refused(tb, pki, subs):
    """A certificate TLS client (no PSK) cannot connect to the PSK listener."""
    topic = unique("psk/certclient")
    watcher = subs(tb.tcp, "mqttv311", "-t", topic, "-v")
    watcher.wait_subscribed()
    res = run_pub(tb.ep("psk"), "mqttv311", "--cafile", str(pki.ca), "-t", topic, "-q", "1", "-m", "x")
    assert res.returncode != 0
    assert watcher.drain() == []


# =============================================================================================
# 4. WebSocket


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ws_paho_round_trip_each_qos(tb, clients, protocol):
    paho_round_trip(clients, tb, "ws", protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ws_large_payload_spans_many_reads(tb, clients, protocol):
    topic = unique("ws/large")
    sub = clients(tb, "ws", protocol).connect()
    assert sub.subscribe(topic, 1) == [1]
    pub_ = clients(tb, "ws", protocol).connect()
    payloads = [os.urandom(200_000), os.urandom(1_000_000)]
    for payload in payloads:
        pub_.publish(topic, payload, qos=1)
    msgs = sub.expect(2, timeout=30)
    assert [len(m.payload) for m in msgs] == [len(p) for p in payloads]
    assert [m.payload for m in msgs] == payloads, "large payload corrupted over WebSocket"


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ws_many_small_messages_in_order(tb, clients, protocol, qos):
    count = 500
    topic = unique("ws/many")
    sub = clients(tb, "ws", protocol).connect()
    assert sub.subscribe(topic, qos) == [qos]
    pub_ = clients(tb, "ws", protocol).connect()
    infos = [pub_.publish(topic, str(i).encode(), qos=qos, wait=False) for i in range(count)]
    for info in infos:
        info.wait_for_publish(timeout=TIMEOUT)
        assert info.is_published()
    msgs = sub.expect(count, timeout=30)
    assert [int(m.payload) for m in msgs] == list(range(count)), "messages lost, duplicated or reordered"
    assert all(m.qos == qos for m in msgs)
    assert sub.drain(0.5) == []


def _raw_ws_upgrade(ep: Endpoint, path: str, protocol: str | None = "mqtt") -> bytes:
    """Sends a WebSocket upgrade request for `path` and returns the response head."""
    proto = f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else ""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {ep.host}:{ep.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{proto}\r\n"
    ).encode()
    with socket.create_connection((ep.host, ep.port), timeout=TIMEOUT) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ws_other_path_refused(tb, clients, protocol):
    ep = tb.ep("ws")
    why = clients(tb, "ws", protocol, ws_path="/not-mqtt").try_connect()
    assert why is not None, "paho connected on a WebSocket path that is not configured"
    assert "WebsocketConnectionError" in why, why
    head = _raw_ws_upgrade(ep, "/not-mqtt")
    assert head.startswith(b"HTTP/1.1 404"), head
    ok = _raw_ws_upgrade(ep, "/mqtt")
    assert ok.startswith(b"HTTP/1.1 101"), ok
    assert b"\r\nsec-websocket-protocol: mqtt\r\n" in ok.lower(), ok
    assert b"\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n" in ok.lower(), ok
    # The right path works on the same listener.
    paho_round_trip(clients, tb, "ws", protocol, qos_levels=(1,))


def test_ws_configured_path(start_transports, clients):
    tb = start_transports(ws_path="/custom/ws")
    for kind in ("ws", "wss"):
        why = clients(tb, kind, V5).try_connect()  # paho's default path, /mqtt
        assert why is not None, f"{kind}: /mqtt accepted although ws_path = /custom/ws"
        sub = clients(tb, kind, V311, ws_path="/custom/ws").connect()
        pub_ = clients(tb, kind, V5, ws_path="/custom/ws").connect()
        topic = unique(f"{kind}/custom")
        assert sub.subscribe(topic, 1) == [1]
        pub_.publish(topic, b"custom path", qos=1)
        [m] = sub.expect(1)
        assert (m.topic, m.payload) == (topic, b"custom path")
    assert _raw_ws_upgrade(tb.ep("ws"), "/mqtt").startswith(b"HTTP/1.1 404")


def test_ws_non_mqtt_subprotocol_refused(tb):
    head = _raw_ws_upgrade(tb.ep("ws"), "/mqtt", protocol="chat")
    assert head.startswith(b"HTTP/1.1 400"), head


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ws_to_tcp_and_back(tb, clients, subs, protocol, version):
    topic = unique("ws/cross")
    # WebSocket publisher -> TCP subscriber (mosquitto_sub).
    tcp_sub = subs(tb.tcp, version, "-t", f"{topic}/to-tcp", "-q", "2", "-C", "3", "-F", "%q %t %p")
    tcp_sub.wait_subscribed()
    ws_pub = clients(tb, "ws", protocol).connect()
    for qos in (0, 1, 2):
        ws_pub.publish(f"{topic}/to-tcp", f"ws says {qos}".encode(), qos=qos)
    assert tcp_sub.wait() == 0, tcp_sub.report()
    assert tcp_sub.expect(3, timeout=1) == [f"{qos} {topic}/to-tcp ws says {qos}" for qos in (0, 1, 2)]

    # TCP publisher (mosquitto_pub) -> WebSocket subscriber.
    ws_sub = clients(tb, "ws", protocol).connect()
    assert ws_sub.subscribe(f"{topic}/to-ws", 2) == [2]
    big = os.urandom(150_000)  # many WebSocket reads
    for qos in (0, 1, 2):
        pub(tb.tcp, version, "-t", f"{topic}/to-ws", "-q", str(qos), "-m", f"tcp says {qos}")
    msgs = ws_sub.expect(3)
    assert [(m.payload, m.qos) for m in msgs] == [(f"tcp says {qos}".encode(), qos) for qos in (0, 1, 2)]
    pub(tb.tcp, version, "-t", f"{topic}/to-ws", "-q", "1", "-s", input=big)  # -s: payload from stdin
    [m] = ws_sub.expect(1, timeout=30)
    assert m.payload == big


# =============================================================================================
# 5. WebSocket over TLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wss_paho_round_trip(tb, clients, protocol):
    paho_round_trip(clients, tb, "wss", protocol)
    topic = unique("wss/large")
    sub = clients(tb, "wss", protocol).connect()
    assert sub.subscribe(topic, 2) == [2]
    pub_ = clients(tb, "wss", protocol).connect()
    payload = os.urandom(200_000)
    pub_.publish(topic, payload, qos=2)
    small = [pub_.publish(topic, str(i).encode(), qos=1, wait=False) for i in range(200)]
    for info in small:
        info.wait_for_publish(timeout=TIMEOUT)
    msgs = sub.expect(201, timeout=30)
    # paho hands a QoS 2 message to on_message only when PUBREL arrives, so QoS 1 messages sent
    # after it may overtake it: check each QoS level on its own.
    large = [m for m in msgs if m.qos == 2]
    assert [(len(m.payload), m.payload == payload) for m in large] == [(len(payload), True)]
    assert [int(m.payload) for m in msgs if m.qos == 1] == list(range(200)), "lost, duplicated or reordered"


def test_wss_untrusted_server_certificate_fails(tb, pki, clients):
    why = clients(tb, "wss", V5, ca=pki.rogue_ca).try_connect()
    assert why is not None and "SSLCertVerificationError" in why, why


def test_wss_retained_to_tcp(tb, clients, subs):
    topic = unique("wss/retained")
    c = clients(tb, "wss", V5).connect()
    c.publish(topic, b"retained over wss", qos=1, retain=True)
    s = subs(tb.tcp, "mqttv311", "-t", topic, "-q", "1", "-C", "1", "-F", "%r %q %p")
    assert s.wait() == 0, s.report()
    assert s.expect(1, timeout=1) == ["1 1 retained over wss"]


# =============================================================================================
# 6. Every transport to every other, in one broker


def test_all_transports_deliver_to_each_other(tb, pki, clients, subs):
    topic = unique("all")
    mosq_kinds = ("tcp", "mqtts", "mtls", "psk")
    paho_kinds = ("ws", "wss")
    mosq_subs = {}
    for kind in mosq_kinds:
        ep = tb.tcp if kind == "tcp" else tb.ep(kind)
        mosq_subs[kind] = subs(ep, "mqttv5", *mosq_args(pki, kind), "-t", f"{topic}/#", "-q", "2", "-F", "%q %t %p")
    for s in mosq_subs.values():
        assert s.wait_subscribed() == [2]
    paho_subs = {}
    for kind in paho_kinds:
        paho_subs[kind] = clients(tb, kind, V5).connect()
        assert paho_subs[kind].subscribe(f"{topic}/#", 2) == [2]

    senders = mosq_kinds + paho_kinds
    for qos, kind in enumerate(senders):
        qos %= 3
        if kind in mosq_kinds:
            ep = tb.tcp if kind == "tcp" else tb.ep(kind)
            pub(ep, "mqttv311", *mosq_args(pki, kind), "-t", f"{topic}/{kind}", "-q", str(qos), "-m", f"from {kind}")
        else:
            p = clients(tb, kind, V311).connect()
            p.publish(f"{topic}/{kind}", f"from {kind}".encode(), qos=qos)
            p.close()
    expected = sorted(f"{i % 3} {topic}/{kind} from {kind}" for i, kind in enumerate(senders))
    for kind, s in mosq_subs.items():
        assert sorted(s.expect(len(senders))) == expected, f"subscriber on {kind}"
    for kind, c in paho_subs.items():
        got = sorted(f"{m.qos} {m.topic} {m.payload.decode()}" for m in c.expect(len(senders)))
        assert got == expected, f"subscriber on {kind}"


# =============================================================================================
# Per-listener limits


def connect_when_free(clients, tb: TransportBroker, kind: str) -> Paho:
    """Connects a v5 client to `kind`, retrying while the listener is full (Quota exceeded)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        c = clients(tb, kind, V5)
        why = c.try_connect()
        if why is None:
            return c
        c.close()
        assert time.monotonic() < deadline, f"{kind}: no free connection slot within {TIMEOUT}s: {why}"
        time.sleep(0.1)


@pytest.mark.parametrize("kind", ["mqtts", "ws"])
def test_listener_max_connections(start_transports, clients, kind):
    """`max_connections = 1` on one listener: a second client there gets CONNACK 0x97 (v5) /
    3 (v3.1.1); other listeners are not affected; the slot is free again after a disconnect."""
    tb = start_transports(extra={kind: "max_connections = 1\n"})
    # The probe of wait_port holds the slot until the broker sees it close.
    first = connect_when_free(clients, tb, kind)
    v5 = clients(tb, kind, V5)
    assert v5.try_connect() is not None
    assert v5.connect_rc is not None and v5.connect_rc.value == 0x97, f"v5 CONNACK: {v5.connect_rc}"
    v311 = clients(tb, kind, V311)
    assert v311.try_connect() is not None
    # paho reports the v3.1.1 return code 3 (server unavailable) as reason code 0x88.
    assert v311.connect_rc is not None and v311.connect_rc.value == 0x88, f"v3.1.1 CONNACK: {v311.connect_rc}"
    other = "wss" if kind == "ws" else "ws"
    clients(tb, other, V5).connect()
    clients(tb, "tcp", V5).connect()

    first.close()
    again = connect_when_free(clients, tb, kind)
    topic = unique(f"{kind}/maxconn")
    assert again.subscribe(topic, 1) == [1]
    again.publish(topic, b"after the first left", qos=1)
    assert again.expect(1)[0].payload == b"after the first left"


def test_listener_max_connection_rate(start_transports, clients):
    """`max_connection_rate = 4`: accepts are spaced 250 ms apart, so 6 connections take at least
    1.25 s, and every one of them succeeds."""
    tb = start_transports(extra={"ws": "max_connection_rate = 4\n"})
    time.sleep(0.3)  # the wait_port probe used an accept slot
    started = time.monotonic()
    for _ in range(6):
        clients(tb, "ws", V311).connect()
    elapsed = time.monotonic() - started
    assert elapsed >= 1.0, f"6 connections at 4/s took only {elapsed:.2f}s"
    # The plain TCP listener has no rate limit.
    started = time.monotonic()
    for _ in range(6):
        clients(tb, "tcp", V311).connect()
    assert time.monotonic() - started < elapsed


# =============================================================================================
# Transport identity as user name, per-listener anonymous access

IDENTITY_ACL = """\
# Anonymous clients (the watcher on the plain TCP listener) may read everything under users/.
topic read users/#
# Everyone else may write only under their own user name.
pattern readwrite users/%u/#
"""


@pytest.fixture
def identity_tb(start_transports, tmp_path, pki) -> TransportBroker:
    acl = tmp_path / "acl"
    acl.write_text(IDENTITY_ACL)
    return start_transports(
        extra={
            "mtls": "use_identity_as_username = true\nallow_anonymous = false\n",
            "psk": "use_identity_as_username = true\n",
            "mqtts": f"ca_file = {_toml_str(pki.ca)}\nuse_identity_as_username = true\n",
            "wss": "allow_anonymous = false\n",
            "auth": f"acl_file = {_toml_str(acl)}\n",
        }
    )


def test_identity_as_username_from_certificate_and_psk(identity_tb, pki, subs):
    """The certificate CN (alice) and the PSK identity (bob) are the user names the ACL sees;
    a CONNECT user name does not replace them."""
    tb = identity_tb
    base = unique("t")
    watcher = subs(tb.tcp, "mqttv311", "-t", "users/#", "-q", "1", "-v")
    assert watcher.wait_subscribed() == [1]
    alice = mosq_args(pki, "mtls")
    bob = mosq_args(pki, "psk", psk_identity="bob")
    attempts = [
        ("mtls", alice, [], "users/alice", True),
        ("mtls", alice, [], "users/bob", False),
        ("mtls", alice, ["-u", "bob"], "users/bob", False),  # CONNECT user name ignored
        ("mtls", alice, ["-u", "bob"], "users/alice", True),
        ("psk", bob, [], "users/bob", True),
        ("psk", bob, [], "users/alice", False),
        ("mqtts", mosq_args(pki, "mtls"), [], "users/alice", True),  # optional certificate given
    ]
    for i, (kind, args, user, prefix, allowed) in enumerate(attempts):
        for version in ("mqttv311", "mqttv5"):
            topic = f"{prefix}/{base}"
            res = run_pub(tb.ep(kind), version, *args, *user, "-t", topic, "-q", "1", "-m", f"{i} {version}")
            report = (kind, user, topic, version, res.returncode, res.stderr)
            assert res.returncode == 0, report  # connected; v3.1.1 denials are acknowledged and dropped
            if version == "mqttv5":
                # v5: PUBACK 0x87 for a denied publish, which mosquitto_pub reports as a warning.
                assert (b"Publish 1 failed: Not authorized" in res.stderr) == (not allowed), report
    expected = sorted(
        f"{prefix}/{base} {i} {version}"
        for i, (_, _, _, prefix, allowed) in enumerate(attempts)
        if allowed
        for version in ("mqttv311", "mqttv5")
    )
    got = sorted(watcher.expect(len(expected)))
    assert got == expected
    leaked = watcher.drain()
    assert leaked == [], f"publishes outside the identity's own tree were delivered: {leaked}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_identity_as_username_without_certificate_refused(identity_tb, pki, clients, protocol):
    """mqtts with an optional client certificate and use_identity_as_username: a client without
    a certificate completes TLS but gets CONNACK 0x87 (v3.1.1: 5, which paho reports as 0x87)."""
    c = clients(identity_tb, "mqtts", protocol)
    why = c.try_connect()
    assert why is not None, "a client without a certificate was admitted with use_identity_as_username"
    assert c.connect_rc is not None and c.connect_rc.value == 0x87, why
    # The same listener admits a client that shows alice's certificate.
    clients(identity_tb, "mqtts", protocol, cert=pki.alice_cert, key=pki.alice_key).connect()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_listener_allow_anonymous_override(identity_tb, clients, protocol):
    """`allow_anonymous = false` on the wss listener: an anonymous client gets CONNACK 0x87 there
    (v3.1.1: 5) while anonymous clients are admitted on the ws and plain TCP listeners."""
    c = clients(identity_tb, "wss", protocol)
    assert c.try_connect() is not None, "anonymous client admitted on an allow_anonymous = false listener"
    assert c.connect_rc is not None and c.connect_rc.value == 0x87, c.connect_rc
    named = clients(identity_tb, "wss", protocol)
    named.client.username_pw_set("carol")  # no password file: user names are not checked
    named.connect()
    clients(identity_tb, "ws", protocol).connect()
    clients(identity_tb, "tcp", protocol).connect()


# =============================================================================================
# 7. Slowloris: idle and half-open handshakes neither block others nor linger


@functools.cache
def _client_hello() -> bytes:
    """The first flight of a TLS client (a ClientHello record), from Python's ssl module."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    assert len(hello) > 100 and hello[0] == 0x16, hello[:16]
    return hello


HALF_HTTP = b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"


@dataclass
class Idle:
    sock: socket.socket
    how: str
    opened: float
    closed: float | None = None
    ended_by: str = ""


@functools.cache
def _tls_context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


def _open_idle(ep: Endpoint, how: str, pki: Pki) -> Idle:
    raw = socket.create_connection((ep.host, ep.port), timeout=TIMEOUT)
    sock: socket.socket = raw
    if how == "half ClientHello":
        hello = _client_hello()
        raw.sendall(hello[: len(hello) // 2])
    elif how == "half HTTP request":
        raw.sendall(HALF_HTTP)
    elif how in ("TLS, then silence", "TLS, then half HTTP request"):
        sock = _tls_context(str(pki.ca)).wrap_socket(raw, server_hostname="127.0.0.1")
        if how == "TLS, then half HTTP request":
            sock.sendall(HALF_HTTP)
    else:
        assert how == "nothing", how
    sock.setblocking(False)
    return Idle(sock, how, time.monotonic())


def _watch_closed(idle: list[Idle], deadline: float) -> None:
    """Reads each socket until EOF or reset (recording when), or until `deadline`."""
    sel = selectors.DefaultSelector()
    for item in idle:
        sel.register(item.sock, selectors.EVENT_READ, item)
    try:
        while sel.get_map() and (remaining := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(timeout=min(remaining, 0.2)):
                item: Idle = key.data
                try:
                    data = item.sock.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    continue
                except OSError as e:  # ConnectionResetError, ssl.SSLEOFError, ...
                    item.closed, item.ended_by = time.monotonic(), type(e).__name__
                    sel.unregister(item.sock)
                    continue
                if not data:
                    item.closed, item.ended_by = time.monotonic(), "EOF"
                    sel.unregister(item.sock)
                # else: an alert or an HTTP error response; the close follows.
    finally:
        sel.close()


SLOWLORIS = {
    "mqtts": ("nothing", "half ClientHello", "TLS, then silence"),
    "mtls": ("nothing", "half ClientHello"),
    "psk": ("nothing", "half ClientHello"),
    "ws": ("nothing", "half HTTP request"),
    "wss": ("nothing", "half ClientHello", "TLS, then half HTTP request"),
}


@pytest.mark.parametrize("kind", list(SLOWLORIS))
def test_slowloris_idle_handshakes(tb, pki, clients, subs, kind):
    ep = tb.ep(kind)
    hows = SLOWLORIS[kind]
    idle = [_open_idle(ep, hows[i % len(hows)], pki) for i in range(IDLE_SOCKETS)]
    try:
        # A legitimate client still connects and delivers while they hang.
        topic = unique(f"slowloris/{kind}")
        if kind == "psk":
            s = subs(ep, "mqttv5", *mosq_args(pki, "psk"), "-t", topic, "-q", "1", "-C", "1", "-v")
            s.wait_subscribed()
            pub(ep, "mqttv5", *mosq_args(pki, "psk", psk_identity="bob"), "-t", topic, "-q", "1", "-m", "still served")
            assert s.wait() == 0, s.report()
            assert s.expect(1, timeout=1) == [f"{topic} still served"]
        else:
            c = clients(tb, kind, V5).connect()
            assert c.subscribe(topic, 1) == [1]
            c.publish(topic, b"still served", qos=1)
            [m] = c.expect(1)
            assert m.payload == b"still served"

        # Every idle socket is closed by the broker within connect_timeout_secs.
        last_opened = max(item.opened for item in idle)
        _watch_closed(idle, last_opened + CONNECT_TIMEOUT_SECS + CLOSE_SLACK + 1.0)
        still_open = [item.how for item in idle if item.closed is None]
        late = [
            (item.how, round(item.closed - item.opened, 2))
            for item in idle
            if item.closed is not None and item.closed - item.opened > CONNECT_TIMEOUT_SECS + CLOSE_SLACK
        ]
        assert not still_open, (
            f"{len(still_open)} of {IDLE_SOCKETS} idle sockets still open "
            f"{CONNECT_TIMEOUT_SECS + CLOSE_SLACK + 1.0}s after opening: {sorted(set(still_open))}"
        )
        assert not late, f"idle sockets closed later than {CONNECT_TIMEOUT_SECS}s + {CLOSE_SLACK}s: {late[:10]}"
    finally:
        for item in idle:
            try:
                item.sock.close()
            except OSError:
                pass
