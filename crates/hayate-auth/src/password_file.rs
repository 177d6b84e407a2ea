//! Mosquitto password files: parsing, verification, writing entries and editing a file's text.
//!
//! A password file has one `username:hash` line per user. Blank lines and lines starting with
//! `#` are ignored; whitespace around the username and the hash is trimmed (as Mosquitto does).
//! Three hash formats are understood:
//!
//! * `$6$<salt>$<hash>` — legacy Mosquitto ≤ 1.6: SHA-512(password ‖ salt), standard base64
//!   with padding;
//! * `$7$<iterations>$<salt>$<hash>` — Mosquitto 2.0's default: PBKDF2-HMAC-SHA512 with a
//!   64-byte output, standard base64 with padding (`mosquitto_passwd` 2.0 writes 101 iterations
//!   and a 12-byte salt, 2.1 writes 1000 iterations and a 64-byte salt);
//! * `$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>` — Mosquitto 2.1's default,
//!   libargon2's encoding (standard base64 alphabet *without* padding). Mosquitto uses 64-byte
//!   salts and hashes, which the PHC-string parser of the `password-hash` crate rejects, so the
//!   fields are parsed here and the hash recomputed with the raw argon2 API.
//!
//! Comparisons are constant-time. Unlike Mosquitto (which logs and skips bad lines), parsing
//! fails on the first bad line with its line number, and a username may appear only once.
//!
//! New entries are written as `$7$` exactly like `mosquitto_passwd` 2.0 (101 iterations,
//! 12-byte random salt) so that Mosquitto 2.0 can read them, or as argon2id exactly like
//! Mosquitto 2.1 (m=47104, t=1, p=1, 64-byte salt and hash).

mod edit;
mod hash;
#[cfg(test)]
mod tests;

pub(crate) use edit::check_structure;
pub use edit::{delete_user, hash_plaintext, set_user, validate_username};
pub use hash::PasswordHash;

use std::collections::HashMap;
use std::path::Path;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;

use crate::error::{AuthError, FileKind};
use crate::scram::ScramCredentials;

/// PBKDF2 iterations written by `mosquitto_passwd` 2.0.
pub const PBKDF2_DEFAULT_ITERATIONS: u32 = 101;
/// Salt length written by `mosquitto_passwd` 2.0 for `$7$` entries.
pub const PBKDF2_SALT_LEN: usize = 12;
/// Argon2id memory cost (KiB) written by Mosquitto 2.1.
pub const ARGON2_M_COST: u32 = 47_104;
/// Argon2id passes written by Mosquitto 2.1.
pub const ARGON2_T_COST: u32 = 1;
/// Argon2id lanes written by Mosquitto 2.1.
pub const ARGON2_P_COST: u32 = 1;
/// Argon2id salt and hash length written by Mosquitto 2.1 (`EVP_MAX_MD_SIZE`).
pub const ARGON2_LEN: usize = 64;

/// Largest PBKDF2 iteration count accepted when parsing (about seconds of CPU per check).
const MAX_PBKDF2_ITERATIONS: u32 = 10_000_000;
/// Largest argon2 memory cost accepted when parsing (1 GiB).
const MAX_ARGON2_M_COST: u32 = 1 << 20;
/// Largest argon2 pass count accepted when parsing.
const MAX_ARGON2_T_COST: u32 = 1024;
/// Largest argon2 lane count accepted when parsing.
const MAX_ARGON2_P_COST: u32 = 64;
/// Longest salt accepted when parsing.
const MAX_SALT_LEN: usize = 1024;
/// Longest argon2 output accepted when parsing.
const MAX_ARGON2_HASH_LEN: usize = 1024;
/// Longest username or password Mosquitto accepts.
const MAX_FIELD_LEN: usize = 65_535;

/// Standard alphabet, padding optional on input (OpenSSL's decoder is lenient too).
const B64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
/// libargon2's encoding: standard alphabet, no padding, canonical trailing bits.
const B64_ARGON2: GeneralPurpose = base64::engine::general_purpose::STANDARD_NO_PAD;

