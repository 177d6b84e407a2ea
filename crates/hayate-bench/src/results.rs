//! The result data model: what a run measured, as written to `--json FILE`.
//!
//! This module is the contract with everything that reads results (the HTML report, scripts,
//! `compare`). Its JSON Schema is `docs/bench-schema.json` (draft 2020-12); a test checks
//! produced results against it. Conventions: times in seconds (`_s`) unless the name says `_us`
//! (microseconds) or `_ns`; sizes in bytes; rates per second; `null` where a figure does not
//! apply or was not measured (for instance broker figures without `--broker-pid`).
//! Bump [`SCHEMA_VERSION`] on any incompatible change.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of this data model.
pub const SCHEMA_VERSION: u32 = 1;

/// The result of one scenario run against one target (`kind` = `"run"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    /// Always `"run"` (distinguishes it from a [`CompareResult`]).
    pub kind: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The tool that produced this result.
    pub tool: ToolInfo,
    /// Scenario name: `fan-in`, `latency`, `fan-out`, `conn` or `swarm`.
    pub scenario: String,
    /// Wall-clock start of the run, milliseconds since the Unix epoch.
    pub started_at_unix_ms: u64,
    /// The command line of the process that ran it (arguments as given).
    pub command_line: Vec<String>,
    /// The machine the bench ran on (and, on loopback, the broker too).
    pub machine: MachineInfo,
    /// The broker under test.
    pub target: TargetInfo,
    /// The effective settings of the run (after defaults and adjustments).
    pub config: RunConfig,
    /// Connection establishment and teardown of the scenario's main connections (publishers
    /// in fan-in and swarm, subscribers in fan-out, all in conn).
    pub connections: ConnectionStats,
    /// Message counts, rates and delivery checks; `null` for `conn` (no messages).
    pub messages: Option<MessageStats>,
    /// End-to-end latency measured from the intended send time (coordinated-omission
    /// corrected in fixed-rate runs; equal to the actual send time in closed-loop runs), after
    /// the warm-up; `null` when no message was received.
    pub latency: Option<LatencySummary>,
    /// Latency measured from the actual send time (not corrected); `null` when no message was
    /// received.
    pub latency_uncorrected: Option<LatencySummary>,
    /// Broker process figures; `null` without `--broker-pid`.
    pub broker: Option<BrokerStats>,
    /// The load generator's own CPU use.
    pub bench: BenchStats,
    /// One point per sampling interval (`config.sample_interval_s`), from the start of the run.
    pub timeseries: Vec<TimePoint>,
    /// `fan-in --rate-schedule`: figures per phase of the schedule and the recovery after each
    /// rate decrease; `null` for other runs.
    #[serde(default)]
    pub rate_schedule: Option<RateScheduleStats>,
    /// Things the reader should know: adjusted options, saturation, stalls, incomplete runs.
    pub warnings: Vec<String>,
}

/// Name and version of the load generator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolInfo {
    /// `"hayate-bench"`.
    pub name: String,
    /// Crate version.
    pub version: String,
}

/// The machine, read from `/proc` and `uname`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineInfo {
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// CPU model name from `/proc/cpuinfo`, when present.
    pub cpu_model: Option<String>,
    /// `MemTotal` from `/proc/meminfo`, bytes.
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Operating system name (`uname -s`).
    pub os: String,
    /// Host name.
    pub hostname: String,
    /// Soft limit of open files per process when the run started.
    pub open_files_limit: u64,
}

/// The broker under test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Target name given to `compare` (`hayate`, `mosquitto`...); `null` in a single run.
    pub name: Option<String>,
    /// Host as given.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Resolved socket address.
    pub address: String,
    /// Payload of `$SYS/broker/version` when the broker published one within
    /// `version_wait_ms` of subscribing; `null` otherwise.
    pub broker_version: Option<String>,
    /// `--broker-pid`, when given.
    pub pid: Option<u32>,
    /// The broker's command line from `/proc/PID/cmdline`, when the pid is known.
    pub process_command_line: Option<String>,
    /// TLS protocol and cipher suite the first connection negotiated
    /// (`"TLSv1.3 TLS13_AES_256_GCM_SHA384"`, `"TLSv1.2 PSK-AES256-GCM-SHA384"`); `null` over
    /// plain TCP.
    #[serde(default)]
    pub tls_session: Option<String>,
}

