//! Mosquitto configuration files (`mosquitto.conf`), read as they are and translated into
//! Hayate's [`Config`]. `docs/MOSQUITTO-CONF.md` lists every key and what it becomes.
//!
//! The format: one `key value...` per line, `#` starts a comment line, blank lines are
//! skipped; `listener` starts a listener section and `connection` a bridge section;
//! `include_dir` reads the `.conf` files of a directory in Mosquitto's order.
//!
//! Every key ends in one of four ways: translated; accepted with a warning (it has no effect
//! in Hayate, and all such keys are named together in [`Translation::warning_line`]); an error
//! because its value cannot be honoured; an error because the key is unknown, malformed or
//! outside its section. Errors name the file, the line and the key.

mod bridge;
mod emit;
mod listeners;
mod reader;
mod translate;

pub use bridge::{BridgeConfig, BridgeDirection, BridgeProtocol, BridgeStartType, BridgeTopic};
pub use emit::to_toml;

use super::Config;
use std::fmt;
use std::path::{Path, PathBuf};

/// A Mosquitto file translated into Hayate's configuration.
#[derive(Debug)]
pub struct Translation {
    /// The equivalent Hayate configuration (validated).
    pub config: Config,
    /// Keys accepted without effect, in file order.
    pub warnings: Vec<Warning>,
    /// The main file's name.
    pub origin: String,
}

impl Translation {
    /// All warnings in one line (`None` when there are none).
    pub fn warning_line(&self) -> Option<String> {
        if self.warnings.is_empty() {
            return None;
        }
        let items: Vec<String> = self
            .warnings
            .iter()
            .map(|w| {
                let place = if w.file == self.origin {
                    format!("line {}", w.line)
                } else {
                    format!("{}:{}", w.file, w.line)
                };
                format!("{} ({place}: {})", w.key, w.reason)
            })
            .collect();
        Some(format!(
            "{}: Mosquitto keys without effect in Hayate: {}",
            self.origin,
            items.join("; ")
        ))
    }
}

/// A key accepted without effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file it is in.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// The key.
    pub key: String,
    /// Why it has no effect.
    pub reason: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}:{}: {})",
            self.key, self.file, self.line, self.reason
        )
    }
}

/// Why a Mosquitto file could not be translated.
#[derive(Debug, thiserror::Error)]
pub enum MosquittoError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file or directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is wrong: unknown key, malformed value, key outside its section, or a value
    /// Hayate cannot honour.
    #[error("{file}:{line}: {key}: {message}")]
    Line {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The translated configuration is not valid for Hayate.
    #[error("{file}: {message}")]
    Invalid {
        /// The main file.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads and translates a Mosquitto file (and the files its `include_dir` lines name).
pub fn load(path: &Path) -> Result<Translation, MosquittoError> {
    let lines = reader::read_file(path)?;
    translate::translate(&lines, &path.display().to_string())
}

/// Translates Mosquitto text; `origin` names it in messages. `include_dir` paths are read
/// from the file system.
pub fn from_text(text: &str, origin: &str) -> Result<Translation, MosquittoError> {
    let lines = reader::read_text(text, origin, true)?;
    translate::translate(&lines, origin)
}

/// Whether `path` should be read as a Mosquitto file: a `.conf` extension, or (without a
/// `.toml` extension) text whose first setting is written `key value` rather than TOML's
/// `key = value` or `[table]`.
pub fn is_mosquitto_file(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("conf") => true,
        Some("toml") => false,
        _ => looks_like_mosquitto(text),
    }
}

/// Whether the first non-comment line of `text` is a Mosquitto `key value` line.
pub fn looks_like_mosquitto(text: &str) -> bool {
    let Some(first) = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
    else {
        return false;
    };
    let key_len = first
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(first.len());
    if key_len == 0 {
        return false;
    }
    let rest = &first[key_len..];
    rest.starts_with([' ', '\t']) && !rest.trim_start().starts_with('=')
}

/// A path value as written (Mosquitto resolves relative paths against the working
/// directory, and so does Hayate).
fn path_value(value: &str) -> PathBuf {
    PathBuf::from(value)
}
