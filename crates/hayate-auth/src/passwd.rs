//! `hayate passwd`: manage a Mosquitto password file, mirroring `mosquitto_passwd` 2.0.
//!
//! ```text
//! hayate passwd [-c] FILE USER           prompt twice for USER's password (no echo)
//! hayate passwd [-c] -b FILE USER PASS   batch mode: password on the command line
//! hayate passwd -D FILE USER             delete USER
//! hayate passwd -U FILE                  hash every password of a plain-text file
//! --argon2id                             write argon2id (Mosquitto ≥ 2.1) instead of $7$
//! ```
//!
//! `-c` creates the file, replacing an existing one; without it the file must exist. Other
//! lines (and comments) are kept. Every change is written to a temporary file in the same
//! directory and renamed over the original, so a crash never leaves a half-written file; a
//! new file gets mode 0600, an existing file keeps its mode (its owner becomes the user
//! running the command). A symbolic link is followed and its target replaced.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rand::RngCore as _;

use crate::error::AuthError;
use crate::password_file::{
    check_structure, delete_user, hash_plaintext, set_user, validate_username, HashScheme,
};

/// Longest password accepted (as `mosquitto_passwd`).
const MAX_PASSWORD_LEN: usize = 65_535;

/// Arguments of `hayate passwd` (a `clap` derive, so a binary can embed it as a subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct PasswdArgs {
    /// Batch mode: take the password from the command line instead of prompting.
    #[arg(short = 'b')]
    pub batch: bool,
    /// Create a new password file, overwriting an existing one.
    #[arg(short = 'c', conflicts_with_all = ["delete", "upgrade"])]
    pub create: bool,
    /// Delete USER from the file.
    #[arg(short = 'D', conflicts_with_all = ["upgrade", "batch"])]
    pub delete: bool,
    /// Convert a plain-text password file (user:password lines) to hashed passwords.
    #[arg(short = 'U', conflicts_with = "batch")]
    pub upgrade: bool,
    /// Write argon2id hashes (readable by Mosquitto 2.1 and Hayate) instead of $7$
    /// PBKDF2-SHA512 (readable by Mosquitto 2.0 and later).
    #[arg(long)]
    pub argon2id: bool,
    /// The password file.
    pub file: PathBuf,
    /// The user to add, update or delete.
    pub username: Option<String>,
    /// The password (batch mode only).
    pub password: Option<String>,
}

/// Run `hayate passwd`, prompting on the terminal when not in batch mode.
pub fn run_passwd(args: PasswdArgs) -> Result<(), AuthError> {
    run_passwd_with(args, &mut |prompt| rpassword::prompt_password(prompt))
}

fn usage(msg: &str) -> AuthError {
    AuthError::Usage(msg.to_owned())
}

/// [`run_passwd`] with the password prompt supplied (for tests).
pub(crate) fn run_passwd_with(
    args: PasswdArgs,
    prompt: &mut dyn FnMut(&str) -> io::Result<String>,
) -> Result<(), AuthError> {
    let scheme = if args.argon2id {
        HashScheme::Argon2id
    } else {
        HashScheme::Pbkdf2Sha512
    };
    let path = args.file.as_path();

    if args.upgrade {
        if args.username.is_some() || args.password.is_some() {
            return Err(usage("-U takes only the password file"));
        }
        let text = read_existing(path)?;
        return write_atomic(path, &hash_plaintext(&text, scheme)?);
    }

    let username = args
        .username
        .as_deref()
        .ok_or_else(|| usage("a username is required"))?;

    if args.delete {
        if args.password.is_some() {
            return Err(usage("-D takes the password file and a username"));
        }
        let text = read_existing(path)?;
        return write_atomic(path, &delete_user(&text, username)?);
    }

    validate_username(username)?;
    let password = match (args.batch, args.password) {
        (true, Some(p)) => p,
        (true, None) => {
            return Err(usage(
                "-b needs the password file, a username and a password",
            ))
        }
        (false, Some(_)) => return Err(usage("a password on the command line needs -b")),
        (false, None) => read_password_twice(prompt)?,
    };
    if password.len() > MAX_PASSWORD_LEN {
        return Err(usage("the password must be at most 65535 bytes"));
    }
    let text = if args.create {
        String::new()
    } else {
        let text = read_existing(path)?;
        check_structure(&text)?;
        text
    };
    let hash = scheme.hash(password.as_bytes())?;
    let (new_text, _existed) = set_user(&text, username, &hash)?;
    write_atomic(path, &new_text)
}

