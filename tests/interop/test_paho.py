"""Interoperability tests against Hayate with the paho-mqtt 2.x Python client (no mocks).

Each test starts its own broker (see conftest.py). Every wait is bounded by a timeout.
"""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

V311 = MQTTProtocolVersion.MQTTv311
V5 = MQTTProtocolVersion.MQTTv5
PROTOCOLS = [pytest.param(V311, id="v311"), pytest.param(V5, id="v5")]

TIMEOUT = 10.0  # seconds for any single expected event
QUIET = 1.5  # seconds to wait when checking that nothing (more) arrives


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class PahoClient:
    """A paho client running its network loop in a thread, with blocking, bounded helpers."""

    def __init__(
        self,
        broker,
        protocol: MQTTProtocolVersion,
        client_id: str | None = None,
        *,
        clean: bool = True,
        session_expiry: int | None = None,
        will: tuple[str, bytes, int, bool] | None = None,
        will_properties: Properties | None = None,
        connect_properties: dict | None = None,
        manual_ack: bool = False,
    ) -> None:
        self.broker = broker
        self.protocol = protocol
        self.client_id = unique("paho") if client_id is None else client_id
        self.clean = clean
        self.session_expiry = session_expiry
        self.connect_properties = connect_properties or {}
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=clean if protocol != V5 else None,
            protocol=protocol,
            reconnect_on_failure=False,
            manual_ack=manual_ack,
        )
        if will is not None:
            topic, payload, qos, retain = will
            self.client.will_set(topic, payload, qos=qos, retain=retain, properties=will_properties)
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connected = threading.Event()
        self._disconnected = threading.Event()
        self.connect_flags = None
        self.connect_rc = None
        self.connect_props = None
        self.disconnect_rc = None
        self._subacks: dict[int, list] = {}
        self._suback_cond = threading.Condition()
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect

    # callbacks (network thread)
    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.connect_flags = flags
        self.connect_rc = reason_code
        self.connect_props = properties
        self._connected.set()

    def _on_message(self, client, userdata, msg):
        self.messages.put(msg)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._suback_cond:
            self._subacks[mid] = list(reason_codes)
            self._suback_cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self.disconnect_rc = reason_code
        self._disconnected.set()

    # blocking helpers (test thread)
    def connect(self, *, clean_start: bool | None = None, keepalive: int = 30) -> "PahoClient":
        props = None
        kwargs = {}
        if self.protocol == V5:
            kwargs["clean_start"] = self.clean if clean_start is None else clean_start
            props = Properties(PacketTypes.CONNECT)
            if self.session_expiry is not None:
                props.SessionExpiryInterval = self.session_expiry
            for name, value in self.connect_properties.items():
                setattr(props, name, value)
        self.client.connect(self.broker.host, self.broker.port, keepalive=keepalive, properties=props, **kwargs)
        self.client.loop_start()
        assert self._connected.wait(TIMEOUT), f"{self.client_id}: no CONNACK within {TIMEOUT}s"
        assert not self.connect_rc.is_failure, f"{self.client_id}: CONNACK refused: {self.connect_rc}"
        return self

    @property
    def session_present(self) -> bool:
        return bool(self.connect_flags.session_present)

    def subscribe(self, topic: str, qos: int = 0, *, properties: Properties | None = None, options=None) -> list:
        if self.protocol == V5:
            opts = options or SubscribeOptions(qos=qos)
            rc, mid = self.client.subscribe(topic, options=opts, properties=properties)
        else:
            rc, mid = self.client.subscribe(topic, qos)
        assert rc == mqtt.MQTT_ERR_SUCCESS, f"subscribe({topic}) failed to send: {rc}"
        with self._suback_cond:
            ok = self._suback_cond.wait_for(lambda: mid in self._subacks, timeout=TIMEOUT)
            assert ok, f"no SUBACK for {topic} within {TIMEOUT}s"
            return self._subacks.pop(mid)

    def publish(self, topic: str, payload, qos: int = 0, retain: bool = False, properties=None, wait=True):
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, f"publish to {topic} failed: {info.rc}"
        if wait:
            info.wait_for_publish(timeout=TIMEOUT)
            assert info.is_published(), f"publish to {topic} (qos {qos}) not acknowledged within {TIMEOUT}s"
        return info

    def expect(self, count: int, timeout: float = TIMEOUT) -> list[mqtt.MQTTMessage]:
        """Returns exactly `count` messages, failing if they do not arrive in time."""
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
        """Returns whatever arrives within `wait` seconds (used to assert that nothing more does)."""
        deadline = time.monotonic() + wait
        got = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return got
            try:
                got.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                return got

    def disconnect(self, reasoncode=None) -> None:
        if self.client.is_connected():
            self.client.disconnect(reasoncode=reasoncode)
            self._disconnected.wait(TIMEOUT)
        self.client.loop_stop()

    def kill_socket(self) -> None:
        """Drops the TCP connection without sending DISCONNECT (an abnormal disconnect)."""
        self.client.loop_stop()
        sock = self.client.socket()
        assert sock is not None, "client has no socket"
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


