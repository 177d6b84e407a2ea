//! Errors of the load generator. A run that can go on (a refused connection, a lost message)
//! never produces an error: those are counted in the results. These are the reasons a run cannot
//! start or cannot finish.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why `hayate bench` could not run or finish a scenario.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An option is out of range, or two options contradict each other.
    #[error("invalid options: {0}")]
    InvalidOption(String),
    /// The broker address does not resolve.
    #[error("cannot resolve broker address {host}:{port}: {reason}")]
    Resolve {
        /// Host as given.
        host: String,
        /// Port as given.
        port: u16,
        /// What the resolver said.
        reason: String,
    },
    /// The first connection to the broker failed at the TCP or MQTT level.
    #[error("cannot reach the broker at {addr}: {reason} (is it running? check --host/--port)")]
    Unreachable {
        /// Where we tried.
        addr: SocketAddr,
        /// Why it failed (connection refused, timeout, CONNACK code...).
        reason: String,
    },
    /// The broker accepted TCP but refused the MQTT connection.
    #[error("the broker at {addr} refused the connection: {reason} (check --username/--password and --mqtt)")]
    ProbeRefused {
        /// Where we tried.
        addr: SocketAddr,
        /// The CONNACK code and its meaning.
        reason: String,
    },
    /// The TLS or TLS-PSK handshake of the first connection failed (wrong PSK or identity,
    /// untrusted certificate, not a TLS listener...).
    #[error("TLS handshake with the broker at {addr} failed over {transport}: {reason} ({detail}); check --psk-identity/--psk, --cafile/--insecure/--tls-server-name, --cert/--key, and that the port is a TLS listener")]
    TlsHandshake {
        /// Where we tried.
        addr: SocketAddr,
        /// `tls` or `tls-psk`.
        transport: &'static str,
        /// The failure key, as counted in `failures_by_reason` (`tls-alert-decrypt-error`...).
        reason: String,
        /// What the TLS library said.
        detail: String,
    },
    /// The broker refused a subscription the scenario needs.
    #[error("the broker refused the subscription to {filter:?}: {reason}")]
    SubscribeRefused {
        /// The filter.
        filter: String,
        /// The SUBACK code or error.
        reason: String,
    },
    /// `--broker-pid` names no running process.
    #[error("--broker-pid {0}: no such process (/proc/{0} does not exist)")]
    NoSuchProcess(u32),
    /// A worker process failed to start, crashed or sent something unexpected.
    #[error("worker process {index}: {reason}")]
    Worker {
        /// Worker index (0-based).
        index: usize,
        /// What went wrong.
        reason: String,
    },
    /// Writing the JSON result failed.
    #[error("cannot write {path}: {source}")]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Any other I/O error, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// JSON (de)serialization failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

impl BenchError {
    /// Shorthand for [`BenchError::InvalidOption`].
    pub fn invalid(message: impl Into<String>) -> BenchError {
        BenchError::InvalidOption(message.into())
    }

    /// Shorthand for [`BenchError::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
