//! The `kauri` command: parses the command line and runs the job.

use kauri::cli::{self, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = match cli::parse(&args) {
        Ok(Command::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("kauri {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(spec)) => spec,
        Err(e) => {
            eprintln!("kauri: {e}");
            return ExitCode::from(255);
        }
    };
    let level = match spec.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KAURI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kauri: cannot start the runtime: {e}");
            return ExitCode::from(255);
        }
    };
    let local = tokio::task::LocalSet::new();
    let status = local.block_on(&rt, kauri::frontend::run(spec));
    // stdin may be held by a blocking reader thread: leave without waiting for it.
    std::process::exit(status);
}
