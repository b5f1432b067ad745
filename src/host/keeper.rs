//! The keeper: a small process that ends this host's ranks, and everything they started, if
//! the process that started them (kauri, or a `kauri agent`) dies without its teardown, even
//! by `SIGKILL`.
//!
//! Why a process apart: kauri's own teardown (the `SIGTERM`, the grace, the `SIGKILL` of the
//! ranks' process groups, the subreaper's sweep of escaped daemons, [`crate::host::proc`]) runs in
//! kauri, and dies with it. `PR_SET_PDEATHSIG` reaches only a rank itself, not what it
//! started, and those went to init and ran on (issue #30; Hydra leaves nothing). Something
//! that outlives the starter must end them. The keeper is that survivor: one per process
//! that starts ranks, started once (once the first ranks of the process are forked, not per
//! rank), named `kauri-keeper` (its `comm`, what `ps -e` and `top` show), in a process group
//! of its own (a `^C` or a hang-up to the terminal's group does not reach it, and it ignores
//! both anyway), with a pipe on its stdin and `/dev/null` on the rest; it closes every other
//! descriptor it inherited, so `kauri … | cat` still sees its end.
//!
//! How it starts: when the starter has one thread, a plain `fork` (no `exec`): the child
//! runs [`run`]'s loop in a copy of the starter's memory and leaves with `_exit`. An `exec`
//! of this binary costs about 1 ms of CPU (the dynamic loader, relocations, the runtime's
//! start), as much as the whole of a one-rank job's own work here, and on a 2-core machine
//! that CPU is taken from the ranks. With more than one thread (a PMIx job: the library's
//! progress thread; output files: tokio's blocking pool) a fork could copy a lock another
//! thread holds, so the keeper is `/proc/self/exe --keeper TOKEN GRACE_MS` then (this very
//! binary, even if its file was replaced since).
//!
//! The starter writes `+PID` for each rank it starts and `-PID` when it reaped it; at a clean
//! end it kills the keeper (`SIGKILL`) once its last sweep is done ([`dismiss`]) and reaps it
//! just before it leaves ([`release`]), so no keeper outlives a clean run. The keeper only reads: on `done` it exits at once (a starter that wants it
//! gone without a kill may say so); on end-of-file (its starter died), it sends
//! `SIGTERM` to the processes of the run, waits the job's kill grace
//! (`KAURI_KILL_GRACE`) or until they are gone, then `SIGKILL`s whatever is left, again until
//! nothing is found. The processes of the run are those of this user that are in a session
//! or a process group a recorded rank leads (which catches a child that cleared its
//! environment), or whose environment holds `KAURI_KEEPER=TOKEN` ([`VAR`]): every rank gets
//! it, and what a rank starts inherits it, even a daemon that left with `setsid`. The token
//! is this process's own (its pid and the time), so a keeper never touches another run's,
//! another agent's on the same machine (`-launcher fork`), or another user's processes.
//!
//! Why not something else: a cgroup would be exact but needs a delegated cgroup tree, which
//! ssh and most batch systems do not give; a subreaper in a second process cannot adopt what
//! is not its descendant; `PR_SET_PDEATHSIG` on the ranks' children cannot be set from here.

use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The variable every rank gets (`KAURI_KEEPER=TOKEN`): what the keeper looks for in the
/// environment of the processes it ends.
pub const VAR: &str = "KAURI_KEEPER";

/// The hidden subcommand that runs a keeper (`kauri --keeper TOKEN GRACE_MS`), when it
/// cannot be forked.
pub const SUBCOMMAND: &str = "--keeper";

/// A keeper's process name (`/proc/PID/comm`), however it was started.
pub const NAME: &str = "kauri-keeper";

/// The keeper of this process, once started.
enum State {
    /// None started yet: the ranks started so far, told to it once it starts.
    NotYet(Vec<u32>),
    /// Running: the pipe to it and its pid, to kill and reap.
    Running(std::fs::File, u32),
    /// Killed by [`dismiss`], not reaped yet: the pipe to it and its pid, for [`release`].
    Dismissed(std::fs::File, u32),
    /// It could not be started, or was released: do not try again.
    Gone,
}

static KEEPER: Mutex<State> = Mutex::new(State::NotYet(Vec::new()));

/// This process's token: its pid and the time, unique among the processes of a machine.
pub fn token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}-{nanos:x}", std::process::id())
    })
}

/// The variable to put in each rank's environment ([`VAR`] and this process's token).
pub fn env() -> (String, String) {
    (VAR.to_string(), token().to_string())
}

