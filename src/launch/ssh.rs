//! The ssh and rsh launchers: `SSH [extra args] -- HOST 'kauri' agent …`, the job key on the
//! first line of the remote agent's stdin.

use super::{agent_args, command, join_words, shell_quote, Launcher, Started, Target};
use crate::plan::LaunchPlan;
use std::io;
use tokio::io::AsyncWriteExt;

/// Starts agents through ssh or rsh.
pub struct Ssh {
    /// The launch plan: the program, its extra arguments, the remote kauri path.
    pub plan: LaunchPlan,
}

impl Launcher for Ssh {
    fn start(&self, targets: &[Target], parent: &str, key: &str) -> io::Result<Vec<Started>> {
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
                let mut child = cmd.spawn()?;
                if let Some(mut stdin) = child.stdin.take() {
                    let line = format!("{key}\n");
                    tokio::task::spawn_local(async move {
                        let _ = stdin.write_all(line.as_bytes()).await;
                        // Keep stdin open: some ssh versions end the session on stdin EOF.
                        std::future::pending::<()>().await;
                        drop(stdin);
                    });
                }
                Ok(Started {
                    ids: vec![t.id],
                    child,
                })
            })
            .collect()
    }
}
