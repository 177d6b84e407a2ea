//! The `hayate` binary: command-line parsing and process setup only. Everything else lives in
//! the library crates.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use hayate_server::config::{mosquitto, ConfigFormat, Durability};
use hayate_server::{Config, LogFormat, Server};

mod logging;
mod notify;
mod reload;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Hayate: an MQTT 3.1 / 3.1.1 / 5.0 broker.
#[derive(Debug, Parser)]
#[command(name = "hayate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker. With no options it listens on 127.0.0.1:1883 with anonymous access.
    Serve(ServeArgs),
    /// Load-test an MQTT broker (this one or any other): fan-in, latency, fan-out, conn,
    /// swarm, compare. See crates/hayate-bench/README.md.
    Bench(Box<hayate_bench::BenchArgs>),
    /// Create or update a password file entry, like mosquitto_passwd: `hayate passwd [-c]
    /// FILE USER` prompts, `-b FILE USER PASS` takes it from the command line, `-D` deletes,
    /// `-U` hashes a plain-text file, `--argon2id` writes argon2id instead of $7$.
    Passwd(hayate_auth::PasswdArgs),
    /// Check a configuration file, or convert a mosquitto.conf to hayate.toml.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Look at a cluster of Hayate nodes (docs/CLUSTER.md).
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Print the members a node sees and their state (live or dead, its link to each, the
    /// messages it received from each), read from its `$SYS/broker/cluster/nodes` over MQTT.
    Status {
        /// The node's MQTT listener.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:1883")]
        mqtt: SocketAddr,
        /// Print the JSON as published instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make a node leave its cluster for good and shut down, through its admin API (`POST
    /// /api/v1/cluster/leave`, docs/ADMIN.md): the other nodes forget it at once. (A node
    /// stopped with SIGTERM is expected back; the others keep what they hold for it.)
    Leave {
        /// The node's HTTP listener ([http] listen).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
        http: SocketAddr,
        /// Its bearer token ([http] token).
        #[arg(long, env = "HAYATE_HTTP_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file (Hayate TOML or mosquitto.conf) without starting the
    /// broker, reading the password, ACL and SCRAM files it names: exit code 0 when valid, 1
    /// when not. Keys without effect are listed on stderr.
    Check {
        /// The file.
        file: PathBuf,
    },
    /// Print the hayate.toml equivalent to a mosquitto.conf on stdout; keys without effect
    /// are listed on stderr.
    Convert {
        /// The Mosquitto file.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Configuration file: Hayate TOML (see hayate.toml in the repository for every key) or a
    /// mosquitto.conf (recognised by its .conf extension or its syntax; docs/MOSQUITTO-CONF.md).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on for MQTT over TCP (repeatable); replaces the configured listeners.
    #[arg(short, long, value_name = "ADDR")]
    listen: Vec<SocketAddr>,
    /// Worker threads (default: one per CPU core, or server.threads from the file).
    #[arg(short, long, value_name = "N")]
    threads: Option<usize>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
    /// "hayate_core=debug" (default: info, or server.log_level from the file).
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Keep retained messages and persistent sessions with their queued messages in this
    /// directory (embedded store; storage.dir in the file). See docs/DURABILITY.md.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// When an acknowledgement may go out: batched (once written; fsynced within
    /// storage.sync_interval_ms), sync (once fsynced) or off (no store).
    #[arg(long, value_name = "MODE")]
    durability: Option<DurabilityArg>,
    /// This node's name in a cluster (cluster.node_name); with --cluster-listen, makes it a
    /// node of a cluster (docs/CLUSTER.md).
    #[arg(long, value_name = "NAME", requires = "cluster_listen")]
    node_name: Option<String>,
    /// Where this node listens for the other nodes: gossip over UDP and node links over TCP
    /// on the same port (cluster.listen).
    #[arg(long, value_name = "ADDR", requires = "node_name")]
    cluster_listen: Option<SocketAddr>,
    /// Cluster listeners of nodes to join, comma-separated (cluster.join); any one live node
    /// is enough.
    #[arg(
        long,
        value_name = "ADDR,...",
        value_delimiter = ',',
        requires = "node_name"
    )]
    join: Vec<String>,
    /// Serve metrics (/metrics), health (/health, /ready), the admin API and the dashboard
    /// over HTTP on ADDR (HOST:PORT, or a port for 127.0.0.1:PORT; [http] listen in the
    /// file). Needs [http] token or token_file, or HAYATE_HTTP_TOKEN; see docs/OPERATIONS.md.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Log line format: text or json (one object per line) (server.log_format).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<LogFormatArg>,
    /// Write logs to FILE (appending) instead of standard error; SIGHUP reopens it
    /// (server.log_file).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

/// `--durability` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DurabilityArg {
    Batched,
    Sync,
    Off,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench(*args),
        Command::Passwd(args) => hayate_auth::run_passwd(args).context("hayate passwd"),
        Command::Config(command) => config_command(command),
        Command::Cluster(command) => cluster_command(command),
    }
}

