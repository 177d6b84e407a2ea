//! `[http]`: where the HTTP edge listens and who may use it.

use crate::passwords::Passwords;
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// The environment variable holding the token when neither `token` nor `token_file` is set.
pub const TOKEN_ENV: &str = "HAYATE_HTTP_TOKEN";

/// The `[http]` table (`hayate serve --http ADDR`). Off unless `listen` is set.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `HOST:PORT`, or a bare port (`9090` or `:9090`) for `127.0.0.1:PORT`. Unset: no
    /// HTTP listener.
    pub listen: Option<String>,
    /// The bearer token clients send (`Authorization: Bearer TOKEN`).
    pub token: Option<String>,
    /// A file whose first line is the token (kept out of the configuration file). Without
    /// either, the `HAYATE_HTTP_TOKEN` environment variable.
    pub token_file: Option<PathBuf>,
    /// A Mosquitto-compatible password file (`hayate passwd`, `mosquitto_passwd`; it may be
    /// the broker's `[auth] password_file`): its users may sign in with HTTP Basic
    /// authentication. With a token as well, either is accepted. The file is read again
    /// when it changes.
    pub password_file: Option<PathBuf>,
    /// Serve `/metrics` and the admin API without a token. Off by default: a listener
    /// without a token or password file and without this is refused at start.
    pub allow_anonymous: bool,
}

/// Why the `[http]` settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HttpConfigError {
    /// `listen` is neither an address nor a port.
    #[error("[http] listen: {0:?} is not HOST:PORT or a port")]
    BadListen(String),
    /// The token file could not be read.
    #[error("[http] token_file {path}: {error}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The token is empty.
    #[error("[http] the token is empty")]
    EmptyToken,
    /// Both `token` and `token_file`.
    #[error("[http] set token or token_file, not both")]
    TwoTokens,
    /// Neither a token nor `allow_anonymous = true`.
    #[error("[http] needs token, token_file, password_file or the HAYATE_HTTP_TOKEN environment variable (or allow_anonymous = true to serve the admin API to anyone who can connect)")]
    NoToken,
    /// The password file could not be read or parsed.
    #[error("[http] password_file: {0}")]
    PasswordFile(#[from] hayate_auth::AuthError),
}

/// Who may call the authenticated endpoints.
#[derive(Debug, Clone)]
pub enum Access {
    /// Requests must carry the bearer token or (HTTP Basic) a user name and password of the
    /// password file; at least one of the two is set.
    Credentials {
        /// The bearer token.
        token: Option<String>,
        /// The password file's users.
        passwords: Option<Arc<Passwords>>,
    },
    /// Anyone who can connect (`allow_anonymous = true` without a token or password file).
    Anonymous,
}

impl Access {
    /// Requests must carry this bearer token.
    pub fn token(token: impl Into<String>) -> Access {
        Access::Credentials {
            token: Some(token.into()),
            passwords: None,
        }
    }

    /// The bearer token, when one is required.
    pub fn required_token(&self) -> Option<&str> {
        match self {
            Access::Credentials { token, .. } => token.as_deref(),
            Access::Anonymous => None,
        }
    }
}

impl HttpConfig {
    /// The address to listen on, when the HTTP edge is on.
    pub fn address(&self) -> Result<Option<SocketAddr>, HttpConfigError> {
        self.listen.as_deref().map(parse_listen).transpose()
    }

    /// Reads the token (from its file if so configured) and checks that access is decided.
    pub fn access(&self) -> Result<Access, HttpConfigError> {
        let token = match (&self.token, &self.token_file) {
            (Some(_), Some(_)) => return Err(HttpConfigError::TwoTokens),
            (Some(token), None) => Some(token.trim().to_string()),
            (None, Some(path)) => {
                let text =
                    std::fs::read_to_string(path).map_err(|error| HttpConfigError::TokenFile {
                        path: path.clone(),
                        error,
                    })?;
                Some(text.lines().next().unwrap_or("").trim().to_string())
            }
            (None, None) => std::env::var(TOKEN_ENV).ok().map(|t| t.trim().to_string()),
        };
        if token.as_ref().is_some_and(|token| token.is_empty()) {
            return Err(HttpConfigError::EmptyToken);
        }
        let passwords = match &self.password_file {
            Some(path) => Some(Arc::new(Passwords::load(path)?)),
            None => None,
        };
        match (token, passwords) {
            (None, None) if self.allow_anonymous => Ok(Access::Anonymous),
            (None, None) => Err(HttpConfigError::NoToken),
            (token, passwords) => Ok(Access::Credentials { token, passwords }),
        }
    }

    /// Checks the settings without starting anything (for `hayate config check`).
    pub fn validate(&self) -> Result<(), HttpConfigError> {
        if self.address()?.is_some() {
            self.access()?;
        }
        Ok(())
    }
}

/// `HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT`; the last two on the loopback address.
pub fn parse_listen(text: &str) -> Result<SocketAddr, HttpConfigError> {
    let trimmed = text.trim();
    let port = trimmed.strip_prefix(':').unwrap_or(trimmed);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    trimmed
        .parse()
        .map_err(|_| HttpConfigError::BadListen(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("9090").unwrap(),
            "127.0.0.1:9090".parse().unwrap()
        );
        assert_eq!(parse_listen(":0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(
            parse_listen("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_listen("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("70000").is_err());
    }

    #[test]
    fn access_needs_a_token_or_explicit_anonymity() {
        let mut config = HttpConfig {
            listen: Some("0".into()),
            ..HttpConfig::default()
        };
        if std::env::var_os(TOKEN_ENV).is_none() {
            assert!(matches!(config.validate(), Err(HttpConfigError::NoToken)));
        }
        config.allow_anonymous = true;
        assert!(matches!(config.access().unwrap(), Access::Anonymous));
        config.token = Some(" s3cret \n".into());
        assert_eq!(config.access().unwrap().required_token(), Some("s3cret"));
        config.token = Some("  ".into());
        assert!(matches!(config.access(), Err(HttpConfigError::EmptyToken)));
        let file = std::env::temp_dir().join(format!("hayate-http-token-{}", std::process::id()));
        std::fs::write(&file, "from-file\nignored\n").unwrap();
        config.token = None;
        config.token_file = Some(file.clone());
        assert_eq!(config.access().unwrap().required_token(), Some("from-file"));
        config.token = Some("x".into());
        assert!(matches!(config.access(), Err(HttpConfigError::TwoTokens)));
        std::fs::remove_file(file).unwrap();
        let off = HttpConfig::default();
        assert!(off.validate().is_ok(), "off: nothing to check");
    }

    #[test]
    fn a_password_file_is_enough_and_must_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("passwd");
        let mut config = HttpConfig {
            listen: Some("0".into()),
            token: None,
            password_file: Some(path.clone()),
            ..HttpConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(HttpConfigError::PasswordFile(_))),
            "a missing file is an error"
        );
        std::fs::write(&path, "admin:not-a-hash\n").unwrap();
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("password_file") && error.contains("line 1"),
            "{error}"
        );
        let hash = hayate_auth::PasswordHash::new_pbkdf2_sha512(b"pw");
        std::fs::write(&path, format!("admin:{hash}\n")).unwrap();
        match config.access().unwrap() {
            Access::Credentials {
                passwords: Some(passwords),
                ..
            } => assert!(passwords.verify("admin", b"pw") && !passwords.verify("admin", b"x")),
            other => panic!("{other:?}"),
        }
        config.allow_anonymous = true;
        assert!(
            matches!(config.access().unwrap(), Access::Credentials { .. }),
            "credentials are required once configured"
        );
    }
}
