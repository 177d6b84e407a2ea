//! Mosquitto `psk_file`: `identity:hexkey` lines for TLS-PSK.
//!
//! Blank lines and lines starting with `#` are ignored; whitespace around the identity and the
//! key is trimmed. The key must be non-empty hexadecimal with an even number of digits (upper
//! or lower case) and is decoded exactly: Mosquitto turns keys into bytes through an OpenSSL
//! bignum, which drops leading zero bytes (`00ff` becomes one byte) and accepts odd lengths;
//! Hayate keeps every byte, as `openssl s_client -psk` and most clients do.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use crate::error::{AuthError, FileKind};

/// A parsed PSK file: identity → key bytes.
#[derive(Clone, Default)]
pub struct PskFile {
    keys: HashMap<String, Vec<u8>>,
}

impl fmt::Debug for PskFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are secrets: show identities only.
        f.debug_struct("PskFile")
            .field("identities", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decode a hex string; `Err` says what is wrong.
fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.is_empty() {
        return Err("empty key".into());
    }
    if let Some(pos) = s.bytes().position(|b| hex_value(b).is_none()) {
        return Err(format!(
            "key contains a non-hexadecimal character at position {}",
            pos + 1
        ));
    }
    if !s.len().is_multiple_of(2) {
        return Err("key has an odd number of hex digits".into());
    }
    Ok(s.as_bytes()
        .chunks_exact(2)
        .map(|p| (hex_value(p[0]).unwrap_or(0) << 4) | hex_value(p[1]).unwrap_or(0))
        .collect())
}

impl PskFile {
    /// Parse the text of a PSK file; fails on the first bad line, with its number, and on an
    /// identity that appears twice.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let mut keys = HashMap::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (idx, line) in text.lines().enumerate() {
            let lineno = idx + 1;
            let err = |m: String| AuthError::parse(FileKind::PskFile, lineno, m);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (identity, key) = line
                .split_once(':')
                .ok_or_else(|| err("expected identity:hexkey".into()))?;
            let identity = identity.trim();
            if identity.is_empty() {
                return Err(err("empty identity".into()));
            }
            let key =
                decode_hex(key.trim()).map_err(|m| err(format!("identity {identity}: {m}")))?;
            if let Some(prev) = seen.get(identity) {
                return Err(err(format!(
                    "identity {identity} already defined on line {prev}"
                )));
            }
            seen.insert(identity.to_owned(), lineno);
            keys.insert(identity.to_owned(), key);
        }
        Ok(PskFile { keys })
    }

    /// Read and parse a PSK file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, AuthError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| AuthError::io(path, e))?;
        Self::parse(&text)
    }

    /// The key of `identity`.
    pub fn get(&self, identity: &str) -> Option<&[u8]> {
        self.keys.get(identity).map(Vec::as_slice)
    }

    /// Number of identities.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the file defines no identity.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys() {
        let f = PskFile::parse("# psk\n\n id1 : 00ff10AB \nid2:deadbeef\r\n").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.get("id1"), Some(&[0x00, 0xff, 0x10, 0xab][..]));
        assert_eq!(f.get("id2"), Some(&[0xde, 0xad, 0xbe, 0xef][..]));
        assert_eq!(f.get("id3"), None);
        assert!(!format!("{f:?}").contains("dead"));
    }

    #[test]
    fn errors_have_line_numbers() {
        for (text, line, needle) in [
            ("id1:00\nnocolon\n", 2, "identity:hexkey"),
            ("id1:\n", 1, "empty key"),
            ("\n:00\n", 2, "empty identity"),
            ("id1:0g\n", 1, "position 2"),
            ("id1:abc\n", 1, "odd"),
            ("id1:00:11\n", 1, "non-hexadecimal"),
            ("a:00\nb:11\na:22\n", 3, "line 1"),
        ] {
            match PskFile::parse(text) {
                Err(e @ AuthError::Parse { line: l, .. }) => {
                    assert_eq!(l, line, "{text:?}");
                    assert!(e.to_string().contains(needle), "{e}");
                    assert!(
                        e.to_string().starts_with(&format!("PSK file line {line}")),
                        "{e}"
                    );
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
