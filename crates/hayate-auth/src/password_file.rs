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

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use rand::RngCore as _;
use sha2::{Digest as _, Sha512};
use subtle::ConstantTimeEq as _;

use crate::error::{AuthError, FileKind};
use crate::scram::{Mechanism, ScramCredentials};

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

/// One parsed password hash.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$6$`: SHA-512(password ‖ salt).
    Sha512 {
        /// The salt.
        salt: Vec<u8>,
        /// The 64-byte digest.
        hash: Vec<u8>,
    },
    /// `$7$`: PBKDF2-HMAC-SHA512(password, salt, iterations), 64 bytes.
    Pbkdf2Sha512 {
        /// Iteration count (≥ 1).
        iterations: u32,
        /// The salt.
        salt: Vec<u8>,
        /// The 64-byte derived key.
        hash: Vec<u8>,
    },
    /// `$argon2id$`.
    Argon2id {
        /// Argon2 version: 0x13 (`v=19`) or 0x10 (`v=16`, or no `v=` field).
        version: u32,
        /// Memory cost in KiB.
        m_cost: u32,
        /// Number of passes.
        t_cost: u32,
        /// Parallelism.
        p_cost: u32,
        /// The salt.
        salt: Vec<u8>,
        /// The output; its length is the output length used to verify.
        hash: Vec<u8>,
    },
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes are offline-crackable material: keep them out of logs.
        match self {
            PasswordHash::Sha512 { .. } => f.write_str("PasswordHash::Sha512(..)"),
            PasswordHash::Pbkdf2Sha512 { iterations, .. } => {
                write!(f, "PasswordHash::Pbkdf2Sha512(iterations={iterations}, ..)")
            }
            PasswordHash::Argon2id {
                m_cost,
                t_cost,
                p_cost,
                ..
            } => write!(
                f,
                "PasswordHash::Argon2id(m={m_cost}, t={t_cost}, p={p_cost}, ..)"
            ),
        }
    }
}

fn bad(msg: impl Into<String>) -> AuthError {
    AuthError::InvalidHash(msg.into())
}

fn parse_u32(field: &str, what: &str) -> Result<u32, AuthError> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!("{what} is not a decimal number")));
    }
    field
        .parse::<u32>()
        .map_err(|_| bad(format!("{what} is out of range")))
}

fn decode_b64(engine: &GeneralPurpose, field: &str, what: &str) -> Result<Vec<u8>, AuthError> {
    engine
        .decode(field)
        .map_err(|e| bad(format!("{what} is not valid base64 ({e})")))
}

fn check_salt(salt: &[u8], min: usize) -> Result<(), AuthError> {
    if salt.len() < min || salt.len() > MAX_SALT_LEN {
        return Err(bad(format!(
            "salt must be {min} to {MAX_SALT_LEN} bytes, not {}",
            salt.len()
        )));
    }
    Ok(())
}

fn random_bytes(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    rand::rng().fill_bytes(&mut buf);
    buf
}

