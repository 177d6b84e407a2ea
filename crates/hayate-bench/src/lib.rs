//! `hayate bench`: an MQTT load generator for any broker (Hayate, Mosquitto, anything on a
//! host:port), and the instrument every performance figure of the project is measured with.
//!
//! Scenarios (see `shared/design/scenarios.md`): `fan-in` (S1), `latency` (S2), `fan-out`
//! (S4), `conn`, `swarm` (S3) and `compare`, over TCP, TLS or TLS-PSK ([`tls`]).
//!
//! How it measures:
//! - every payload carries a stream id, a sequence number and the intended and actual send
//!   times (see [`payload`]); receivers check loss, duplicates and per-publisher order
//!   ([`stats::StreamTracker`]) and record latency in HdrHistograms against one monotonic
//!   clock shared by all processes of the run ([`clock`]);
//! - fixed-rate runs measure latency from the intended send time (coordinated-omission
//!   corrected); closed-loop runs keep the senders at most a window ahead of the receiver;
//!   `fan-in --rate-schedule` changes the offered rate by phase and reports each phase and the
//!   recovery after a rate decrease ([`rate_schedule`]);
//! - clients are async on a few runtime threads; PUBLISH packets are encoded into reused
//!   per-connection buffers (`encode_publish_header` + payload) and written in batches (the
//!   capacity test), or one per write with `fan-in --shape open|paho` (the seed shape: a
//!   fixed rate per connection, or workers that wait for each publish like paho clients);
//! - past ~15k connections the run spreads over worker processes ([`multiproc`]) and merges
//!   their results; `--broker-pid` samples the broker's CPU and RSS from `/proc`.
//!
//! Results are the serde structs of [`results`] (JSON Schema in `docs/bench-schema.json`);
//! `--report FILE.html` renders them as one self-contained page with SVG charts ([`html`],
//! [`svg`]).

pub mod args;
pub mod client;
pub mod clock;
pub mod compare;
pub mod engine;
pub mod error;
pub mod html;
pub mod live;
pub mod metrics;
pub mod multiproc;
pub mod payload;
pub mod procstat;
pub mod rate_schedule;
pub mod report;
pub mod results;
pub mod scenario;
pub mod stats;
pub mod svg;
pub mod targets;
pub mod tls;

pub use args::{BenchArgs, BenchCommand};
pub use error::{BenchError, Result};
pub use results::{BenchResult, CompareResult};
pub use scenario::Env;

/// What a command produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// One scenario run.
    Run(Box<BenchResult>),
    /// A comparison.
    Compare(Box<CompareResult>),
    /// The comparisons of a `compare --plan FILE`, in file order.
    Plan(Vec<CompareResult>),
}

/// Runs a command on the current tokio runtime (the library entry point; tests use this).
pub async fn run_command(cmd: &BenchCommand, env: &Env) -> Result<Outcome> {
    match cmd {
        BenchCommand::Compare(args) if args.plan.is_some() => {
            let mut results = Vec::new();
            for one in compare::plan_runs(args)? {
                results.push(compare::run_compare(&one, env).await?);
            }
            Ok(Outcome::Plan(results))
        }
        BenchCommand::Compare(args) => Ok(Outcome::Compare(Box::new(
            compare::run_compare(args, env).await?,
        ))),
        BenchCommand::Worker => Err(BenchError::invalid(
            "the worker subcommand is started by hayate bench itself",
        )),
        other => Ok(Outcome::Run(Box::new(
            scenario::run_scenario(other, env).await?,
        ))),
    }
}

/// Runs `hayate bench ...`: builds a runtime with the requested threads and blocks until the
/// command is done. Returns the process exit code (a worker process's, or 0).
pub fn run(args: BenchArgs, env: Env) -> Result<i32> {
    if let BenchCommand::Worker = args.command {
        return Ok(multiproc::worker_main());
    }
    let threads = match &args.command {
        BenchCommand::Compare(c) => compare::plan_runs(c)?
            .iter()
            .filter_map(|one| one.scenario.clone())
            .map(|s| s.into_command().common().map_or(1, scenario::threads_for))
            .max()
            .unwrap_or(1),
        other => other.common().map_or(1, scenario::threads_for),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("hayate-bench")
        .enable_all()
        .build()
        .map_err(|e| BenchError::io("starting the runtime", e))?;
    runtime.block_on(run_command(&args.command, &env))?;
    Ok(0)
}
