//! The `kauri` command: parses the command line and runs the job.

use kauri::cli::{self, Command};
use std::ffi::OsString;
use std::process::ExitCode;

/// kauri's own roles and tools (`kauri agent`, `kauri kvs`, …): their words are text.
const SUBCOMMANDS: [&str; 7] = [
    kauri::host::keeper::SUBCOMMAND,
    "agent",
    "nameserver",
    "--status",
    "-status",
    "kvs",
    "pmi",
];

/// A word after a subcommand that is not UTF-8 (exit status 2): one line naming the
/// subcommand and the word (its invalid bytes as U+FFFD).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("kauri {sub}: {word:?} is not UTF-8 text")]
struct NotUtf8 {
    /// The subcommand.
    sub: String,
    /// The word, lossily.
    word: String,
}

/// The words after a subcommand as text, or the first that is not UTF-8.
fn utf8_words(sub: &str, words: &[OsString]) -> Result<Vec<String>, NotUtf8> {
    words
        .iter()
        .map(|w| {
            w.clone().into_string().map_err(|w| NotUtf8 {
                sub: sub.to_string(),
                word: w.to_string_lossy().into_owned(),
            })
        })
        .collect()
}

/// Runs subcommand `sub` (one of [`SUBCOMMANDS`]) with the words after it.
fn subcommand(sub: &str, rest: &[String]) -> ExitCode {
    match sub {
        "agent" => run_agent(rest),
        "nameserver" => {
            logging(0);
            let rest = rest.to_vec();
            run_local(async move { kauri::cli::nameserver::run(&rest).await })
        }
        "--status" | "-status" => ExitCode::from(kauri::cli::status::run(rest) as u8),
        "kvs" => ExitCode::from(kauri::cli::kvs::run(rest)),
        "pmi" => ExitCode::from(kauri::cli::pmi::run(rest)),
        kauri::host::keeper::SUBCOMMAND => ExitCode::from(kauri::host::keeper::run(rest) as u8),
        _ => ExitCode::from(2),
    }
}

fn main() -> ExitCode {
    // The words as the OS gives them: a program, an argument or a directory need not be
    // UTF-8 (a Latin-1 file name), and reach the ranks byte for byte.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let first = args.first().and_then(|a| a.to_str()).unwrap_or_default();
    if SUBCOMMANDS.contains(&first) {
        return match utf8_words(first, &args[1..]) {
            Ok(rest) => subcommand(first, &rest),
            Err(e) => {
                kauri::say!("{e}");
                ExitCode::from(2)
            }
        };
    }
    let spec = match cli::parse(&args) {
        Ok(Command::Help) => {
            kauri::console::out(&cli::help());
            return ExitCode::SUCCESS;
        }
        Ok(Command::HelpEnv) => {
            kauri::console::out(&cli::help_env());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            kauri::show!("{}", kauri::cli::info::version_line());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Man(page)) => {
            if let Some(page) = kauri::cli::doc::page(page) {
                kauri::console::out(&kauri::cli::doc::roff::render(page));
            }
            return ExitCode::SUCCESS;
        }
        Ok(Command::Completions(shell)) => {
            if let Some(script) = kauri::cli::doc::complete::script(&shell) {
                kauri::console::out(&script);
            }
            return ExitCode::SUCCESS;
        }
        Ok(Command::Info { json }) => {
            let info = kauri::cli::info::gather();
            if json {
                kauri::show!("{}", info.json());
            } else {
                kauri::console::out(&info.text());
            }
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(spec)) => {
            for w in &spec.warnings {
                kauri::say!("kauri: warning: {w}");
            }
            spec
        }
        Err(e) => {
            kauri::say!("kauri: {e}");
            return ExitCode::from(255);
        }
    };
    if spec.verbose > 1 {
        // -v -v: the PMI wire trace too, here and (through `kauri agent --pmi-trace`) on
        // every agent.
        std::env::set_var("KAURI_PMI_TRACE", "1");
    }
    logging(spec.verbose);
    // What ranks start and leave behind, even with setsid, comes back to kauri to be ended.
    kauri::host::proc::become_subreaper();
    if spec.max_restarts > 0 && spec.attempt.is_none() {
        // Each attempt runs as a kauri of its own; this one supervises them.
        let status = kauri::cli::restarts::supervise(&args, spec.max_restarts);
        return ExitCode::from(status.clamp(0, 255) as u8);
    }
    if spec.verbose > 0 {
        // Agents log at the same level.
        std::env::set_var("KAURI_LOG", if spec.verbose > 1 { "debug" } else { "info" });
    }
    // The plan, and, when the job has ranks here, the keeper's start already under way: it
    // overlaps the runtime's.
    let prepared = match kauri::tree::root::prepare_run(&spec) {
        Ok(p) => p,
        Err(status) => return ExitCode::from(status as u8),
    };
    run_local(kauri::tree::root::run(*spec, prepared))
}

fn logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("KAURI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    if kauri::proto::trace_enabled() {
        // KAURI_PMI_TRACE: the PMI engine's wire trace, whatever the level.
        if let Ok(d) = format!("{}=info", kauri::proto::pmi::TRACE_TARGET).parse() {
            filter = filter.add_directive(d);
        }
    }
    // Colour only on a terminal, and not under NO_COLOR: a log in a file or a pipe is text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .init();
}

/// Runs a role on a single-threaded runtime and exits with its status.
fn run_local(role: impl std::future::Future<Output = i32>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            kauri::say!("kauri: cannot start the runtime: {e}");
            return ExitCode::from(255);
        }
    };
    let local = tokio::task::LocalSet::new();
    let status = local.block_on(&rt, role);
    // The PMIx server (if a PMIx job ran here) and its files.
    kauri::proto::pmix::shutdown();
    // A clean end: the keeper of this host's ranks has nothing to do.
    kauri::host::keeper::release();
    // stdin may be held by a blocking reader thread: leave without waiting for it.
    std::process::exit(status);
}

/// `kauri agent …`: the internal per-host role.
fn run_agent(args: &[String]) -> ExitCode {
    let a = match kauri::cli::agent::parse(args) {
        Ok(a) => a,
        Err(e) => {
            kauri::say!("kauri agent: {e}");
            return ExitCode::from(2);
        }
    };
    if a.pmi_trace {
        std::env::set_var("KAURI_PMI_TRACE", "1");
    }
    logging(0);
    kauri::host::proc::become_subreaper();
    run_local(kauri::tree::agent::run(a))
}

#[cfg(test)]
mod tests {
    use super::{utf8_words, NotUtf8};
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    /// A word that is not UTF-8 prints the line kauri printed when the error was text.
    #[test]
    fn a_word_not_utf8_prints_its_line() {
        let words = [
            OsString::from("get"),
            OsString::from_vec(b"caf\xe9\"s".to_vec()),
        ];
        let e = utf8_words("kvs", &words).unwrap_err();
        assert_eq!(
            e,
            NotUtf8 {
                sub: "kvs".into(),
                word: "caf\u{fffd}\"s".into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "kauri kvs: \"caf\u{fffd}\\\"s\" is not UTF-8 text"
        );
        assert_eq!(utf8_words("kvs", &words[..1]), Ok(vec!["get".to_string()]));
    }
}
