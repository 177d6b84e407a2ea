"""Certificate reload on SIGHUP, end to end: after the certificate and key files of a TLS
listener are replaced and the broker gets SIGHUP, new clients are served the new certificate,
while connections opened before the reload keep working on the certificate they started with.

Each test makes its own CA and two server certificates for 127.0.0.1 / localhost signed by it,
A and B, with different common names and serial numbers, so that a client trusting the CA
accepts both and the test can tell them apart. Each test starts a broker (conftest's
`broker_factory`) with an `mqtts` and a `wss` listener on free ports; both use the same files.

The presented certificate is read with Python's ssl module (a TLS handshake that verifies the
chain against the CA and the name 127.0.0.1, then the leaf in DER); MQTT traffic uses
paho-mqtt 2.x. Every wait is bounded.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import queue
import signal
import socket
import ssl
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

TIMEOUT = 15.0  # seconds for any single expected event
RELOAD_TIMEOUT = 10.0  # seconds for SIGHUP to take effect
LISTENER_TIMEOUT = 15.0  # seconds for the [[listener]] ports to accept connections
KINDS = ("mqtts", "wss")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"




# ---------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class ServerCert:
    common_name: str
    serial: int
    der: bytes
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Pki:
    ca: Path
    a: ServerCert
    b: ServerCert


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hayate reload test"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


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


def _server_cert(ca_key, ca_cert: x509.Certificate, cn: str, serial: int) -> ServerCert:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCert(
        common_name=cn,
        serial=serial,
        der=cert.public_bytes(serialization.Encoding.DER),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Hayate reload test CA"))
        .issuer_name(_name("Hayate reload test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca = tmp_path / "ca.pem"
    ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    serial_a = x509.random_serial_number()
    serial_b = serial_a ^ 0xB  # a different serial, still positive and below 2**159
    return Pki(
        ca=ca,
        a=_server_cert(ca_key, ca_cert, "hayate-reload-A", serial_a),
        b=_server_cert(ca_key, ca_cert, "hayate-reload-B", serial_b),
    )


def install(cert: ServerCert, cert_file: Path, key_file: Path) -> None:
    """Replaces the broker's files the way certificate tools do: each new file is written next
    to the old one and renamed over it, so the broker never reads a half-written file."""
    for data, path in ((cert.cert_pem, cert_file), (cert.key_pem, key_file)):
        tmp = path.with_name(path.name + ".new")
        tmp.write_bytes(data)
        tmp.chmod(0o600)
        os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# A broker with TLS listeners


@dataclass
class TlsBroker:
    broker: object  # conftest.Broker
    ports: dict[str, int]
    cert_file: Path
    key_file: Path

    def log(self) -> str:
        return self.broker.log()

    def sighup(self) -> None:
        self.broker.process.send_signal(signal.SIGHUP)


def _toml_str(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def wait_port(broker, port: int, timeout: float = LISTENER_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if broker.process.poll() is not None:
            pytest.fail(f"broker exited with {broker.process.returncode}:\n{broker.log()}", pytrace=False)
        try:
            with socket.create_connection((broker.host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"listener 127.0.0.1:{port} not accepting within {timeout}s:\n{broker.log()}")
            time.sleep(0.05)


@pytest.fixture
def tls_broker(broker_factory, pki, tmp_path: Path) -> TlsBroker:
    """A broker whose mqtts and wss listeners use server.pem / server.key, holding certificate A."""
    cert_file = tmp_path / "server.pem"
    key_file = tmp_path / "server.key"
    install(pki.a, cert_file, key_file)
    ports = {kind: free_port() for kind in KINDS}
    files = f"cert_file = {_toml_str(cert_file)}\nkey_file = {_toml_str(key_file)}\n"
    config = (
        "[server]\n"
        'log_level = "info"\n'
        "\n[[listener]]\n"
        'name = "mqtts"\ntransport = "mqtts"\n'
        f'bind = "127.0.0.1:{ports["mqtts"]}"\n{files}'
        "\n[[listener]]\n"
        'name = "wss"\ntransport = "wss"\n'
        f'bind = "127.0.0.1:{ports["wss"]}"\n{files}'
    )
    broker = broker_factory(config)
    for port in ports.values():
        wait_port(broker, port)
    # SIGHUP is handled once the broker has started (before that it would end the process).
    deadline = time.monotonic() + LISTENER_TIMEOUT
    while "hayate_started" not in broker.log():
        assert time.monotonic() < deadline, f"no hayate_started logged:\n{broker.log()}"
        time.sleep(0.05)
    return TlsBroker(broker, ports, cert_file, key_file)


def served_certificate(pki: Pki, port: int) -> x509.Certificate:
    """The leaf certificate a new TLS connection to `port` is served, after verifying it chains
    to the test CA and names 127.0.0.1."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        raw.settimeout(TIMEOUT)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der, "no certificate presented"
    return x509.load_der_x509_certificate(der)


def describe(cert: x509.Certificate) -> str:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    return f"CN={cn} serial={cert.serial_number:x}"


def assert_is(cert: x509.Certificate, expected: ServerCert, context: str) -> None:
    got = cert.public_bytes(serialization.Encoding.DER)
    assert got == expected.der, (
        f"{context}: served {describe(cert)}, expected CN={expected.common_name} serial={expected.serial:x}"
    )
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == expected.common_name
    assert cert.serial_number == expected.serial


