//! The load engine: a *part* is a slice of a scenario's connections (publishers, subscribers
//! or idle clients) that runs the same way in this process or in a worker process. The
//! coordinator drives each part through connect → go → (send done) → stop, and receives a
//! [`PartReport`] at the end.

use crate::client::{connect, ClientConfig, Conn, TopicTemplate};
use crate::clock::{Clock, PacePhase, PrecisionTimer, Schedule};
use crate::payload;
use crate::rate_schedule::{self, RatePhase};
use crate::stats::{coarse_histogram, hist_to_base64, Credit, CreditHook, Recorder, RecorderWire};
use hayate_codec::{encode_publish_header, Packet, PacketId, Properties, PubResp, QoS};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

/// What a part does once connected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PartKind {
    /// Publishers.
    Publish(PublishSpec),
    /// Subscribers.
    Subscribe(SubscribeSpec),
    /// Idle clients (held open, pinging).
    Idle,
}

/// A slice of a scenario's connections.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartSpec {
    /// Part index (worker process index for remote parts).
    pub index: usize,
    /// How to connect.
    pub client: ClientConfig,
    /// Client id role letter.
    pub role: char,
    /// Index of the first connection (client ids and stream ids derive from it).
    pub first_id: u64,
    /// Connections in this part.
    pub count: u64,
    /// Attempts in flight at once.
    pub connect_concurrency: usize,
    /// Connect rate of this part, per second.
    pub connect_rate: Option<f64>,
    /// Absolute epoch of the run clock.
    pub epoch: u64,
    /// Time series interval, ns.
    pub interval_ns: u64,
    /// Runtime threads (worker processes).
    pub threads: usize,
    /// What the connections do.
    pub kind: PartKind,
}

/// Topic selection of publishers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TopicPlan {
    /// Each connection its own topic (template with its index); stream = connection index.
    PerConnection {
        /// Template.
        template: String,
    },
    /// Publisher `p` of `publishers` cycles over topics `p, p+publishers, ...` below `topics`;
    /// stream = topic index. One connection per worker.
    Cycle {
        /// Template (`%i` = topic index).
        template: String,
        /// Number of topics.
        topics: u64,
        /// Number of publishers sharing them.
        publishers: u64,
    },
    /// One topic for all; stream = connection index.
    Fixed {
        /// The topic.
        topic: String,
    },
}

/// Publisher settings of a part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishSpec {
    /// Sender tasks in this part.
    pub workers: u64,
    /// PUBLISH QoS.
    pub qos: u8,
    /// Payload size (≥ 24).
    pub payload: usize,
    /// Topics.
    pub topics: TopicPlan,
    /// Messages this part sends at most.
    pub messages: Option<u64>,
    /// Seconds of sending at most, as ns.
    pub duration_ns: Option<u64>,
    /// Fixed rate of this part (open loop), messages/s.
    pub rate: Option<f64>,
    /// Rate schedule of this part (open loop, the part's share of each phase's rate); when
    /// not empty it replaces `rate` and the part sends for the sum of the phases.
    #[serde(default)]
    pub phases: Vec<RatePhase>,
    /// Most messages per write.
    pub batch: u64,
    /// Unacknowledged QoS 1/2 messages per connection.
    pub inflight: u64,
    /// Warm-up after go, ns.
    pub warmup_ns: u64,
    /// Closed loop: the part's initial credit (its share of the window); `None` = unlimited.
    pub window: Option<u64>,
}

/// How a subscriber part derives the stream key of a message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum KeyMode {
    /// The payload's stream id.
    Stream,
    /// `subscriber index * publishers + stream id` (each subscriber sees every publisher).
    PerSubscriber {
        /// Publishers.
        publishers: u64,
    },
}

/// Subscriber settings of a part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeSpec {
    /// Subscription QoS.
    pub qos: u8,
    /// Filter: `%i` = subscriber index.
    pub filter: String,
    /// Stream keys.
    pub keys: KeyMode,
    /// Warm-up after go, ns.
    pub warmup_ns: u64,
    /// Bytes to reserve per read.
    pub read_chunk: usize,
    /// Rate schedule: phase boundaries after go, ns (`[0, d1, d1+d2, ...]`); empty otherwise.
    #[serde(default)]
    pub phase_offsets_ns: Vec<u64>,
}

/// Live counters of a part (mirrored from worker processes every 100 ms).
#[derive(Debug, Default)]
pub struct PartLive {
    /// Messages sent.
    pub sent: AtomicU64,
    /// Messages sent after the warm-up.
    pub counted: AtomicU64,
    /// First copies received after the warm-up.
    pub received: AtomicU64,
    /// Connections established.
    pub connected: AtomicU64,
    /// Connections lost during the run.
    pub dropped: AtomicU64,
}

/// Snapshot of [`PartLive`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct LiveSnapshot {
    /// See [`PartLive::sent`].
    pub sent: u64,
    /// See [`PartLive::counted`].
    pub counted: u64,
    /// See [`PartLive::received`].
    pub received: u64,
    /// See [`PartLive::connected`].
    pub connected: u64,
    /// See [`PartLive::dropped`].
    pub dropped: u64,
}