/// Effective settings of a run. Fields that do not apply to the scenario are `null`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunConfig {
    /// MQTT protocol version: `"3.1.1"` or `"5"`.
    pub mqtt_version: String,
    /// What the clients speak underneath MQTT: `"tcp"`, `"tls"` (certificates) or `"tls-psk"`.
    #[serde(default = "tcp")]
    pub transport: String,
    /// Main connections asked for (publishers, subscribers or idle clients).
    pub connections: u64,
    /// Publisher connections.
    pub publishers: Option<u64>,
    /// Subscriber connections.
    pub subscribers: Option<u64>,
    /// Sender tasks driving the publishers (the write-ups' "parallel workers").
    pub workers: Option<u64>,
    /// QoS of the publishers' PUBLISH packets.
    pub publish_qos: Option<u8>,
    /// QoS of the subscriptions.
    pub subscribe_qos: Option<u8>,
    /// Payload size asked for, bytes.
    pub payload_bytes_requested: Option<u64>,
    /// Payload size used (at least the 24-byte bench header), bytes.
    pub payload_bytes: Option<u64>,
    /// Messages to send (closed or open loop), when bounded by a count.
    pub messages: Option<u64>,
    /// Run length of the traffic phase, seconds, when bounded by time.
    pub duration_s: Option<f64>,
    /// Warm-up excluded from latency and loss, seconds.
    pub warmup_s: Option<f64>,
    /// Total fixed publish rate, messages/s; `null` for closed-loop (as fast as possible) and
    /// for a rate schedule (see `rate_schedule`).
    pub rate_per_s: Option<f64>,
    /// `"fixed-rate"` (open loop), `"rate-schedule"` (open loop, the rate changing by phase)
    /// or `"closed-loop"`; `null` without traffic.
    pub pacing: Option<String>,
    /// fan-in `--shape`: `"batch"` (the capacity test: up to `batch` PUBLISH per write),
    /// `"open"` (one PUBLISH per write at a fixed rate per connection, acknowledgements not
    /// waited for) or `"paho"` (one PUBLISH per write, each waited for: write, PUBACK or
    /// PUBCOMP); `null` for the other scenarios.
    #[serde(default)]
    pub shape: Option<String>,
    /// fan-in `--shape open|paho` at a fixed rate: messages/s of each publisher connection;
    /// `null` otherwise.
    #[serde(default)]
    pub rate_per_connection_per_s: Option<f64>,
    /// `fan-in --rate-schedule`: the phases, run in order; `null` otherwise.
    #[serde(default)]
    pub rate_schedule: Option<Vec<RatePhase>>,
    /// `--recovery-p99-ms`: the p99 latency bound of the recovery computation, milliseconds;
    /// `null` when not given (the default threshold applies, see `RateScheduleStats`).
    #[serde(default)]
    pub recovery_p99_ms: Option<f64>,
    /// Closed loop: messages the senders may run ahead of the receiver.
    pub window: Option<u64>,
    /// Most messages written to one connection in one write.
    pub batch: Option<u64>,
    /// Unacknowledged QoS 1/2 messages per publisher connection.
    pub inflight: Option<u64>,
    /// Topic template (`%i` = index).
    pub topic: Option<String>,
    /// Subscription filter (fan-in, swarm, shared fan-out) or template (fan-out, own topics).
    pub filter: Option<String>,
    /// Fan-out topic mode: `own`, `shared` or `share-group`.
    pub topic_mode: Option<String>,
    /// Clean session / clean start.
    pub clean_session: bool,
    /// Keep alive, seconds.
    pub keep_alive_s: u16,
    /// Connection attempts in flight at once.
    pub connect_concurrency: u64,
    /// Target connect rate, connections/s; `null` = as fast as the concurrency allows.
    pub connect_rate_per_s: Option<f64>,
    /// Local source addresses used round-robin (empty = the system's choice).
    pub source_ips: Vec<String>,
    /// `--targets`/`--pub-targets`: brokers of the publishers (and conn/swarm clients), round
    /// robin by connection index; empty = the one target.
    #[serde(default)]
    pub publisher_targets: Vec<String>,
    /// `--targets`/`--sub-targets`: brokers of the subscribers, round robin by index; empty =
    /// the one target.
    #[serde(default)]
    pub subscriber_targets: Vec<String>,
    /// With several targets: the fraction of messages (fan-out with own topics) or of
    /// publisher–subscriber pairs (the other scenarios) whose two ends connect to different
    /// brokers, i.e. that a cluster must forward between nodes; `null` with one target.
    #[serde(default)]
    pub cross_target_fraction: Option<f64>,
    /// Load generator processes.
    pub processes: u64,
    /// Runtime threads per process.
    pub threads: u64,
    /// Time series interval, seconds.
    pub sample_interval_s: f64,
    /// conn: seconds the connections were held open after connecting.
    pub hold_s: Option<f64>,
    /// swarm: seconds between two messages of one client.
    pub message_interval_s: Option<f64>,
}

