//! Process and machine figures from `/proc`: CPU time and RSS of a pid (the broker, or the
//! bench itself), whole-machine CPU busy time, and the machine description.

use crate::clock::Clock;
use crate::engine::ProcSample;
use crate::results::MachineInfo;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::watch;

/// CPU seconds (utime + stime) and RSS bytes of `pid` (`None`: this process).
pub fn read_process(pid: Option<u32>) -> Option<(f64, u64)> {
    let base = match pid {
        Some(p) => format!("/proc/{p}"),
        None => "/proc/self".to_string(),
    };
    let stat = std::fs::read_to_string(format!("{base}/stat")).ok()?;
    let cpu = parse_stat_cpu(&stat)?;
    let status = std::fs::read_to_string(format!("{base}/status")).ok()?;
    let rss = parse_status_rss(&status).unwrap_or(0);
    Some((cpu, rss))
}

/// utime + stime in seconds from the text of `/proc/PID/stat`.
pub fn parse_stat_cpu(stat: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    Some((utime + stime) as f64 / ticks as f64)
}

/// `VmRSS` in bytes from the text of `/proc/PID/status`.
pub fn parse_status_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The command line of `pid`, arguments joined by spaces.
pub fn process_command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    Some(parts.join(" "))
}

/// (busy, total) jiffies of the whole machine from `/proc/stat`.
pub fn machine_cpu() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    // idle + iowait
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// Logical CPUs available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Describes the machine.
pub fn machine_info() -> MachineInfo {
    let uname = rustix::system::uname();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_bytes = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    MachineInfo {
        cores: cores(),
        cpu_model,
        memory_bytes,
        kernel: uname.release().to_string_lossy().into_owned(),
        os: uname.sysname().to_string_lossy().into_owned(),
        hostname: uname.nodename().to_string_lossy().into_owned(),
        open_files_limit: open_files_limit(),
    }
}

/// The soft limit of open files.
pub fn open_files_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// Raises the soft open-files limit to the hard limit; returns the new soft limit.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let mut raised = limit;
        raised.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, raised);
    }
    open_files_limit()
}

/// Samples of one process, shared with whoever reads them while the run goes on.
pub type SampleLog = Arc<Mutex<Vec<ProcSample>>>;

/// Samples `pid` (`None`: this process) at every interval boundary of the run clock until
/// `stop` turns true.
pub fn spawn_sampler(
    pid: Option<u32>,
    clock: Clock,
    interval_ns: u64,
    mut stop: watch::Receiver<bool>,
) -> (SampleLog, tokio::task::JoinHandle<()>) {
    let log: SampleLog = Arc::new(Mutex::new(Vec::new()));
    let out = log.clone();
    let interval_ns = interval_ns.max(1_000_000);
    let handle = tokio::spawn(async move {
        let sample = |log: &SampleLog| {
            if let Some((cpu_s, rss)) = read_process(pid) {
                log.lock().push(ProcSample {
                    t_ns: clock.now_ns(),
                    cpu_s,
                    rss,
                });
            }
        };
        sample(&log);
        let mut next = (clock.now_ns() / interval_ns + 1) * interval_ns;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(clock.instant_at(next)) => {}
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        sample(&log);
                        return;
                    }
                    continue;
                }
            }
            sample(&log);
            next += interval_ns;
        }
    });
    (out, handle)
}

/// CPU percent (of one core) and RSS per interval index from cumulative samples: the CPU used
/// between consecutive samples is attributed to the interval the later one falls in.
pub fn per_interval(
    samples: &[ProcSample],
    interval_ns: u64,
    n: usize,
) -> Vec<(Option<f64>, Option<u64>)> {
    let mut out = vec![(None, None); n];
    let interval_ns = interval_ns.max(1);
    for w in samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b.t_ns <= a.t_ns {
            continue;
        }
        let idx = ((b.t_ns.saturating_sub(1)) / interval_ns) as usize;
        if idx >= n {
            continue;
        }
        let pct = 100.0 * (b.cpu_s - a.cpu_s) / ((b.t_ns - a.t_ns) as f64 / 1e9);
        let slot = &mut out[idx];
        slot.0 = Some(slot.0.map_or(pct, |p: f64| p.max(pct)));
        slot.1 = Some(b.rss);
    }
    out
}

/// Cumulative CPU seconds at time `t` by linear interpolation of the samples.
pub fn cpu_at(samples: &[ProcSample], t: u64) -> Option<f64> {
    let first = samples.first()?;
    if t <= first.t_ns {
        return Some(first.cpu_s);
    }
    for w in samples.windows(2) {
        if t <= w[1].t_ns {
            let span = (w[1].t_ns - w[0].t_ns).max(1) as f64;
            let f = (t - w[0].t_ns) as f64 / span;
            return Some(w[0].cpu_s + f * (w[1].cpu_s - w[0].cpu_s));
        }
    }
    samples.last().map(|s| s.cpu_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_and_status() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 1000000 500";
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        assert_eq!(parse_stat_cpu(stat), Some(300.0 / ticks));
        let status = "Name:\tx\nVmPeak:\t  1000 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_status_rss(status), Some(2048 * 1024));
    }

    #[test]
    fn reads_self_and_machine() {
        let (cpu, rss) = read_process(None).unwrap();
        assert!(cpu >= 0.0);
        assert!(rss > 0);
        let m = machine_info();
        assert!(m.cores >= 1);
        assert!(m.memory_bytes > 0);
        assert!(!m.kernel.is_empty());
        let (busy, total) = machine_cpu().unwrap();
        assert!(busy <= total);
    }

    #[test]
    fn interval_figures() {
        let s = |t_s: u64, cpu_s: f64| ProcSample {
            t_ns: t_s * 1_000_000_000,
            cpu_s,
            rss: t_s,
        };
        let samples = [s(0, 0.0), s(1, 0.5), s(2, 1.5)];
        let v = per_interval(&samples, 1_000_000_000, 3);
        assert_eq!(v[0], (Some(50.0), Some(1)));
        assert_eq!(v[1], (Some(100.0), Some(2)));
        assert_eq!(v[2], (None, None));
        assert_eq!(cpu_at(&samples, 1_500_000_000), Some(1.0));
    }
}
