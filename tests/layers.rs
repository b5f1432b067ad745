//! The layout's checked rules (`docs/design.md`, "Layout") that the compiler does not check:
//! the core does no I/O, and no launcher is named outside the launchers' crate.
//!
//! 1. **The core does no I/O.** The core crate (`crates/kauri-core`: the PMI engine, the
//!    key-value store, the service vocabulary, Open MPI's job ids, the record of a rank's end,
//!    the launcher kinds, the plan's types and each rank's variables, the tree's messages,
//!    shape, fence gathers, profile and policy) is state and decisions: data in, data out.
//!    Its manifest keeps tokio and libc out of it; this test keeps out files, sockets,
//!    processes, threads, the environment and the clock, which `std` offers to every crate.
//! 2. **No launcher is named outside the launchers' crate.** A launcher's facts are methods of
//!    `launch::kind::LauncherKind`; a launcher's name as a string literal anywhere else in a
//!    crate of the workspace (`kind == "slurm"`) is a decision made behind the launchers'
//!    back, and fails [`no_launcher_is_named_outside_launch`].
//!
//! Which layer may use which is not checked here: every layer is a crate of the workspace
//! (`pmi-wire`, `kauri-core`, `kauri-os`, `kauri-proto`, `kauri-launch`, `kauri-plan`,
//! `kauri-host`, `kauri-tree`, then the `kauri` package: its library, the command lines in
//! `src/cli`, and its binary, `src/main.rs`), and cargo refuses a crate that names one not
//! among its dependencies, so an upward arrow does not compile. The `kauri` package's library
//! cannot name its binary either, so the order of its two parts (`cli`, then `main`) needs no
//! test of its own.
//!
//! Doc comments, comment lines and each file's tests (from its last `#[cfg(test)]` at column
//! 0, or the whole of a `tests.rs` that its parent module declares under `#[cfg(test)]`) are
//! not read: tests may use anything.

use std::path::{Path, PathBuf};

/// What a pure module may not name: I/O, processes, threads, time from the system clock.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "libc",
    "std::process",
    "std::fs",
    "std::net",
    "std::os",
    "std::thread",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "SystemTime",
    "Instant::now",
    "std::env",
];

/// What a pure module may name though it starts like a forbidden word: the conversions
/// between bytes and `OsStr` do no I/O.
const ALLOWED: &[&str] = &[
    "std::os::unix::ffi::OsStrExt",
    "std::os::unix::ffi::OsStringExt",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The core crate's sources: every module in it is pure.
fn core() -> PathBuf {
    workspace().join("crates/kauri-core/src")
}

/// The members of the workspace, as its `Cargo.toml` lists them (`.` is the `kauri`
/// package), so that a new crate is read without this file changing.
fn members(manifest: &str) -> Vec<String> {
    let start = manifest
        .find("members = [")
        .expect("the workspace's members in Cargo.toml");
    let list = &manifest[start + "members = [".len()..];
    let list = &list[..list.find(']').expect("the end of the members' list")];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Members whose code is all tests: `compat-tests` runs kauri with launchers named on its
/// command lines (`-launcher fork`), as a user does.
const ALL_TESTS: &[&str] = &["compat-tests"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's code without its tests and without comment lines, each line with its number.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let end = text
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "#[cfg(test)]")
        .map(|(i, _)| i)
        .last()
        .unwrap_or(usize::MAX);
    text.lines()
        .enumerate()
        .take_while(|(i, _)| *i < end)
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect()
}

/// `file` is a `tests.rs` whose parent module (`mod.rs` beside it) declares it only for tests.
fn is_test_module(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "tests.rs")
        && std::fs::read_to_string(file.with_file_name("mod.rs"))
            .is_ok_and(|m| m.contains("#[cfg(test)]\nmod tests;"))
}

