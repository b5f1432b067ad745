//! Pieces shared by the launcher benchmarks: building the release binaries, timing one job
#![allow(dead_code)] // each bench uses part of this
//! with a kill timeout, medians.

pub mod raw;
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
    /// pmi-wire's minimal PMI-1 server and launcher: the floor.
    pub floor: PathBuf,
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
        floor: dir.join("pmi-floor"),
        target,
    }
}

/// Runs `argv` in its own process group; its wall time and stdout when it succeeded and its
/// output contains `expect`, else why not. A run past `timeout` is killed, group and all.
///
/// On this thread alone: one `poll` on the job's stdout and a pidfd of it, the time taken the
/// moment the pidfd says it ended (a zombie). No thread is started beside the job: a reader
/// and a watchdog thread per run (as before) woke on the job's two cores just as the
/// launcher started, and a launcher whose start leans on the idle core paid for them.
pub fn run_timed(
    argv: &[String],
    env: &[(&str, &str)],
    expect: &str,
    timeout: Duration,
) -> Result<(f64, String), String> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
    let group = child.id() as i32;
    // SAFETY: pidfd_open takes a pid and flags; the child is ours and not reaped yet.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, group, 0) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: kill has no memory-safety preconditions; the group is the one we made.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = child.wait();
        return Err(format!("pidfd_open: {e}"));
    }
    // SAFETY: a descriptor just returned to us, owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let mut stdout = child.stdout.take();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = start + timeout;
    let secs = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // SAFETY: as above; its leader is not reaped yet.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            // A rank in a session of its own may still hold the pipe: not read to its end.
            return Err("timeout".into());
        }
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stdout.as_ref().map_or(-1, |o| o.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the two entries of `fds`.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) } < 0 {
            continue; // EINTR
        }
        if fds[0].revents != 0 {
            break start.elapsed().as_secs_f64();
        }
        if fds[1].revents != 0 {
            match stdout.as_mut().map(|o| o.read(&mut buf)) {
                Some(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
                _ => stdout = None,
            }
        }
    };
    let st = child.wait().map_err(|e| e.to_string())?;
    // What is left in the pipe: the job has ended, so nothing more is written unless a
    // process it left holds the pipe; read what is there without waiting for that.
    if let Some(o) = stdout.as_mut() {
        // SAFETY: fcntl on a descriptor we own, setting a flag.
        unsafe {
            let fd = o.as_raw_fd();
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        while let Ok(n) = o.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
    let out = String::from_utf8_lossy(&out).into_owned();
    if st.success() && out.contains(expect) {
        Ok((secs, out))
    } else {
        Err(format!("failed ({st})"))
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

/// Draws a log-log line plot into `png` with gnuplot: one line per named series of (x, y).
/// Returns false when gnuplot is missing or fails (the tables are written anyway).
pub fn plot(
    png: &Path,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> bool {
    use std::fmt::Write as _;
    use std::io::Write as _;
    if let Some(dir) = png.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut script = format!(
        "set terminal png size 800,500\nset output '{}'\nset title \"{title}\" noenhanced\n\
         set logscale xy\nset xlabel '{xlabel}'\nset ylabel '{ylabel}'\nset key left top\nset grid\n",
        png.display()
    );
    let mut data = String::new();
    let mut plots = Vec::new();
    for (name, pts) in series.iter().filter(|s| !s.1.is_empty()) {
        plots.push(format!("'-' using 1:2 with linespoints title '{name}'"));
        for (x, y) in pts {
            let _ = writeln!(data, "{x} {y}");
        }
        data.push_str("e\n");
    }
    if plots.is_empty() {
        return false;
    }
    let _ = writeln!(script, "plot {}", plots.join(", "));
    script.push_str(&data);
    let Ok(mut child) = Command::new("gnuplot").stdin(Stdio::piped()).spawn() else {
        return false;
    };
    let wrote = child
        .stdin
        .take()
        .is_some_and(|mut i| i.write_all(script.as_bytes()).is_ok());
    child.wait().is_ok_and(|s| s.success()) && wrote
}

/// Runs `sh -c cmd` and returns its trimmed stdout.
pub fn sh(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// One line describing the machine, the date and the commit, for generated docs.
pub fn machine() -> String {
    format!(
        "Machine: {} ({} CPUs, {}, {} RAM). Date: {}. kauri at {}",
        sh("uname -srm"),
        sh("nproc"),
        sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'"),
        sh("free -g | awk '/Mem:/ {print $2 \" GiB\"}'"),
        sh("date -u '+%Y-%m-%d %H:%M UTC'"),
        sh("git rev-parse --short HEAD"),
    )
}

/// The 1-minute load average.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Replaces the part of `docs/FILE` between `<!-- generated: TAG begin -->` and its end
/// marker with `body`, or appends it under `heading` the first time.
pub fn write_generated(file: &str, tag: &str, heading: &str, body: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("docs").join(file);
    let begin = format!("<!-- generated: {tag} begin -->");
    let end = format!("<!-- generated: {tag} end -->");
    let block = format!("{begin}\n\n{body}\n{end}");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let new = match (text.find(&begin), text.find(&end)) {
        (Some(a), Some(b)) if b > a => {
            format!("{}{block}{}", &text[..a], &text[b + end.len()..])
        }
        _ => format!("{}\n{heading}\n\n{block}\n", text.trim_end()),
    };
    std::fs::write(&path, new).expect("write the generated docs");
    println!("\nwrote {}", path.display());
}

/// Idle and total jiffies of all CPUs, from /proc/stat.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((idle, v.iter().sum()))
}

/// Waits (at most `limit`) until a one-second window is at least 90 % idle.
pub fn wait_quiet(limit: Duration) -> bool {
    wait_idle(limit, Duration::from_secs(1))
}

/// Waits (at most `limit`) until a `window` of the machine's time is at least 90 % idle
/// over all CPUs (by /proc/stat); true when one was. Machines without /proc/stat count as
/// quiet.
pub fn wait_idle(limit: Duration, window: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let Some((i0, t0)) = cpu_times() else {
            return true;
        };
        std::thread::sleep(window);
        let Some((i1, t1)) = cpu_times() else {
            return true;
        };
        if t1 > t0 && (i1 - i0) as f64 / (t1 - t0) as f64 >= 0.9 {
            return true;
        }
    }
    false
}
