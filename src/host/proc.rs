//! Rank processes: finding the program, building the environment, starting it with its PMI
//! socket and stdio pipes in a process group of its own, and killing what is left.
//!
//! Every rank leads its own process group in kauri's session (as mpirun's ranks do), so a
//! signal reaches the rank and whatever it started, and it dies with `SIGKILL` if the agent that started it disappears
//! (`PR_SET_PDEATHSIG`). Nothing here knows about PMI messages or jobs.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

pub use crate::host::child::choose_start;
use crate::host::child::{clone_child, ChildPlan, Pinned, Stack};

/// Set once this process has been refused a file descriptor (`EMFILE`, `ENFILE`).
static OUT_OF_FDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records `e` if it says this process (`EMFILE`) or the system (`ENFILE`) is out of file
/// descriptors; true when it does. Everything that fails after that is most likely a
/// consequence, and [`fd_cause`] says so first.
pub fn note_fd_error(e: &io::Error) -> bool {
    let out = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    if out {
        OUT_OF_FDS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    out
}

/// `out of file descriptors (ulimit -n is N)` once this process ran out of them (see
/// [`note_fd_error`]).
pub fn fd_exhaustion() -> Option<String> {
    if !OUT_OF_FDS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    Some(if rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY {
        format!("out of file descriptors (ulimit -n is {})", lim.rlim_cur)
    } else {
        "out of file descriptors".to_string()
    })
}

/// `what`, led by the cause when this process ran out of file descriptors: one line that
/// names the limit first and the failure it caused after.
pub fn fd_cause(what: String) -> String {
    match fd_exhaustion() {
        Some(cause) if !what.starts_with("out of file descriptors") => format!("{cause}: {what}"),
        _ => what,
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
    /// Bind the rank to these CPUs (`sched_setaffinity` before exec); `None`: inherit.
    pub cpus: Option<libc::cpu_set_t>,
    /// Give the rank a pseudo-terminal as stdout instead of a pipe ([`open_pty`]).
    pub pty: bool,
    /// Give the rank its stdout as its stderr too (`--merge-stderr-to-stdout`): its stderr
    /// pipe then ends at once.
    pub merge_stderr: bool,
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
    pid: libc::pid_t,
    pidfd: AsyncFd<OwnedFd>,
    /// What the child may use of kauri's memory until it is reaped.
    pinned: Pinned,
}

impl ExitWatch {
    /// Waits for the process to end and reaps it.
    pub async fn wait(mut self) -> ExitStatus {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local integer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                self.pinned.release();
                return ExitStatus::from_raw(status);
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    // ECHILD: reaped elsewhere (it can no longer run) or never ours.
                    if e.raw_os_error() == Some(libc::ECHILD) {
                        self.pinned.release();
                    }
                    return ExitStatus::from_raw(255 << 8);
                }
                continue;
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
    pub fn wait_blocking(mut self) -> ExitStatus {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local integer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                self.pinned.release();
                return ExitStatus::from_raw(status);
            }
            if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return ExitStatus::from_raw(255 << 8);
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
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: posix_openpt takes flags and returns a new descriptor or -1.
    let m = unsafe { libc::posix_openpt(flags) };
    if m < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: m is a new descriptor nobody else owns.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    // SAFETY: grantpt and unlockpt take the master's descriptor; TIOCGPTPEER opens the
    // terminal's end by the master (no name to look up), close-on-exec and without making
    // it a controlling terminal.
    let slave = unsafe {
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::ioctl(
            m,
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: slave is a new descriptor nobody else owns.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    // SAFETY: termios is plain data; tcgetattr fills it and tcsetattr reads it.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(slave.as_raw_fd(), &mut t) != 0 {
            return Err(io::Error::last_os_error());
        }
        t.c_oflag &= !libc::OPOST;
        t.c_lflag &= !(libc::ECHO | libc::ICANON | libc::ISIG | libc::IEXTEN);
        if libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
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
                let read = guard.try_io(|inner| {
                    // SAFETY: unfilled is a valid, writable buffer of its length.
                    let n = unsafe {
                        libc::read(
                            inner.as_raw_fd(),
                            unfilled.as_mut_ptr().cast(),
                            unfilled.len(),
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                });
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
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The strings the child of [`spawn`] execs with, packed: every string NUL-terminated and
/// back to back in one buffer, and the null-terminated pointer arrays (`argv`, the `/bin/sh`
/// fallback's `argv`, `envp`) back to back in one more. The pointers stay valid as the value
/// moves (they point into the buffer's own heap allocation, which never grows once they are
/// taken).
///
/// Two allocations and not a `CString` each: the child reads them in kauri's memory until it
/// execs, so they are kept ([`Pinned`]) until it is reaped, and two allocations per rank cost
/// the allocator less, kept and freed, than fifty.
struct ExecArgs {
    strings: Vec<u8>,
    ptrs: Vec<*const libc::c_char>,
    prog: usize,
    wdir: usize,
    /// `ptrs[..argv]` is `argv`, `ptrs[argv..sh_argv]` the fallback's, the rest `envp`.
    argv: usize,
    sh_argv: usize,
    /// `strings[fail..]`: what the child writes to its stderr when it cannot exec (or cannot
    /// enter its directory); no NUL.
    fail: usize,
}

impl ExecArgs {
    fn at(&self, off: usize) -> *const libc::c_char {
        self.strings[off..].as_ptr().cast()
    }
    fn prog(&self) -> *const libc::c_char {
        self.at(self.prog)
    }
    fn wdir(&self) -> *const libc::c_char {
        self.at(self.wdir)
    }
    fn argv_p(&self) -> &[*const libc::c_char] {
        &self.ptrs[..self.argv]
    }
    fn sh_argv_p(&self) -> &[*const libc::c_char] {
        &self.ptrs[self.argv..self.sh_argv]
    }
    fn envp_p(&self) -> &[*const libc::c_char] {
        &self.ptrs[self.sh_argv..]
    }
    fn fail_msg(&self) -> &[u8] {
        &self.strings[self.fail..]
    }
}

/// Appends `parts` to `buf` as one NUL-terminated string; returns where it starts, or
/// `None` (and leaves `buf` as it was) if a part holds a NUL byte.
fn push_c(buf: &mut Vec<u8>, parts: &[&[u8]]) -> Option<usize> {
    if parts.iter().any(|p| p.contains(&0)) {
        return None;
    }
    let at = buf.len();
    for p in parts {
        buf.extend_from_slice(p);
    }
    buf.push(0);
    Some(at)
}

/// Everything the child touches of `l`'s program, arguments, environment and directory,
/// prepared before the clone. An environment pair with a NUL byte in it is left out; a NUL
/// byte in the program, an argument or the directory is an error.
fn exec_args(l: &Launch) -> io::Result<ExecArgs> {
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a string");
    let fail = format!("kauri: cannot execute {}\n", l.program.display());
    let size = l.program.as_os_str().len()
        + l.argv0.len()
        + l.args.iter().map(|a| a.len() + 1).sum::<usize>()
        + l.env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>()
        + l.wdir.as_os_str().len()
        + fail.len()
        + 16;
    let mut b = Vec::with_capacity(size);
    let prog = push_c(&mut b, &[l.program.as_os_str().as_bytes()]).ok_or_else(nul)?;
    let sh = push_c(&mut b, &[b"/bin/sh"]).ok_or_else(nul)?;
    let wdir = push_c(&mut b, &[l.wdir.as_os_str().as_bytes()]).ok_or_else(nul)?;
    let mut argv = vec![push_c(&mut b, &[l.argv0.as_bytes()]).ok_or_else(nul)?];
    for a in &l.args {
        argv.push(push_c(&mut b, &[a.as_bytes()]).ok_or_else(nul)?);
    }
    let envp: Vec<usize> = l
        .env
        .iter()
        .filter_map(|(k, v)| push_c(&mut b, &[k.as_bytes(), b"=", v.as_bytes()]))
        .collect();
    let fail_at = b.len();
    b.extend_from_slice(fail.as_bytes());
    // The buffer is final: pointers into it stay valid from here on.
    let base = b.as_ptr();
    let p = |off: usize| base.wrapping_add(off).cast::<libc::c_char>();
    let mut ptrs = Vec::with_capacity(argv.len() * 2 + envp.len() + 4);
    ptrs.extend(argv.iter().map(|&o| p(o)));
    ptrs.push(std::ptr::null());
    let argv_end = ptrs.len();
    // For a script without `#!`, exec it with /bin/sh as execvp does.
    ptrs.extend([p(sh), p(prog)]);
    ptrs.extend(argv.iter().skip(1).map(|&o| p(o)));
    ptrs.push(std::ptr::null());
    let sh_end = ptrs.len();
    ptrs.extend(envp.iter().map(|&o| p(o)));
    ptrs.push(std::ptr::null());
    Ok(ExecArgs {
        strings: b,
        ptrs,
        prog,
        wdir,
        argv: argv_end,
        sh_argv: sh_end,
        fail: fail_at,
    })
}

/// A rank's stdio: the parent's ends and the child's, of its stdout and stderr pipes and
/// of its stdin (a pipe for rank 0, `/dev/null` otherwise).
struct Stdio {
    out_r: OwnedFd,
    out_w: OwnedFd,
    err_r: OwnedFd,
    err_w: OwnedFd,
    in_r: OwnedFd,
    in_w: Option<OwnedFd>,
}

/// Makes a rank's stdio pipes, with a pipe for its stdin when `stdin` is set, and a
/// pseudo-terminal for its stdout when `pty` is.
fn stdio_pipes(stdin: bool, pty: bool) -> io::Result<Stdio> {
    let (out_r, out_w) = if pty { open_pty()? } else { cloexec_pipe()? };
    let (err_r, err_w) = cloexec_pipe()?;
    let (in_r, in_w) = if stdin {
        let (r, w) = cloexec_pipe()?;
        (r, Some(w))
    } else {
        let null = std::fs::File::open("/dev/null")?;
        (OwnedFd::from(null), None)
    };
    Ok(Stdio {
        out_r,
        out_w,
        err_r,
        err_w,
        in_r,
        in_w,
    })
}

/// A pidfd for child `pid`; a child that cannot be watched is killed and reaped.
fn pidfd_of(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        let e = io::Error::last_os_error();
        kill_and_reap(pid);
        return Err(e);
    }
    // SAFETY: pidfd_open returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) })
}

/// Kills child `pid` and reaps it, so it does not linger.
fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: the child is ours, not yet reaped; kill and waitpid take plain numbers.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// Starts a rank with a `clone` that forks and an `execve`: everything the child needs is
/// prepared before, the child calls only system calls, and kauri goes on at once, without
/// waiting for the child to be scheduled and exec (it serves the ranks already started
/// meanwhile). A launch of many ranks therefore costs kauri little per rank, and the ranks'
/// own start-up overlaps. The child makes its session (and process group) itself, so a
/// signal for its group may come before the group exists: [`signal_group`] then signals the
/// rank alone.
///
/// Must be called from a thread that lives as long as the rank should (`PR_SET_PDEATHSIG`),
/// inside the runtime ([`fork`] and [`Forked::watch`] are the two halves, for a start
/// before the runtime exists).
pub fn spawn(l: Launch) -> io::Result<Child> {
    fork(l)?.watch()
}

/// The first half of [`spawn`], which needs no runtime: starts the rank and returns its
/// descriptors as they are (made, not yet registered with a poller).
pub fn fork(mut l: Launch) -> io::Result<Forked> {
    // Everything the child touches, prepared now; the launch's own strings are freed before
    // the clone, not after it, when their pages would be copied (see ExecArgs).
    let x = exec_args(&l)?;
    drop((std::mem::take(&mut l.env), std::mem::take(&mut l.args)));
    let io = stdio_pipes(l.stdin, l.pty)?;
    let plan = Box::new(ChildPlan {
        prog: x.prog(),
        argv: x.argv_p().as_ptr(),
        sh_argv: x.sh_argv_p().as_ptr(),
        envp: x.envp_p().as_ptr(),
        wdir: x.wdir(),
        fd_in: io.in_r.as_raw_fd(),
        fd_out: io.out_w.as_raw_fd(),
        fd_err: if l.merge_stderr {
            io.out_w.as_raw_fd()
        } else {
            io.err_w.as_raw_fd()
        },
        pmi: l.pmi_fd.as_ref().map(|f| f.as_raw_fd()),
        cpus: l.cpus,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        fail_msg: x.fail_msg().as_ptr(),
        fail_len: x.fail_msg().len(),
    });
    let stack = Stack::take()?;
    let pid = match clone_child(&plan, &stack) {
        Ok(pid) => pid,
        Err(e) => {
            stack.give_back();
            return Err(e);
        }
    };
    let mut pinned = Pinned::new(stack, Box::new((plan, x)));
    drop((io.out_w, io.err_w, io.in_r, l.pmi_fd));
    let pidfd = match pidfd_of(pid) {
        Ok(fd) => fd,
        Err(e) => {
            // pidfd_of reaped it.
            pinned.release();
            return Err(e);
        }
    };
    Ok(Forked {
        pid,
        pidfd,
        pinned,
        stdout: io.out_r,
        pty: l.pty,
        stderr: io.err_r,
        stdin: io.in_w,
    })
}

/// A rank [`fork`] started, its descriptors not yet registered with the runtime's poller.
#[derive(Debug)]
pub struct Forked {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    pinned: Pinned,
    stdout: OwnedFd,
    /// `stdout` is a pseudo-terminal's master.
    pty: bool,
    stderr: OwnedFd,
    stdin: Option<OwnedFd>,
}

impl Forked {
    /// The process id, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The second half of [`spawn`], inside the runtime: the rank's pidfd and pipes
    /// registered with the poller. A rank that cannot be watched is killed and reaped.
    pub fn watch(self) -> io::Result<Child> {
        let Forked {
            pid,
            pidfd,
            mut pinned,
            stdout,
            pty,
            stderr,
            stdin,
        } = self;
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
                pid: pid as u32,
                stdout,
                stderr,
                stdin,
                exit: ExitWatch { pid, pidfd, pinned },
            }),
            Err(e) => {
                kill_and_reap(pid);
                pinned.release();
                Err(e)
            }
        }
    }

    /// Kills the rank (its process group too) and reaps it: a start abandoned before the
    /// runtime watched it.
    pub fn abandon(mut self) {
        signal_group(self.pid as u32, libc::SIGKILL);
        kill_and_reap(self.pid);
        self.pinned.release();
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
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return ForeignWatch { pidfd: None };
        }
        // SAFETY: pidfd_open returned a new descriptor that nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: as in `spawn`: the AsyncFd owns the descriptor for as long as it is
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
    // SAFETY: waitid with WNOHANG | WNOWAIT writes only `info` and reaps nothing.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // ECHILD: none at all. Anything else (children that are running, or an error) counts as
    // "maybe", and the caller looks.
    if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
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

/// A child of this process that is no rank's descendant (the keeper, [`crate::host::keeper`]); 0
/// when none.
static NOT_A_RANK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Tells the sweeps that child `pid` (0: none) is not a rank's descendant, so a process whose
/// only child it is has nothing to sweep.
pub fn not_a_rank(pid: u32) {
    NOT_A_RANK.store(pid, std::sync::atomic::Ordering::Relaxed);
}

/// Sends `sig` to one process (not its group); a process that is gone is not an error.
pub fn signal_pid(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; a positive pid names one process.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Sends `sig` to the process group `pgid` (a rank's, whose pid it is); a group that is gone
/// is not an error. A rank just started may not have made its group yet (its child side of
/// [`spawn`] calls `setsid`, and [`spawn`] does not wait for it): it is still in this
/// process's group then, and is signalled alone (it has no descendant before its exec).
pub fn signal_group(pgid: u32, sig: i32) {
    let pid = pgid as libc::pid_t;
    // Twice at most: the rank may make its group between the two looks.
    for _ in 0..2 {
        // SAFETY: kill and getpgid have no memory-safety preconditions; a negative pid names a
        // process group.
        unsafe {
            if libc::kill(-pid, sig) == 0
                || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
            {
                return;
            }
            let group = libc::getpgid(pid);
            if group != pid {
                if group >= 0 && group == libc::getpgid(0) {
                    libc::kill(pid, sig);
                }
                return;
            }
        }
    }
}

/// Makes this process the subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`): a process
/// a rank started that outlives it, even one that left the rank's session and group with
/// `setsid` (a daemon), becomes this process's child instead of init's, so
/// [`kill_leftovers`] finds it and nothing outlives the job. Best effort.
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    SUBREAPER.store(rc == 0, std::sync::atomic::Ordering::Relaxed);
}

/// Set once [`become_subreaper`] succeeded.
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Kills (`SIGKILL`) every process still in one of `pgids` and in our session (every rank
/// leads a process group in it, see [`spawn`]) or in a session the group's leader leads: what ranks
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
    // SAFETY: getsid(0) and getpid have no preconditions.
    let (sid, me) = unsafe { (libc::getsid(0), libc::getpid()) };
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
            // SAFETY: see signal_group; a daemon leads its own group, which goes too.
            unsafe {
                if escaped {
                    libc::kill(-pid, libc::SIGKILL);
                }
                libc::kill(pid, libc::SIGKILL);
            }
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
        // SAFETY: waitpid on a pid that is our child, with WNOHANG, writes only `status`.
        reap.retain(|&pid| {
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
        });
        if !reap.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    killed
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

    /// A rank signalled as soon as `spawn` returns, before it can have made its session and
    /// group (`setsid` in the child), still gets the signal.
    #[tokio::test]
    async fn a_rank_signalled_right_after_its_start_gets_the_signal() {
        for _ in 0..20 {
            let child = spawn(Launch {
                program: "/bin/sleep".into(),
                argv0: "sleep".into(),
                args: vec!["30".into()],
                env: vec![],
                wdir: "/".into(),
                pmi_fd: None,
                stdin: false,
                cpus: None,
                pty: false,
                merge_stderr: false,
            })
            .unwrap();
            signal_group(child.pid, libc::SIGKILL);
            let st = tokio::time::timeout(std::time::Duration::from_secs(10), child.exit.wait())
                .await
                .expect("the rank outlived its SIGKILL");
            assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
        }
    }

    /// Children started back to back, none yet reaped, each still reading its own plan and
    /// strings in kauri's memory and running on its own stack until its exec: each runs what
    /// it was given (its own argument and environment) and exits with its own code.
    #[tokio::test]
    async fn children_started_together_each_run_their_own_plan() {
        choose_start(64, crate::host::bind::allowed_cpus().len());
        let children: Vec<_> = (0..64)
            .map(|i| {
                let child = spawn(Launch {
                    program: "/bin/sh".into(),
                    argv0: "sh".into(),
                    args: vec!["-c".into(), format!("exit $((X + {i}))").into()],
                    env: vec![("X".into(), (i * 2).to_string().into())],
                    wdir: "/".into(),
                    pmi_fd: None,
                    stdin: false,
                    cpus: None,
                    pty: false,
                    merge_stderr: false,
                })
                .unwrap();
                (i, child)
            })
            .collect();
        for (i, child) in children {
            let st = tokio::time::timeout(std::time::Duration::from_secs(60), child.exit.wait())
                .await
                .expect("a child did not end");
            assert_eq!(st.code(), Some(i * 3), "child {i}: {st:?}");
        }
    }

    #[test]
    fn foreign_wiring_is_recognised() {
        assert!(crate::plan::rank_env::is_foreign_wiring("PMI_FD"));
        assert!(crate::plan::rank_env::is_foreign_wiring("PMIX_RANK"));
        assert!(crate::plan::rank_env::is_foreign_wiring(
            "OMPI_COMM_WORLD_RANK"
        ));
        assert!(!crate::plan::rank_env::is_foreign_wiring("PMI_DEBUG"));
        assert!(!crate::plan::rank_env::is_foreign_wiring("PATH"));
    }

    #[test]
    fn exec_args_are_null_terminated_and_a_bad_pair_is_left_out() {
        let env = [
            ("A".into(), "1".into()),
            ("B".into(), OsString::from("x\0y")),
            ("C".into(), "".into()),
        ];
        let l = Launch {
            program: "/bin/prog".into(),
            argv0: "prog".into(),
            args: vec!["a".into(), "b".into()],
            env: env.to_vec(),
            wdir: "/tmp".into(),
            pmi_fd: None,
            stdin: false,
            cpus: None,
            pty: false,
            merge_stderr: false,
        };
        let x = exec_args(&l).unwrap();
        // SAFETY: the pointers point into `x`'s strings, alive here.
        let strs = |ps: &[*const libc::c_char]| -> Vec<String> {
            assert!(ps.last().unwrap().is_null());
            ps[..ps.len() - 1]
                .iter()
                .map(|&p| {
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_string_lossy()
                        .into_owned()
                })
                .collect()
        };
        assert_eq!(strs(x.argv_p()), ["prog", "a", "b"]);
        assert_eq!(strs(x.envp_p()), ["A=1", "C="]);
        // /bin/sh runs the program's path, then the arguments after argv[0].
        assert_eq!(strs(x.sh_argv_p()), ["/bin/sh", "/bin/prog", "a", "b"]);
        // SAFETY: as above.
        let path = |p| unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(path(x.prog()), "/bin/prog");
        assert_eq!(path(x.wdir()), "/tmp");
        assert_eq!(x.fail_msg(), b"kauri: cannot execute /bin/prog\n");
        let bad = Launch {
            args: vec!["a\0".into()],
            ..l
        };
        assert!(exec_args(&bad).is_err());
    }
}
