//! The layout's checked rules (`docs/design.md`, "Layout"): the pure modules do no I/O,
//! the folders form layers, and no launcher is named outside `launch`.
//!
//! 1. **The pure modules do no I/O.** A pure module (the PMI engine, the key-value store, the
//!    service vocabulary, Open MPI's job ids of the run's job names, the record of a rank's
//!    end, the plan's types and each rank's variables, the tree's messages, shape, fence
//!    gathers, profile and policy) is state and decisions: data in, data out. It may not name
//!    tokio, libc, processes, files, sockets, threads, the environment or the clock, and it
//!    uses only other pure modules. Together they are the core every folder may use.
//! 2. **The folders form layers.** Outside the core, a module uses only its own folder and the
//!    folders below it in [`ORDER`]: never one above.
//!
//! Every path is read as the compiler reads it: `use` trees however `rustfmt` wraps them,
//! `crate::`, `super::` and `self::` paths in the code, each resolved to the module it lies in
//! (its longest prefix that is a module). Doc comments, comment lines and each file's tests
//! (from its last `#[cfg(test)]` at column 0) are not read: tests may use anything.
//!
//! The test reads the source, so it fails the moment a file gains an import it may not have,
//! or a pure file is renamed without this list following it.
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
    "proto/rank.rs",
    "proto/service.rs",
    "launch/kind.rs",
    "plan/binding.rs",
    "plan/job.rs",
    "plan/knobs.rs",
    "plan/mod.rs",
    "plan/output.rs",
    "plan/port_range.rs",
    "plan/rank_env.rs",
    "tree/gather.rs",
    "tree/msg.rs",
    "tree/policy.rs",
    "tree/profile.rs",
    "tree/progress.rs",
    "tree/refusals.rs",
    "tree/shape.rs",
];

/// The folders (and the crate root's own modules) from the bottom up: each may use those
/// before it, never one after it.
const ORDER: &[&str] = &[
    "console", "os", "proto", "launch", "plan", "host", "tree", "cli", "main",
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
    "Instant::now",
    "std::env",
];

/// What a pure module may name though it starts like a forbidden word: the conversions
/// between bytes and `OsStr` do no I/O.
const ALLOWED: &[&str] = &[
    "std::os::unix::ffi::OsStrExt",
    "std::os::unix::ffi::OsStringExt",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module path of a source file: `src/tree/msg.rs` is `tree::msg`, `src/plan/mod.rs` is
/// `plan`, `src/lib.rs` is the crate root (empty).
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

/// The layer of a module: its folder, or for the crate root's own files their name.
fn layer_of(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
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

/// A `use` tree (`a::{b, c::{d as e, self}}`, blanks removed) opened into one path per leaf.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or("").to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().filter(|i| !i.trim().is_empty()) {
        for leaf in expand(item.trim()) {
            if leaf == "self" {
                out.push(prefix.trim_end_matches("::").to_string());
            } else {
                out.push(format!("{prefix}{leaf}"));
            }
        }
    }
    out
}

