//! Hayate's SCRAM credential file: stored keys for SCRAM-SHA-256/512, never passwords.
//!
//! One line per user and mechanism:
//!
//! ```text
//! # comment
//! alice:SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>
//! alice:SCRAM-SHA-512$4096:<salt>$<StoredKey>:<ServerKey>
//! ```
//!
//! The part after the first `:` is the verifier format of RFC 5803 as PostgreSQL stores it
//! (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, standard base64 with
//! padding), so verifiers can be copied from PostgreSQL's `pg_authid.rolpassword`. Usernames
//! follow the password-file rules (no `:`, no control characters, no surrounding whitespace,
//! not starting with `#`). Blank lines and `#` comments are ignored; a (user, mechanism) pair
//! may appear once. Key lengths must match the mechanism (32 bytes for SHA-256, 64 for SHA-512).

use std::collections::HashMap;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::error::{AuthError, FileKind};
use crate::password_file::validate_username;
use crate::scram::{Mechanism, ScramCredentials, MAX_ITERATIONS};

/// A parsed SCRAM credential file.
#[derive(Debug, Clone, Default)]
pub struct ScramFile {
    /// Username → its credentials (at most one per mechanism).
    users: HashMap<String, Vec<ScramCredentials>>,
}

impl ScramFile {
    /// Parse the text of a SCRAM file; fails on the first bad line, with its number.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let mut users: HashMap<String, Vec<ScramCredentials>> = HashMap::new();
        let mut seen: HashMap<(String, Mechanism), usize> = HashMap::new();
        for (idx, line) in text.lines().enumerate() {
            let lineno = idx + 1;
            let err = |m: String| AuthError::parse(FileKind::ScramFile, lineno, m);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (user, verifier) = line
                .split_once(':')
                .ok_or_else(|| err("expected username:SCRAM-SHA-…$…".into()))?;
            let user = user.trim();
            if user.is_empty() {
                return Err(err("empty username".into()));
            }
            let creds =
                decode_verifier(verifier.trim()).map_err(|m| err(format!("user {user}: {m}")))?;
            let key = (user.to_owned(), creds.mechanism);
            if let Some(prev) = seen.get(&key) {
                return Err(err(format!(
                    "user {user} already has a {} entry on line {prev}",
                    creds.mechanism
                )));
            }
            seen.insert(key, lineno);
            users.entry(user.to_owned()).or_default().push(creds);
        }
        Ok(ScramFile { users })
    }

    /// Read and parse a SCRAM file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, AuthError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| AuthError::io(path, e))?;
        Self::parse(&text)
    }

    /// The credentials of `username` for `mechanism`.
    pub fn get(&self, username: &str, mechanism: Mechanism) -> Option<&ScramCredentials> {
        self.users
            .get(username)?
            .iter()
            .find(|c| c.mechanism == mechanism)
    }

    /// Number of (user, mechanism) entries.
    pub fn len(&self) -> usize {
        self.users.values().map(Vec::len).sum()
    }

    /// Whether the file has no entry.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The verifier string for `creds`: `SCRAM-SHA-256$<i>:<salt>$<StoredKey>:<ServerKey>`.
pub fn encode_verifier(creds: &ScramCredentials) -> String {
    format!(
        "{}${}:{}${}:{}",
        creds.mechanism.name(),
        creds.iterations,
        STANDARD.encode(&creds.salt),
        STANDARD.encode(&creds.stored_key),
        STANDARD.encode(&creds.server_key)
    )
}

/// Parse a verifier string (the part of a line after `username:`).
pub fn decode_verifier(s: &str) -> Result<ScramCredentials, String> {
    let (mech, rest) = s
        .split_once('$')
        .ok_or("expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>")?;
    let mechanism =
        Mechanism::from_name(mech).ok_or_else(|| format!("unknown mechanism {mech:?}"))?;
    let (iter_salt, keys) = rest
        .split_once('$')
        .ok_or("expected <iterations>:<salt>$<StoredKey>:<ServerKey>")?;
    let (iterations, salt) = iter_salt
        .split_once(':')
        .ok_or("expected <iterations>:<salt>")?;
    let (stored, server) = keys
        .split_once(':')
        .ok_or("expected <StoredKey>:<ServerKey>")?;
    if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
        return Err("iteration count is not a decimal number".into());
    }
    let iterations: u32 = iterations
        .parse()
        .map_err(|_| "iteration count out of range".to_string())?;
    if !(1..=MAX_ITERATIONS).contains(&iterations) {
        return Err(format!("iteration count must be 1 to {MAX_ITERATIONS}"));
    }
    let b64 = |field: &str, what: &str| {
        STANDARD
            .decode(field)
            .map_err(|e| format!("{what} is not valid base64 ({e})"))
    };
    let creds = ScramCredentials {
        mechanism,
        iterations,
        salt: b64(salt, "salt")?,
        stored_key: b64(stored, "StoredKey")?,
        server_key: b64(server, "ServerKey")?,
    };
    if !creds.is_well_formed() {
        return Err(format!(
            "{mechanism} keys must be {} bytes and the salt non-empty",
            mechanism.output_len()
        ));
    }
    Ok(creds)
}

