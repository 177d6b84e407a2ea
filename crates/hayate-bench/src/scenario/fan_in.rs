//! Plans of the publisher scenarios: fan-in, latency and swarm are all C publishers over K
//! parts into one local wildcard subscriber.

use super::plan::{
    base_config, check_rate, check_secs, effective_payload, part_spec, processes_for, PartPlan,
    PerMessage, Plan, Setup,
};
use super::{share, split};
use crate::args::{FanInArgs, LatencyArgs, Shape, SwarmArgs};
use crate::client::wildcard_filter;
use crate::clock::secs_to_ns;
use crate::engine::{KeyMode, PartKind, PublishSpec, SubscribeSpec, TopicPlan};
use crate::error::{BenchError, Result};
use crate::rate_schedule::{self, RatePhase};
use crate::results::RunConfig;
use crate::stats::{Credit, CreditHook};
use std::sync::Arc;

/// What the publishers of a fan-in-like plan send, and for how long.
struct Traffic<'a> {
    scenario: &'static str,
    connections: u64,
    workers: u64,
    messages: Option<u64>,
    duration_ns: Option<u64>,
    rate: Option<f64>,
    phases: &'a [RatePhase],
    window: Option<u64>,
    qos: u8,
    sub_qos: u8,
    payload: usize,
    batch: u64,
    inflight: u64,
    topic: &'a str,
    warmup_ns: u64,
    shape: Shape,
}