/// A `use` tree as [`expand`] reads it: blanks only between two words (`a as b`).
fn tidy(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = String::new();
    for w in words {
        let word_end = out.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if word_end && w.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// Whether `s` ends in the middle of a word or a path (`::`), so that a path found after it
/// is not one of its own.
fn continues(s: &str) -> bool {
    s.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
}

/// Where a `use` declaration starts in `line` (at its start, after `pub`, `pub(crate)` or
/// `pub(super)`), if one does: `rustfmt` starts every one on a line of its own.
fn use_at(line: &str) -> Option<usize> {
    let code = line.trim_start();
    let indent = line.len() - code.len();
    ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .find(|p| code.starts_with(*p))
        .map(|p| indent + p.len() - 4)
}

/// Every path a file's code names, with the line it is on: each `use` tree's leaves, then
/// every `crate::`, `super::`, `self::` (and, in `main.rs`, `kauri::`) path outside them.
fn paths_of(code: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_use: Option<(usize, String)> = None;
    // The modules written inline (`mod x { … }`) the line is in, by their indentation: a
    // `super::` in one of them names the file's module.
    let mut inline: Vec<usize> = Vec::new();
    for (n, line) in code {
        let indent = line.len() - line.trim_start().len();
        if inline.last() == Some(&indent) && line.trim() == "}" {
            inline.pop();
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [.., "mod", _, "{"] = words.as_slice() {
            inline.push(indent);
        }
        let start = out.len();
        let mut rest = line.as_str();
        loop {
            if let Some((first, text)) = in_use.as_mut() {
                let end = rest.find(';');
                text.push_str(&rest[..end.unwrap_or(rest.len())]);
                text.push(' ');
                let Some(end) = end else { break };
                out.extend(expand(&tidy(text)).into_iter().map(|p| (*first, p)));
                in_use = None;
                rest = &rest[end + 1..];
                continue;
            }
            let at = use_at(rest);
            let (before, after) = match at {
                Some(i) => (&rest[..i], Some(&rest[i + 4..])),
                None => (rest, None),
            };
            for root in ["crate::", "super::", "self::", "kauri::"] {
                for (i, _) in before.match_indices(root) {
                    if continues(&before[..i]) {
                        continue;
                    }
                    let tail = &before[i..];
                    let len = tail
                        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .unwrap_or(tail.len());
                    out.push((*n, tail[..len].trim_end_matches(':').to_string()));
                }
            }
            match after {
                Some(a) => {
                    in_use = Some((*n, String::new()));
                    rest = a;
                }
                None => break,
            }
        }
        for (_, path) in &mut out[start..] {
            let supers = path.matches("super::").count().min(inline.len());
            if supers > 0 {
                let rest = path["super::".len() * supers..].to_string();
                *path = match rest.starts_with("super::") {
                    true => rest,
                    false => format!("self::{rest}"),
                };
            }
        }
    }
    out
}

/// The module `path` (as written in module `me`, a `mod.rs` or not) lies in, among `modules`:
/// its longest prefix that is one. `None` for a path outside the crate (`std::…`, a macro of
/// the crate root).
fn resolve(path: &str, me: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
    match segs.first() {
        Some(&"crate") | Some(&"kauri") => {
            segs.remove(0);
            base.clear();
        }
        Some(&"self") => {
            segs.remove(0);
        }
        Some(&"super") => {
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
        }
        _ => return None,
    }
    base.extend(segs);
    (1..=base.len())
        .rev()
        .map(|k| base[..k].join("::"))
        .find(|m| modules.contains(m))
}

/// Every module of `src/` with its file, and the pure ones.
fn crate_modules() -> (Vec<(String, PathBuf)>, BTreeSet<String>, BTreeSet<String>) {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let all: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|p| (module_of(p.strip_prefix(&src).unwrap()), p))
        .collect();
    let modules = all.iter().map(|(m, _)| m.clone()).collect();
    let mut pure = BTreeSet::new();
    for entry in PURE {
        let p = src.join(entry);
        assert!(p.exists(), "{entry} is listed as pure but is not in src/");
        for (m, f) in &all {
            if f == &p || (p.is_dir() && f.starts_with(&p)) {
                pure.insert(m.clone());
            }
        }
    }
    (all, modules, pure)
}

/// What is wrong with module `me`'s use of module `used`, if anything.
fn wrong_use(me: &str, used: &str, pure: &BTreeSet<String>) -> Option<&'static str> {
    let (from, to) = (layer_of(me), layer_of(used));
    if used.is_empty() || from == to && !pure.contains(me) {
        return None;
    }
    if pure.contains(me) {
        return (!pure.contains(used)).then_some("a pure module uses one that is not pure");
    }
    if pure.contains(used) {
        return None;
    }
    let rank = |l: &str| ORDER.iter().position(|o| *o == l);
    match (rank(from), rank(to)) {
        (Some(a), Some(b)) if b > a => Some("a folder uses one above it"),
        (None, _) | (_, None) => Some("a folder missing from ORDER"),
        _ => None,
    }
}

#[test]
fn pure_modules_do_no_io() {
    let (all, _, pure) = crate_modules();
    let mut wrong = Vec::new();
    for (module, file) in all.iter().filter(|(m, _)| pure.contains(m)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            let mut line = line.clone();
            for ok in ALLOWED {
                line = line.replace(ok, "");
            }
            for word in FORBIDDEN.iter().filter(|w| line.contains(*w)) {
                wrong.push(format!("{module}:{n}: names {word}: {}", line.trim()));
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
fn every_module_uses_only_the_core_its_folder_and_those_below() {
    let (all, modules, pure) = crate_modules();
    let mut wrong = Vec::new();
    for (module, file) in &all {
        let me = if module == "main" { "main" } else { module };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, path) in paths_of(&code_of(&text)) {
            let Some(used) = resolve(&path, me, &modules) else {
                continue;
            };
            if let Some(why) = wrong_use(me, &used, &pure) {
                let rel = file.strip_prefix(src()).unwrap().display();
                wrong.push(format!("src/{rel}:{n}: {path} ({used}): {why}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the layers, bottom up, are the pure core, then {} (tests/layers.rs):\n{}",
        ORDER.join(", "),
        wrong.join("\n")
    );
}

#[test]
fn the_check_reads_paths_as_the_compiler_does() {
    let code = code_of(
        "use crate::proto::kvs::{Delta, Packed as P};\n\
         use crate::{\n    host::node::Node,\n    tree::{msg::Up, self},\n};\n\
         let x: crate::plan::JobPlan = super::y::z(self::w::V);\n\
         // crate::cli::nothing\n\
         pub(crate) use super::super::a;\n\
         pub mod inner {\n    use super::{b, super::c};\n}\n\
         #[cfg(test)]\nuse crate::cli::Tested;\n",
    );
    let paths: Vec<String> = paths_of(&code).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        paths,
        [
            "crate::proto::kvs::Delta",
            "crate::proto::kvs::Packed",
            "crate::host::node::Node",
            "crate::tree::msg::Up",
            "crate::tree",
            "crate::plan::JobPlan",
            "super::y::z",
            "self::w::V",
            "super::super::a",
            "self::b",
            "super::c",
        ]
    );
    let modules: BTreeSet<String> = ["tree", "tree::msg", "tree::root", "tree::root::end", "plan"]
        .map(String::from)
        .into();
    let at = |p, me| resolve(p, me, &modules);
    assert_eq!(at("crate::tree::msg::Up", "cli"), Some("tree::msg".into()));
    assert_eq!(at("super::msg::Up", "tree::root"), Some("tree::msg".into()));
    assert_eq!(
        at("super::super::msg::Up", "tree::root::end"),
        Some("tree::msg".into())
    );
    assert_eq!(
        at("super::super::super::plan::X", "tree::root::end"),
        Some("plan".into())
    );
    assert_eq!(
        at("self::end::f", "tree::root"),
        Some("tree::root::end".into())
    );
    assert_eq!(at("std::fs::read", "tree"), None);
    assert_eq!(module_of(Path::new("plan/mod.rs")), "plan");
    assert_eq!(module_of(Path::new("tree/msg.rs")), "tree::msg");
    let pure: BTreeSet<String> = ["tree::msg".to_string()].into();
    assert_eq!(wrong_use("host::node", "tree::msg", &pure), None);
    assert!(wrong_use("host::node", "tree::root", &pure).is_some());
    assert!(wrong_use("tree::msg", "tree::root", &pure).is_some());
    assert_eq!(wrong_use("tree::root", "host::node", &pure), None);
    assert_eq!(wrong_use("tree::root::end", "tree::root", &pure), None);
    let code = code_of("use a;\n// tokio\n#[cfg(test)]\nuse tokio;\n");
    assert_eq!(code, [(1, "use a;".to_string())]);
    let names = ["slurm".to_string(), "fork".to_string(), "ssh".to_string()];
    assert_eq!(
        launcher_literals(r#"if kind == "slurm" || k == "fork" {"#, &names),
        ["slurm", "fork"]
    );
    assert!(launcher_literals(r#".args(["agent", "--slurm"]) // "ssh job""#, &names).is_empty());
}