impl PartLive {
    /// Current values.
    pub fn snapshot(&self) -> LiveSnapshot {
        LiveSnapshot {
            sent: self.sent.load(Ordering::Relaxed),
            counted: self.counted.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// Overwrites with a snapshot.
    pub fn store(&self, s: &LiveSnapshot) {
        self.sent.store(s.sent, Ordering::Relaxed);
        self.counted.store(s.counted, Ordering::Relaxed);
        self.received.store(s.received, Ordering::Relaxed);
        self.connected.store(s.connected, Ordering::Relaxed);
        self.dropped.store(s.dropped, Ordering::Relaxed);
    }
}

/// Connect phase figures of a part.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConnectReport {
    /// Attempts.
    pub attempted: u64,
    /// Successes.
    pub established: u64,
    /// Failures by reason.
    pub failures: BTreeMap<String, u64>,
    /// Failed subscriptions.
    pub subscribe_failures: u64,
    /// First subscribe failure, for error messages.
    pub subscribe_error: Option<String>,
    /// Start, ns.
    pub start_ns: u64,
    /// End (last completion), ns.
    pub end_ns: u64,
    /// Connect time histogram (µs), base64 V2.
    pub connect_time_us: String,
    /// Connections established per interval.
    pub series: Vec<u64>,
}

/// A process's CPU/RSS sample.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ProcSample {
    /// Time, ns since the epoch.
    pub t_ns: u64,
    /// Cumulative CPU seconds (user + system).
    pub cpu_s: f64,
    /// RSS, bytes.
    pub rss: u64,
}

/// What the publishers of a part did in one phase of a rate schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSend {
    /// Messages the schedule had due in the phase.
    pub offered: u64,
    /// Of those, messages written (the rest was abandoned when the phase ended).
    pub sent: u64,
    /// Messages written during the phase's window (by actual send time, whatever phase they
    /// were intended in).
    pub sent_in_window: u64,
}

impl PhaseSend {
    /// Adds another part's or worker's figures.
    pub fn add(&mut self, other: &PhaseSend) {
        self.offered += other.offered;
        self.sent += other.sent;
        self.sent_in_window += other.sent_in_window;
    }
}

/// Everything a part measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PartReport {
    /// Part index.
    pub index: usize,
    /// Connect phase.
    pub connect: ConnectReport,
    /// Messages sent.
    pub sent: u64,
    /// Of those, after the warm-up.
    pub counted: u64,
    /// Acknowledged (QoS 1/2).
    pub acked: u64,
    /// Ack errors by code.
    pub publish_errors: BTreeMap<String, u64>,
    /// First send, ns.
    pub first_send_ns: Option<u64>,
    /// Last send, ns.
    pub last_send_ns: Option<u64>,
    /// Messages sent per interval.
    pub series_sent: Vec<u64>,
    /// Closed-loop stalls.
    pub window_stalls: u64,
    /// Receive figures (subscriber parts).
    pub recorder: Option<RecorderWire>,
    /// Connections lost during the run, by reason.
    pub drops: BTreeMap<String, u64>,
    /// Connections closed at the end.
    pub disconnected: u64,
    /// Disconnect phase start, ns.
    pub disconnect_start_ns: u64,
    /// Disconnect phase end, ns.
    pub disconnect_end_ns: u64,
    /// Samples of the worker process itself (remote parts only).
    pub process: Vec<ProcSample>,
    /// Rate schedule: per phase.
    #[serde(default)]
    pub phases: Vec<PhaseSend>,
}

/// Part → coordinator events.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PartEvent {
    /// All connection attempts (and subscriptions) finished.
    Connected(ConnectReport),
    /// Publishers finished sending (and waiting for acks).
    SendDone,
    /// The part stopped; its report.
    Finished(Box<PartReport>),
    /// A worker process failed.
    Failed(String),
}

/// The part's side of the control channel.
pub struct PartControl {
    /// Go time (ns) once set.
    pub go: watch::Receiver<Option<u64>>,
    /// Stop flag.
    pub stop: watch::Receiver<bool>,
    /// Shaping credit.
    pub credit: Arc<Credit>,
    /// Live counters.
    pub live: Arc<PartLive>,
    /// Events to the coordinator.
    pub events: mpsc::UnboundedSender<PartEvent>,
}

/// The coordinator's side of the control channel.
pub struct PartLink {
    /// Part index.
    pub index: usize,
    /// Sets the go time.
    pub go: watch::Sender<Option<u64>>,
    /// Sets the stop flag.
    pub stop: watch::Sender<bool>,
    /// Shaping credit.
    pub credit: Arc<Credit>,
    /// Live counters.
    pub live: Arc<PartLive>,
    /// Events from the part.
    pub events: mpsc::UnboundedReceiver<PartEvent>,
    /// The worker process of a remote part.
    pub child: Option<tokio::process::Child>,
}

/// A connected pair of link and control.
pub fn link_pair(index: usize, credit: Arc<Credit>) -> (PartLink, PartControl) {
    let (go_tx, go_rx) = watch::channel(None);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let live = Arc::new(PartLive::default());
    (
        PartLink {
            index,
            go: go_tx,
            stop: stop_tx,
            credit: credit.clone(),
            live: live.clone(),
            events: ev_rx,
            child: None,
        },
        PartControl {
            go: go_rx,
            stop: stop_rx,
            credit,
            live,
            events: ev_tx,
        },
    )
}

