//! What a SIGHUP cannot apply: the keys of the configuration file that changed since the
//! broker started, other than those a reload applies, named in one log line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Keys a SIGHUP applies (besides the files it re-reads: password, ACL, SCRAM, JWT key,
/// certificates, PSK keys): the log level and the bridges (`[[bridge]]`, restarted one by
/// one when changed).
const APPLIED_ON_RELOAD: &[&str] = &["server.log_level", "bridge"];

/// The configuration file as it was when the broker started.
pub struct StartedWith {
    path: PathBuf,
    text: String,
}

impl StartedWith {
    /// Keeps the file's text as read at start (`None` when it cannot be read).
    pub fn read(path: &Path) -> Option<StartedWith> {
        Some(StartedWith {
            path: path.to_path_buf(),
            text: std::fs::read_to_string(path).ok()?,
        })
    }

    /// The changed keys that need a restart (`table.key`, or `listener` for a changed
    /// `[[listener]]` array); for a file that is not TOML (a mosquitto.conf), `["the file"]`
    /// when its text changed at all.
    pub fn needing_restart(&self) -> std::io::Result<Vec<String>> {
        let now = std::fs::read_to_string(&self.path)?;
        if now == self.text {
            return Ok(Vec::new());
        }
        match (self.text.parse::<toml::Table>(), now.parse::<toml::Table>()) {
            (Ok(old), Ok(new)) => Ok(changed_keys(&old, &new)
                .into_iter()
                .filter(|key| !APPLIED_ON_RELOAD.contains(&key.as_str()))
                .collect()),
            _ => Ok(vec!["the file".to_string()]),
        }
    }
}

/// Dotted paths of the keys whose values differ (present in one table only included).
pub fn changed_keys(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    let mut changed = Vec::new();
    walk(old, new, "", &mut changed);
    changed
}

fn walk(old: &toml::Table, new: &toml::Table, prefix: &str, changed: &mut Vec<String>) {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (old.get(key), new.get(key)) {
            (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
                walk(a, b, &path, changed)
            }
            (a, b) if a != b => changed.push(path),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_changed_added_and_removed_keys() {
        let old: toml::Table = "[server]\nlog_level = \"info\"\nthreads = 2\n[broker]\nmax_packet_size = 1000\n[[listener]]\nbind = \"0.0.0.0:1\"\n"
            .parse()
            .unwrap();
        let new: toml::Table = "[server]\nlog_level = \"debug\"\nthreads = 2\nsys_interval_secs = 5\n[broker]\nmax_packet_size = 2000\n[[listener]]\nbind = \"0.0.0.0:2\"\n"
            .parse()
            .unwrap();
        assert_eq!(
            changed_keys(&old, &new),
            [
                "broker.max_packet_size",
                "listener",
                "server.log_level",
                "server.sys_interval_secs"
            ]
        );
        assert!(changed_keys(&old, &old).is_empty());
    }

    #[test]
    fn the_log_level_alone_needs_no_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hayate.toml");
        std::fs::write(&path, "[server]\nlog_level = \"info\"\n").unwrap();
        let started = StartedWith::read(&path).unwrap();
        assert!(started.needing_restart().unwrap().is_empty());
        std::fs::write(&path, "[server]\nlog_level = \"debug\"\n").unwrap();
        assert!(started.needing_restart().unwrap().is_empty());
        std::fs::write(&path, "[server]\nlog_level = \"debug\"\nthreads = 1\n").unwrap();
        assert_eq!(started.needing_restart().unwrap(), ["server.threads"]);
        std::fs::write(&path, "listener 1883\n").unwrap();
        assert_eq!(started.needing_restart().unwrap(), ["the file"]);
    }
}