fn cluster_command(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Status { mqtt, json } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let status = runtime
                .block_on(hayate_cluster::status::fetch(
                    mqtt,
                    std::time::Duration::from_secs(5),
                ))
                .with_context(|| format!("asking the node at {mqtt}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", status.render());
            }
            Ok(())
        }
        ClusterCommand::Leave { http, token } => {
            let mut request = ureq::post(format!("http://{http}/api/v1/cluster/leave"));
            if let Some(token) = token {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
            request
                .send_empty()
                .with_context(|| format!("asking the node at {http} to leave"))?;
            println!("the node at {http} is leaving the cluster and shutting down");
            Ok(())
        }
    }
}

fn config_command(command: ConfigCommand) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Check { file } => config_check(&file),
        ConfigCommand::Convert { file } => config_convert(&file),
    }
}

/// `hayate config check`: exit code 0 when the file (and the auth files it names) loads, 1
/// (the error returned from main) when not.
fn config_check(file: &Path) -> anyhow::Result<()> {
    let loaded = Config::load_file(file)?;
    // Read the password, ACL and SCRAM files and the JWT key, as `serve` does at start.
    loaded
        .config
        .auth
        .prepare()
        .with_context(|| format!("{}: [auth]", file.display()))?;
    if let Some(warnings) = &loaded.warnings {
        eprintln!("warning: {warnings}");
    }
    let format = match loaded.format {
        ConfigFormat::Toml => "Hayate TOML",
        ConfigFormat::Mosquitto => "Mosquitto",
    };
    println!("{}: valid ({format})", file.display());
    if let Err(error) = loaded.config.ensure_runnable() {
        eprintln!("note: {error}");
    }
    Ok(())
}

/// `hayate config convert`: the TOML on stdout, the keys without effect on stderr.
fn config_convert(file: &Path) -> anyhow::Result<()> {
    let loaded = Config::load_file(file)?;
    if loaded.format == ConfigFormat::Toml {
        anyhow::bail!("{} is Hayate TOML already", file.display());
    }
    if let Some(warnings) = &loaded.warnings {
        eprintln!("warning: {warnings}");
    }
    let header = format!(
        "Converted from {} by `hayate config convert` (hayate {}).\n\
         Only the keys that differ from Hayate's defaults are written; see hayate.toml.",
        file.display(),
        env!("CARGO_PKG_VERSION")
    );
    print!("{}", mosquitto::to_toml(&loaded.config, &header));
    Ok(())
}

fn bench(args: hayate_bench::BenchArgs) -> anyhow::Result<()> {
    // Logs go to stderr so that stdout holds only the results.
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAYATE_BENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let env = hayate_bench::Env {
        // Worker processes re-execute this binary as `hayate bench __worker`.
        worker_command: vec![
            std::env::current_exe()
                .context("locating the hayate binary")?
                .into_os_string(),
            "bench".into(),
        ],
        ..hayate_bench::Env::default()
    };
    let code = hayate_bench::run(args, env)?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let started_with = args.config.as_deref().and_then(reload::StartedWith::read);
    let (mut config, warnings) = match &args.config {
        Some(path) => {
            let loaded = Config::load_file(path)?;
            (loaded.config, loaded.warnings)
        }
        None => (Config::default(), None),
    };
    apply_overrides(&mut config, &args);
    config.validate()?;
    config.ensure_runnable()?;
    if let Some(format) = args.log_format {
        config.server.log_format = match format {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        };
    }
    if let Some(file) = &args.log_file {
        config.server.log_file = Some(file.clone());
    }
    let mut logging = logging::init(
        &config.server.log_level,
        config.server.log_format,
        config.server.log_file.as_deref(),
    )?;
    if let Some(warnings) = warnings {
        tracing::warn!("{warnings}");
    }
    // Read the password, ACL and SCRAM files and the JWT key now: a broker that cannot
    // check who connects does not start.
    config.auth.prepare()?;

    let threads = match config.server.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let config_path = args.config.clone();
    let runtime = hayate_server::runtime::build(threads).context("starting the runtime")?;
    runtime.block_on(async move {
        let server = Server::start(config).await.context("starting listeners")?;
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            threads,
            "hayate_started"
        );
        // systemd (Type=notify): listeners are bound and the store restored.
        notify::notify("READY=1");
        // SIGINT/SIGTERM stop the broker; SIGHUP re-reads the files it loaded (password, ACL
        // and SCRAM files, JWT key, certificates, PSK keys), keeping the old ones on error,
        // and applies the configuration file's limits, listeners, log level and bridges
        // (docs/OPERATIONS.md), naming what needs a restart.
        let mut signals = Signals::new(server.shutdown_trigger().subscribe());
        while let Signal::Hangup = signals.next().await {
            if let Err(error) = logging.reopen() {
                tracing::error!(%error, "log_file_reopen_failed");
            }
            tracing::info!("reload_requested");
            // The log level first, so that what the reload logs is filtered by the new one.
            let reloaded = config_path
                .as_deref()
                .map(|path| (path, reloaded_config(path, &args)));
            if let Some((path, Ok(config))) = &reloaded {
                reload_log_level(&args, &mut logging, config);
                if let Some(started) = &started_with {
                    match started.needing_restart(path) {
                        Ok(keys) if keys.is_empty() => {}
                        Ok(keys) => {
                            tracing::warn!(keys = %keys.join(", "), "config_changed_needs_restart")
                        }
                        Err(error) => tracing::error!(%error, "config_reload_failed"),
                    }
                }
            }
            server.reload_transports();
            let hooks = server.broker.hooks.clone();
            let _ = tokio::task::spawn_blocking(move || hooks.reload()).await;
            // A file that does not load (or asks for what cannot run) changes nothing else.
            let config = match reloaded {
                None => continue,
                Some((_, Ok(config))) => config,
                Some((_, Err(error))) => {
                    tracing::error!(error = %format!("{error:#}"), "config_reload_failed_keeping_the_running_settings");
                    continue;
                }
            };
            let report = server.reload(&config).await;
            server.reload_bridges(config.bridges).await;
            if !report.errors.is_empty() {
                tracing::error!(errors = %report.errors.join("; "), "config_reload_incomplete");
            }
        }
        tracing::info!("shutdown_requested");
        notify::notify("STOPPING=1");
        let _ = server.shutdown_trigger().send(true);
        let mut server = server;
        server.wait().await;
        tracing::info!("hayate_stopped");
        Ok(())
    })
}