/// Runs a part in this process.
pub fn spawn_local(spec: PartSpec, credit: Arc<Credit>, hook: Option<CreditHook>) -> PartLink {
    let (link, ctrl) = link_pair(spec.index, credit);
    tokio::spawn(async move {
        let events = ctrl.events.clone();
        let report = run_part(spec, ctrl, hook).await;
        let _ = events.send(PartEvent::Finished(Box::new(report)));
    });
    link
}

async fn wait_go(ctrl: &mut PartControl) -> Option<u64> {
    loop {
        if let Some(go) = *ctrl.go.borrow_and_update() {
            return Some(go);
        }
        if *ctrl.stop.borrow_and_update() {
            return None;
        }
        tokio::select! {
            r = ctrl.go.changed() => if r.is_err() { return None },
            r = ctrl.stop.changed() => if r.is_err() { return None },
        }
    }
}

async fn wait_stop(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Runs one part to completion: connect, report, wait for go, work, wait for stop, disconnect.
pub async fn run_part(
    spec: PartSpec,
    mut ctrl: PartControl,
    hook: Option<CreditHook>,
) -> PartReport {
    let clock = Clock::from_epoch(spec.epoch);
    let (conns, connect_report) = connect_many(&spec, clock, &ctrl.live).await;
    let mut report = PartReport {
        index: spec.index,
        ..PartReport::default()
    };
    match spec.kind.clone() {
        PartKind::Publish(p) => {
            report.connect = connect_report.clone();
            let _ = ctrl.events.send(PartEvent::Connected(connect_report));
            run_publishers(&spec, &p, conns, clock, &mut ctrl, &mut report).await;
        }
        PartKind::Subscribe(s) => {
            run_subscribers(
                &spec,
                &s,
                conns,
                clock,
                &mut ctrl,
                hook,
                connect_report,
                &mut report,
            )
            .await;
        }
        PartKind::Idle => {
            report.connect = connect_report.clone();
            let _ = ctrl.events.send(PartEvent::Connected(connect_report));
            run_receivers(&spec, None, conns, clock, &mut ctrl, None, &mut report).await;
        }
    }
    report
}

async fn connect_many(
    spec: &PartSpec,
    clock: Clock,
    live: &Arc<PartLive>,
) -> (Vec<(u64, Conn)>, ConnectReport) {
    let cfg = Arc::new(spec.client.clone());
    let sem = Arc::new(Semaphore::new(spec.connect_concurrency.max(1)));
    let mut set = JoinSet::new();
    let start = clock.now_ns();
    let schedule = spec.connect_rate.map(|r| Schedule::new(start, r));
    let mut report = ConnectReport {
        start_ns: start,
        ..Default::default()
    };
    let mut times = coarse_histogram();
    let mut conns = Vec::with_capacity(spec.count as usize);
    let interval = spec.interval_ns.max(1);
    let mut collect = |res: Result<
        (u64, Result<Conn, crate::client::ConnectError>, u64, u64),
        tokio::task::JoinError,
    >,
                       report: &mut ConnectReport,
                       conns: &mut Vec<(u64, Conn)>| {
        report.attempted += 1;
        match res {
            Ok((id, Ok(conn), took, done)) => {
                report.established += 1;
                live.connected.fetch_add(1, Ordering::Relaxed);
                times.saturating_record((took / 1000).max(1));
                let idx = (done / interval) as usize;
                if report.series.len() <= idx {
                    report.series.resize(idx + 1, 0);
                }
                report.series[idx] += 1;
                report.end_ns = report.end_ns.max(done);
                conns.push((id, conn));
            }
            Ok((_, Err(e), _, done)) => {
                *report.failures.entry(e.reason()).or_default() += 1;
                report.end_ns = report.end_ns.max(done);
            }
            Err(_) => {
                *report.failures.entry("task-panicked".into()).or_default() += 1;
            }
        }
    };
    for k in 0..spec.count {
        if let Some(s) = schedule {
            clock.sleep_until(s.intended(k)).await;
        }
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        let cfg = cfg.clone();
        let id = spec.first_id + k;
        let role = spec.role;
        set.spawn(async move {
            let _permit = permit;
            let t0 = clock.now_ns();
            let r = connect(&cfg, role, id).await;
            let done = clock.now_ns();
            (id, r, done - t0, done)
        });
        while let Some(res) = set.try_join_next() {
            collect(res, &mut report, &mut conns);
        }
    }
    while let Some(res) = set.join_next().await {
        collect(res, &mut report, &mut conns);
    }
    report.end_ns = report.end_ns.max(start);
    report.connect_time_us = hist_to_base64(&times);
    conns.sort_by_key(|(id, _)| *id);
    (conns, report)
}

/// A publisher whose QoS 1/2 acknowledgements stop coming for this long is given up.
const ACK_TIMEOUT_NS: u64 = 10_000_000_000;

/// A publisher connection and its MQTT state.
struct PubConn {
    conn: Conn,
    id: u64,
    topic: Vec<u8>,
    seq: u64,
    inflight: u64,
    next_pid: u16,
    dead: bool,
}

struct WorkerOut {
    sent: u64,
    counted: u64,
    acked: u64,
    errors: BTreeMap<String, u64>,
    drops: BTreeMap<String, u64>,
    series: Vec<u64>,
    first_ns: Option<u64>,
    last_ns: Option<u64>,
    stalls: u64,
    phases: Vec<PhaseSend>,
    conns: Vec<PubConn>,
}

struct WorkerCtx {
    worker: u64,
    qos: QoS,
    payload: usize,
    plan: TopicPlan,
    template: Option<TopicTemplate>,
    cycle_topics: Vec<u64>,
    max_inflight: u64,
    batch: u64,
    /// Open loop: the pacing phases (one for `--rate`, one per phase of a rate schedule);
    /// empty: closed loop.
    pacing: Vec<PacePhase>,
    /// Rate schedule: the phases' windows (`[start0, start1, ..., end]`), for the achieved
    /// send rate by actual send time; empty otherwise.
    phase_bounds: Vec<u64>,
    quota: u64,
    deadline: u64,
    warmup_end: u64,
    clock: Clock,
    credit: Arc<Credit>,
    live: Arc<PartLive>,
    interval_ns: u64,
    timer: Option<Arc<PrecisionTimer>>,
    wake: Arc<tokio::sync::Notify>,
}

impl WorkerCtx {
    /// Sleeps until `ns`: precisely (timer thread) on a fixed-rate schedule, else on tokio's
    /// millisecond timer.
    async fn sleep_until(&self, ns: u64) {
        match &self.timer {
            Some(timer) => timer.sleep_until(ns, &self.wake).await,
            None => self.clock.sleep_until(ns).await,
        }
    }
}

async fn run_publishers(
    spec: &PartSpec,
    p: &PublishSpec,
    conns: Vec<(u64, Conn)>,
    clock: Clock,
    ctrl: &mut PartControl,
    report: &mut PartReport,
) {
    let mut conns = conns;
    // Keep the connections alive while the rest of the run connects (that can take longer than
    // the keep alive with many connections at a low connect rate).
    let ping_every = Duration::from_millis(u64::from(spec.client.keep_alive) * 500);
    let go = loop {
        if spec.client.keep_alive == 0 {
            break wait_go(ctrl).await;
        }
        tokio::select! {
            go = wait_go(ctrl) => break go,
            _ = tokio::time::sleep(ping_every) => {
                for (_, c) in conns.iter_mut() {
                    let _ = c.try_fill();
                    while let Ok(Some(_)) = c.next_packet() {}
                    c.push(&Packet::PingReq);
                    let _ = c.flush().await;
                }
            }
        }
    };
    let Some(go) = go else {
        disconnect_all(conns.into_iter().map(|(_, c)| c).collect(), clock, report).await;
        return;
    };
    clock.sleep_until(go).await;
    let workers = p.workers.clamp(1, conns.len().max(1) as u64);
    let mut groups: Vec<Vec<PubConn>> = (0..workers).map(|_| Vec::new()).collect();
    let template = TopicTemplate::new(match &p.topics {
        TopicPlan::PerConnection { template } | TopicPlan::Cycle { template, .. } => template,
        TopicPlan::Fixed { topic } => topic,
    });
    for (i, (id, conn)) in conns.into_iter().enumerate() {
        let mut topic = Vec::new();
        match &p.topics {
            TopicPlan::PerConnection { .. } => template.write(id, &mut topic),
            TopicPlan::Fixed { topic: t } => topic.extend_from_slice(t.as_bytes()),
            TopicPlan::Cycle { .. } => {}
        }
        groups[i % workers as usize].push(PubConn {
            conn,
            id,
            topic,
            seq: 0,
            inflight: 0,
            next_pid: 0,
            dead: false,
        });
    }
    let total = p.messages.unwrap_or(u64::MAX);
    let phase_bounds: Vec<u64> = if p.phases.is_empty() {
        Vec::new()
    } else {
        rate_schedule::offsets_ns(&p.phases)
            .iter()
            .map(|o| go + o)
            .collect()
    };
    let deadline = match phase_bounds.last() {
        Some(&end) => end,
        None => p.duration_ns.map_or(u64::MAX, |d| go + d),
    };
    // Fixed-rate senders wake on a precise timer thread (see `PrecisionTimer`).
    let timer = if p.rate.is_some() || !p.phases.is_empty() {
        PrecisionTimer::start(clock).ok().map(Arc::new)
    } else {
        None
    };
    let mut set = JoinSet::new();
    for (w, group) in groups.into_iter().enumerate() {
        let w = w as u64;
        // Split the count and the rate evenly over the workers.
        let quota = if total == u64::MAX {
            u64::MAX
        } else {
            total / workers + u64::from(w < total % workers)
        };
        // Worker w's messages are staggered by w periods of the part's total rate.
        let worker_schedule = |start: u64, r: f64| {
            let mut s = Schedule::new(start, r / workers as f64);
            s.start = start + (w as f64 * 1e9 / r) as u64;
            s
        };
        let pacing: Vec<PacePhase> = if p.phases.is_empty() {
            p.rate
                .map(|r| PacePhase::new(worker_schedule(go, r), u64::MAX))
                .into_iter()
                .collect()
        } else {
            p.phases
                .iter()
                .enumerate()
                .map(|(i, ph)| {
                    PacePhase::new(
                        worker_schedule(phase_bounds[i], ph.rate_per_s),
                        phase_bounds[i + 1],
                    )
                })
                .collect()
        };
        let receive_max = group
            .iter()
            .map(|c| u64::from(c.conn.receive_maximum))
            .min()
            .unwrap_or(u64::MAX);
        let cycle_topics = match &p.topics {
            TopicPlan::Cycle {
                topics, publishers, ..
            } => {
                // Publisher index = the first connection's index within the part's publishers.
                let publisher =
                    group.first().map_or(0, |c| c.id - spec.first_id) % publishers.max(&1);
                (publisher..*topics)
                    .step_by((*publishers).max(1) as usize)
                    .collect()
            }
            _ => Vec::new(),
        };
        let ctx = WorkerCtx {
            worker: w,
            qos: QoS::from_u8(p.qos).unwrap_or(QoS::AtMostOnce),
            payload: p.payload.max(payload::HEADER_LEN),
            plan: p.topics.clone(),
            template: Some(template.clone()),
            cycle_topics,
            max_inflight: p.inflight.max(1).min(receive_max),
            batch: p.batch.max(1),
            pacing,
            phase_bounds: phase_bounds.clone(),
            quota,
            deadline,
            warmup_end: go + p.warmup_ns,
            clock,
            credit: ctrl.credit.clone(),
            live: ctrl.live.clone(),
            interval_ns: spec.interval_ns.max(1),
            timer: timer.clone(),
            wake: Arc::new(tokio::sync::Notify::new()),
        };
        set.spawn(publish_worker(ctx, group));
    }
    let mut all_conns = Vec::new();
    while let Some(res) = set.join_next().await {
        let Ok(out) = res else { continue };
        report.sent += out.sent;
        report.counted += out.counted;
        report.acked += out.acked;
        report.window_stalls += out.stalls;
        if report.phases.len() < out.phases.len() {
            report.phases.resize(out.phases.len(), PhaseSend::default());
        }
        for (total, one) in report.phases.iter_mut().zip(&out.phases) {
            total.add(one);
        }
        for (k, v) in out.errors {
            *report.publish_errors.entry(k).or_default() += v;
        }
        for (k, v) in out.drops {
            *report.drops.entry(k).or_default() += v;
        }
        if report.series_sent.len() < out.series.len() {
            report.series_sent.resize(out.series.len(), 0);
        }
        for (i, v) in out.series.iter().enumerate() {
            report.series_sent[i] += v;
        }
        report.first_send_ns = min_opt(report.first_send_ns, out.first_ns);
        report.last_send_ns = report.last_send_ns.max(out.last_ns);
        all_conns.extend(out.conns.into_iter().filter(|c| !c.dead).map(|c| c.conn));
    }
    let _ = ctrl.events.send(PartEvent::SendDone);
    wait_stop(&mut ctrl.stop).await;
    disconnect_all(all_conns, clock, report).await;
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn disconnect_all(conns: Vec<Conn>, clock: Clock, report: &mut PartReport) {
    report.disconnect_start_ns = clock.now_ns();
    let n = conns.len() as u64;
    let mut set = JoinSet::new();
    // A few tasks, each closing its share, so thousands of closes overlap.
    let tasks = 16.min(conns.len().max(1));
    let mut shares: Vec<Vec<Conn>> = (0..tasks).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        shares[i % tasks].push(c);
    }
    for share in shares {
        set.spawn(async move {
            for mut c in share {
                c.disconnect().await;
            }
        });
    }
    while set.join_next().await.is_some() {}
    report.disconnected += n;
    report.disconnect_end_ns = clock.now_ns();
}

impl PubConn {
    /// Handles every complete packet in the read buffer. Returns false when the connection
    /// is unusable.
    fn handle_input(&mut self, out: &mut WorkerOut) -> bool {
        loop {
            match self.conn.next_packet() {
                Ok(Some(packet)) => match packet {
                    Packet::PubAck(ack) => {
                        self.inflight = self.inflight.saturating_sub(1);
                        if ack.reason_code.is_error() {
                            *out.errors
                                .entry(format!("puback-0x{:02X}", ack.reason_code.0))
                                .or_default() += 1;
                        } else {
                            out.acked += 1;
                        }
                    }
                    Packet::PubRec(rec) => {
                        if rec.reason_code.is_error() {
                            self.inflight = self.inflight.saturating_sub(1);
                            *out.errors
                                .entry(format!("pubrec-0x{:02X}", rec.reason_code.0))
                                .or_default() += 1;
                        } else {
                            self.conn.push(&Packet::PubRel(PubResp::new(rec.packet_id)));
                        }
                    }
                    Packet::PubComp(_) => {
                        self.inflight = self.inflight.saturating_sub(1);
                        out.acked += 1;
                    }
                    Packet::Disconnect(d) => {
                        *out.drops
                            .entry(format!("disconnect-0x{:02X}", d.reason_code.0))
                            .or_default() += 1;
                        return false;
                    }
                    Packet::Publish(p) => {
                        // Not subscribed; acknowledge anything a broker sends anyway.
                        if let Some(id) = p.packet_id {
                            match p.qos {
                                QoS::AtLeastOnce => {
                                    self.conn.push(&Packet::PubAck(PubResp::new(id)))
                                }
                                QoS::ExactlyOnce => {
                                    self.conn.push(&Packet::PubRec(PubResp::new(id)))
                                }
                                QoS::AtMostOnce => {}
                            }
                        }
                    }
                    Packet::PubRel(r) => {
                        self.conn.push(&Packet::PubComp(PubResp::new(r.packet_id)))
                    }
                    _ => {}
                },
                Ok(None) => return true,
                Err(_) => {
                    *out.drops.entry("protocol".into()).or_default() += 1;
                    return false;
                }
            }
        }
    }

    /// Reads whatever is available and handles it, without waiting.
    fn poll_input(&mut self, out: &mut WorkerOut) -> bool {
        match self.conn.try_fill() {
            Ok(true) => self.handle_input(out),
            Ok(false) => {
                *out.drops.entry("closed".into()).or_default() += 1;
                false
            }
            Err(e) => {
                *out.drops
                    .entry(crate::client::classify_io(&e).reason())
                    .or_default() += 1;
                false
            }
        }
    }

    /// Sends what is pending (PUBRELs), then waits (up to `timeout`) for input and handles it.
    /// Returns false when the connection is unusable; a timeout is not an error.
    async fn wait_input(&mut self, out: &mut WorkerOut, timeout: Duration) -> bool {
        if let Err(e) = self.conn.flush().await {
            *out.drops
                .entry(crate::client::classify_io(&e).reason())
                .or_default() += 1;
            return false;
        }
        match tokio::time::timeout(timeout, self.conn.fill(1024)).await {
            Err(_) => true,
            Ok(Ok(true)) => self.handle_input(out),
            Ok(Ok(false)) => {
                *out.drops.entry("closed".into()).or_default() += 1;
                false
            }
            Ok(Err(e)) => {
                *out.drops
                    .entry(crate::client::classify_io(&e).reason())
                    .or_default() += 1;
                false
            }
        }
    }

    /// Waits until the in-flight count drops below `max` (or the connection fails, or no
    /// acknowledgement came for `ACK_TIMEOUT`, which also counts as a failure).
    async fn wait_window(
        &mut self,
        out: &mut WorkerOut,
        max: u64,
        deadline: u64,
        clock: Clock,
    ) -> bool {
        let mut last_progress = clock.now_ns();
        while self.inflight >= max {
            let before = self.inflight;
            if !self.wait_input(out, Duration::from_millis(500)).await {
                return false;
            }
            let now = clock.now_ns();
            if self.inflight < before {
                last_progress = now;
            } else if now - last_progress > ACK_TIMEOUT_NS {
                *out.drops.entry("ack-timeout".into()).or_default() += 1;
                return false;
            }
            if now >= deadline {
                break;
            }
        }
        true
    }

    fn next_packet_id(&mut self) -> PacketId {
        self.next_pid = self.next_pid.wrapping_add(1);
        if self.next_pid == 0 {
            self.next_pid = 1;
        }
        PacketId::new(self.next_pid).unwrap_or(PacketId::MIN)
    }
}

/// A closed-loop sender group blocked this long on an unchanged credit goes on anyway.
const STALL_NS: u64 = 1_000_000_000;

/// Updates the live drop counter for connections that died; returns the new alive count.
fn count_alive(conns: &[PubConn], ctx: &WorkerCtx, before: usize) -> usize {
    let now = conns.iter().filter(|c| !c.dead).count();
    if now < before {
        ctx.live
            .dropped
            .fetch_add((before - now) as u64, Ordering::Relaxed);
    }
    now
}

/// Waits until `until_ns` (or, with `credit_above = Some(sent)`, until the credit exceeds
/// `sent`). QoS 2 publishers meanwhile keep completing handshakes: a PUBREC read now gets its
/// PUBREL now (a broker that delivers on PUBREL would otherwise wait for our next publish).
async fn idle(
    conns: &mut [PubConn],
    out: &mut WorkerOut,
    ctx: &WorkerCtx,
    until_ns: u64,
    credit_above: Option<u64>,
) {
    let clock = ctx.clock;
    let credit_ok = |ctx: &WorkerCtx| {
        credit_above.is_some_and(|sent| ctx.credit.value.load(Ordering::Acquire) > sent)
    };
    loop {
        let mut pending = false;
        if ctx.qos == QoS::ExactlyOnce {
            for c in conns.iter_mut().filter(|c| !c.dead && c.inflight > 0) {
                if !c.poll_input(out) {
                    c.dead = true;
                    continue;
                }
                if !c.conn.wbuf.is_empty() && c.conn.flush().await.is_err() {
                    *out.drops.entry("closed".into()).or_default() += 1;
                    c.dead = true;
                    continue;
                }
                pending |= c.inflight > 0;
            }
        }
        let now = clock.now_ns();
        if now >= until_ns || credit_ok(ctx) {
            return;
        }
        let notified = ctx.credit.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if credit_ok(ctx) {
            return;
        }
        let wake = if pending {
            until_ns.min(now + 1_000_000)
        } else {
            until_ns
        };
        let single = conns.len() == 1 && pending;
        tokio::select! {
            _ = ctx.sleep_until(wake) => {}
            _ = &mut notified, if credit_above.is_some() => return,
            _ = conns[0].conn.stream.readable(), if single => {}
        }
    }
}

async fn publish_worker(ctx: WorkerCtx, mut conns: Vec<PubConn>) -> WorkerOut {
    let mut out = WorkerOut {
        sent: 0,
        counted: 0,
        acked: 0,
        errors: BTreeMap::new(),
        drops: BTreeMap::new(),
        series: Vec::new(),
        first_ns: None,
        last_ns: None,
        stalls: 0,
        phases: if ctx.phase_bounds.is_empty() {
            Vec::new()
        } else {
            ctx.pacing
                .iter()
                .map(|p| PhaseSend {
                    offered: p.count,
                    ..PhaseSend::default()
                })
                .collect()
        },
        conns: Vec::new(),
    };
    let props = Properties::default();
    let mut topic_buf: Vec<u8> = Vec::with_capacity(64);
    let mut alive = conns.iter().filter(|c| !c.dead).count();
    let mut cursor = 0usize;
    let mut k = 0u64;
    let clock = ctx.clock;
    let _ = ctx.worker;
    let mut blocked: Option<(u64, u64)> = None;
    // Open loop: the current pacing phase and the value of `k` when it began (messages of a
    // phase are numbered from 0 within it).
    let mut phase = 0usize;
    let mut phase_k0 = 0u64;
    while k < ctx.quota && alive > 0 {
        let now = clock.now_ns();
        if now >= ctx.deadline {
            break;
        }
        // A phase that ended is over: what of it was not sent yet is abandoned (it stays in
        // `offered - sent` of that phase) and the next phase starts on its own schedule, so a
        // sender that fell behind does not carry the backlog into it.
        while phase + 1 < ctx.pacing.len() && now >= ctx.pacing[phase].end {
            phase += 1;
            phase_k0 = k;
        }
        // How many messages may go now. A sender behind its schedule catches up at most
        // `--batch` messages per write, within the in-flight bound, as fast as the socket
        // takes them (the broker's back-pressure slows it; latency from the intended send
        // time shows the lag).
        let mut allowance = match ctx.pacing.get(phase) {
            Some(ph) => {
                let due = (phase_k0 + ph.due(now)).min(ctx.quota);
                if due <= k {
                    let local = k - phase_k0;
                    let next = if local < ph.count {
                        ph.schedule.intended(local)
                    } else {
                        ph.end
                    };
                    idle(&mut conns, &mut out, &ctx, next.min(ctx.deadline), None).await;
                    alive = count_alive(&conns, &ctx, alive);
                    continue;
                }
                due - k
            }
            None => {
                let credit = ctx.credit.value.load(Ordering::Acquire);
                let sent = ctx.live.sent.load(Ordering::Relaxed);
                if sent >= credit {
                    let (since, at) = *blocked.get_or_insert((now, credit));
                    if at != credit {
                        blocked = Some((now, credit));
                    } else if now - since > STALL_NS {
                        // The receiver made no progress for a second (messages dropped by the
                        // broker never reopen the window): let this worker go on.
                        out.stalls += 1;
                        ctx.credit.raise(sent + ctx.batch);
                        blocked = None;
                        continue;
                    }
                    let until = (now + STALL_NS).min(ctx.deadline);
                    idle(&mut conns, &mut out, &ctx, until, Some(sent)).await;
                    alive = count_alive(&conns, &ctx, alive);
                    continue;
                }
                blocked = None;
                // Claimed atomically below, once the connection is chosen.
                credit - sent
            }
        };
        allowance = allowance.min(ctx.batch).min(ctx.quota - k);
        // Next live connection.
        while conns[cursor].dead {
            cursor = (cursor + 1) % conns.len();
        }
        let n_conns = conns.len();
        let c = &mut conns[cursor];
        cursor = (cursor + 1) % n_conns;
        if !c.poll_input(&mut out) {
            c.dead = true;
            alive -= 1;
            ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if ctx.qos != QoS::AtMostOnce {
            if !c
                .wait_window(&mut out, ctx.max_inflight, ctx.deadline, clock)
                .await
            {
                c.dead = true;
            }
            if c.dead {
                alive -= 1;
                ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if c.inflight >= ctx.max_inflight {
                continue;
            }
            allowance = allowance.min(ctx.max_inflight - c.inflight);
        }
        if ctx.pacing.is_empty() {
            // Claim the credit atomically: concurrent workers must not overrun the window.
            let mut claim = 0;
            let claimed = ctx
                .live
                .sent
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |sent| {
                    let credit = ctx.credit.value.load(Ordering::Acquire);
                    if credit > sent {
                        claim = allowance.min(credit - sent);
                        Some(sent + claim)
                    } else {
                        None
                    }
                });
            if claimed.is_err() || claim == 0 {
                continue;
            }
            allowance = claim;
        }
        let sent_ns = clock.now_ns();
        let mut counted = 0;
        for _ in 0..allowance {
            let intended = match ctx.pacing.get(phase) {
                Some(ph) => ph.schedule.intended(k - phase_k0),
                None => sent_ns,
            };
            let (stream, seq) = match &ctx.plan {
                TopicPlan::Cycle { .. } if !ctx.cycle_topics.is_empty() => {
                    let n = ctx.cycle_topics.len() as u64;
                    let t = ctx.cycle_topics[(k % n) as usize];
                    if let Some(tpl) = &ctx.template {
                        tpl.write(t, &mut topic_buf);
                    }
                    (t, k / n)
                }
                _ => {
                    topic_buf.clear();
                    topic_buf.extend_from_slice(&c.topic);
                    let s = c.seq;
                    c.seq += 1;
                    (c.id, s)
                }
            };
            let packet_id = if ctx.qos == QoS::AtMostOnce {
                None
            } else {
                c.inflight += 1;
                Some(c.next_packet_id())
            };
            if encode_publish_header(
                c.conn.version,
                false,
                ctx.qos,
                false,
                &topic_buf,
                packet_id,
                &props,
                ctx.payload,
                &mut c.conn.wbuf,
            )
            .is_err()
            {
                break;
            }
            payload::write(
                &mut c.conn.wbuf,
                &payload::Header {
                    stream: stream as u32,
                    seq: seq as u32,
                    intended_ns: intended,
                    sent_ns,
                },
                ctx.payload,
            );
            if intended >= ctx.warmup_end {
                counted += 1;
            }
            k += 1;
        }
        if let Err(e) = c.conn.flush().await {
            *out.drops
                .entry(crate::client::classify_io(&e).reason())
                .or_default() += 1;
            c.dead = true;
            alive -= 1;
            ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        out.sent += allowance;
        out.counted += counted;
        if let Some(ps) = out.phases.get_mut(phase) {
            ps.sent += allowance;
        }
        if let Some(w) = rate_schedule::phase_of(&ctx.phase_bounds, sent_ns) {
            out.phases[w].sent_in_window += allowance;
        }
        if !ctx.pacing.is_empty() {
            ctx.live.sent.fetch_add(allowance, Ordering::Relaxed);
        }
        ctx.live.counted.fetch_add(counted, Ordering::Relaxed);
        let idx = (sent_ns / ctx.interval_ns) as usize;
        if out.series.len() <= idx {
            out.series.resize(idx + 1, 0);
        }
        out.series[idx] += allowance;
        out.first_ns.get_or_insert(sent_ns);
        out.last_ns = Some(sent_ns);
    }
    // Complete outstanding QoS 1/2 handshakes (bounded).
    if ctx.qos != QoS::AtMostOnce {
        for c in conns.iter_mut().filter(|c| !c.dead) {
            if !c.wait_window(&mut out, 1, u64::MAX, clock).await {
                c.dead = true;
                ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    out.conns = conns;
    out
}

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
async fn run_subscribers(
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
async fn run_receivers(
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
    let mut batch: Vec<(u64, u64, u64, u64)> = Vec::new();
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
                    break crate::client::classify_io(&e).reason();
                }
                next_ping = tokio::time::Instant::now() + ping_every;
                continue;
            }
            r = tokio::io::AsyncReadExt::read_buf(&mut conn.stream, &mut conn.rbuf) => r,
        };
        match read {
            Ok(0) => break "closed".to_string(),
            Err(e) => break crate::client::classify_io(&e).reason(),
            Ok(_) => {}
        }
        let now = ctx.clock.now_ns();
        let mut closed = None;
        loop {
            match conn.next_packet() {
                Ok(Some(Packet::Publish(p))) => {
                    if let Some(h) = payload::read(&p.payload) {
                        let key = match ctx.keys {
                            KeyMode::Stream => u64::from(h.stream),
                            KeyMode::PerSubscriber { publishers } => {
                                sub_index * publishers + u64::from(h.stream)
                            }
                        };
                        batch.push((key, u64::from(h.seq), h.intended_ns, h.sent_ns));
                    } else if let Some(rec) = &ctx.recorder {
                        rec.lock().foreign += 1;
                    }
                    if let Some(id) = p.packet_id {
                        match p.qos {
                            QoS::AtLeastOnce => conn.push(&Packet::PubAck(PubResp::new(id))),
                            QoS::ExactlyOnce => conn.push(&Packet::PubRec(PubResp::new(id))),
                            QoS::AtMostOnce => {}
                        }
                    }
                }
                Ok(Some(Packet::PubRel(r))) => {
                    conn.push(&Packet::PubComp(PubResp::new(r.packet_id)))
                }
                Ok(Some(Packet::Disconnect(d))) => {
                    closed = Some(format!("disconnect-0x{:02X}", d.reason_code.0));
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    closed = Some("protocol".into());
                    break;
                }
            }
        }
        if !batch.is_empty() {
            if let Some(rec) = &ctx.recorder {
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
                for &(key, seq, intended, sent) in &batch {
                    if rec.record(key, seq, intended, sent, now) {
                        counted += 1;
                    }
                }
                rec.flush_credit();
                drop(rec);
                ctx.live.received.fetch_add(counted, Ordering::Relaxed);
            }
            batch.clear();
        }
        if !conn.wbuf.is_empty() {
            if let Err(e) = conn.flush().await {
                break crate::client::classify_io(&e).reason();
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
