//! `compare`: one scenario against several named targets, alternating, with medians and ratios.

use crate::args::{CompareArgs, CompareScenario};
use crate::error::{BenchError, Result};
use crate::report;
use crate::results::{BenchResult, CompareResult, CompareRow, ToolInfo, SCHEMA_VERSION};
use crate::scenario::{run_scenario, write_json, Env};
use crate::stats::median;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One line of a `--plan` file: a scenario and its options, as they follow `compare` on the
/// command line.
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true)]
struct PlanLine {
    #[command(subcommand)]
    scenario: CompareScenario,
}

/// The comparisons a `compare` command stands for: its one scenario, or one per line of its
/// `--plan` file, each with its own JSON and report file names.
pub fn plan_runs(args: &CompareArgs) -> Result<Vec<CompareArgs>> {
    let Some(path) = &args.plan else {
        if args.scenario.is_none() {
            return Err(BenchError::invalid(
                "compare needs a scenario (e.g. `compare --target ... fan-in -c 1000`) or --plan FILE",
            ));
        }
        return Ok(vec![args.clone()]);
    };
    if args.scenario.is_some() {
        return Err(BenchError::invalid(
            "compare takes either --plan FILE or a scenario on the command line, not both",
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::io(format!("reading --plan {}", path.display()), e))?;
    let mut runs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let parsed =
            <PlanLine as clap::Parser>::try_parse_from(line.split_whitespace()).map_err(|e| {
                BenchError::invalid(format!("{}:{}: {}", path.display(), number + 1, e.render()))
            })?;
        let name = parsed.scenario.clone().into_command().name().to_string();
        let index = runs.len() + 1;
        let mut one = args.clone();
        one.plan = None;
        one.scenario = Some(parsed.scenario);
        one.json = args.json.as_deref().map(|p| numbered(p, index, &name));
        one.report = args.report.as_deref().map(|p| numbered(p, index, &name));
        runs.push(one);
    }
    if runs.is_empty() {
        return Err(BenchError::invalid(format!(
            "--plan {} lists no scenario",
            path.display()
        )));
    }
    Ok(runs)
}

/// `cmp.json` → `cmp-2-fan-in.json`.
fn numbered(path: &Path, index: usize, scenario: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}-{index}-{scenario}{extension}"))
}

/// A parsed `--target NAME=HOST:PORT[,pid=PID]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Broker pid.
    pub pid: Option<u32>,
}

/// Parses one `--target`.
pub fn parse_target(text: &str) -> Result<Target> {
    let bad = |why: &str| {
        BenchError::invalid(format!(
            "--target {text:?}: {why} (expected NAME=HOST:PORT[,pid=PID])"
        ))
    };
    let (name, rest) = text.split_once('=').ok_or_else(|| bad("missing NAME="))?;
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    let mut parts = rest.split(',');
    let hostport = parts.next().unwrap_or_default();
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| bad("missing :PORT"))?;
    let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
    let mut pid = None;
    for extra in parts {
        match extra.split_once('=') {
            Some(("pid", v)) => pid = Some(v.parse().map_err(|_| bad("bad pid"))?),
            _ => return Err(bad(&format!("unknown setting {extra:?}"))),
        }
    }
    Ok(Target {
        name: name.to_string(),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        pid,
    })
}

type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&BenchResult) -> Option<f64>,
);

