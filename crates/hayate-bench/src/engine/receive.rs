//! Subscriber and idle parts: subscribe, then one receive loop per connection until stop.
//! Subscribers check every bench payload they receive (loss, duplicates, order, latency) in a
//! shared [`Recorder`].

use super::{
    wait_stop, ConnectReport, KeyMode, PartControl, PartEvent, PartLive, PartReport, PartSpec,
    SubscribeSpec,
};
use crate::client::{classify_io, Conn, TopicTemplate};
use crate::clock::Clock;
use crate::live::ReceiveTally;
use crate::payload;
use crate::stats::{CreditHook, Recorder};
use hayate_codec::{Packet, PubResp, QoS};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Shared state of a part's receive loops.
struct RecvCtx {
    recorder: Option<Arc<Mutex<Recorder>>>,
    keys: KeyMode,
    go: watch::Receiver<Option<u64>>,
    warmup_ns: u64,
    keep_alive: u16,
    clock: Clock,
    live: Arc<PartLive>,
    read_chunk: usize,
    phase_offsets: Vec<u64>,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_subscribers(
    spec: &PartSpec,
    s: &SubscribeSpec,
    conns: Vec<(u64, Conn)>,
    clock: Clock,
    ctrl: &mut PartControl,
    hook: Option<CreditHook>,
    mut connect_report: ConnectReport,
    report: &mut PartReport,
) {
    // Subscribe every connection (with the connect concurrency), then report Connected.
    let template = TopicTemplate::new(&s.filter);
    let timeout = Duration::from_millis(spec.client.connect_timeout_ms.max(1));
    let sem = Arc::new(Semaphore::new(spec.connect_concurrency.max(1)));
    let mut set = JoinSet::new();
    for (id, mut conn) in conns {
        let filter = template.topic(id);
        let sem = sem.clone();
        let qos = s.qos;
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let r = conn.subscribe(&filter, qos, timeout).await;
            (id, conn, r)
        });
    }
    let mut subscribed = Vec::new();
    while let Some(res) = set.join_next().await {
        let Ok((id, conn, r)) = res else { continue };
        match r {
            Ok(_) => subscribed.push((id, conn)),
            Err(e) => {
                ctrl.live.metrics.subscribe_failed();
                connect_report.subscribe_failures += 1;
                connect_report.subscribe_error.get_or_insert(e);
            }
        }
    }
    subscribed.sort_by_key(|(id, _)| *id);
    report.connect = connect_report.clone();
    let _ = ctrl.events.send(PartEvent::Connected(connect_report));
    let mut recorder = Recorder::new(spec.interval_ns, u64::MAX);
    if let Some(hook) = hook {
        recorder = recorder.with_hook(hook);
    }
    let recorder = Arc::new(Mutex::new(recorder));
    run_receivers(
        spec,
        Some(s),
        subscribed,
        clock,
        ctrl,
        Some(recorder.clone()),
        report,
    )
    .await;
    report.recorder = Some(recorder.lock().to_wire());
}

/// Runs the receive loops of `conns` until stop, then disconnects them.
pub(super) async fn run_receivers(
    spec: &PartSpec,
    s: Option<&SubscribeSpec>,
    conns: Vec<(u64, Conn)>,
    clock: Clock,
    ctrl: &mut PartControl,
    recorder: Option<Arc<Mutex<Recorder>>>,
    report: &mut PartReport,
) {
    let ctx = Arc::new(RecvCtx {
        recorder: recorder.clone(),
        keys: s.map_or(KeyMode::Stream, |s| s.keys),
        go: ctrl.go.clone(),
        warmup_ns: s.map_or(0, |s| s.warmup_ns),
        keep_alive: spec.client.keep_alive,
        clock,
        live: ctrl.live.clone(),
        read_chunk: s.map_or(64, |s| s.read_chunk),
        phase_offsets: s.map_or(Vec::new(), |s| s.phase_offsets_ns.clone()),
    });
    let mut set = JoinSet::new();
    for (id, conn) in conns {
        let ctx = ctx.clone();
        let stop = ctrl.stop.clone();
        set.spawn(receive_loop(conn, id, ctx, stop));
    }
    wait_stop(&mut ctrl.stop).await;
    report.disconnect_start_ns = clock.now_ns();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(None) => report.disconnected += 1,
            Ok(Some(reason)) => *report.drops.entry(reason).or_default() += 1,
            Err(_) => *report.drops.entry("task-panicked".into()).or_default() += 1,
        }
    }
    report.disconnect_end_ns = clock.now_ns();
}

/// A bench payload received: stream key, sequence number, intended and actual send time.
type Arrival = (u64, u64, u64, u64);