@pytest.fixture
def clients():
    """Factory for connected-on-demand clients; all are disconnected at teardown."""
    made: list[PahoClient] = []

    def make(broker, protocol, client_id=None, **kwargs) -> PahoClient:
        c = PahoClient(broker, protocol, client_id, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.disconnect()
        except Exception:
            pass


def granted(reason_code) -> int:
    """Reason code value (0, 1, 2 = granted QoS; >= 0x80 = failure)."""
    return reason_code.value if hasattr(reason_code, "value") else int(reason_code)


# ---------------------------------------------------------------------------------------------
# QoS round trips


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_qos_round_trip_exact_counts_and_order(broker, clients, protocol, qos):
    count = 200
    topic = unique("interop/qos") + f"/{qos}"
    sub = clients(broker, protocol).connect()
    assert [granted(rc) for rc in sub.subscribe(topic, qos)] == [qos]
    pub = clients(broker, protocol).connect()

    infos = [pub.publish(topic, f"{i}".encode(), qos=qos, wait=False) for i in range(count)]
    if qos > 0:
        for info in infos:
            info.wait_for_publish(timeout=TIMEOUT)
            assert info.is_published()

    msgs = sub.expect(count, timeout=20)
    payloads = [int(m.payload) for m in msgs]
    assert payloads == list(range(count)), "messages lost, duplicated or reordered"
    for m in msgs:
        assert m.topic == topic
        assert m.qos == qos
        assert not m.retain
    extra = sub.drain()
    assert extra == [], f"unexpected extra deliveries (duplicates?): {[m.payload for m in extra][:10]}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_qos_downgraded_to_subscription_qos(broker, clients, protocol):
    topic = unique("interop/downgrade")
    sub = clients(broker, protocol).connect()
    assert [granted(rc) for rc in sub.subscribe(topic, 1)] == [1]
    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"x", qos=2)
    [m] = sub.expect(1)
    assert m.qos == 1
    assert m.payload == b"x"


# ---------------------------------------------------------------------------------------------
# Retained messages


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retained_message_delivered_to_later_subscriber_and_cleared(broker, clients, protocol):
    topic = unique("interop/retained")
    live = clients(broker, protocol).connect()
    live.subscribe(topic, 1)

    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"retained-value", qos=1, retain=True)

    # An established subscription gets the message with RETAIN 0 (3.1.1 3.3.1.3; v5 without
    # Retain As Published).
    [m] = live.expect(1)
    assert m.payload == b"retained-value"
    assert not m.retain, "RETAIN must be 0 for delivery to an existing subscription"

    later = clients(broker, protocol).connect()
    later.subscribe(topic, 1)
    [m] = later.expect(1)
    assert m.topic == topic
    assert m.payload == b"retained-value"
    assert m.retain, "retained message sent on subscribe must have RETAIN 1"
    assert m.qos == 1

    # Replacing it.
    pub.publish(topic, b"second", qos=1, retain=True)
    assert later.expect(1)[0].payload == b"second"
    newer = clients(broker, protocol).connect()
    newer.subscribe(topic, 1)
    [m] = newer.expect(1)
    assert (m.payload, m.retain) == (b"second", True)

    # Clearing it with an empty retained payload.
    pub.publish(topic, b"", qos=1, retain=True)
    live.drain(0.5)
    last = clients(broker, protocol).connect()
    last.subscribe(topic, 1)
    stale = last.drain()
    assert stale == [], f"retained message not cleared: {[(m.payload, m.retain) for m in stale]}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retained_wildcard_subscription(broker, clients, protocol):
    base = unique("interop/retwild")
    pub = clients(broker, protocol).connect()
    for name in ("a", "b", "c"):
        pub.publish(f"{base}/{name}", name.encode(), qos=1, retain=True)
    sub = clients(broker, protocol).connect()
    sub.subscribe(f"{base}/+", 1)
    msgs = sub.expect(3)
    assert sorted((m.topic, m.payload, m.retain) for m in msgs) == [
        (f"{base}/a", b"a", True),
        (f"{base}/b", b"b", True),
        (f"{base}/c", b"c", True),
    ]
    assert sub.drain() == []