/// The command line over the file (at start and again on each reload): listeners,
/// threads, log level, data directory, cluster, durability, HTTP listener.
fn apply_overrides(config: &mut Config, args: &ServeArgs) {
    if !args.listen.is_empty() {
        config.server.listen = args.listen.clone();
    }
    if let Some(threads) = args.threads {
        config.server.threads = threads;
    }
    if let Some(level) = &args.log_level {
        config.server.log_level = level.clone();
    }
    if let Some(dir) = &args.data_dir {
        config.storage.dir = Some(dir.clone());
    }
    apply_cluster_args(config, args);
    if let Some(mode) = args.durability {
        config.storage.durability = match mode {
            DurabilityArg::Batched => Durability::Batched,
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Off => Durability::Off,
        };
    }
    if let Some(addr) = &args.http {
        config.http.listen = Some(addr.clone());
    }
}

/// `--node-name`, `--cluster-listen`, `--join` over the file's `[cluster]`.
fn apply_cluster_args(config: &mut Config, args: &ServeArgs) {
    if let (Some(name), Some(listen)) = (&args.node_name, args.cluster_listen) {
        let mut cluster = config
            .cluster
            .take()
            .unwrap_or_else(|| hayate_cluster::ClusterConfig::new(name, listen, Vec::new()));
        cluster.node_name = name.clone();
        cluster.listen = listen;
        config.cluster = Some(cluster);
    }
    if !args.join.is_empty() {
        if let Some(cluster) = config.cluster.as_mut() {
            cluster.join = args.join.clone();
        }
    }
}

/// The configuration file read again (SIGHUP) with the command line over it, checked as at
/// start (bridges included).
fn reloaded_config(path: &Path, args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(path)?;
    apply_overrides(&mut config, args);
    config.validate()?;
    for bridge in &config.bridges {
        bridge
            .validate()
            .map_err(|error| anyhow::anyhow!("bridge {}: {error}", bridge.name))?;
    }
    for (index, bridge) in config.bridges.iter().enumerate() {
        if config.bridges[..index]
            .iter()
            .any(|b| b.name == bridge.name)
        {
            anyhow::bail!("two bridges are named {:?}", bridge.name);
        }
    }
    config.ensure_runnable()?;
    Ok(config)
}

/// On SIGHUP: the log level from the configuration file read again (a `--log-level` on the
/// command line keeps precedence).
fn reload_log_level(args: &ServeArgs, logging: &mut logging::Logging, config: &Config) {
    if args.log_level.is_some() {
        return;
    }
    let level = &config.server.log_level;
    match logging.set_level(level) {
        Ok(true) => tracing::info!(level, "log_level_changed"),
        Ok(false) => {}
        Err(error) => tracing::error!(%error, "log_level_reload_failed"),
    }
}

enum Signal {
    Stop,
    Hangup,
}

/// The process signals the broker acts on, and a shutdown started from within (the admin
/// API's cluster leave).
struct Signals {
    terminate: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Signals {
    fn new(shutdown: tokio::sync::watch::Receiver<bool>) -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
            shutdown,
        }
    }

    async fn next(&mut self) -> Signal {
        async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => Signal::Stop,
            _ = recv(&mut self.terminate) => Signal::Stop,
            _ = recv(&mut self.hangup) => Signal::Hangup,
            _ = self.shutdown.wait_for(|stopping| *stopping) => Signal::Stop,
        }
    }
}
