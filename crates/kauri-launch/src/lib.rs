//! Launchers: how an agent is started on a host. Which launcher, and every fact the rest of
//! kauri decides by, is a [`LauncherKind`] ([`kind`], no I/O: it travels in the plan); what
//! needs the machine (finding its program, starting agents, the launch-cost probe) is its
//! [`Launcher`], one file each, which [`for_kind`] picks.
//!
//! Adding a launcher touches:
//! - [`kind`]: a variant, its name in [`LauncherKind::as_str`] and [`kind::ALL`], and its
//!   answer in each fact there (every fact is an exhaustive `match`: the compiler lists them);
//! - its own file here, a unit struct implementing [`Launcher`] (`prepare`, and
//!   `find_program` or `probe` where the defaults do not fit);
//! - two lines of this file: its `mod`, and its arm in [`for_kind`];
//! - for a resource manager whose allocation kauri reads, [`allocation`];
//! - the `-launcher` line of the manual (`cli/doc/pages/kauri.rs`), which says in words what
//!   each name starts (the list of names itself, for the manual and the completions, is
//!   [`NAMES`]).
//!
//! Nothing outside `launch` names a launcher: `tests/layers.rs` fails on a launcher's name
//! as a string literal elsewhere.
//!
//! A launcher starts a process that is, or leads to, `kauri agent …` on the host, and hands
//! the job key to it without putting it on a command line ([`KeyTravel`]): in the
//! environment where the launcher carries the environment (fork, Slurm, Grid Engine, LSF,
//! PBS), on the first line of stdin where it does not (ssh, rsh). The caller watches the
//! started process: if it ends before the agent connects back, its last line on stderr says
//! why.
//!
//! The resource managers' own launchers (`srun`, `qrsh -inherit`, `blaunch`, `pbs_tmrsh`)
//! start agents inside the job's allocation, so the manager accounts for them and kills them
//! with the job.

#![warn(missing_docs)]

pub mod allocation;
mod fork;
pub mod hydra_env;
pub use kauri_core::launch::kind;
mod lsf;
mod pbs;
mod probe;
mod sge;
mod slurm;
mod spawner;
mod ssh;

use kauri_core::plan::LaunchPlan;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

pub use fork::Fork;
pub use kind::{Batching, KeyTravel, LauncherKind, Program, NAMES};
pub use lsf::Lsf;
pub use pbs::Pbs;
pub use probe::time_launch;
pub use sge::Sge;
pub use slurm::{srun_has_external_launcher, Slurm};
pub use ssh::Ssh;

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

/// Starts agents on hosts: one per [`LauncherKind`] ([`for_kind`]), with no state of its own
/// (the plan says where kauri is and which program starts agents).
pub trait Launcher: Sync {
    /// The processes that start the agents for `targets`, to connect back to `parent`
    /// (`ip:port`); [`start`] starts each.
    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch>;

    /// Where `program` (the kind's [`LauncherKind::default_program`]) is on this machine, as
    /// it is run when `-launcher-exec` names none; `kauri` is kauri's own path. `None` when it
    /// is not installed here ([`LauncherKind::instead_when_missing`] is used instead). By
    /// default the program's name, for `PATH`.
    fn find_program(&self, program: Program, kauri: &str) -> Option<String> {
        Some(plain(program, kauri))
    }

    /// The command that times one launch to `host` for the cost-model tree
    /// ([`time_launch`]): by default `EXEC EXTRA… HOST 'KAURI' --version`, the way an
    /// rsh-like launcher runs a command on a host.
    fn probe(&self, plan: &LaunchPlan, host: &str) -> std::process::Command {
        let mut line = shell_quote(&plan.agent_path);
        line.push(" --version");
        let mut cmd = std::process::Command::new(&plan.exec);
        cmd.args(&plan.extra_args).arg(host).arg(line);
        cmd
    }
}

/// The launcher of `kind`.
pub fn for_kind(kind: LauncherKind) -> &'static dyn Launcher {
    match kind {
        LauncherKind::Ssh | LauncherKind::Rsh => &Ssh,
        LauncherKind::Slurm => &Slurm,
        LauncherKind::Sge => &Sge,
        LauncherKind::Lsf => &Lsf,
        LauncherKind::Pbs => &Pbs,
        LauncherKind::Fork => &Fork,
    }
}

