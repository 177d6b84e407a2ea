//! Authentication and authorisation for Hayate, without any I/O on the hot path.
//!
//! This crate owns the *rules*; the server owns sockets, tasks and time. Everything here is
//! plain synchronous Rust: parsers take `&str`, checks take the time as an argument, and the
//! only functions that touch the file system are the explicit `load` helpers and the
//! `hayate passwd` command logic in [`passwd`].
//!
//! | module | owns |
//! |---|---|
//! | [`password_file`] | Mosquitto password files (`user:$7$…`, `$6$…`, `$argon2id$…`): parsing, constant-time verification, writing entries, editing a file's text |
//! | [`passwd`] | the `hayate passwd` command (mirrors `mosquitto_passwd`), with atomic file writes |
//! | [`acl_file`] | Mosquitto `acl_file` parsing and evaluation with Mosquitto 2.0 semantics |
//! | [`psk_file`] | Mosquitto `psk_file` (`identity:hexkey`) parsing |
//! | [`scram`] | server side of SCRAM-SHA-256/512 for MQTT v5 enhanced authentication |
//! | [`scram_file`] | Hayate's SCRAM credential file (stored keys, never passwords) |
//! | [`jwt`] | JWT-as-password verification and the ACL carried in its claims |
//! | [`throttle`] | failed-login slowdown per source address, bounded in memory |
//!
//! Password hashing is deliberately slow (0.1 ms for `$7$` with 101 iterations, tens of
//! milliseconds for argon2id): callers on an async runtime should run [`PasswordFile::verify`]
//! and SCRAM/JWT checks on a blocking pool.

pub mod acl_file;
mod error;
pub mod jwt;
pub mod passwd;
pub mod password_file;
pub mod psk_file;
pub mod scram;
pub mod scram_file;
pub mod throttle;
mod topic;

pub use acl_file::{Access, AclFile};
pub use error::{AuthError, FileKind};
pub use jwt::{JwtAlgorithm, JwtConfig, JwtError, JwtGrant, JwtKey, JwtVerifier};
pub use passwd::{run_passwd, PasswdArgs};
pub use password_file::{HashScheme, PasswordFile, PasswordHash};
pub use psk_file::PskFile;
pub use scram::{Mechanism, ScramCredentials, ScramError, ScramServer, ScramStep};
pub use scram_file::ScramFile;
pub use throttle::{LoginThrottle, ThrottleConfig};
