//! Pieces shared by the launcher benchmarks: building the release binaries, timing one job
#![allow(dead_code)] // each bench uses part of this
//! with a kill timeout, medians.

pub mod sim;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The release binaries the benchmarks run.
pub struct Bins {
    /// kauri.
    pub kauri: PathBuf,
    /// pmi-wire's rank program.
    pub load: PathBuf,
    /// The target directory (for scratch files).
    pub target: PathBuf,
}

/// Builds the release binaries.
pub fn build() -> Bins {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "--workspace", "--bins", "-q"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cargo build --release failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("release");
    Bins {
        kauri: dir.join("kauri"),
        load: dir.join("pmi-load"),
        target,
    }
}

/// Runs `argv` in its own process group; its wall time and stdout when it succeeded and its
/// output contains `expect`, else why not. A run past `timeout` is killed, group and all.
pub fn run_timed(
    argv: &[String],
    env: &[(&str, &str)],
    expect: &str,
    timeout: Duration,
) -> Result<(f64, String), String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        if let Some(o) = stdout.as_mut() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        out
    });
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            let secs = start.elapsed().as_secs_f64();
            let out = reader.join().unwrap_or_default();
            return if st.success() && out.contains(expect) {
                Ok((secs, out))
            } else {
                Err(format!("failed ({st})"))
            };
        }
        if start.elapsed() > timeout {
            // SAFETY: kill has no memory-safety preconditions; the group is the one we made.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            return Err("timeout".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `median (min-max)` with `digits` decimals.
pub fn summary(v: &mut [f64], digits: usize) -> String {
    let lo = v.iter().cloned().fold(f64::MAX, f64::min);
    let hi = v.iter().cloned().fold(f64::MIN, f64::max);
    let m = median(v);
    format!("{m:.digits$} ({lo:.digits$}-{hi:.digits$})")
}

/// A `--name value` option from the command line (after cargo's own arguments).
pub fn opt(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A stand-in for ssh: drops the options, takes the host, runs the command here after
/// `FAKESSH_DELAY` seconds.
pub const STANDIN: &str = r#"#!/bin/sh
# A stand-in for ssh: drop the options, take the host, run the command here after a delay.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-i|-p|-l|-F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
shift
sleep "${FAKESSH_DELAY:-0}"
exec sh -c "$*"
"#;

/// Writes the ssh stand-in into the target directory; returns its path.
pub fn standin(bins: &Bins) -> String {
    let path = bins.target.join("fakessh");
    std::fs::write(&path, STANDIN).expect("write the ssh stand-in");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("make the ssh stand-in executable");
    path.display().to_string()
}