impl Traffic<'_> {
    /// Publishers do not ping between messages: refuses a rate that leaves a connection silent
    /// for longer than the keep alive.
    fn check_keep_alive(&self, keep_alive: u16) -> Result<()> {
        let keep_alive = f64::from(keep_alive);
        // The slowest rate the publishers send at.
        let slowest = self
            .phases
            .iter()
            .map(|p| p.rate_per_s)
            .reduce(f64::min)
            .or(self.rate);
        if let Some(r) = slowest {
            let per_connection = self.connections as f64 / r;
            if keep_alive > 0.0 && per_connection >= keep_alive {
                return Err(BenchError::invalid(format!(
                    "each publisher would send every {per_connection:.0} s, longer than --keep-alive {keep_alive} s (publishers do not ping between messages): raise --keep-alive or set it to 0"
                )));
            }
        }
        Ok(())
    }

    /// The publisher settings of the part holding connections `first..first + n`.
    fn publish_spec(&self, first: u64, n: u64, window: Option<u64>) -> PublishSpec {
        let connections = self.connections;
        PublishSpec {
            workers: share(self.workers, n, connections).clamp(1, n),
            qos: self.qos,
            payload: self.payload,
            topics: TopicPlan::PerConnection {
                template: self.topic.to_string(),
            },
            messages: self.messages.map(|m| {
                // Exact split of the total over the parts.
                let before = (m as u128 * first as u128 / connections as u128) as u64;
                let upto = (m as u128 * (first + n) as u128 / connections as u128) as u64;
                upto - before
            }),
            duration_ns: self.duration_ns,
            rate: self.rate.map(|r| r * n as f64 / connections as f64),
            phases: self
                .phases
                .iter()
                .map(|p| RatePhase {
                    duration_s: p.duration_s,
                    rate_per_s: p.rate_per_s * n as f64 / connections as f64,
                })
                .collect(),
            batch: self.batch,
            inflight: self.inflight,
            warmup_ns: self.warmup_ns,
            window,
            shape: self.shape,
        }
    }

    /// The publisher parts (one per process) and each one's share of the window.
    fn senders(&self, s: &Setup, parts: &[(u64, u64)]) -> (Vec<PartPlan>, Vec<u64>) {
        let remote = parts.len() > 1;
        let mut senders = Vec::new();
        let mut windows = Vec::new();
        for (i, &(first, n)) in parts.iter().enumerate() {
            let part_window = self.window.map(|w| share(w, n, self.connections));
            windows.push(part_window.unwrap_or(u64::MAX));
            let kind = PartKind::Publish(self.publish_spec(first, n, part_window));
            senders.push(PartPlan {
                spec: part_spec(s, i, 'p', first, n, parts.len() as u64, kind),
                remote,
                credit: Arc::new(Credit::new(part_window.unwrap_or(u64::MAX))),
                hook: None,
            });
        }
        (senders, windows)
    }

    /// The one wildcard subscriber (in this process), which opens the senders' windows.
    fn receiver(
        &self,
        s: &Setup,
        parts: &[(u64, u64)],
        senders: &[PartPlan],
        windows: Vec<u64>,
    ) -> PartPlan {
        let chunk = parts.first().map_or(1, |p| p.1);
        let hook = self.window.map(|_| CreditHook {
            chunk,
            window: windows,
            credits: senders.iter().map(|p| p.credit.clone()).collect(),
        });
        let sub = PartKind::Subscribe(SubscribeSpec {
            qos: self.sub_qos,
            filter: wildcard_filter(self.topic),
            keys: KeyMode::Stream,
            warmup_ns: self.warmup_ns,
            read_chunk: 64 * 1024,
            phase_offsets_ns: if self.phases.is_empty() {
                Vec::new()
            } else {
                rate_schedule::offsets_ns(self.phases)
            },
        });
        let mut sub_spec = part_spec(s, parts.len(), 's', 0, 1, 1, sub);
        sub_spec.connect_rate = None;
        PartPlan {
            spec: sub_spec,
            remote: false,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook,
        }
    }

    fn config(&self, s: &Setup, processes: u64) -> RunConfig {
        let mut config = base_config(s, processes);
        config.connections = self.connections;
        config.publishers = Some(self.connections);
        config.subscribers = Some(1);
        config.workers = Some(self.workers);
        config.publish_qos = Some(self.qos);
        config.subscribe_qos = Some(self.sub_qos);
        config.payload_bytes = Some(self.payload as u64);
        config.messages = self.messages;
        config.duration_s = self.duration_ns.map(crate::clock::ns_to_secs);
        config.warmup_s = Some(crate::clock::ns_to_secs(self.warmup_ns));
        config.rate_per_s = self.rate;
        config.pacing = Some(
            if !self.phases.is_empty() {
                "rate-schedule"
            } else if self.rate.is_some() {
                "fixed-rate"
            } else {
                "closed-loop"
            }
            .into(),
        );
        config.rate_schedule = (!self.phases.is_empty()).then(|| self.phases.to_vec());
        config.window = self.window;
        config.batch = Some(self.batch);
        config.inflight = Some(self.inflight);
        config.topic = Some(self.topic.to_string());
        config.filter = Some(wildcard_filter(self.topic));
        config
    }

    /// The plan: C publishers over K parts into one local wildcard subscriber.
    fn plan(&self, s: &Setup, mut warnings: Vec<String>) -> Result<Plan> {
        self.check_keep_alive(s.common.keep_alive)?;
        let processes = processes_for(&s.common, self.connections);
        let parts = split(self.connections, processes);
        let (senders, windows) = self.senders(s, &parts);
        let receiver = self.receiver(s, &parts, &senders, windows);
        if parts.len() > 1 {
            warnings.push(format!(
                "{} worker processes; the closed-loop window is split between them",
                parts.len()
            ));
        }
        Ok(Plan {
            scenario: self.scenario,
            config: self.config(s, processes),
            receivers: vec![receiver],
            senders,
            main_is_receivers: false,
            traffic: true,
            open_loop: self.rate.is_some() || !self.phases.is_empty(),
            per_message: PerMessage::One,
            settle_ns: 0,
            hold_ns: 0,
            subscriber_required: Some(wildcard_filter(self.topic)),
            warnings,
            phases: self.phases.to_vec(),
            recovery_p99_ms: None,
        })
    }
}

/// `--rate-schedule`: the phases, after checking they replace the options they must.
fn schedule_phases(a: &FanInArgs, s: &Setup, warnings: &mut Vec<String>) -> Result<Vec<RatePhase>> {
    let Some(text) = &a.rate_schedule else {
        return Ok(Vec::new());
    };
    let phases = rate_schedule::parse(text).map_err(BenchError::InvalidOption)?;
    for (given, name) in [
        (a.rate.is_some(), "--rate"),
        (a.messages.is_some(), "--messages"),
        (a.duration.is_some(), "--duration"),
        (a.window.is_some(), "--window"),
    ] {
        if given {
            return Err(BenchError::invalid(format!(
                "--rate-schedule sets the rate and the length of the run: it cannot be combined with {name}"
            )));
        }
    }
    let every = s.common.sample_interval;
    let ragged = phases.iter().any(|p| {
        let n = p.duration_s / every;
        (n - n.round()).abs() > 1e-6
    });
    if ragged {
        warnings.push(format!(
            "phase lengths are not multiples of --sample-interval {every} s: the recovery figures use only the intervals entirely inside a phase"
        ));
    }
    Ok(phases)
}