#[test]
fn pure_modules_do_no_io() {
    let mut files = Vec::new();
    rust_files(&core(), &mut files);
    assert!(files.len() > 20, "the core's files: {files:?}");
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(workspace()).unwrap().display();
        if is_test_module(file) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            let mut line = line.clone();
            for ok in ALLOWED {
                line = line.replace(ok, "");
            }
            for word in FORBIDDEN.iter().filter(|w| line.contains(*w)) {
                wrong.push(format!("{rel}:{n}: names {word}: {}", line.trim()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the core does no I/O (tests/layers.rs):\n{}",
        wrong.join("\n")
    );
}

/// Every launcher's name, as `-launcher` takes it: the string literals of
/// `LauncherKind::as_str` in the core's `launch/kind.rs`, read from the source so that a new
/// launcher is checked without this file changing.
fn launchers() -> Vec<String> {
    let text = std::fs::read_to_string(core().join("launch/kind.rs")).unwrap();
    let start = text
        .find("fn as_str(")
        .expect("LauncherKind::as_str in launch/kind.rs");
    let body = &text[start..];
    let body = &body[..body.find("\n    }\n").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.split_once("=> \"")?.1.split_once('"'))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// String literals that are a launcher's name but mean something else: `(file, literal)`,
/// the file as a path from the workspace's top.
const NOT_LAUNCHERS: &[(&str, &str)] = &[
    // The startup profile's phase in which the ranks are forked.
    ("crates/kauri-core/src/tree/profile.rs", "fork"),
    // The system call that failed, in the PMI floor's error message.
    ("pmi-wire/src/bin/pmi-floor.rs", "fork"),
];

/// Whether `rel` (a path from the workspace's top) may name launchers: the launchers' crate
/// and the core's list of their kinds.
fn may_name_launchers(rel: &str) -> bool {
    rel.starts_with("crates/kauri-launch/") || rel == "crates/kauri-core/src/launch/kind.rs"
}

/// The names among `launchers` that `line` holds as whole string literals (`"slurm"`, not
/// `"--slurm"` nor `"slurm job"`).
fn launcher_literals<'a>(line: &str, launchers: &'a [String]) -> Vec<&'a str> {
    launchers
        .iter()
        .map(String::as_str)
        .filter(|name| line.contains(&format!("\"{name}\"")))
        .collect()
}

#[test]
fn no_launcher_is_named_outside_launch() {
    let launchers = launchers();
    for name in ["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"] {
        assert!(
            launchers.iter().any(|l| l == name),
            "{name} is not among launch/kind.rs's names as read here: {launchers:?}"
        );
    }
    let top = workspace();
    let manifest = std::fs::read_to_string(top.join("Cargo.toml")).unwrap();
    let members = members(&manifest);
    for crate_dir in ["crates/kauri-tree", "crates/kauri-launch", "pmi-wire"] {
        assert!(
            members.iter().any(|m| m == crate_dir),
            "{crate_dir} is not among the members as read here: {members:?}"
        );
    }
    let mut all = Vec::new();
    for m in members.iter().filter(|m| !ALL_TESTS.contains(&m.as_str())) {
        rust_files(&top.join(m).join("src"), &mut all);
    }
    let mut wrong = Vec::new();
    for file in &all {
        let rel = file.strip_prefix(&top).unwrap().display().to_string();
        if may_name_launchers(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            for name in launcher_literals(&line, &launchers) {
                if !NOT_LAUNCHERS.contains(&(rel.as_str(), name)) {
                    wrong.push(format!(
                        "{rel}:{n}: names launcher {name:?}: {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a launcher's facts are methods of launch::kind::LauncherKind; no launcher name \
         outside the launchers' crate (tests/layers.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checks_read_code_as_meant() {
    let code = code_of("use a;\n// tokio\n#[cfg(test)]\nuse tokio;\n");
    assert_eq!(code, [(1, "use a;".to_string())]);
    let names = ["slurm".to_string(), "fork".to_string(), "ssh".to_string()];
    assert_eq!(
        launcher_literals(r#"if kind == "slurm" || k == "fork" {"#, &names),
        ["slurm", "fork"]
    );
    assert!(launcher_literals(r#".args(["agent", "--slurm"]) // "ssh job""#, &names).is_empty());
    assert_eq!(
        members("[workspace]\nmembers = [\".\", \"crates/kauri-core\",\n \"pmi-wire\"]\n"),
        [".", "crates/kauri-core", "pmi-wire"]
    );
    assert!(may_name_launchers("crates/kauri-launch/src/ssh.rs"));
    assert!(may_name_launchers("crates/kauri-core/src/launch/kind.rs"));
    assert!(!may_name_launchers("crates/kauri-tree/src/hub.rs"));
    assert!(!may_name_launchers("src/launch/kind.rs"));
}