/// The metrics compared: name, unit, better direction, extractor.
pub const METRICS: &[Metric] = &[
    ("connections_established", "conns", "higher", |r| {
        Some(r.connections.established as f64)
    }),
    ("connect_rate_per_s", "conn/s", "higher", |r| {
        Some(r.connections.connect_rate_per_s)
    }),
    ("send_rate_per_s", "msg/s", "higher", |r| {
        r.messages.as_ref().map(|m| m.send_rate_per_s)
    }),
    ("receive_rate_per_s", "msg/s", "higher", |r| {
        r.messages.as_ref().map(|m| m.receive_rate_per_s)
    }),
    ("success_percent", "%", "higher", |r| {
        r.messages.as_ref().map(|m| m.success_percent)
    }),
    ("lost", "msgs", "lower", |r| {
        r.messages.as_ref().map(|m| m.lost as f64)
    }),
    ("duplicates", "msgs", "lower", |r| {
        r.messages.as_ref().map(|m| m.duplicates as f64)
    }),
    ("reordered", "msgs", "lower", |r| {
        r.messages.as_ref().map(|m| m.reordered as f64)
    }),
    ("latency_p50_us", "µs", "lower", |r| {
        r.latency.as_ref().map(|l| l.p50_us)
    }),
    ("latency_p99_us", "µs", "lower", |r| {
        r.latency.as_ref().map(|l| l.p99_us)
    }),
    ("latency_p999_us", "µs", "lower", |r| {
        r.latency.as_ref().map(|l| l.p999_us)
    }),
    ("latency_max_us", "µs", "lower", |r| {
        r.latency.as_ref().map(|l| l.max_us)
    }),
    ("broker_cpu_s_per_million", "cpu-s", "lower", |r| {
        r.broker
            .as_ref()
            .and_then(|b| b.cpu_seconds_per_million_messages)
    }),
    ("broker_cpu_percent_avg", "%", "lower", |r| {
        r.broker.as_ref().map(|b| b.cpu_percent_avg)
    }),
    ("broker_rss_peak", "bytes", "lower", |r| {
        r.broker.as_ref().map(|b| b.rss_peak_bytes as f64)
    }),
    ("broker_rss_per_connection", "bytes", "lower", |r| {
        r.broker.as_ref().and_then(|b| b.rss_per_connection_bytes)
    }),
    ("bench_cpu_percent_avg", "%", "lower", |r| {
        Some(r.bench.cpu_percent_avg)
    }),
];

/// Builds the comparison rows from the runs.
pub fn rows(targets: &[String], runs: &[BenchResult]) -> Vec<CompareRow> {
    METRICS
        .iter()
        .map(|&(metric, unit, better, get)| {
            let medians: BTreeMap<String, Option<f64>> = targets
                .iter()
                .map(|t| {
                    let values: Vec<f64> = runs
                        .iter()
                        .filter(|r| r.target.name.as_deref() == Some(t.as_str()))
                        .filter_map(get)
                        .collect();
                    (t.clone(), median(&values))
                })
                .collect();
            let first = targets
                .first()
                .and_then(|t| medians.get(t).copied().flatten());
            let ratio_to_first = targets
                .iter()
                .map(|t| {
                    let v = medians.get(t).copied().flatten();
                    let ratio = match (v, first) {
                        (Some(v), Some(f)) if f != 0.0 => Some(v / f),
                        _ => None,
                    };
                    (t.clone(), ratio)
                })
                .collect();
            CompareRow {
                metric: metric.into(),
                unit: unit.into(),
                better: better.into(),
                medians,
                ratio_to_first,
            }
        })
        .collect()
}

