//! Command-line options of `hayate bench` (clap derive). The same structs travel to worker
//! processes as JSON, so they also derive serde.

use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `hayate bench`: an MQTT load generator for any broker.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The scenario to run.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// Scenarios (one per subcommand).
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum BenchCommand {
    /// S1: C publisher connections driven by P workers into one wildcard subscriber.
    ///
    /// By default a capacity test (--shape batch: several PUBLISH per write, closed loop);
    /// --shape open and --shape paho send the way device fleets and paho clients do (one
    /// PUBLISH per write).
    FanIn(FanInArgs),
    /// S2: one publisher at a fixed interval, one subscriber; latency percentiles over time.
    Latency(LatencyArgs),
    /// S4: S subscribers (own topics, one shared topic, or a $share group) fed by a few
    /// publishers at a total rate.
    FanOut(FanOutArgs),
    /// Open and hold C connections; connect rate, failures, broker RSS per connection.
    Conn(ConnArgs),
    /// S3: many long-lived low-rate clients (one message every few seconds each).
    Swarm(SwarmArgs),
    /// Run one scenario against several named targets, alternating, and print medians and
    /// ratios side by side.
    Compare(CompareArgs),
    /// Internal: a worker process of a multi-process run (reads its part from stdin).
    #[command(name = "__worker", hide = true)]
    Worker,
}

/// MQTT protocol version of the bench's clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (protocol level 4).
    #[value(name = "3.1.1", alias = "311", alias = "4")]
    V311,
    /// MQTT 5.0.
    #[value(name = "5", alias = "5.0")]
    V5,
}

impl MqttVersion {
    /// The codec's version.
    pub fn protocol(self) -> hayate_codec::ProtocolVersion {
        match self {
            MqttVersion::V311 => hayate_codec::ProtocolVersion::V311,
            MqttVersion::V5 => hayate_codec::ProtocolVersion::V5,
        }
    }

    /// As written in results.
    pub fn label(self) -> &'static str {
        match self {
            MqttVersion::V311 => "3.1.1",
            MqttVersion::V5 => "5",
        }
    }
}

/// How fan-in publishers write and wait (`--shape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
pub enum Shape {
    /// Capacity test: up to `--batch` PUBLISH packets per write; closed loop within
    /// `--window` of the subscriber, or open loop with `--rate`/`--rate-schedule`.
    #[default]
    Batch,
    /// Open loop at a fixed rate per connection (`--rate-per-connection`, or `--rate` spread
    /// over the connections); every PUBLISH is its own write; QoS 1/2 acknowledgements are not
    /// waited for (up to `--inflight` outstanding per connection).
    Open,
    /// Like a paho client: each worker takes the next of its connections round robin, writes
    /// one PUBLISH and waits for it to complete (QoS 0: the write returned; QoS 1: PUBACK;
    /// QoS 2: PUBCOMP) before the next. As fast as that goes within `--window`, or paced with
    /// `--rate-per-connection`/`--rate`.
    Paho,
}

impl Shape {
    /// As written in results.
    pub fn label(self) -> &'static str {
        match self {
            Shape::Batch => "batch",
            Shape::Open => "open",
            Shape::Paho => "paho",
        }
    }

    /// True when every PUBLISH is written on its own (open and paho).
    pub fn one_per_write(self) -> bool {
        self != Shape::Batch
    }
}

/// How fan-out subscribers pick their topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum TopicMode {
    /// Each subscriber its own topic (the template with `%i` = subscriber index); every
    /// message reaches one subscriber.
    Own,
    /// All subscribers on one topic; every message reaches every subscriber.
    Shared,
    /// All subscribers in one `$share/GROUP/` group on one topic; every message reaches one.
    ShareGroup,
}

impl TopicMode {
    /// As written in results.
    pub fn label(self) -> &'static str {
        match self {
            TopicMode::Own => "own",
            TopicMode::Shared => "shared",
            TopicMode::ShareGroup => "share-group",
        }
    }
}

