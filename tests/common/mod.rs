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