impl PasswordHash {
    /// Parse the hash part of a password file line (`$6$…`, `$7$…` or `$argon2id$…`).
    pub fn parse(s: &str) -> Result<Self, AuthError> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("$6$") {
            let parts: Vec<&str> = rest.split('$').collect();
            let [salt, hash] = parts[..] else {
                return Err(bad("expected $6$<salt>$<hash>"));
            };
            let salt = decode_b64(&B64_LENIENT, salt, "salt")?;
            check_salt(&salt, 1)?;
            let hash = decode_b64(&B64_LENIENT, hash, "hash")?;
            if hash.len() != 64 {
                return Err(bad("a $6$ hash must be 64 bytes"));
            }
            Ok(PasswordHash::Sha512 { salt, hash })
        } else if let Some(rest) = s.strip_prefix("$7$") {
            let parts: Vec<&str> = rest.split('$').collect();
            let [iterations, salt, hash] = parts[..] else {
                return Err(bad("expected $7$<iterations>$<salt>$<hash>"));
            };
            let iterations = parse_u32(iterations, "iteration count")?;
            if iterations == 0 || iterations > MAX_PBKDF2_ITERATIONS {
                return Err(bad(format!(
                    "iteration count must be 1 to {MAX_PBKDF2_ITERATIONS}"
                )));
            }
            let salt = decode_b64(&B64_LENIENT, salt, "salt")?;
            check_salt(&salt, 1)?;
            let hash = decode_b64(&B64_LENIENT, hash, "hash")?;
            if hash.len() != 64 {
                return Err(bad("a $7$ hash must be 64 bytes"));
            }
            Ok(PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                hash,
            })
        } else if let Some(rest) = s.strip_prefix("$argon2id$") {
            Self::parse_argon2id(rest)
        } else if s.starts_with("$argon2i$") || s.starts_with("$argon2d$") {
            Err(bad("only argon2id is supported, not argon2i or argon2d"))
        } else if s.starts_with('$') {
            Err(bad("unknown hash type (expected $6$, $7$ or $argon2id$)"))
        } else {
            Err(bad(
                "not a hash (plain-text password files must be converted with `hayate passwd -U`)",
            ))
        }
    }

    fn parse_argon2id(rest: &str) -> Result<Self, AuthError> {
        let mut parts: Vec<&str> = rest.split('$').collect();
        // libargon2: the version field is optional and means 0x10 when absent.
        let version = match parts.first() {
            Some(v) if v.starts_with("v=") => {
                let version = parse_u32(&v[2..], "argon2 version")?;
                parts.remove(0);
                version
            }
            _ => 0x10,
        };
        if version != 0x10 && version != 0x13 {
            return Err(bad("argon2 version must be 16 or 19"));
        }
        let [params, salt, hash] = parts[..] else {
            return Err(bad("expected $argon2id$v=19$m=..,t=..,p=..$<salt>$<hash>"));
        };
        let fields: Vec<&str> = params.split(',').collect();
        let [m, t, p] = fields[..] else {
            return Err(bad("argon2 parameters must be m=..,t=..,p=.."));
        };
        let (Some(m), Some(t), Some(p)) = (
            m.strip_prefix("m="),
            t.strip_prefix("t="),
            p.strip_prefix("p="),
        ) else {
            return Err(bad("argon2 parameters must be m=..,t=..,p=.."));
        };
        let m_cost = parse_u32(m, "argon2 memory cost")?;
        let t_cost = parse_u32(t, "argon2 time cost")?;
        let p_cost = parse_u32(p, "argon2 parallelism")?;
        if !(1..=MAX_ARGON2_P_COST).contains(&p_cost)
            || !(1..=MAX_ARGON2_T_COST).contains(&t_cost)
            || m_cost > MAX_ARGON2_M_COST
            || m_cost < 8 * p_cost
        {
            return Err(bad(format!(
                "argon2 parameters out of the supported range (m ≤ {MAX_ARGON2_M_COST} KiB, \
                 m ≥ 8p, t 1..={MAX_ARGON2_T_COST}, p 1..={MAX_ARGON2_P_COST})"
            )));
        }
        let salt = decode_b64(&B64_ARGON2, salt, "argon2 salt")?;
        check_salt(&salt, argon2::MIN_SALT_LEN)?;
        let hash = decode_b64(&B64_ARGON2, hash, "argon2 hash")?;
        if hash.len() < 4 || hash.len() > MAX_ARGON2_HASH_LEN {
            return Err(bad("argon2 hash must be 4 to 1024 bytes"));
        }
        Ok(PasswordHash::Argon2id {
            version,
            m_cost,
            t_cost,
            p_cost,
            salt,
            hash,
        })
    }

    /// A new `$7$` entry exactly as `mosquitto_passwd` 2.0 writes it: 101 iterations and a
    /// random 12-byte salt.
    pub fn new_pbkdf2_sha512(password: &[u8]) -> Self {
        Self::pbkdf2_sha512_with(
            password,
            PBKDF2_DEFAULT_ITERATIONS,
            random_bytes(PBKDF2_SALT_LEN),
        )
    }

    /// A `$7$` entry with the given iteration count and salt.
    pub fn pbkdf2_sha512_with(password: &[u8], iterations: u32, salt: Vec<u8>) -> Self {
        let iterations = iterations.max(1);
        let mut hash = vec![0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(password, &salt, iterations, &mut hash);
        PasswordHash::Pbkdf2Sha512 {
            iterations,
            salt,
            hash,
        }
    }

    /// A new argon2id entry exactly as Mosquitto 2.1 writes it (m=47104, t=1, p=1, 64-byte
    /// random salt, 64-byte hash).
    pub fn new_argon2id(password: &[u8]) -> Result<Self, AuthError> {
        let salt = random_bytes(ARGON2_LEN);
        let hash = argon2_raw(
            0x13,
            ARGON2_M_COST,
            ARGON2_T_COST,
            ARGON2_P_COST,
            password,
            &salt,
            ARGON2_LEN,
        )
        .ok_or_else(|| AuthError::Hashing("argon2id failed".into()))?;
        Ok(PasswordHash::Argon2id {
            version: 0x13,
            m_cost: ARGON2_M_COST,
            t_cost: ARGON2_T_COST,
            p_cost: ARGON2_P_COST,
            salt,
            hash,
        })
    }

    /// Check `password` against this hash, in constant time with respect to the hash value.
    pub fn verify(&self, password: &[u8]) -> bool {
        let computed = match self {
            PasswordHash::Sha512 { salt, .. } => {
                let mut h = Sha512::new();
                h.update(password);
                h.update(salt);
                h.finalize().to_vec()
            }
            PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                hash,
            } => {
                let mut out = vec![0u8; hash.len()];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, *iterations, &mut out);
                out
            }
            PasswordHash::Argon2id {
                version,
                m_cost,
                t_cost,
                p_cost,
                salt,
                hash,
            } => match argon2_raw(
                *version,
                *m_cost,
                *t_cost,
                *p_cost,
                password,
                salt,
                hash.len(),
            ) {
                Some(out) => out,
                None => return false,
            },
        };
        let stored = self.hash_bytes();
        computed.len() == stored.len() && bool::from(computed.ct_eq(stored))
    }

    fn hash_bytes(&self) -> &[u8] {
        match self {
            PasswordHash::Sha512 { hash, .. }
            | PasswordHash::Pbkdf2Sha512 { hash, .. }
            | PasswordHash::Argon2id { hash, .. } => hash,
        }
    }

    /// The SCRAM-SHA-512 credentials equivalent to this entry, for `$7$` entries only.
    ///
    /// A `$7$` hash *is* PBKDF2-HMAC-SHA512(password, salt, i) with a 64-byte output, which is
    /// exactly SCRAM-SHA-512's SaltedPassword, so a client that knows the password can log in
    /// with SCRAM-SHA-512 against a Mosquitto password file. Note that the iteration count is
    /// the file's (101 for `mosquitto_passwd` 2.0), below RFC 7677's recommended 4096; some
    /// SCRAM clients refuse such low counts.
    pub fn scram_sha512_credentials(&self) -> Option<ScramCredentials> {
        match self {
            PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                hash,
            } if hash.len() == 64 => Some(ScramCredentials::from_salted_password(
                Mechanism::ScramSha512,
                hash,
                salt.clone(),
                *iterations,
            )),
            _ => None,
        }
    }
}

