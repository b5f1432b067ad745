//! Rank processes: finding the program, building the environment, starting it with its PMI
//! socket and stdio pipes in a process group of its own, and killing what is left.
//!
//! Every rank leads its own process group in kauri's session (as mpirun's ranks do), so a
//! signal reaches the rank and whatever it started; if the process that started it dies
//! without its teardown, the keeper ends it ([`crate::keeper`]). The start itself is
//! [`crate::spawn`]'s. Nothing here knows about PMI messages or jobs.

use rustix::process::{
    kill_process, kill_process_group, pidfd_open, waitpid, Pid, PidfdFlags, Signal, WaitOptions,
};
use rustix::thread::CpuSet;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// Set once this process has been refused a file descriptor (`EMFILE`, `ENFILE`). The fact is
/// the process's, not one failure's: what fails after it (a link to an agent that drops, an
/// agent's launch, a host's ranks) is most likely a consequence, reported by a layer that
/// never saw the `io::Error` that said so, and [`fd_cause`] names the cause first on that
/// layer's line. It is set only from an error's kind ([`is_out_of_fds`]).
static OUT_OF_FDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True when `e` says this process (`EMFILE`) or the system (`ENFILE`) is out of file
/// descriptors.
pub fn is_out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Records that this process ran out of file descriptors ([`OUT_OF_FDS`]).
pub fn note_out_of_fds() {
    OUT_OF_FDS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Records `e` if it says this process or the system is out of file descriptors
/// ([`is_out_of_fds`]); true when it does. Everything that fails after that is most likely a
/// consequence, and [`fd_cause`] says so first.
pub fn note_fd_error(e: &io::Error) -> bool {
    let out = is_out_of_fds(e);
    if out {
        note_out_of_fds();
    }
    out
}

/// `out of file descriptors (ulimit -n is N)` once this process ran out of them (see
/// [`note_fd_error`]).
pub fn fd_exhaustion() -> Option<String> {
    if !OUT_OF_FDS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    Some(
        match rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            Some(n) => format!("out of file descriptors (ulimit -n is {n})"),
            None => "out of file descriptors".to_string(),
        },
    )
}

/// The line for failure `what`, led by the cause when this process ran out of file
/// descriptors: one line that names the limit first and the failure it caused after. The
/// cause is named here alone (no error's own line carries it), so it is said once.
pub fn fd_cause(what: impl std::fmt::Display) -> String {
    match fd_exhaustion() {
        Some(cause) => format!("{cause}: {what}"),
        None => what.to_string(),
    }
}

/// How to start one rank.
#[derive(Debug)]
pub struct Launch {
    /// The resolved program.
    pub program: PathBuf,
    /// `argv[0]` as the user typed it.
    pub argv0: OsString,
    /// The arguments.
    pub args: Vec<OsString>,
    /// The whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub wdir: PathBuf,
    /// The rank's end of its PMI socket, inherited under its own number (`PMI_FD`).
    pub pmi_fd: Option<OwnedFd>,
    /// Give the rank a pipe as stdin (rank 0); otherwise `/dev/null`.
    pub stdin: bool,
    /// Bind the rank to these CPUs (from its start: [`crate::spawn`]); `None`: inherit.
    pub cpus: Option<CpuSet>,
    /// Give the rank a pseudo-terminal as stdout instead of a pipe ([`open_pty`]).
    pub pty: bool,
    /// Give the rank its stdout as its stderr too (`--merge-stderr-to-stdout`): its stderr
    /// pipe then ends at once.
    pub merge_stderr: bool,
}

#[cfg(test)]
impl Launch {
    /// `program` with `args` and nothing else, for the tests: no environment, in `/`, no
    /// PMI socket, `/dev/null` for stdin, unbound, pipes for stdout and stderr.
    pub(crate) fn plain(program: &str, args: &[&str]) -> Launch {
        Launch {
            program: program.into(),
            argv0: program.into(),
            args: args.iter().map(OsString::from).collect(),
            env: vec![],
            wdir: "/".into(),
            pmi_fd: None,
            stdin: false,
            cpus: None,
            pty: false,
            merge_stderr: false,
        }
    }
}

