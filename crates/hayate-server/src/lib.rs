//! The network edge of Hayate: TCP listeners, one task per connection, the timer and `$SYS`
//! tasks, configuration loading and graceful shutdown.
//!
//! This crate owns sockets and time. It decodes bytes into packets with `hayate-codec`,
//! hands them to a `hayate_core::Channel`, rings the doorbells the channel collected, and
//! writes the output. It holds no protocol logic of its own.

pub mod config;
mod connection;
mod http;
mod listener;
pub mod runtime;
pub mod security;
mod storage;
mod sys;
mod transport;

pub use config::{Config, ConfigError, LogFormat, ServerConfig};
pub use listener::{Server, ServerHandle, ServerReload};
pub use security::{AuthConfig, SecurityHook};