fn argon2_raw(
    version: u32,
    m: u32,
    t: u32,
    p: u32,
    password: &[u8],
    salt: &[u8],
    out_len: usize,
) -> Option<Vec<u8>> {
    let version = argon2::Version::try_from(version).ok()?;
    let params = argon2::Params::new(m, t, p, Some(out_len)).ok()?;
    let ctx = argon2::Argon2::new(argon2::Algorithm::Argon2id, version, params);
    let mut out = vec![0u8; out_len];
    ctx.hash_password_into(password, salt, &mut out).ok()?;
    Some(out)
}

impl fmt::Display for PasswordHash {
    /// The encoded form, as it appears after `username:` in a password file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PasswordHash::Sha512 { salt, hash } => {
                write!(f, "$6${}${}", STANDARD.encode(salt), STANDARD.encode(hash))
            }
            PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                hash,
            } => write!(
                f,
                "$7${iterations}${}${}",
                STANDARD.encode(salt),
                STANDARD.encode(hash)
            ),
            PasswordHash::Argon2id {
                version,
                m_cost,
                t_cost,
                p_cost,
                salt,
                hash,
            } => write!(
                f,
                "$argon2id$v={version}$m={m_cost},t={t_cost},p={p_cost}${}${}",
                B64_ARGON2.encode(salt),
                B64_ARGON2.encode(hash)
            ),
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

