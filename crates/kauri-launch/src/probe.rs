//! The launch-cost probe: one launch of `kauri --version` to a host the way agents will be
//! launched ([`crate::Launcher::probe`]), timed, for the cost-model tree.

use super::for_kind;
use kauri_core::plan::LaunchPlan;
use std::time::{Duration, Instant};

/// How long one launch to `host` takes: `(serial, total)`, the time to start the launcher
/// here and the time until it ended. `None` when the probe cannot be started or takes over
/// 10 s (it is killed then).
pub fn time_launch(plan: &LaunchPlan, host: &str) -> Option<(Duration, Duration)> {
    let mut cmd = for_kind(plan.kind).probe(plan, host);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let t0 = Instant::now();
    let mut child = cmd.spawn().ok()?;
    let serial = t0.elapsed();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_micros(200))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    Some((serial, t0.elapsed()))
}
