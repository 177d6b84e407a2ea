//! From Mosquitto lines to a Hayate [`Config`]: sections, global keys, and the checks that
//! need the whole file (per-listener security, bridges, the default listener).

use super::bridge::{self, BridgeConfig, BRIDGE_KEYS};
use super::listeners::{warning, ListenerDraft, Security, SECURITY_KEYS};
use super::reader::Line;
use super::{path_value, MosquittoError, Translation, Warning};
use crate::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;

/// "No limit" for Hayate's `usize` limits (what TOML can hold).
pub(super) const UNLIMITED: usize = i64::MAX as usize;

/// Global keys accepted without effect, and why.
const WARNED: &[(&str, &str)] = &[
    ("pid_file", "Hayate writes no pid file"),
    (
        "user",
        "Hayate does not change user: start it as the user it should run as",
    ),
    (
        "autosave_interval",
        "Hayate writes its store incrementally, not as periodic snapshots",
    ),
    (
        "autosave_on_changes",
        "Hayate writes its store incrementally, not as periodic snapshots",
    ),
    (
        "persistence_file",
        "Hayate's store is a directory (persistence_location)",
    ),
    (
        "log_timestamp_format",
        "Hayate's log lines carry RFC 3339 timestamps",
    ),
    ("log_facility", "Hayate does not log to syslog"),
    (
        "websockets_log_level",
        "Hayate logs WebSocket events with its own log level",
    ),
    (
        "auto_id_prefix",
        "Hayate assigns client identifiers of its own form",
    ),
    (
        "allow_duplicate_messages",
        "deprecated by Mosquitto; Hayate follows MQTT's rules for overlapping subscriptions",
    ),
    (
        "retry_interval",
        "no longer available in Mosquitto 2 either; Hayate resends on reconnection as MQTT requires",
    ),
];

/// Global keys that Hayate cannot honour with any value.
const REFUSED: &[(&str, &str)] = &[
    ("clientid_prefixes", "client id prefixes are not supported"),
    ("auth_plugin", "plugins are not supported"),
    ("plugin", "plugins are not supported"),
    ("global_plugin", "plugins are not supported"),
    (
        "auth_plugin_deny_special_chars",
        "plugins are not supported",
    ),
    ("use_username_as_clientid", "not supported"),
];

/// Which section later keys belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before any `listener` or `connection` line: listener keys go to the default listener.
    Default,
    /// After `listener`: index into `listeners`.
    Listener(usize),
    /// After `connection`: index into `bridges`.
    Bridge(usize),
}

struct Translator {
    config: Config,
    warnings: Vec<Warning>,
    per_listener: bool,
    section: Section,
    default_listener: ListenerDraft,
    listeners: Vec<ListenerDraft>,
    global_security: Security,
    bridges: Vec<(BridgeConfig, Line)>,
    persistence: bool,
    persistence_location: Option<PathBuf>,
    persistence_location_line: Option<Line>,
    log_types: Vec<String>,
    log_dest_none: bool,
}

/// Translates the lines of a main file (includes already inlined).
pub(super) fn translate(lines: &[Line], origin: &str) -> Result<Translation, MosquittoError> {
    let mut translator = Translator {
        config: Config::default(),
        warnings: Vec::new(),
        per_listener: per_listener_settings(lines)?,
        section: Section::Default,
        default_listener: ListenerDraft::default(),
        listeners: Vec::new(),
        global_security: Security::default(),
        bridges: Vec::new(),
        persistence: false,
        persistence_location: None,
        persistence_location_line: None,
        log_types: Vec::new(),
        log_dest_none: false,
    };
    for line in lines {
        translator.line(line)?;
    }
    translator.finish(origin)
}

/// `per_listener_settings` decides where security keys go; as in Mosquitto, `true` must come
/// before any security key.
fn per_listener_settings(lines: &[Line]) -> Result<bool, MosquittoError> {
    let mut value = false;
    let mut security_seen = false;
    for line in lines {
        if line.key == "per_listener_settings" {
            value = line.boolean()?;
            if value && security_seen {
                return Err(line.error("must come before any security setting (allow_anonymous, password_file, acl_file, psk_file)"));
            }
        } else if SECURITY_KEYS.contains(&line.key.as_str()) {
            security_seen = true;
        }
    }
    Ok(value)
}

