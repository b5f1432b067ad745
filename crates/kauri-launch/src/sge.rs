//! The Grid Engine launcher: inside a parallel environment, `qrsh -inherit -nostdin -V HOST
//! KAURI agent …` starts each agent as a task of the job (the PE needs `control_slaves
//! TRUE`), as Hydra's `sge` bootstrap does (`qrsh -inherit -V`); `-V` carries the job key in
//! the environment, `-nostdin` keeps kauri's stdin to itself. The task runs its command
//! through the user's shell, so the words are quoted.

use super::{per_host, Launch, Launcher, Program, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents with `qrsh -inherit` (the plan's `exec` is qrsh).
pub struct Sge;

impl Launcher for Sge {
    /// The qrsh to use, as Hydra finds it: `$SGE_ROOT/bin/$ARC/qrsh` when that exists, else
    /// `qrsh` from `PATH`.
    fn find_program(&self, program: Program, kauri: &str) -> Option<String> {
        if let (Ok(root), Ok(arc), Program::Named(name)) =
            (std::env::var("SGE_ROOT"), std::env::var("ARC"), program)
        {
            let path = format!("{root}/bin/{arc}/{name}");
            if std::path::Path::new(&path).is_file() {
                return Some(path);
            }
        }
        Some(super::plain(program, kauri))
    }

    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch> {
        per_host(
            plan,
            &["-inherit", "-nostdin", "-V"],
            true,
            targets,
            parent,
            key,
        )
    }
}