/// A started rank: its pid, the parent's ends of its stdio pipes, and a way to await its end.
#[derive(Debug)]
pub struct Child {
    /// The process id, which is also its process group id.
    pub pid: u32,
    /// Its stdout.
    pub stdout: Output,
    /// Its stderr.
    pub stderr: pipe::Receiver,
    /// Its stdin, for rank 0.
    pub stdin: Option<pipe::Sender>,
    /// Resolves when the process ends.
    pub exit: ExitWatch,
}

/// Awaits one child's end through a pidfd, so no global `SIGCHLD` reaper is needed and no
/// other child of kauri is reaped by mistake.
#[derive(Debug)]
pub struct ExitWatch {
    pid: Pid,
    pidfd: AsyncFd<OwnedFd>,
}

impl ExitWatch {
    /// Waits for the process to end and reaps it.
    pub async fn wait(self) -> ExitStatus {
        loop {
            match waitpid(Some(self.pid), WaitOptions::NOHANG) {
                Ok(Some((_, status))) => return ExitStatus::from_raw(status.as_raw()),
                Ok(None) => {}
                Err(rustix::io::Errno::INTR) => continue,
                // ECHILD: reaped elsewhere or never ours.
                Err(_) => return ExitStatus::from_raw(255 << 8),
            }
            match self.pidfd.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
    }
}

impl ExitWatch {
    /// Waits for the process to end and reaps it, blocking the thread: for a process that was
    /// just sent `SIGKILL`, whose end is a matter of moments.
    pub fn wait_blocking(self) -> ExitStatus {
        loop {
            match waitpid(Some(self.pid), WaitOptions::empty()) {
                Ok(Some((_, status))) => return ExitStatus::from_raw(status.as_raw()),
                Err(rustix::io::Errno::INTR) => {}
                Ok(None) | Err(_) => return ExitStatus::from_raw(255 << 8),
            }
        }
    }
}

/// A pseudo-terminal for a rank's stdout: the master (kauri's end, close-on-exec,
/// non-blocking) and the terminal's own end, which the rank gets as its stdout. Output passes
/// unchanged (no `\n` becomes `\r\n`: the terminal's output processing is off) and nothing
/// is echoed; the rank does not make it its controlling terminal (`O_NOCTTY`; it is no
/// session's leader).
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, unlockpt, OpenptFlags};
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions, OutputModes};
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    rustix::fs::fcntl_setfl(&master, rustix::fs::OFlags::NONBLOCK)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    // The terminal's end, opened by the master (no name to look up), close-on-exec and
    // without making it a controlling terminal.
    let slave = ioctl_tiocgptpeer(&master, flags)?;
    let mut t = tcgetattr(&slave)?;
    t.output_modes -= OutputModes::OPOST;
    t.local_modes -= LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG | LocalModes::IEXTEN;
    tcsetattr(&slave, OptionalActions::Now, &t)?;
    Ok((master, slave))
}

/// A rank's stdout, as kauri reads it: a pipe, or the master of its pseudo-terminal.
#[derive(Debug)]
pub enum Output {
    /// A pipe's reading end.
    Pipe(pipe::Receiver),
    /// A pseudo-terminal's master: once every process holding the terminal's end has closed
    /// it, a read fails with `EIO`, which is its end of file.
    Pty(AsyncFd<OwnedFd>),
}