impl Translator {
    fn line(&mut self, line: &Line) -> Result<(), MosquittoError> {
        let key = line.key.as_str();
        match key {
            "per_listener_settings" => return Ok(()),
            "listener" => {
                self.listeners.push(ListenerDraft::from_line(line)?);
                self.section = Section::Listener(self.listeners.len() - 1);
                return Ok(());
            }
            "connection" => {
                let name = line.word()?;
                if self.bridges.iter().any(|(b, _)| b.name == name) {
                    return Err(line.error(format!("a bridge named {name:?} exists already")));
                }
                self.bridges.push((BridgeConfig::new(name), line.clone()));
                self.section = Section::Bridge(self.bridges.len() - 1);
                return Ok(());
            }
            "port" => return self.default_listener.set_port(line),
            "bind_address" => return self.default_listener.set_bind(line),
            _ => {}
        }
        if BRIDGE_KEYS.contains(&key) {
            return match self.section {
                Section::Bridge(index) => {
                    bridge::apply(&mut self.bridges[index].0, line).map(|_| ())
                }
                _ => Err(line.error("a bridge key outside a bridge section (`connection NAME`)")),
            };
        }
        if self.security(line)? || self.listener_key(line)? || self.global(line)? {
            return Ok(());
        }
        Err(line.error("unknown key"))
    }

    /// The listener a listener key applies to here.
    fn current_listener(&mut self, line: &Line) -> Result<&mut ListenerDraft, MosquittoError> {
        match self.section {
            Section::Default => Ok(&mut self.default_listener),
            Section::Listener(index) => Ok(&mut self.listeners[index]),
            Section::Bridge(_) => Err(line.error(
                "a listener key inside a bridge section: move it above the `connection` line",
            )),
        }
    }

    fn security(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        if !self.per_listener {
            return self.global_security.apply(line);
        }
        let mut probe = Security::default();
        if !probe.apply(line)? {
            return Ok(false);
        }
        self.current_listener(line)?.security.apply(line)
    }

    fn listener_key(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        let mut probe = ListenerDraft::default();
        if !probe.apply(line, &mut Vec::new())? {
            return Ok(false);
        }
        let mut warnings = std::mem::take(&mut self.warnings);
        let result = self
            .current_listener(line)
            .and_then(|l| l.apply(line, &mut warnings));
        self.warnings = warnings;
        result
    }

    fn global(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        let key = line.key.as_str();
        if let Some((_, reason)) = REFUSED.iter().find(|(k, _)| *k == key) {
            return Err(line.error(*reason));
        }
        if key.starts_with("auth_opt_") || key.starts_with("plugin_opt_") {
            return Err(line.error("plugins are not supported"));
        }
        if let Some((_, reason)) = WARNED.iter().find(|(k, _)| *k == key) {
            line.string()?;
            self.warnings.push(warning(line, reason));
            return Ok(true);
        }
        Ok(self.limit(line)? || self.behaviour(line)? || self.storage_or_log(line)?)
    }

