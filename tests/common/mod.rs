//! What the binary's integration tests share: running kauri under a watchdog.
#![allow(dead_code)] // each test file uses part of this

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The kauri binary under test.
pub const KAURI: &str = env!("CARGO_BIN_EXE_kauri");

/// Runs kauri with `args`, feeding `stdin` and reading its output while it runs; a job still
/// running after `KAURI_TEST_TIMEOUT` seconds (default 180: machines are small) is killed and
/// the test fails.
pub fn kauri(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(KAURI);
    cmd.args(args).envs(env.iter().copied());
    run_with(&mut cmd, stdin)
}

/// Runs `cmd` (a kauri, or a shell that runs one) under the same watchdog as [`kauri`].
pub fn run_under_watchdog(cmd: &mut Command) -> Output {
    run_with(cmd, None)
}

fn run_with(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let args: Vec<_> = cmd.get_args().map(|a| a.to_os_string()).collect();
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start kauri");
    if let Some(data) = stdin {
        let mut i = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = i.write_all(&data);
        });
    }
    let pid = child.id() as i32;
    let limit = std::env::var("KAURI_TEST_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(180);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(limit)).is_err() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let out = child.wait_with_output().unwrap();
    let _ = done_tx.send(());
    assert!(
        !watchdog.join().unwrap(),
        "kauri {args:?} did not end in {limit} s; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stdout's lines, sorted.
pub fn lines(o: &Output) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes an executable script `name` into a fresh directory for test `test`; returns (the
/// directory, the script's path).
pub fn script(test: &str, name: &str, body: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("kauri-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (dir, path.display().to_string())
}

/// The processes (but this one) whose command line holds `marker`, as `pid: command line`.
pub fn marked(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(format!("{pid}: {cmd}"));
            }
        }
    }
    found
}

/// Fails if a process holding `marker` is still there after `patience` (killed agents and
/// ranks go through their parents' death signals, which takes a moment on a busy machine).
pub fn assert_none_left(marker: &str, patience: Duration) {
    let start = std::time::Instant::now();
    loop {
        let left = marked(marker);
        if left.is_empty() {
            return;
        }
        assert!(start.elapsed() < patience, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `kauri` arguments for `n` ranks of `sh -c prog` on `hosts` through `ssh`, a stand-in for
/// ssh (such as [`SSH_STAND_IN`]) that runs the agent here.
pub fn on_ssh_hosts<'a>(ssh: &'a str, hosts: &'a str, n: &'a str, prog: &'a str) -> Vec<&'a str> {
    on_hosts(&["-launcher", "ssh", "-launcher-exec", ssh], hosts, n, prog)
}

/// The arguments of a job of `n` ranks of `sh -c PROG` over the simulated hosts `hosts`
/// (`-launcher fork`, one agent process per host name).
pub fn on_fork_hosts<'a>(hosts: &'a str, n: &'a str, prog: &'a str) -> Vec<&'a str> {
    on_hosts(&["-launcher", "fork"], hosts, n, prog)
}

/// `launcher` (its options), then `-hosts hosts -n n sh -c prog`.
fn on_hosts<'a>(launcher: &[&'a str], hosts: &'a str, n: &'a str, prog: &'a str) -> Vec<&'a str> {
    let mut a = launcher.to_vec();
    a.extend(["-hosts", hosts, "-n", n, "sh", "-c", prog]);
    a
}

/// A minimal PMI-1 rank for `python3 -c`: init, put one 64-byte value, fence, finalize.
pub const PMI1_RANK: &str = r#"
import os
fd = int(os.environ["PMI_FD"])
rank = os.environ["PMI_RANK"]
def ask(line):
    os.write(fd, (line + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            raise SystemExit("PMI socket closed")
        buf += chunk
    return buf.decode()
ask("cmd=init pmi_version=1 pmi_subversion=1")
kvs = ask("cmd=get_my_kvsname").split("kvsname=")[1].split()[0]
ask("cmd=put kvsname=%s key=k%s value=%s" % (kvs, rank, "x" * 64))
ask("cmd=barrier_in")
ask("cmd=finalize")
"#;

/// An ssh for `-launcher-exec` that runs the command here (its options skipped, its host
/// ignored): several hosts over the ssh launcher, on one machine.
pub const SSH_STAND_IN: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec sh -c "$*"
"#;