impl tokio::io::AsyncRead for Output {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        match self.get_mut() {
            Output::Pipe(p) => std::pin::Pin::new(p).poll_read(cx, buf),
            Output::Pty(fd) => loop {
                let mut guard = match fd.poll_read_ready(cx) {
                    Poll::Ready(Ok(g)) => g,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                };
                let unfilled = buf.initialize_unfilled();
                let read = guard.try_io(|inner| Ok(rustix::io::read(inner, &mut *unfilled)?));
                match read {
                    Ok(Ok(n)) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    // The terminal's end is closed everywhere: the end of the output.
                    Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(e)) => return Poll::Ready(Err(e)),
                    Err(_would_block) => continue,
                }
            },
        }
    }
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// kauri's ends of a rank's stdio: the reading ends of its stdout and stderr and, for rank 0,
/// the writing end of its stdin.
#[derive(Debug)]
pub(crate) struct Ends {
    stdout: OwnedFd,
    /// `stdout` is a pseudo-terminal's master.
    pty: bool,
    stderr: OwnedFd,
    stdin: Option<OwnedFd>,
}

/// The rank's own ends of its stdio, which it gets as descriptors 0, 1 and 2: closed here
/// once it started.
pub(crate) struct ChildEnds {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// Makes a rank's stdio pipes, with a pipe for its stdin when `stdin` is set (else
/// `/dev/null`), and a pseudo-terminal for its stdout when `pty` is: kauri's ends and the
/// rank's.
pub(crate) fn stdio_pipes(stdin: bool, pty: bool) -> io::Result<(Ends, ChildEnds)> {
    let (out_r, out_w) = if pty { open_pty()? } else { cloexec_pipe()? };
    let (err_r, err_w) = cloexec_pipe()?;
    let (in_r, in_w) = if stdin {
        let (r, w) = cloexec_pipe()?;
        (r, Some(w))
    } else {
        let null = std::fs::File::open("/dev/null")?;
        (OwnedFd::from(null), None)
    };
    let ends = Ends {
        stdout: out_r,
        pty,
        stderr: err_r,
        stdin: in_w,
    };
    let child = ChildEnds {
        stdin: in_r,
        stdout: out_w,
        stderr: err_w,
    };
    Ok((ends, child))
}

/// A pidfd for child `pid`; a child that cannot be watched is killed and reaped.
fn pidfd_of(pid: Pid) -> io::Result<OwnedFd> {
    pidfd_open(pid, PidfdFlags::empty()).map_err(|e| {
        kill_and_reap(pid);
        e.into()
    })
}

/// Kills child `pid` and reaps it, so it does not linger.
fn kill_and_reap(pid: Pid) {
    let _ = kill_process(pid, Signal::KILL);
    let _ = waitpid(Some(pid), WaitOptions::empty());
}

/// A rank started ([`crate::spawn`]), its descriptors not yet registered with the
/// runtime's poller. Dropped without [`Forked::watch`], the rank is killed with its process
/// group and reaped: a start given up leaves nothing.
#[derive(Debug)]
pub struct Forked(Option<Started>);

/// What [`Forked`] holds.
#[derive(Debug)]
struct Started {
    pid: Pid,
    pidfd: OwnedFd,
    io: Ends,
}

impl Forked {
    /// Child `pid`, just started (the caller closes the rank's ends of its stdio): kauri's
    /// ends, `io`, and a pidfd for it. A child that cannot be watched is killed and reaped.
    pub(crate) fn started(pid: Pid, io: Ends) -> io::Result<Forked> {
        let pidfd = pidfd_of(pid)?;
        Ok(Forked(Some(Started { pid, pidfd, io })))
    }

    /// The process id, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, |s| s.pid.as_raw_pid() as u32)
    }

