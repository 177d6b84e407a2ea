//! The load engine: a *part* is a slice of a scenario's connections (publishers, subscribers
//! or idle clients) that runs the same way in this process or in a worker process. The
//! coordinator drives each part through connect → go → (send done) → stop, and receives a
//! [`PartReport`] at the end.
//!
//! - this module: the part protocol (specs, events, reports), connecting a part;
//! - `publish`: a publisher part (its workers, from go to disconnect); `worker`: one sender
//!   task, one function per step of its loop; `pubconn`: a publisher connection's MQTT state;
//! - `receive`: subscriber and idle parts.

mod pubconn;
mod publish;
mod receive;
mod worker;

use crate::args::Shape;
use crate::client::{connect, ClientConfig, Conn};
use crate::clock::{Clock, Schedule};
use crate::live::{LiveMetrics, MetricsSnapshot};
use crate::rate_schedule::RatePhase;
use crate::stats::{coarse_histogram, hist_to_base64, Credit, CreditHook, RecorderWire};
use publish::run_publishers;
use receive::{run_receivers, run_subscribers};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// How the senders write and wait: `Batch` as above; `Open` and `Paho` write every
    /// PUBLISH on its own and give each worker a share of the rate and of the count in
    /// proportion to its connections (the same rate on every connection); `Paho` also waits
    /// after each PUBLISH for its write, PUBACK or PUBCOMP.
    #[serde(default)]
    pub shape: Shape,
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
    /// The figures served by `--metrics-listen`.
    pub metrics: LiveMetrics,
}

/// Snapshot of [`PartLive`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
    /// See [`PartLive::metrics`].
    #[serde(default)]
    pub metrics: MetricsSnapshot,
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
            metrics: self.metrics.snapshot(),
        }
    }

    /// Overwrites with a snapshot.
    pub fn store(&self, s: &LiveSnapshot) {
        self.sent.store(s.sent, Ordering::Relaxed);
        self.counted.store(s.counted, Ordering::Relaxed);
        self.received.store(s.received, Ordering::Relaxed);
        self.connected.store(s.connected, Ordering::Relaxed);
        self.dropped.store(s.dropped, Ordering::Relaxed);
        self.metrics.store(&s.metrics);
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
    /// Writes (flushes of a connection's buffer) that carried PUBLISH packets.
    #[serde(default)]
    pub publish_writes: u64,
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

pub(crate) async fn wait_go(ctrl: &mut PartControl) -> Option<u64> {
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

pub(crate) async fn wait_stop(stop: &mut watch::Receiver<bool>) {
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
                live.metrics.connect_failed();
                *report.failures.entry(e.reason()).or_default() += 1;
                report.end_ns = report.end_ns.max(done);
            }
            Err(_) => {
                live.metrics.connect_failed();
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