/// Which hash to write for new or updated entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashScheme {
    /// `$7$`, PBKDF2-HMAC-SHA512, as `mosquitto_passwd` 2.0 writes it (readable by Mosquitto ≥ 2.0).
    #[default]
    Pbkdf2Sha512,
    /// `$argon2id$`, as Mosquitto 2.1 writes it (readable by Mosquitto ≥ 2.1 only).
    Argon2id,
}

impl HashScheme {
    /// Hash `password` with a fresh random salt.
    pub fn hash(self, password: &[u8]) -> Result<PasswordHash, AuthError> {
        match self {
            HashScheme::Pbkdf2Sha512 => Ok(PasswordHash::new_pbkdf2_sha512(password)),
            HashScheme::Argon2id => PasswordHash::new_argon2id(password),
        }
    }
}

/// What a line of a password file is.
enum Line<'a> {
    /// Blank or comment.
    Ignored,
    /// `username:rest`, both trimmed.
    Entry { username: &'a str, rest: &'a str },
    /// Not blank, not a comment, no `:`.
    NoColon,
}

fn classify(line: &str) -> Line<'_> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Line::Ignored;
    }
    match trimmed.split_once(':') {
        Some((user, rest)) => Line::Entry {
            username: user.trim(),
            rest: rest.trim(),
        },
        None => Line::NoColon,
    }
}

/// A parsed password file: username → hash.
#[derive(Debug, Clone, Default)]
pub struct PasswordFile {
    users: HashMap<String, PasswordHash>,
}

/// A fixed `$7$` entry used to spend the same time on unknown users as on known ones.
fn dummy_hash() -> &'static PasswordHash {
    static DUMMY: std::sync::OnceLock<PasswordHash> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        PasswordHash::pbkdf2_sha512_with(b"", PBKDF2_DEFAULT_ITERATIONS, vec![0; 12])
    })
}

impl PasswordFile {
    /// Parse the text of a password file. Fails on the first bad line (with its number) and on
    /// a username that appears twice.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let mut users = HashMap::new();
        let mut first_line: HashMap<String, usize> = HashMap::new();
        for (idx, line) in text.lines().enumerate() {
            let lineno = idx + 1;
            let err = |m: String| AuthError::parse(FileKind::PasswordFile, lineno, m);
            match classify(line) {
                Line::Ignored => {}
                Line::NoColon => return Err(err("expected username:hash".into())),
                Line::Entry { username, rest } => {
                    if username.is_empty() {
                        return Err(err("empty username".into()));
                    }
                    if username.len() > MAX_FIELD_LEN {
                        return Err(err("username longer than 65535 bytes".into()));
                    }
                    if rest.is_empty() {
                        return Err(err(format!("no password hash for user {username}")));
                    }
                    let hash = PasswordHash::parse(rest)
                        .map_err(|e| err(format!("user {username}: {e}")))?;
                    if let Some(prev) = first_line.get(username) {
                        return Err(err(format!(
                            "user {username} already defined on line {prev}"
                        )));
                    }
                    first_line.insert(username.to_owned(), lineno);
                    users.insert(username.to_owned(), hash);
                }
            }
        }
        Ok(PasswordFile { users })
    }

    /// Read and parse a password file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, AuthError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| AuthError::io(path, e))?;
        Self::parse(&text)
    }

    /// Whether `password` is the password of `username`. Unknown users are rejected after
    /// spending about as long as a `$7$` check, so timing does not reveal who exists.
    pub fn verify(&self, username: &str, password: &[u8]) -> bool {
        match self.users.get(username) {
            Some(hash) => hash.verify(password),
            None => {
                let _ = dummy_hash().verify(password);
                false
            }
        }
    }

    /// The hash stored for `username`.
    pub fn get(&self, username: &str) -> Option<&PasswordHash> {
        self.users.get(username)
    }

    /// SCRAM-SHA-512 credentials for `username` derived from its `$7$` entry, if it has one.
    pub fn scram_sha512_credentials(&self, username: &str) -> Option<ScramCredentials> {
        self.users.get(username)?.scram_sha512_credentials()
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file defines no user.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The usernames, in no particular order.
    pub fn usernames(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }
}
