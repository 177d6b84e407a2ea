//! A run, one function per phase: start (probe, samplers), connect the receivers then the
//! senders, progress lines, traffic (go, wait for the senders, drain) or hold, stop. What the
//! phases gathered goes to `assemble`, which makes the result.

use super::assemble::{self, Gathered};
use super::plan::{PartPlan, PerMessage, Plan, Setup};
use super::{probe, Env};
use crate::clock::secs_to_ns;
use crate::engine::{
    spawn_local, ConnectReport, PartEvent, PartKind, PartLink, PartLive, PartReport, ProcSample,
};
use crate::error::{BenchError, Result};
use crate::metrics::{parse_listen, MetricsEndpoint};
use crate::multiproc::spawn_remote;
use crate::procstat::{self, read_process, SampleLog};
use crate::report;
use crate::results::{BenchResult, MachineInfo};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// CPU seconds and RSS of a process at one moment (`procstat::read_process`).
pub(super) type ProcReading = Option<(f64, u64)>;
/// The machine's CPU counters at one moment (`procstat::machine_cpu`).
pub(super) type MachineReading = Option<(u64, u64)>;

/// What is known before anything connects.
pub(super) struct Started {
    pub(super) started_at_unix_ms: u64,
    pub(super) machine: MachineInfo,
    pub(super) broker_version: Option<String>,
    pub(super) tls_session: Option<String>,
    pub(super) broker_start: ProcReading,
    pub(super) machine_start: MachineReading,
    pub(super) connect_start_ns: u64,
}

/// The CPU/RSS samplers of the broker (`--broker-pid`) and of this process.
struct Samplers {
    stop: watch::Sender<bool>,
    broker: Option<(SampleLog, JoinHandle<()>)>,
    me: SampleLog,
    me_handle: JoinHandle<()>,
}

/// The connected parts and their connect reports.
pub(super) struct Connected {
    receivers: Vec<PartLink>,
    senders: Vec<PartLink>,
    pub(super) recv_connect: Vec<ConnectReport>,
    pub(super) send_connect: Vec<ConnectReport>,
    pub(super) connected_ns: u64,
    pub(super) connected_machine: MachineReading,
}

/// The measured phase (the traffic, or conn's connect phase) and readings at both ends.
pub(super) struct Phase {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) broker: (ProcReading, ProcReading),
    pub(super) me: (ProcReading, ProcReading),
    pub(super) machine: (MachineReading, MachineReading),
}

/// The parts' reports and the samples, after the stop.
pub(super) struct Finished {
    pub(super) send_reports: Vec<PartReport>,
    pub(super) recv_reports: Vec<PartReport>,
    pub(super) finished_ns: u64,
    pub(super) broker_end: ProcReading,
    pub(super) broker_samples: Vec<ProcSample>,
    pub(super) self_samples: Vec<ProcSample>,
}

/// Deliveries each counted message should make.
#[derive(Debug, Clone, Copy)]
pub(super) struct Expected {
    per_message: PerMessage,
    subscribed: u64,
}

impl Expected {
    /// Deliveries expected for `counted` messages.
    pub(super) fn of(self, counted: u64) -> u64 {
        match self.per_message {
            PerMessage::One => counted,
            PerMessage::EverySubscriber => counted * self.subscribed,
        }
    }
}

