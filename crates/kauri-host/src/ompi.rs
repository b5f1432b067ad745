//! Open MPI processes that kauri did not wire up. An Open MPI program that finds no PMIx
//! server (`--pmi=pmi1`, or a wrapper that cleared its `PMIX_*` variables) runs as a
//! singleton, a world of one, and says nothing. It does leave a trace, one per rank:
//!
//! * Open MPI 4.1 forks an `orted` in `MPI_Init`, to be its own process manager: a child of
//!   the rank named `orted` while it runs ([`singleton_running`]). The daemon outlives the
//!   rank by a moment: when the rank ends, the kernel hands it (alive or a zombie) to kauri,
//!   the subreaper of its ranks' descendants ([`crate::proc::become_subreaper`]), so a
//!   child of kauri's named `orted` at a rank's end is the same trace ([`singleton_ended`]).
//! * Open MPI 5 forks no daemon. Its singleton's namespace is `singleton.<host>.<pid>`, and
//!   it makes its job's session directory in its temporary directory,
//!   `ompi.<host>.<uid>/jf.0/<job id>`, the job id made from that namespace as Open MPI makes
//!   every job id ([`kauri_proto::pmix::jobid::ompi5_job_id`]), and leaves it there. So the
//!   directory of a rank's pid, made or changed since the rank's job started, is that rank's
//!   trace, while it runs and after. (One left by an earlier singleton is not: the job id
//!   keeps 16 bits of a hash of the pid, so a stale directory matches other pids too.)
//!
//! While the ranks run, their host looks for these traces from time to time, so that such a
//! job ends at once; at a rank's end the host looks once more, and the front end names the
//! flag that would help ([`kauri_core::tree::policy::never_wired`]).
//!
//! This module reads `/proc` and the temporary directory only; it knows nothing of jobs or of
//! the tree.

use kauri_proto::pmix::jobid::ompi5_job_id;
use std::time::{Duration, SystemTime};

/// How many ranks that never spoke PMI or PMIx a host looks at before it stops looking (a
/// job of env-only programs has none, and a scan per rank would cost it time).
pub const CHECKS_MAX: u32 = 4;

/// The pids of the children of process `pid` (`self` for this one), from every thread's
/// `children` list.
fn children_of(pid: &str) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// True when one of the children of process `pid` (`self`: this one) is Open MPI 4's
/// `orted`, the daemon an Open MPI singleton forks.
fn has_daemon(pid: &str) -> bool {
    children_of(pid).into_iter().any(|child| {
        std::fs::read_to_string(format!("/proc/{child}/comm"))
            .is_ok_and(|c| c.trim_end() == "orted")
    })
}

/// True when the running rank `pid` is an Open MPI singleton: Open MPI 4's daemon is its
/// child, or Open MPI 5's singleton made its session directory.
pub fn singleton_running(pid: u32, since: SystemTime) -> bool {
    has_daemon(&pid.to_string())
        || singleton_session(&std::env::temp_dir(), &hostname(), pid, since)
}

/// True when the rank `pid`, which has just ended, ran as an Open MPI singleton: Open MPI 4's
/// daemon is now a child of this process, or Open MPI 5's singleton left its session
/// directory.
pub fn singleton_ended(pid: u32, since: SystemTime) -> bool {
    has_daemon("self") || singleton_session(&std::env::temp_dir(), &hostname(), pid, since)
}

/// How much earlier than the moment it was made a directory's time may read: a file system
/// stamps times from a coarse clock (a tick, a few milliseconds, behind the precise one).
const STAMP_SLACK: Duration = Duration::from_millis(50);

/// True when `<tmp>/ompi.<host>.<uid>/jf.0/<job id of singleton.<host>.<pid>>`, the session
/// directory of process `pid` as an Open MPI 5 singleton of this user, is there, made or
/// changed (it, or its rank's directory `0` in it) since `since`, when the rank's job started.
pub fn singleton_session(tmp: &std::path::Path, host: &str, pid: u32, since: SystemTime) -> bool {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let job = ompi5_job_id(&format!("singleton.{host}.{pid}"));
    let dir = tmp.join(format!("ompi.{host}.{uid}/jf.0/{job}"));
    let since = since.checked_sub(STAMP_SLACK).unwrap_or(since);
    let fresh = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.modified().is_ok_and(|t| t >= since))
    };
    dir.is_dir() && (fresh(&dir) || fresh(&dir.join("0")))
}

/// This machine's host name as Open MPI names its session directory (`gethostname`).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job id of `singleton.vm.6264` is 1027866624: the directory an Open MPI 5.0.11
    /// singleton of pid 6264 made on host `vm` (seen here).
    #[test]
    fn sees_a_singletons_session_by_its_pid() {
        let tmp = std::env::temp_dir().join(format!("ompi5-test-{}", std::process::id()));
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let since = SystemTime::now();
        assert!(!singleton_session(&tmp, "vm", 6264, since));
        let dir = tmp.join(format!("ompi.vm.{uid}/jf.0/1027866624"));
        std::fs::create_dir_all(dir.join("0")).unwrap();
        assert!(singleton_session(&tmp, "vm", 6264, since));
        assert!(
            !singleton_session(&tmp, "vm", 6265, since),
            "another process's"
        );
        assert!(!singleton_session(&tmp, "other", 6264, since));
        // Left by a singleton before this job started: another pid with the same 16-bit
        // hash, or this one's long ago. Not a trace (it was, and failed unrelated jobs).
        let later = SystemTime::now() + Duration::from_secs(5);
        assert!(!singleton_session(&tmp, "vm", 6264, later));
        // A singleton of this job that reuses the stale directory makes its rank's anew.
        std::fs::remove_dir(dir.join("0")).unwrap();
        let since = SystemTime::now();
        std::fs::create_dir(dir.join("0")).unwrap();
        assert!(singleton_session(&tmp, "vm", 6264, since));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn sees_a_child_by_its_name() {
        assert!(!has_daemon("self"));
        // A child named orted (comm is the file name of what it runs).
        let dir = std::env::temp_dir().join(format!("ompi-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let orted = dir.join("orted");
        std::os::unix::fs::symlink("/bin/sleep", &orted).unwrap();
        let mut child = std::process::Command::new(&orted).arg("5").spawn().unwrap();
        let mut seen = false;
        for _ in 0..200 {
            if has_daemon("self") && has_daemon(&std::process::id().to_string()) {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(seen, "a child named orted is seen");
    }
}
