//! A publisher part: keeps its connections alive until go, shares them between its sender
//! tasks (`worker`), merges what the workers did into the part's report, and disconnects.

use super::pubconn::PubConn;
use super::worker::{publish_worker, WorkerCtx, WorkerOut};
use super::{wait_go, wait_stop, PartControl, PartEvent, PartReport, PartSpec, PhaseSend};
use super::{PublishSpec, TopicPlan};
use crate::args::Shape;
use crate::client::{Conn, TopicTemplate};
use crate::clock::{Clock, PacePhase, PrecisionTimer, Schedule};
use crate::payload;
use crate::rate_schedule;
use hayate_codec::{Packet, QoS};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Runs a publisher part from connected to disconnected.
pub(super) async fn run_publishers(
    spec: &PartSpec,
    p: &PublishSpec,
    mut conns: Vec<(u64, Conn)>,
    clock: Clock,
    ctrl: &mut PartControl,
    report: &mut PartReport,
) {
    let Some(go) = wait_go_pinging(spec, &mut conns, ctrl).await else {
        disconnect_all(conns.into_iter().map(|(_, c)| c).collect(), clock, report).await;
        return;
    };
    clock.sleep_until(go).await;
    let workers = p.workers.clamp(1, conns.len().max(1) as u64);
    let template = TopicTemplate::new(match &p.topics {
        TopicPlan::PerConnection { template } | TopicPlan::Cycle { template, .. } => template,
        TopicPlan::Fixed { topic } => topic,
    });
    let groups = share_out(p, &template, conns, workers);
    let run = PartRun::new(p, go, clock, &groups);
    let mut set = JoinSet::new();
    for (w, group) in groups.into_iter().enumerate() {
        let ctx = run.worker_ctx(spec, p, ctrl, &template, (w as u64, workers), &group);
        set.spawn(publish_worker(ctx, group));
    }
    let mut all_conns = Vec::new();
    while let Some(res) = set.join_next().await {
        let Ok(out) = res else { continue };
        all_conns.extend(merge(report, out));
    }
    let _ = ctrl.events.send(PartEvent::SendDone);
    wait_stop(&mut ctrl.stop).await;
    disconnect_all(all_conns, clock, report).await;
}

/// Waits for go (`None`: stopped first), keeping the connections alive meanwhile: the rest of
/// the run may take longer than the keep alive to connect (many connections at a low connect
/// rate).
async fn wait_go_pinging(
    spec: &PartSpec,
    conns: &mut [(u64, Conn)],
    ctrl: &mut PartControl,
) -> Option<u64> {
    let ping_every = Duration::from_millis(u64::from(spec.client.keep_alive) * 500);
    loop {
        if spec.client.keep_alive == 0 {
            return wait_go(ctrl).await;
        }
        tokio::select! {
            go = wait_go(ctrl) => return go,
            _ = tokio::time::sleep(ping_every) => {
                for (_, c) in conns.iter_mut() {
                    let _ = c.try_fill();
                    while let Ok(Some(_)) = c.next_packet() {}
                    c.push(&Packet::PingReq);
                    let _ = c.flush().await;
                }
            }
        }
    }
}

/// Deals the connections out to the workers in turn (connection `i` to worker `i % workers`).
fn share_out(
    p: &PublishSpec,
    template: &TopicTemplate,
    conns: Vec<(u64, Conn)>,
    workers: u64,
) -> Vec<Vec<PubConn>> {
    let mut groups: Vec<Vec<PubConn>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, (id, conn)) in conns.into_iter().enumerate() {
        let mut topic = Vec::new();
        match &p.topics {
            TopicPlan::PerConnection { .. } => template.write(id, &mut topic),
            TopicPlan::Fixed { topic: t } => topic.extend_from_slice(t.as_bytes()),
            TopicPlan::Cycle { .. } => {}
        }
        groups[i % workers as usize].push(PubConn::new(conn, id, topic));
    }
    groups
}

/// The part's timing, shared by its workers.
struct PartRun {
    go: u64,
    clock: Clock,
    /// Messages of the part (`u64::MAX`: unbounded).
    total: u64,
    /// Rate schedule: the phases' windows (`[start0, start1, ..., end]`); empty otherwise.
    phase_bounds: Vec<u64>,
    deadline: u64,
    timer: Option<Arc<PrecisionTimer>>,
    /// One PUBLISH per write (`--shape open|paho`): each worker's connections, its weight in
    /// the split of the rate and of the count (so that every connection gets the same rate);
    /// empty: the workers share evenly.
    weights: Vec<u64>,
}