# ---------------------------------------------------------------------------------------------
# Will messages


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_will_sent_on_abrupt_socket_close(broker, clients, protocol):
    will_topic = unique("interop/will")
    observer = clients(broker, protocol).connect()
    observer.subscribe(will_topic, 1)

    dying = clients(broker, protocol, will=(will_topic, b"client died", 1, False)).connect()
    assert observer.drain(0.3) == []
    dying.kill_socket()

    [m] = observer.expect(1)
    assert m.topic == will_topic
    assert m.payload == b"client died"
    assert m.qos == 1
    assert observer.drain() == [], "will delivered more than once"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_will_not_sent_after_clean_disconnect(broker, clients, protocol):
    will_topic = unique("interop/nowill")
    observer = clients(broker, protocol).connect()
    observer.subscribe(will_topic, 1)

    polite = clients(broker, protocol, will=(will_topic, b"should not appear", 1, False)).connect()
    polite.disconnect()
    got = observer.drain(2.0)
    assert got == [], f"will published after a normal DISCONNECT: {[m.payload for m in got]}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retained_will(broker, clients, protocol):
    will_topic = unique("interop/retwill")
    dying = clients(broker, protocol, will=(will_topic, b"offline", 1, True)).connect()
    dying.kill_socket()
    time.sleep(0.5)
    later = clients(broker, protocol).connect()
    later.subscribe(will_topic, 1)
    [m] = later.expect(1)
    assert (m.payload, m.retain) == (b"offline", True)


# ---------------------------------------------------------------------------------------------
# Shared subscriptions (v5)


def test_shared_subscription_each_message_to_exactly_one_member(broker, clients):
    topic = unique("interop/shared")
    count = 100
    a = clients(broker, V5).connect()
    b = clients(broker, V5).connect()
    assert [granted(rc) for rc in a.subscribe(f"$share/g/{topic}", 1)] == [1]
    assert [granted(rc) for rc in b.subscribe(f"$share/g/{topic}", 1)] == [1]
    pub = clients(broker, V5).connect()
    for i in range(count):
        pub.publish(topic, str(i).encode(), qos=1, wait=False)

    got_a: list[int] = []
    got_b: list[int] = []
    deadline = time.monotonic() + 20
    while len(got_a) + len(got_b) < count and time.monotonic() < deadline:
        got_a += [int(m.payload) for m in a.drain(0.1)]
        got_b += [int(m.payload) for m in b.drain(0.1)]
    got_a += [int(m.payload) for m in a.drain(QUIET)]
    got_b += [int(m.payload) for m in b.drain(0.1)]

    assert len(got_a) + len(got_b) == count, f"a got {len(got_a)}, b got {len(got_b)}, want {count} in total"
    assert sorted(got_a + got_b) == list(range(count)), "a message was lost or delivered to both members"
    assert not set(got_a) & set(got_b)
    assert got_a and got_b, f"load not shared: a={len(got_a)} b={len(got_b)}"
    # Within one member, one publisher's messages keep their order.
    assert got_a == sorted(got_a)
    assert got_b == sorted(got_b)


def test_shared_and_normal_subscription_both_receive(broker, clients):
    topic = unique("interop/sharedmix")
    shared = clients(broker, V5).connect()
    shared.subscribe(f"$share/grp/{topic}", 1)
    normal = clients(broker, V5).connect()
    normal.subscribe(topic, 1)
    pub = clients(broker, V5).connect()
    for i in range(10):
        pub.publish(topic, str(i).encode(), qos=1)
    assert [int(m.payload) for m in shared.expect(10)] == list(range(10))
    assert [int(m.payload) for m in normal.expect(10)] == list(range(10))


# ---------------------------------------------------------------------------------------------
# v5 properties


