//! The manual pages of `kauri --help-man PAGE`: groff reads each without a warning, and
//! `man -l` renders it in 80 columns.

use std::process::Command;

const KAURI: &str = env!("CARGO_BIN_EXE_kauri");

/// Every page of the registry (a page added there is tested here too).
fn names() -> Vec<&'static str> {
    let names: Vec<&str> = kauri::cli::doc::pages().iter().map(|p| p.name).collect();
    for want in ["kauri", "kauri-agent", "kauri-nameserver", "kauri-kvs"] {
        assert!(names.contains(&want), "{want} is not in the registry");
    }
    names
}

fn page(name: &str) -> std::path::PathBuf {
    let o = Command::new(KAURI)
        .args(["--help-man", name])
        .output()
        .unwrap();
    assert!(o.status.success(), "{name}");
    let dir = std::env::temp_dir().join(format!("kauri-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join(format!("{name}.1"));
    std::fs::write(&f, &o.stdout).unwrap();
    f
}

fn has(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        // CI installs man-db and groff (.ci/setup): there, a missing one is a failure.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is not installed (CI=true)"
        );
        eprintln!("{tool} is not installed: not tested");
    }
    ok
}

#[test]
fn groff_reads_every_page_without_a_warning() {
    if !has("groff") {
        return;
    }
    for name in names() {
        let f = page(name);
        let o = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(&f)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.is_empty(), "{name}: {err}");
    }
}

#[test]
fn man_renders_every_page() {
    if !has("man") {
        return;
    }
    for name in names() {
        let f = page(name);
        let o = Command::new("man")
            .arg("-l")
            .arg(&f)
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"] {
            assert!(text.contains(section), "{name}: no {section}");
        }
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains(&format!("NAME {name} - ")),
            "{name}: NAME line"
        );
        for l in text.lines() {
            assert!(l.chars().count() <= 80, "{name}: too wide: {l}");
        }
    }
    let kauri = page("kauri");
    let o = Command::new("man")
        .arg("-l")
        .arg(&kauri)
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    // Every option and variable of -h and --help-env is there.
    for word in [
        "-genvlist",
        "-pmi_args",
        "-machinefile",
        "KAURI_HEARTBEAT_TIMEOUT",
        "MPIR_CVAR_CH3_INTERFACE_HOSTNAME",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
        "MASTER_PORT",
        "128+N",
    ] {
        assert!(text.contains(word), "kauri(1) lacks {word}");
    }
}

#[test]
fn an_unknown_page_is_an_error() {
    let o = Command::new(KAURI)
        .args(["--help-man", "nope"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(255),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such page"));
}