fn tcp() -> String {
    "tcp".into()
}

/// One phase of a rate schedule (`--rate-schedule SECONDS@RATE,...`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatePhase {
    /// Length of the phase, seconds.
    pub duration_s: f64,
    /// Offered rate, all publishers together, messages/s.
    pub rate_per_s: f64,
}

/// A rate-schedule run phase by phase, and the recovery after each rate decrease.
///
/// Recovery (see `crates/hayate-bench/README.md`): after a phase whose offered rate is lower
/// than the previous phase's, a time series interval entirely inside the phase is *good* when
/// its delivered rate is within `recovery_rate_tolerance_percent` of the offered rate and its
/// p99 latency (from the intended send time) is at most `recovery_threshold_p99_us`; the
/// recovery time runs from the start of the phase to the start of the first good interval
/// that begins a run of good intervals lasting `recovery_hold_s` (or until the phase ends).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateScheduleStats {
    /// The p99 bound of a good interval, µs; `null` when it could not be determined (no
    /// `--recovery-p99-ms`, and the second half of the last phase was not steady).
    pub recovery_threshold_p99_us: Option<f64>,
    /// Where the bound comes from: `"option"` (`--recovery-p99-ms`) or `"last-phase"` (twice
    /// `reference_p99_us`, at least 1 ms, when `reference_steady`).
    pub recovery_threshold_source: String,
    /// p99 latency of the messages received in the second half of the last phase (its final,
    /// steady half), µs; `null` when none was received then.
    pub reference_p99_us: Option<f64>,
    /// True when that half looks steady: every interval of it delivered within the tolerance
    /// of the offered rate, and its p99 is shorter than the half itself (no message sent
    /// before the half began is still arriving). The default threshold needs it: when false
    /// and without `--recovery-p99-ms` there is no threshold and no recovery time.
    pub reference_steady: bool,
    /// Largest deviation of a good interval's delivered rate from the offered rate, percent.
    pub recovery_rate_tolerance_percent: f64,
    /// How long the criteria must keep holding from the recovery point on (or until the end
    /// of the phase, when less remains), seconds.
    pub recovery_hold_s: f64,
    /// One entry per phase, in order.
    pub phases: Vec<RatePhaseStats>,
}

/// One phase of a rate-schedule run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RatePhaseStats {
    /// Start of the phase, seconds since the start of the run (the clock of `timeseries`).
    pub start_s: f64,
    /// Length of the phase, seconds.
    pub duration_s: f64,
    /// Offered rate: the schedule's rate for the phase, messages/s.
    pub offered_rate_per_s: f64,
    /// Messages the schedule had due in the phase (intended send time inside it).
    pub offered: u64,
    /// Of those, messages the publishers wrote.
    pub sent: u64,
    /// `offered - sent`: messages due in the phase that the publishers had not written when it
    /// ended, because they were held back (the broker's back-pressure, or the load
    /// generator's own limits); abandoned when the phase ended, not queued.
    pub unsent: u64,
    /// Achieved send rate: messages written during the phase (by actual send time) per
    /// second.
    pub send_rate_per_s: f64,
    /// Delivered rate: first copies received during the phase (whenever they were intended)
    /// per second.
    pub delivered_rate_per_s: f64,
    /// First copies received of the messages intended in the phase (also those received
    /// after it ended).
    pub delivered: u64,
    /// `sent - delivered` (never negative): messages of the phase that were written but never
    /// received (QoS 0 drops, queue limits...).
    pub lost: u64,
    /// `100 * lost / sent` (0 when nothing was sent).
    pub loss_percent: f64,
    /// Latency of the messages intended in the phase, from their intended send time
    /// (coordinated-omission corrected); `null` when none was received.
    pub latency: Option<LatencySummary>,
    /// Highest broker RSS sampled during the phase, bytes; `null` without `--broker-pid`.
    pub broker_rss_max_bytes: Option<u64>,
    /// Average broker CPU during the phase, percent of one core; `null` without
    /// `--broker-pid`.
    pub broker_cpu_percent_avg: Option<f64>,
    /// After a rate decrease (offered rate below the previous phase's): how long until
    /// throughput and latency were back to normal; `null` for the other phases.
    pub recovery: Option<RecoveryStats>,
}