/// The fan-in options checked before the rate schedule is parsed.
fn check_fan_in(a: &FanInArgs) -> Result<()> {
    if a.connections == 0 {
        return Err(BenchError::invalid("--connections must be at least 1"));
    }
    if a.workers == 0 {
        return Err(BenchError::invalid("--workers must be at least 1"));
    }
    if a.messages == Some(0) {
        return Err(BenchError::invalid("--messages must be at least 1"));
    }
    if let Some(d) = a.duration {
        check_secs(d, "--duration", false)?;
    }
    check_rate(a.rate, "--rate")?;
    if a.rate.is_some() && a.window.is_some() {
        return Err(BenchError::invalid(
            "--window shapes closed-loop runs; a fixed --rate run has no window (give one or the other)",
        ));
    }
    Ok(())
}

/// `--shape` and `--rate-per-connection`: what each shape needs and refuses; warnings for
/// options a shape ignores.
fn check_shape(a: &FanInArgs, warnings: &mut Vec<String>) -> Result<()> {
    if let Some(r) = a.rate_per_connection {
        check_rate(Some(r), "--rate-per-connection")?;
        if !a.shape.one_per_write() {
            return Err(BenchError::invalid(
                "--rate-per-connection paces --shape open or paho; --shape batch takes a total --rate",
            ));
        }
        for (given, name) in [
            (a.rate.is_some(), "--rate"),
            (a.rate_schedule.is_some(), "--rate-schedule"),
            (a.window.is_some(), "--window"),
        ] {
            if given {
                return Err(BenchError::invalid(format!(
                    "--rate-per-connection cannot be combined with {name}"
                )));
            }
        }
    }
    let paced = a.rate.is_some() || a.rate_per_connection.is_some() || a.rate_schedule.is_some();
    if a.shape == Shape::Open && !paced {
        return Err(BenchError::invalid(
            "--shape open is an open loop: give --rate-per-connection (or --rate, --rate-schedule)",
        ));
    }
    let name = a.shape.label();
    if a.shape.one_per_write() && a.batch != 16 {
        warnings.push(format!(
            "--batch applies to --shape batch only: --shape {name} writes every PUBLISH on its own"
        ));
    }
    if a.shape == Shape::Paho && a.inflight != 64 {
        warnings.push(
            "--inflight does not apply to --shape paho: each worker has one message outstanding"
                .into(),
        );
    }
    Ok(())
}

/// The fan-in options checked after the rate schedule is parsed.
fn check_fan_in_rest(a: &FanInArgs) -> Result<()> {
    if let Some(ms) = a.recovery_p99_ms {
        if a.rate_schedule.is_none() {
            return Err(BenchError::invalid(
                "--recovery-p99-ms applies to --rate-schedule runs only",
            ));
        }
        if !(ms.is_finite() && ms > 0.0) {
            return Err(BenchError::invalid(
                "--recovery-p99-ms must be a positive number",
            ));
        }
    }
    if a.window == Some(0) || a.batch == 0 || a.inflight == 0 {
        return Err(BenchError::invalid(
            "--window, --batch and --inflight must be at least 1",
        ));
    }
    if !a.topic.contains("%i") {
        return Err(BenchError::invalid(
            "fan-in --topic needs %i (each publisher its own topic)",
        ));
    }
    Ok(())
}

