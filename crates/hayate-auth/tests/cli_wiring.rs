//! `PasswdArgs` embeds in a binary's clap `Subcommand` enum in one line, as `hayate` does.

use clap::{CommandFactory as _, Parser, Subcommand};

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Manage a Mosquitto password file (like mosquitto_passwd).
    Passwd(hayate_auth::PasswdArgs),
}

#[test]
fn passwd_subcommand_parses_like_mosquitto_passwd() {
    let Command::Passwd(a) = Cli::try_parse_from(["hayate", "passwd", "-cb", "f", "u", "p"])
        .unwrap()
        .command;
    assert!(a.create && a.batch && !a.delete && !a.upgrade && !a.argon2id);
    assert_eq!(a.file.to_str(), Some("f"));
    assert_eq!(
        (a.username.as_deref(), a.password.as_deref()),
        (Some("u"), Some("p"))
    );

    let Command::Passwd(a) = Cli::try_parse_from(["hayate", "passwd", "-D", "f", "u"])
        .unwrap()
        .command;
    assert!(a.delete && a.password.is_none());

    let Command::Passwd(a) = Cli::try_parse_from(["hayate", "passwd", "--argon2id", "-U", "f"])
        .unwrap()
        .command;
    assert!(a.upgrade && a.argon2id && a.username.is_none());

    assert!(Cli::try_parse_from(["hayate", "passwd", "-c", "-D", "f", "u"]).is_err());
    Cli::command().debug_assert();
    let help = Cli::command()
        .find_subcommand_mut("passwd")
        .unwrap()
        .render_long_help()
        .to_string();
    for flag in [
        "-b",
        "-c",
        "-D",
        "-U",
        "--argon2id",
        "<FILE>",
        "[USERNAME]",
        "[PASSWORD]",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}
