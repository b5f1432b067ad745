//! Rank processes: finding the program, building the environment, starting it with its PMI
//! socket and stdio pipes in a process group of its own, and killing what is left.
//!
//! Every rank leads its own process group, so a signal reaches the rank and whatever it
//! started, and it dies with `SIGKILL` if the agent that started it disappears
//! (`PR_SET_PDEATHSIG`). Nothing here knows about PMI messages or jobs.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Variables a surrounding launcher may have set that must not reach our ranks: another
/// launcher's PMI wiring, and PMIx variables (new MPICH clients refuse to start beside them).
pub fn is_foreign_wiring(name: &str) -> bool {
    matches!(
        name,
        "PMI_FD"
            | "PMI_PORT"
            | "PMI_ID"
            | "PMI_RANK"
            | "PMI_SIZE"
            | "PMI_SPAWNED"
            | "PMI_JOBID"
            | "PMI_KVSNAME"
            | "MPI_LOCALNRANKS"
            | "MPI_LOCALRANKID"
    ) || name.starts_with("PMIX_")
        || name.starts_with("PRTE_")
}

/// Finds `program` the way `execvp` would, in the `PATH` the rank will have, relative paths
/// taken from `wdir`. The error is one line for the user.
pub fn resolve(program: &str, path_var: Option<&str>, wdir: &Path) -> Result<PathBuf, String> {
    let check = |p: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| format!("cannot execute {program}: {e}"))?;
        if meta.is_dir() {
            return Err(format!("cannot execute {program}: it is a directory"));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(format!("cannot execute {program}: permission denied"));
        }
        Ok(())
    };
    if program.contains('/') {
        let p = wdir.join(program);
        check(&p)?;
        return Ok(p);
    }
    for dir in path_var
        .unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
    {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let p = wdir.join(dir).join(program);
        if p.is_file() && check(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(format!("cannot execute {program}: not found in PATH"))
}

/// How to start one rank.
#[derive(Debug)]
pub struct Launch {
    /// The resolved program.
    pub program: PathBuf,
    /// `argv[0]` as the user typed it.
    pub argv0: String,
    /// The arguments.
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub wdir: PathBuf,
    /// The rank's end of its PMI socket, inherited under its own number (`PMI_FD`).
    pub pmi_fd: Option<OwnedFd>,
    /// Give the rank a pipe as stdin (rank 0); otherwise `/dev/null`.
    pub stdin: bool,
}

/// Starts a rank; its stdout and stderr are pipes.
pub fn spawn(l: Launch) -> io::Result<tokio::process::Child> {
    let mut cmd = std::process::Command::new(&l.program);
    cmd.arg0(&l.argv0)
        .args(&l.args)
        .env_clear()
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&l.wdir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if l.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let pmi: Option<RawFd> = l.pmi_fd.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (setpgid, prctl, getppid, fcntl, _exit) on values captured by copy.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            if let Some(fd) = pmi {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(false)
        .spawn();
    drop(l.pmi_fd);
    child
}

/// Sends `sig` to the process group `pgid`; a group that is gone is not an error.
pub fn signal_group(pgid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a process group.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

/// Kills (`SIGKILL`) every process still in one of `pgids` and in our session: what ranks
/// left behind. Scans `/proc`, so only groups that still have members are touched.
pub fn kill_leftovers(pgids: &[u32]) -> usize {
    // SAFETY: getsid(0) has no preconditions.
    let sid = unsafe { libc::getsid(0) };
    let mut killed = 0;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let (state, pgrp, session) = (f.first(), f.get(2), f.get(3));
        let (Some(state), Some(Ok(pgrp)), Some(Ok(session))) = (
            state,
            pgrp.map(|s| s.parse::<u32>()),
            session.map(|s| s.parse::<i32>()),
        ) else {
            continue;
        };
        if *state != "Z" && session == sid && pgids.contains(&pgrp) {
            // SAFETY: see signal_group.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed += 1;
        }
    }
    killed
}

/// The name of a signal, for messages.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        let wd = std::env::temp_dir();
        assert!(resolve("sh", Some("/usr/bin:/bin"), &wd).is_ok());
        let e = resolve("no-such-program-kauri", Some("/usr/bin"), &wd).unwrap_err();
        assert!(e.contains("not found in PATH"), "{e}");
        let f = wd.join(format!("kauri-noexec-{}", std::process::id()));
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(f.to_str().unwrap(), None, &wd).unwrap_err();
        std::fs::remove_file(&f).unwrap();
        assert!(e.contains("permission denied"), "{e}");
        let e = resolve("./missing", None, &wd).unwrap_err();
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn foreign_wiring_is_recognised() {
        assert!(is_foreign_wiring("PMI_FD"));
        assert!(is_foreign_wiring("PMIX_RANK"));
        assert!(!is_foreign_wiring("PMI_DEBUG"));
        assert!(!is_foreign_wiring("PATH"));
    }
}
