//! Editing the text of a password file: setting, deleting and converting entries while
//! keeping every other line as it is.

use super::{classify, HashScheme, Line, PasswordHash, MAX_FIELD_LEN};
use crate::error::{AuthError, FileKind};

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
