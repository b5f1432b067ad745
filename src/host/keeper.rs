//! The keeper: a small process that ends this host's ranks, and everything they started, if
//! the process that started them (kauri, or a `kauri agent`) dies without its teardown, even
//! by `SIGKILL`.
//!
//! Why a process apart: kauri's own teardown (the `SIGTERM`, the grace, the `SIGKILL` of the
//! ranks' process groups, the subreaper's sweep of escaped daemons, [`crate::host::proc`]) runs in
//! kauri, and dies with it. `PR_SET_PDEATHSIG` reaches only a rank itself, not what it
//! started, and those went to init and ran on (issue #30; Hydra leaves nothing). Something
//! that outlives the starter must end them. The keeper is that survivor: one per process
//! that starts ranks, started once (with the first rank, not per rank), `/proc/self/exe
//! --keeper TOKEN GRACE_MS` (this very binary, even if its file was replaced since), in a
//! process group of its own (a `^C` or a hang-up to the terminal's group does not reach it,
//! and it ignores both anyway), with a pipe on its stdin and `/dev/null` on the rest; it
//! closes every other descriptor it inherited, so `kauri … | cat` still sees its end.
//!
//! The starter writes `+PID` for each rank it starts and `-PID` when it reaped it; at a clean
//! end it kills the keeper (`SIGKILL`) and reaps it ([`release`]), so no keeper outlives a
//! clean run. The keeper only reads: on `done` it exits at once (a starter that wants it
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
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The variable every rank gets (`KAURI_KEEPER=TOKEN`): what the keeper looks for in the
/// environment of the processes it ends.
pub const VAR: &str = "KAURI_KEEPER";

/// The hidden subcommand that runs a keeper (`kauri --keeper TOKEN GRACE_MS`).
pub const SUBCOMMAND: &str = "--keeper";

/// The keeper of this process, once started.
enum State {
    /// None started yet.
    NotYet,
    /// Running: the pipe to it and the child to reap.
    Running(ChildStdin, Child),
    /// It could not be started, or was released: do not try again.
    Gone,
}

static KEEPER: Mutex<State> = Mutex::new(State::NotYet);

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
/// `SIGTERM` and its `SIGKILL`. Best effort: a keeper that cannot be started is one warning,
/// and the job runs as before without it.
pub fn ensure(grace: Duration) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(*k, State::NotYet) {
        return;
    }
    // /proc/self/exe: this very binary, even if its file was replaced or removed since.
    let started = Command::new("/proc/self/exe")
        .arg(SUBCOMMAND)
        .arg(token())
        .arg(grace.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    *k = match started {
        Ok(mut child) => match child.stdin.take() {
            Some(pipe) => {
                // A keeper that stops reading must not stop kauri: the lines are short
                // (atomic in a pipe), and one that does not fit is dropped.
                // SAFETY: fcntl on a descriptor we own, setting a flag.
                unsafe {
                    let fd = pipe.as_raw_fd();
                    let fl = libc::fcntl(fd, libc::F_GETFL);
                    libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                }
                crate::host::proc::not_a_rank(child.id());
                State::Running(pipe, child)
            }
            None => State::Gone,
        },
        Err(e) => {
            tracing::warn!("cannot start the keeper of this host's ranks: {e}");
            State::Gone
        }
    };
}

fn send(line: &str) {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if let State::Running(pipe, _) = &mut *k {
        let _ = pipe.write_all(line.as_bytes());
    }
}

/// Records a rank started (its pid leads its session and process group).
pub fn started(pid: u32) {
    send(&format!("+{pid}\n"));
}

/// Records a rank reaped: its pid may be reused from now on.
pub fn reaped(pid: u32) {
    send(&format!("-{pid}\n"));
}

/// The clean end: the keeper has nothing to do, and is killed (`SIGKILL`) and reaped at
/// once. (Telling it `done` and waiting for it to leave would make every run wait for the
/// keeper's own start, an exec of this binary, when the job was shorter than that.)
pub fn release() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if let State::Running(pipe, mut child) = std::mem::replace(&mut *k, State::Gone) {
        // Killed before the pipe closes: it never sees an end-of-file without `done`.
        let _ = child.kill();
        let _ = child.wait();
        crate::host::proc::not_a_rank(0);
        drop(pipe);
    }
}

/// An end without the teardown (an agent whose parent is gone kills its ranks' groups and
/// leaves at once): the keeper is left alive, its pipe closed, so it ends what the ranks
/// left (a daemon they started, which would otherwise go to init when this process leaves),
/// on its own, after this process has gone.
pub fn hand_over() {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    // Dropping the pipe is the end-of-file; the child is not waited for.
    *k = State::Gone;
}

/// `kauri --keeper TOKEN GRACE_MS`: the keeper's own body. Returns its exit status.
pub fn run(args: &[String]) -> i32 {
    let (Some(token), Some(grace)) = (args.first(), args.get(1).and_then(|g| g.parse().ok()))
    else {
        say!("kauri --keeper: internal: TOKEN GRACE_MS expected");
        return 2;
    };
    // SAFETY: signal and close_range take plain numbers; this process has one thread.
    unsafe {
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
    end_the_run(token, &ranks, Duration::from_millis(grace));
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