fn read_password_twice(
    prompt: &mut dyn FnMut(&str) -> io::Result<String>,
) -> Result<String, AuthError> {
    let tty_err = |e| AuthError::io("terminal", e);
    let first = prompt("Password: ").map_err(tty_err)?;
    if first.is_empty() {
        return Err(AuthError::EmptyPassword);
    }
    let second = prompt("Reenter password: ").map_err(tty_err)?;
    if first != second {
        return Err(AuthError::PasswordMismatch);
    }
    Ok(first)
}

fn read_existing(path: &Path) -> Result<String, AuthError> {
    fs::read_to_string(path).map_err(|e| AuthError::io(path, e))
}

/// Replace `path` with `contents` atomically: write a temporary file next to it, flush it to
/// disk, then rename it over `path`. New files are created with mode 0600; an existing file's
/// permissions are kept.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), AuthError> {
    let target = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(AuthError::io(path, e)),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target.file_name().ok_or_else(|| {
        AuthError::io(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
        )
    })?;
    let existing_permissions = fs::metadata(&target).ok().map(|m| m.permissions());

    let tmp = dir.join(format!(
        ".{}.tmp-{}-{:016x}",
        name.to_string_lossy(),
        std::process::id(),
        rand::rng().next_u64()
    ));
    let result = write_new_file(&tmp, contents, existing_permissions)
        .and_then(|()| fs::rename(&tmp, &target));
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(AuthError::io(path, e));
    }
    sync_dir(&dir);
    Ok(())
}

fn write_new_file(
    tmp: &Path,
    contents: &str,
    permissions: Option<fs::Permissions>,
) -> io::Result<()> {
    use std::io::Write as _;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(tmp)?;
    file.write_all(contents.as_bytes())?;
    if let Some(p) = permissions {
        file.set_permissions(p)?;
    }
    file.sync_all()
}