/// The launcher that starts agents and its program: `kind` with `-launcher-exec` (`asked`)
/// when given, else with its own program as found on this machine, else (its program not
/// installed) the launcher it falls back to ([`LauncherKind::instead_when_missing`]);
/// `kauri` is kauri's own path.
pub fn program_for(
    kind: LauncherKind,
    asked: Option<String>,
    kauri: &str,
) -> (LauncherKind, String) {
    if let Some(exec) = asked {
        return (kind, exec);
    }
    let found = for_kind(kind).find_program(kind.default_program(), kauri);
    match (found, kind.instead_when_missing()) {
        (Some(exec), _) => (kind, exec),
        (None, Some(other)) if other != kind => program_for(other, None, kauri),
        (None, _) => (kind, plain(kind.default_program(), kauri)),
    }
}

/// A program as named, or kauri's own path.
fn plain(program: Program, kauri: &str) -> String {
    match program {
        Program::Named(name) => name.to_string(),
        Program::Kauri => kauri.to_string(),
    }
}

/// A [`Launch`] of `cmd` for the agents `ids`, with the job key handed over as `kind`'s
/// agents take it ([`KeyTravel`]).
pub fn launch(
    kind: LauncherKind,
    ids: Vec<u32>,
    mut cmd: tokio::process::Command,
    key: &str,
) -> Launch {
    let stdin_line = match kind.key_travel() {
        KeyTravel::Environment => {
            cmd.env(KEY_VAR, key).stdin(std::process::Stdio::null());
            None
        }
        KeyTravel::StdinLine => {
            cmd.stdin(std::process::Stdio::piped());
            Some(format!("{key}\n"))
        }
    };
    Launch {
        ids,
        cmd,
        stdin_line,
    }
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

/// Starts one agent per target as `EXEC ARGS… EXTRA… HOST KAURI agent …`, the way the
/// resource managers' rsh-like launchers take a command (`qrsh -inherit`, `blaunch`,
/// `pbs_tmrsh`): the job key as the plan's kind takes it (in the environment, which they
/// carry to the task, stdin `/dev/null`). With `quote`, each word of the agent's command line is quoted for the remote
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
                .args(words);
            launch(plan.kind, vec![t.id], cmd, key)
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
    if kauri_os::trace::enabled() {
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

    fn plan(kind: LauncherKind) -> LaunchPlan {
        LaunchPlan {
            kind,
            exec: "/opt/bin/launch".into(),
            extra_args: vec!["-x".into()],
            agent_path: "/opt/my kauri".into(),
            connect_timeout_s: 1,
            max_concurrent: 1,
            heartbeat_ms: 1,
            silence_ms: 0,
        }
    }

    fn words(cmd: &std::process::Command) -> Vec<String> {
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|w| w.to_string_lossy().into_owned())
            .collect()
    }

    /// The cost probe runs kauri itself for simulated hosts, else the launcher the rsh way.
    #[test]
    fn the_probe_launches_kauri_as_agents_will_be() {
        let fork = plan(LauncherKind::Fork);
        let got = words(&for_kind(fork.kind).probe(&fork, "h1"));
        assert_eq!(got, ["/opt/my kauri", "--version"]);
        let ssh = plan(LauncherKind::Ssh);
        let got = words(&for_kind(ssh.kind).probe(&ssh, "h1"));
        assert_eq!(
            got,
            ["/opt/bin/launch", "-x", "h1", "'/opt/my kauri' --version"]
        );
    }

    /// The job key goes in the environment, or on stdin's first line for a remote shell; never
    /// both.
    #[test]
    fn the_key_travels_as_the_launcher_carries_it() {
        let key_in_env = |l: &Launch| {
            l.cmd
                .as_std()
                .get_envs()
                .any(|(k, v)| k == KEY_VAR && v == Some(OsStr::new("k3y")))
        };
        let env = launch(LauncherKind::Sge, vec![1], command("qrsh"), "k3y");
        assert!(key_in_env(&env) && env.stdin_line.is_none());
        let line = launch(LauncherKind::Rsh, vec![1], command("rsh"), "k3y");
        assert!(!key_in_env(&line));
        assert_eq!(line.stdin_line.as_deref(), Some("k3y\n"));
    }

    /// `-launcher-exec` wins; else the launcher's own program (kauri itself for fork).
    #[test]
    fn the_program_that_starts_agents() {
        let asked = program_for(LauncherKind::Slurm, Some("./srun".into()), "/k");
        assert_eq!(asked, (LauncherKind::Slurm, "./srun".to_string()));
        let own = program_for(LauncherKind::Slurm, None, "/k");
        assert_eq!(own, (LauncherKind::Slurm, "srun".to_string()));
        let fork = program_for(LauncherKind::Fork, None, "/k");
        assert_eq!(fork, (LauncherKind::Fork, "/k".to_string()));
        let rsh = program_for(LauncherKind::Rsh, None, "/k");
        assert_eq!(rsh, (LauncherKind::Rsh, "rsh".to_string()));
    }

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