def test_v5_publish_properties_round_trip(broker, clients):
    topic = unique("interop/props")
    sub = clients(broker, V5).connect()
    sub_props = Properties(PacketTypes.SUBSCRIBE)
    sub_props.SubscriptionIdentifier = 42
    assert [granted(rc) for rc in sub.subscribe(topic, 1, properties=sub_props)] == [1]

    pub = clients(broker, V5).connect()
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = "application/json"
    props.ResponseTopic = f"{topic}/reply"
    props.CorrelationData = b"\x00\x01corr\xff"
    props.UserProperty = [("k1", "v1"), ("k2", "v2"), ("k1", "v3")]
    props.PayloadFormatIndicator = 1
    props.MessageExpiryInterval = 3600
    pub.publish(topic, b'{"x": 1}', qos=1, properties=props)

    [m] = sub.expect(1)
    p = m.properties
    assert m.payload == b'{"x": 1}'
    assert p.ContentType == "application/json"
    assert p.ResponseTopic == f"{topic}/reply"
    assert p.CorrelationData == b"\x00\x01corr\xff"
    assert list(p.UserProperty) == [("k1", "v1"), ("k2", "v2"), ("k1", "v3")], "user properties reordered"
    assert p.PayloadFormatIndicator == 1
    assert hasattr(p, "MessageExpiryInterval"), "message expiry interval dropped"
    assert 0 < p.MessageExpiryInterval <= 3600
    sid = p.SubscriptionIdentifier
    assert (sid if isinstance(sid, list) else [sid]) == [42]


def test_v5_overlapping_subscriptions_identifiers(broker, clients):
    base = unique("interop/subid")
    sub = clients(broker, V5).connect()
    p1 = Properties(PacketTypes.SUBSCRIBE)
    p1.SubscriptionIdentifier = 7
    sub.subscribe(f"{base}/+", 1, properties=p1)
    p2 = Properties(PacketTypes.SUBSCRIBE)
    p2.SubscriptionIdentifier = 9
    sub.subscribe(f"{base}/#", 1, properties=p2)
    pub = clients(broker, V5).connect()
    pub.publish(f"{base}/x", b"1", qos=1)
    # Either one message carrying both identifiers [MQTT-3.3.4-4] or one message per
    # subscription [MQTT-3.3.4-5].
    msgs = sub.expect(1) + sub.drain(1.0)
    ids = []
    for m in msgs:
        sid = m.properties.SubscriptionIdentifier
        ids += sid if isinstance(sid, list) else [sid]
    assert sorted(ids) == [7, 9]


def test_v5_no_local_subscription_option(broker, clients):
    topic = unique("interop/nolocal")
    c = clients(broker, V5).connect()
    c.subscribe(topic, options=SubscribeOptions(qos=1, noLocal=True))
    other = clients(broker, V5).connect()
    c.publish(topic, b"mine", qos=1)
    other.publish(topic, b"theirs", qos=1)
    [m] = c.expect(1)
    assert m.payload == b"theirs"
    assert c.drain() == []


def test_v5_retain_as_published(broker, clients):
    topic = unique("interop/rap")
    sub = clients(broker, V5).connect()
    sub.subscribe(topic, options=SubscribeOptions(qos=1, retainAsPublished=True))
    pub = clients(broker, V5).connect()
    pub.publish(topic, b"r", qos=1, retain=True)
    [m] = sub.expect(1)
    assert m.retain, "Retain As Published set, RETAIN must be kept"


# ---------------------------------------------------------------------------------------------
# Persistent sessions


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_persistent_session_queues_qos1_while_offline(broker, clients, protocol):
    topic = unique("interop/persist")
    cid = unique("persistent-sub")
    kwargs = {"clean": False}
    if protocol == V5:
        kwargs["session_expiry"] = 300

    first = clients(broker, protocol, cid, **kwargs)
    if protocol == V5:
        first.connect(clean_start=True)
    else:
        # Start from a known state: a clean session removes any earlier one...
        clients(broker, protocol, cid, clean=True).connect().disconnect()
        first.connect()
    assert not first.session_present
    assert [granted(rc) for rc in first.subscribe(topic, 1)] == [1]
    first.disconnect()

    pub = clients(broker, protocol).connect()
    for i in range(20):
        pub.publish(topic, str(i).encode(), qos=1)

    again = clients(broker, protocol, cid, **kwargs).connect(clean_start=False)
    assert again.session_present, "session_present must be 1 when resuming a stored session"
    msgs = again.expect(20)
    assert [int(m.payload) for m in msgs] == list(range(20))
    assert all(m.qos == 1 for m in msgs)
    assert again.drain() == []

    # The subscription survived too: live messages still flow.
    pub.publish(topic, b"live", qos=1)
    assert again.expect(1)[0].payload == b"live"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_clean_session_discards_stored_session(broker, clients, protocol):
    topic = unique("interop/discard")
    cid = unique("discard-sub")
    kwargs = {"clean": False}
    if protocol == V5:
        kwargs["session_expiry"] = 300
    first = clients(broker, protocol, cid, **kwargs).connect()
    first.subscribe(topic, 1)
    first.disconnect()
    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"queued", qos=1)

    fresh = clients(broker, protocol, cid, clean=True).connect(clean_start=True)
    assert not fresh.session_present
    assert fresh.drain() == [], "a clean session must not get the old session's messages"