fn sync_dir(dir: &Path) {
    // Make the rename itself durable; best effort (not possible on every platform).
    #[cfg(unix)]
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password_file::PasswordFile;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PasswdArgs,
    }

    fn parse(argv: &[&str]) -> Result<PasswdArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("passwd").chain(argv.iter().copied())).map(|c| c.args)
    }

    fn run(argv: &[&str]) -> Result<(), AuthError> {
        run_passwd_with(parse(argv).unwrap(), &mut |_| panic!("no prompt expected"))
    }

    #[test]
    fn cli_shapes() {
        let a = parse(&["-c", "-b", "f", "u", "p"]).unwrap();
        assert!(a.create && a.batch && !a.delete);
        assert_eq!(a.username.as_deref(), Some("u"));
        assert_eq!(a.password.as_deref(), Some("p"));
        assert!(parse(&["-c", "-D", "f", "u"]).is_err());
        assert!(parse(&["-D", "-U", "f"]).is_err());
        assert!(parse(&["-b", "-D", "f", "u"]).is_err());
        assert!(parse(&["-b", "-U", "f"]).is_err());
        assert!(parse(&["--argon2id", "-U", "f"]).unwrap().argon2id);
        assert!(parse(&[]).is_err());
    }

    #[test]
    fn batch_create_update_delete() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        let fs_ = f.to_str().unwrap();
        // Without -c the file must exist.
        assert!(matches!(
            run(&["-b", fs_, "alice", "a1"]),
            Err(AuthError::Io { .. })
        ));
        run(&["-c", "-b", fs_, "alice", "a1"]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                fs::metadata(&f).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        run(&["-b", fs_, "bob", "b1"]).unwrap();
        run(&["-b", "--argon2id", fs_, "carol", "c1"]).unwrap();
        run(&["-b", fs_, "alice", "a2"]).unwrap();
        let text = fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("alice:$7$101$"));
        assert!(lines[1].starts_with("bob:$7$101$"));
        assert!(lines[2].starts_with("carol:$argon2id$v=19$m=47104,t=1,p=1$"));
        let pf = PasswordFile::parse(&text).unwrap();
        assert!(pf.verify("alice", b"a2") && !pf.verify("alice", b"a1"));
        assert!(pf.verify("bob", b"b1"));
        assert!(pf.verify("carol", b"c1"));

        run(&["-D", fs_, "bob"]).unwrap();
        assert!(matches!(
            run(&["-D", fs_, "bob"]),
            Err(AuthError::UserNotFound(_))
        ));
        let pf = PasswordFile::load(&f).unwrap();
        assert_eq!(pf.len(), 2);

        // -c replaces the whole file.
        run(&["-c", "-b", fs_, "dave", "d"]).unwrap();
        assert_eq!(PasswordFile::load(&f).unwrap().len(), 1);
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn existing_permissions_kept_and_symlinks_followed() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        fs::write(&f, "# keep me\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        run(&["-b", link.to_str().unwrap(), "u", "p"]).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let text = fs::read_to_string(&f).unwrap();
        assert!(text.starts_with("# keep me\nu:$7$"));
    }

    #[test]
    fn interactive_prompts_twice() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        let args = parse(&["-c", f.to_str().unwrap(), "u"]).unwrap();
        let mut answers = vec!["pw".to_string(), "pw".to_string()].into_iter();
        let mut prompts = Vec::new();
        run_passwd_with(args.clone(), &mut |p| {
            prompts.push(p.to_owned());
            Ok(answers.next().unwrap())
        })
        .unwrap();
        assert_eq!(prompts, ["Password: ", "Reenter password: "]);
        assert!(PasswordFile::load(&f).unwrap().verify("u", b"pw"));

        let mut answers = vec!["a".to_string(), "b".to_string()].into_iter();
        assert!(matches!(
            run_passwd_with(args.clone(), &mut |_| Ok(answers.next().unwrap())),
            Err(AuthError::PasswordMismatch)
        ));
        assert!(matches!(
            run_passwd_with(args, &mut |_| Ok(String::new())),
            Err(AuthError::EmptyPassword)
        ));
        // A failed run leaves the file unchanged.
        assert!(PasswordFile::load(&f).unwrap().verify("u", b"pw"));
    }

    #[test]
    fn argument_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        let fs_ = f.to_str().unwrap();
        fs::write(&f, "").unwrap();
        assert!(matches!(run(&[fs_, "u", "p"]), Err(AuthError::Usage(_))));
        assert!(matches!(run(&["-b", fs_, "u"]), Err(AuthError::Usage(_))));
        assert!(matches!(run(&["-b", fs_]), Err(AuthError::Usage(_))));
        assert!(matches!(run(&["-U", fs_, "u"]), Err(AuthError::Usage(_))));
        assert!(matches!(
            run(&["-b", fs_, "a:b", "p"]),
            Err(AuthError::InvalidUsername(_))
        ));
        // A corrupt file is not modified.
        fs::write(&f, "alice:x\ngarbage\n").unwrap();
        assert!(matches!(
            run(&["-b", fs_, "u", "p"]),
            Err(AuthError::Parse { line: 2, .. })
        ));
        assert_eq!(fs::read_to_string(&f).unwrap(), "alice:x\ngarbage\n");
    }

    #[test]
    fn upgrade_plaintext_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        fs::write(&f, "u1:p1\nu2:p2\n").unwrap();
        run(&["-U", f.to_str().unwrap()]).unwrap();
        let pf = PasswordFile::load(&f).unwrap();
        assert!(pf.verify("u1", b"p1") && pf.verify("u2", b"p2"));
        // Converting twice is refused rather than double-hashing.
        assert!(run(&["-U", f.to_str().unwrap()]).is_err());
    }
}
