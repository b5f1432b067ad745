//! The completion scripts of `kauri --completions bash|zsh|fish`, run by the real shells.
//!
//! bash: the script is sourced, `COMP_LINE`/`COMP_POINT`/`COMP_WORDS`/`COMP_CWORD` set as
//! readline would, `_kauri` called and `COMPREPLY` printed. fish: `complete -C`. zsh: `zsh -n`
//! on the script, then `_kauri` run with the completion system's builtins (`compadd`,
//! `_describe`, `_files`, ...) replaced by functions that print what they are given; the
//! real completion widget needs a terminal. A shell that is not installed is reported and
//! its test returns early (`.ci/setup` installs all three; with `CI=true` it fails instead).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const KAURI: &str = env!("CARGO_BIN_EXE_kauri");

fn has(shell: &str) -> bool {
    let ok = Command::new(shell)
        .args(["-c", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        // CI installs every shell (.ci/setup): there, a missing one is a failure, not a pass.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{shell} is not installed (CI=true)"
        );
        eprintln!("{shell} is not installed: not tested");
    }
    ok
}

/// A fresh directory (one per test) holding the script for `shell`, and a file named `-gen.txt` (which only
/// a file completion offers for `-ge`).
fn setup(shell: &str, test: &str) -> (PathBuf, PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("kauri-compl-{test}-{shell}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("-gen.txt"), "").unwrap();
    let o = Command::new(KAURI)
        .args(["--completions", shell])
        .output()
        .unwrap();
    assert!(o.status.success());
    let file = dir.join(format!("kauri.{shell}"));
    std::fs::write(&file, &o.stdout).unwrap();
    (dir, file)
}

fn set(words: &[&str]) -> BTreeSet<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn lines(out: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn bash(dir: &Path, script: &Path, line: &str) -> BTreeSet<String> {
    let o = Command::new("bash")
        .current_dir(dir)
        .args([
            "--norc",
            "-c",
            r#"source "$1"
COMP_LINE="$2"; COMP_POINT=${#2}; COMP_WORDS=($2)
[[ "$2" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_kauri
printf '%s\n' "${COMPREPLY[@]}""#,
            "bash",
        ])
        .arg(script)
        .arg(line)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    lines(&o.stdout)
}

#[test]
fn bash_completes_options_values_and_leaves_the_programs_arguments_alone() {
    if !has("bash") {
        return;
    }
    let (dir, s) = setup("bash", "logic");
    assert_eq!(
        bash(&dir, &s, "kauri -gen"),
        set(&["-genv", "-genvall", "-genvlist", "-genvnone"])
    );
    assert_eq!(
        bash(&dir, &s, "kauri -launcher "),
        set(&["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"])
    );
    // After the program: its arguments, completed as files, never kauri's options.
    assert_eq!(bash(&dir, &s, "kauri -n 2 ./a.out -ge"), set(&["-gen.txt"]));
    // A new segment after ':' takes options again.
    assert_eq!(
        bash(&dir, &s, "kauri -n 1 ./a : -genvn"),
        set(&["-genvnone"])
    );
    assert_eq!(
        bash(&dir, &s, "kauri --pmi=pmi"),
        set(&["pmi1", "pmi2", "pmix"])
    );
    assert_eq!(
        bash(&dir, &s, "kauri -bind-to l"),
        set(&["l1cache", "l2cache", "l3cache"])
    );
    assert_eq!(bash(&dir, &s, "kauri -tree-width f"), set(&["flat"]));
    assert_eq!(
        bash(&dir, &s, "kauri --completions "),
        set(&["bash", "zsh", "fish"])
    );
    // -genv takes two words: none completes, and the third is an option again.
    assert_eq!(bash(&dir, &s, "kauri -genv A "), set(&[]));
    assert_eq!(
        bash(&dir, &s, "kauri -genv A 1 -genvn"),
        set(&["-genvnone"])
    );
    assert_eq!(
        bash(&dir, &s, "kauri kvs "),
        set(&["put", "get", "fence", "barrier"])
    );
    assert_eq!(bash(&dir, &s, "kauri --sta"), set(&["--status"]));
    // The pages of the registry, and a subcommand's own options.
    assert_eq!(
        bash(&dir, &s, "kauri --help-man kauri-n"),
        set(&["kauri-nameserver"])
    );
    assert_eq!(bash(&dir, &s, "kauri nameserver -p"), set(&["-port"]));
    assert_eq!(bash(&dir, &s, "kauri -hostfile -ge"), set(&["-gen.txt"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fish_completes_options_values_and_leaves_the_programs_arguments_alone() {
    if !has("fish") {
        return;
    }
    let (dir, s) = setup("fish", "logic");
    let fish = |line: &str| {
        let o = Command::new("fish")
            .current_dir(&dir)
            .args(["--no-config", "-c", "source $argv[1]; complete -C $argv[2]"])
            .arg(&s)
            .arg(line)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{line}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        lines(&o.stdout)
    };
    assert_eq!(
        fish("kauri -gen"),
        set(&["-genv", "-genvall", "-genvlist", "-genvnone"])
    );
    assert_eq!(
        fish("kauri -launcher "),
        set(&["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"])
    );
    assert_eq!(fish("kauri -n 2 ./a.out -ge"), set(&["-gen.txt"]));
    assert_eq!(
        fish("kauri --pmi=pmi"),
        set(&["--pmi=pmi1", "--pmi=pmi2", "--pmi=pmix"])
    );
    assert_eq!(fish("kauri -map-by no"), set(&["node"]));
    assert_eq!(fish("kauri kvs f"), set(&["fence"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zsh_script_parses_and_its_logic_completes() {
    if !has("zsh") {
        return;
    }
    let (dir, s) = setup("zsh", "logic");
    let o = Command::new("zsh").arg("-n").arg(&s).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The completion system's builtins, as functions printing the candidates that match.
    let stubs = r#"
compadd() { [[ $1 == -- ]] && shift; local x; for x in "$@"; do [[ $x == ${PREFIX}* ]] && print -r -- $x; done; return 0; }
_describe() { local -a a; a=("${(@P)4}"); local x; for x in $a; do x=${x%%:*}; [[ $x == ${PREFIX}* ]] && print -r -- $x; done; return 0; }
_files() { print -r -- @files; }
_command_names() { print -r -- @commands; }
_message() { print -r -- @message; }
compset() { PREFIX=${PREFIX#*=}; }
"#;
    let zsh = |line: &str| {
        let o = Command::new("zsh")
            .current_dir(&dir)
            .args([
                "-f",
                "-c",
                &format!(
                    "{stubs}\nwords=(${{=2}}); [[ $2 == *' ' ]] && words+=(''); CURRENT=${{#words}}; \
                     PREFIX=$words[CURRENT]; source $1"
                ),
                "zsh",
            ])
            .arg(&s)
            .arg(line)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{line}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        lines(&o.stdout)
    };
    assert_eq!(
        zsh("kauri -gen"),
        set(&["-genv", "-genvall", "-genvlist", "-genvnone"])
    );
    assert_eq!(
        zsh("kauri -launcher "),
        set(&["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"])
    );
    assert_eq!(zsh("kauri -n 2 ./a.out -ge"), set(&["@files"]));
    assert_eq!(zsh("kauri -f "), set(&["@files"]));
    assert_eq!(zsh("kauri --pmi=pmi"), set(&["pmi1", "pmi2", "pmix"]));
    assert_eq!(zsh("kauri -n 1 ./a : -genvn"), set(&["-genvnone"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Types a line and a TAB into an interactive zsh (compinit, the script in `$fpath`) on a
/// pseudo-terminal; prints the screen after it, escape sequences turned into spaces.
const ZPTY_DRIVER: &str = r#"
setopt extendedglob
zmodload zsh/zpty || exit 3
zpty z "zsh -f -i"
zpty -w z "PS1='> '; fpath=($1 \$fpath); autoload -U compinit; compinit -u -D; setopt nobeep; unsetopt listambiguous; kauri() { :; }; print READY"
local all= out
repeat 200 { zpty -r -t z out && all+=$out; [[ $all == *READY* ]] && break; sleep 0.1 }
[[ $all == *READY* ]] || exit 4
zpty -w -n z "$2"$'\t'
sleep 1.5
all=
repeat 60 { zpty -r -t z out && all+=$out || sleep 0.05 }
zpty -d z
all=${all//$'\e'\[[0-9;?]#[a-zA-Z]/ }
print -r -- ${all//$'\r'/ }
"#;

#[test]
fn zsh_completes_on_a_terminal() {
    if !has("zsh") {
        return;
    }
    let (dir, s) = setup("zsh", "pty");
    let fp = dir.join("fpath");
    std::fs::create_dir_all(&fp).unwrap();
    std::fs::copy(&s, fp.join("_kauri")).unwrap();
    let driver = dir.join("driver.zsh");
    std::fs::write(&driver, ZPTY_DRIVER).unwrap();
    let screen = |line: &str| -> Vec<String> {
        let o = Command::new("zsh")
            .current_dir(&dir)
            .arg("-f")
            .arg(&driver)
            .arg(&fp)
            .arg(line)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{line}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let starting = |words: &[String], p: &str| -> BTreeSet<String> {
        words.iter().filter(|w| w.starts_with(p)).cloned().collect()
    };
    let w = screen("kauri -gen");
    assert_eq!(
        starting(&w, "-genv"),
        set(&["-genv", "-genvall", "-genvlist", "-genvnone"]),
        "{w:?}"
    );
    let w = screen("kauri -launcher ");
    for l in ["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"] {
        assert!(w.iter().any(|x| x == l), "{l}: {w:?}");
    }
    let w = screen("kauri -n 2 ./a.out -ge");
    assert!(w.iter().any(|x| x == "-gen.txt"), "{w:?}");
    assert!(starting(&w, "-genv").is_empty(), "{w:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
