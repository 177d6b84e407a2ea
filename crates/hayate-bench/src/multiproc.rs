//! Worker processes: beyond ~19k sockets per process (the open-files limit here), a run
//! re-executes the current binary with the hidden `bench __worker` subcommand once per extra
//! process. Each worker runs one part; coordinator and worker talk JSON lines over the
//! worker's stdin/stdout; stderr is inherited.

use crate::clock::Clock;
use crate::engine::{link_pair, run_part, LiveSnapshot, PartEvent, PartLink, PartSpec};
use crate::error::{BenchError, Result};
use crate::procstat;
use crate::stats::Credit;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Coordinator → worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    /// The part to run (first line).
    Spec(Box<PartSpec>),
    /// Start sending at this time (ns since the epoch).
    Go(u64),
    /// New shaping credit.
    Credit(u64),
    /// Disconnect and report.
    Stop,
}

/// Worker → coordinator.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// Live counters (every 100 ms).
    Live(LiveSnapshot),
    /// A part event.
    Event(PartEvent),
}

/// How to start a worker: program and leading arguments (`__worker` is appended).
pub fn default_worker_command() -> Vec<OsString> {
    let exe = std::env::var_os("HAYATE_BENCH_WORKER_EXE")
        .or_else(|| std::env::current_exe().ok().map(|p| p.into_os_string()))
        .unwrap_or_else(|| OsString::from("hayate"));
    vec![exe, OsString::from("bench")]
}

/// Starts a worker process running `spec`.
pub async fn spawn_remote(
    spec: PartSpec,
    credit: Arc<Credit>,
    command: &[OsString],
) -> Result<PartLink> {
    let index = spec.index;
    let fail = |reason: String| BenchError::Worker { index, reason };
    let (program, args) = command
        .split_first()
        .ok_or_else(|| fail("no worker command".into()))?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .arg("__worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", program.to_string_lossy())))?;
    let mut stdin = child.stdin.take().ok_or_else(|| fail("no stdin".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("no stdout".into()))?;
    let (mut link, ctrl) = link_pair(index, credit);
    let first = serde_json::to_string(&ToWorker::Spec(Box::new(spec)))? + "\n";
    stdin
        .write_all(first.as_bytes())
        .await
        .map_err(|e| fail(format!("writing the spec: {e}")))?;
    // Forward go / credit / stop.
    let mut go = ctrl.go.clone();
    let mut stop = ctrl.stop.clone();
    let credit = ctrl.credit.clone();
    tokio::spawn(async move {
        let mut last_credit = 0;
        let mut go_sent = false;
        loop {
            let mut lines = String::new();
            if !go_sent {
                if let Some(g) = *go.borrow_and_update() {
                    lines += &(serde_json::to_string(&ToWorker::Go(g)).unwrap_or_default() + "\n");
                    go_sent = true;
                }
            }
            let c = credit.value.load(Ordering::Acquire);
            if c != last_credit {
                last_credit = c;
                lines += &(serde_json::to_string(&ToWorker::Credit(c)).unwrap_or_default() + "\n");
            }
            let stopping = *stop.borrow_and_update();
            if stopping {
                lines += &(serde_json::to_string(&ToWorker::Stop).unwrap_or_default() + "\n");
            }
            if !lines.is_empty() && stdin.write_all(lines.as_bytes()).await.is_err() {
                return;
            }
            if stopping {
                let _ = stdin.flush().await;
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                _ = go.changed(), if !go_sent => {}
                _ = stop.changed() => {}
            }
        }
    });
    // Read live counters and events.
    let live = ctrl.live.clone();
    let events = ctrl.events.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut finished = false;
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<FromWorker>(&line) {
                Ok(FromWorker::Live(s)) => live.store(&s),
                Ok(FromWorker::Event(e)) => {
                    finished |= matches!(e, PartEvent::Finished(_));
                    let _ = events.send(e);
                }
                Err(e) => {
                    let _ = events.send(PartEvent::Failed(format!("bad line from worker: {e}")));
                }
            }
        }
        if !finished {
            let _ = events.send(PartEvent::Failed("worker exited before reporting".into()));
        }
    });
    drop(ctrl);
    link.child = Some(child);
    Ok(link)
}

/// Entry point of a worker process: reads its part from stdin, runs it, reports on stdout.
/// Returns the process exit code.
pub fn worker_main() -> i32 {
    let mut first = String::new();
    if std::io::stdin().read_line(&mut first).is_err() {
        return 2;
    }
    let spec = match serde_json::from_str::<ToWorker>(&first) {
        Ok(ToWorker::Spec(spec)) => *spec,
        _ => {
            tracing::error!("worker: the first line is not a part spec");
            return 2;
        }
    };
    procstat::raise_open_files_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(spec.threads.max(1))
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("worker: cannot start the runtime: {e}");
            return 2;
        }
    };
    runtime.block_on(worker_async(spec));
    0
}

async fn worker_async(spec: PartSpec) {
    let clock = Clock::from_epoch(spec.epoch);
    let (sampler_stop_tx, sampler_stop) = tokio::sync::watch::channel(false);
    let (samples, sampler) = procstat::spawn_sampler(None, clock, spec.interval_ns, sampler_stop);
    let mut sampler = Some(sampler);
    let credit = Arc::new(Credit::new(match &spec.kind {
        crate::engine::PartKind::Publish(p) => p.window.unwrap_or(u64::MAX),
        _ => u64::MAX,
    }));
    let (mut link, ctrl) = link_pair(spec.index, credit);
    let events = ctrl.events.clone();
    tokio::spawn(async move {
        let report = run_part(spec, ctrl, None).await;
        let _ = events.send(PartEvent::Finished(Box::new(report)));
    });
    // stdin → control
    let go = link.go.clone();
    let stop = link.stop.clone();
    let credit = link.credit.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => match serde_json::from_str::<ToWorker>(&line) {
                    Ok(ToWorker::Go(g)) => {
                        let _ = go.send(Some(g));
                    }
                    Ok(ToWorker::Credit(c)) => credit.raise(c),
                    Ok(ToWorker::Stop) => {
                        let _ = stop.send(true);
                    }
                    _ => {}
                },
                // The coordinator went away: stop.
                _ => {
                    let _ = stop.send(true);
                    return;
                }
            }
        }
    });
    // events + live → stdout
    let mut stdout = tokio::io::stdout();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            ev = link.events.recv() => {
                let Some(mut ev) = ev else { break };
                let finished = matches!(ev, PartEvent::Finished(_));
                if let PartEvent::Finished(report) = &mut ev {
                    let _ = sampler_stop_tx.send(true);
                    if let Some(handle) = sampler.take() {
                        let _ = tokio::time::timeout(Duration::from_secs(2), handle).await;
                    }
                    report.process = samples.lock().clone();
                }
                let live = FromWorker::Live(link.live.snapshot());
                let mut text = serde_json::to_string(&live).unwrap_or_default() + "\n";
                text += &(serde_json::to_string(&FromWorker::Event(ev)).unwrap_or_default() + "\n");
                if stdout.write_all(text.as_bytes()).await.is_err() {
                    break;
                }
                let _ = stdout.flush().await;
                if finished {
                    break;
                }
            }
            _ = tick.tick() => {
                let line = serde_json::to_string(&FromWorker::Live(link.live.snapshot())).unwrap_or_default() + "\n";
                if stdout.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                let _ = stdout.flush().await;
            }
        }
    }
    if let Some(handle) = sampler.take() {
        let _ = sampler_stop_tx.send(true);
        let _ = handle.await;
    }
}
