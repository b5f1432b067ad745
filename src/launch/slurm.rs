//! The Slurm launcher: one `srun` step inside the allocation starts one agent per node; the
//! job key travels in the environment, which `srun` exports. Slurm's own daemons fan the
//! launch out, so the agents form a flat tree under the front end.

use super::{command, Launcher, Started, Target, KEY_VAR};
use crate::plan::LaunchPlan;
use std::io;

/// Starts agents with `srun`.
pub struct Slurm {
    /// The launch plan: `exec` is the srun program.
    pub plan: LaunchPlan,
}

impl Launcher for Slurm {
    fn start(&self, targets: &[Target], parent: &str, key: &str) -> io::Result<Vec<Started>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let hosts: Vec<&str> = targets.iter().map(|t| t.host.as_str()).collect();
        let n = targets.len().to_string();
        let mut cmd = command(&self.plan.exec);
        cmd.args(["--nodes", &n, "--ntasks", &n, "--ntasks-per-node", "1"])
            .arg(format!("--nodelist={}", hosts.join(",")))
            .args(["--kill-on-bad-exit=1", "--input=none", "--mpi=none"])
            .args(&self.plan.extra_args)
            .arg(&self.plan.agent_path)
            .args(["agent", "--parent", parent, "--slurm"])
            .env(KEY_VAR, key)
            .stdin(std::process::Stdio::null());
        Ok(vec![Started {
            ids: targets.iter().map(|t| t.id).collect(),
            child: cmd.spawn()?,
        }])
    }
}
