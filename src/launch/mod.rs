//! Launchers: how an agent is started on a host. Each is a small plugin behind [`Launcher`];
//! adding one (`pbs`, say) is one new file and one line in [`for_plan`].
//!
//! A launcher starts a process that is, or leads to, `kauri agent …` on the host, and hands
//! the job key to it without putting it on a command line: in the environment where the
//! launcher carries the environment (fork, Slurm, Grid Engine, LSF, PBS), on the first line
//! of stdin where it does not (ssh, rsh). The caller watches the started process: if it ends
//! before the agent connects back, its last line on stderr says why.
//!
//! The resource managers' own launchers (`srun`, `qrsh -inherit`, `blaunch`, `pbs_tmrsh`)
//! start agents inside the job's allocation, so the manager accounts for them and kills them
//! with the job.

pub mod allocation;
mod fork;
pub mod hydra_env;
mod lsf;
mod pbs;
mod sge;
mod slurm;
mod spawner;
mod ssh;

use crate::plan::LaunchPlan;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

pub use fork::Fork;
pub use lsf::Lsf;
pub use pbs::Pbs;
pub use sge::Sge;
pub use slurm::{srun_has_external_launcher, Slurm};
pub use ssh::Ssh;

/// Every launcher's name, as `-launcher` takes it.
pub const NAMES: [&str; 7] = ["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"];

/// The environment variable that carries the job key to an agent.
pub const KEY_VAR: &str = "KAURI_JOB_KEY";

/// One agent to start.
#[derive(Debug, Clone)]
pub struct Target {
    /// The agent's id in the tree.
    pub id: u32,
    /// Its host.
    pub host: String,
}

/// A launcher process to start, and the agents it stands for.
#[derive(Debug)]
pub struct Launch {
    /// The agents this process starts (one, or all for Slurm).
    pub ids: Vec<u32>,
    /// Its command line, environment and streams.
    pub cmd: tokio::process::Command,
    /// What to write on its stdin once it runs (the job key, for ssh and rsh), keeping stdin
    /// open afterwards.
    pub stdin_line: Option<String>,
}

/// A started launcher process and the agents it stands for.
#[derive(Debug)]
pub struct Started {
    /// The agents this process starts (one, or all for Slurm).
    pub ids: Vec<u32>,
    /// The process.
    pub child: tokio::process::Child,
}

/// Starts agents on hosts.
pub trait Launcher {
    /// The processes that start the agents for `targets`, to connect back to `parent`
    /// (`ip:port`); [`start`] starts each.
    fn prepare(&self, targets: &[Target], parent: &str, key: &str) -> Vec<Launch>;
}

/// Starts a launcher process on the spawner thread ([`spawner::spawn`]): the event loop goes
/// on (heartbeats, other links) while the kernel forks and the process reaches `exec`, which
/// on a starved machine takes seconds. Then writes its stdin line, if it has one.
pub async fn start(launch: Launch) -> io::Result<Started> {
    use tokio::io::AsyncWriteExt;
    let mut child = spawner::spawn(launch.cmd).await?;
    if let Some(line) = launch.stdin_line {
        if let Some(mut stdin) = child.stdin.take() {
            tokio::task::spawn_local(async move {
                let _ = stdin.write_all(line.as_bytes()).await;
                // Keep stdin open: some ssh versions end the session on stdin EOF.
                std::future::pending::<()>().await;
                drop(stdin);
            });
        }
    }
    Ok(Started {
        ids: launch.ids,
        child,
    })
}

/// The launcher a plan names.
pub fn for_plan(plan: &LaunchPlan) -> Result<Box<dyn Launcher>, String> {
    match plan.kind.as_str() {
        "fork" => Ok(Box::new(Fork { plan: plan.clone() })),
        "ssh" | "rsh" => Ok(Box::new(Ssh { plan: plan.clone() })),
        "slurm" => Ok(Box::new(Slurm { plan: plan.clone() })),
        "sge" => Ok(Box::new(Sge { plan: plan.clone() })),
        "lsf" => Ok(Box::new(Lsf { plan: plan.clone() })),
        "pbs" => Ok(Box::new(Pbs { plan: plan.clone() })),
        other => Err(format!("unknown launcher {other:?} ({})", NAMES.join(", "))),
    }
}

