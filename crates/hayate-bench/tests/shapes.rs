//! fan-in `--shape open|paho` (the seed shape: one PUBLISH per write, publishers that wait
//! like paho clients) against an in-process Hayate, seen through a TCP proxy that parses the
//! MQTT packets the clients write and can hold back what the broker sends them.

mod common;

use common::{assert_delivered, run, run_err};
use hayate_bench::BenchError;
use hayate_testkit::TestBroker;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const Q: &str = "--version-wait-ms 0 --progress 0";

/// What the proxy saw a client write on one connection.
#[derive(Debug, Default, Clone)]
struct ConnLog {
    /// Arrival time of each PUBLISH packet.
    publishes: Vec<Instant>,
    /// For every read that completed at least one PUBLISH: how many it completed.
    publishes_per_read: Vec<usize>,
}

/// A TCP proxy in front of a broker: logs the PUBLISH packets of every client connection and
/// delays everything the broker sends to the clients by `delay`.
struct Proxy {
    port: u16,
    log: Arc<Mutex<Vec<ConnLog>>>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, delay: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let log: Arc<Mutex<Vec<ConnLog>>> = Arc::default();
        let conns = log.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let index = {
                    let mut conns = conns.lock();
                    conns.push(ConnLog::default());
                    conns.len() - 1
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(upstream_copy(
                    client_read,
                    server_write,
                    conns.clone(),
                    index,
                ));
                tokio::spawn(delayed_copy(server_read, client_write, delay));
            }
        });
        Proxy { port, log }
    }

    /// The connections that wrote PUBLISH packets (the publishers).
    fn publishers(&self) -> Vec<ConnLog> {
        self.log
            .lock()
            .iter()
            .filter(|c| !c.publishes.is_empty())
            .cloned()
            .collect()
    }
}

/// Client → broker, counting the PUBLISH packets each read completes.
async fn upstream_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    log: Arc<Mutex<Vec<ConnLog>>>,
    index: usize,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        pending.extend_from_slice(&buf[..n]);
        let mut publishes = 0;
        while let Some((kind, len)) = next_packet(&pending) {
            if kind == 3 {
                publishes += 1;
            }
            pending.drain(..len);
        }
        if publishes > 0 {
            let mut log = log.lock();
            let c = &mut log[index];
            c.publishes.extend((0..publishes).map(|_| now));
            c.publishes_per_read.push(publishes);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The packet type and total length of the complete MQTT packet at the start of `bytes`.
fn next_packet(bytes: &[u8]) -> Option<(u8, usize)> {
    let kind = *bytes.first()? >> 4;
    let mut remaining = 0usize;
    for i in 0..4 {
        let b = *bytes.get(1 + i)?;
        remaining |= usize::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            let len = 2 + i + remaining;
            return (bytes.len() >= len).then_some((kind, len));
        }
    }
    None
}

