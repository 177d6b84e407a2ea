//! The admin API and `/metrics` over real HTTP against a running broker with real MQTT
//! clients over TCP: kick really disconnects, publish really arrives, unauthorised requests
//! are refused, bad input gets a 4xx.

use hayate_codec::{Packet, ProtocolVersion, QoS, ReasonCode};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::ops::HttpApi;
use hayate_testkit::{connect_packet, TestBroker};
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN: &str = "test-token-3f9a";
const WAIT: Duration = Duration::from_secs(5);

/// A broker with the HTTP edge on a free loopback port, on a runtime of its own (the test's
/// clients are blocking, on the test thread).
struct Running {
    _runtime: tokio::runtime::Runtime,
    broker: TestBroker,
    api: HttpApi,
}

fn start() -> Running {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let broker = runtime.block_on(TestBroker::start_with(|config| {
        config.http.listen = Some("127.0.0.1:0".into());
        config.http.token = Some(TOKEN.into());
    }));
    let http = broker.handle.http_addr().expect("the HTTP edge is on");
    Running {
        _runtime: runtime,
        api: HttpApi::new(http, Some(TOKEN)),
        broker,
    }
}

fn client(running: &Running, id: &str, username: Option<&str>) -> BlockingClient {
    let mut connect = connect_packet(ProtocolVersion::V5, id, true);
    connect.username = username.map(Into::into);
    BlockingClient::connect_with(running.broker.addr, connect).0
}

fn subscribe(client: &mut BlockingClient, filter: &str, qos: QoS) {
    client.send_subscribe(filter, qos, 1);
    match client.recv(WAIT) {
        Some(Packet::SubAck(_)) => {}
        other => panic!("expected SUBACK, got {other:?}"),
    }
}