    /// Inside the runtime: the rank's pidfd and pipes registered with the poller. A rank
    /// that cannot be watched is killed and reaped.
    pub fn watch(mut self) -> io::Result<Child> {
        let Some(s) = self.0.take() else {
            return Err(io::Error::other("the rank was watched already"));
        };
        let Started {
            pid,
            pidfd,
            io:
                Ends {
                    stdout,
                    pty,
                    stderr,
                    stdin,
                },
        } = s;
        let registered = (|| {
            // SAFETY: `register` needs the descriptor to stay open for as long as the
            // AsyncFd lives; the AsyncFd owns the OwnedFd, which closes it only when the
            // AsyncFd is dropped.
            let pidfd =
                unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)?;
            let stdout = if pty {
                // SAFETY: as for the pidfd: the AsyncFd owns the descriptor it watches.
                let master = unsafe {
                    AsyncFd::register_with_interest(stdout, tokio::io::Interest::READABLE)
                }
                .map_err(|e| e.into_parts().1)?;
                Output::Pty(master)
            } else {
                Output::Pipe(pipe::Receiver::from_owned_fd(stdout)?)
            };
            Ok::<_, io::Error>((
                pidfd,
                stdout,
                pipe::Receiver::from_owned_fd(stderr)?,
                stdin.map(pipe::Sender::from_owned_fd).transpose()?,
            ))
        })();
        match registered {
            Ok((pidfd, stdout, stderr, stdin)) => Ok(Child {
                pid: pid.as_raw_pid() as u32,
                stdout,
                stderr,
                stdin,
                exit: ExitWatch { pid, pidfd },
            }),
            Err(e) => {
                kill_and_reap(pid);
                crate::keeper::reaped(pid.as_raw_pid() as u32);
                Err(e)
            }
        }
    }
}

impl Drop for Forked {
    /// Kills the rank (its process group too) and reaps it: a start given up before the
    /// runtime watched it.
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = kill_process_group(s.pid, Signal::KILL);
            kill_and_reap(s.pid);
            crate::keeper::reaped(s.pid.as_raw_pid() as u32);
        }
    }
}

/// Watches a process that is not kauri's child (a singleton that started kauri): its end
/// can be seen through a pidfd, but its exit status belongs to its own parent.
#[derive(Debug)]
pub struct ForeignWatch {
    pidfd: Option<AsyncFd<OwnedFd>>,
}

impl ForeignWatch {
    /// Starts watching `pid`. A process that is already gone gives a watch that ends at once.
    pub fn new(pid: u32) -> ForeignWatch {
        let fd = Pid::from_raw(pid as i32).map(|p| pidfd_open(p, PidfdFlags::empty()));
        let Some(Ok(fd)) = fd else {
            return ForeignWatch { pidfd: None };
        };
        // SAFETY: as in `Forked::watch`: the AsyncFd owns the descriptor for as long as it is
        // registered.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok();
        ForeignWatch { pidfd }
    }

    /// Resolves when the process has ended (a pidfd becomes readable then).
    pub async fn ended(self) {
        if let Some(fd) = self.pidfd {
            let _ = fd.readable().await;
        }
    }
}

/// True when this process has a child, living or a zombie.
fn has_children() -> bool {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let look = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    // ECHILD: none at all. Anything else (children that are running, or an error) counts as
    // "maybe", and the caller looks.
    if matches!(waitid(WaitId::All, look), Err(rustix::io::Errno::CHILD)) {
        return false;
    }
    // The only child may be this process's keeper, which is no rank's descendant: each
    // thread's children are listed in /proc (where the kernel has CONFIG_PROC_CHILDREN).
    let keeper = NOT_A_RANK.load(std::sync::atomic::Ordering::Relaxed);
    if keeper == 0 {
        return true;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return true;
    };
    for t in tasks.flatten() {
        let Ok(kids) = std::fs::read_to_string(t.path().join("children")) else {
            return true;
        };
        if kids.split_whitespace().any(|k| k != keeper.to_string()) {
            return true;
        }
    }
    false
}

/// A child of this process that is no rank's descendant (the keeper, [`crate::keeper`]); 0
/// when none.
static NOT_A_RANK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Tells the sweeps that child `pid` (0: none) is not a rank's descendant, so a process whose
/// only child it is has nothing to sweep.
pub fn not_a_rank(pid: u32) {
    NOT_A_RANK.store(pid, std::sync::atomic::Ordering::Relaxed);
}

/// Sends `sig` to one process (not its group); a process that is gone is not an error.
pub fn signal_pid(pid: u32, sig: i32) {
    if let (Some(pid), Some(sig)) = (Pid::from_raw(pid as i32), Signal::from_named_raw(sig)) {
        let _ = kill_process(pid, sig);
    }
}