/// Broker → client, each chunk held back by `delay` (order kept).
async fn delayed_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Open loop at 5 msg/s per connection: every PUBLISH is its own write (the bench's count of
/// writes, and the proxy sees one PUBLISH per read), each connection sends at its own rate,
/// and a QoS 1 run at that low rate delivers everything. The batched capacity test, seen
/// through the same proxy, does put several PUBLISH in one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_shape_writes_one_publish_per_write_at_the_rate_per_connection() {
    let broker = TestBroker::start().await;
    let proxy = Proxy::start(broker.addr, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("open.json");
    let r = run(&format!(
        "fan-in --port {} {Q} --shape open -c 10 -w 3 --rate-per-connection 5 -d 2 -q 1 --sub-qos 1 --json {}",
        proxy.port,
        json.display()
    ))
    .await;
    assert_delivered(&r, "open shape");
    let m = r.messages.as_ref().unwrap();
    // 10 connections × 5 msg/s × 2 s, give or take the first and last tick.
    assert!((95..=105).contains(&m.sent), "sent {}", m.sent);
    assert_eq!(m.acknowledged, m.sent);
    assert_eq!(m.publish_writes, m.sent, "one PUBLISH per write");
    assert_eq!(r.config.shape.as_deref(), Some("open"));
    assert_eq!(r.config.rate_per_connection_per_s, Some(5.0));
    assert_eq!(r.config.rate_per_s, Some(50.0));
    assert_eq!(r.config.batch, Some(1));
    assert_eq!(r.config.pacing.as_deref(), Some("fixed-rate"));
    assert!(
        r.latency
            .as_ref()
            .unwrap()
            .corrected_for_coordinated_omission
    );
    // On the wire: each of the 10 publishers sent ~10 messages, 200 ms apart, one per read.
    let publishers = proxy.publishers();
    assert_eq!(publishers.len(), 10);
    let reads: Vec<usize> = publishers
        .iter()
        .flat_map(|c| c.publishes_per_read.iter().copied())
        .collect();
    let single = reads.iter().filter(|&&n| n == 1).count();
    // A stall of the shared machine may let the proxy read two writes at once; rarely.
    assert!(
        single * 100 >= reads.len() * 95,
        "publishes per read {reads:?}"
    );
    for c in &publishers {
        assert!(
            (9..=11).contains(&c.publishes.len()),
            "{}",
            c.publishes.len()
        );
        let gaps: Vec<f64> = c
            .publishes
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        let gap = median(gaps);
        assert!((0.15..=0.25).contains(&gap), "median gap {gap} s");
    }
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    common::assert_valid(&value);
    assert_eq!(value["config"]["shape"], "open");
    let text = hayate_bench::report::summary_text(&r);
    assert!(
        text.contains("shape open (one PUBLISH per write, 5 msg/s per connection)"),
        "{text}"
    );
    assert!(text.contains("1.00 msg/write"), "{text}");

    // The capacity test batches: several PUBLISH per write, and the proxy sees them together.
    let proxy = Proxy::start(broker.addr, Duration::ZERO).await;
    let r = run(&format!(
        "fan-in --port {} {Q} -c 2 -w 1 -n 2000 -q 0 --window 500",
        proxy.port
    ))
    .await;
    let m = r.messages.as_ref().unwrap();
    assert_eq!(r.config.shape.as_deref(), Some("batch"));
    assert!(
        m.publish_writes * 4 <= m.sent,
        "{} writes for {}",
        m.publish_writes,
        m.sent
    );
    let most = proxy
        .publishers()
        .iter()
        .flat_map(|c| c.publishes_per_read.clone())
        .max()
        .unwrap_or(0);
    assert!(most >= 8, "at most {most} PUBLISH in one read");
}

/// Paho shape through a proxy that holds every broker → client packet back 30 ms: a QoS 1
/// worker cannot publish again before its PUBACK (≤ 1 s / 30 ms ≈ 33 messages per worker and
/// second), a QoS 2 worker before its PUBCOMP (two round trips: ≤ ~17), so the message counts
/// are bounded by the round trips; at QoS 0 the write is the completion and nothing holds the
/// workers back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paho_shape_waits_for_each_puback_and_pubcomp() {
    let broker = TestBroker::start().await;
    let proxy = Proxy::start(broker.addr, Duration::from_millis(30)).await;
    let port = proxy.port;
    let line = |qos: u8, length: &str| {
        format!("fan-in --port {port} {Q} --shape paho -c 6 -w 2 {length} -q {qos} --sub-qos {qos}")
    };
    // QoS 1: 2 workers × 1 s / (≥ 30 ms per PUBACK) ≤ ~66 messages.
    let r = run(&line(1, "-d 1")).await;
    assert_delivered(&r, "paho qos 1");
    let m = r.messages.as_ref().unwrap();
    assert!((20..=70).contains(&m.sent), "qos 1 sent {}", m.sent);
    assert_eq!(m.acknowledged, m.sent);
    assert_eq!(m.publish_writes, m.sent);
    assert_eq!(r.config.shape.as_deref(), Some("paho"));
    assert_eq!(r.config.inflight, Some(1));
    assert_eq!(r.config.pacing.as_deref(), Some("closed-loop"));
    // Each worker publishes on its connections in turn: all 6 published.
    assert_eq!(proxy.publishers().len(), 6);
    // QoS 2: PUBREC then PUBCOMP, ≥ 60 ms per message: ≤ ~33.
    let r = run(&line(2, "-d 1")).await;
    assert_delivered(&r, "paho qos 2");
    let m = r.messages.as_ref().unwrap();
    assert!((10..=36).contains(&m.sent), "qos 2 sent {}", m.sent);
    assert_eq!(m.acknowledged, m.sent);
    assert_eq!((m.duplicates, m.reordered), (0, 0));
    // QoS 0: no acknowledgement to wait for; 3,000 messages waiting 30 ms each would take
    // 45 s.
    let r = run(&line(0, "-n 3000")).await;
    assert_delivered(&r, "paho qos 0");
    let m = r.messages.as_ref().unwrap();
    assert_eq!(m.sent, 3000);
    assert!(
        m.send_duration_s < 1.0,
        "qos 0 took {} s",
        m.send_duration_s
    );
    assert_eq!(m.publish_writes, m.sent);
}

/// Paho shape paced per connection, and over worker processes; options each shape refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_paho_over_processes_and_shape_errors() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "fan-in --port {port} {Q} --shape paho -c 20 -w 4 --rate-per-connection 2 -d 1.5 -q 1 --sub-qos 1"
    ))
    .await;
    assert_delivered(&r, "paced paho");
    let m = r.messages.as_ref().unwrap();
    assert!((57..=63).contains(&m.sent), "sent {}", m.sent);
    assert_eq!(m.publish_writes, m.sent);
    assert_eq!(r.config.rate_per_connection_per_s, Some(2.0));
    let r = run(&format!(
        "fan-in --port {port} {Q} --shape paho -c 20 -w 4 -n 400 -q 1 --sub-qos 1 --processes 2"
    ))
    .await;
    assert_delivered(&r, "paho over 2 worker processes");
    let m = r.messages.as_ref().unwrap();
    assert_eq!(m.sent, 400);
    assert_eq!(m.publish_writes, 400);
    assert_eq!(r.bench.processes, 3);
    for bad in [
        "fan-in --shape open",
        "fan-in --rate-per-connection 1",
        "fan-in --shape open --rate-per-connection 1 --rate 10",
        "fan-in --shape open --rate-per-connection 0",
        "fan-in --shape paho --rate-per-connection 1 --window 10",
        "fan-in --shape open --rate-per-connection 1 --rate-schedule 1@10",
    ] {
        let e = run_err(&format!("{bad} --port {port} {Q}")).await;
        assert!(matches!(e, BenchError::InvalidOption(_)), "{bad}: {e}");
    }
}
