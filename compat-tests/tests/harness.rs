//! Self-tests of the harness: the leftover check must really catch a process left behind, and
//! a kauri job that hangs must fail with kauri's report of where its ranks were.

use compat_tests::{find_marked, Ctx, Launcher, MARKER_VAR};
use std::process::{Command, Stdio};

/// An orphaned process carrying the test's marker must make `assert_no_leftovers` fail, and
/// the check must kill what it found. (No launcher: Hydra 4.0.2 itself waits for a rank's
/// detached children, busy-polling, so it cannot produce an orphan for this check.)
#[test]
fn leftover_check_catches_an_orphan() {
    let ctx = Ctx::new("harness_leftover");
    let status = Command::new("sh")
        .args(["-c", "sleep 300 </dev/null >/dev/null 2>&1 &"])
        .env(MARKER_VAR, &ctx.marker)
        .stdin(Stdio::null())
        .status()
        .expect("run sh");
    assert!(status.success());
    // sh returns at once; its background child may not have exec'd sleep yet.
    let found = (0..100).any(|_| {
        let seen = find_marked(&ctx.marker, &ctx.dir)
            .iter()
            .any(|p| p.cmdline.starts_with("sleep 300"));
        if !seen {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        seen
    });
    assert!(found, "the orphaned sleep was not found");
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.assert_no_leftovers()));
    let msg = caught.expect_err("assert_no_leftovers did not fail");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("sleep 300"), "{msg}");
    // It killed what it reported.
    ctx.assert_no_leftovers();
}

/// A kauri job that outlives its timeout fails the test with kauri's own report of where
/// every rank was (it asks with `SIGUSR1` before it kills), so a hang in CI says what hung.
#[test]
fn a_hung_kauri_job_fails_with_where_its_ranks_were() {
    let ctx = Ctx::new("harness_hang_report");
    let job = ctx
        .job(Launcher::Kauri, &["-n", "2", "sleep", "300"])
        .program(ctx.kauri())
        .timeout(std::time::Duration::from_secs(5));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
    let msg = caught.expect_err("the job did not time out");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("still running after 5s"), "{msg}");
    assert!(msg.contains("kauri's report (SIGUSR1)"), "{msg}");
    assert!(msg.contains("rank 1 on"), "{msg}");
    ctx.assert_no_leftovers();
}