/// Sends `sig` to the process group `pgid` (a rank's, whose pid it is); a group that is gone
/// is not an error. A rank leads its group from before its `execve`, and its start returns
/// after that ([`crate::spawn`]), so the group is there from the start.
pub fn signal_group(pgid: u32, sig: i32) {
    if let (Some(pgid), Some(sig)) = (Pid::from_raw(pgid as i32), Signal::from_named_raw(sig)) {
        let _ = kill_process_group(pgid, sig);
    }
}

/// Makes this process the subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`): a process
/// a rank started that outlives it, even one that left the rank's session and group with
/// `setsid` (a daemon), becomes this process's child instead of init's, so
/// [`kill_leftovers`] finds it and nothing outlives the job. Best effort.
///
/// Also takes `SIGCHLD` back to its default disposition: a parent that ignored it (an
/// ignored signal stays ignored across `execve`) would have the kernel reap this process's
/// children at once, and their exit statuses, a failing rank's among them, would be lost.
pub fn become_subreaper() {
    // SAFETY: signal() with SIG_DFL installs no handler; it runs before any child exists.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let done = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    SUBREAPER.store(done.is_ok(), std::sync::atomic::Ordering::Relaxed);
}

/// Set once [`become_subreaper`] succeeded.
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Kills (`SIGKILL`) every process still in one of `pgids` and in our session (every rank
/// leads a process group in it, see [`crate::spawn`]) or in a session the group's leader leads: what ranks
/// left behind; and every child of ours (see [`become_subreaper`]) in a session of its own,
/// which is a process a rank started that escaped with `setsid`. Scans `/proc`, so only
/// groups that still have members are touched. Killed children of ours are reaped, so none
/// is left a zombie. Returns how many processes it killed.
pub fn kill_leftovers(pgids: &[u32]) -> usize {
    sweep(pgids, true)
}

/// What [`kill_leftovers`] does to the groups `pgids` lead, without the sweep of children in
/// sessions of their own: for one job that ended while the run goes on, whose other jobs' ranks
/// may have started such daemons and still use them. A daemon that escaped from it is swept
/// when the run ends.
pub fn kill_groups_left(pgids: &[u32]) -> usize {
    sweep(pgids, false)
}

/// Kills (and reaps) the members of the groups `pgids` lead, and, when `escaped_too`, every
/// child of ours in a session of its own.
fn sweep(pgids: &[u32], escaped_too: bool) -> usize {
    if SUBREAPER.load(std::sync::atomic::Ordering::Relaxed) && !has_children() {
        // Every living descendant of a rank that ended has an ancestor among this process's
        // children: an orphan goes to the nearest subreaper, this process (see
        // `become_subreaper`). No child, nothing left; the scan of /proc is skipped.
        return 0;
    }
    let me = rustix::process::getpid().as_raw_pid();
    let sid = own_session();
    let mut killed = 0;
    let mut reap: Vec<i32> = Vec::new();
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
        let (state, ppid, pgrp, session) = (f.first(), f.get(1), f.get(2), f.get(3));
        let (Some(state), Some(Ok(ppid)), Some(Ok(pgrp)), Some(Ok(session))) = (
            state,
            ppid.map(|s| s.parse::<i32>()),
            pgrp.map(|s| s.parse::<u32>()),
            session.map(|s| s.parse::<i32>()),
        ) else {
            continue;
        };
        let ours = session == sid || session as u32 == pgrp;
        let left = ours && pgids.contains(&pgrp);
        // A child of ours in a session of its own: a rank's descendant that called setsid and
        // was handed to us, the subreaper, when its parent ended. (Agents kauri launches stay
        // in its session; ranks are waited for before this runs.)
        let escaped = escaped_too && ppid == me && session != sid;
        if *state != "Z" && (left || escaped) {
            // A daemon leads its own group, which goes too.
            if escaped {
                signal_group(pid as u32, libc::SIGKILL);
            }
            signal_pid(pid as u32, libc::SIGKILL);
            killed += 1;
        }
        if ppid == me && (left || escaped) {
            reap.push(pid);
        }
    }
    // Our children among them become our zombies: reap them (they die at once; give a busy
    // machine a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while !reap.is_empty() && std::time::Instant::now() < deadline {
        reap.retain(|&pid| {
            Pid::from_raw(pid)
                .is_some_and(|p| matches!(waitpid(Some(p), WaitOptions::NOHANG), Ok(None)))
        });
        if !reap.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    killed
}

