//! A parent launches more children than it has launch slots: every slot is freed when its
//! agent connects, so the rest still start (before the fix, slots were held until the agents
//! ended and the job hung).

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn more_children_than_launch_slots() {
    let hosts: Vec<String> = (1..=10).map(|i| format!("s{i}")).collect();
    let kauri = env!("CARGO_BIN_EXE_kauri");
    // Every rank waits in a fence for all the others, so no agent ends before all started.
    let script = format!("{kauri} kvs fence && echo ok $KAURI_HOST");
    let child = Command::new(kauri)
        .args([
            "-launcher",
            "fork",
            "-tree-width",
            "flat",
            "-hosts",
            &hosts.join(","),
            "-n",
            "10",
        ])
        .args(["sh", "-c", &script])
        .env("KAURI_LAUNCH_CONCURRENCY", "3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if rx
            .recv_timeout(Duration::from_secs(
                std::env::var("KAURI_TEST_TIMEOUT")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(120),
            ))
            .is_err()
        {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    assert!(!dog.join().unwrap(), "the job hung");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    let mut want: Vec<String> = hosts.iter().map(|h| format!("ok {h}")).collect();
    want.sort();
    assert_eq!(lines, want);
}