/// Runs a plan through its phases and returns the result.
pub(super) async fn execute(mut plan: Plan, s: &Setup, env: &Env) -> Result<BenchResult> {
    let pid = s.common.broker_pid;
    let (started, samplers) = begin(s).await?;
    let mut warnings = std::mem::take(&mut plan.warnings);
    let remote_count = plan
        .senders
        .iter()
        .chain(plan.receivers.iter())
        .filter(|p| p.remote)
        .count();
    let endpoint = match &s.common.metrics_listen {
        Some(addr) => Some(MetricsEndpoint::start(parse_listen(addr)?, plan.scenario).await?),
        None => None,
    };
    let parts = connect_parts(&mut plan, s, env, endpoint.as_ref()).await;
    let mut parts = match parts {
        Ok(parts) => parts,
        Err(error) => {
            if let Some(endpoint) = endpoint {
                endpoint.stop().await;
            }
            return Err(error);
        }
    };
    let progress = start_progress(&plan, s, env, &parts, &samplers);
    if plan.settle_ns > 0 {
        tokio::time::sleep(Duration::from_nanos(plan.settle_ns)).await;
    }
    let broker_connected = pid.and_then(|p| read_process(Some(p)));
    let expected = Expected {
        per_message: plan.per_message,
        subscribed: parts
            .recv_connect
            .iter()
            .map(|r| r.established - r.subscribe_failures)
            .sum(),
    };
    let phase = if plan.traffic {
        traffic(&plan, s, &mut parts, expected, &mut warnings).await?
    } else {
        hold(&plan, &started, &parts, broker_connected).await
    };
    let finished = stop(s, &mut parts, progress, samplers).await;
    if let Some(endpoint) = endpoint {
        endpoint.stop().await;
    }
    let finished = finished?;
    let gathered = Gathered {
        started,
        recv_connect: parts.recv_connect,
        send_connect: parts.send_connect,
        broker_connected,
        phase,
        finished,
        expected,
        remote_count,
    };
    Ok(assemble::result(plan, s, env, gathered, warnings))
}

/// Probes the broker, starts the samplers and takes the readings before connecting.
async fn begin(s: &Setup) -> Result<(Started, Samplers)> {
    let clock = s.clock;
    let pid = s.common.broker_pid;
    let started_at_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let machine = procstat::machine_info();
    let (broker_version, tls_session) = probe(&s.client, s.common.version_wait_ms).await?;
    // Every other broker of a spread run must answer too, before anything starts.
    for addr in s.client.spread.distinct(s.client.addr) {
        if addr != s.client.addr {
            let mut other = s.client.clone();
            other.addr = addr;
            other.spread = Default::default();
            probe(&other, 0).await?;
        }
    }
    let (stop, stop_rx) = watch::channel(false);
    let broker =
        pid.map(|p| procstat::spawn_sampler(Some(p), clock, s.interval_ns, stop_rx.clone()));
    let (me, me_handle) = procstat::spawn_sampler(None, clock, s.interval_ns, stop_rx.clone());
    let started = Started {
        started_at_unix_ms,
        machine,
        broker_version,
        tls_session,
        broker_start: pid.and_then(|p| read_process(Some(p))),
        machine_start: procstat::machine_cpu(),
        connect_start_ns: clock.now_ns(),
    };
    let samplers = Samplers {
        stop,
        broker,
        me,
        me_handle,
    };
    Ok((started, samplers))
}

/// Starts and connects the receivers (checking the subscription the run needs), then the
/// senders.
async fn connect_parts(
    plan: &mut Plan,
    s: &Setup,
    env: &Env,
    endpoint: Option<&MetricsEndpoint>,
) -> Result<Connected> {
    let mut receivers = start_parts(std::mem::take(&mut plan.receivers), env, endpoint).await?;
    let recv_connect = await_connected(&mut receivers).await?;
    if let Some(filter) = &plan.subscriber_required {
        check_subscribed(filter, &recv_connect, &receivers)?;
    }
    let mut senders = start_parts(std::mem::take(&mut plan.senders), env, endpoint).await?;
    let send_connect = await_connected(&mut senders).await?;
    Ok(Connected {
        receivers,
        senders,
        recv_connect,
        send_connect,
        connected_ns: s.clock.now_ns(),
        connected_machine: procstat::machine_cpu(),
    })
}

/// Fails the run (stopping the receivers) when no subscription of `filter` succeeded.
fn check_subscribed(
    filter: &str,
    recv_connect: &[ConnectReport],
    receivers: &[PartLink],
) -> Result<()> {
    let ok: u64 = recv_connect
        .iter()
        .map(|r| r.established - r.subscribe_failures)
        .sum();
    if ok > 0 {
        return Ok(());
    }
    let reason = recv_connect
        .iter()
        .find_map(|r| {
            r.subscribe_error.clone().or_else(|| {
                r.failures
                    .keys()
                    .next()
                    .map(|k| format!("connect failed: {k}"))
            })
        })
        .unwrap_or_else(|| "no subscriber".into());
    for l in receivers {
        let _ = l.stop.send(true);
    }
    Err(BenchError::SubscribeRefused {
        filter: filter.to_string(),
        reason,
    })
}