impl PartRun {
    fn new(p: &PublishSpec, go: u64, clock: Clock, groups: &[Vec<PubConn>]) -> PartRun {
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
        PartRun {
            go,
            clock,
            total: p.messages.unwrap_or(u64::MAX),
            phase_bounds,
            deadline,
            timer,
            weights: if p.shape.one_per_write() {
                groups.iter().map(|g| g.len() as u64).collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Worker `w`'s weight and the sum of the weights (`None`: even split).
    fn weight(&self, w: u64) -> Option<(u64, u64)> {
        let sum: u64 = self.weights.iter().sum();
        let own = *self.weights.get(w as usize)?;
        (sum > 0).then_some((own, sum))
    }

    /// Worker `w` of `workers`: its share of the count (split evenly over the workers, or
    /// exactly by weight).
    fn quota(&self, (w, workers): (u64, u64)) -> u64 {
        if self.total == u64::MAX {
            return u64::MAX;
        }
        match self.weight(w) {
            Some((_, sum)) => {
                let before: u64 = self.weights[..w as usize].iter().sum();
                let upto = before + self.weights[w as usize];
                let at = |n: u64| (u128::from(self.total) * u128::from(n) / u128::from(sum)) as u64;
                at(upto) - at(before)
            }
            None => self.total / workers + u64::from(w < self.total % workers),
        }
    }

    /// Worker `w` of `workers`: its pacing phases, each its share of the rate (even, or by
    /// weight); its messages are staggered by `w` periods of the part's total rate. Empty:
    /// closed loop.
    fn pacing(&self, p: &PublishSpec, (w, workers): (u64, u64)) -> Vec<PacePhase> {
        let weight = self.weight(w);
        let worker_schedule = |start: u64, r: f64| {
            let rate = match weight {
                Some((own, sum)) => r * own as f64 / sum as f64,
                None => r / workers as f64,
            };
            let mut s = Schedule::new(start, rate);
            s.start = start + (w as f64 * 1e9 / r) as u64;
            s
        };
        if p.phases.is_empty() {
            return p
                .rate
                .map(|r| PacePhase::new(worker_schedule(self.go, r), u64::MAX))
                .into_iter()
                .collect();
        }
        p.phases
            .iter()
            .enumerate()
            .map(|(i, ph)| {
                PacePhase::new(
                    worker_schedule(self.phase_bounds[i], ph.rate_per_s),
                    self.phase_bounds[i + 1],
                )
            })
            .collect()
    }

    /// The settings of worker `w` of `workers`, which sends on `group`.
    fn worker_ctx(
        &self,
        spec: &PartSpec,
        p: &PublishSpec,
        ctrl: &PartControl,
        template: &TopicTemplate,
        worker: (u64, u64),
        group: &[PubConn],
    ) -> WorkerCtx {
        let receive_max = group
            .iter()
            .map(|c| u64::from(c.conn.receive_maximum))
            .min()
            .unwrap_or(u64::MAX);
        WorkerCtx {
            qos: QoS::from_u8(p.qos).unwrap_or(QoS::AtMostOnce),
            payload: p.payload.max(payload::HEADER_LEN),
            plan: p.topics.clone(),
            template: Some(template.clone()),
            cycle_topics: cycle_topics(spec, p, group),
            max_inflight: p.inflight.max(1).min(receive_max),
            batch: if p.shape.one_per_write() {
                1
            } else {
                p.batch.max(1)
            },
            one_per_write: p.shape.one_per_write(),
            wait: p.shape == Shape::Paho,
            pacing: self.pacing(p, worker),
            phase_bounds: self.phase_bounds.clone(),
            quota: self.quota(worker),
            deadline: self.deadline,
            warmup_end: self.go + p.warmup_ns,
            clock: self.clock,
            credit: ctrl.credit.clone(),
            live: ctrl.live.clone(),
            interval_ns: spec.interval_ns.max(1),
            timer: self.timer.clone(),
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

/// `TopicPlan::Cycle`: the topics of the publisher that owns `group` (`p, p + publishers,
/// ...`); empty for the other plans.
fn cycle_topics(spec: &PartSpec, p: &PublishSpec, group: &[PubConn]) -> Vec<u64> {
    match &p.topics {
        TopicPlan::Cycle {
            topics, publishers, ..
        } => {
            // Publisher index = the first connection's index within the part's publishers.
            let publisher = group.first().map_or(0, |c| c.id - spec.first_id) % publishers.max(&1);
            (publisher..*topics)
                .step_by((*publishers).max(1) as usize)
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Adds a worker's figures to the part's report; returns its connections still usable.
fn merge(report: &mut PartReport, out: WorkerOut) -> Vec<Conn> {
    report.sent += out.sent;
    report.counted += out.counted;
    report.acked += out.acked;
    report.window_stalls += out.stalls;
    report.publish_writes += out.writes;
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
    out.conns
        .into_iter()
        .filter(|c| !c.dead)
        .map(|c| c.conn)
        .collect()
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