pub(super) fn plan_fan_in(a: &FanInArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
    check_fan_in(a)?;
    let phases = schedule_phases(a, s, &mut warnings)?;
    check_fan_in_rest(a)?;
    check_shape(a, &mut warnings)?;
    let rate = a
        .rate
        .or(a.rate_per_connection.map(|r| r * a.connections as f64));
    let workers = if a.workers > a.connections {
        warnings.push(format!(
            "{} workers for {} connections: using {}",
            a.workers, a.connections, a.connections
        ));
        a.connections
    } else {
        a.workers
    };
    let messages = a.messages.or(if a.duration.is_none() && phases.is_empty() {
        Some(1_000_000)
    } else {
        None
    });
    let duration_ns = if phases.is_empty() {
        a.duration.map(secs_to_ns)
    } else {
        Some(secs_to_ns(rate_schedule::total_s(&phases)))
    };
    let window = if rate.is_none() && phases.is_empty() {
        Some(a.window.unwrap_or(100_000))
    } else {
        None
    };
    let payload = effective_payload(a.payload, &mut warnings);
    let traffic = Traffic {
        scenario: "fan-in",
        connections: a.connections,
        workers,
        messages,
        duration_ns,
        rate,
        phases: &phases,
        window,
        qos: a.qos,
        sub_qos: a.sub_qos,
        payload,
        batch: if a.shape.one_per_write() { 1 } else { a.batch },
        inflight: if a.shape == Shape::Paho {
            1
        } else {
            a.inflight
        },
        topic: &a.topic,
        warmup_ns: 0,
        shape: a.shape,
    };
    let mut plan = traffic.plan(s, warnings)?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.shape = Some(a.shape.label().into());
    plan.config.rate_per_connection_per_s = rate
        .filter(|_| a.shape.one_per_write())
        .map(|r| a.rate_per_connection.unwrap_or(r / a.connections as f64));
    plan.config.recovery_p99_ms = a.recovery_p99_ms;
    plan.recovery_p99_ms = a.recovery_p99_ms;
    Ok(plan)
}

pub(super) fn plan_latency(a: &LatencyArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
    if !(a.interval_ms.is_finite() && a.interval_ms > 0.0) {
        return Err(BenchError::invalid("--interval-ms must be positive"));
    }
    check_secs(a.duration, "--duration", false)?;
    check_secs(a.warmup, "--warmup", true)?;
    if a.warmup >= a.duration {
        return Err(BenchError::invalid(
            "--warmup must be shorter than --duration",
        ));
    }
    if s.common.processes.is_some_and(|p| p > 1) {
        return Err(BenchError::invalid(
            "latency uses one publisher: --processes does not apply",
        ));
    }
    let payload = effective_payload(a.payload, &mut warnings);
    let traffic = Traffic {
        scenario: "latency",
        connections: 1,
        workers: 1,
        messages: None,
        duration_ns: Some(secs_to_ns(a.duration)),
        rate: Some(1000.0 / a.interval_ms),
        phases: &[],
        window: None,
        qos: a.qos,
        sub_qos: a.sub_qos,
        payload,
        batch: 1,
        inflight: 64,
        topic: &a.topic,
        warmup_ns: secs_to_ns(a.warmup),
        shape: Shape::Batch,
    };
    let mut plan = traffic.plan(s, warnings)?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.message_interval_s = Some(a.interval_ms / 1000.0);
    Ok(plan)
}

pub(super) fn plan_swarm(a: &SwarmArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
    if a.clients == 0 || a.workers == 0 {
        return Err(BenchError::invalid(
            "--clients and --workers must be at least 1",
        ));
    }
    check_secs(a.every, "--every", false)?;
    check_secs(a.duration, "--duration", false)?;
    check_secs(a.warmup, "--warmup", true)?;
    if a.warmup >= a.duration {
        return Err(BenchError::invalid(
            "--warmup must be shorter than --duration",
        ));
    }
    if !a.topic.contains("%i") {
        return Err(BenchError::invalid(
            "swarm --topic needs %i (each client its own topic)",
        ));
    }
    let payload = effective_payload(a.payload, &mut warnings);
    let traffic = Traffic {
        scenario: "swarm",
        connections: a.clients,
        workers: a.workers.min(a.clients),
        messages: None,
        duration_ns: Some(secs_to_ns(a.duration)),
        rate: Some(a.clients as f64 / a.every),
        phases: &[],
        window: None,
        qos: a.qos,
        sub_qos: a.sub_qos,
        payload,
        batch: 1,
        inflight: 16,
        topic: &a.topic,
        warmup_ns: secs_to_ns(a.warmup),
        shape: Shape::Batch,
    };
    let mut plan = traffic.plan(s, warnings)?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.message_interval_s = Some(a.every);
    Ok(plan)
}
