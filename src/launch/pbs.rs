//! The PBS launcher: `pbs_tmrsh HOST KAURI agent …` (PBS Professional's rsh stand-in over the
//! TM interface) starts each agent as a task of the job. TM starts the program itself, with
//! no shell, so the words go as they are; the job key travels in the environment. Where
//! `pbs_tmrsh` is not installed the front end uses ssh instead. Untested against a real PBS
//! (there is no package to test with): tested with a stand-in `pbs_tmrsh`.

use super::{per_host, Launch, Launcher, Target};
use crate::plan::LaunchPlan;

/// Starts agents with `pbs_tmrsh`.
pub struct Pbs {
    /// The launch plan: `exec` is pbs_tmrsh.
    pub plan: LaunchPlan,
}

impl Launcher for Pbs {
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch> {
        per_host(&self.plan, &[], false, targets, parent, key)
    }
}
