//! Scenario orchestration: turns options into parts, drives them through the phases of a run,
//! and assembles the [`BenchResult`].

use crate::args::{
    BenchCommand, CommonArgs, ConnArgs, FanInArgs, FanOutArgs, LatencyArgs, SwarmArgs, TopicMode,
};
use crate::client::{
    connect, parse_source_ips, wildcard_filter, ClientConfig, ConnectError, TopicTemplate,
};
use crate::clock::{secs_to_ns, Clock};
use crate::engine::{
    spawn_local, ConnectReport, KeyMode, PartEvent, PartKind, PartLink, PartLive, PartReport,
    PartSpec, PhaseSend, ProcSample, PublishSpec, SubscribeSpec, TopicPlan,
};
use crate::error::{BenchError, Result};
use crate::multiproc::spawn_remote;
use crate::payload::HEADER_LEN;
use crate::procstat::{self, cpu_at, per_interval, read_process};
use crate::rate_schedule::{self, RatePhase};
use crate::report;
use crate::results::{
    BenchResult, BenchStats, BrokerStats, ConnectionStats, MessageStats, RatePhaseStats,
    RateScheduleStats, RecoveryStats, RunConfig, TargetInfo, TimePoint, ToolInfo, SCHEMA_VERSION,
};
use crate::stats::{
    coarse_histogram, hist_from_base64, merge_hist, summarize, Credit, CreditHook, Recorder,
};
use crate::tls::TlsSettings;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Connections per process above which a run spreads over worker processes by default.
pub const CONNECTIONS_PER_PROCESS: u64 = 15_000;

/// Where the run happens: how to start workers, the command line to record, the target name.
#[derive(Debug, Clone)]
pub struct Env {
    /// Program and leading arguments that start a worker (`__worker` is appended).
    pub worker_command: Vec<OsString>,
    /// The command line recorded in results.
    pub command_line: Vec<String>,
    /// Target name (set by `compare`).
    pub target_name: Option<String>,
    /// Print the summary and progress lines (the library API sets this from `--quiet`).
    pub print: bool,
}

impl Default for Env {
    fn default() -> Self {
        Env {
            worker_command: crate::multiproc::default_worker_command(),
            command_line: std::env::args().collect(),
            target_name: None,
            print: true,
        }
    }
}

/// The command line as recorded in results: the values of `--password` and `--psk` replaced
/// by `***` (results and reports get passed around).
pub fn redact_command_line(words: &[String]) -> Vec<String> {
    let secret = ["--password", "--psk"];
    let mut out = Vec::with_capacity(words.len());
    let mut hide_next = false;
    for w in words {
        if hide_next {
            out.push("***".to_string());
            hide_next = false;
            continue;
        }
        if secret.contains(&w.as_str()) {
            hide_next = true;
            out.push(w.clone());
        } else if let Some((flag, _)) = w.split_once('=').filter(|(f, _)| secret.contains(f)) {
            out.push(format!("{flag}=***"));
        } else {
            out.push(w.clone());
        }
    }
    out
}

/// Runtime threads a scenario wants per process.
pub fn threads_for(common: &CommonArgs) -> usize {
    common
        .threads
        .unwrap_or_else(|| (procstat::cores() / 2).max(1))
        .max(1)
}

/// Checks options shared by every scenario.
pub fn validate_common(c: &CommonArgs) -> Result<()> {
    TlsSettings::from_args(c).map_err(BenchError::InvalidOption)?;
    if c.connect_concurrency == 0 {
        return Err(BenchError::invalid(
            "--connect-concurrency must be at least 1",
        ));
    }
    if let Some(r) = c.connect_rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(BenchError::invalid(
                "--connect-rate must be a positive number",
            ));
        }
    }
    if !(c.connect_timeout.is_finite() && c.connect_timeout > 0.0) {
        return Err(BenchError::invalid("--connect-timeout must be positive"));
    }
    if !(c.sample_interval.is_finite() && c.sample_interval >= 0.01) {
        return Err(BenchError::invalid(
            "--sample-interval must be at least 0.01 s",
        ));
    }
    if !(c.progress.is_finite() && c.progress >= 0.0) {
        return Err(BenchError::invalid("--progress must be 0 or positive"));
    }
    if c.threads == Some(0) {
        return Err(BenchError::invalid("--threads must be at least 1"));
    }
    if c.processes == Some(0) {
        return Err(BenchError::invalid("--processes must be at least 1"));
    }
    if let Some(src) = &c.source_ips {
        parse_source_ips(src).map_err(BenchError::InvalidOption)?;
    }
    if let Some(pid) = c.broker_pid {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(BenchError::NoSuchProcess(pid));
        }
    }
    Ok(())
}

/// Resolves the broker address.
pub async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let mut addrs =
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| BenchError::Resolve {
                host: host.to_string(),
                port,
                reason: e.to_string(),
            })?;
    addrs.next().ok_or_else(|| BenchError::Resolve {
        host: host.to_string(),
        port,
        reason: "no address".into(),
    })
}

fn client_config(c: &CommonArgs, addr: SocketAddr) -> Result<ClientConfig> {
    let prefix = c.client_id_prefix.clone().unwrap_or_else(|| {
        let t = crate::clock::monotonic_ns() ^ u64::from(std::process::id()) << 20;
        format!("hb{:06x}", t & 0xFF_FFFF)
    });
    Ok(ClientConfig {
        addr,
        v5: c.mqtt == crate::args::MqttVersion::V5,
        keep_alive: c.keep_alive,
        username: c.username.clone(),
        password: c.password.clone(),
        clean: !c.persistent,
        connect_timeout_ms: (c.connect_timeout * 1000.0) as u64,
        source_ips: match &c.source_ips {
            Some(s) => parse_source_ips(s).map_err(BenchError::InvalidOption)?,
            None => Vec::new(),
        },
        client_id_prefix: prefix,
        tls: TlsSettings::from_args(c).map_err(BenchError::InvalidOption)?,
        connector: Default::default(),
    })
    .and_then(|cfg| {
        // Read the certificate and key files now, for a clear error before anything starts.
        cfg.tls_connector().map_err(BenchError::InvalidOption)?;
        Ok(cfg)
    })
}