/// Options every scenario takes.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct CommonArgs {
    /// Broker host name or address.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Broker port.
    #[arg(long, default_value_t = 1883)]
    pub port: u16,
    /// Spread the clients over several brokers (the nodes of a cluster): `HOST:PORT,...`.
    /// Connection i of each role (publishers p0, p1, ...; subscribers s0, s1, ...) goes to
    /// entry i mod N. Replaces --host/--port; --pub-targets/--sub-targets override it per role.
    #[arg(long, value_name = "HOST:PORT,...")]
    #[serde(default)]
    pub targets: Option<String>,
    /// Brokers of the publishers (and of conn and swarm clients), round robin by index.
    #[arg(long, value_name = "HOST:PORT,...")]
    #[serde(default)]
    pub pub_targets: Option<String>,
    /// Brokers of the subscribers, round robin by index.
    #[arg(long, value_name = "HOST:PORT,...")]
    #[serde(default)]
    pub sub_targets: Option<String>,
    /// MQTT version of the clients.
    #[arg(long = "mqtt", value_enum, default_value = "3.1.1")]
    pub mqtt: MqttVersion,
    /// User name sent in CONNECT.
    #[arg(long)]
    pub username: Option<String>,
    /// Password sent in CONNECT.
    #[arg(long)]
    pub password: Option<String>,
    /// Keep alive in seconds (0 disables it); idle clients send PINGREQ at 3/4 of it.
    #[arg(long, default_value_t = 60)]
    pub keep_alive: u16,
    /// Persistent sessions (clean session / clean start off; v5 session expiry 1 hour).
    #[arg(long)]
    pub persistent: bool,
    /// Client id prefix (default `hb<random>`); ids are PREFIX-<role><index>.
    #[arg(long, value_name = "PREFIX")]
    pub client_id_prefix: Option<String>,
    /// Local source addresses used round-robin, as a range `127.0.0.2-127.0.0.41` or a comma
    /// list; each address has its own ~28k ephemeral ports toward one broker port.
    #[arg(long, value_name = "RANGE")]
    pub source_ips: Option<String>,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub connect_concurrency: usize,
    /// Target connect rate in connections/s (default: as fast as the concurrency allows).
    #[arg(long, value_name = "PER_S")]
    pub connect_rate: Option<f64>,
    /// Seconds a connection attempt (TCP + CONNACK) may take before it counts as `timeout`.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub connect_timeout: f64,
    /// Runtime threads per process (default: half the cores, at least 1, leaving the rest to
    /// a broker on the same machine).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Load generator processes (default: 1, or one per 15,000 connections; a process can
    /// hold ~19k sockets here).
    #[arg(long, value_name = "K")]
    pub processes: Option<usize>,
    /// Sample this process's CPU time and RSS from /proc every interval (the broker).
    #[arg(long, value_name = "PID")]
    pub broker_pid: Option<u32>,
    /// Write the full result as JSON to FILE (schema: docs/bench-schema.json).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts (inline SVG, no scripts, works offline)
    /// to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Serve the run's live figures (messages and bytes by QoS, connections, errors,
    /// duplicates, latency histogram) for Prometheus at http://ADDR/metrics while it runs:
    /// HOST:PORT, or a port for 127.0.0.1:PORT (crates/hayate-bench/README.md, "Live metrics").
    #[arg(long, value_name = "ADDR")]
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub progress: f64,
    /// Time series interval in seconds.
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub sample_interval: f64,
    /// Milliseconds to wait for `$SYS/broker/version` after subscribing (0: do not ask).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub version_wait_ms: u64,
    /// Seconds to wait for outstanding deliveries after the last send.
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    pub drain_timeout: f64,
    /// Do not print the summary table.
    #[arg(long)]
    pub quiet: bool,
    /// TLS (rustls: TLS 1.2/1.3) with certificate verification against --cafile (default: the
    /// system CA bundle). --cafile, --cert/--key and --insecure turn TLS on by themselves.
    #[arg(long)]
    pub tls: bool,
    /// CA certificates (PEM) the broker's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub cafile: Option<PathBuf>,
    /// Client certificate chain (PEM), with --key.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Client private key (PEM: PKCS#8, PKCS#1 or SEC1), with --cert.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Accept any broker certificate (no verification; for self-signed test brokers).
    #[arg(long)]
    pub insecure: bool,
    /// Name to verify the broker's certificate against and send as SNI (default: --host).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// TLS-PSK identity (with --psk): TLS 1.2 PSK cipher suites via OpenSSL, as Mosquitto's
    /// `psk_hint`/`psk_file` listeners speak them.
    #[arg(long, value_name = "ID")]
    pub psk_identity: Option<String>,
    /// TLS-PSK key in hex (with --psk-identity).
    #[arg(long, value_name = "HEX")]
    pub psk: Option<String>,
    /// TLS-PSK cipher suites offered, as an OpenSSL cipher list (default `PSK:!eNULL`: all of them;
    /// brokers such as Mosquitto then pick `DHE-PSK-AES256-GCM-SHA384`, whose DH exchange
    /// costs ~10 ms per handshake; `PSK-AES128-GCM-SHA256` or `kECDHEPSK` are cheaper).
    #[arg(long, value_name = "LIST")]
    pub psk_ciphers: Option<String>,
}

