//! The fork launcher: the agent is a local process. Several of them on one machine stand for
//! several hosts, for tests and for scale runs.

use super::{agent_args, command_in_session, Launch, Launcher, Target, KEY_VAR};
use crate::plan::LaunchPlan;

/// Starts agents as local processes.
pub struct Fork {
    /// The launch plan (for the agent's path).
    pub plan: LaunchPlan,
}

impl Launcher for Fork {
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch> {
        targets
            .iter()
            .map(|t| {
                let mut cmd = command_in_session(&self.plan.agent_path);
                cmd.args(agent_args(t, parent))
                    .env(KEY_VAR, key)
                    .stdin(std::process::Stdio::null());
                Launch {
                    ids: vec![t.id],
                    cmd,
                    stdin_line: None,
                }
            })
            .collect()
    }
}