/// Reads until stop (then sends DISCONNECT and returns `None`) or until the connection is lost
/// (returns the reason).
async fn receive_loop(
    mut conn: Conn,
    sub_index: u64,
    ctx: Arc<RecvCtx>,
    mut stop: watch::Receiver<bool>,
) -> Option<String> {
    let ping_every = Duration::from_millis(u64::from(ctx.keep_alive) * 750);
    let mut next_ping = tokio::time::Instant::now() + ping_every;
    let mut batch: Vec<Arrival> = Vec::new();
    let mut tally = ReceiveTally::default();
    let reason = loop {
        if *stop.borrow_and_update() {
            conn.disconnect().await;
            return None;
        }
        conn.rbuf.reserve(ctx.read_chunk);
        let read = tokio::select! {
            biased;
            r = stop.changed() => {
                if r.is_err() {
                    conn.disconnect().await;
                    return None;
                }
                continue;
            }
            _ = tokio::time::sleep_until(next_ping), if ctx.keep_alive > 0 => {
                conn.push(&Packet::PingReq);
                if let Err(e) = conn.flush().await {
                    break classify_io(&e).reason();
                }
                next_ping = tokio::time::Instant::now() + ping_every;
                continue;
            }
            r = tokio::io::AsyncReadExt::read_buf(&mut conn.stream, &mut conn.rbuf) => r,
        };
        match read {
            Ok(0) => break "closed".to_string(),
            Err(e) => break classify_io(&e).reason(),
            Ok(_) => {}
        }
        let now = ctx.clock.now_ns();
        let closed = decode_all(&mut conn, sub_index, &ctx, &mut batch, &mut tally);
        record(&ctx, &mut batch, now, &mut tally);
        if !conn.wbuf.is_empty() {
            if let Err(e) = conn.flush().await {
                break classify_io(&e).reason();
            }
            next_ping = tokio::time::Instant::now() + ping_every;
        }
        if let Some(reason) = closed {
            break reason;
        }
    };
    ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
    Some(reason)
}

/// Handles every complete packet read: bench payloads go to `batch`, acknowledgements to the
/// write buffer. Returns why the connection is over, if it is.
fn decode_all(
    conn: &mut Conn,
    sub_index: u64,
    ctx: &RecvCtx,
    batch: &mut Vec<Arrival>,
    tally: &mut ReceiveTally,
) -> Option<String> {
    loop {
        match conn.next_packet() {
            Ok(Some(Packet::Publish(p))) => {
                tally.packet(p.qos as u8, p.payload.len());
                if let Some(h) = payload::read(&p.payload) {
                    let key = match ctx.keys {
                        KeyMode::Stream => u64::from(h.stream),
                        KeyMode::PerSubscriber { publishers } => {
                            sub_index * publishers + u64::from(h.stream)
                        }
                    };
                    batch.push((key, u64::from(h.seq), h.intended_ns, h.sent_ns));
                } else {
                    tally.foreign();
                    if let Some(rec) = &ctx.recorder {
                        rec.lock().foreign += 1;
                    }
                }
                if let Some(id) = p.packet_id {
                    match p.qos {
                        QoS::AtLeastOnce => conn.push(&Packet::PubAck(PubResp::new(id))),
                        QoS::ExactlyOnce => conn.push(&Packet::PubRec(PubResp::new(id))),
                        QoS::AtMostOnce => {}
                    }
                }
            }
            Ok(Some(Packet::PubRel(r))) => conn.push(&Packet::PubComp(PubResp::new(r.packet_id))),
            Ok(Some(Packet::Disconnect(d))) => {
                return Some(format!("disconnect-0x{:02X}", d.reason_code.0));
            }
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(_) => return Some("protocol".into()),
        }
    }
}

/// Records the payloads of `batch` (received at `now`) and empties it; adds the read's
/// `tally` (with their latencies, duplicates and reordering) to the live figures.
fn record(ctx: &RecvCtx, batch: &mut Vec<Arrival>, now: u64, tally: &mut ReceiveTally) {
    if let (Some(rec), false) = (&ctx.recorder, batch.is_empty()) {
        let mut counted = 0;
        let mut rec = rec.lock();
        if !rec.warmup_set() {
            if let Some(go) = *ctx.go.borrow() {
                rec.set_warmup_end(go + ctx.warmup_ns);
                if !ctx.phase_offsets.is_empty() {
                    rec.set_phases(ctx.phase_offsets.iter().map(|o| go + o).collect());
                }
            }
        }
        let (duplicates, reordered) = (rec.duplicates, rec.reordered);
        for &(key, seq, intended, sent) in batch.iter() {
            if rec.record(key, seq, intended, sent, now) {
                counted += 1;
            }
            tally.latency(now.saturating_sub(intended).max(1));
        }
        tally.order(rec.duplicates - duplicates, rec.reordered - reordered);
        rec.flush_credit();
        drop(rec);
        ctx.live.received.fetch_add(counted, Ordering::Relaxed);
    }
    batch.clear();
    if !tally.is_empty() {
        ctx.live.metrics.received(tally);
        *tally = ReceiveTally::default();
    }
}