/// `fan-in` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct FanInArgs {
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Publisher connections (C).
    #[arg(short = 'c', long, default_value_t = 1000)]
    pub connections: u64,
    /// Sender tasks driving the connections (P), each over its own share of them (worker w
    /// takes connections w, w + P, w + 2P, ... in turn).
    #[arg(short = 'w', long, default_value_t = 100)]
    pub workers: u64,
    /// How the publishers write and wait: `batch` (the capacity test: up to --batch PUBLISH
    /// per write, closed loop within --window unless --rate is given), `open` (open loop at
    /// --rate-per-connection, one PUBLISH per write, acknowledgements not waited for) or
    /// `paho` (each worker publishes on its next connection and waits for the write, the
    /// PUBACK or the PUBCOMP before the next: at most one message per worker outstanding).
    #[arg(long, value_enum, default_value = "batch")]
    #[serde(default)]
    pub shape: Shape,
    /// Messages per second per connection (--shape open or paho; the total rate is this
    /// times --connections).
    #[arg(long, value_name = "PER_S")]
    #[serde(default)]
    pub rate_per_connection: Option<f64>,
    /// Messages to send in total (default 1,000,000 unless --duration is given).
    #[arg(short = 'n', long)]
    pub messages: Option<u64>,
    /// Seconds to send for (with --messages: whichever comes first).
    #[arg(short = 'd', long, value_name = "S")]
    pub duration: Option<f64>,
    /// Publisher QoS.
    #[arg(short = 'q', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    /// Subscriber QoS.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub sub_qos: u8,
    /// Payload bytes (at least the 24-byte bench header is sent).
    #[arg(short = 's', long, default_value_t = 24)]
    pub payload: u64,
    /// Closed loop (the default of --shape batch and paho): messages the senders may run ahead
    /// of the subscriber (default 100,000).
    #[arg(long)]
    pub window: Option<u64>,
    /// Fixed total rate in messages/s (open loop, coordinated-omission-corrected latency);
    /// default: as fast as possible within the window (closed loop).
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// Open loop with a rate that changes over time: phases SECONDS@RATE (total messages/s;
    /// `k`/`M` suffixes allowed), run in order, e.g. `60@300000,30@50000` (3× capacity for a
    /// minute, then 50%). Replaces --rate, --messages and --duration: the run lasts the sum of
    /// the phases. Reports per phase the offered, sent and delivered rates, messages left
    /// unsent when the phase ended (publishers held back by back-pressure), loss, latency
    /// p50/p99/p99.9 by intended send time and the broker's peak RSS, and after each rate
    /// decrease the recovery time: until the per-interval delivered rate is within 10% of the
    /// offered rate and the per-interval p99 under the threshold (see --recovery-p99-ms), for
    /// 3 s in a row.
    #[arg(long, value_name = "S@RATE,...")]
    pub rate_schedule: Option<String>,
    /// With --rate-schedule: the per-interval p99 latency (ms) under which latency counts as
    /// recovered; default: twice the p99 of the last phase's second half, at least 1 ms.
    #[arg(long, value_name = "MS")]
    pub recovery_p99_ms: Option<f64>,
    /// --shape batch: most messages written to one connection in one write (open and paho
    /// write one).
    #[arg(long, default_value_t = 16)]
    pub batch: u64,
    /// Unacknowledged QoS 1/2 messages per connection (capped by the broker's v5 Receive
    /// Maximum; --shape paho: 1).
    #[arg(long, default_value_t = 64)]
    pub inflight: u64,
    /// Topic template; `%i` is the publisher index, zero-padded to 6 digits.
    #[arg(long, default_value = "hb/%i")]
    pub topic: String,
}

