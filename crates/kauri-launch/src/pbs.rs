//! The PBS launcher: `pbs_tmrsh HOST KAURI agent …` (PBS Professional's rsh stand-in over the
//! TM interface) starts each agent as a task of the job. TM starts the program itself, with
//! no shell, so the words go as they are; the job key travels in the environment. Where
//! `pbs_tmrsh` is not installed the front end uses ssh instead. Untested against a real PBS
//! (there is no package to test with): tested with a stand-in `pbs_tmrsh`.

use super::{in_path, per_host, Launch, Launcher, Program, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents with `pbs_tmrsh` (the plan's `exec`).
pub struct Pbs;

impl Launcher for Pbs {
    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch> {
        per_host(plan, &[], false, targets, parent, key)
    }

    /// `pbs_tmrsh` as found in `PATH`; none where it is not installed (Torque, say).
    fn find_program(&self, program: Program, kauri: &str) -> Option<String> {
        match program {
            Program::Named(name) => in_path(name),
            Program::Kauri => Some(kauri.to_string()),
        }
    }
}