/// Set (add or replace) the entry of `username` for `creds.mechanism` in the text of a SCRAM
/// file, keeping every other line. Returns the new text and whether an entry was replaced.
pub fn set_user(
    text: &str,
    username: &str,
    creds: &ScramCredentials,
) -> Result<(String, bool), AuthError> {
    validate_username(username)?;
    let new_line = format!("{username}:{}\n", encode_verifier(creds));
    let mut out = String::with_capacity(text.len() + new_line.len());
    let mut found = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        let is_match = !t.starts_with('#')
            && t.split_once(':').is_some_and(|(u, v)| {
                u.trim() == username
                    && v.trim()
                        .split_once('$')
                        .is_some_and(|(m, _)| m == creds.mechanism.name())
            });
        if is_match {
            if !found {
                out.push_str(&new_line);
                found = true;
            }
        } else {
            out.push_str(line);
        }
    }
    if !found {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&new_line);
    }
    Ok((out, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let a256 = ScramCredentials::generate(Mechanism::ScramSha256, b"pw1");
        let a512 = ScramCredentials::generate(Mechanism::ScramSha512, b"pw1");
        let (text, replaced) = set_user("# scram\n", "alice", &a256).unwrap();
        assert!(!replaced);
        let (text, _) = set_user(&text, "alice", &a512).unwrap();
        let f = ScramFile::parse(&text).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.get("alice", Mechanism::ScramSha256), Some(&a256));
        assert_eq!(f.get("alice", Mechanism::ScramSha512), Some(&a512));
        assert_eq!(f.get("bob", Mechanism::ScramSha256), None);

        let b256 = ScramCredentials::generate(Mechanism::ScramSha256, b"pw2");
        let (text2, replaced) = set_user(&text, "alice", &b256).unwrap();
        assert!(replaced);
        let f = ScramFile::parse(&text2).unwrap();
        assert_eq!(f.get("alice", Mechanism::ScramSha256), Some(&b256));
        assert_eq!(f.get("alice", Mechanism::ScramSha512), Some(&a512));
        assert!(text2.starts_with("# scram\nalice:SCRAM-SHA-256$4096:"));
    }

    #[test]
    fn postgres_style_verifier() {
        // RFC 7677's example credentials (user "user", password "pencil").
        let creds = ScramCredentials::from_password(
            Mechanism::ScramSha256,
            b"pencil",
            STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        );
        let v = encode_verifier(&creds);
        // StoredKey/ServerKey computed independently (Python hashlib/hmac).
        assert_eq!(
            v,
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$\
             WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:\
             wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
        assert_eq!(decode_verifier(&v).unwrap(), creds);
    }

    #[test]
    fn errors_with_line_numbers() {
        let good = encode_verifier(&ScramCredentials::generate(Mechanism::ScramSha256, b"x"));
        let cases = [
            (format!("a:{good}\nb\n"), 2),
            (format!(":{good}\n"), 1),
            ("a:SCRAM-SHA-1$4096:AAAA$AAAA:AAAA\n".to_string(), 1),
            ("a:SCRAM-SHA-256$0:AAAA$AAAA:AAAA\n".to_string(), 1),
            ("a:SCRAM-SHA-256$4096:AAAA$AAAA:AAAA\n".to_string(), 1),
            ("a:SCRAM-SHA-256$4096:AAAA$AAAA\n".to_string(), 1),
            (format!("\na:{good}\na:{good}\n"), 3),
        ];
        for (text, line) in cases {
            match ScramFile::parse(&text) {
                Err(AuthError::Parse { line: l, kind, .. }) => {
                    assert_eq!((l, kind), (line, FileKind::ScramFile), "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
