//! The LSF launcher: `blaunch -n HOST KAURI agent …` starts each agent as a task of the job,
//! as Hydra's `lsf` bootstrap does; blaunch carries the environment (and with it the job key)
//! and runs the command through a shell, so the words are quoted. Untested against a real
//! LSF (there is no package to test with): tested with a stand-in `blaunch`.

use super::{per_host, Launch, Launcher, Program, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents with `blaunch` (the plan's `exec`).
pub struct Lsf;

impl Launcher for Lsf {
    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch> {
        per_host(plan, &["-n"], true, targets, parent, key)
    }

    /// The blaunch to use, as Hydra finds it: `$LSF_BINDIR/blaunch`, else `blaunch` from
    /// `PATH`.
    fn find_program(&self, program: Program, kauri: &str) -> Option<String> {
        match (std::env::var("LSF_BINDIR"), program) {
            (Ok(dir), Program::Named(name)) if !dir.is_empty() => Some(format!("{dir}/{name}")),
            _ => Some(super::plain(program, kauri)),
        }
    }
}
