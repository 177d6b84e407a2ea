//! Password hashes: parsing the `$6$`, `$7$` and `$argon2id$` encodings, verifying,
//! creating and encoding them.

use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, STANDARD};
use base64::Engine as _;
use rand::RngCore as _;
use sha2::{Digest as _, Sha512};
use subtle::ConstantTimeEq as _;

use super::{
    ARGON2_LEN, ARGON2_M_COST, ARGON2_P_COST, ARGON2_T_COST, B64_ARGON2, B64_LENIENT,
    MAX_ARGON2_HASH_LEN, MAX_ARGON2_M_COST, MAX_ARGON2_P_COST, MAX_ARGON2_T_COST,
    MAX_PBKDF2_ITERATIONS, MAX_SALT_LEN, PBKDF2_DEFAULT_ITERATIONS, PBKDF2_SALT_LEN,
};
use crate::error::AuthError;
use crate::scram::{Mechanism, ScramCredentials};

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
