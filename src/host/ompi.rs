//! Open MPI processes that kauri did not wire up. An Open MPI 4.1 program started without a
//! PMIx server (in a PMI job: `--pmi=auto` found no sign of Open MPI, or `--pmi=pmi1`) runs
//! as a singleton, a world of one, and says nothing. It does leave a trace: in `MPI_Init` a
//! 4.1 singleton forks an `orted` to be its own process manager, and that daemon outlives
//! it by a moment. When the rank ends, the kernel hands the daemon (alive or a zombie) to
//! kauri, the subreaper of its ranks' descendants ([`crate::host::proc::become_subreaper`]): a
//! child of kauri's named `orted` at a rank's end means an Open MPI singleton ran. The agent
//! reports it with the rank's end, and the front end says why in one line
//! ([`crate::tree::policy::never_wired`]).
//!
//! Open MPI 5 forks no daemon for a singleton; it makes a session directory in its temporary
//! directory, `ompi.<host>.<uid>/jf.0/<job>` (job family 0 is a singleton's: a job wired by
//! a PMIx server gets its family from the server's namespace), and leaves that behind. A
//! `jf.0` modified since the host's ranks started is the same trace.
//!
//! This module reads `/proc` only; it knows nothing of jobs or of the tree.

/// How many ranks that never spoke PMI or PMIx a host looks at before it stops looking (a
/// job of env-only programs has none, and a scan per rank would cost it time).
pub const CHECKS_MAX: u32 = 4;

/// The pids of this process's children, from every thread's `children` list.
fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
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

/// True when a child of this process (a rank's descendant handed over at the rank's end) is
/// Open MPI 4's `orted`: the daemon an Open MPI singleton forks.
pub fn singleton_daemon() -> bool {
    children().into_iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == "orted")
    })
}

/// True when an Open MPI singleton ran here since `since`: Open MPI 4's daemon is a child
/// of this process, or Open MPI 5's singleton session directory in the temporary directory
/// the ranks inherit was made or changed.
pub fn singleton_traces(since: std::time::SystemTime) -> bool {
    singleton_daemon() || singleton_session(&std::env::temp_dir(), &hostname(), since)
}

/// True when `<tmp>/ompi.<host>.<uid>/jf.0` (Open MPI 5's session directory of singletons,
/// for this user) was modified at or after `since`.
pub fn singleton_session(tmp: &std::path::Path, host: &str, since: std::time::SystemTime) -> bool {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    std::fs::metadata(tmp.join(format!("ompi.{host}.{uid}")).join("jf.0"))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since)
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

    #[test]
    fn sees_a_singleton_session_made_since() {
        let tmp = std::env::temp_dir().join(format!("ompi5-test-{}", std::process::id()));
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(2);
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert!(!singleton_session(&tmp, "h", before));
        std::fs::create_dir_all(tmp.join(format!("ompi.h.{uid}/jf.0/3571253248"))).unwrap();
        assert!(singleton_session(&tmp, "h", before));
        assert!(!singleton_session(&tmp, "other", before));
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert!(
            !singleton_session(&tmp, "h", later),
            "an older one is not this job's"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn sees_a_child_by_its_name() {
        assert!(!singleton_daemon());
        // A child named orted (comm is the file name of what it runs).
        let dir = std::env::temp_dir().join(format!("ompi-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let orted = dir.join("orted");
        std::os::unix::fs::symlink("/bin/sleep", &orted).unwrap();
        let mut child = std::process::Command::new(&orted).arg("5").spawn().unwrap();
        let mut seen = false;
        for _ in 0..200 {
            if singleton_daemon() {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(seen, "a child named orted is seen");
        assert!(children().is_empty() || !singleton_daemon());
    }
}
