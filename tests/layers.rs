//! The layout's checked rules (`docs/design.md`, "Layout"): the pure modules do no I/O, and
//! no launcher is named outside `launch`.
//!
//! A pure module (the PMI engine, the key-value store, the service vocabulary, Open MPI's job
//! ids of the run's job names, the plan's types and each rank's variables, the tree's
//! messages, shape, fence gathers and profile, the root's policy) is state and decisions:
//! data in, data out. It may not name tokio, libc, processes, files, sockets, threads or the
//! clock's wall time, and the only `crate::` modules it may use are other pure modules, plus
//! the few plain-data types listed in [`DATA_TYPES`], which live beside the I/O that fills
//! them. Doc comments and each file's tests (from its last `#[cfg(test)]` at column 0) are
//! not read: tests may use anything.
//!
//! The test reads the source, so it fails the moment a pure file gains an import it may not
//! have, a pure file is renamed without this list following it, or an allowed data type moves.
//!
//! A launcher's facts are methods of `launch::kind::LauncherKind`; a launcher's name as a
//! string literal anywhere else in `src/` (`kind == "slurm"`) is a decision made behind the
//! launchers' back, and fails [`no_launcher_is_named_outside_launch`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pure modules, as paths under `src/` (a folder is every file in it).
const PURE: &[&str] = &[
    "proto/kvs.rs",
    "proto/pmi",
    "proto/pmix/jobid.rs",
    "proto/service.rs",
    "launch/kind.rs",
    "plan/mod.rs",
    "plan/rank_env.rs",
    "tree/gather.rs",
    "tree/msg.rs",
    "tree/policy.rs",
    "tree/profile.rs",
    "tree/progress.rs",
    "tree/refusals.rs",
    "tree/shape.rs",
];

/// Plain serde data that pure modules carry but whose modules also do I/O: `(module, type)`.
/// Each is a struct or enum of fields and parsing, with no I/O of its own; moving them beside
/// the plan would let this list go.
const DATA_TYPES: &[(&str, &str)] = &[
    ("host::bind", "Binding"),
    ("host::output", "OutputPlan"),
    ("os::ports", "PortRange"),
    ("plan::job", "MpiSign"),
    ("plan::job", "Wiring"),
];

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
    "std::env",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module path of a source file: `src/tree/msg.rs` is `tree::msg`, `src/plan/mod.rs` is
/// `plan`.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

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

/// A file's code without its tests and without comment lines.
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

/// Every `crate::a::b::c` path in `line`, with `{x, y}` groups opened into one path each.
fn crate_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let tail = &rest[i + "crate::".len()..];
        let n = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let path = tail[..n].trim_end_matches(':');
        if tail[n..].starts_with('{') && tail[..n].ends_with("::") {
            let close = tail[n..].find('}').map_or(tail.len(), |c| n + c);
            for item in tail[n + 1..close].split(',') {
                let item = item.trim().split(" as ").next().unwrap_or("").trim();
                if !item.is_empty() {
                    out.push(format!("{path}::{item}"));
                }
            }
            rest = &tail[close.min(tail.len())..];
        } else {
            out.push(path.to_string());
            rest = &tail[n..];
        }
    }
    out
}

#[test]
fn pure_modules_do_no_io() {
    let src = src();
    let mut all = Vec::new();
    rust_files(&src, &mut all);
    let modules: BTreeSet<String> = all
        .iter()
        .map(|p| module_of(p.strip_prefix(&src).unwrap()))
        .collect();
    let mut pure_files = Vec::new();
    for entry in PURE {
        let p = src.join(entry);
        assert!(p.exists(), "{entry} is listed as pure but is not in src/");
        if p.is_dir() {
            rust_files(&p, &mut pure_files);
        } else {
            pure_files.push(p);
        }
    }
    let pure_modules: BTreeSet<String> = pure_files
        .iter()
        .map(|p| module_of(p.strip_prefix(&src).unwrap()))
        .collect();
    let mut wrong = Vec::new();
    for file in &pure_files {
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            for word in FORBIDDEN {
                if line.contains(word) {
                    wrong.push(format!("src/{rel}:{n}: names {word}: {}", line.trim()));
                }
            }
            for path in crate_paths(&line) {
                // The module a path lies in: its longest prefix that is a module.
                let segs: Vec<&str> = path.split("::").collect();
                let Some(k) = (1..=segs.len())
                    .rev()
                    .find(|&k| modules.contains(&segs[..k].join("::")))
                else {
                    continue; // a macro or item of the crate root (say!, show!)
                };
                let module = segs[..k].join("::");
                if pure_modules.contains(&module) {
                    continue;
                }
                let item = segs.get(k).copied().unwrap_or("");
                if DATA_TYPES.contains(&(module.as_str(), item)) {
                    continue;
                }
                wrong.push(format!(
                    "src/{rel}:{n}: uses crate::{path}, outside the pure modules: {}",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "pure modules must not do I/O (tests/layers.rs):\n{}",
        wrong.join("\n")
    );
}

/// Every launcher's name, as `-launcher` takes it: the string literals of
/// `LauncherKind::as_str` in `src/launch/kind.rs`, read from the source so that a new
/// launcher is checked without this file changing.
fn launchers() -> Vec<String> {
    let text = std::fs::read_to_string(src().join("launch/kind.rs")).unwrap();
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

/// String literals that are a launcher's name but mean something else: `(file, literal)`.
const NOT_LAUNCHERS: &[(&str, &str)] = &[
    // The startup profile's phase in which the ranks are forked.
    ("tree/profile.rs", "fork"),
];

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
    let src = src();
    let mut all = Vec::new();
    rust_files(&src, &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        if rel.starts_with("launch/") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            for name in launcher_literals(&line, &launchers) {
                if !NOT_LAUNCHERS.contains(&(rel.as_str(), name)) {
                    wrong.push(format!(
                        "src/{rel}:{n}: names launcher {name:?}: {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a launcher's facts are methods of launch::kind::LauncherKind; no launcher name \
         outside src/launch/ (tests/layers.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_reads_paths_as_written() {
    assert_eq!(
        crate_paths("use crate::proto::kvs::{Delta, Packed as P};"),
        ["proto::kvs::Delta", "proto::kvs::Packed"]
    );
    assert_eq!(
        crate_paths("x: crate::host::bind::Binding, y: crate::plan::JobPlan"),
        ["host::bind::Binding", "plan::JobPlan"]
    );
    assert_eq!(module_of(Path::new("plan/mod.rs")), "plan");
    assert_eq!(module_of(Path::new("tree/msg.rs")), "tree::msg");
    let code = code_of("use a;\n// tokio\n#[cfg(test)]\nuse tokio;\n");
    assert_eq!(code, [(1, "use a;".to_string())]);
    let names = ["slurm".to_string(), "fork".to_string(), "ssh".to_string()];
    assert_eq!(
        launcher_literals(r#"if kind == "slurm" || k == "fork" {"#, &names),
        ["slurm", "fork"]
    );
    assert!(launcher_literals(r#".args(["agent", "--slurm"]) // "ssh job""#, &names).is_empty());
}
