//! One sender task of a publisher part: it owns a share of the part's connections and sends
//! on them in turn, paced by a schedule (open loop) or by the subscriber's window (closed
//! loop). [`publish_worker`] is its loop, one function per step: how many messages may go,
//! which connection, is it ready, claim the window, encode, write, count, and (`--shape
//! paho`) wait for the message to complete.

use super::pubconn::PubConn;
use super::{PartLive, PhaseSend, TopicPlan};
use crate::client::{classify_io, TopicTemplate};
use crate::clock::{Clock, PacePhase, PrecisionTimer};
use crate::payload;
use crate::rate_schedule;
use crate::stats::Credit;
use hayate_codec::{encode_publish_header, Properties, QoS};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a worker did; merged into the part's report.
pub(super) struct WorkerOut {
    pub(super) sent: u64,
    pub(super) counted: u64,
    pub(super) acked: u64,
    pub(super) errors: BTreeMap<String, u64>,
    /// Errors counted in `errors` and not yet in the live figures.
    errors_unreported: u64,
    pub(super) drops: BTreeMap<String, u64>,
    pub(super) series: Vec<u64>,
    pub(super) first_ns: Option<u64>,
    pub(super) last_ns: Option<u64>,
    pub(super) stalls: u64,
    /// Writes that carried PUBLISH packets.
    pub(super) writes: u64,
    pub(super) phases: Vec<PhaseSend>,
    pub(super) conns: Vec<PubConn>,
}

impl WorkerOut {
    fn new(ctx: &WorkerCtx) -> WorkerOut {
        WorkerOut {
            sent: 0,
            counted: 0,
            acked: 0,
            errors: BTreeMap::new(),
            errors_unreported: 0,
            drops: BTreeMap::new(),
            series: Vec::new(),
            first_ns: None,
            last_ns: None,
            stalls: 0,
            writes: 0,
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
        }
    }

    /// Counts a negative acknowledgement.
    pub(super) fn error(&mut self, what: String) {
        *self.errors.entry(what).or_default() += 1;
        self.errors_unreported += 1;
    }

    /// Adds the errors counted since the last call to the live figures.
    fn report_errors(&mut self, live: &PartLive) {
        live.metrics
            .publish_errors(std::mem::take(&mut self.errors_unreported));
    }

    /// Counts a connection lost for `reason`.
    pub(super) fn drop_reason(&mut self, reason: &str) {
        *self.drops.entry(reason.into()).or_default() += 1;
    }

    /// Counts a connection lost to an I/O error.
    pub(super) fn drop_io(&mut self, e: &std::io::Error) {
        *self.drops.entry(classify_io(e).reason()).or_default() += 1;
    }
}

/// A worker's settings.
pub(super) struct WorkerCtx {
    pub(super) qos: QoS,
    pub(super) payload: usize,
    pub(super) plan: TopicPlan,
    pub(super) template: Option<TopicTemplate>,
    pub(super) cycle_topics: Vec<u64>,
    pub(super) max_inflight: u64,
    /// Most messages per write (1 with `one_per_write`).
    pub(super) batch: u64,
    /// Every PUBLISH in a write of its own: acknowledgements pending in the write buffer go
    /// out first, on their own.
    pub(super) one_per_write: bool,
    /// After each PUBLISH, wait for it to complete (`--shape paho`): QoS 1 for the PUBACK,
    /// QoS 2 for the PUBCOMP (QoS 0: the write returning is the completion).
    pub(super) wait: bool,
    /// Open loop: the pacing phases (one for `--rate`, one per phase of a rate schedule);
    /// empty: closed loop.
    pub(super) pacing: Vec<PacePhase>,
    /// Rate schedule: the phases' windows (`[start0, start1, ..., end]`), for the achieved
    /// send rate by actual send time; empty otherwise.
    pub(super) phase_bounds: Vec<u64>,
    pub(super) quota: u64,
    pub(super) deadline: u64,
    pub(super) warmup_end: u64,
    pub(super) clock: Clock,
    pub(super) credit: Arc<Credit>,
    pub(super) live: Arc<PartLive>,
    pub(super) interval_ns: u64,
    pub(super) timer: Option<Arc<PrecisionTimer>>,
    pub(super) wake: Arc<tokio::sync::Notify>,
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
                    out.drop_reason("closed");
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

/// Where a worker is in its run.
struct State {
    /// Connections still usable.
    alive: usize,
    /// The next connection to try (round robin).
    cursor: usize,
    /// Messages sent so far (message `k` is the next).
    k: u64,
    /// Closed loop: since when, and at which credit, the window has been closed.
    blocked: Option<(u64, u64)>,
    /// Open loop: the current pacing phase and the value of `k` when it began (messages of a
    /// phase are numbered from 0 within it).
    phase: usize,
    phase_k0: u64,
}

impl State {
    /// A phase that ended is over: what of it was not sent yet is abandoned (it stays in
    /// `offered - sent` of that phase) and the next phase starts on its own schedule, so a
    /// sender that fell behind does not carry the backlog into it.
    fn advance_phase(&mut self, ctx: &WorkerCtx, now: u64) {
        while self.phase + 1 < ctx.pacing.len() && now >= ctx.pacing[self.phase].end {
            self.phase += 1;
            self.phase_k0 = self.k;
        }
    }

