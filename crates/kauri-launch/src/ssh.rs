//! The ssh and rsh launchers: `SSH [extra args] -- HOST 'kauri' agent …`, the job key on the
//! first line of the remote agent's stdin.

use super::{agent_args, command, join_words, launch, shell_quote, Launch, Launcher, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents through ssh or rsh (the plan's `exec`, with its extra arguments and the
/// remote kauri path).
pub struct Ssh;

impl Launcher for Ssh {
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
                let remote: Vec<std::ffi::OsString> =
                    std::iter::once(shell_quote(&plan.agent_path))
                        .chain(agent_args(t, parent).iter().map(shell_quote))
                        .collect();
                let mut cmd = command(&plan.exec);
                // `--`: no host name is ever read as an option (`-oProxyCommand=…`), whatever
                // list it came from.
                cmd.args(&plan.extra_args)
                    .arg("--")
                    .arg(&t.host)
                    .arg(join_words(&remote));
                launch(plan.kind, vec![t.id], cmd, key)
            })
            .collect()
    }
}
