//! Scenario orchestration: turns options into parts, drives them through the phases of a run,
//! and assembles the [`BenchResult`].
//!
//! - this module: the entry point ([`run_scenario`]), options shared by every scenario, the
//!   probe connection;
//! - `plan`: the parts of a run and the options they come from (`fan_in` for the publisher
//!   scenarios fan-in, latency and swarm);
//! - `run`: one function per phase of a run (start, connect, traffic or hold, stop);
//! - `assemble` and `schedule`: the figures of the result.

mod assemble;
mod fan_in;
mod plan;
mod run;
mod schedule;

use crate::args::{BenchCommand, CommonArgs};
use crate::client::{connect, parse_source_ips, ClientConfig, ConnectError};
use crate::clock::{secs_to_ns, Clock};
use crate::error::{BenchError, Result};
use crate::procstat;
use crate::report;
use crate::results::BenchResult;
use crate::tls::TlsSettings;
use plan::Setup;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

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
    crate::targets::role_lists(
        c.targets.as_deref(),
        c.pub_targets.as_deref(),
        c.sub_targets.as_deref(),
    )
    .map_err(BenchError::InvalidOption)?;
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

/// Resolves `--targets`, `--pub-targets` and `--sub-targets` (see [`crate::targets`]).
pub async fn resolve_spread(c: &CommonArgs) -> Result<crate::targets::Spread> {
    let (publishers, subscribers) = crate::targets::role_lists(
        c.targets.as_deref(),
        c.pub_targets.as_deref(),
        c.sub_targets.as_deref(),
    )
    .map_err(BenchError::InvalidOption)?;
    let mut spread = crate::targets::Spread::default();
    for t in &publishers {
        spread.publishers.push(resolve(&t.host, t.port).await?);
    }
    for t in &subscribers {
        spread.subscribers.push(resolve(&t.host, t.port).await?);
    }
    // A role without a list of its own goes to --host/--port, written out so that results
    // name it.
    if spread.publishers.is_empty() != spread.subscribers.is_empty() {
        let single = vec![resolve(&c.host, c.port).await?];
        for list in [&mut spread.publishers, &mut spread.subscribers] {
            if list.is_empty() {
                *list = single.clone();
            }
        }
    }
    Ok(spread)
}

fn client_config(c: &CommonArgs, addr: SocketAddr) -> Result<ClientConfig> {
    let prefix = c.client_id_prefix.clone().unwrap_or_else(|| {
        let t = crate::clock::monotonic_ns() ^ u64::from(std::process::id()) << 20;
        format!("hb{:06x}", t & 0xFF_FFFF)
    });
    Ok(ClientConfig {
        addr,
        spread: Default::default(),
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

/// Runs one scenario (not `compare`) and returns its result (also printed and written to
/// `--json` as the options say).
pub async fn run_scenario(cmd: &BenchCommand, env: &Env) -> Result<BenchResult> {
    let common = cmd
        .common()
        .ok_or_else(|| BenchError::invalid(format!("{} is not a scenario", cmd.name())))?
        .clone();
    validate_common(&common)?;
    procstat::raise_open_files_limit();
    let spread = resolve_spread(&common).await?;
    // With --targets the first subscriber's broker is the run's address (probed first, named
    // in the results); --host/--port only matter for a role without a list.
    let addr = match spread.subscribers.first() {
        Some(&first) => first,
        None => resolve(&common.host, common.port).await?,
    };
    let mut client = client_config(&common, addr)?;
    client.spread = spread;
    let setup = Setup {
        client,
        clock: Clock::start(),
        interval_ns: secs_to_ns(common.sample_interval),
        threads: threads_for(&common),
        common,
    };
    let mut plan = match cmd {
        BenchCommand::FanIn(a) => fan_in::plan_fan_in(a, &setup)?,
        BenchCommand::Latency(a) => fan_in::plan_latency(a, &setup)?,
        BenchCommand::FanOut(a) => plan::plan_fan_out(a, &setup)?,
        BenchCommand::Conn(a) => plan::plan_conn(a, &setup)?,
        BenchCommand::Swarm(a) => fan_in::plan_swarm(a, &setup)?,
        BenchCommand::Compare(_) | BenchCommand::Worker => {
            return Err(BenchError::invalid(format!(
                "{} is not a scenario",
                cmd.name()
            )))
        }
    };
    plan.config.cross_target_fraction = cross_target_fraction(&plan.config, &setup.client);
    if plan.config.cross_target_fraction == Some(0.0) {
        plan.warnings.push(
            "several targets, but every publisher connects to the same broker as the subscribers of its messages: nothing crosses between brokers (change the number of publishers or targets)".into(),
        );
    }
    let result = run::execute(plan, &setup, env).await?;
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

/// `config.cross_target_fraction`: with own topics (fan-out) topic k is published by
/// publisher k mod P and read by subscriber k; otherwise every publisher–subscriber pair
/// counts once.
fn cross_target_fraction(c: &crate::results::RunConfig, client: &ClientConfig) -> Option<f64> {
    let (pubs, subs) = (c.publishers?.max(1), c.subscribers?.max(1));
    let (spread, addr) = (&client.spread, client.addr);
    if c.topic_mode.as_deref() == Some("own") {
        crate::targets::cross_fraction(spread, addr, subs, |k| k % pubs, |k| k)
    } else {
        let pairs = pubs.saturating_mul(subs).min(1 << 24);
        crate::targets::cross_fraction(spread, addr, pairs, |k| k / subs, |k| k % subs)
    }
}

/// Writes a value as pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &std::path::Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).map_err(|source| BenchError::WriteFile {
        path: path.to_path_buf(),
        source,
    })
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