# ---------------------------------------------------------------------------------------------
# Subscription refused by configuration


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_denied_subscription_reason_code(broker_factory, clients, protocol):
    broker = broker_factory('[auth]\ndeny_subscribe = ["test/nosubscribe"]\n')
    c = clients(broker, protocol).connect()
    [rc] = c.subscribe("test/nosubscribe", 1)
    expected = 0x87 if protocol == V5 else 0x80
    assert granted(rc) == expected
    assert [granted(r) for r in c.subscribe("test/allowed", 1)] == [1]


# ---------------------------------------------------------------------------------------------
# $SYS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sys_version_and_uptime(broker_factory, clients, protocol):
    broker = broker_factory("[server]\nsys_interval_secs = 1\n")
    c = clients(broker, protocol).connect()
    c.subscribe("$SYS/broker/version", 0)
    c.subscribe("$SYS/broker/uptime", 0)
    seen: dict[str, bytes] = {}
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < 2 and time.monotonic() < deadline:
        for m in c.drain(0.2):
            seen[m.topic] = m.payload
    assert set(seen) == {"$SYS/broker/version", "$SYS/broker/uptime"}, f"got {seen}"
    assert b"hayate" in seen["$SYS/broker/version"].lower()
    assert re.fullmatch(rb"\d+ seconds", seen["$SYS/broker/uptime"]), seen["$SYS/broker/uptime"]

    # Updated every interval: a later uptime value arrives.
    uptimes = [int(seen["$SYS/broker/uptime"].split()[0])]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(uptimes) < 3:
        for m in c.drain(0.2):
            if m.topic == "$SYS/broker/uptime":
                uptimes.append(int(m.payload.split()[0]))
    assert len(uptimes) >= 3, "uptime not republished every second"
    assert uptimes == sorted(uptimes) and uptimes[-1] > uptimes[0]


def test_sys_topics_not_matched_by_leading_wildcard(broker_factory, clients):
    broker = broker_factory("[server]\nsys_interval_secs = 1\n")
    c = clients(broker, V311).connect()
    c.subscribe("#", 0)
    c.subscribe("+/broker/uptime", 0)
    time.sleep(2.5)
    leaked = [m.topic for m in c.drain(0.5) if m.topic.startswith("$")]
    assert leaked == [], f"'#'/'+' at the first level matched $ topics [MQTT-4.7.2-1]: {leaked[:5]}"


# ---------------------------------------------------------------------------------------------
# Redelivery, expiry, will delay and other session behaviour


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unacked_qos1_redelivered_with_dup_after_reconnect(broker, clients, protocol):
    topic = unique("interop/redeliver")
    cid = unique("redeliver-sub")
    kwargs = {"clean": False, "session_expiry": 300 if protocol == V5 else None}
    sub = clients(broker, protocol, cid, manual_ack=True, **kwargs).connect(clean_start=True)
    sub.subscribe(topic, 1)
    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"unacked", qos=1)
    [m] = sub.expect(1)
    assert not m.dup
    sub.kill_socket()  # never sent the PUBACK

    again = clients(broker, protocol, cid, **kwargs).connect(clean_start=False)
    assert again.session_present
    [m] = again.expect(1)
    assert m.payload == b"unacked"
    assert m.dup, "a re-sent PUBLISH must have DUP 1 ([MQTT-4.4.0-1] / [3.1.1: MQTT-4.4.0-1])"
    assert again.drain() == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unsubscribe_stops_delivery(broker, clients, protocol):
    topic = unique("interop/unsub")
    sub = clients(broker, protocol).connect()
    sub.subscribe(topic, 1)
    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"before", qos=1)
    assert sub.expect(1)[0].payload == b"before"
    done = threading.Event()
    sub.client.on_unsubscribe = lambda *a: done.set()
    sub.client.unsubscribe(topic)
    assert done.wait(TIMEOUT), "no UNSUBACK"
    pub.publish(topic, b"after", qos=1)
    assert sub.drain() == []


