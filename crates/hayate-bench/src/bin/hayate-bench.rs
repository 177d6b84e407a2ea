//! Standalone `hayate-bench`: the same as `hayate bench`, without the broker. Also the worker
//! binary the crate's own multi-process tests start.

use clap::Parser;
use hayate_bench::{BenchArgs, Env};
use std::process::ExitCode;

/// MQTT load generator (the same as `hayate bench`).
#[derive(Debug, Parser)]
#[command(name = "hayate-bench", version, about)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAYATE_BENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let env = Env {
        worker_command: std::env::current_exe()
            .map(|p| vec![p.into_os_string()])
            .unwrap_or_default(),
        ..Env::default()
    };
    match hayate_bench::run(cli.args, env) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code.clamp(1, 255) as u8),
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: {e}");
            }
            ExitCode::from(2)
        }
    }
}