/// Check that `username` can be stored in (and read back from) a password file: non-empty, at
/// most 65 535 bytes, no `:`, no control characters, no surrounding whitespace and not
/// starting with `#`.
pub fn validate_username(username: &str) -> Result<(), AuthError> {
    let fail = |why: &str| Err(AuthError::InvalidUsername(format!("{username:?}: {why}")));
    if username.is_empty() {
        return fail("empty");
    }
    if username.len() > MAX_FIELD_LEN {
        return fail("longer than 65535 bytes");
    }
    if username.contains(':') {
        return fail("must not contain ':'");
    }
    if username.chars().any(char::is_control) {
        return fail("must not contain control characters");
    }
    if username.trim() != username {
        return fail("must not start or end with whitespace");
    }
    if username.starts_with('#') {
        return fail("must not start with '#' (the line would be a comment)");
    }
    Ok(())
}

/// Check that every line of a password file is blank, a comment or `username:something` with
/// a non-empty username and value (what `mosquitto_passwd` calls a non-corrupt file). Hashes
/// are not checked, so a broken entry can still be replaced.
pub(crate) fn check_structure(text: &str) -> Result<(), AuthError> {
    for (idx, line) in text.lines().enumerate() {
        let err = |m: &str| Err(AuthError::parse(FileKind::PasswordFile, idx + 1, m));
        match classify(line) {
            Line::Ignored => {}
            Line::NoColon => return err("corrupt line (expected username:hash)"),
            Line::Entry { username, rest } if username.is_empty() || rest.is_empty() => {
                return err("corrupt line (expected username:hash)")
            }
            Line::Entry { .. } => {}
        }
    }
    Ok(())
}

fn push_line(out: &mut String, username: &str, hash: &PasswordHash) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(username);
    out.push(':');
    out.push_str(&hash.to_string());
    out.push('\n');
}

/// Set `username`'s hash in the text of a password file, keeping every other line (comments
/// included) as it is. The first line for the user is replaced and any later duplicate is
/// dropped; a new user is appended. Returns the new text and whether the user already existed.
pub fn set_user(
    text: &str,
    username: &str,
    hash: &PasswordHash,
) -> Result<(String, bool), AuthError> {
    validate_username(username)?;
    let mut out = String::with_capacity(text.len() + 160);
    let mut found = false;
    for line in text.split_inclusive('\n') {
        match classify(line) {
            Line::Entry { username: u, .. } if u == username => {
                if !found {
                    found = true;
                    push_line(&mut out, username, hash);
                }
            }
            _ => out.push_str(line),
        }
    }
    if !found {
        push_line(&mut out, username, hash);
    }
    Ok((out, found))
}

/// Remove every line for `username` from the text of a password file, keeping the others.
pub fn delete_user(text: &str, username: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    for line in text.split_inclusive('\n') {
        match classify(line) {
            Line::Entry { username: u, .. } if u == username => found = true,
            _ => out.push_str(line),
        }
    }
    if found {
        Ok(out)
    } else {
        Err(AuthError::UserNotFound(username.to_owned()))
    }
}

