//! The LSF launcher: `blaunch -n HOST KAURI agent …` starts each agent as a task of the job,
//! as Hydra's `lsf` bootstrap does; blaunch carries the environment (and with it the job key)
//! and runs the command through a shell, so the words are quoted. Untested against a real
//! LSF (there is no package to test with): tested with a stand-in `blaunch`.

use super::{per_host, Launch, Launcher, Target};
use crate::plan::LaunchPlan;

/// Starts agents with `blaunch`.
pub struct Lsf {
    /// The launch plan: `exec` is blaunch.
    pub plan: LaunchPlan,
}

impl Lsf {
    /// The blaunch to use, as Hydra finds it: `$LSF_BINDIR/blaunch`, else `blaunch` from
    /// `PATH`.
    pub fn default_exec() -> String {
        match std::env::var("LSF_BINDIR") {
            Ok(dir) if !dir.is_empty() => format!("{dir}/blaunch"),
            _ => "blaunch".into(),
        }
    }
}

impl Launcher for Lsf {
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch> {
        per_host(&self.plan, &["-n"], true, targets, parent, key)
    }
}