/// Starts this process's keeper if it has none yet, with `grace` for the ranks between its
/// `SIGTERM` and its `SIGKILL`, and tells it the ranks [`started`] before it. Best effort: a
/// keeper that cannot be started is one warning, and the job runs as before without it.
///
/// A host calls it once its ranks are forked, not before the first, so that the keeper's
/// start never delays theirs. Until then each rank is tied to this process by
/// `PR_SET_PDEATHSIG`; only what a rank starts in that first moment is not covered yet.
pub fn ensure(grace: Duration) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    let State::NotYet(early) = &mut *k else {
        return;
    };
    let early = std::mem::take(early);
    let started = if single_threaded() {
        fork_keeper(grace)
    } else {
        exec_keeper(grace)
    };
    *k = match started {
        Ok((mut pipe, pid)) => {
            // A keeper that stops reading must not stop kauri: the lines are short (atomic
            // in a pipe), and one that does not fit is dropped.
            // SAFETY: fcntl on a descriptor we own, setting a flag.
            unsafe {
                let fd = pipe.as_raw_fd();
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            crate::host::proc::not_a_rank(pid);
            for pid in early {
                let _ = pipe.write_all(format!("+{pid}\n").as_bytes());
            }
            State::Running(pipe, pid)
        }
        Err(e) => {
            tracing::warn!("cannot start the keeper of this host's ranks: {e}");
            State::Gone
        }
    };
}

/// Whether this process has one thread (`/proc/self/task` lists one): then only this thread
/// could start another, and a `fork` copies no lock held elsewhere.
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

/// Forks the keeper (see the module's doc): the pipe's writing end and the keeper's pid.
fn fork_keeper(grace: Duration) -> std::io::Result<(std::fs::File, u32)> {
    let token = token();
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: this process has one thread (the caller checked), so the child's copy of the
    // memory holds no lock another thread took. The child only sets up its descriptors,
    // runs the keeper's loop and leaves with `_exit`: none of the parent's destructors or
    // exit handlers run in it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: dup2, open and setpgid take plain numbers and a NUL-terminated path.
        unsafe {
            libc::dup2(rd.as_raw_fd(), 0);
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 1);
                libc::dup2(null, 2);
            }
            libc::setpgid(0, 0);
        }
        let code = keep(token, grace);
        // SAFETY: _exit ends this process at once; nothing of the parent's runs.
        unsafe { libc::_exit(code) };
    }
    drop(rd);
    Ok((std::fs::File::from(wr), pid as u32))
}

/// Starts the keeper as `/proc/self/exe --keeper TOKEN GRACE_MS` (this very binary, even if
/// its file was replaced or removed since): the pipe's writing end and the keeper's pid.
fn exec_keeper(grace: Duration) -> std::io::Result<(std::fs::File, u32)> {
    let mut child = Command::new("/proc/self/exe")
        .arg(SUBCOMMAND)
        .arg(token())
        .arg(grace.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    match child.stdin.take() {
        // (The `Child` is dropped without a wait: `release` reaps the pid itself.)
        Some(pipe) => Ok((std::fs::File::from(OwnedFd::from(pipe)), pid)),
        None => Err(std::io::Error::other("the keeper has no stdin")),
    }
}

/// Records a rank started (its pid leads its session and process group); kept until the
/// keeper starts, if it has not yet.
pub fn started(pid: u32) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *k {
        State::Running(pipe, _) => {
            let _ = pipe.write_all(format!("+{pid}\n").as_bytes());
        }
        State::NotYet(early) => early.push(pid),
        State::Gone | State::Dismissed(..) => {}
    }
}

/// Records a rank reaped: its pid may be reused from now on.
pub fn reaped(pid: u32) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *k {
        State::Running(pipe, _) => {
            let _ = pipe.write_all(format!("-{pid}\n").as_bytes());
        }
        State::NotYet(early) => early.retain(|&p| p != pid),
        State::Gone | State::Dismissed(..) => {}
    }
}

/// The run's last sweep is done (every rank of this process reaped, what they left killed):
/// the keeper has nothing left to do, and is killed (`SIGKILL`) now, not reaped. Its exit
/// (the release of its copy of this process's memory, about 0.1-0.3 ms here) then overlaps
/// what this process still does before it leaves (the last output, the status socket's
/// removal, the report), and [`release`] only reaps it. A rank started after this (none is,
/// at the end of a run) would run without a keeper.
pub fn dismiss() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    match std::mem::replace(&mut *k, State::Gone) {
        State::Running(pipe, pid) => {
            // Killed before the pipe closes: it never sees an end-of-file without `done`.
            // SAFETY: kill takes plain numbers; the pid is our child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            *k = State::Dismissed(pipe, pid);
        }
        other => *k = other,
    }
}