/// This process's session id. It is 0 when the session's leader is outside this PID
/// namespace (a container entered with `docker exec`, a CI runner's): not an error, and not
/// a pid, so it is read with libc (rustix's `getsid` takes 0 for a bug and panics).
fn own_session() -> i32 {
    // SAFETY: getsid(0) asks about this process and only answers.
    unsafe { libc::getsid(0) }
}

/// The fields of `/proc/PID/stat` the sweeps need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`, …
    pub state: char,
    /// The parent's pid.
    pub ppid: u32,
    /// The process group.
    pub pgrp: u32,
    /// The session.
    pub session: u32,
}

impl Stat {
    /// Reads process `pid`'s; `None` if it is gone or unreadable.
    pub fn read(pid: u32) -> Option<Stat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command (which may hold spaces) start after the last ')'.
        let rest = stat.rsplit_once(')')?.1;
        let mut f = rest.split_whitespace();
        let state = f.next()?.chars().next()?;
        let mut num = || f.next()?.parse::<u32>().ok();
        Some(Stat {
            state,
            ppid: num()?,
            pgrp: num()?,
            session: num()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: String, env: Vec<(OsString, OsString)>) -> Launch {
        Launch {
            env,
            ..Launch::plain("/bin/sh", &["-c", &script])
        }
    }

    /// A rank signalled as soon as its start returns gets the signal, with its group.
    #[tokio::test]
    async fn a_rank_signalled_right_after_its_start_gets_the_signal() {
        let mut starts = crate::spawn::Starts::new(None);
        for _ in 0..20 {
            starts.start(sh("exec sleep 30".into(), vec![])).unwrap();
        }
        while let Some(child) = starts.next().await {
            let child = child.unwrap().watch().unwrap();
            signal_group(child.pid, libc::SIGKILL);
            let st = tokio::time::timeout(std::time::Duration::from_secs(10), child.exit.wait())
                .await
                .expect("the rank outlived its SIGKILL");
            assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
        }
    }

    /// Children started back to back, none yet reaped: each runs what it was given (its own
    /// argument and environment) and exits with its own code.
    #[tokio::test]
    async fn children_started_together_each_run_their_own_plan() {
        let mut starts = crate::spawn::Starts::new(None);
        for i in 0..64 {
            let env = vec![("X".into(), (i * 2).to_string().into())];
            starts.start(sh(format!("exit $((X + {i}))"), env)).unwrap();
        }
        let mut children = Vec::new();
        while let Some(child) = starts.next().await {
            children.push(child.unwrap().watch().unwrap());
        }
        for (i, child) in children.into_iter().enumerate() {
            let st = tokio::time::timeout(std::time::Duration::from_secs(60), child.exit.wait())
                .await
                .expect("a child did not end");
            assert_eq!(st.code(), Some(i as i32 * 3), "child {i}: {st:?}");
        }
    }

    #[test]
    fn foreign_wiring_is_recognised() {
        assert!(kauri_core::plan::rank_env::is_foreign_wiring("PMI_FD"));
        assert!(kauri_core::plan::rank_env::is_foreign_wiring("PMIX_RANK"));
        assert!(kauri_core::plan::rank_env::is_foreign_wiring(
            "OMPI_COMM_WORLD_RANK"
        ));
        assert!(!kauri_core::plan::rank_env::is_foreign_wiring("PMI_DEBUG"));
        assert!(!kauri_core::plan::rank_env::is_foreign_wiring("PATH"));
    }
}
