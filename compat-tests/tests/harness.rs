//! Self-tests of the harness: the leftover check must really catch a process left behind.

use compat_tests::{find_marked, Ctx, MARKER_VAR};
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