def test_v5_assigned_client_identifier(broker, clients):
    c = clients(broker, V5, client_id="").connect()
    assigned = getattr(c.connect_props, "AssignedClientIdentifier", None)
    assert assigned, "empty client id in v5 CONNECT must get an Assigned Client Identifier"


def test_v5_message_expiry_while_offline(broker, clients):
    topic = unique("interop/expiry")
    cid = unique("expiry-sub")
    sub = clients(broker, V5, cid, clean=False, session_expiry=300).connect(clean_start=True)
    sub.subscribe(topic, 1)
    sub.disconnect()

    pub = clients(broker, V5).connect()
    short = Properties(PacketTypes.PUBLISH)
    short.MessageExpiryInterval = 1
    pub.publish(topic, b"short-lived", qos=1, properties=short)
    long = Properties(PacketTypes.PUBLISH)
    long.MessageExpiryInterval = 60
    pub.publish(topic, b"long-lived", qos=1, properties=long)
    time.sleep(2.5)

    again = clients(broker, V5, cid, clean=False, session_expiry=300).connect(clean_start=False)
    assert again.session_present
    msgs = again.expect(1) + again.drain()
    assert [m.payload for m in msgs] == [b"long-lived"], "expired message delivered [MQTT-3.3.2-5]"
    remaining = msgs[0].properties.MessageExpiryInterval
    assert remaining <= 58, f"expiry interval not reduced by the time spent waiting: {remaining}"


def test_v5_retained_message_expiry(broker, clients):
    topic = unique("interop/retexpiry")
    pub = clients(broker, V5).connect()
    props = Properties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 1
    pub.publish(topic, b"soon gone", qos=1, retain=True, properties=props)
    time.sleep(2.5)
    sub = clients(broker, V5).connect()
    sub.subscribe(topic, 1)
    stale = sub.drain()
    assert stale == [], "expired retained message still delivered"


def test_v5_will_delay_interval(broker, clients):
    will_topic = unique("interop/willdelay")
    observer = clients(broker, V5).connect()
    observer.subscribe(will_topic, 1)
    wp = Properties(PacketTypes.WILLMESSAGE)
    wp.WillDelayInterval = 2
    dying = clients(broker, V5, will=(will_topic, b"late will", 1, False), will_properties=wp,
                    session_expiry=60).connect()
    dying.kill_socket()
    early = observer.drain(1.0)
    assert early == [], "will sent before its Will Delay Interval"
    [m] = observer.expect(1, timeout=5)
    assert m.payload == b"late will"


def test_v5_will_delay_cancelled_by_reconnect(broker, clients):
    will_topic = unique("interop/willcancel")
    cid = unique("willcancel")
    observer = clients(broker, V5).connect()
    observer.subscribe(will_topic, 1)
    wp = Properties(PacketTypes.WILLMESSAGE)
    wp.WillDelayInterval = 3
    dying = clients(broker, V5, cid, will=(will_topic, b"cancelled", 1, False), will_properties=wp,
                    clean=False, session_expiry=60).connect(clean_start=True)
    dying.kill_socket()
    time.sleep(0.5)
    clients(broker, V5, cid, clean=False, session_expiry=60).connect(clean_start=False)
    leaked = observer.drain(4.0)
    assert leaked == [], "will sent although the client reconnected within the Will Delay Interval"


def test_v5_disconnect_with_will_message(broker, clients):
    from paho.mqtt.reasoncodes import ReasonCode

    will_topic = unique("interop/willrc4")
    observer = clients(broker, V5).connect()
    observer.subscribe(will_topic, 1)
    c = clients(broker, V5, will=(will_topic, b"asked for", 1, False)).connect()
    c.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"))
    [m] = observer.expect(1)
    assert m.payload == b"asked for"