/// The clean end: the keeper has nothing to do, and is killed (`SIGKILL`, unless [`dismiss`]
/// did) and reaped at once. (Telling it `done` and waiting for it to leave would make every
/// run wait for the keeper's own start, an exec of this binary, when the job was shorter
/// than that.)
pub fn release() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    let (pipe, pid) = match std::mem::replace(&mut *k, State::Gone) {
        State::Running(pipe, pid) => {
            // Killed before the pipe closes: it never sees an end-of-file without `done`.
            // SAFETY: kill takes plain numbers; the pid is our child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            (pipe, pid)
        }
        State::Dismissed(pipe, pid) => (pipe, pid),
        _ => return,
    };
    let mut status = 0;
    // SAFETY: waitpid takes plain numbers and writes `status`; the pid is our child, not yet
    // reaped.
    while unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    crate::host::proc::not_a_rank(0);
    drop(pipe);
}

/// An end without the teardown (an agent whose parent is gone kills its ranks' groups and
/// leaves at once): the keeper is left alive, its pipe closed, so it ends what the ranks
/// left (a daemon they started, which would otherwise go to init when this process leaves),
/// on its own, after this process has gone.
pub fn hand_over() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if let State::Dismissed(..) = &*k {
        // Already killed: reaped, not handed over.
        drop(k);
        release();
        return;
    }
    // Dropping the pipe is the end-of-file; the child is not waited for.
    *k = State::Gone;
}

/// `kauri --keeper TOKEN GRACE_MS`: the keeper started by `exec` ([`exec_keeper`]). Returns
/// its exit status.
pub fn run(args: &[String]) -> i32 {
    let (Some(token), Some(grace)) = (args.first(), args.get(1).and_then(|g| g.parse().ok()))
    else {
        say!("kauri --keeper: internal: TOKEN GRACE_MS expected");
        return 2;
    };
    keep(token, Duration::from_millis(grace))
}

/// The keeper's own body, however it started: reads its starter's lines on stdin until
/// `done` (returns at once) or the end of the pipe (its starter died: it ends the run's
/// processes). Returns its exit status.
fn keep(token: &str, grace: Duration) -> i32 {
    // SAFETY: prctl, sigprocmask, signal and close_range take plain numbers, a
    // NUL-terminated name and an empty set; this process has one thread.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"kauri-keeper".as_ptr());
        // Forked, it has the starter's handlers (the runtime's, for SIGTERM and SIGCHLD,
        // which would swallow them) and mask: back to the defaults, as after an exec.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for sig in [
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Anything kauri's own parent left open without close-on-exec (and, forked, every
        // descriptor of the starter's): the keeper holds nothing of the run but its pipe.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    let mut ranks: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line == "done" {
            return 0;
        }
        if let Some(pid) = line.strip_prefix('+').and_then(|p| p.parse().ok()) {
            ranks.push(pid);
        } else if let Some(pid) = line.strip_prefix('-').and_then(|p| p.parse::<u32>().ok()) {
            ranks.retain(|&r| r != pid);
        }
    }
    end_the_run(token, &ranks, grace);
    0
}

/// The starter died: `SIGTERM` to what is left of the run, the grace, then `SIGKILL` until
/// nothing is found.
fn end_the_run(token: &str, ranks: &[u32], grace: Duration) {
    let needle = format!("{VAR}={token}");
    let find = || run_processes(&needle, ranks);
    let left = find();
    if left.is_empty() {
        return;
    }
    for &pid in &left {
        // SAFETY: kill takes plain numbers. A stopped process gets SIGCONT to see its SIGTERM.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
            libc::kill(pid as libc::pid_t, libc::SIGCONT);
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if find().is_empty() {
            return;
        }
    }
    // A process may fork while it is being killed: look again until none is left (bounded,
    // so a keeper never spins for ever).
    for _ in 0..500 {
        let left = find();
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The living processes of this user (but this one) in a session or process group one of
/// `ranks` leads, or with `needle` (`KAURI_KEEPER=TOKEN`) in their environment.
fn run_processes(needle: &str, ranks: &[u32]) -> Vec<u32> {
    // SAFETY: getuid and getpid have no preconditions.
    let (uid, me) = unsafe { (libc::getuid(), libc::getpid() as u32) };
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || e.metadata().map_or(true, |m| m.uid() != uid) {
            continue;
        }
        let Some(st) = crate::host::proc::Stat::read(pid) else {
            continue;
        };
        if st.state == 'Z' {
            continue; // dead already: its parent (or init) reaps it
        }
        let in_rank = ranks.contains(&st.pgrp) || ranks.contains(&st.session);
        let marked = || {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        };
        if in_rank || marked() {
            found.push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_name_set_is_the_name_told() {
        assert_eq!(c"kauri-keeper".to_str(), Ok(super::NAME));
        // A process name holds 15 bytes.
        assert!(super::NAME.len() <= 15);
    }
}
