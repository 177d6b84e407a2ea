//! Helpers shared by the Mosquitto configuration tests: translate text or a fixture file.

use hayate_server::config::mosquitto::{self, Translation};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub fn ok(text: &str) -> Translation {
    mosquitto::from_text(text, "test.conf").unwrap_or_else(|e| panic!("{e}"))
}

/// The error message, which must name the file, the line and the key.
pub fn err(text: &str, line: usize, key: &str) -> String {
    let error = mosquitto::from_text(text, "test.conf").expect_err("must be refused");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("test.conf:{line}: {key}: ")),
        "{message}"
    );
    message
}

pub fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mosquitto")
        .join(name)
}

pub fn load(name: &str) -> Translation {
    mosquitto::load(&fixture(name)).unwrap_or_else(|e| panic!("{e}"))
}
