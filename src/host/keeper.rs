//! The keeper: a small process that ends this host's ranks, and everything they started, if
//! the process that started them (kauri, or a `kauri agent`) dies without its teardown, even
//! by `SIGKILL`.
//!
//! Why a process apart: kauri's own teardown (the `SIGTERM`, the grace, the `SIGKILL` of the
//! ranks' process groups, the subreaper's sweep of escaped daemons, [`crate::host::proc`]) runs in
//! kauri, and dies with it. `PR_SET_PDEATHSIG` reaches only a rank itself, not what it
//! started, and those went to init and ran on (Hydra leaves nothing). Something
//! that outlives the starter must end them. The keeper is that survivor: one per process
//! that starts ranks, started once (once the first ranks of the process are forked, not per
//! rank), named `kauri-keeper` (its `comm`, what `ps -e` and `top` show), in a process group
//! of its own (a `^C` or a hang-up to the terminal's group does not reach it, and it ignores
//! both anyway), with a pipe on its stdin and `/dev/null` on the rest; it closes every other
//! descriptor it inherited, so `kauri … | cat` still sees its end.
//!
//! How it starts: a `clone` that shares the starter's memory ([`clone_keeper`]), as the
//! ranks start ([`crate::host::child`]): nothing is copied, and the keeper, on a small stack
//! of its own, makes raw system calls only ([`keeper_main`]). It sets itself up, then copies
//! what its starter writes into a memory file until the pipe ends (its starter died) or
//! `KAURI_KEEPER_ALONE_AFTER` (1 s) has passed; then it becomes a process of its own, an
//! `execve` of this very binary (`/proc/self/exe --keeper TOKEN GRACE_MS 3`, even if its
//! file was replaced since), which reads those lines from the memory file, then the pipe, and
//! does the work below. So a run shorter than a second pays for no keeper but a `clone`; a
//! fork of kauri's memory (page tables copied, then copy-on-write faults in kauri) cost
//! 0.1-0.2 ms of a one-rank job, and an `exec` about 1 ms of CPU. Why not share for ever: the
//! kernel's out-of-memory killer ends every process sharing the memory of the one it
//! chose, so a kauri it killed would take its keeper with it. Where a child cannot share
//! memory (an architecture without [`crate::host::syscall`]'s own system calls, or a
//! debugger tracing kauri: see [`crate::host::child::choose_start`]), the keeper is that
//! `exec` from the start (`--keeper TOKEN GRACE_MS`).
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
use std::os::unix::ffi::OsStringExt;
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
    let started = if crate::host::child::shares_memory() {
        clone_keeper(grace)
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

/// What a keeper that shares this process's memory ([`clone_keeper`]) reads: built before
/// the clone and never freed (it may read it after this process has died).
struct ClonePlan {
    /// The reading end of the pipe from the starter.
    rd: libc::c_int,
    /// How long it shares this memory before it becomes a process of its own.
    alone_after: libc::timespec,
    /// `/proc/self/exe`, and `kauri --keeper TOKEN GRACE_MS 3` with its `NULL`.
    exe: std::ffi::CString,
    argv: Vec<*const libc::c_char>,
    /// This process's environment when the keeper started, with its `NULL`: the keeper's
    /// own after its `execve`, as a forked one's would be.
    envp: Vec<*const libc::c_char>,
    /// The strings `argv` and `envp` point into.
    _strings: Vec<std::ffi::CString>,
}

/// The descriptor on which a keeper that became a process of its own finds the lines it had
/// read before ([`keeper_main`]), named on its command line.
const EARLY_FD: libc::c_int = 3;

/// How long a keeper shares its starter's memory before it becomes a process of its own:
/// `KAURI_KEEPER_ALONE_AFTER` seconds (default 1). A run shorter than that never pays for
/// the keeper's `exec`.
fn alone_after() -> Duration {
    std::env::var("KAURI_KEEPER_ALONE_AFTER")
        .ok()
        .and_then(|v| crate::plan::knobs::parse_secs(&v))
        .unwrap_or(Duration::from_secs(1))
}

/// Starts the keeper sharing this process's memory (see the module's doc): the pipe's
/// writing end and the keeper's pid.
fn clone_keeper(grace: Duration) -> std::io::Result<(std::fs::File, u32)> {
    use std::ffi::CString;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let alone = alone_after();
    let args: Vec<CString> = [
        "kauri".to_string(),
        SUBCOMMAND.to_string(),
        token().to_string(),
        grace.as_millis().to_string(),
        EARLY_FD.to_string(),
    ]
    .into_iter()
    .map(|a| CString::new(a).map_err(std::io::Error::other))
    .collect::<Result<_, _>>()?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // A copy, not `environ` itself: a `setenv` here later could free the array the keeper
    // would read.
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect();
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let plan = Box::leak(Box::new(ClonePlan {
        rd: rd.as_raw_fd(),
        alone_after: libc::timespec {
            tv_sec: alone.as_secs() as libc::time_t,
            tv_nsec: alone.subsec_nanos() as libc::c_long,
        },
        exe: c"/proc/self/exe".to_owned(),
        argv,
        envp,
        _strings: args.into_iter().chain(env).collect(),
    }));
    // Its stack is never given back: the keeper may run on it after this process has died.
    let stack = crate::host::child::Stack::take()?;
    let arg = plan as *mut ClonePlan as *mut libc::c_void;
    // SAFETY: keeper_main makes raw system calls only, reading the leaked plan, on a stack
    // that is never given back.
    let pid = unsafe { crate::host::child::clone_with(keeper_main, arg, &stack, libc::CLONE_VM)? };
    drop(rd);
    Ok((std::fs::File::from(wr), pid as u32))
}

/// The keeper while it shares its starter's memory ([`clone_keeper`]): raw system calls
/// only, as in [`crate::host::child`]'s rank start (no C library call, which would write the
/// starter's `errno`; no allocation, whose locks are the starter's). It sets itself up as
/// [`keep`] does, then copies what the starter writes into a memory file, until the pipe
/// ends (its starter died) or [`alone_after`] has passed; then it becomes a process of its
/// own, `kauri --keeper TOKEN GRACE_MS 3` (`execve`, with the memory file on descriptor 3),
/// which reads those lines, then the pipe, as a keeper started by `exec` does. Until the
/// `execve`, a rank's death or the starter's touches nothing here but this stack.
extern "C" fn keeper_main(plan: *mut libc::c_void) -> libc::c_int {
    use crate::host::syscall::raw;
    // SAFETY: `plan` is the leaked ClonePlan; every call below is a system call on it, on
    // this stack, or on plain numbers.
    unsafe {
        let p = &*(plan as *const ClonePlan);
        keeper_setup(p);
        copy_lines(p.alone_after);
        raw(
            libc::SYS_lseek,
            [EARLY_FD as usize, 0, libc::SEEK_SET as usize, 0, 0, 0],
        );
        let (exe, argv, envp) = (p.exe.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        raw(
            libc::SYS_execve,
            [exe as usize, argv as usize, envp as usize, 0, 0, 0],
        );
        loop {
            raw(libc::SYS_exit, [127, 0, 0, 0, 0, 0]);
        }
    }
}

/// The shared keeper's start: the signals a keeper ignores, its name, its pipe (`p.rd`) as
/// stdin and `/dev/null` as stdout and stderr, a process group of its own, no other
/// descriptor, and the memory file for the lines at [`EARLY_FD`].
///
/// # Safety
/// Only for [`keeper_main`]: raw system calls that change the calling process.
unsafe fn keeper_setup(p: &ClonePlan) {
    use crate::host::syscall::{raw, KernelSigaction};
    // SAFETY: system calls on this stack's values, static strings and plain numbers.
    unsafe {
        crate::host::child::reset_signals();
        let ign = KernelSigaction {
            handler: libc::SIG_IGN,
            ..KernelSigaction::default()
        };
        for sig in TERMINAL_SIGNALS {
            let ign = &ign as *const KernelSigaction as usize;
            raw(libc::SYS_rt_sigaction, [sig as usize, ign, 0, 8, 0, 0]);
        }
        let none: u64 = 0;
        let none = &none as *const u64 as usize;
        raw(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_SETMASK as usize, none, 0, 8, 0, 0],
        );
        let name = c"kauri-keeper".as_ptr() as usize;
        raw(
            libc::SYS_prctl,
            [libc::PR_SET_NAME as usize, name, 0, 0, 0, 0],
        );
        crate::host::child::child_dup(p.rd, 0);
        let null = c"/dev/null".as_ptr() as usize;
        let at = libc::AT_FDCWD as usize;
        let null = raw(libc::SYS_openat, [at, null, libc::O_RDWR as usize, 0, 0, 0]);
        if null >= 0 {
            crate::host::child::child_dup(null as libc::c_int, 1);
            crate::host::child::child_dup(null as libc::c_int, 2);
        }
        raw(libc::SYS_setpgid, [0; 6]);
        raw(libc::SYS_close_range, [3, u32::MAX as usize, 0, 0, 0, 0]);
        let mem = raw(
            libc::SYS_memfd_create,
            [c"kauri-keeper".as_ptr() as usize, 0, 0, 0, 0, 0],
        );
        if mem >= 0 && mem != EARLY_FD as isize {
            crate::host::child::child_dup(mem as libc::c_int, EARLY_FD);
        }
    }
}

/// Copies what comes on stdin (kauri's `+PID`/`-PID` lines) into [`EARLY_FD`] until stdin
/// ends (kauri died) or `left` has passed.
///
/// # Safety
/// Only for [`keeper_main`], after [`keeper_setup`]: raw system calls on this stack.
unsafe fn copy_lines(mut left: libc::timespec) {
    use crate::host::syscall::raw;
    let mut buf = [0u8; 4096];
    loop {
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let pfd = &mut pfd as *mut libc::pollfd as usize;
        // ppoll counts `left` down by the time it waited.
        let tmo = &mut left as *mut libc::timespec as usize;
        // SAFETY: ppoll on one pollfd and a timespec of this stack.
        let r = unsafe { raw(libc::SYS_ppoll, [pfd, 1, tmo, 0, 8, 0]) };
        if r == -(libc::EINTR as isize) {
            continue;
        }
        if r <= 0 {
            break; // the time is up (or polling failed): alone now
        }
        // SAFETY: read into this stack's buffer, within its length.
        let n = unsafe {
            raw(
                libc::SYS_read,
                [0, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
            )
        };
        if n == -(libc::EINTR as isize) || n == -(libc::EAGAIN as isize) {
            continue;
        }
        if n <= 0 {
            break; // the starter died
        }
        let mut done = 0;
        while done < n as usize {
            let at = buf.as_ptr() as usize + done;
            // SAFETY: write from this stack's buffer, within what was read.
            let w = unsafe {
                raw(
                    libc::SYS_write,
                    [EARLY_FD as usize, at, n as usize - done, 0, 0, 0],
                )
            };
            if w <= 0 {
                break;
            }
            done += w as usize;
        }
    }
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
/// (for one that became a process of its own, the release of its memory) then overlaps what
/// this process still does before it leaves (the last output, the status socket's removal,
/// the report), and [`release`] only reaps it. A rank started after this (none is,
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
/// did) and reaped at once. (Telling it `done` and waiting for it to leave would make a run
/// wait for the keeper to read it, and a keeper that shares this memory to `exec` first.)
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

/// `kauri --keeper TOKEN GRACE_MS [FD]`: the keeper started by `exec` ([`exec_keeper`]), or
/// one that became a process of its own ([`keeper_main`]), whose starter's earlier lines are
/// on descriptor `FD`. Returns its exit status.
pub fn run(args: &[String]) -> i32 {
    let (Some(token), Some(grace)) = (args.first(), args.get(1).and_then(|g| g.parse().ok()))
    else {
        say!("kauri --keeper: internal: TOKEN GRACE_MS [FD] expected");
        return 2;
    };
    let mut early = Vec::new();
    if let Some(fd) = args.get(2).and_then(|f| f.parse::<libc::c_int>().ok()) {
        // SAFETY: fcntl only asks whether `fd` is open.
        if fd > 2 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            // SAFETY: the descriptor is open, and this process's from now on (its keeper
            // handed it over on its command line).
            let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
            let _ = std::io::Read::read_to_end(&mut file, &mut early);
        }
    }
    keep(token, &early, Duration::from_millis(grace))
}

/// The keeper's own body, however it started: reads its starter's lines (`early` first, then
/// stdin) until `done` (returns at once) or the end of the pipe (its starter died: it ends
/// the run's processes). Returns its exit status.
fn keep(token: &str, early: &[u8], grace: Duration) -> i32 {
    // SAFETY: prctl, sigprocmask, signal and close_range take plain numbers, a
    // NUL-terminated name and an empty set; this process has one thread.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"kauri-keeper".as_ptr());
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
    for line in std::io::Read::chain(early, stdin.lock()).lines() {
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
