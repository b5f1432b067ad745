//! The fork launcher: the agent is a local process. Several of them on one machine stand for
//! several hosts, for tests and for scale runs.

use super::{agent_args, command_in_session, launch, Launch, Launcher, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents as local processes (the plan's agent path, kauri itself).
pub struct Fork;

impl Launcher for Fork {
    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch> {
        targets
            .iter()
            .map(|t| {
                let mut cmd = command_in_session(&plan.agent_path);
                cmd.args(agent_args(t, parent));
                launch(plan.kind, vec![t.id], cmd, key)
            })
            .collect()
    }

    /// `KAURI --version`, here: the host is simulated.
    fn probe(&self, plan: &LaunchPlan, _host: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new(&plan.agent_path);
        cmd.arg("--version");
        cmd
    }
}
