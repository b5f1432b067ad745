//! The layout's checked rules (`docs/design.md`, "Layout") that the compiler does not check:
//! the core does no I/O, the folders of `kauri` form layers, and no launcher is named outside
//! `launch`.
//!
//! 1. **The core does no I/O.** The core crate (`crates/kauri-core`: the PMI engine, the
//!    key-value store, the service vocabulary, Open MPI's job ids, the record of a rank's end,
//!    the launcher kinds, the plan's types and each rank's variables, the tree's messages,
//!    shape, fence gathers, profile and policy) is state and decisions: data in, data out.
//!    Cargo keeps tokio and libc out of it; this test keeps out files, sockets, processes,
//!    threads, the environment and the clock.
//! 2. **The folders form layers.** A module of `kauri` uses only its own folder, the folders
//!    below it in [`ORDER`], and the core: never a folder above.
//!
//! Every path is read as the compiler reads it: `use` trees however `rustfmt` wraps them,
//! `crate::`, `super::`, `self::` and `kauri_core::` paths in the code, each resolved to the
//! module it lies in (its longest prefix that is a module of `kauri` or of the core; a path
//! into one of the crates below the folders, [`BELOW`], is cargo's to check). Doc comments,
//! comment lines and each file's tests (from its last `#[cfg(test)]` at column 0) are not
//! read: tests may use anything.
//!
//! A launcher's facts are methods of `launch::kind::LauncherKind`; a launcher's name as a
//! string literal anywhere else (`kind == "slurm"`) is a decision made behind the
//! launchers' back, and fails [`no_launcher_is_named_outside_launch`].

use std::path::{Path, PathBuf};

/// The folders of `kauri` (and the crate root's own modules) from the bottom up: each may use
/// those before it, never one after it. Below them all are the core and the crates of
/// [`BELOW`], which cargo keeps apart.
const ORDER: &[&str] = &["tree", "cli", "main"];

/// The crates below every folder, by the names the `kauri` crate root re-exports them as:
/// `kauri-os` (`os`, and its `console`), `kauri-proto` (`proto`), `kauri-launch` (`launch`),
/// `kauri-plan` (`plan`) and `kauri-host` (`host`). Their arrows are cargo's to keep: a crate
/// cannot name one above it, and a folder may use them all.
const BELOW: &[&str] = &["os", "console", "proto", "launch", "plan", "host"];

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

/// The core crate's sources: every module in it is pure.
fn core() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/kauri-core/src")
}

/// The module path of a source file: `src/tree/hub.rs` is `tree::hub`, `src/tree/mod.rs` is
/// `tree`, `src/lib.rs` is the crate root (empty).
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

/// The modules a path may lie in: the `kauri` crate's (by their files under `src/`) and the
/// core's (under `crates/kauri-core/src/`, some re-exported by the `kauri` folder of the same
/// name: `crate::tree::msg` is the core's `tree::msg`). No module is both, so a path's
/// longest prefix that is a module says whose it is.
struct Modules {
    /// The `kauri` crate's modules, each with its file.
    kauri: Vec<(String, PathBuf)>,
    /// The core's modules, each with its file.
    core: Vec<(String, PathBuf)>,
}

impl Modules {
    fn read() -> Modules {
        let list = |root: PathBuf| {
            let mut files = Vec::new();
            rust_files(&root, &mut files);
            let mut out: Vec<(String, PathBuf)> = files
                .into_iter()
                .map(|p| (module_of(p.strip_prefix(&root).unwrap()), p))
                .collect();
            out.sort();
            out
        };
        Modules {
            kauri: list(src()),
            core: list(core()),
        }
    }

    fn in_kauri(&self, m: &str) -> bool {
        self.kauri.iter().any(|(k, _)| k == m)
    }

    fn in_core(&self, m: &str) -> bool {
        self.core.iter().any(|(k, _)| k == m)
    }

