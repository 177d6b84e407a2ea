//! The users of a Mosquitto-compatible password file, for HTTP Basic authentication. The
//! file is read again when its modification time changes (looked at on each check, one
//! `stat`), so `hayate passwd` takes effect without a restart; a file that no longer loads
//! keeps the users it had, with one error in the log.

use hayate_auth::{AuthError, PasswordFile};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// A password file and the time it was last read at.
#[derive(Debug)]
pub struct Passwords {
    path: PathBuf,
    loaded: Mutex<(Option<SystemTime>, Arc<PasswordFile>)>,
}

impl Passwords {
    /// Reads `path`; an unreadable or malformed file is an error.
    pub fn load(path: &Path) -> Result<Passwords, AuthError> {
        let modified = modified(path);
        let file = PasswordFile::load(path)?;
        Ok(Passwords {
            path: path.to_path_buf(),
            loaded: Mutex::new((modified, Arc::new(file))),
        })
    }

    /// Whether `password` is `username`'s (slow by design: call it off the async workers).
    pub fn verify(&self, username: &str, password: &[u8]) -> bool {
        self.current().verify(username, password)
    }

    /// The users as the file has them now.
    fn current(&self) -> Arc<PasswordFile> {
        let modified = modified(&self.path);
        let mut loaded = self.loaded.lock();
        if modified.is_some() && modified != loaded.0 {
            match PasswordFile::load(&self.path) {
                Ok(file) => {
                    tracing::info!(file = %self.path.display(), "http_password_file_reloaded");
                    *loaded = (modified, Arc::new(file));
                }
                Err(error) => {
                    tracing::error!(%error, "http_password_file_reload_failed_keeping_the_old_users");
                    loaded.0 = modified;
                }
            }
        }
        loaded.1.clone()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_auth::PasswordHash;

    #[test]
    fn a_changed_file_is_read_again_and_a_broken_one_keeps_the_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("passwd");
        let line =
            |user: &str, pw: &[u8]| format!("{user}:{}\n", PasswordHash::new_pbkdf2_sha512(pw));
        std::fs::write(&path, line("a", b"1")).unwrap();
        let passwords = Passwords::load(&path).unwrap();
        assert!(passwords.verify("a", b"1"));
        assert!(!passwords.verify("b", b"2"));
        // A different modification time, whatever the file system's resolution.
        std::fs::write(&path, line("b", b"2")).unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(passwords.verify("b", b"2"));
        assert!(!passwords.verify("a", b"1"));
        std::fs::write(&path, "broken line\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later + std::time::Duration::from_secs(5))
            .unwrap();
        assert!(passwords.verify("b", b"2"), "the old users stay");
    }
}
