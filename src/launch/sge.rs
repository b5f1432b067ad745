//! The Grid Engine launcher: inside a parallel environment, `qrsh -inherit -nostdin -V HOST
//! KAURI agent …` starts each agent as a task of the job (the PE needs `control_slaves
//! TRUE`), as Hydra's `sge` bootstrap does (`qrsh -inherit -V`); `-V` carries the job key in
//! the environment, `-nostdin` keeps kauri's stdin to itself. The task runs its command
//! through the user's shell, so the words are quoted.

use super::{per_host, Launch, Launcher, Target};
use crate::plan::LaunchPlan;

/// Starts agents with `qrsh -inherit`.
pub struct Sge {
    /// The launch plan: `exec` is qrsh.
    pub plan: LaunchPlan,
}

impl Sge {
    /// The qrsh to use, as Hydra finds it: `$SGE_ROOT/bin/$ARC/qrsh` when that exists, else
    /// `qrsh` from `PATH`.
    pub fn default_exec() -> String {
        match (std::env::var("SGE_ROOT"), std::env::var("ARC")) {
            (Ok(root), Ok(arc))
                if std::path::Path::new(&format!("{root}/bin/{arc}/qrsh")).is_file() =>
            {
                format!("{root}/bin/{arc}/qrsh")
            }
            _ => "qrsh".into(),
        }
    }
}

impl Launcher for Sge {
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch> {
        per_host(
            &self.plan,
            &["-inherit", "-nostdin", "-V"],
            true,
            targets,
            parent,
            key,
        )
    }
}