/// Recovery of a phase after a rate decrease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryStats {
    /// Seconds from the start of the phase to the start of the first good interval that
    /// begins a run of good intervals lasting `recovery_hold_s` (or until the end of the
    /// phase); `null` when the phase ended without one (not recovered).
    pub recovery_s: Option<f64>,
    /// The same with the delivered-rate criterion alone.
    pub throughput_recovery_s: Option<f64>,
    /// The same with the p99 criterion alone.
    pub latency_recovery_s: Option<f64>,
    /// Time series intervals entirely inside the phase (the ones assessed).
    pub intervals: u64,
    /// Of those, intervals meeting both criteria.
    pub good_intervals: u64,
}

/// Connection establishment and teardown.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ConnectionStats {
    /// Connection attempts.
    pub attempted: u64,
    /// Attempts that got a successful CONNACK.
    pub established: u64,
    /// Attempts that failed.
    pub failed: u64,
    /// Failures by reason: `refused`, `timeout`, `reset`, `closed`, `addr-unavailable`,
    /// `too-many-open-files`, `connack-0xNN` (with the code), `io-...`, and TLS handshake
    /// failures `tls-...` (`tls-alert-decrypt-error`, `tls-unknown-issuer`, `tls-closed`...).
    pub failures_by_reason: BTreeMap<String, u64>,
    /// Subscriptions refused or failed (subscriber connections).
    pub subscribe_failures: u64,
    /// Seconds from the first attempt to the last completion.
    pub connect_duration_s: f64,
    /// `established / connect_duration_s`.
    pub connect_rate_per_s: f64,
    /// Time from TCP connect to CONNACK per successful attempt; `null` when none succeeded.
    pub connect_time: Option<LatencySummary>,
    /// Connections closed by the broker (or the network) during the run.
    pub dropped_during_run: u64,
    /// Drops by reason.
    pub drops_by_reason: BTreeMap<String, u64>,
    /// Connections closed with DISCONNECT at the end.
    pub disconnected: u64,
    /// Seconds the disconnects took.
    pub disconnect_duration_s: f64,
    /// `disconnected / disconnect_duration_s`.
    pub disconnect_rate_per_s: f64,
}

/// Message counts, rates and delivery checks.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct MessageStats {
    /// PUBLISH packets written by the publishers (warm-up included).
    pub sent: u64,
    /// Writes (flushes of a publisher connection's buffer) that carried PUBLISH packets:
    /// `sent / publish_writes` is the messages per write (1 for fan-in `--shape open|paho`).
    #[serde(default)]
    pub publish_writes: u64,
    /// Of those, messages whose intended send time is after the warm-up.
    pub sent_counted: u64,
    /// QoS 1/2 publishes acknowledged by the broker (PUBACK / PUBCOMP).
    pub acknowledged: u64,
    /// Publish acknowledgements with an error reason code, by code (`puback-0x97`...).
    pub publish_errors: BTreeMap<String, u64>,
    /// Deliveries expected after the warm-up: `sent_counted` times the subscribers each
    /// message matches.
    pub expected: u64,
    /// PUBLISH packets received by the subscribers (duplicates included).
    pub received: u64,
    /// First copies received of messages intended after the warm-up.
    pub received_counted: u64,
    /// `expected - received_counted` (never negative).
    pub lost: u64,
    /// Copies of messages already received (QoS 0/1 may have some; QoS 2 must have none).
    pub duplicates: u64,
    /// Messages that arrived after a later message of the same publisher (per-publisher order
    /// broken; QoS 2 must have none).
    pub reordered: u64,
    /// PUBLISH packets received whose payload is not a bench payload.
    pub foreign: u64,
    /// `100 * received_counted / expected` (100 when nothing was expected).
    pub success_percent: f64,
    /// Seconds from the start of the traffic phase to the last send.
    pub send_duration_s: f64,
    /// `sent / send_duration_s`.
    pub send_rate_per_s: f64,
    /// Seconds from the start of the traffic phase to the last receive.
    pub receive_duration_s: f64,
    /// `received / receive_duration_s`.
    pub receive_rate_per_s: f64,
    /// Closed loop: times a sender group waited more than a second for the receiver and was
    /// let go on (the window never fully reopens when the broker drops messages).
    pub window_stalls: u64,
}

/// One point of a percentile distribution.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PercentilePoint {
    /// Percentile, 0–100.
    pub percentile: f64,
    /// Value at that percentile, µs.
    pub value_us: f64,
}

/// Latency figures, microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// True when measured from the intended send time of a fixed-rate schedule.
    pub corrected_for_coordinated_omission: bool,
    /// Percentile distribution (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99,
    /// 99.999, 100) for plotting.
    pub distribution: Vec<PercentilePoint>,
    /// The full histogram: base64 of its HdrHistogram V2 encoding, values in ns; `null` for
    /// coarse (µs) histograms.
    pub histogram_v2: Option<String>,
}