def test_v5_session_expiry(broker, clients):
    topic = unique("interop/sessexp")
    cid = unique("sessexp")
    first = clients(broker, V5, cid, clean=False, session_expiry=1).connect(clean_start=True)
    first.subscribe(topic, 1)
    first.disconnect()
    time.sleep(2.5)
    again = clients(broker, V5, cid, clean=False, session_expiry=1).connect(clean_start=False)
    assert not again.session_present, "session kept past its Session Expiry Interval"


def test_v5_receive_maximum_respected(broker, clients):
    topic = unique("interop/recvmax")
    sub = clients(broker, V5, connect_properties={"ReceiveMaximum": 2}, manual_ack=True).connect()
    sub.subscribe(topic, 1)
    pub = clients(broker, V5).connect()
    for i in range(10):
        pub.publish(topic, str(i).encode(), qos=1, wait=False)

    received = []
    while len(received) < 10:
        batch = sub.expect(min(2, 10 - len(received)))
        extra = sub.drain(0.5)
        assert extra == [], f"more than Receive Maximum (2) unacknowledged PUBLISHes in flight: {len(extra)} extra"
        received += batch
        for m in batch:
            sub.client.ack(m.mid, 1)
    assert [int(m.payload) for m in received] == list(range(10))


def test_v5_topic_alias_from_client(broker, clients):
    topic = unique("interop/alias")
    sub = clients(broker, V5).connect()
    sub.subscribe(topic, 1)
    maximum = getattr(sub.connect_props, "TopicAliasMaximum", 0)
    assert maximum >= 1, "broker announces no topic aliases (config default is 64)"
    pub = clients(broker, V5).connect()
    props = Properties(PacketTypes.PUBLISH)
    props.TopicAlias = 1
    pub.publish(topic, b"first", qos=1, properties=props)
    pub.publish("", b"second", qos=1, properties=props)
    msgs = sub.expect(2)
    assert [(m.topic, m.payload) for m in msgs] == [(topic, b"first"), (topic, b"second")]


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_publishers_order_kept_per_publisher(broker, clients, protocol, qos):
    topic = unique("interop/multi")
    per_publisher = 200
    sub = clients(broker, protocol).connect()
    sub.subscribe(topic, qos)
    pubs = [clients(broker, protocol).connect() for _ in range(3)]
    infos = []
    for i in range(per_publisher):
        for p, c in enumerate(pubs):
            infos.append(c.publish(topic, f"{p}:{i}".encode(), qos=qos, wait=False))
    for info in infos:
        info.wait_for_publish(timeout=TIMEOUT)
    msgs = sub.expect(per_publisher * len(pubs), timeout=30)
    seqs: dict[int, list[int]] = {p: [] for p in range(len(pubs))}
    for m in msgs:
        p, i = m.payload.decode().split(":")
        seqs[int(p)].append(int(i))
    for p, seq in seqs.items():
        assert seq == list(range(per_publisher)), f"publisher {p}: lost, duplicated or reordered"
    assert sub.drain() == []


def test_v5_shared_subscription_gets_no_retained_messages(broker, clients):
    topic = unique("interop/sharedret")
    pub = clients(broker, V5).connect()
    pub.publish(topic, b"retained", qos=1, retain=True)
    member = clients(broker, V5).connect()
    member.subscribe(f"$share/g/{topic}", 1)
    got = member.drain()
    assert got == [], "retained messages must not be sent for a new shared subscription (§4.8.2)"


def test_v5_shared_subscription_member_leaving(broker, clients):
    topic = unique("interop/sharedleave")
    a = clients(broker, V5).connect()
    b = clients(broker, V5).connect()
    a.subscribe(f"$share/g/{topic}", 1)
    b.subscribe(f"$share/g/{topic}", 1)
    b.disconnect()
    pub = clients(broker, V5).connect()
    for i in range(20):
        pub.publish(topic, str(i).encode(), qos=1)
    msgs = a.expect(20)
    assert [int(m.payload) for m in msgs] == list(range(20)), "messages sent to a departed group member"


def test_v5_retained_message_keeps_properties(broker, clients):
    topic = unique("interop/retprops")
    pub = clients(broker, V5).connect()
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = "text/plain"
    props.UserProperty = [("x", "1"), ("y", "2")]
    props.MessageExpiryInterval = 600
    pub.publish(topic, b"r", qos=1, retain=True, properties=props)
    sub = clients(broker, V5).connect()
    sp = Properties(PacketTypes.SUBSCRIBE)
    sp.SubscriptionIdentifier = 5
    sub.subscribe(topic, 1, properties=sp)
    [m] = sub.expect(1)
    assert m.retain
    assert m.properties.ContentType == "text/plain"
    assert list(m.properties.UserProperty) == [("x", "1"), ("y", "2")]
    assert 0 < m.properties.MessageExpiryInterval <= 600
    sid = m.properties.SubscriptionIdentifier
    assert (sid if isinstance(sid, list) else [sid]) == [5]