/// Convert a plain-text password file (`username:password` lines) into a hashed one, as
/// `mosquitto_passwd -U` does: the text after the first `:`, trimmed, is the password.
///
/// Unlike `mosquitto_passwd` (which rejects comments and blank lines, and would happily hash a
/// hash again), comments and blank lines are kept, and a line that already holds a valid hash
/// is refused so a file cannot be double-hashed by running `-U` twice.
pub fn hash_plaintext(text: &str, scheme: HashScheme) -> Result<String, AuthError> {
    let mut out = String::with_capacity(text.len() * 2);
    for (idx, line) in text.split_inclusive('\n').enumerate() {
        let err = |m: String| AuthError::parse(FileKind::PasswordFile, idx + 1, m);
        match classify(line) {
            Line::Ignored => out.push_str(line),
            Line::NoColon => return Err(err("expected username:password".into())),
            Line::Entry { username, rest } => {
                validate_username(username).map_err(|e| err(e.to_string()))?;
                if rest.is_empty() {
                    return Err(err(format!("empty password for user {username}")));
                }
                if PasswordHash::parse(rest).is_ok() {
                    return Err(err(format!(
                        "user {username} already has a hashed password; is the file already converted?"
                    )));
                }
                let hash = scheme.hash(rest.as_bytes())?;
                push_line(&mut out, username, &hash);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made by mosquitto_passwd 2.0.11 (`-b`, password "secret").
    const MOSQ_7: &str = "$7$101$TTivVHcgwzQ9mzn+$5ee1DW6jYwurKZHqNKAaJfcM+amfOKDj0Bg1kVcqeoTX/YSRR2jBoMk8tqZK5qf5I/ZnhgLZFNV1ZCHIIX5p3Q==";
    // Made by mosquitto_passwd 2.0.11 (`-H sha512 -b`, password "z").
    const MOSQ_6: &str = "$6$BTnlnHg0U+4IVdXw$YObtvc3h7StLDetJhu8gDUgR461rEhuX8Kru9iBU0L3c0xix1cW/D4vjRcASn+Bn70tjerl/tGkZRSt0N/X5XA==";

    #[test]
    fn verifies_mosquitto_hashes() {
        let h7 = PasswordHash::parse(MOSQ_7).unwrap();
        assert!(h7.verify(b"secret"));
        assert!(!h7.verify(b"Secret"));
        assert!(!h7.verify(b""));
        let h6 = PasswordHash::parse(MOSQ_6).unwrap();
        assert!(h6.verify(b"z"));
        assert!(!h6.verify(b"y"));
    }

    #[test]
    fn encode_roundtrip() {
        for s in [MOSQ_6, MOSQ_7] {
            assert_eq!(PasswordHash::parse(s).unwrap().to_string(), s);
        }
        let h = PasswordHash::new_pbkdf2_sha512(b"pw");
        let enc = h.to_string();
        assert!(enc.starts_with("$7$101$"));
        // 12-byte salt → 16 base64 chars, 64-byte hash → 88 chars with padding.
        let parts: Vec<&str> = enc.split('$').collect();
        assert_eq!(parts[3].len(), 16);
        assert_eq!(parts[4].len(), 88);
        assert!(PasswordHash::parse(&enc).unwrap().verify(b"pw"));
    }

    #[test]
    fn argon2id_mosquitto_2_1_format() {
        let h = PasswordHash::new_argon2id(b"pencil").unwrap();
        let enc = h.to_string();
        assert!(enc.starts_with("$argon2id$v=19$m=47104,t=1,p=1$"), "{enc}");
        let parts: Vec<&str> = enc.split('$').collect();
        // 64 bytes unpadded: 86 characters, no '=' padding.
        assert_eq!(parts[4].len(), 86);
        assert_eq!(parts[5].len(), 86);
        assert!(!parts[4].contains('=') && !parts[5].contains('='));
        let back = PasswordHash::parse(&enc).unwrap();
        assert_eq!(back, h);
        assert!(back.verify(b"pencil"));
        assert!(!back.verify(b"pencil "));
    }

    #[test]
    fn argon2id_reference_vectors() {
        // Produced by the reference libargon2 CLI (Debian `argon2` 0~20171227):
        // `echo -n password | argon2 somesalt -id -t 2 -m 16 -p 4 -l 24 -e` (and `-v 10`).
        let v19 = "$argon2id$v=19$m=65536,t=2,p=4$c29tZXNhbHQ$F1jG2CV3/Nr+yRuIsPKw0J9r4s7cJHBU";
        let v16 = "$argon2id$v=16$m=65536,t=2,p=4$c29tZXNhbHQ$mYBq69tGGqqsDkXhTjBAyk2ybVZFlKNd";
        for enc in [v19, v16] {
            let h = PasswordHash::parse(enc).unwrap();
            assert!(h.verify(b"password"), "{enc}");
            assert!(!h.verify(b"passwore"), "{enc}");
            assert_eq!(h.to_string(), enc);
        }
        // Mosquitto 2.1's shape: 64-byte salt and hash, m=47104, t=1, p=1. Made with
        // `echo -n 'correct horse' | argon2 'Hayate-test-salt-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJK'
        //  -id -t 1 -k 47104 -p 1 -l 64 -e`.
        let mosq = "$argon2id$v=19$m=47104,t=1,p=1$SGF5YXRlLXRlc3Qtc2FsdC0wMTIzNDU2Nzg5YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXpBQkNERUZHSElKSw$MnjX0/yxm47KIMi+ug74OXt3i9CZq55eSihX4eO7L3nVi49xTkB32Lm5BYDizzYZQwHti4g3JdVws6+xmCJA2Q";
        let h = PasswordHash::parse(mosq).unwrap();
        assert!(h.verify(b"correct horse"));
        assert!(!h.verify(b"correct horse "));
        assert_eq!(h.to_string(), mosq);
    }

    #[test]
    fn rejects_malformed_hashes() {
        for s in [
            "",
            "plain",
            "$5$abc$def",
            "$6$",
            "$6$c2FsdA==",
            "$6$c2FsdA==$c2hvcnQ=",
            "$7$0$TTivVHcgwzQ9mzn+$5ee1DW6jYwurKZHqNKAaJfcM+amfOKDj0Bg1kVcqeoTX/YSRR2jBoMk8tqZK5qf5I/ZnhgLZFNV1ZCHIIX5p3Q==",
            "$7$-1$TTivVHcgwzQ9mzn+$x",
            "$7$99999999999$TTivVHcgwzQ9mzn+$x",
            "$7$101$!!!!$x",
            "$argon2i$v=19$m=16,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=18$m=16,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=19$t=2,m=16,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=19$m=16,t=0,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=19$m=4294967295,t=1,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=19$m=16,t=2,p=1$c29tZXNhbHQ=$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
            "$argon2id$v=19$m=16,t=2,p=1$c2FsdA$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        ] {
            assert!(PasswordHash::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn file_parsing() {
        let text = format!("# comment\n\n  alice : {MOSQ_7}  \r\nbob:{MOSQ_6}\n");
        let f = PasswordFile::parse(&text).unwrap();
        assert_eq!(f.len(), 2);
        assert!(f.verify("alice", b"secret"));
        assert!(f.verify("bob", b"z"));
        assert!(!f.verify("carol", b"z"));
        assert!(f.scram_sha512_credentials("alice").is_some());
        assert!(f.scram_sha512_credentials("bob").is_none());
    }

    #[test]
    fn file_errors_have_line_numbers() {
        let cases = [
            (format!("alice:{MOSQ_7}\nnocolon\n"), 2),
            (format!("\n\n:{MOSQ_7}\n"), 3),
            ("alice:\n".to_string(), 1),
            ("alice:plaintext\n".to_string(), 1),
            (format!("a:{MOSQ_7}\nb:{MOSQ_6}\na:{MOSQ_6}\n"), 3),
        ];
        for (text, line) in cases {
            match PasswordFile::parse(&text) {
                Err(AuthError::Parse { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let msg = PasswordFile::parse("x:$6$\n").unwrap_err().to_string();
        assert!(msg.starts_with("password file line 1: user x:"), "{msg}");
    }

    #[test]
    fn editing_preserves_other_lines() {
        let text = format!("# users\nalice:{MOSQ_7}\n\nbob:{MOSQ_6}");
        let new = PasswordHash::new_pbkdf2_sha512(b"new");
        let (out, existed) = set_user(&text, "bob", &new).unwrap();
        assert!(existed);
        assert!(out.starts_with(&format!("# users\nalice:{MOSQ_7}\n\nbob:$7$")));
        assert!(out.ends_with('\n'));
        let f = PasswordFile::parse(&out).unwrap();
        assert!(f.verify("bob", b"new"));
        assert!(f.verify("alice", b"secret"));

        let (out2, existed) = set_user(&out, "carol", &new).unwrap();
        assert!(!existed);
        assert!(out2.starts_with(&out));
        assert!(PasswordFile::parse(&out2).unwrap().verify("carol", b"new"));

        let out3 = delete_user(&out2, "alice").unwrap();
        assert_eq!(out3, out2.replace(&format!("alice:{MOSQ_7}\n"), ""));
        assert!(matches!(
            delete_user(&out3, "alice"),
            Err(AuthError::UserNotFound(_))
        ));
    }

    #[test]
    fn set_user_collapses_duplicates() {
        let text = format!("a:{MOSQ_7}\nb:{MOSQ_6}\na:{MOSQ_6}\n");
        let (out, _) = set_user(&text, "a", &PasswordHash::new_pbkdf2_sha512(b"x")).unwrap();
        assert_eq!(out.lines().count(), 2);
        assert!(PasswordFile::parse(&out).unwrap().verify("a", b"x"));
    }

    #[test]
    fn username_validation() {
        for bad in ["", "a:b", "a\nb", " a", "a ", "#a", "a\u{7f}"] {
            assert!(validate_username(bad).is_err(), "{bad:?}");
        }
        for ok in ["a", "a b", "é", "a#", "a/b+c"] {
            assert!(validate_username(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn plaintext_upgrade() {
        let text = "# plain\nu1:p1\n\nu2 : p 2 \n";
        let out = hash_plaintext(text, HashScheme::Pbkdf2Sha512).unwrap();
        assert!(out.starts_with("# plain\nu1:$7$101$"));
        let f = PasswordFile::parse(&out).unwrap();
        assert!(f.verify("u1", b"p1"));
        assert!(f.verify("u2", b"p 2"));
        // Running it again must not double-hash.
        assert!(hash_plaintext(&out, HashScheme::Pbkdf2Sha512).is_err());
        assert!(hash_plaintext("u1:\n", HashScheme::Pbkdf2Sha512).is_err());
    }

    #[test]
    fn scram_sha512_login_against_mosquitto_passwd_entry() {
        use crate::scram::tests::client_final_for;
        use crate::scram::{ScramServer, ScramStep};
        // The committed file made by mosquitto_passwd 2.0.11; alice's password is "secret".
        let pf =
            PasswordFile::parse(include_str!("../tests/fixtures/mosquitto-2.0.11.passwd")).unwrap();
        let creds = pf.scram_sha512_credentials("alice").unwrap();
        let PasswordHash::Pbkdf2Sha512 {
            salt, iterations, ..
        } = pf.get("alice").unwrap()
        else {
            panic!("alice has a $7$ entry")
        };
        // Same keys as deriving SCRAM-SHA-512 credentials from the password itself.
        assert_eq!(
            creds,
            ScramCredentials::from_password(
                Mechanism::ScramSha512,
                b"secret",
                salt.clone(),
                *iterations
            )
        );
        // $6$ entries cannot be used for SCRAM.
        assert!(pf.scram_sha512_credentials("legacy").is_none());

        for (password, ok) in [(&b"secret"[..], true), (&b"Secret"[..], false)] {
            let mut server = ScramServer::new(Mechanism::ScramSha512, |u: &str| {
                pf.scram_sha512_credentials(u)
            });
            let bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
            let ScramStep::Continue(sf) = server.step(format!("n,,{bare}").as_bytes()).unwrap()
            else {
                panic!("expected server-first")
            };
            let sf = String::from_utf8(sf).unwrap();
            assert!(sf.ends_with(",i=101"), "{sf}");
            let (cf, expected_final) =
                client_final_for(Mechanism::ScramSha512, password, bare, &sf, "n,,");
            let result = server.step(cf.as_bytes());
            if ok {
                assert_eq!(
                    result.unwrap(),
                    ScramStep::Success {
                        server_final: expected_final.into_bytes(),
                        username: "alice".into()
                    }
                );
            } else {
                assert_eq!(result, Err(crate::scram::ScramError::InvalidProof));
            }
        }
    }
}
