//! The keeper: a small process that ends this host's ranks, and everything they started, if
//! the process that started them (kauri, or a `kauri agent`) dies without its teardown, even
//! by `SIGKILL`.
//!
//! Why a process apart: kauri's own teardown (the `SIGTERM`, the grace, the `SIGKILL` of the
//! ranks' process groups, the subreaper's sweep of escaped daemons, [`crate::proc`]) runs in
//! kauri, and dies with it; what the ranks started would go to init and run on (Hydra
//! leaves nothing). Something that outlives the starter must end them. The keeper is that
//! survivor: one per process that starts ranks, started once (before the first rank of the
//! process, not per rank), named `ranks-keeper` (its `comm`, what `ps -e` and `top` show; like its command line,
//! `/proc/self/exe --keeper …`, it does not hold "kauri", so a `pkill -9 kauri` meant for kauri
//! does not also kill the one process that ends the ranks after it),
//! in a process group of its own (a `^C` or a hang-up to the terminal's group does not reach it, and it ignores
//! both anyway), with a pipe on its stdin and `/dev/null` on the rest; it closes every other
//! descriptor it inherited, so `kauri … | cat` still sees its end.
//!
//! How it starts: `/proc/self/exe --keeper TOKEN GRACE_MS` (this very binary, even if its
//! file was replaced since: the `kauri` binary, whose `main` hands [`SUBCOMMAND`] to [`run`];
//! a program that starts ranks through this crate must do the same), an ordinary child,
//! started before the process's first rank, so no rank runs without it, by the thread that
//! starts the ranks ([`crate::spawn`]):
//! as soon as kauri has its plan when its first job has ranks on its host (the keeper's own
//! start then overlaps kauri's), else before the first rank. A rank has no death signal
//! (`posix_spawn` cannot give one): the keeper is what ends the ranks themselves too if
//! their starter dies.
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
//! is not its descendant; `PR_SET_PDEATHSIG` reaches only the process that has it, and
//! cannot be set on a rank's children from here.

use std::io::{BufRead, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The variable every rank gets (`KAURI_KEEPER=TOKEN`): what the keeper looks for in the
/// environment of the processes it ends.
pub const VAR: &str = "KAURI_KEEPER";

/// The hidden subcommand that runs a keeper (`kauri --keeper TOKEN GRACE_MS`).
pub const SUBCOMMAND: &str = "--keeper";

/// A keeper's process name (`/proc/PID/comm`), however it was started.
pub const NAME: &str = "ranks-keeper";

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
/// Called by the thread that starts the ranks ([`crate::spawn`]) before the first,
/// or, when kauri's first job has ranks on its host, as soon as kauri has its plan.
pub fn ensure(grace: Duration) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    let State::NotYet(early) = &mut *k else {
        return;
    };
    let early = std::mem::take(early);
    *k = match exec_keeper(grace) {
        Ok((mut pipe, pid)) => {
            // A keeper that stops reading must not stop kauri: the lines are short (atomic
            // in a pipe), and one that does not fit is dropped.
            let _ = rustix::fs::fcntl_getfl(&pipe)
                .and_then(|fl| rustix::fs::fcntl_setfl(&pipe, fl | rustix::fs::OFlags::NONBLOCK));
            crate::proc::not_a_rank(pid);
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

/// The signals from a terminal (and `SIGPIPE`) that a keeper ignores: a `^C` or a hang-up
/// meant for the job's group is not for it, and it must outlive them.
const TERMINAL_SIGNALS: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// Starts the keeper as `/proc/self/exe --keeper TOKEN GRACE_MS` (this very binary, even if
/// its file was replaced or removed since), in a process group of its own, with a pipe as
/// its stdin and `/dev/null` as the rest: the pipe's writing end and the keeper's pid.
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
/// (for one that became a process of its own, the release of its memory) then overlaps what
/// this process still does before it leaves (the last output, the status socket's removal,
/// the report), and [`release`] only reaps it. A rank started after this (none is,
/// at the end of a run) would run without a keeper.
pub fn dismiss() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    match std::mem::replace(&mut *k, State::Gone) {
        State::Running(pipe, pid) => {
            // Killed before the pipe closes: it never sees an end-of-file without `done`.
            crate::proc::signal_pid(pid, libc::SIGKILL);
            *k = State::Dismissed(pipe, pid);
        }
        other => *k = other,
    }
}

/// The clean end: the keeper has nothing to do, and is killed (`SIGKILL`, unless [`dismiss`]
/// did) and reaped at once. (Telling it `done` and waiting for it to leave would make a run
/// wait for the keeper to read it.)
pub fn release() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    let (pipe, pid) = match std::mem::replace(&mut *k, State::Gone) {
        State::Running(pipe, pid) => {
            // Killed before the pipe closes: it never sees an end-of-file without `done`.
            crate::proc::signal_pid(pid, libc::SIGKILL);
            (pipe, pid)
        }
        State::Dismissed(pipe, pid) => (pipe, pid),
        _ => return,
    };
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let wait = || rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        while matches!(wait(), Err(rustix::io::Errno::INTR)) {}
    }
    crate::proc::not_a_rank(0);
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

/// `kauri --keeper TOKEN GRACE_MS`: the keeper ([`exec_keeper`]). Returns its exit status.
pub fn run(args: &[String]) -> i32 {
    let (Some(token), Some(grace)) = (args.first(), args.get(1).and_then(|g| g.parse().ok()))
    else {
        say!("kauri --keeper: internal: TOKEN GRACE_MS expected");
        return 2;
    };
    keep(token, Duration::from_millis(grace))
}

/// The keeper's own body: reads its starter's lines on stdin until `done` (returns at once)
/// or the end of the pipe (its starter died: it ends the run's processes). Returns its exit
/// status.
fn keep(token: &str, grace: Duration) -> i32 {
    // SAFETY: prctl, sigprocmask, signal and close_range take plain numbers, a
    // NUL-terminated name and an empty set; this process has one thread.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"ranks-keeper".as_ptr());
        // Back to the defaults, whatever the starter had.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for sig in TERMINAL_SIGNALS {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Anything kauri's own parent left open without close-on-exec: the keeper holds
        // nothing of the run but its pipe.
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
        // A stopped process gets SIGCONT to see its SIGTERM.
        crate::proc::signal_pid(pid, libc::SIGTERM);
        crate::proc::signal_pid(pid, libc::SIGCONT);
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
            crate::proc::signal_pid(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The living processes of this user (but this one) in a session or process group one of
/// `ranks` leads, or with `needle` (`KAURI_KEEPER=TOKEN`) in their environment.
fn run_processes(needle: &str, ranks: &[u32]) -> Vec<u32> {
    let uid = rustix::process::getuid().as_raw();
    let me = rustix::process::getpid().as_raw_pid() as u32;
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
        let Some(st) = crate::proc::Stat::read(pid) else {
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
        assert_eq!(c"ranks-keeper".to_str(), Ok(super::NAME));
        // A process name holds 15 bytes.
        assert!(super::NAME.len() <= 15);
    }
}