def test_v5_will_properties_forwarded(broker, clients):
    will_topic = unique("interop/willprops")
    observer = clients(broker, V5).connect()
    observer.subscribe(will_topic, 1)
    wp = Properties(PacketTypes.WILLMESSAGE)
    wp.ContentType = "application/x-status"
    wp.UserProperty = [("reason", "crash")]
    wp.ResponseTopic = "status/ack"
    dying = clients(broker, V5, will=(will_topic, b"down", 1, False), will_properties=wp).connect()
    dying.kill_socket()
    [m] = observer.expect(1)
    assert m.payload == b"down"
    assert m.properties.ContentType == "application/x-status"
    assert list(m.properties.UserProperty) == [("reason", "crash")]
    assert m.properties.ResponseTopic == "status/ack"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_will_sent_when_keep_alive_expires(broker, clients, protocol):
    """A client that stops talking (socket still open) is dropped after 1.5 x keep alive and its
    will is published."""
    will_topic = unique("interop/keepalive")
    observer = clients(broker, protocol).connect()
    observer.subscribe(will_topic, 1)
    silent = clients(broker, protocol, will=(will_topic, b"timed out", 1, False)).connect(keepalive=2)
    silent.client.loop_stop()  # no more PINGREQs; the socket stays open
    assert observer.drain(1.0) == []
    [m] = observer.expect(1, timeout=6)
    assert m.payload == b"timed out"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_persistent_session_queues_qos2_while_offline(broker, clients, protocol):
    topic = unique("interop/persist2")
    cid = unique("persist2")
    kwargs = {"clean": False, "session_expiry": 300 if protocol == V5 else None}
    first = clients(broker, protocol, cid, **kwargs).connect(clean_start=True)
    first.subscribe(topic, 2)
    first.disconnect()
    pub = clients(broker, protocol).connect()
    for i in range(50):
        pub.publish(topic, str(i).encode(), qos=2, wait=False)
    pub.publish(topic, b"last", qos=2)
    again = clients(broker, protocol, cid, **kwargs).connect(clean_start=False)
    assert again.session_present
    msgs = again.expect(51)
    assert [m.payload for m in msgs] == [str(i).encode() for i in range(50)] + [b"last"]
    assert all(m.qos == 2 for m in msgs)
    assert again.drain() == []


def test_v5_retain_handling_options(broker, clients):
    topic = unique("interop/rh")
    pub = clients(broker, V5).connect()
    pub.publish(topic, b"kept", qos=1, retain=True)
    c = clients(broker, V5).connect()
    # Retain Handling 2: never send retained messages on subscribe.
    c.subscribe(topic, options=SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND))
    assert c.drain() == [], "Retain Handling 2 must not send retained messages"
    d = clients(broker, V5).connect()
    # Retain Handling 1: send only when the subscription is new.
    opts = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
    d.subscribe(topic, options=opts)
    assert [m.payload for m in d.expect(1)] == [b"kept"]
    d.subscribe(topic, options=opts)
    assert d.drain() == [], "Retain Handling 1 resent retained messages for an existing subscription"
    # Retain Handling 0 (default): sent again on every SUBSCRIBE.
    d.subscribe(topic, 1)
    assert [m.payload for m in d.expect(1)] == [b"kept"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_session_takeover(broker, clients, protocol):
    topic = unique("interop/takeover")
    cid = unique("takeover")
    old = clients(broker, protocol, cid).connect()
    new = clients(broker, protocol, cid).connect()
    assert old._disconnected.wait(TIMEOUT), "the first connection was not closed on takeover"
    if protocol == V5:
        assert old.disconnect_rc is not None and old.disconnect_rc.value == 0x8E, (
            f"expected DISCONNECT 0x8E (Session taken over), got {old.disconnect_rc}"
        )
    new.subscribe(topic, 1)
    pub = clients(broker, protocol).connect()
    pub.publish(topic, b"to the new one", qos=1)
    assert new.expect(1)[0].payload == b"to the new one"
    assert new.client.is_connected()
