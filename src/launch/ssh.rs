//! The ssh and rsh launchers: `SSH [extra args] -- HOST 'kauri' agent …`, the job key on the
//! first line of the remote agent's stdin.

use super::{agent_args, command, join_words, shell_quote, Launch, Launcher, Target};
use crate::plan::LaunchPlan;

/// Starts agents through ssh or rsh.
pub struct Ssh {
    /// The launch plan: the program, its extra arguments, the remote kauri path.
    pub plan: LaunchPlan,
}

impl Launcher for Ssh {
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch> {
        targets
            .iter()
            .map(|t| {
                let remote: Vec<std::ffi::OsString> =
                    std::iter::once(shell_quote(&self.plan.agent_path))
                        .chain(agent_args(t, parent).iter().map(shell_quote))
                        .collect();
                let mut cmd = command(&self.plan.exec);
                // `--`: no host name is ever read as an option (`-oProxyCommand=…`), whatever
                // list it came from.
                cmd.args(&self.plan.extra_args)
                    .arg("--")
                    .arg(&t.host)
                    .arg(join_words(&remote))
                    .stdin(std::process::Stdio::piped());
                Launch {
                    ids: vec![t.id],
                    cmd,
                    stdin_line: Some(format!("{key}\n")),
                }
            })
            .collect()
    }
}
