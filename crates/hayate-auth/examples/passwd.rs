//! `hayate passwd` as a standalone program, for trying the command without the `hayate`
//! binary: `cargo run -p hayate-auth --example passwd -- -c FILE USER`.

use clap::Parser;

/// Manage a Mosquitto password file (like mosquitto_passwd).
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: hayate_auth::PasswdArgs,
}

fn main() {
    if let Err(e) = hayate_auth::run_passwd(Cli::parse().args) {
        eprintln!("Error: {e}");
        std::process::exit(1);
    }
}
