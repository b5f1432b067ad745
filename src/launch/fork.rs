//! The fork launcher: the agent is a local process. Several of them on one machine stand for
//! several hosts, for tests and for scale runs.

use super::{agent_args, command, Launcher, Started, Target, KEY_VAR};
use crate::plan::LaunchPlan;
use std::io;

/// Starts agents as local processes.
pub struct Fork {
    /// The launch plan (for the agent's path).
    pub plan: LaunchPlan,
}

impl Launcher for Fork {
    fn start(&self, targets: &[Target], parent: &str, key: &str) -> io::Result<Vec<Started>> {
        targets
            .iter()
            .map(|t| {
                let mut cmd = command(&self.plan.agent_path);
                cmd.args(agent_args(t, parent))
                    .env(KEY_VAR, key)
                    .stdin(std::process::Stdio::null());
                Ok(Started {
                    ids: vec![t.id],
                    child: cmd.spawn()?,
                })
            })
            .collect()
    }
}