/// Starts one agent per target as `EXEC ARGS… EXTRA… HOST KAURI agent …`, the way the
/// resource managers' rsh-like launchers take a command (`qrsh -inherit`, `blaunch`,
/// `pbs_tmrsh`): the job key in the environment, which they carry to the task, stdin
/// `/dev/null`. With `quote`, each word of the agent's command line is quoted for the remote
/// shell the launcher runs it with.
pub fn per_host(
    plan: &LaunchPlan,
    args: &[&str],
    quote: bool,
    targets: &[Target],
    parent: &str,
    key: &str,
) -> Vec<Launch> {
    targets
        .iter()
        .map(|t| {
            let words = std::iter::once(plan.agent_path.clone())
                .chain(agent_args(t, parent).into_iter().map(OsString::from))
                .map(|w| if quote { shell_quote(&w) } else { w });
            let mut cmd = command(&plan.exec);
            cmd.args(args)
                .args(&plan.extra_args)
                .arg(&t.host)
                .args(words)
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

/// `program` found in `PATH`, as `execvp` would find it (`PATH` is bytes: a directory in it
/// that is not UTF-8 is searched as it is).
pub fn in_path(program: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .as_bytes()
        .split(|&b| b == b':')
        .filter(|d| !d.is_empty())
        .map(|d| std::path::Path::new(OsStr::from_bytes(d)).join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
        .map(|p| p.display().to_string())
}

/// The arguments of `kauri agent` for one target (with `--pmi-trace` when this process
/// traces PMI: the variable does not cross a remote shell).
pub fn agent_args(t: &Target, parent: &str) -> Vec<String> {
    let mut a = vec![
        "agent".into(),
        "--parent".into(),
        parent.into(),
        "--id".into(),
        t.id.to_string(),
        "--host".into(),
        t.host.clone(),
    ];
    if crate::proto::trace_enabled() {
        a.push("--pmi-trace".into());
    }
    a
}

/// A command whose process leads its own process group (a Ctrl-C at the terminal reaches
/// kauri, which decides, not the launcher) and dies with the thread that started it.
pub fn command(program: impl AsRef<OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.process_group(0);
    dies_with_its_starter(&mut cmd);
    cmd
}

/// A command whose process leads a session of its own, as a process that a remote shell
/// starts on its host does (and as Hydra starts its proxies): for the fork launcher's
/// agents. With the kernel's automatic scheduling groups (`sched_autogroup`, on in most
/// distributions' kernels), each session is one group and groups share the CPU equally: in
/// kauri's session, 300 simulated hosts' agents and ranks shared one group's time against
/// every other session on a busy machine, and a parent starved for 30 s was taken for gone.
/// A session also leads a process group, so the terminal's Ctrl-C reaches kauri alone, as
/// with [`command`]. Dies with the thread that started it.
pub fn command_in_session(program: impl AsRef<OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    dies_with_its_starter(&mut cmd);
    cmd
}

/// No stdout, stderr piped (its last words say why an agent never connected), killed when
/// dropped and when the thread that started it ends (`PR_SET_PDEATHSIG`).
fn dies_with_its_starter(cmd: &mut tokio::process::Command) {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
}

/// Quotes a word for a remote POSIX shell; its bytes need not be UTF-8 (a shell takes them
/// as they are).
pub fn shell_quote(w: impl AsRef<OsStr>) -> OsString {
    let w = w.as_ref().as_bytes();
    if !w.is_empty()
        && w.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_./:=@,+".contains(c))
    {
        return OsStr::from_bytes(w).to_os_string();
    }
    let mut q = b"'".to_vec();
    for &c in w {
        if c == b'\'' {
            q.extend_from_slice(b"'\\''");
        } else {
            q.push(c);
        }
    }
    q.push(b'\'');
    OsString::from_vec(q)
}

/// Words joined by single spaces (a remote shell's command line).
pub fn join_words(words: &[OsString]) -> OsString {
    let mut line = OsString::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            line.push(" ");
        }
        line.push(w);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/kauri"), "/usr/bin/kauri");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(
            shell_quote(OsStr::from_bytes(b"/home/jos\xe9/kauri")),
            OsStr::from_bytes(b"'/home/jos\xe9/kauri'")
        );
    }
}