fn ids(body: &Value, key: &str, field: &str) -> Vec<String> {
    body[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {body}"))
        .iter()
        .map(|c| c[field].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn unauthorised_requests_are_refused_and_open_endpoints_answer() {
    let running = start();
    let anonymous = running.api.with_token(None);
    let wrong = running.api.with_token(Some("not-the-token"));
    for path in ["/metrics", "/api/v1/clients", "/api/v1/overview"] {
        assert_eq!(anonymous.get(path).0, 401, "{path} without a token");
        assert_eq!(wrong.get(path).0, 401, "{path} with a wrong token");
        assert_eq!(running.api.get(path).0, 200, "{path} with the token");
    }
    let (status, _) = anonymous.post_json("/api/v1/publish", &json!({"topic": "a"}));
    assert_eq!(status, 401);
    assert_eq!(anonymous.get("/health"), (200, "ok\n".to_string()));
    assert_eq!(anonymous.get("/ready"), (200, "ready\n".to_string()));
    let (status, page) = anonymous.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<title>Hayate</title>"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no external resource"
    );
}

#[test]
fn bad_input_gets_a_clear_4xx() {
    let running = start();
    let api = &running.api;
    let cases = [
        "/api/v1/clients?limit=0",
        "/api/v1/clients?limit=100000",
        "/api/v1/clients?limit=ten",
        "/api/v1/clients?unknown=1",
        "/api/v1/retained?filter=a/%23/b",
        "/api/v1/subscriptions",
        "/api/v1/subscriptions?topic=a/%2B",
    ];
    for path in cases {
        let (status, body) = api.get(path);
        assert_eq!(status, 400, "{path}: {body}");
    }
    assert_eq!(api.get("/api/v1/nothing-here").0, 404);
    assert_eq!(api.get("/api/v1/clients/nobody").0, 404);
    assert_eq!(
        api.post_json("/api/v1/clients/nobody/kick", &json!({})).0,
        404
    );
    assert_eq!(api.delete("/api/v1/retained?topic=none").0, 404);
    assert_eq!(api.delete("/api/v1/retained").0, 400, "topic missing");
    for body in [
        json!({"topic": "a/+"}),
        json!({"topic": "a", "qos": 3}),
        json!({"topic": "a", "payload": "x", "payload_base64": "eA=="}),
        json!({"topic": "a", "payload_base64": "not base64!"}),
    ] {
        let (status, answer) = api.post_json("/api/v1/publish", &body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let (status, _) = api.post_raw("/api/v1/publish", "application/json", "{not json");
    assert_eq!(status, 400);
    let (status, _) = api.post_raw("/api/v1/publish", "application/json", "{\"qos\": 1}");
    assert_eq!(status, 422, "topic missing");
    let (status, _) = api.post_raw("/api/v1/publish", "text/plain", "{}");
    assert_eq!(status, 415);
    // Still serving.
    assert_eq!(api.get("/health").0, 200);
}

/// 25 clients listed 10 at a time with the cursor, each once, in order; filters by prefix,
/// user name and listener.
#[test]
fn clients_are_listed_in_pages_with_filters() {
    let running = start();
    let mut clients = Vec::new();
    for i in 0..25 {
        let user = if i % 5 == 0 { Some("alice") } else { None };
        clients.push(client(&running, &format!("dev-{i:02}"), user));
    }
    clients.push(client(&running, "other", Some("bob")));
    let mut seen = Vec::new();
    let mut path = "/api/v1/clients?prefix=dev-&limit=10".to_string();
    let mut pages = 0;
    loop {
        let (status, body) = running.api.get_json(&path);
        assert_eq!(status, 200, "{body}");
        seen.extend(ids(&body, "clients", "client_id"));
        pages += 1;
        match body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/clients?prefix=dev-&limit=10&cursor={cursor}"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("dev-{i:02}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    let (_, alice) = running.api.get_json("/api/v1/clients?username=alice");
    assert_eq!(
        ids(&alice, "clients", "client_id"),
        ["dev-00", "dev-05", "dev-10", "dev-15", "dev-20"]
    );
    // Sparse matches in small pages: every match once, whatever the page boundaries.
    let mut found = Vec::new();
    let mut path = "/api/v1/clients?username=alice&limit=2".to_string();
    for _ in 0..30 {
        let (status, body) = running.api.get_json(&path);
        assert_eq!(status, 200, "{body}");
        let page = ids(&body, "clients", "client_id");
        assert!(page.len() <= 2);
        found.extend(page);
        match body["next_cursor"].as_str() {
            Some(cursor) => {
                path = format!("/api/v1/clients?username=alice&limit=2&cursor={cursor}")
            }
            None => break,
        }
    }
    assert_eq!(found, ["dev-00", "dev-05", "dev-10", "dev-15", "dev-20"]);
    let (_, first) = running.api.get_json("/api/v1/clients?limit=1");
    let listener = first["clients"][0]["listener"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(first["clients"][0]["online"].as_bool().unwrap());
    assert!(first["clients"][0]["peer"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    let (_, by_listener) = running
        .api
        .get_json(&format!("/api/v1/clients?listener={listener}&limit=1000"));
    assert_eq!(by_listener["clients"].as_array().unwrap().len(), 26);
    let (_, none) = running
        .api
        .get_json("/api/v1/clients?listener=no-such-listener");
    assert!(none["clients"].as_array().unwrap().is_empty());
}

/// A client's detail shows its subscriptions; kicking it really closes its connection (v5
/// DISCONNECT 0x98, then end of stream), and it is gone from the listing.
#[test]
fn client_detail_and_kick_really_disconnects() {
    let running = start();
    let mut victim = client(&running, "victim", None);
    subscribe(&mut victim, "k/+/x", QoS::AtLeastOnce);
    let (status, detail) = running.api.get_json("/api/v1/clients/victim");
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["online"], json!(true));
    assert_eq!(detail["protocol"], json!(5));
    assert_eq!(
        detail["subscriptions"],
        json!([{"filter": "k/+/x", "qos": 1}])
    );
    assert_eq!(detail["queued"], json!(0));

    let (status, body) = running
        .api
        .post_json("/api/v1/clients/victim/kick", &json!({}));
    assert_eq!(status, 200, "{body}");
    match victim.recv(WAIT) {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason_code, ReasonCode::ADMINISTRATIVE_ACTION),
        other => panic!("expected DISCONNECT 0x98, got {other:?}"),
    }
    assert!(
        victim.recv(WAIT).is_none(),
        "the server closed the connection"
    );
    let deadline = std::time::Instant::now() + WAIT;
    while running.api.get("/api/v1/clients/victim").0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session (expiry 0) ends"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        running
            .api
            .post_json("/api/v1/clients/victim/kick", &json!({}))
            .0,
        404
    );
}

/// A message published through the API arrives at a subscribed MQTT client; a retained one is
/// listed, then deleted without a message, and a new subscriber gets nothing retained.
#[test]
fn publish_arrives_and_retained_messages_are_listed_and_deleted() {
    let running = start();
    let mut sub = client(&running, "sub", None);
    subscribe(&mut sub, "api/#", QoS::AtLeastOnce);
    let (status, body) = running.api.post_json(
        "/api/v1/publish",
        &json!({"topic": "api/hello", "payload": "hi there", "qos": 1}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["delivered"], json!(1));
    let publish = sub.recv_publish(WAIT).expect("the message arrives");
    assert_eq!(&publish.topic[..], "api/hello");
    assert_eq!(&publish.payload[..], b"hi there");
    assert_eq!(publish.qos, QoS::AtLeastOnce);

    for (topic, body) in [
        (
            "api/r/b",
            json!({"topic": "api/r/b", "payload": "two", "retain": true}),
        ),
        (
            "api/r/a",
            json!({"topic": "api/r/a", "payload_base64": "AP8=", "retain": true}),
        ),
    ] {
        assert_eq!(running.api.post_json("/api/v1/publish", &body).0, 200);
        assert_eq!(&sub.recv_publish(WAIT).unwrap().topic[..], topic);
    }
    let (_, retained) = running
        .api
        .get_json("/api/v1/retained?filter=api/%23&limit=1");
    assert_eq!(ids(&retained, "messages", "topic"), ["api/r/a"]);
    assert_eq!(retained["messages"][0]["payload_base64"], json!("AP8="));
    let cursor = retained["next_cursor"].as_str().unwrap();
    let (_, rest) = running.api.get_json(&format!(
        "/api/v1/retained?filter=api/%23&limit=1&cursor={cursor}"
    ));
    assert_eq!(ids(&rest, "messages", "topic"), ["api/r/b"]);
    assert_eq!(rest["messages"][0]["payload"], json!("two"));

    let (status, _) = running.api.delete("/api/v1/retained?topic=api/r/a");
    assert_eq!(status, 200);
    assert!(
        sub.recv_publish(Duration::from_millis(300)).is_none(),
        "deleting sends nothing"
    );
    let mut late = client(&running, "late", None);
    subscribe(&mut late, "api/r/a", QoS::AtMostOnce);
    assert!(
        late.recv_publish(Duration::from_millis(300)).is_none(),
        "nothing retained on api/r/a"
    );
    let (_, left) = running.api.get_json("/api/v1/retained?filter=api/%23");
    assert_eq!(ids(&left, "messages", "topic"), ["api/r/b"]);
}

#[test]
fn subscriptions_matching_a_topic() {
    let running = start();
    let mut a = client(&running, "a", None);
    subscribe(&mut a, "s/+", QoS::AtLeastOnce);
    let mut b = client(&running, "b", None);
    subscribe(&mut b, "$share/g/s/#", QoS::AtMostOnce);
    let (status, body) = running.api.get_json("/api/v1/subscriptions?topic=s/1");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["subscriptions"],
        json!([
            {"client_id": "a", "filter": "s/+", "qos": 1},
            {"client_id": "b", "filter": "$share/g/s/#", "qos": 0},
        ])
    );
    let (_, none) = running.api.get_json("/api/v1/subscriptions?topic=t");
    assert_eq!(none["subscriptions"], json!([]));
}

/// `/metrics` counts what the clients did, read from the broker's counters at scrape time.
#[test]
fn metrics_reflect_traffic() {
    let running = start();
    let mut sub = client(&running, "m-sub", None);
    subscribe(&mut sub, "m/#", QoS::AtLeastOnce);
    let mut publisher = client(&running, "m-pub", None);
    for _ in 0..3 {
        publisher.send_publish("m/1", b"payload");
    }
    publisher.send_publish("nobody/listens", b"x");
    let qos1 = hayate_testkit::publish_packet("m/2", b"at-least", QoS::AtLeastOnce, false, Some(1));
    publisher.send(&Packet::Publish(qos1));
    let mut delivered = Vec::new();
    for _ in 0..4 {
        delivered.push(sub.recv_publish(WAIT).expect("delivered").qos);
    }
    assert_eq!(
        delivered.iter().filter(|q| **q == QoS::AtLeastOnce).count(),
        1
    );
    let deadline = std::time::Instant::now() + WAIT;
    let text = loop {
        let (status, text) = running.api.get("/metrics");
        assert_eq!(status, 200);
        if text.contains("hayate_publish_no_subscribers_total 1")
            || std::time::Instant::now() > deadline
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for line in [
        "hayate_clients_connected 2",
        "hayate_sessions{state=\"online\"} 2",
        "hayate_subscriptions 1",
        // By QoS: the QoS 0 messages went out at QoS 0, the QoS 1 one at QoS 1.
        "hayate_publish_received_total{qos=\"0\"} 4",
        "hayate_publish_received_total{qos=\"1\"} 1",
        "hayate_publish_received_total{qos=\"2\"} 0",
        "hayate_publish_sent_total{qos=\"0\"} 3",
        "hayate_publish_sent_total{qos=\"1\"} 1",
        "hayate_publish_received_payload_bytes_total{qos=\"0\"} 22",
        "hayate_publish_received_payload_bytes_total{qos=\"1\"} 8",
        "hayate_publish_sent_payload_bytes_total{qos=\"0\"} 21",
        "hayate_publish_sent_payload_bytes_total{qos=\"1\"} 8",
        "hayate_publish_no_subscribers_total 1",
        "# TYPE hayate_network_received_bytes_total counter",
        "# TYPE process_resident_memory_bytes gauge",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line:?} missing in:\n{text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("hayate_network_connections{listener=")
                && l.ends_with(",transport=\"tcp\"} 2")),
        "connections by listener and transport:\n{text}"
    );
}