    /// The module `path` (as written in the `kauri` module `me`, a `mod.rs` or not) lies in:
    /// its longest prefix that is a module, and whether that module is the core's. `None` for
    /// a path outside the crate (`std::…`, a macro of the crate root) or into a crate of
    /// [`BELOW`] (`crate::plan::build::plan`).
    fn resolve(&self, path: &str, me: &str) -> Option<(String, bool)> {
        let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
        match segs.first() {
            Some(&"crate") | Some(&"kauri") => {
                segs.remove(0);
                base.clear();
            }
            Some(&"kauri_core") => {
                segs.remove(0);
                base.clear();
                base.extend(segs);
                return (1..=base.len())
                    .rev()
                    .map(|k| base[..k].join("::"))
                    .find(|m| self.in_core(m))
                    .map(|m| (m, true));
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
        if base.first().is_some_and(|b| BELOW.contains(b)) {
            return None;
        }
        (1..=base.len())
            .rev()
            .map(|k| base[..k].join("::"))
            .find_map(|m| match (self.in_kauri(&m), self.in_core(&m)) {
                (true, _) => Some((m, false)),
                (false, true) => Some((m, true)),
                (false, false) => None,
            })
    }
}

/// What is wrong with the `kauri` module `me`'s use of module `used`, if anything.
fn wrong_use(me: &str, used: &str, used_is_core: bool) -> Option<&'static str> {
    let (from, to) = (layer_of(me), layer_of(used));
    if used.is_empty() || from == to || used_is_core {
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
    let modules = Modules::read();
    assert!(
        modules.core.len() > 20,
        "the core's modules: {:?}",
        modules.core
    );
    let mut wrong = Vec::new();
    for (module, file) in &modules.core {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            let mut line = line.clone();
            for ok in ALLOWED {
                line = line.replace(ok, "");
            }
            for word in FORBIDDEN.iter().filter(|w| line.contains(*w)) {
                wrong.push(format!(
                    "kauri_core::{module}:{n}: names {word}: {}",
                    line.trim()
                ));
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
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    rust_files(&crates, &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        // Each crate's `src/`, so that `launch/` below is the core's `launch/kind.rs`.
        let root = match file.strip_prefix(&crates) {
            Ok(rel) => crates.join(rel.iter().take(2).collect::<PathBuf>()),
            Err(_) => src(),
        };
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        if rel.starts_with("launch/") || file.starts_with(crates.join("kauri-launch")) {
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
         outside the launchers' crate (tests/layers.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_module_uses_only_the_core_its_folder_and_those_below() {
    let modules = Modules::read();
    // A folder's module that is also a core module would hide which of the two a path names.
    let both: Vec<&str> = (modules.kauri.iter())
        .map(|(m, _)| m.as_str())
        .filter(|m| !m.is_empty() && modules.in_core(m))
        .collect();
    assert!(
        both.is_empty(),
        "modules of both kauri and the core: {both:?}"
    );
    // Nor is a crate below a folder of its own.
    let folders: Vec<&str> = (modules.kauri.iter())
        .map(|(m, _)| layer_of(m))
        .filter(|l| BELOW.contains(l))
        .collect();
    assert!(
        folders.is_empty(),
        "folders named as a crate below: {folders:?}"
    );
    let mut wrong = Vec::new();
    for (module, file) in &modules.kauri {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, path) in paths_of(&code_of(&text)) {
            let Some((used, core)) = modules.resolve(&path, module) else {
                continue;
            };
            if let Some(why) = wrong_use(module, &used, core) {
                let rel = file.strip_prefix(src()).unwrap().display();
                wrong.push(format!("src/{rel}:{n}: {path} ({used}): {why}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the layers, bottom up, are the core crate, then {} (tests/layers.rs):\n{}",
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
    let files = |ms: &[&str]| ms.iter().map(|m| (m.to_string(), PathBuf::new())).collect();
    let modules = Modules {
        kauri: files(&["tree", "tree::root", "tree::root::end", "cli"]),
        core: files(&["plan", "plan::job", "tree::msg"]),
    };
    let at = |p, me| modules.resolve(p, me);
    let core = |m: &str| Some((m.to_string(), true));
    let own = |m: &str| Some((m.to_string(), false));
    assert_eq!(at("crate::tree::msg::Up", "cli"), core("tree::msg"));
    assert_eq!(at("super::msg::Up", "tree::root"), core("tree::msg"));
    assert_eq!(
        at("super::super::msg::Up", "tree::root::end"),
        core("tree::msg")
    );
    assert_eq!(
        at("kauri_core::plan::job::Wiring", "cli"),
        core("plan::job")
    );
    assert_eq!(at("crate::tree::Link", "cli"), own("tree"));
    assert_eq!(at("crate::tree::root::start", "cli"), own("tree::root"));
    assert_eq!(
        at("super::super::super::cli::X", "tree::root::end"),
        own("cli")
    );
    // the crates below: cargo's to check
    assert_eq!(at("crate::plan::build::plan", "tree::root"), None);
    assert_eq!(at("crate::plan::job::Wiring", "cli"), None);
    assert_eq!(at("crate::host::node::Node", "tree::root"), None);
    assert_eq!(
        at("super::super::super::host::keeper", "tree::root::end"),
        None
    );
    assert_eq!(at("kauri::proto::pmix::Server", "main"), None);
    assert_eq!(
        at("super::super::super::os::ports", "tree::root::end"),
        None
    );
    assert_eq!(at("self::end::f", "tree::root"), own("tree::root::end"));
    assert_eq!(at("std::fs::read", "tree"), None);
    assert_eq!(module_of(Path::new("plan/mod.rs")), "plan");
    assert_eq!(module_of(Path::new("tree/msg.rs")), "tree::msg");
    assert_eq!(wrong_use("tree::hub", "plan::job", true), None);
    assert!(wrong_use("tree::root", "cli::run", false).is_some());
    assert!(wrong_use("os::ports", "plan", false).is_some());
    assert!(
        wrong_use("tree::hub", "plan::build", false).is_some(),
        "plan is a crate below, not a folder"
    );
    assert!(
        wrong_use("tree::hub", "host::node", false).is_some(),
        "host is a crate below, not a folder"
    );
    assert_eq!(wrong_use("cli::run", "tree::root", false), None);
    assert_eq!(wrong_use("tree::root::end", "tree::root", false), None);
    let code = code_of("use a;\n// tokio\n#[cfg(test)]\nuse tokio;\n");
    assert_eq!(code, [(1, "use a;".to_string())]);
    let names = ["slurm".to_string(), "fork".to_string(), "ssh".to_string()];
    assert_eq!(
        launcher_literals(r#"if kind == "slurm" || k == "fork" {"#, &names),
        ["slurm", "fork"]
    );
    assert!(launcher_literals(r#".args(["agent", "--slurm"]) // "ssh job""#, &names).is_empty());
}