/// Broker process figures from `/proc/PID`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrokerStats {
    /// The pid sampled.
    pub pid: u32,
    /// CPU seconds (user + system) used during the traffic phase (conn: the connect phase).
    pub cpu_seconds: f64,
    /// Average CPU use during that phase, percent of one core.
    pub cpu_percent_avg: f64,
    /// Highest per-interval CPU use, percent of one core.
    pub cpu_percent_peak: f64,
    /// CPU seconds per million messages delivered to the bench's subscribers (fan-in: per
    /// million published); `null` when none were delivered.
    pub cpu_seconds_per_million_messages: Option<f64>,
    /// RSS before the bench connected, bytes.
    pub rss_start_bytes: u64,
    /// RSS once all connections were established (after the settle time in conn), bytes.
    pub rss_connected_bytes: u64,
    /// Highest RSS seen, bytes.
    pub rss_peak_bytes: u64,
    /// RSS at the end, after the bench disconnected, bytes.
    pub rss_end_bytes: u64,
    /// `(rss_connected - rss_start) / established connections`, bytes; `null` without
    /// connections.
    pub rss_per_connection_bytes: Option<f64>,
}

/// The load generator's own CPU use (all its processes).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct BenchStats {
    /// Processes (1 + worker processes).
    pub processes: u64,
    /// Runtime threads per process.
    pub threads: u64,
    /// CPU seconds used during the traffic phase, all processes.
    pub cpu_seconds: f64,
    /// Average CPU use during the traffic phase, percent of one core.
    pub cpu_percent_avg: f64,
    /// Highest per-interval CPU use, percent of one core.
    pub cpu_percent_peak: f64,
    /// What the bench could use at most: `100 * min(cores, processes * threads)`.
    pub cpu_percent_capacity: f64,
    /// True when the average exceeded 90% of the capacity: the load generator may be the
    /// bottleneck and the figures a lower bound of the broker's capacity.
    pub saturated: bool,
    /// Whole-machine CPU busy during the traffic phase, percent of all cores (from
    /// `/proc/stat`); near 100 means bench and broker compete for the cores.
    pub machine_cpu_busy_percent: f64,
    /// Peak RSS of the bench processes (sum), bytes.
    pub rss_peak_bytes: u64,
}

/// One interval of the time series. Counts are for the interval ending at `t_s`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct TimePoint {
    /// End of the interval, seconds since the start of the run.
    pub t_s: f64,
    /// Main connections established by then (cumulative).
    pub connections: u64,
    /// Messages sent in the interval.
    pub sent: u64,
    /// Messages received in the interval.
    pub received: u64,
    /// Median latency of the messages received in the interval (corrected), µs.
    pub latency_p50_us: Option<f64>,
    /// 99th percentile, µs.
    pub latency_p99_us: Option<f64>,
    /// Largest, µs.
    pub latency_max_us: Option<f64>,
    /// Broker CPU in the interval, percent of one core.
    pub broker_cpu_percent: Option<f64>,
    /// Broker RSS at the end of the interval, bytes.
    pub broker_rss_bytes: Option<u64>,
    /// Bench CPU (all processes) in the interval, percent of one core.
    pub bench_cpu_percent: Option<f64>,
}

/// Result of `compare` (`kind` = `"compare"`): every run plus medians side by side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareResult {
    /// Always `"compare"`.
    pub kind: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The tool.
    pub tool: ToolInfo,
    /// Scenario compared.
    pub scenario: String,
    /// The command line.
    pub command_line: Vec<String>,
    /// The machine.
    pub machine: MachineInfo,
    /// Target names in the order given; ratios are relative to the first.
    pub targets: Vec<String>,
    /// Runs per target.
    pub repeat: u64,
    /// Every run, in the order run (targets alternate).
    pub runs: Vec<BenchResult>,
    /// One row per metric: the median over the repeats per target, and the ratio of each
    /// target to the first.
    pub rows: Vec<CompareRow>,
}

/// One metric of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareRow {
    /// Metric name (`receive_rate_per_s`, `latency_p99_us`...).
    pub metric: String,
    /// Unit (`msg/s`, `µs`, `bytes`...).
    pub unit: String,
    /// `"higher"` or `"lower"`: which direction is better.
    pub better: String,
    /// Median per target (`null` when not measured).
    pub medians: BTreeMap<String, Option<f64>>,
    /// Median of the target divided by the median of the first target.
    pub ratio_to_first: BTreeMap<String, Option<f64>>,
}