def wait_served(pki: Pki, port: int, expected: ServerCert, timeout: float = RELOAD_TIMEOUT) -> x509.Certificate:
    """Connects until `port` serves `expected` (SIGHUP is handled asynchronously); fails with the
    certificate still served after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        cert = served_certificate(pki, port)
        if cert.public_bytes(serialization.Encoding.DER) == expected.der or time.monotonic() > deadline:
            return cert
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# paho-mqtt


class Paho:
    """A paho client over TLS (mqtts or wss) with its network loop in a thread."""

    def __init__(self, pki: Pki, port: int, kind: str, protocol: MQTTProtocolVersion) -> None:
        self.port = port
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=unique(f"reload-{kind}"),
            protocol=protocol,
            transport="websockets" if kind == "wss" else "tcp",
            reconnect_on_failure=False,
        )
        if kind == "wss":
            self.client.ws_set_options(path="/mqtt")
        self.client.tls_set(ca_certs=str(pki.ca))
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connack = threading.Event()
        self._suback = threading.Event()
        self.connect_rc = None
        self.disconnected = threading.Event()
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *args: self._suback.set()
        self.client.on_message = lambda client, userdata, msg: self.messages.put(msg)
        self.client.on_disconnect = lambda *args: self.disconnected.set()

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.connect_rc = reason_code
        self._connack.set()

    def connect(self) -> "Paho":
        self.client.connect("127.0.0.1", self.port, keepalive=60)
        self.client.loop_start()
        assert self._connack.wait(TIMEOUT), f"no CONNACK within {TIMEOUT}s on port {self.port}"
        assert not self.connect_rc.is_failure, f"connection refused: {self.connect_rc}"
        return self

    def served_certificate(self) -> x509.Certificate:
        """The certificate this connection was served at its handshake."""
        sock = self.client.socket()
        tls = getattr(sock, "_socket", sock)  # paho's WebSocket wrapper keeps the TLS socket there
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))

    def subscribe(self, topic: str, qos: int = 1) -> None:
        self._suback.clear()
        self.client.subscribe(topic, qos)
        assert self._suback.wait(TIMEOUT), f"no SUBACK for {topic} within {TIMEOUT}s"

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        info = self.client.publish(topic, payload, qos=qos)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"publish to {topic} not acknowledged within {TIMEOUT}s"

    def expect(self, topic: str, payload: bytes) -> None:
        try:
            msg = self.messages.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no message on {topic} within {TIMEOUT}s")
        assert (msg.topic, msg.payload) == (topic, payload)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def clients():
    made: list[Paho] = []

    def make(pki: Pki, port: int, kind: str, protocol=MQTTProtocolVersion.MQTTv5) -> Paho:
        client = Paho(pki, port, kind, protocol)
        made.append(client)
        return client.connect()

    yield make
    for client in made:
        try:
            client.close()
        except Exception:
            pass


def round_trip(sender: Paho, receiver: Paho, topic: str, payload: bytes) -> None:
    sender.publish(topic, payload)
    receiver.expect(topic, payload)


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("kind", KINDS)
def test_sighup_serves_the_new_certificate_to_new_clients(tls_broker, pki, clients, kind):
    port = tls_broker.ports[kind]
    assert_is(served_certificate(pki, port), pki.a, "before the reload")

    # A connection made before the reload, subscribed, on certificate A.
    old = clients(pki, port, kind)
    assert_is(old.served_certificate(), pki.a, "connection opened before the reload")
    topic = f"reload/{unique(kind)}"
    old.subscribe(f"{topic}/to-old")

    install(pki.b, tls_broker.cert_file, tls_broker.key_file)
    # The files alone change nothing: certificates are read at start and on SIGHUP only.
    assert_is(served_certificate(pki, port), pki.a, "files replaced, no SIGHUP yet")

    tls_broker.sighup()
    assert_is(wait_served(pki, port, pki.b), pki.b, f"after SIGHUP (log:\n{tls_broker.log()})")
    for attempt in range(3):
        assert_is(served_certificate(pki, port), pki.b, f"new connection {attempt} after the reload")

    # A client that connects now gets B, and traffic flows both ways with the old connection.
    new = clients(pki, port, kind)
    assert_is(new.served_certificate(), pki.b, "connection opened after the reload")
    new.subscribe(f"{topic}/to-new")
    round_trip(new, old, f"{topic}/to-old", b"published over B, received over A")
    round_trip(old, new, f"{topic}/to-new", b"published over A, received over B")
    assert not old.disconnected.is_set(), "the connection opened before the reload was closed"
    assert_is(old.served_certificate(), pki.a, "the old connection after the reload")
    assert "listener_reloaded" in tls_broker.log()


def test_sighup_with_a_broken_file_keeps_the_certificate_in_force(tls_broker, pki, clients):
    port = tls_broker.ports["mqtts"]
    install(pki.b, tls_broker.cert_file, tls_broker.key_file)
    tls_broker.sighup()
    assert_is(wait_served(pki, port, pki.b), pki.b, "after the first SIGHUP")

    # A certificate that does not parse: the reload fails, B stays in force.
    tls_broker.cert_file.write_text("not a certificate\n")
    tls_broker.sighup()
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while "listener_reload_failed" not in tls_broker.log():
        assert time.monotonic() < deadline, f"no listener_reload_failed logged:\n{tls_broker.log()}"
        time.sleep(0.05)
    assert_is(served_certificate(pki, port), pki.b, "after a failed reload")
    client = clients(pki, port, "mqtts")
    topic = f"reload/{unique('broken')}"
    client.subscribe(topic)
    round_trip(client, client, topic, b"still served")

    # Fixing the file and sending SIGHUP again brings the file's certificate in.
    install(pki.a, tls_broker.cert_file, tls_broker.key_file)
    tls_broker.sighup()
    assert_is(wait_served(pki, port, pki.a), pki.a, "after the files were fixed")
