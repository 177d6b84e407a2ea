//! The plan of a run: its parts (slices of connections, local or in worker processes), the
//! effective settings recorded in results, and what the run waits for. Fan-out and conn are
//! planned here; the publisher scenarios (fan-in, latency, swarm) in `fan_in`.

use super::{split, CONNECTIONS_PER_PROCESS};
use crate::args::{CommonArgs, ConnArgs, FanOutArgs, Shape, TopicMode};
use crate::client::{ClientConfig, TopicTemplate};
use crate::clock::{secs_to_ns, Clock};
use crate::engine::{KeyMode, PartKind, PartSpec, PublishSpec, SubscribeSpec, TopicPlan};
use crate::error::{BenchError, Result};
use crate::payload::HEADER_LEN;
use crate::rate_schedule::RatePhase;
use crate::results::RunConfig;
use crate::stats::{Credit, CreditHook};
use std::sync::Arc;

/// How many deliveries each counted message should make.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum PerMessage {
    One,
    EverySubscriber,
}

/// One part of a run: what it runs, and where.
pub(super) struct PartPlan {
    pub(super) spec: PartSpec,
    pub(super) remote: bool,
    pub(super) credit: Arc<Credit>,
    pub(super) hook: Option<CreditHook>,
}

/// Everything a run needs to know before it starts.
pub(super) struct Plan {
    pub(super) scenario: &'static str,
    pub(super) config: RunConfig,
    pub(super) receivers: Vec<PartPlan>,
    pub(super) senders: Vec<PartPlan>,
    pub(super) main_is_receivers: bool,
    pub(super) traffic: bool,
    pub(super) open_loop: bool,
    pub(super) per_message: PerMessage,
    pub(super) settle_ns: u64,
    pub(super) hold_ns: u64,
    pub(super) subscriber_required: Option<String>,
    pub(super) warnings: Vec<String>,
    /// `--rate-schedule` phases (empty otherwise).
    pub(super) phases: Vec<RatePhase>,
    /// `--recovery-p99-ms`.
    pub(super) recovery_p99_ms: Option<f64>,
}

/// The options and the client settings shared by every part of a run, and its clock.
pub(super) struct Setup {
    pub(super) common: CommonArgs,
    pub(super) client: ClientConfig,
    pub(super) clock: Clock,
    pub(super) interval_ns: u64,
    pub(super) threads: usize,
}

pub(super) fn base_config(s: &Setup, processes: u64) -> RunConfig {
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
        publisher_targets: s
            .client
            .spread
            .publishers
            .iter()
            .map(|a| a.to_string())
            .collect(),
        subscriber_targets: s
            .client
            .spread
            .subscribers
            .iter()
            .map(|a| a.to_string())
            .collect(),
        processes,
        threads: s.threads as u64,
        sample_interval_s: c.sample_interval,
        ..RunConfig::default()
    }
}

pub(super) fn part_spec(
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

pub(super) fn processes_for(common: &CommonArgs, connections: u64) -> u64 {
    common
        .processes
        .map(|p| p as u64)
        .unwrap_or_else(|| connections.div_ceil(CONNECTIONS_PER_PROCESS).max(1))
        .min(connections.max(1))
}

pub(super) fn effective_payload(requested: u64, warnings: &mut Vec<String>) -> usize {
    if requested < HEADER_LEN as u64 {
        warnings.push(format!(
            "payload {requested} B is smaller than the {HEADER_LEN}-byte bench header (id, sequence, timestamps): {HEADER_LEN} B sent"
        ));
    }
    requested.max(HEADER_LEN as u64) as usize
}

pub(super) fn check_rate(rate: Option<f64>, name: &str) -> Result<()> {
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(BenchError::invalid(format!(
                "{name} must be a positive number"
            )));
        }
    }
    Ok(())
}

pub(super) fn check_secs(v: f64, name: &str, allow_zero: bool) -> Result<()> {
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

fn check_fan_out(a: &FanOutArgs) -> Result<()> {
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
    Ok(())
}

/// The subscription filter, stream keys, publisher topics and deliveries per message of a
/// fan-out topic mode.
fn fan_out_topics(a: &FanOutArgs) -> (String, KeyMode, TopicPlan, PerMessage) {
    let template = TopicTemplate::new(&a.topic);
    let topic0 = template.topic(0);
    match a.topic_mode {
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
    }
}

/// The fan-out subscribers: one part per process.
fn fan_out_receivers(s: &Setup, parts: &[(u64, u64)], subscribe: SubscribeSpec) -> Vec<PartPlan> {
    let remote = parts.len() > 1;
    parts
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
                PartKind::Subscribe(subscribe.clone()),
            ),
            remote,
            credit: Arc::new(Credit::new(u64::MAX)),
            hook: None,
        })
        .collect()
}

fn fan_out_config(
    a: &FanOutArgs,
    s: &Setup,
    processes: u64,
    (payload, rate, sub_qos): (usize, f64, u8),
    filter: String,
) -> RunConfig {
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
    config
}

pub(super) fn plan_fan_out(a: &FanOutArgs, s: &Setup) -> Result<Plan> {
    let mut warnings = Vec::new();
    check_fan_out(a)?;
    let payload = effective_payload(a.payload, &mut warnings);
    let rate = a.rate.unwrap_or((a.subscribers as f64 / 10.0).max(1.0));
    let sub_qos = a.sub_qos.unwrap_or(a.qos);
    let warmup_ns = secs_to_ns(a.warmup);
    let (filter, keys, topics, per_message) = fan_out_topics(a);
    let processes = processes_for(&s.common, a.subscribers);
    let parts = split(a.subscribers, processes);
    if parts.len() > 1 && a.topic_mode == TopicMode::ShareGroup {
        warnings.push(
            "share-group over several processes: a message delivered twice to members in different processes is not seen as a duplicate".into(),
        );
    }
    let receivers = fan_out_receivers(
        s,
        &parts,
        SubscribeSpec {
            qos: sub_qos,
            filter: filter.clone(),
            keys,
            warmup_ns,
            read_chunk: (payload + 64).max(256),
            phase_offsets_ns: Vec::new(),
        },
    );
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
            shape: Shape::Batch,
        }),
    );
    pub_spec.connect_rate = None;
    Ok(Plan {
        scenario: "fan-out",
        config: fan_out_config(a, s, processes, (payload, rate, sub_qos), filter),
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

pub(super) fn plan_conn(a: &ConnArgs, s: &Setup) -> Result<Plan> {
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