/// `latency` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct LatencyArgs {
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Milliseconds between two publishes.
    #[arg(short = 'i', long, default_value_t = 10.0, value_name = "MS")]
    pub interval_ms: f64,
    /// Seconds to publish for.
    #[arg(short = 'd', long, default_value_t = 10.0, value_name = "S")]
    pub duration: f64,
    /// Seconds at the start excluded from the figures.
    #[arg(long, default_value_t = 0.0, value_name = "S")]
    pub warmup: f64,
    /// Publisher QoS.
    #[arg(short = 'q', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    /// Subscriber QoS.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub sub_qos: u8,
    /// Payload bytes (at least 24).
    #[arg(short = 's', long, default_value_t = 24)]
    pub payload: u64,
    /// Topic template (`%i` = publisher index).
    #[arg(long, default_value = "hb/lat/%i")]
    pub topic: String,
}

/// `fan-out` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct FanOutArgs {
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Subscriber connections (S).
    #[arg(short = 'S', long, default_value_t = 1000)]
    pub subscribers: u64,
    /// Publisher connections.
    #[arg(long, default_value_t = 4)]
    pub publishers: u64,
    /// Total publish rate in messages/s (default: subscribers / 10, the write-up's ratio).
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// How subscribers pick topics.
    #[arg(long, value_enum, default_value = "own")]
    pub topic_mode: TopicMode,
    /// Group name for `--topic-mode share-group`.
    #[arg(long, default_value = "hb")]
    pub share_group: String,
    /// Seconds to publish for (warm-up included).
    #[arg(short = 'd', long, default_value_t = 30.0, value_name = "S")]
    pub duration: f64,
    /// Seconds at the start excluded from latency and loss.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub warmup: f64,
    /// Publisher QoS.
    #[arg(short = 'q', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    /// Subscriber QoS (default: the publisher QoS).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub sub_qos: Option<u8>,
    /// Payload bytes (at least 24).
    #[arg(short = 's', long, default_value_t = 24)]
    pub payload: u64,
    /// Unacknowledged QoS 1/2 messages per publisher connection.
    #[arg(long, default_value_t = 64)]
    pub inflight: u64,
    /// Topic template (`%i` = subscriber index in `own` mode; the index is 0 otherwise).
    #[arg(long, default_value = "hb/fo/%i")]
    pub topic: String,
}

/// `conn` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct ConnArgs {
    /// Connections to open (C).
    #[arg(short = 'c', long, default_value_t = 10_000)]
    pub connections: u64,
    /// Seconds to hold them open after the last one connected.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub hold: f64,
    /// Seconds to wait after connecting before reading the broker's RSS.
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub settle: f64,
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `swarm` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct SwarmArgs {
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Client connections, each publishing on its own topic.
    #[arg(short = 'c', long, default_value_t = 3000)]
    pub clients: u64,
    /// Seconds between two messages of one client.
    #[arg(long, default_value_t = 6.0, value_name = "S")]
    pub every: f64,
    /// Seconds to run.
    #[arg(short = 'd', long, default_value_t = 60.0, value_name = "S")]
    pub duration: f64,
    /// Seconds at the start excluded from latency and loss.
    #[arg(long, default_value_t = 0.0, value_name = "S")]
    pub warmup: f64,
    /// Publisher QoS.
    #[arg(short = 'q', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    /// Subscriber QoS.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub sub_qos: u8,
    /// Payload bytes (at least 24).
    #[arg(short = 's', long, default_value_t = 500)]
    pub payload: u64,
    /// Sender tasks driving the clients.
    #[arg(short = 'w', long, default_value_t = 16)]
    pub workers: u64,
    /// Topic template (`%i` = client index).
    #[arg(long, default_value = "hb/sw/%i")]
    pub topic: String,
}

