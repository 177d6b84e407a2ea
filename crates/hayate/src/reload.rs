//! What a SIGHUP cannot apply: the keys of the configuration file that changed since the
//! broker started, other than those a reload applies, named in one log line.
//!
//! A mosquitto.conf is compared in its `hayate config convert` form, so its changes are
//! named by the Hayate keys they map to.

use hayate_server::config::{mosquitto, ConfigFormat};
use hayate_server::Config;
use std::collections::BTreeSet;
use std::path::Path;

/// Keys a SIGHUP applies besides `[broker]` (all of it but [`BrokerConfig::RESTART_KEYS`])
/// and the files it re-reads (password, ACL, SCRAM, JWT key, certificates, PSK keys): the
/// log level, the bridges (`[[bridge]]`, restarted one by one when changed), the listeners
/// (added, removed, changed) and the connection settings of new connections
/// (`docs/OPERATIONS.md` has the table).
///
/// [`BrokerConfig::RESTART_KEYS`]: hayate_core::BrokerConfig::RESTART_KEYS
const APPLIED_ON_RELOAD: &[&str] = &[
    "server.log_level",
    "bridge",
    "listener",
    "server.listen",
    "server.max_connections",
    "server.connect_timeout_secs",
    "server.tcp_nodelay",
    "server.max_pending_write_bytes",
    "server.max_inbound_bytes_per_sec",
    "server.max_inbound_messages_per_sec",
];

/// Whether a reload applies the key (`table.key`, or `listener`/`bridge` for the arrays).
pub fn applied(key: &str) -> bool {
    match key.split_once('.') {
        Some(("broker", name)) => !hayate_core::BrokerConfig::RESTART_KEYS.contains(&name),
        _ => APPLIED_ON_RELOAD.contains(&key),
    }
}

/// The configuration file as it was when the broker started, as a TOML table.
pub struct StartedWith {
    table: toml::Table,
}

impl StartedWith {
    /// Keeps the file's settings as read at start (`None` when it cannot be read).
    pub fn read(path: &Path) -> Option<StartedWith> {
        Some(StartedWith {
            table: table_of(path).ok()?,
        })
    }

    /// The changed keys that need a restart (`table.key`, or `listener` for a changed
    /// `[[listener]]` array).
    pub fn needing_restart(&self, path: &Path) -> anyhow::Result<Vec<String>> {
        let now = table_of(path)?;
        Ok(changed_keys(&self.table, &now)
            .into_iter()
            .filter(|key| !applied(key))
            .collect())
    }
}

/// The file's settings as a TOML table: a Hayate file as written, a mosquitto.conf as
/// `hayate config convert` writes it.
fn table_of(path: &Path) -> anyhow::Result<toml::Table> {
    let loaded = Config::load_file(path)?;
    let text = match loaded.format {
        ConfigFormat::Toml => std::fs::read_to_string(path)?,
        ConfigFormat::Mosquitto => mosquitto::to_toml(&loaded.config, ""),
    };
    Ok(text.parse()?)
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
        // A table present on one side only is compared key by key with an empty one.
        let empty = toml::Table::new();
        match (old.get(key), new.get(key)) {
            (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
                walk(a, b, &path, changed)
            }
            (Some(toml::Value::Table(a)), None) => walk(a, &empty, &path, changed),
            (None, Some(toml::Value::Table(b))) => walk(&empty, b, &path, changed),
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
        let added: toml::Table = "[storage]\ndir = \"x\"\n".parse().unwrap();
        assert_eq!(changed_keys(&toml::Table::new(), &added), ["storage.dir"]);
        assert_eq!(changed_keys(&added, &toml::Table::new()), ["storage.dir"]);
    }

    #[test]
    fn limits_listeners_and_the_log_level_need_no_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hayate.toml");
        std::fs::write(&path, "[server]\nlog_level = \"info\"\n").unwrap();
        let started = StartedWith::read(&path).unwrap();
        assert!(started.needing_restart(&path).unwrap().is_empty());
        std::fs::write(
            &path,
            "[server]\nlog_level = \"debug\"\nmax_connections = 5\n[broker]\nmax_packet_size = 2000\n\
             [[listener]]\nbind = \"127.0.0.1:1884\"\n",
        )
        .unwrap();
        assert!(started.needing_restart(&path).unwrap().is_empty());
        std::fs::write(
            &path,
            "[server]\nlog_level = \"debug\"\nthreads = 1\n[broker]\nretain_available = false\n",
        )
        .unwrap();
        assert_eq!(
            started.needing_restart(&path).unwrap(),
            ["broker.retain_available", "server.threads"]
        );
        std::fs::write(&path, "[server]\nthreads = \"x\"\n").unwrap();
        assert!(started.needing_restart(&path).is_err(), "an invalid file");
    }

    #[test]
    fn a_mosquitto_file_is_compared_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mosquitto.conf");
        std::fs::write(&path, "listener 1883 127.0.0.1\nallow_anonymous true\n").unwrap();
        let started = StartedWith::read(&path).unwrap();
        std::fs::write(
            &path,
            "listener 1883 127.0.0.1\nallow_anonymous true\nmax_inflight_messages 5\nlistener 1884 127.0.0.1\n",
        )
        .unwrap();
        assert!(started.needing_restart(&path).unwrap().is_empty());
        std::fs::write(
            &path,
            "listener 1883 127.0.0.1\nallow_anonymous true\nsys_interval 3\n",
        )
        .unwrap();
        assert_eq!(
            started.needing_restart(&path).unwrap(),
            ["server.sys_interval_secs"]
        );
    }
}
