//! The error type shared by the file formats and the `passwd` command.

use std::fmt;
use std::path::PathBuf;

/// Which file a [`AuthError::Parse`] error comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A Mosquitto password file.
    PasswordFile,
    /// A Mosquitto ACL file.
    AclFile,
    /// A Mosquitto PSK file.
    PskFile,
    /// A Hayate SCRAM credential file.
    ScramFile,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::PasswordFile => "password file",
            FileKind::AclFile => "ACL file",
            FileKind::PskFile => "PSK file",
            FileKind::ScramFile => "SCRAM file",
        })
    }
}

/// Errors from parsing the auth files, hashing passwords and the `passwd` command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A line of a file could not be parsed. `line` counts from 1.
    #[error("{kind} line {line}: {message}")]
    Parse {
        /// The kind of file.
        kind: FileKind,
        /// Line number, starting at 1.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// A password hash string is not in a supported format.
    #[error("invalid password hash: {0}")]
    InvalidHash(String),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The user to delete is not in the password file.
    #[error("user {0} not found in password file")]
    UserNotFound(String),
    /// A username that cannot be stored in a Mosquitto password file.
    #[error("invalid username: {0}")]
    InvalidUsername(String),
    /// The two passwords typed at the prompt differ.
    #[error("passwords do not match")]
    PasswordMismatch,
    /// An empty password was typed at the prompt.
    #[error("empty password")]
    EmptyPassword,
    /// The `passwd` command was given an invalid combination of arguments.
    #[error("{0}")]
    Usage(String),
    /// The password hash could not be computed (invalid parameters).
    #[error("hashing failed: {0}")]
    Hashing(String),
}

impl AuthError {
    pub(crate) fn parse(kind: FileKind, line: usize, message: impl Into<String>) -> Self {
        AuthError::Parse {
            kind,
            line,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AuthError::Io {
            path: path.into(),
            source,
        }
    }
}