    /// Limits with a Hayate `[broker]` key of the same meaning.
    fn limit(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        let broker = &mut self.config.broker;
        match line.key.as_str() {
            "max_inflight_messages" => {
                // Mosquitto: negative, 0 and 65535 mean no limit; more is an error.
                broker.max_inflight_messages = match line.integer_in(i64::MIN, u16::MAX.into())? {
                    n if n <= 0 => u16::MAX,
                    n => n as u16,
                }
            }
            "max_queued_messages" => {
                broker.max_queued_messages = match line.integer()? {
                    n if n <= 0 => UNLIMITED,
                    n => n as usize,
                }
            }
            "max_queued_bytes" => {
                broker.max_queued_bytes = match line.integer()? {
                    n if n <= 0 => UNLIMITED,
                    n => n as usize,
                }
            }
            "max_packet_size" => {
                // Mosquitto refuses values below 20 (0 included); unset means no limit.
                let max = i64::from(hayate_codec::MAX_VARIABLE_INT) + 5;
                let value = line.integer_in(20, max)?;
                if value < 64 {
                    return Err(line.error("Hayate's smallest max_packet_size is 64"));
                }
                broker.max_packet_size = value as u32;
            }
            "max_keepalive" => {
                // 0: Mosquitto sets no limit.
                broker.max_keep_alive = match line.integer_in(0, u16::MAX.into())? {
                    0 => u16::MAX,
                    n => n as u16,
                }
            }
            "persistent_client_expiration" => {
                broker.max_session_expiry_interval = expiration(line)?;
            }
            "message_size_limit" | "max_inflight_bytes" | "memory_limit" => {
                if line.integer_in(0, i64::MAX)? != 0 {
                    return Err(line.error(no_equivalent(&line.key)));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Protocol behaviour switches.
    fn behaviour(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        match line.key.as_str() {
            "retain_available" => self.config.broker.retain_available = line.boolean()?,
            "queue_qos0_messages" => self.config.broker.queue_qos0_offline = line.boolean()?,
            "sys_interval" => {
                self.config.server.sys_interval_secs = line.integer_in(0, 65_535)? as u64
            }
            "set_tcp_nodelay" => self.config.server.tcp_nodelay = line.boolean()?,
            // Hayate's behaviour is Mosquitto's default for these; the other value is refused.
            "allow_zero_length_clientid" => require(line, true)?,
            "upgrade_outgoing_qos" | "check_retain_source" => require(line, false)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn storage_or_log(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        match line.key.as_str() {
            "persistence" | "retained_persistence" => self.persistence = line.boolean()?,
            "persistence_location" => {
                self.persistence_location = Some(path_value(line.string()?));
                self.persistence_location_line = Some(line.clone());
            }
            "log_type" => {
                let kind = line.word()?;
                const TYPES: &[&str] = &[
                    "debug",
                    "error",
                    "warning",
                    "notice",
                    "information",
                    "subscribe",
                    "unsubscribe",
                    "websockets",
                    "none",
                    "all",
                ];
                if !TYPES.contains(&kind) {
                    return Err(line.error(format!("unknown log type {kind:?}")));
                }
                self.log_types.push(kind.to_string());
            }
            "log_dest" => self.log_dest(line)?,
            "log_timestamp" => {
                if !line.boolean()? {
                    let reason = "Hayate's log lines always carry a timestamp";
                    self.warnings.push(warning(line, reason));
                }
            }
            "connection_messages" => {
                if line.boolean()? {
                    let reason = "Hayate does not log each connection (closes at debug level)";
                    self.warnings.push(warning(line, reason));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn log_dest(&mut self, line: &Line) -> Result<(), MosquittoError> {
        let words = line.words();
        match words.as_slice() {
            ["stdout"] => {}
            ["none"] => self.log_dest_none = true,
            ["stderr" | "syslog" | "topic" | "dlt"] | ["file", _, ..] => {
                let reason = "Hayate logs to standard output only";
                self.warnings.push(warning(line, reason));
            }
            ["file"] => return Err(line.error("log_dest file needs a file name")),
            _ => {
                return Err(line.error(format!(
                    "expected stdout, stderr, syslog, topic, dlt, none or file PATH, got {:?}",
                    line.value
                )))
            }
        }
        Ok(())
    }

    fn finish(mut self, origin: &str) -> Result<Translation, MosquittoError> {
        self.finish_listeners()?;
        self.finish_logging();
        if self.persistence {
            let dir = self
                .persistence_location
                .take()
                .unwrap_or_else(|| PathBuf::from("."));
            self.config.storage.dir = Some(dir);
        } else if let Some(line) = &self.persistence_location_line {
            let reason = "persistence is not on (as in Mosquitto, the location is not used)";
            self.warnings.push(warning(line, reason));
        }
        for (bridge, line) in &self.bridges {
            bridge.validate().map_err(|message| line.error(message))?;
        }
        self.config.bridges = self.bridges.into_iter().map(|(b, _)| b).collect();
        self.config
            .validate()
            .map_err(|e| MosquittoError::Invalid {
                file: origin.to_string(),
                message: e.to_string(),
            })?;
        Ok(Translation {
            config: self.config,
            warnings: self.warnings,
            origin: origin.to_string(),
        })
    }

    fn finish_listeners(&mut self) -> Result<(), MosquittoError> {
        let mut drafts = Vec::new();
        if self.default_listener.is_configured() {
            drafts.push(std::mem::take(&mut self.default_listener));
        } else if let Some(line) = &self.default_listener.security.first {
            return Err(line.error(
                "with per_listener_settings true this applies to the default listener, which is not configured (no port or listener key before the first `listener` line): move it below a `listener` line",
            ));
        }
        drafts.append(&mut self.listeners);
        if drafts.is_empty() {
            // Mosquitto 2 without listeners: local only, on port 1883, anonymous allowed.
            self.config.server.listen = vec![SocketAddr::from(([127, 0, 0, 1], 1883))];
            let security = std::mem::take(&mut self.global_security);
            self.apply_security(&security, true);
            return Ok(());
        }
        self.config.server.listen = Vec::new();
        let shared = if self.per_listener {
            shared_security(&drafts)?
        } else {
            std::mem::take(&mut self.global_security)
        };
        for draft in &drafts {
            let security = if self.per_listener {
                &draft.security
            } else {
                &shared
            };
            let listener = draft.translate(security, self.per_listener, &mut self.warnings)?;
            self.config.listeners.push(listener);
        }
        let limits = super::listeners::shared_protocol_limits(&drafts)?;
        if let Some(max_qos) = limits.max_qos {
            self.config.broker.max_qos = max_qos;
        }
        if let Some(aliases) = limits.max_topic_alias {
            self.config.broker.topic_alias_maximum = aliases;
        }
        let psk_listener = self.config.listeners.iter().any(|l| l.psk_file.is_some());
        if let (false, Some(line)) = (psk_listener, &shared.psk_file_line) {
            let reason = "no listener has psk_hint (as in Mosquitto, the file is not used)";
            self.warnings.push(warning(line, reason));
        }
        self.apply_security(&shared, false);
        Ok(())
    }

    fn apply_security(&mut self, security: &Security, anonymous_default: bool) {
        let auth = &mut self.config.auth;
        auth.allow_anonymous = if self.per_listener && !self.config.listeners.is_empty() {
            false
        } else {
            security.allow_anonymous.unwrap_or(anonymous_default)
        };
        auth.password_file = security.password_file.as_ref().map(|(p, _)| p.clone());
        auth.acl_file = security.acl_file.as_ref().map(|(p, _)| p.clone());
    }

    fn finish_logging(&mut self) {
        let has = |names: &[&str]| self.log_types.iter().any(|t| names.contains(&t.as_str()));
        let level = if self.log_dest_none {
            Some("off")
        } else if self.log_types.is_empty() {
            None
        } else if has(&["debug", "all"]) {
            Some("debug")
        } else if has(&[
            "information",
            "notice",
            "subscribe",
            "unsubscribe",
            "websockets",
        ]) {
            Some("info")
        } else if has(&["warning"]) {
            Some("warn")
        } else if has(&["error"]) {
            Some("error")
        } else {
            Some("off")
        };
        if let Some(level) = level {
            self.config.server.log_level = level.to_string();
        }
    }
}

/// With `per_listener_settings true`: Hayate has one password file and one ACL file for all
/// listeners, so every listener must name the same ones (`allow_anonymous` may differ).
fn shared_security(drafts: &[ListenerDraft]) -> Result<Security, MosquittoError> {
    let first = &drafts[0].security;
    for draft in &drafts[1..] {
        let other = &draft.security;
        let pairs = [
            ("password_file", &first.password_file, &other.password_file),
            ("acl_file", &first.acl_file, &other.acl_file),
        ];
        for (key, a, b) in pairs {
            let same = a.as_ref().map(|(p, _)| p) == b.as_ref().map(|(p, _)| p);
            if !same {
                let line = b.as_ref().map_or(draft.anchor(), |(_, l)| l);
                return Err(line.error(format!(
                    "per_listener_settings true with a {key} that differs between listeners: Hayate has one {key} for all listeners"
                )));
            }
        }
    }
    Ok(first.clone())
}

fn require(line: &Line, supported: bool) -> Result<(), MosquittoError> {
    if line.boolean()? != supported {
        return Err(line.error(format!("only {supported} is supported")));
    }
    Ok(())
}

fn no_equivalent(key: &str) -> String {
    match key {
        "message_size_limit" => {
            "Hayate limits whole packets, not payloads: use max_packet_size (Mosquitto 2 deprecates message_size_limit); only 0 can be honoured".into()
        }
        other => format!("Hayate has no {other}; only 0 (no limit) can be honoured"),
    }
}

/// `persistent_client_expiration`: a number and a unit (h, d, w, m = 30 days, y = 365 days).
fn expiration(line: &Line) -> Result<u32, MosquittoError> {
    let word = line.word()?;
    let (number, unit) = word.split_at(word.len() - 1);
    let seconds: u64 = match unit {
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        "m" => 30 * 86_400,
        "y" => 365 * 86_400,
        _ => {
            return Err(line.error(format!(
                "expected a number and h, d, w, m or y, got {word:?}"
            )))
        }
    };
    let number: u64 = number.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        line.error(format!(
            "expected a number and h, d, w, m or y, got {word:?}"
        ))
    })?;
    Ok(number.saturating_mul(seconds).min(u64::from(u32::MAX)) as u32)
}
