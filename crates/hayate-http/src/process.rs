//! The process's own figures, read from `/proc/self` at scrape time (Linux).

/// Clock ticks per second of the times in `/proc/self/stat` (`USER_HZ`, 100 on Linux; the
/// kernel scales to it whatever its internal tick rate).
const USER_HZ: f64 = 100.0;

/// What `/proc/self` tells about this process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFigures {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Start time, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: u64,
    /// OS threads.
    pub threads: u64,
}

/// Reads the figures; those that cannot be read are 0 (not Linux, `/proc` not mounted).
pub fn read() -> ProcessFigures {
    let mut figures = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| parse_stat(&stat))
        .unwrap_or_default();
    if let Some(boot) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| boot_time(&stat))
    {
        figures.start_time_seconds += boot as f64;
    }
    figures.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.count() as u64)
        .unwrap_or(0);
    figures.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| max_open_files(&limits))
        .unwrap_or(0);
    figures
}

/// Parses `/proc/self/stat`: CPU times (fields 14, 15), threads (20), start time (22, ticks
/// after boot: added to the boot time by the caller), virtual size (23) and RSS in pages (24,
/// 4 KiB pages assumed).
pub fn parse_stat(stat: &str) -> Option<ProcessFigures> {
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state).
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = field(14)? + field(15)?;
    Some(ProcessFigures {
        cpu_seconds: ticks as f64 / USER_HZ,
        threads: field(20)?,
        start_time_seconds: field(22)? as f64 / USER_HZ,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * 4096,
        ..ProcessFigures::default()
    })
}

fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_spaces_in_the_name() {
        let stat = "4242 (hayate (w 1)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 \
                    9 0 12345 104857600 2560 18446744073709551615";
        let f = parse_stat(stat).unwrap();
        assert_eq!(f.cpu_seconds, 3.0);
        assert_eq!(f.threads, 9);
        assert_eq!(f.start_time_seconds, 123.45);
        assert_eq!(f.virtual_bytes, 104_857_600);
        assert_eq!(f.resident_bytes, 2560 * 4096);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn reads_this_process() {
        let f = read();
        assert!(f.resident_bytes > 0);
        assert!(f.open_fds > 0);
        assert!(f.max_fds >= f.open_fds);
        assert!(f.start_time_seconds > 1.0e9, "{f:?}");
    }

    #[test]
    fn boot_time_and_limits() {
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit Soft Hard Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }
}