    /// The next live connection (round robin).
    fn next_live(&mut self, conns: &[PubConn]) -> usize {
        while conns[self.cursor].dead {
            self.cursor = (self.cursor + 1) % conns.len();
        }
        let i = self.cursor;
        self.cursor = (self.cursor + 1) % conns.len();
        i
    }

    /// Counts connection `c`, just found unusable, as lost.
    fn lose(&mut self, ctx: &WorkerCtx, c: &mut PubConn) {
        c.dead = true;
        self.alive -= 1;
        ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The reusable buffers of message encoding.
struct Encoder {
    props: Properties,
    topic: Vec<u8>,
}

impl Encoder {
    /// Writes the topic of message `k` on `c` into the topic buffer; returns the message's
    /// stream id and sequence number.
    fn topic(&mut self, ctx: &WorkerCtx, c: &mut PubConn, k: u64) -> (u64, u64) {
        match &ctx.plan {
            TopicPlan::Cycle { .. } if !ctx.cycle_topics.is_empty() => {
                let n = ctx.cycle_topics.len() as u64;
                let t = ctx.cycle_topics[(k % n) as usize];
                if let Some(tpl) = &ctx.template {
                    tpl.write(t, &mut self.topic);
                }
                (t, k / n)
            }
            _ => {
                self.topic.clear();
                self.topic.extend_from_slice(&c.topic);
                let s = c.seq;
                c.seq += 1;
                (c.id, s)
            }
        }
    }
}

/// The loop of one sender task over its connections.
pub(super) async fn publish_worker(ctx: WorkerCtx, mut conns: Vec<PubConn>) -> WorkerOut {
    let mut out = WorkerOut::new(&ctx);
    let mut st = State {
        alive: conns.iter().filter(|c| !c.dead).count(),
        cursor: 0,
        k: 0,
        blocked: None,
        phase: 0,
        phase_k0: 0,
    };
    let mut enc = Encoder {
        props: Properties::default(),
        topic: Vec::with_capacity(64),
    };
    while st.k < ctx.quota && st.alive > 0 {
        let now = ctx.clock.now_ns();
        if now >= ctx.deadline {
            break;
        }
        st.advance_phase(&ctx, now);
        let Some(allowance) = allowance(&ctx, &mut conns, &mut out, &mut st, now).await else {
            continue;
        };
        let allowance = allowance.min(ctx.batch).min(ctx.quota - st.k);
        let i = st.next_live(&conns);
        let c = &mut conns[i];
        let Some(allowance) = ready(&ctx, c, &mut out, allowance).await else {
            if c.dead {
                st.lose(&ctx, c);
            }
            continue;
        };
        let Some(allowance) = claim(&ctx, allowance) else {
            continue;
        };
        let (sent_ns, counted) = encode(&ctx, c, &mut enc, &mut st, allowance);
        if let Err(e) = c.conn.flush().await {
            out.drop_io(&e);
            st.lose(&ctx, c);
            continue;
        }
        account(&ctx, &mut out, st.phase, (allowance, counted), sent_ns);
        if ctx.wait && !complete(&ctx, c, &mut out).await {
            st.lose(&ctx, c);
        }
    }
    complete_handshakes(&ctx, &mut conns, &mut out).await;
    out.report_errors(&ctx.live);
    out.conns = conns;
    out
}

/// How many messages may go now; `None` after waiting (for the schedule or the window).
/// A sender behind its schedule catches up at most `--batch` messages per write (the caller
/// applies it), within the in-flight bound, as fast as the socket takes them (the broker's
/// back-pressure slows it; latency from the intended send time shows the lag).
async fn allowance(
    ctx: &WorkerCtx,
    conns: &mut [PubConn],
    out: &mut WorkerOut,
    st: &mut State,
    now: u64,
) -> Option<u64> {
    if let Some(ph) = ctx.pacing.get(st.phase) {
        let due = (st.phase_k0 + ph.due(now)).min(ctx.quota);
        if due > st.k {
            return Some(due - st.k);
        }
        let local = st.k - st.phase_k0;
        let next = if local < ph.count {
            ph.schedule.intended(local)
        } else {
            ph.end
        };
        idle(conns, out, ctx, next.min(ctx.deadline), None).await;
        st.alive = count_alive(conns, ctx, st.alive);
        return None;
    }
    let credit = ctx.credit.value.load(Ordering::Acquire);
    let sent = ctx.live.sent.load(Ordering::Relaxed);
    if sent < credit {
        st.blocked = None;
        // Claimed atomically (`claim`), once the connection is chosen.
        return Some(credit - sent);
    }
    let (since, at) = *st.blocked.get_or_insert((now, credit));
    if at != credit {
        st.blocked = Some((now, credit));
    } else if now - since > STALL_NS {
        // The receiver made no progress for a second (messages dropped by the broker never
        // reopen the window): let this worker go on.
        out.stalls += 1;
        ctx.credit.raise(sent + ctx.batch);
        st.blocked = None;
        return None;
    }
    let until = (now + STALL_NS).min(ctx.deadline);
    idle(conns, out, ctx, until, Some(sent)).await;
    st.alive = count_alive(conns, ctx, st.alive);
    None
}

/// Reads what `c` received and, at QoS 1/2, waits for room in its in-flight window. Returns
/// how many messages may go on it, or `None` (with `c.dead` set when it failed).
async fn ready(
    ctx: &WorkerCtx,
    c: &mut PubConn,
    out: &mut WorkerOut,
    allowance: u64,
) -> Option<u64> {
    if !c.poll_input(out) {
        c.dead = true;
        return None;
    }
    let allowance = if ctx.qos == QoS::AtMostOnce {
        allowance
    } else {
        if !c
            .wait_window(out, ctx.max_inflight, ctx.deadline, ctx.clock)
            .await
        {
            c.dead = true;
            return None;
        }
        if c.inflight >= ctx.max_inflight {
            return None;
        }
        allowance.min(ctx.max_inflight - c.inflight)
    };
    if ctx.one_per_write && !c.conn.wbuf.is_empty() {
        // Acknowledgements (PUBREL...) in a write of their own, not ahead of the PUBLISH.
        if let Err(e) = c.conn.flush().await {
            out.drop_io(&e);
            c.dead = true;
            return None;
        }
    }
    Some(allowance)
}

/// `--shape paho`: waits until the PUBLISH just written on `c` completed: its PUBACK (QoS 1)
/// or PUBCOMP (QoS 2) arrived, PUBREL sent in between; at QoS 0 the write returning was the
/// completion. Gives up at the deadline (the handshake is completed after the run) and fails
/// like any acknowledgement wait (connection lost, or no acknowledgement for 10 s). Returns
/// false when the connection is unusable.
async fn complete(ctx: &WorkerCtx, c: &mut PubConn, out: &mut WorkerOut) -> bool {
    if ctx.qos == QoS::AtMostOnce {
        return true;
    }
    c.wait_window(out, 1, ctx.deadline, ctx.clock).await
}

/// Closed loop: claims up to `allowance` of the window atomically (concurrent workers must
/// not overrun it); `None` when it closed meanwhile. Open loop: `allowance`.
fn claim(ctx: &WorkerCtx, allowance: u64) -> Option<u64> {
    if !ctx.pacing.is_empty() {
        return Some(allowance);
    }
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
        return None;
    }
    Some(claim)
}

/// Encodes `allowance` messages for `c` into its write buffer. Returns the send time written
/// into them and how many of them count (intended after the warm-up).
fn encode(
    ctx: &WorkerCtx,
    c: &mut PubConn,
    enc: &mut Encoder,
    st: &mut State,
    allowance: u64,
) -> (u64, u64) {
    let sent_ns = ctx.clock.now_ns();
    let mut counted = 0;
    for _ in 0..allowance {
        let intended = match ctx.pacing.get(st.phase) {
            Some(ph) => ph.schedule.intended(st.k - st.phase_k0),
            None => sent_ns,
        };
        let (stream, seq) = enc.topic(ctx, c, st.k);
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
            &enc.topic,
            packet_id,
            &enc.props,
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
        st.k += 1;
    }
    (sent_ns, counted)
}

/// Counts `sent` messages (`counted` of them after the warm-up) written at `sent_ns` in pacing
/// phase `phase`.
fn account(
    ctx: &WorkerCtx,
    out: &mut WorkerOut,
    phase: usize,
    (sent, counted): (u64, u64),
    sent_ns: u64,
) {
    out.sent += sent;
    out.counted += counted;
    out.writes += 1;
    if let Some(ps) = out.phases.get_mut(phase) {
        ps.sent += sent;
    }
    if let Some(w) = rate_schedule::phase_of(&ctx.phase_bounds, sent_ns) {
        out.phases[w].sent_in_window += sent;
    }
    if !ctx.pacing.is_empty() {
        ctx.live.sent.fetch_add(sent, Ordering::Relaxed);
    }
    ctx.live.counted.fetch_add(counted, Ordering::Relaxed);
    ctx.live
        .metrics
        .sent(ctx.qos as u8, sent, sent * ctx.payload as u64);
    out.report_errors(&ctx.live);
    let idx = (sent_ns / ctx.interval_ns) as usize;
    if out.series.len() <= idx {
        out.series.resize(idx + 1, 0);
    }
    out.series[idx] += sent;
    out.first_ns.get_or_insert(sent_ns);
    out.last_ns = Some(sent_ns);
}

/// Completes outstanding QoS 1/2 handshakes (bounded by the acknowledgement timeout).
async fn complete_handshakes(ctx: &WorkerCtx, conns: &mut [PubConn], out: &mut WorkerOut) {
    if ctx.qos == QoS::AtMostOnce {
        return;
    }
    for c in conns.iter_mut().filter(|c| !c.dead) {
        if !c.wait_window(out, 1, u64::MAX, ctx.clock).await {
            c.dead = true;
            ctx.live.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