/// `compare` options.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct CompareArgs {
    /// A target: `NAME=HOST:PORT[,pid=PID]` (repeat for each broker; ratios are relative to
    /// the first).
    #[arg(
        long = "target",
        required = true,
        value_name = "NAME=HOST:PORT[,pid=PID]"
    )]
    pub targets: Vec<String>,
    /// Runs per target; targets alternate (A B B A ...) so drift hits both.
    #[arg(long, default_value_t = 3)]
    pub repeat: u64,
    /// Write every run and the comparison as JSON to FILE.
    #[arg(long = "compare-json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the comparison as a self-contained HTML report (grouped bars per target, every
    /// run's latency distribution) to FILE. A `--report` given after the scenario name means
    /// the same.
    #[arg(long = "report", alias = "compare-report", value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Run every scenario listed in FILE instead of one named on the command line: one
    /// `SCENARIO [OPTIONS]` per line, exactly as after `compare ...` (options separated by
    /// spaces, no quoting), `#` starts a comment. Each scenario gets its own table, and
    /// `--compare-json`/`--report` write one file per scenario (`NAME-<n>-<scenario>.EXT`).
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// The scenario and its options (host, port and pid come from each target).
    #[command(subcommand)]
    pub scenario: Option<CompareScenario>,
}

/// Scenarios `compare` can run.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum CompareScenario {
    /// See `hayate bench fan-in`.
    FanIn(FanInArgs),
    /// See `hayate bench latency`.
    Latency(LatencyArgs),
    /// See `hayate bench fan-out`.
    FanOut(FanOutArgs),
    /// See `hayate bench conn`.
    Conn(ConnArgs),
    /// See `hayate bench swarm`.
    Swarm(SwarmArgs),
}

impl CompareScenario {
    /// The scenario as a [`BenchCommand`].
    pub fn into_command(self) -> BenchCommand {
        match self {
            CompareScenario::FanIn(a) => BenchCommand::FanIn(a),
            CompareScenario::Latency(a) => BenchCommand::Latency(a),
            CompareScenario::FanOut(a) => BenchCommand::FanOut(a),
            CompareScenario::Conn(a) => BenchCommand::Conn(a),
            CompareScenario::Swarm(a) => BenchCommand::Swarm(a),
        }
    }
}

impl BenchCommand {
    /// The common options of a scenario (`None` for compare and the worker).
    pub fn common(&self) -> Option<&CommonArgs> {
        match self {
            BenchCommand::FanIn(a) => Some(&a.common),
            BenchCommand::Latency(a) => Some(&a.common),
            BenchCommand::FanOut(a) => Some(&a.common),
            BenchCommand::Conn(a) => Some(&a.common),
            BenchCommand::Swarm(a) => Some(&a.common),
            BenchCommand::Compare(_) | BenchCommand::Worker => None,
        }
    }

    /// Mutable common options.
    pub fn common_mut(&mut self) -> Option<&mut CommonArgs> {
        match self {
            BenchCommand::FanIn(a) => Some(&mut a.common),
            BenchCommand::Latency(a) => Some(&mut a.common),
            BenchCommand::FanOut(a) => Some(&mut a.common),
            BenchCommand::Conn(a) => Some(&mut a.common),
            BenchCommand::Swarm(a) => Some(&mut a.common),
            BenchCommand::Compare(_) | BenchCommand::Worker => None,
        }
    }

    /// Scenario name.
    pub fn name(&self) -> &'static str {
        match self {
            BenchCommand::FanIn(_) => "fan-in",
            BenchCommand::Latency(_) => "latency",
            BenchCommand::FanOut(_) => "fan-out",
            BenchCommand::Conn(_) => "conn",
            BenchCommand::Swarm(_) => "swarm",
            BenchCommand::Compare(_) => "compare",
            BenchCommand::Worker => "worker",
        }
    }
}