/// The progress lines on stderr, until stopped.
struct Progress {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

fn start_progress(
    plan: &Plan,
    s: &Setup,
    env: &Env,
    parts: &Connected,
    samplers: &Samplers,
) -> Progress {
    let common = &s.common;
    let sender_live: Vec<Arc<PartLive>> = parts.senders.iter().map(|l| l.live.clone()).collect();
    let receiver_live: Vec<Arc<PartLive>> =
        parts.receivers.iter().map(|l| l.live.clone()).collect();
    let main_live = if plan.main_is_receivers {
        receiver_live.clone()
    } else {
        sender_live.clone()
    };
    let (stop, progress_rx) = watch::channel(false);
    let task = if env.print && !common.quiet && common.progress > 0.0 {
        Some(tokio::spawn(report::progress_task(
            plan.scenario,
            plan.traffic,
            s.clock,
            secs_to_ns(common.progress),
            main_live,
            sender_live,
            receiver_live,
            samplers.broker.as_ref().map(|b| b.0.clone()),
            samplers.me.clone(),
            progress_rx,
        )))
    } else {
        None
    };
    Progress { stop, task }
}

/// The traffic phase: go, wait until the senders are done, drain.
async fn traffic(
    plan: &Plan,
    s: &Setup,
    parts: &mut Connected,
    expected: Expected,
    warnings: &mut Vec<String>,
) -> Result<Phase> {
    let clock = s.clock;
    let pid = s.common.broker_pid;
    let mut go = clock.now_ns() + 20_000_000;
    if !plan.phases.is_empty() {
        // Phases start on time series interval boundaries, so that intervals and phases
        // line up (the recovery figures use the intervals entirely inside a phase).
        let interval = s.interval_ns.max(1);
        go = go.div_ceil(interval) * interval;
    }
    for l in parts.senders.iter().chain(parts.receivers.iter()) {
        let _ = l.go.send(Some(go));
    }
    clock.sleep_until(go).await;
    let broker_go = pid.and_then(|p| read_process(Some(p)));
    let self_go = read_process(None);
    let machine_go = procstat::machine_cpu();
    await_send_done(&mut parts.senders).await?;
    drain(s, parts, expected, warnings).await;
    let end = clock.now_ns();
    Ok(Phase {
        start: go,
        end,
        broker: (broker_go, pid.and_then(|p| read_process(Some(p)))),
        me: (self_go, read_process(None)),
        machine: (machine_go, procstat::machine_cpu()),
    })
}

/// Waits for every sender part's `SendDone`.
async fn await_send_done(senders: &mut [PartLink]) -> Result<()> {
    for link in senders.iter_mut() {
        loop {
            match next_event(link).await? {
                PartEvent::SendDone => break,
                PartEvent::Finished(_) => {
                    return Err(BenchError::Worker {
                        index: link.index,
                        reason: "finished before sending".into(),
                    })
                }
                _ => continue,
            }
        }
    }
    Ok(())
}

/// Waits for outstanding deliveries: until everything expected arrived, nothing arrived for
/// 1.5 s, or `--drain-timeout`.
async fn drain(s: &Setup, parts: &Connected, expected: Expected, warnings: &mut Vec<String>) {
    let clock = s.clock;
    let sum = |links: &[PartLink], f: fn(&PartLive) -> &std::sync::atomic::AtomicU64| -> u64 {
        links
            .iter()
            .map(|l| f(&l.live).load(Ordering::Relaxed))
            .sum()
    };
    let drain_start = clock.now_ns();
    let quiet_ns = 1_500_000_000;
    let mut last = u64::MAX;
    let mut last_change = drain_start;
    loop {
        let counted = sum(&parts.senders, |l| &l.counted);
        let received = sum(&parts.receivers, |l| &l.received);
        let expected = expected.of(counted);
        let now = clock.now_ns();
        if received >= expected {
            break;
        }
        if received != last {
            last = received;
            last_change = now;
        }
        if now - last_change > quiet_ns {
            warnings.push(format!(
                "{} deliveries still missing {:.1} s after the last one arrived; counted as lost",
                expected - received,
                (now - last_change) as f64 / 1e9
            ));
            break;
        }
        if now - drain_start > secs_to_ns(s.common.drain_timeout) {
            warnings.push(format!(
                "drain timeout ({} s) with {} deliveries missing",
                s.common.drain_timeout,
                expected - received
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// conn: the phase measured is the connect phase; then hold the connections.
async fn hold(
    plan: &Plan,
    started: &Started,
    parts: &Connected,
    broker_connected: ProcReading,
) -> Phase {
    let phase = Phase {
        start: started.connect_start_ns,
        end: parts.connected_ns,
        broker: (started.broker_start, broker_connected),
        me: (None, None),
        machine: (started.machine_start, parts.connected_machine),
    };
    if plan.hold_ns > 0 {
        tokio::time::sleep(Duration::from_nanos(plan.hold_ns)).await;
    }
    phase
}

/// Stops every part and collects the reports, then stops the progress lines and samplers.
async fn stop(
    s: &Setup,
    parts: &mut Connected,
    progress: Progress,
    samplers: Samplers,
) -> Result<Finished> {
    let pid = s.common.broker_pid;
    for l in parts.senders.iter().chain(parts.receivers.iter()) {
        let _ = l.stop.send(true);
    }
    let send_reports = await_finished(&mut parts.senders).await?;
    let recv_reports = await_finished(&mut parts.receivers).await?;
    let finished_ns = s.clock.now_ns();
    let broker_end = pid.and_then(|p| read_process(Some(p)));
    let _ = progress.stop.send(true);
    if let Some(p) = progress.task {
        let _ = p.await;
    }
    let _ = samplers.stop.send(true);
    let broker_samples = match samplers.broker {
        Some((log, handle)) => {
            let _ = handle.await;
            let v = log.lock().clone();
            v
        }
        None => Vec::new(),
    };
    let _ = samplers.me_handle.await;
    let self_samples = samplers.me.lock().clone();
    Ok(Finished {
        send_reports,
        recv_reports,
        finished_ns,
        broker_end,
        broker_samples,
        self_samples,
    })
}

async fn start_parts(
    plans: Vec<PartPlan>,
    env: &Env,
    endpoint: Option<&MetricsEndpoint>,
) -> Result<Vec<PartLink>> {
    let mut links = Vec::new();
    for p in plans {
        let role = match p.spec.kind {
            PartKind::Publish(_) => "publisher",
            PartKind::Subscribe(_) => "subscriber",
            PartKind::Idle => "idle",
        };
        let link = if p.remote {
            spawn_remote(p.spec, p.credit, &env.worker_command).await?
        } else {
            spawn_local(p.spec, p.credit, p.hook)
        };
        if let Some(endpoint) = endpoint {
            endpoint.add(role, link.live.clone());
        }
        links.push(link);
    }
    Ok(links)
}

async fn next_event(link: &mut PartLink) -> Result<PartEvent> {
    match link.events.recv().await {
        Some(PartEvent::Failed(reason)) => Err(BenchError::Worker {
            index: link.index,
            reason,
        }),
        Some(e) => Ok(e),
        None => Err(BenchError::Worker {
            index: link.index,
            reason: "the part ended without reporting".into(),
        }),
    }
}

async fn await_connected(links: &mut [PartLink]) -> Result<Vec<ConnectReport>> {
    let mut out = Vec::new();
    for link in links.iter_mut() {
        match next_event(link).await? {
            PartEvent::Connected(r) => out.push(r),
            other => {
                return Err(BenchError::Worker {
                    index: link.index,
                    reason: format!("expected Connected, got {other:?}"),
                })
            }
        }
    }
    Ok(out)
}

async fn await_finished(links: &mut [PartLink]) -> Result<Vec<PartReport>> {
    let mut out = Vec::new();
    for link in links.iter_mut() {
        loop {
            match next_event(link).await? {
                PartEvent::Finished(r) => {
                    out.push(*r);
                    break;
                }
                PartEvent::SendDone | PartEvent::Connected(_) => continue,
                PartEvent::Failed(reason) => {
                    return Err(BenchError::Worker {
                        index: link.index,
                        reason,
                    })
                }
            }
        }
        if let Some(child) = link.child.as_mut() {
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
    }
    Ok(out)
}