/// Connects once to check the broker is there, and asks for `$SYS/broker/version`. Returns
/// the version and the TLS session the connection negotiated.
pub async fn probe(cfg: &ClientConfig, wait_ms: u64) -> Result<(Option<String>, Option<String>)> {
    let mut cfg = cfg.clone();
    cfg.clean = true;
    let mut conn = connect(&cfg, 'x', 0).await.map_err(|e| match e {
        ConnectError::ConnAck(_) => BenchError::ProbeRefused {
            addr: cfg.addr,
            reason: e.describe(),
        },
        ConnectError::Tls { .. } => BenchError::TlsHandshake {
            addr: cfg.addr,
            transport: cfg.transport(),
            reason: e.reason(),
            detail: e.describe(),
        },
        _ => BenchError::Unreachable {
            addr: cfg.addr,
            reason: e.describe(),
        },
    })?;
    let mut version = None;
    if wait_ms > 0 {
        let timeout = Duration::from_millis(wait_ms);
        if conn
            .subscribe("$SYS/broker/version", 0, timeout)
            .await
            .is_ok()
        {
            let deadline = tokio::time::Instant::now() + timeout;
            while let Some(left) = deadline.checked_duration_since(tokio::time::Instant::now()) {
                match conn.recv(left).await {
                    Ok(hayate_codec::Packet::Publish(p))
                        if p.topic.as_str() == "$SYS/broker/version" =>
                    {
                        version = Some(String::from_utf8_lossy(&p.payload).into_owned());
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
    }
    let tls_session = conn.stream.tls_description();
    conn.disconnect().await;
    Ok((version, tls_session))
}

/// Splits `count` connections into `parts` contiguous ranges of equal size (the last may be
/// shorter): `(first, count)` each.
pub fn split(count: u64, parts: u64) -> Vec<(u64, u64)> {
    let parts = parts.clamp(1, count.max(1));
    let chunk = count.div_ceil(parts);
    (0..parts)
        .map(|i| (i * chunk, chunk.min(count.saturating_sub(i * chunk))))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Share of `total` for a part holding `n` of `count` connections (rounded, at least 1 when
/// `total` > 0).
fn share(total: u64, n: u64, count: u64) -> u64 {
    if total == u64::MAX {
        return u64::MAX;
    }
    ((total as f64 * n as f64 / count.max(1) as f64).round() as u64).max(u64::from(total > 0))
}

/// How many deliveries each counted message should make.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PerMessage {
    One,
    EverySubscriber,
}

struct PartPlan {
    spec: PartSpec,
    remote: bool,
    credit: Arc<Credit>,
    hook: Option<CreditHook>,
}

struct Plan {
    scenario: &'static str,
    config: RunConfig,
    receivers: Vec<PartPlan>,
    senders: Vec<PartPlan>,
    main_is_receivers: bool,
    traffic: bool,
    open_loop: bool,
    per_message: PerMessage,
    settle_ns: u64,
    hold_ns: u64,
    subscriber_required: Option<String>,
    warnings: Vec<String>,
    /// `--rate-schedule` phases (empty otherwise).
    phases: Vec<RatePhase>,
    /// `--recovery-p99-ms`.
    recovery_p99_ms: Option<f64>,
}

struct Setup {
    common: CommonArgs,
    client: ClientConfig,
    clock: Clock,
    interval_ns: u64,
    threads: usize,
}

fn base_config(s: &Setup, processes: u64) -> RunConfig {
    let c = &s.common;
    RunConfig {
        mqtt_version: c.mqtt.label().to_string(),
        transport: s.client.transport().to_string(),
        clean_session: !c.persistent,
        keep_alive_s: c.keep_alive,
        connect_concurrency: c.connect_concurrency as u64,
        connect_rate_per_s: c.connect_rate,
        source_ips: s
            .client
            .source_ips
            .iter()
            .map(|ip| ip.to_string())
            .collect(),
        processes,
        threads: s.threads as u64,
        sample_interval_s: c.sample_interval,
        ..RunConfig::default()
    }
}

fn part_spec(
    s: &Setup,
    index: usize,
    role: char,
    first: u64,
    count: u64,
    parts: u64,
    kind: PartKind,
) -> PartSpec {
    let c = &s.common;
    PartSpec {
        index,
        client: s.client.clone(),
        role,
        first_id: first,
        count,
        connect_concurrency: (c.connect_concurrency as u64).div_ceil(parts).max(1) as usize,
        connect_rate: c.connect_rate.map(|r| r / parts as f64),
        epoch: s.clock.epoch(),
        interval_ns: s.interval_ns,
        threads: s.threads,
        kind,
    }
}

fn processes_for(common: &CommonArgs, connections: u64) -> u64 {
    common
        .processes
        .map(|p| p as u64)
        .unwrap_or_else(|| connections.div_ceil(CONNECTIONS_PER_PROCESS).max(1))
        .min(connections.max(1))
}

fn effective_payload(requested: u64, warnings: &mut Vec<String>) -> usize {
    if requested < HEADER_LEN as u64 {
        warnings.push(format!(
            "payload {requested} B is smaller than the {HEADER_LEN}-byte bench header (id, sequence, timestamps): {HEADER_LEN} B sent"
        ));
    }
    requested.max(HEADER_LEN as u64) as usize
}

fn check_rate(rate: Option<f64>, name: &str) -> Result<()> {
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(BenchError::invalid(format!(
                "{name} must be a positive number"
            )));
        }
    }
    Ok(())
}

fn check_secs(v: f64, name: &str, allow_zero: bool) -> Result<()> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        return Err(BenchError::invalid(format!(
            "{name} must be {}",
            if allow_zero {
                "0 or positive"
            } else {
                "positive"
            }
        )));
    }
    Ok(())
}

/// Publisher-side plan shared by fan-in, latency and swarm: C publishers over K parts into one
/// local wildcard subscriber.
#[allow(clippy::too_many_arguments)]
fn fan_in_plan(
    s: &Setup,
    scenario: &'static str,
    connections: u64,
    workers: u64,
    messages: Option<u64>,
    duration_ns: Option<u64>,
    (rate, phases): (Option<f64>, &[RatePhase]),
    window: Option<u64>,
    publish: (u8, u8, usize, u64, u64),
    topic: &str,
    warmup_ns: u64,
    mut warnings: Vec<String>,
) -> Result<Plan> {
    let (qos, sub_qos, payload, batch, inflight) = publish;
    let keep_alive = f64::from(s.common.keep_alive);
    // The slowest rate the publishers send at.
    let slowest = phases
        .iter()
        .map(|p| p.rate_per_s)
        .reduce(f64::min)
        .or(rate);
    if let Some(r) = slowest {
        let per_connection = connections as f64 / r;
        if keep_alive > 0.0 && per_connection >= keep_alive {
            return Err(BenchError::invalid(format!(
                "each publisher would send every {per_connection:.0} s, longer than --keep-alive {keep_alive} s (publishers do not ping between messages): raise --keep-alive or set it to 0"
            )));
        }
    }
    let processes = processes_for(&s.common, connections);
    let parts = split(connections, processes);
    let remote = parts.len() > 1;
    let chunk = parts.first().map_or(1, |p| p.1);
    let mut senders = Vec::new();
    let mut windows = Vec::new();
    for (i, &(first, n)) in parts.iter().enumerate() {
        let part_window = window.map(|w| share(w, n, connections));
        windows.push(part_window.unwrap_or(u64::MAX));
        let kind = PartKind::Publish(PublishSpec {
            workers: share(workers, n, connections).clamp(1, n),
            qos,
            payload,
            topics: TopicPlan::PerConnection {
                template: topic.to_string(),
            },
            messages: messages.map(|m| {
                // Exact split of the total over the parts.
                let before = (m as u128 * first as u128 / connections as u128) as u64;
                let upto = (m as u128 * (first + n) as u128 / connections as u128) as u64;
                upto - before
            }),
            duration_ns,
            rate: rate.map(|r| r * n as f64 / connections as f64),
            phases: phases
                .iter()
                .map(|p| RatePhase {
                    duration_s: p.duration_s,
                    rate_per_s: p.rate_per_s * n as f64 / connections as f64,
                })
                .collect(),
            batch,
            inflight,
            warmup_ns,
            window: part_window,
        });
        senders.push(PartPlan {
            spec: part_spec(s, i, 'p', first, n, parts.len() as u64, kind),
            remote,
            credit: Arc::new(Credit::new(part_window.unwrap_or(u64::MAX))),
            hook: None,
        });
    }
    let filter = wildcard_filter(topic);
    let hook = window.map(|_| CreditHook {
        chunk,
        window: windows.clone(),
        credits: senders.iter().map(|p| p.credit.clone()).collect(),
    });
    let sub = PartKind::Subscribe(SubscribeSpec {
        qos: sub_qos,
        filter: filter.clone(),
        keys: KeyMode::Stream,
        warmup_ns,
        read_chunk: 64 * 1024,
        phase_offsets_ns: if phases.is_empty() {
            Vec::new()
        } else {
            rate_schedule::offsets_ns(phases)
        },
    });
    let mut sub_spec = part_spec(s, parts.len(), 's', 0, 1, 1, sub);
    sub_spec.connect_rate = None;
    let mut config = base_config(s, processes);
    config.connections = connections;
    config.publishers = Some(connections);
    config.subscribers = Some(1);
    config.workers = Some(workers);
    config.publish_qos = Some(qos);
    config.subscribe_qos = Some(sub_qos);
    config.payload_bytes = Some(payload as u64);
    config.messages = messages;
    config.duration_s = duration_ns.map(crate::clock::ns_to_secs);
    config.warmup_s = Some(crate::clock::ns_to_secs(warmup_ns));
    config.rate_per_s = rate;
    config.pacing = Some(
        if !phases.is_empty() {
            "rate-schedule"
        } else if rate.is_some() {
            "fixed-rate"
        } else {
            "closed-loop"
        }
        .into(),
    );
    config.rate_schedule = (!phases.is_empty()).then(|| phases.to_vec());
    config.window = window;
    config.batch = Some(batch);
    config.inflight = Some(inflight);
    config.topic = Some(topic.to_string());
    config.filter = Some(filter.clone());
    if remote {
        warnings.push(format!(
            "{} worker processes; the closed-loop window is split between them",
            parts.len()
        ));
    }
    Ok(Plan {
        scenario,
        config,
        receivers: vec![PartPlan {
            spec: sub_spec,
            remote: false,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook,
        }],
        senders,
        main_is_receivers: false,
        traffic: true,
        open_loop: rate.is_some() || !phases.is_empty(),
        per_message: PerMessage::One,
        settle_ns: 0,
        hold_ns: 0,
        subscriber_required: Some(filter),
        warnings,
        phases: phases.to_vec(),
        recovery_p99_ms: None,
    })
}

fn plan_fan_in(a: &FanInArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
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
    let phases = match &a.rate_schedule {
        Some(text) => {
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
            phases
        }
        None => Vec::new(),
    };
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
    let window = if a.rate.is_none() && phases.is_empty() {
        Some(a.window.unwrap_or(100_000))
    } else {
        None
    };
    let payload = effective_payload(a.payload, &mut warnings);
    let mut plan = fan_in_plan(
        s,
        "fan-in",
        a.connections,
        workers,
        messages,
        duration_ns,
        (a.rate, &phases),
        window,
        (a.qos, a.sub_qos, payload, a.batch, a.inflight),
        &a.topic,
        0,
        warnings,
    )?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.recovery_p99_ms = a.recovery_p99_ms;
    plan.recovery_p99_ms = a.recovery_p99_ms;
    Ok(plan)
}

fn plan_latency(a: &LatencyArgs, s: &Setup) -> Result<Plan> {
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
    let rate = 1000.0 / a.interval_ms;
    let mut plan = fan_in_plan(
        s,
        "latency",
        1,
        1,
        None,
        Some(secs_to_ns(a.duration)),
        (Some(rate), &[]),
        None,
        (a.qos, a.sub_qos, payload, 1, 64),
        &a.topic,
        secs_to_ns(a.warmup),
        warnings,
    )?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.message_interval_s = Some(a.interval_ms / 1000.0);
    Ok(plan)
}

fn plan_swarm(a: &SwarmArgs, s: &Setup) -> Result<Plan> {
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
    let workers = a.workers.min(a.clients);
    let rate = a.clients as f64 / a.every;
    let mut plan = fan_in_plan(
        s,
        "swarm",
        a.clients,
        workers,
        None,
        Some(secs_to_ns(a.duration)),
        (Some(rate), &[]),
        None,
        (a.qos, a.sub_qos, payload, 1, 16),
        &a.topic,
        secs_to_ns(a.warmup),
        warnings,
    )?;
    plan.config.payload_bytes_requested = Some(a.payload);
    plan.config.message_interval_s = Some(a.every);
    Ok(plan)
}

fn plan_fan_out(a: &FanOutArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
    if a.subscribers == 0 || a.publishers == 0 {
        return Err(BenchError::invalid(
            "--subscribers and --publishers must be at least 1",
        ));
    }
    check_secs(a.duration, "--duration", false)?;
    check_secs(a.warmup, "--warmup", true)?;
    if a.warmup >= a.duration {
        return Err(BenchError::invalid(
            "--warmup must be shorter than --duration",
        ));
    }
    check_rate(a.rate, "--rate")?;
    if a.topic_mode == TopicMode::Own {
        if !a.topic.contains("%i") {
            return Err(BenchError::invalid("--topic-mode own needs %i in --topic"));
        }
        if a.publishers > a.subscribers {
            return Err(BenchError::invalid(
                "--topic-mode own: more publishers than subscribers would leave publishers without a topic",
            ));
        }
    }
    if a.inflight == 0 {
        return Err(BenchError::invalid("--inflight must be at least 1"));
    }
    let payload = effective_payload(a.payload, &mut warnings);
    let rate = a.rate.unwrap_or((a.subscribers as f64 / 10.0).max(1.0));
    let sub_qos = a.sub_qos.unwrap_or(a.qos);
    let warmup_ns = secs_to_ns(a.warmup);
    let template = TopicTemplate::new(&a.topic);
    let topic0 = template.topic(0);
    let (filter, keys, topics, per_message) = match a.topic_mode {
        TopicMode::Own => (
            a.topic.clone(),
            KeyMode::Stream,
            TopicPlan::Cycle {
                template: a.topic.clone(),
                topics: a.subscribers,
                publishers: a.publishers,
            },
            PerMessage::One,
        ),
        TopicMode::Shared => (
            topic0.clone(),
            KeyMode::PerSubscriber {
                publishers: a.publishers,
            },
            TopicPlan::Fixed {
                topic: topic0.clone(),
            },
            PerMessage::EverySubscriber,
        ),
        TopicMode::ShareGroup => (
            format!("$share/{}/{}", a.share_group, topic0),
            KeyMode::Stream,
            TopicPlan::Fixed {
                topic: topic0.clone(),
            },
            PerMessage::One,
        ),
    };
    let processes = processes_for(&s.common, a.subscribers);
    let parts = split(a.subscribers, processes);
    let remote = parts.len() > 1;
    if remote && a.topic_mode == TopicMode::ShareGroup {
        warnings.push(
            "share-group over several processes: a message delivered twice to members in different processes is not seen as a duplicate".into(),
        );
    }
    let receivers = parts
        .iter()
        .enumerate()
        .map(|(i, &(first, n))| PartPlan {
            spec: part_spec(
                s,
                i,
                's',
                first,
                n,
                parts.len() as u64,
                PartKind::Subscribe(SubscribeSpec {
                    qos: sub_qos,
                    filter: filter.clone(),
                    keys,
                    warmup_ns,
                    read_chunk: (payload + 64).max(256),
                    phase_offsets_ns: Vec::new(),
                }),
            ),
            remote,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook: None,
        })
        .collect();
    let mut pub_spec = part_spec(
        s,
        parts.len(),
        'p',
        0,
        a.publishers,
        1,
        PartKind::Publish(PublishSpec {
            workers: a.publishers,
            qos: a.qos,
            payload,
            topics,
            messages: None,
            duration_ns: Some(secs_to_ns(a.duration)),
            rate: Some(rate),
            phases: Vec::new(),
            batch: 16,
            inflight: a.inflight,
            warmup_ns,
            window: None,
        }),
    );
    pub_spec.connect_rate = None;
    let mut config = base_config(s, processes);
    config.connections = a.subscribers;
    config.publishers = Some(a.publishers);
    config.subscribers = Some(a.subscribers);
    config.workers = Some(a.publishers);
    config.publish_qos = Some(a.qos);
    config.subscribe_qos = Some(sub_qos);
    config.payload_bytes_requested = Some(a.payload);
    config.payload_bytes = Some(payload as u64);
    config.duration_s = Some(a.duration);
    config.warmup_s = Some(a.warmup);
    config.rate_per_s = Some(rate);
    config.pacing = Some("fixed-rate".into());
    config.batch = Some(16);
    config.inflight = Some(a.inflight);
    config.topic = Some(a.topic.clone());
    config.filter = Some(filter);
    config.topic_mode = Some(a.topic_mode.label().into());
    Ok(Plan {
        scenario: "fan-out",
        config,
        receivers,
        senders: vec![PartPlan {
            spec: pub_spec,
            remote: false,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook: None,
        }],
        main_is_receivers: true,
        traffic: true,
        open_loop: true,
        per_message,
        settle_ns: 0,
        hold_ns: 0,
        subscriber_required: None,
        warnings,
        phases: Vec::new(),
        recovery_p99_ms: None,
    })
}

fn plan_conn(a: &ConnArgs, s: &Setup) -> Result<Plan> {
    if a.connections == 0 {
        return Err(BenchError::invalid("--connections must be at least 1"));
    }
    check_secs(a.hold, "--hold", true)?;
    check_secs(a.settle, "--settle", true)?;
    let processes = processes_for(&s.common, a.connections);
    let parts = split(a.connections, processes);
    let remote = parts.len() > 1;
    let senders = parts
        .iter()
        .enumerate()
        .map(|(i, &(first, n))| PartPlan {
            spec: part_spec(s, i, 'c', first, n, parts.len() as u64, PartKind::Idle),
            remote,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook: None,
        })
        .collect();
    let mut config = base_config(s, processes);
    config.connections = a.connections;
    config.hold_s = Some(a.hold);
    Ok(Plan {
        scenario: "conn",
        config,
        receivers: Vec::new(),
        senders,
        main_is_receivers: false,
        traffic: false,
        open_loop: false,
        per_message: PerMessage::One,
        settle_ns: secs_to_ns(a.settle),
        hold_ns: secs_to_ns(a.hold),
        subscriber_required: None,
        warnings: Vec::new(),
        phases: Vec::new(),
        recovery_p99_ms: None,
    })
}

/// Runs one scenario (not `compare`) and returns its result (also printed and written to
/// `--json` as the options say).
pub async fn run_scenario(cmd: &BenchCommand, env: &Env) -> Result<BenchResult> {
    let common = cmd
        .common()
        .ok_or_else(|| BenchError::invalid(format!("{} is not a scenario", cmd.name())))?
        .clone();
    validate_common(&common)?;
    procstat::raise_open_files_limit();
    let addr = resolve(&common.host, common.port).await?;
    let setup = Setup {
        client: client_config(&common, addr)?,
        clock: Clock::start(),
        interval_ns: secs_to_ns(common.sample_interval),
        threads: threads_for(&common),
        common,
    };
    let plan = match cmd {
        BenchCommand::FanIn(a) => plan_fan_in(a, &setup)?,
        BenchCommand::Latency(a) => plan_latency(a, &setup)?,
        BenchCommand::FanOut(a) => plan_fan_out(a, &setup)?,
        BenchCommand::Conn(a) => plan_conn(a, &setup)?,
        BenchCommand::Swarm(a) => plan_swarm(a, &setup)?,
        BenchCommand::Compare(_) | BenchCommand::Worker => {
            return Err(BenchError::invalid(format!(
                "{} is not a scenario",
                cmd.name()
            )))
        }
    };
    let result = execute(plan, &setup, env).await?;
    let print = env.print && !setup.common.quiet;
    if print {
        report::print_summary(&result);
    }
    if let Some(path) = &setup.common.json {
        write_json(path, &result)?;
    }
    if let Some(path) = &setup.common.report {
        crate::html::write(path, &crate::html::run_report(&result))?;
    }
    Ok(result)
}

/// Writes a value as pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &std::path::Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).map_err(|source| BenchError::WriteFile {
        path: path.to_path_buf(),
        source,
    })
}