/// Runs the comparison.
pub async fn run_compare(args: &CompareArgs, env: &Env) -> Result<CompareResult> {
    let targets: Vec<Target> = args
        .targets
        .iter()
        .map(|t| parse_target(t))
        .collect::<Result<_>>()?;
    let mut names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    names.dedup();
    if names.len() != targets.len() || {
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        sorted.len() != names.len()
    } {
        return Err(BenchError::invalid("--target names must be unique"));
    }
    if args.repeat == 0 {
        return Err(BenchError::invalid("--repeat must be at least 1"));
    }
    let base = args
        .scenario
        .clone()
        .ok_or_else(|| BenchError::invalid("compare needs a scenario or --plan FILE"))?
        .into_command();
    if base
        .common()
        .is_some_and(|c| c.targets.is_some() || c.pub_targets.is_some() || c.sub_targets.is_some())
    {
        return Err(BenchError::invalid(
            "compare takes its brokers from --target; --targets, --pub-targets and --sub-targets apply to single runs only",
        ));
    }
    let scenario = base.name().to_string();
    let quiet = base.common().is_some_and(|c| c.quiet);
    let mut runs = Vec::new();
    for round in 0..args.repeat {
        // A B, B A, A B...: order effects (warm caches, thermal drift) hit every target.
        let order: Vec<&Target> = if round % 2 == 0 {
            targets.iter().collect()
        } else {
            targets.iter().rev().collect()
        };
        for t in order {
            let mut cmd = base.clone();
            if let Some(c) = cmd.common_mut() {
                c.host = t.host.clone();
                c.port = t.port;
                c.broker_pid = t.pid;
                c.json = None;
                c.report = None;
                c.quiet = true;
            }
            let run_env = Env {
                target_name: Some(t.name.clone()),
                print: env.print,
                ..env.clone()
            };
            let result = run_scenario(&cmd, &run_env).await?;
            if env.print && !quiet {
                report::print_run_line(&t.name, round, &result);
            }
            runs.push(result);
        }
    }
    let machine = crate::procstat::machine_info();
    let result = CompareResult {
        kind: "compare".into(),
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "hayate-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        scenario,
        command_line: crate::scenario::redact_command_line(&env.command_line),
        machine,
        rows: rows(&names, &runs),
        targets: names,
        repeat: args.repeat,
        runs,
    };
    if env.print && !quiet {
        report::print_compare(&result);
    }
    if let Some(path) = &args.json {
        write_json(path, &result)?;
    }
    let report = args
        .report
        .as_ref()
        .or_else(|| base.common().and_then(|c| c.report.as_ref()));
    if let Some(path) = report {
        crate::html::write(path, &crate::html::compare_report(&result))?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compare_args(plan: Option<PathBuf>) -> CompareArgs {
        CompareArgs {
            targets: vec!["a=127.0.0.1:1".into()],
            repeat: 1,
            json: Some(PathBuf::from("/tmp/out/cmp.json")),
            report: None,
            plan,
            scenario: None,
        }
    }

    #[test]
    fn plan_file_expands_to_one_comparison_per_scenario() {
        let dir = std::env::temp_dir().join(format!("hb-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plan = dir.join("plan.txt");
        std::fs::write(
            &plan,
            "# S1 and S2\nfan-in -c 10 -n 100\n\nlatency --interval-ms 5 -d 2  # short\n",
        )
        .unwrap();
        let runs = plan_runs(&compare_args(Some(plan.clone()))).unwrap();
        assert_eq!(runs.len(), 2);
        let names: Vec<String> = runs
            .iter()
            .map(|r| {
                r.scenario
                    .clone()
                    .unwrap()
                    .into_command()
                    .name()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["fan-in", "latency"]);
        assert_eq!(
            runs[1].json.as_deref(),
            Some(Path::new("/tmp/out/cmp-2-latency.json"))
        );

        std::fs::write(&plan, "fan-in --no-such-option\n").unwrap();
        let error = plan_runs(&compare_args(Some(plan.clone())))
            .unwrap_err()
            .to_string();
        assert!(error.contains("plan.txt:1"), "{error}");
        std::fs::write(&plan, "# nothing\n").unwrap();
        assert!(plan_runs(&compare_args(Some(plan))).is_err());
        assert!(plan_runs(&compare_args(None)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn targets_parse() {
        assert_eq!(
            parse_target("hayate=127.0.0.1:1883,pid=1234").unwrap(),
            Target {
                name: "hayate".into(),
                host: "127.0.0.1".into(),
                port: 1883,
                pid: Some(1234)
            }
        );
        assert_eq!(parse_target("m=localhost:1884").unwrap().pid, None);
        assert_eq!(parse_target("v6=[::1]:1883").unwrap().host, "::1");
        assert!(parse_target("127.0.0.1:1883").is_err());
        assert!(parse_target("x=127.0.0.1").is_err());
        assert!(parse_target("x=127.0.0.1:1883,cpu=3").is_err());
    }
}