async fn start_parts(plans: Vec<PartPlan>, env: &Env) -> Result<Vec<PartLink>> {
    let mut links = Vec::new();
    for p in plans {
        if p.remote {
            links.push(spawn_remote(p.spec, p.credit, &env.worker_command).await?);
        } else {
            links.push(spawn_local(p.spec, p.credit, p.hook));
        }
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

fn sum_live(links: &[Arc<PartLive>], f: impl Fn(&PartLive) -> u64) -> u64 {
    links.iter().map(|l| f(l)).sum()
}

async fn execute(plan: Plan, s: &Setup, env: &Env) -> Result<BenchResult> {
    let clock = s.clock;
    let common = &s.common;
    let pid = common.broker_pid;
    let started_at_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let machine = procstat::machine_info();
    let (broker_version, tls_session) = probe(&s.client, common.version_wait_ms).await?;
    let mut warnings = plan.warnings;
    let remote_count = plan
        .senders
        .iter()
        .chain(plan.receivers.iter())
        .filter(|p| p.remote)
        .count();

    let (stop_samplers, stop_rx) = watch::channel(false);
    let broker_sampler =
        pid.map(|p| procstat::spawn_sampler(Some(p), clock, s.interval_ns, stop_rx.clone()));
    let (self_samples, self_sampler) =
        procstat::spawn_sampler(None, clock, s.interval_ns, stop_rx.clone());
    let broker_start = pid.and_then(|p| read_process(Some(p)));
    let machine_start = procstat::machine_cpu();
    let connect_start_ns = clock.now_ns();

    let mut receivers = start_parts(plan.receivers, env).await?;
    let recv_connect = await_connected(&mut receivers).await?;
    if let Some(filter) = &plan.subscriber_required {
        let ok: u64 = recv_connect
            .iter()
            .map(|r| r.established - r.subscribe_failures)
            .sum();
        if ok == 0 {
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
            for l in &receivers {
                let _ = l.stop.send(true);
            }
            return Err(BenchError::SubscribeRefused {
                filter: filter.clone(),
                reason,
            });
        }
    }
    let mut senders = start_parts(plan.senders, env).await?;
    let send_connect = await_connected(&mut senders).await?;
    let connected_ns = clock.now_ns();
    let connected_machine = procstat::machine_cpu();

    let sender_live: Vec<Arc<PartLive>> = senders.iter().map(|l| l.live.clone()).collect();
    let receiver_live: Vec<Arc<PartLive>> = receivers.iter().map(|l| l.live.clone()).collect();
    let main_live = if plan.main_is_receivers {
        receiver_live.clone()
    } else {
        sender_live.clone()
    };
    let (stop_progress, progress_rx) = watch::channel(false);
    let progress = if env.print && !common.quiet && common.progress > 0.0 {
        Some(tokio::spawn(report::progress_task(
            plan.scenario,
            plan.traffic,
            clock,
            secs_to_ns(common.progress),
            main_live.clone(),
            sender_live.clone(),
            receiver_live.clone(),
            broker_sampler.as_ref().map(|b| b.0.clone()),
            self_samples.clone(),
            progress_rx,
        )))
    } else {
        None
    };

    if plan.settle_ns > 0 {
        tokio::time::sleep(Duration::from_nanos(plan.settle_ns)).await;
    }
    let broker_connected = pid.and_then(|p| read_process(Some(p)));
    let subscribed: u64 = recv_connect
        .iter()
        .map(|r| r.established - r.subscribe_failures)
        .sum();
    let expected_for = |counted: u64| match plan.per_message {
        PerMessage::One => counted,
        PerMessage::EverySubscriber => counted * subscribed,
    };

    let (phase_start, phase_end, self_phase, machine_phase, broker_phase);
    if plan.traffic {
        let mut go = clock.now_ns() + 20_000_000;
        if !plan.phases.is_empty() {
            // Phases start on time series interval boundaries, so that intervals and phases
            // line up (the recovery figures use the intervals entirely inside a phase).
            let interval = s.interval_ns.max(1);
            go = go.div_ceil(interval) * interval;
        }
        for l in senders.iter().chain(receivers.iter()) {
            let _ = l.go.send(Some(go));
        }
        clock.sleep_until(go).await;
        let broker_go = pid.and_then(|p| read_process(Some(p)));
        let self_go = read_process(None);
        let machine_go = procstat::machine_cpu();
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
        // Drain: wait for outstanding deliveries.
        let drain_start = clock.now_ns();
        let quiet_ns = 1_500_000_000;
        let mut last = u64::MAX;
        let mut last_change = drain_start;
        loop {
            let counted = sum_live(&sender_live, |l| {
                l.counted.load(std::sync::atomic::Ordering::Relaxed)
            });
            let received = sum_live(&receiver_live, |l| {
                l.received.load(std::sync::atomic::Ordering::Relaxed)
            });
            let expected = expected_for(counted);
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
            if now - drain_start > secs_to_ns(common.drain_timeout) {
                warnings.push(format!(
                    "drain timeout ({} s) with {} deliveries missing",
                    common.drain_timeout,
                    expected - received
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let end = clock.now_ns();
        broker_phase = (broker_go, pid.and_then(|p| read_process(Some(p))));
        self_phase = (self_go, read_process(None));
        machine_phase = (machine_go, procstat::machine_cpu());
        phase_start = go;
        phase_end = end;
    } else {
        // conn: the phase measured is the connect phase; then hold.
        broker_phase = (broker_start, broker_connected);
        self_phase = (None, None);
        machine_phase = (machine_start, connected_machine);
        phase_start = connect_start_ns;
        phase_end = connected_ns;
        if plan.hold_ns > 0 {
            tokio::time::sleep(Duration::from_nanos(plan.hold_ns)).await;
        }
    }

    for l in senders.iter().chain(receivers.iter()) {
        let _ = l.stop.send(true);
    }
    let send_reports = await_finished(&mut senders).await?;
    let recv_reports = await_finished(&mut receivers).await?;
    let finished_ns = clock.now_ns();
    let broker_end = pid.and_then(|p| read_process(Some(p)));
    let _ = stop_progress.send(true);
    if let Some(p) = progress {
        let _ = p.await;
    }
    let _ = stop_samplers.send(true);
    let broker_samples = match broker_sampler {
        Some((log, handle)) => {
            let _ = handle.await;
            let v = log.lock().clone();
            v
        }
        None => Vec::new(),
    };
    let _ = self_sampler.await;
    let self_samples = self_samples.lock().clone();

    // ---- assemble ----
    let interval = s.interval_ns.max(1);
    let n_points = (finished_ns.div_ceil(interval)) as usize;
    let (main_connect, main_reports): (Vec<&ConnectReport>, Vec<&PartReport>) =
        if plan.main_is_receivers {
            (recv_connect.iter().collect(), recv_reports.iter().collect())
        } else {
            (send_connect.iter().collect(), send_reports.iter().collect())
        };
    let mut connections = ConnectionStats::default();
    let mut connect_times = coarse_histogram();
    let mut conn_series = vec![0u64; n_points];
    let mut start = u64::MAX;
    let mut end = 0;
    for r in &main_connect {
        connections.attempted += r.attempted;
        connections.established += r.established;
        connections.subscribe_failures += r.subscribe_failures;
        for (k, v) in &r.failures {
            *connections.failures_by_reason.entry(k.clone()).or_default() += v;
        }
        start = start.min(r.start_ns);
        end = end.max(r.end_ns);
        if let Some(h) = hist_from_base64(&r.connect_time_us) {
            merge_hist(&mut connect_times, &h);
        }
        for (i, v) in r.series.iter().enumerate() {
            if i < n_points {
                conn_series[i] += v;
            }
        }
    }
    connections.failed = connections.attempted - connections.established;
    connections.connect_duration_s = end.saturating_sub(start.min(end)) as f64 / 1e9;
    connections.connect_rate_per_s = rate(connections.established, connections.connect_duration_s);
    connections.connect_time =
        (!connect_times.is_empty()).then(|| summarize(&connect_times, 1000, false));
    let mut d_start = u64::MAX;
    let mut d_end = 0;
    for r in &main_reports {
        connections.disconnected += r.disconnected;
        for (k, v) in &r.drops {
            connections.dropped_during_run += v;
            *connections.drops_by_reason.entry(k.clone()).or_default() += v;
        }
        d_start = d_start.min(r.disconnect_start_ns);
        d_end = d_end.max(r.disconnect_end_ns);
    }
    connections.disconnect_duration_s = d_end.saturating_sub(d_start.min(d_end)) as f64 / 1e9;
    connections.disconnect_rate_per_s =
        rate(connections.disconnected, connections.disconnect_duration_s);
    if connections.failed > 0 {
        warnings.push(format!(
            "{} of {} connections failed: {:?}",
            connections.failed, connections.attempted, connections.failures_by_reason
        ));
    }
    if connections.subscribe_failures > 0 {
        warnings.push(format!(
            "{} subscriptions failed",
            connections.subscribe_failures
        ));
    }

    let mut recorder = Recorder::new(interval, 0);
    for r in &recv_reports {
        if let Some(w) = &r.recorder {
            recorder.merge_wire(w);
        }
    }
    let mut sent_series = vec![0u64; n_points];
    let messages = plan.traffic.then(|| {
        let mut m = MessageStats::default();
        let mut last_send = None;
        for r in &send_reports {
            m.sent += r.sent;
            m.sent_counted += r.counted;
            m.acknowledged += r.acked;
            m.window_stalls += r.window_stalls;
            for (k, v) in &r.publish_errors {
                *m.publish_errors.entry(k.clone()).or_default() += v;
            }
            last_send = last_send.max(r.last_send_ns);
            for (i, v) in r.series_sent.iter().enumerate() {
                if i < n_points {
                    sent_series[i] += v;
                }
            }
        }
        m.expected = expected_for(m.sent_counted);
        m.received = recorder.received;
        m.received_counted = recorder.unique_counted;
        m.lost = m.expected.saturating_sub(m.received_counted);
        m.duplicates = recorder.duplicates;
        m.reordered = recorder.reordered;
        m.foreign = recorder.foreign;
        m.success_percent = if m.expected == 0 {
            100.0
        } else {
            100.0 * m.received_counted as f64 / m.expected as f64
        };
        m.send_duration_s = last_send.map_or(0.0, |l| l.saturating_sub(phase_start) as f64 / 1e9);
        m.send_rate_per_s = rate(m.sent, m.send_duration_s);
        m.receive_duration_s = recorder
            .last_ns
            .map_or(0.0, |l| l.saturating_sub(phase_start) as f64 / 1e9);
        m.receive_rate_per_s = rate(m.received, m.receive_duration_s);
        if m.window_stalls > 0 {
            warnings.push(format!(
                "the senders waited more than 1 s for the receiver {} times (messages dropped by the broker do not reopen the window)",
                m.window_stalls
            ));
        }
        m
    });

    let phase_s = phase_end.saturating_sub(phase_start).max(1) as f64 / 1e9;
    let broker = pid.map(|pid| {
        let cpu_seconds = match broker_phase {
            (Some(a), Some(b)) => (b.0 - a.0).max(0.0),
            _ => 0.0,
        };
        let in_phase: Vec<ProcSample> = broker_samples
            .iter()
            .copied()
            .filter(|x| x.t_ns >= phase_start && x.t_ns <= phase_end + interval)
            .collect();
        let peak_cpu = per_interval(&in_phase, interval, n_points)
            .iter()
            .filter_map(|x| x.0)
            .fold(cpu_seconds / phase_s * 100.0, f64::max);
        let delivered = recorder.unique as f64;
        let rss_start = broker_start.map_or(0, |x| x.1);
        let rss_connected = broker_connected.map_or(0, |x| x.1);
        let peak = broker_samples
            .iter()
            .map(|x| x.rss)
            .chain([rss_start, rss_connected, broker_end.map_or(0, |x| x.1)])
            .max()
            .unwrap_or(0);
        let all_established: u64 = recv_connect
            .iter()
            .chain(send_connect.iter())
            .map(|r| r.established)
            .sum();
        BrokerStats {
            pid,
            cpu_seconds,
            cpu_percent_avg: cpu_seconds / phase_s * 100.0,
            cpu_percent_peak: peak_cpu,
            cpu_seconds_per_million_messages: (plan.traffic && delivered > 0.0)
                .then(|| cpu_seconds / delivered * 1e6),
            rss_start_bytes: rss_start,
            rss_connected_bytes: rss_connected,
            rss_peak_bytes: peak,
            rss_end_bytes: broker_end.map_or(0, |x| x.1),
            rss_per_connection_bytes: (all_established > 0)
                .then(|| (rss_connected as f64 - rss_start as f64) / all_established as f64),
        }
    });

    // Bench CPU: this process exactly, workers from their samples.
    let worker_samples: Vec<&Vec<ProcSample>> = send_reports
        .iter()
        .chain(recv_reports.iter())
        .filter(|r| !r.process.is_empty())
        .map(|r| &r.process)
        .collect();
    let self_cpu = match self_phase {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => {
            cpu_at(&self_samples, phase_end).unwrap_or(0.0)
                - cpu_at(&self_samples, phase_start).unwrap_or(0.0)
        }
    };
    let workers_cpu: f64 = worker_samples
        .iter()
        .map(|w| cpu_at(w, phase_end).unwrap_or(0.0) - cpu_at(w, phase_start).unwrap_or(0.0))
        .sum();
    let bench_cpu = (self_cpu + workers_cpu).max(0.0);
    let processes = 1 + remote_count as u64;
    let capacity = 100.0 * (machine.cores as f64).min((s.threads as u64 * processes) as f64);
    let self_intervals = per_interval(&self_samples, interval, n_points);
    let worker_intervals: Vec<Vec<(Option<f64>, Option<u64>)>> = worker_samples
        .iter()
        .map(|w| per_interval(w, interval, n_points))
        .collect();
    let bench_interval_cpu = |i: usize| -> Option<f64> {
        let mut total = self_intervals[i].0?;
        for w in &worker_intervals {
            total += w[i].0.unwrap_or(0.0);
        }
        Some(total)
    };
    let bench_avg = bench_cpu / phase_s * 100.0;
    let first_idx = (phase_start / interval) as usize;
    let last_idx = ((phase_end / interval) as usize).min(n_points.saturating_sub(1));
    let bench_peak = (first_idx..=last_idx)
        .filter(|&i| i < n_points)
        .filter_map(bench_interval_cpu)
        .fold(bench_avg, f64::max);
    let machine_busy = match machine_phase {
        (Some(a), Some(b)) if b.1 > a.1 => 100.0 * (b.0 - a.0) as f64 / (b.1 - a.1) as f64,
        _ => 0.0,
    };
    let saturated = bench_avg > 0.9 * capacity;
    if saturated {
        warnings.push(format!(
            "the load generator was saturated ({bench_avg:.0}% CPU of {capacity:.0}% available): the broker figures are a lower bound; add --threads/--processes or cores"
        ));
    }
    let bench_rss_peak = self_samples.iter().map(|x| x.rss).max().unwrap_or(0)
        + worker_samples
            .iter()
            .map(|w| w.iter().map(|x| x.rss).max().unwrap_or(0))
            .sum::<u64>();
    let bench = BenchStats {
        processes,
        threads: s.threads as u64,
        cpu_seconds: bench_cpu,
        cpu_percent_avg: bench_avg,
        cpu_percent_peak: bench_peak,
        cpu_percent_capacity: capacity,
        saturated,
        machine_cpu_busy_percent: machine_busy,
        rss_peak_bytes: bench_rss_peak,
    };

    let broker_intervals = per_interval(&broker_samples, interval, n_points);
    let mut cumulative = 0;
    let timeseries = (0..n_points)
        .map(|i| {
            cumulative += conn_series[i];
            let bucket = recorder.series.get(i).and_then(|b| b.as_ref());
            let lat = bucket.filter(|b| !b.latency.is_empty()).map(|b| &b.latency);
            TimePoint {
                t_s: (i as u64 + 1) as f64 * interval as f64 / 1e9,
                connections: cumulative,
                sent: sent_series[i],
                received: bucket.map_or(0, |b| b.received),
                latency_p50_us: lat.map(|h| h.value_at_quantile(0.5) as f64),
                latency_p99_us: lat.map(|h| h.value_at_quantile(0.99) as f64),
                latency_max_us: lat.map(|h| h.max() as f64),
                broker_cpu_percent: broker_intervals[i].0,
                broker_rss_bytes: broker_intervals[i].1,
                bench_cpu_percent: bench_interval_cpu(i),
            }
        })
        .collect();

    let rate_schedule = (!plan.phases.is_empty()).then(|| {
        let sent: Vec<PhaseSend> = {
            let mut total = vec![PhaseSend::default(); plan.phases.len()];
            for r in &send_reports {
                for (t, one) in total.iter_mut().zip(&r.phases) {
                    t.add(one);
                }
            }
            total
        };
        schedule_stats(
            &plan.phases,
            plan.recovery_p99_ms,
            phase_start,
            interval,
            &recorder,
            &sent,
            pid.map(|_| broker_samples.as_slice()),
        )
    });
    if let Some(rs) = &rate_schedule {
        let decrease = rs.phases.iter().any(|p| p.recovery.is_some());
        match (rs.recovery_threshold_p99_us, rs.reference_p99_us) {
            (None, reference) if decrease => warnings.push(format!(
                "the last phase did not settle (p99 of its second half {}, or a delivered rate off the offered one): no default latency threshold, so no recovery time; give --recovery-p99-ms",
                reference.map_or("-".into(), report::micros)
            )),
            (Some(_), Some(reference))
                if decrease
                    && rs.recovery_threshold_source == "last-phase"
                    && reference > 100_000.0 =>
            {
                warnings.push(format!(
                    "the recovery threshold is 2 × the last phase's p99 of {}: that presumes this latency is normal; give --recovery-p99-ms otherwise",
                    report::micros(reference)
                ))
            }
            _ => {}
        }
        for (i, p) in rs.phases.iter().enumerate() {
            if rs.recovery_threshold_p99_us.is_some()
                && p.recovery.as_ref().is_some_and(|r| r.recovery_s.is_none())
            {
                warnings.push(format!(
                    "phase {} ({} msg/s after {} msg/s): throughput and latency did not recover before the phase ended",
                    i + 1,
                    report::num(p.offered_rate_per_s),
                    report::num(rs.phases[i - 1].offered_rate_per_s)
                ));
            }
        }
    }

    let has_latency = !recorder.corrected.is_empty();
    let mut config = plan.config;
    config.processes = processes;
    Ok(BenchResult {
        kind: "run".into(),
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "hayate-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        scenario: plan.scenario.into(),
        started_at_unix_ms,
        command_line: redact_command_line(&env.command_line),
        machine,
        target: TargetInfo {
            name: env.target_name.clone(),
            host: common.host.clone(),
            port: common.port,
            address: s.client.addr.to_string(),
            broker_version,
            pid,
            process_command_line: pid.and_then(procstat::process_command_line),
            tls_session,
        },
        config,
        connections,
        messages,
        latency: has_latency.then(|| summarize(&recorder.corrected, 1, plan.open_loop)),
        latency_uncorrected: has_latency.then(|| summarize(&recorder.uncorrected, 1, false)),
        broker,
        bench,
        timeseries,
        rate_schedule,
        warnings,
    })
}

/// The per-phase figures and recovery of a rate-schedule run. `go`: start of the first phase;
/// `interval`: the time series interval (phases start on interval boundaries);
/// `broker`: the broker's samples with `--broker-pid`.
fn schedule_stats(
    phases: &[RatePhase],
    recovery_p99_ms: Option<f64>,
    go: u64,
    interval: u64,
    recorder: &Recorder,
    sent: &[PhaseSend],
    broker: Option<&[ProcSample]>,
) -> RateScheduleStats {
    let bounds: Vec<u64> = rate_schedule::offsets_ns(phases)
        .iter()
        .map(|o| go + o)
        .collect();
    let interval = interval.max(1);
    // Intervals entirely inside [from, to), as indices of the recorder's series.
    let inside =
        |from: u64, to: u64| from.div_ceil(interval)..(to / interval).max(from.div_ceil(interval));
    // Reference: the messages received in the second half of the last phase.
    let n = phases.len();
    let mid = bounds[n - 1] + (bounds[n] - bounds[n - 1]) / 2;
    let mut reference = coarse_histogram();
    for i in inside(mid, bounds[n]) {
        if let Some(Some(b)) = recorder.series.get(i as usize) {
            merge_hist(&mut reference, &b.latency);
        }
    }
    let reference_p99_us =
        (!reference.is_empty()).then(|| reference.value_at_quantile(0.99) as f64);
    let samples: Vec<rate_schedule::IntervalSample> = recorder
        .series
        .iter()
        .enumerate()
        .map(|(i, b)| rate_schedule::IntervalSample {
            start_ns: i as u64 * interval,
            delivered: b.as_ref().map_or(0, |b| b.received),
            p99_us: b
                .as_ref()
                .filter(|b| !b.latency.is_empty())
                .map(|b| b.latency.value_at_quantile(0.99) as f64),
        })
        .collect();
    // Intervals past the last receive have no bucket: they delivered nothing.
    let last = bounds[n].div_ceil(interval);
    let samples: Vec<_> = samples
        .into_iter()
        .chain(
            (recorder.series.len() as u64..last).map(|i| rate_schedule::IntervalSample {
                start_ns: i * interval,
                delivered: 0,
                p99_us: None,
            }),
        )
        .collect();
    let reference_steady = rate_schedule::reference_steady(
        &samples,
        interval,
        (mid, bounds[n]),
        phases[n - 1].rate_per_s,
        reference_p99_us,
    );
    let (threshold, source) = match recovery_p99_ms {
        Some(ms) => (Some(ms * 1000.0), "option"),
        None => (
            reference_p99_us
                .filter(|_| reference_steady)
                .map(rate_schedule::default_threshold_us),
            "last-phase",
        ),
    };
    let stats = phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (start, end) = (bounds[i], bounds[i + 1]);
            let secs = (end - start) as f64 / 1e9;
            let send = sent.get(i).copied().unwrap_or_default();
            let rec = recorder.phases.get(i);
            let delivered = rec.map_or(0, |r| r.delivered);
            let lost = send.sent.saturating_sub(delivered);
            let in_phase: Vec<&ProcSample> = broker
                .unwrap_or_default()
                .iter()
                .filter(|x| x.t_ns > start && x.t_ns <= end)
                .collect();
            let decrease = i > 0 && p.rate_per_s < phases[i - 1].rate_per_s;
            RatePhaseStats {
                start_s: start as f64 / 1e9,
                duration_s: secs,
                offered_rate_per_s: p.rate_per_s,
                offered: send.offered,
                sent: send.sent,
                unsent: send.offered.saturating_sub(send.sent),
                send_rate_per_s: send.sent_in_window as f64 / secs,
                delivered_rate_per_s: rec.map_or(0, |r| r.received_in_window) as f64 / secs,
                delivered,
                lost,
                loss_percent: if send.sent == 0 {
                    0.0
                } else {
                    100.0 * lost as f64 / send.sent as f64
                },
                latency: rec
                    .filter(|r| !r.latency.is_empty())
                    .map(|r| summarize(&r.latency, 1, true)),
                broker_rss_max_bytes: broker.and_then(|_| in_phase.iter().map(|x| x.rss).max()),
                broker_cpu_percent_avg: broker
                    .and_then(|b| Some(100.0 * (cpu_at(b, end)? - cpu_at(b, start)?) / secs)),
                recovery: decrease.then(|| {
                    let r = rate_schedule::recovery(
                        &samples,
                        interval,
                        (start, end),
                        p.rate_per_s,
                        threshold,
                    );
                    RecoveryStats {
                        recovery_s: r.recovery_s,
                        throughput_recovery_s: r.throughput_s,
                        latency_recovery_s: r.latency_s,
                        intervals: r.intervals,
                        good_intervals: r.good_intervals,
                    }
                }),
            }
        })
        .collect();
    RateScheduleStats {
        recovery_threshold_p99_us: threshold,
        recovery_threshold_source: source.into(),
        reference_p99_us,
        reference_steady,
        recovery_rate_tolerance_percent: rate_schedule::RATE_TOLERANCE * 100.0,
        recovery_hold_s: rate_schedule::RECOVERY_HOLD_S,
        phases: stats,
    }
}

fn rate(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_contiguous_and_complete() {
        assert_eq!(split(10, 3), vec![(0, 4), (4, 4), (8, 2)]);
        let line: Vec<String> = "b swarm --psk 0011 --psk-identity id --password=pw -c 3"
            .split(' ')
            .map(String::from)
            .collect();
        assert_eq!(
            redact_command_line(&line).join(" "),
            "b swarm --psk *** --psk-identity id --password=*** -c 3"
        );
        assert_eq!(split(5, 1), vec![(0, 5)]);
        assert_eq!(split(2, 5), vec![(0, 1), (1, 1)]);
        let parts = split(50_000, 4);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 50_000);
    }

    #[test]
    fn shares() {
        assert_eq!(share(100, 1, 4), 25);
        assert_eq!(share(1, 1, 4), 1);
        assert_eq!(share(u64::MAX, 1, 4), u64::MAX);
    }
}
