//! Starting ranks: [`THREADS`] threads of this process, `kauri-ranks-N`, start every rank with
//! the C library's `posix_spawn`, so that the event loop, which serves the ranks already
//! started, never waits for a start; the ranks come back to it in the order it queued them.
//!
//! `posix_spawn` (glibc) starts the child with `clone(CLONE_VM | CLONE_VFORK)` on a stack of
//! its own: no page table of kauri is copied, and nothing kauri writes afterwards is copied
//! on write; the calling thread waits until the child has called `execve` (or failed to),
//! which is why the call is made here and not on the event loop, and on two threads: while
//! one waits for a child's `execve`, the other starts the next. In the child, before the
//! `execve`, it does what [`Launch`] asks through its attributes and file actions:
//!
//! * a process group of its own (`POSIX_SPAWN_SETPGROUP`), in kauri's session, as mpirun's
//!   ranks are: with the kernel's autogroup scheduling a session is a scheduling group, and a
//!   rank that yields the CPU while it waits yields it to its own group's tasks (each rank in
//!   a session of its own yielded to nobody: `docs/performance.md`);
//! * no blocked signal (`POSIX_SPAWN_SETSIGMASK`), every caught signal back to its default
//!   (glibc does it for every handler, so none of kauri's runs in the child) and `SIGPIPE`
//!   too (`POSIX_SPAWN_SETSIGDEF`: Rust ignores it, and an ignored signal stays ignored
//!   across `execve`);
//! * stdin, stdout and stderr from its pipes, its PMI socket kept open under its own number
//!   (a `dup2` onto itself clears close-on-exec), its working directory
//!   (`posix_spawn_file_actions_addchdir_np`).
//!
//! What `posix_spawn` cannot do in the child is done around it, on the thread that starts it: the CPUs a
//! rank is bound to are that thread's while it starts the rank (a child inherits the
//! affinity of the thread that starts it, and has it from its first instruction: setting it
//! on the pid afterwards would miss the threads the rank may have started by then). The
//! death signal (`PR_SET_PDEATHSIG`) cannot be given: what ends a rank if kauri dies is its
//! keeper ([`crate::keeper`]), started by one of these threads before the process's first rank.
//!
//! A start that fails in the child (its `execve`, its directory, its binding) gives the user
//! what a failed `execve` gives under a shell: one line on the rank's stderr and an exit
//! status (127; 126 when the directory or the binding failed), from a stand-in (`/bin/sh`
//! printing the line) in the rank's place, so that the job sees a rank that ran and failed.
//! A start that fails before there is a child (no process, no descriptor) is an error.

use crate::proc::{self, Forked, Launch};
use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// How many threads start ranks (`kauri-ranks-0`, `kauri-ranks-1`): `posix_spawn` returns
/// only once its child has called `execve`, so one thread would start ranks strictly one after
/// another; two let one child `exec` on one CPU while the next is being started on the other.
pub const THREADS: usize = 2;

/// The ranks of one host's start, queued for the spawner threads in order ([`Starts::start`])
/// and handed back in the same order ([`Starts::next`]), whichever thread started each.
/// Dropped, it stops what is not started yet; a rank started but not taken is killed and
/// reaped ([`Forked`]'s drop).
pub struct Starts {
    batch: Arc<Batch>,
    rx: mpsc::UnboundedReceiver<(usize, io::Result<Forked>)>,
    /// Those that came back before an earlier one, by their number in the queue.
    early: BTreeMap<usize, io::Result<Forked>>,
    /// Sent to the threads, and handed back so far.
    sent: usize,
    taken: usize,
    /// The keeper's grace ([`crate::keeper::ensure`]), told with the first rank.
    grace: Option<Duration>,
}

/// What the spawner threads share with one [`Starts`].
struct Batch {
    tx: mpsc::UnboundedSender<(usize, io::Result<Forked>)>,
    /// Set when the starts are given up: what is still queued is not started.
    stopped: AtomicBool,
}

/// What a spawner thread is asked to do.
enum Request {
    /// Start this process's keeper, if it has none, with this grace.
    Keeper(Duration),
    /// Start a rank and send the result back, with its number in its batch.
    Start(Box<Launch>, Arc<Batch>, usize),
}

impl Starts {
    /// A host's starts; the process's keeper, with `keeper` as the grace for its ranks, is
    /// started before the first rank (`None`: no keeper, for the tests).
    pub fn new(keeper: Option<Duration>) -> Starts {
        let (tx, rx) = mpsc::unbounded_channel();
        Starts {
            batch: Arc::new(Batch {
                tx,
                stopped: AtomicBool::new(false),
            }),
            rx,
            early: BTreeMap::new(),
            sent: 0,
            taken: 0,
            grace: keeper,
        }
    }

    /// Queues `l` for the spawner threads and returns at once.
    pub fn start(&mut self, l: Launch) -> io::Result<()> {
        let queue = queue()?;
        let gone = || io::Error::other("the thread that starts the ranks is gone");
        if let Some(grace) = self.grace.take() {
            queue.send(Request::Keeper(grace)).map_err(|_| gone())?;
        }
        queue
            .send(Request::Start(Box::new(l), self.batch.clone(), self.sent))
            .map_err(|_| gone())?;
        self.sent += 1;
        Ok(())
    }

    /// The next rank queued, started (or why it could not be); `None` once every one queued
    /// was handed back.
    pub async fn next(&mut self) -> Option<io::Result<Forked>> {
        if self.taken == self.sent {
            return None;
        }
        let n = self.taken;
        self.taken += 1;
        loop {
            if let Some(r) = self.early.remove(&n) {
                return Some(r);
            }
            match self.rx.recv().await {
                Some((i, r)) if i == n => return Some(r),
                Some((i, r)) => {
                    self.early.insert(i, r);
                }
                None => {
                    return Some(Err(io::Error::other(
                        "the thread that starts the ranks is gone",
                    )))
                }
            }
        }
    }

    /// Gives up the starts: what is queued is not started, and every rank started is killed
    /// and reaped, with its process group, before this returns.
    pub async fn abandon(mut self) {
        self.batch.stopped.store(true, Ordering::Relaxed);
        while let Some(r) = self.next().await {
            drop(r);
        }
    }
}

impl Drop for Starts {
    fn drop(&mut self) {
        self.batch.stopped.store(true, Ordering::Relaxed);
    }
}

/// Starts the threads that start the ranks now, if they are not running yet, rather than
/// at the first rank, and has one start this process's keeper with `grace` for its ranks
/// ([`crate::keeper::ensure`]): the caller does not wait for the keeper's start.
pub fn ready(grace: Duration) {
    if let Ok(queue) = queue() {
        let _ = queue.send(Request::Keeper(grace));
    }
}

/// Why the threads that start the ranks could not be made: the first one's failure (with
/// one, every rank starts, only slower). The queue is made once, so every later start is
/// refused with the same error, which the returned `io::Error` carries (with its kind).
#[derive(Debug, thiserror::Error)]
#[error("cannot make the thread that starts the ranks: {source}")]
pub struct ThreadsError {
    /// What the system said.
    #[source]
    pub source: io::Error,
}

impl ThreadsError {
    /// The error a start is refused with: this one, of its system error's kind.
    fn refusal(&'static self) -> io::Error {
        io::Error::new(self.source.kind(), self)
    }
}

/// The spawner threads' queue, started at the first use ([`ready`]).
fn queue() -> io::Result<&'static std_mpsc::Sender<Request>> {
    static QUEUE: OnceLock<Result<std_mpsc::Sender<Request>, ThreadsError>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = std_mpsc::channel::<Request>();
            let rx = Arc::new(Mutex::new(rx));
            let mut made = 0;
            for i in 0..THREADS {
                let rx = rx.clone();
                let t = std::thread::Builder::new()
                    .name(format!("kauri-ranks-{i}"))
                    .spawn(move || serve(&rx));
                match t {
                    Ok(_) => made += 1,
                    // One thread is enough to start every rank, only slower.
                    Err(source) if made == 0 => return Err(ThreadsError { source }),
                    Err(_) => break,
                }
            }
            Ok(tx)
        })
        .as_ref()
        .map_err(ThreadsError::refusal)
}

/// A spawner thread: takes the requests in order, for the life of the process. The keeper is
/// started while the queue is held, so that no rank queued after it starts before it.
fn serve(rx: &Mutex<std_mpsc::Receiver<Request>>) {
    let mut affinity = Affinity::of_this_thread();
    loop {
        let request = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv() {
                Ok(Request::Keeper(grace)) => {
                    affinity.restore();
                    crate::keeper::ensure(grace);
                    continue;
                }
                Ok(request) => request,
                Err(_) => return,
            }
        };
        if let Request::Start(l, batch, n) = request {
            let result = if batch.stopped.load(Ordering::Relaxed) {
                Err(io::Error::other("not started: the start was given up"))
            } else {
                start(*l, &mut affinity)
            };
            if let Ok(f) = &result {
                crate::keeper::started(f.pid());
            }
            // A rank nobody takes any more is dropped: killed and reaped.
            let _ = batch.tx.send((n, result));
        }
    }
}

/// This thread's CPUs, as they were when it started, and whether it is bound to a rank's
/// now.
struct Affinity {
    own: Option<CpuSet>,
    changed: bool,
}

impl Affinity {
    fn of_this_thread() -> Affinity {
        Affinity {
            own: sched_getaffinity(None).ok(),
            changed: false,
        }
    }

    /// This thread on `set`, for a child started now to inherit.
    fn bind(&mut self, set: &CpuSet) -> io::Result<()> {
        self.changed = true;
        Ok(sched_setaffinity(None, set)?)
    }

    /// This thread back on its own CPUs, if it was bound to a rank's.
    fn restore(&mut self) {
        if let (true, Some(own)) = (self.changed, &self.own) {
            if sched_setaffinity(None, own).is_ok() {
                self.changed = false;
            }
        }
    }
}

/// The line a rank's stderr gets when it could not be bound to its CPUs.
const BIND_MSG: &str = "kauri: cannot bind the rank to its CPUs";

/// Starts the rank `l` describes: its pipes, then the spawn ([`spawn_rank`]), bound to its
/// CPUs; a start that failed in the child is a stand-in's ([`stand_in`]).
fn start(l: Launch, affinity: &mut Affinity) -> io::Result<Forked> {
    let exec = ExecArgs::new(&l)?;
    let (io, child) = proc::stdio_pipes(l.stdin, l.pty)?;
    let fds = ChildFds {
        stdin: child.stdin.as_raw_fd(),
        stdout: child.stdout.as_raw_fd(),
        stderr: if l.merge_stderr {
            child.stdout.as_raw_fd()
        } else {
            child.stderr.as_raw_fd()
        },
        pmi: l.pmi_fd.as_ref().map(|f| f.as_raw_fd()),
    };
    let bound = match &l.cpus {
        Some(set) => affinity.bind(set),
        None => {
            affinity.restore();
            Ok(())
        }
    };
    let pid = match bound {
        Err(_) => stand_in(&fds, BIND_MSG.as_bytes(), 126, None)?,
        Ok(()) => match spawn_rank(&exec, &fds) {
            Ok(pid) => pid,
            Err(e) => {
                let msg = format!("kauri: cannot execute {}", l.program.display());
                let code = if enterable(&exec.wdir) { 127 } else { 126 };
                stand_in(&fds, msg.as_bytes(), code, Some(e))?
            }
        },
    };
    // The rank has its ends now: kauri's copies close, so its reads see the rank's end.
    drop((l.pmi_fd, fds, child));
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("posix_spawn gave no pid"))?;
    Forked::started(pid, io)
}

/// The descriptors a child gets as its stdin, stdout and stderr, and its PMI socket (kept
/// under its own number).
struct ChildFds {
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    pmi: Option<RawFd>,
}

/// The program, arguments, environment and directory of a rank, as the C strings
/// `posix_spawn` takes. An environment pair with a NUL byte in it is left out; a NUL byte in
/// the program, an argument or the directory is an error.
struct ExecArgs {
    prog: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    wdir: CString,
}

impl ExecArgs {
    fn new(l: &Launch) -> io::Result<ExecArgs> {
        let c = |b: &[u8]| {
            CString::new(b)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a string"))
        };
        let mut argv = vec![c(l.argv0.as_bytes())?];
        for a in &l.args {
            argv.push(c(a.as_bytes())?);
        }
        let env = l
            .env
            .iter()
            .filter_map(|(k, v)| CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok())
            .collect();
        Ok(ExecArgs {
            prog: c(l.program.as_os_str().as_bytes())?,
            argv,
            env,
            wdir: c(l.wdir.as_os_str().as_bytes())?,
        })
    }

    /// For a script without `#!`: `/bin/sh PROGRAM ARGS…`, as `execvp` runs it.
    fn sh_argv(&self) -> Vec<CString> {
        [c"/bin/sh".to_owned(), self.prog.clone()]
            .into_iter()
            .chain(self.argv.iter().skip(1).cloned())
            .collect()
    }
}

/// Spawns the rank: its program, else `/bin/sh` with it when it is a script without `#!`
/// (`ENOEXEC`, as `execvp` does).
fn spawn_rank(x: &ExecArgs, fds: &ChildFds) -> io::Result<libc::pid_t> {
    let actions = FileActions::new(fds, Some(&x.wdir))?;
    let attr = Attr::new()?;
    match posix_spawn(&x.prog, &x.argv, &x.env, &actions, &attr) {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            posix_spawn(c"/bin/sh", &x.sh_argv(), &x.env, &actions, &attr)
        }
        r => r,
    }
}

/// Whether this process may enter directory `dir` (`access(X_OK)`): a start that failed in
/// a directory it may not enter failed there, not at its `execve`.
fn enterable(dir: &CStr) -> bool {
    rustix::fs::access(dir, rustix::fs::Access::EXEC_OK).is_ok()
}

/// A process in a rank's place whose start failed in the child (`why`): `/bin/sh`, which
/// prints `msg` on the rank's stderr and exits with `code`, in the rank's process group and
/// with its descriptors, so the job sees the rank fail as it would have. If even it cannot
/// start, the error is `why` (or its own).
fn stand_in(
    fds: &ChildFds,
    msg: &[u8],
    code: u8,
    why: Option<io::Error>,
) -> io::Result<libc::pid_t> {
    let script = c"printf '%s\\n' \"$1\" >&2; exit \"$2\"";
    let msg = CString::new(msg).unwrap_or_else(|_| c"kauri: cannot start the rank".to_owned());
    let argv = [
        c"sh".to_owned(),
        c"-c".to_owned(),
        script.to_owned(),
        c"sh".to_owned(),
        msg,
        CString::new(code.to_string()).unwrap_or_default(),
    ];
    let started = FileActions::new(fds, None)
        .and_then(|a| posix_spawn(c"/bin/sh", &argv, &[], &a, &Attr::new()?));
    started.map_err(|e| why.unwrap_or(e))
}

/// `posix_spawn(path, argv, env)` with `actions` and `attr`: the child's pid.
fn posix_spawn(
    path: &CStr,
    argv: &[CString],
    env: &[CString],
    actions: &FileActions,
    attr: &Attr,
) -> io::Result<libc::pid_t> {
    let ptrs = |v: &[CString]| -> Vec<*mut libc::c_char> {
        v.iter()
            .map(|s| s.as_ptr().cast_mut())
            .chain([std::ptr::null_mut()])
            .collect()
    };
    let (argv, envp) = (ptrs(argv), ptrs(env));
    let mut pid = 0;
    // SAFETY: the path, argv and envp are NUL-terminated strings in null-terminated arrays,
    // alive for the call; the actions and attributes were initialised by their `new`.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(pid)
}

/// A child's file actions: its stdio, its PMI socket, its directory.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new(fds: &ChildFds, wdir: Option<&CStr>) -> io::Result<FileActions> {
        let check = |rc: libc::c_int| match rc {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        };
        // SAFETY: the actions are plain data that init prepares and destroy (in drop) frees;
        // each add copies what it is given (the path too).
        unsafe {
            let mut a = FileActions(std::mem::zeroed());
            check(libc::posix_spawn_file_actions_init(&mut a.0))?;
            let p = &mut a.0;
            check(libc::posix_spawn_file_actions_adddup2(p, fds.stdin, 0))?;
            check(libc::posix_spawn_file_actions_adddup2(p, fds.stdout, 1))?;
            check(libc::posix_spawn_file_actions_adddup2(p, fds.stderr, 2))?;
            if let Some(fd) = fds.pmi {
                // Onto itself: the descriptor stays, its close-on-exec flag cleared.
                check(libc::posix_spawn_file_actions_adddup2(p, fd, fd))?;
            }
            if let Some(dir) = wdir {
                check(libc::posix_spawn_file_actions_addchdir_np(p, dir.as_ptr()))?;
            }
            Ok(a)
        }
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// A rank's spawn attributes: a process group of its own, no signal blocked, `SIGPIPE` (and,
/// by glibc, every caught signal) at its default.
struct Attr(libc::posix_spawnattr_t);

impl Attr {
    fn new() -> io::Result<Attr> {
        let check = |rc: libc::c_int| match rc {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        };
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        // SAFETY: the attributes and signal sets are plain data that init and sigemptyset
        // prepare; destroy (in drop) frees the attributes.
        unsafe {
            let mut a = Attr(std::mem::zeroed());
            check(libc::posix_spawnattr_init(&mut a.0))?;
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            let mut pipe = none;
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            check(libc::posix_spawnattr_setflags(
                &mut a.0,
                flags as libc::c_short,
            ))?;
            check(libc::posix_spawnattr_setpgroup(&mut a.0, 0))?;
            check(libc::posix_spawnattr_setsigmask(&mut a.0, &none))?;
            check(libc::posix_spawnattr_setsigdefault(&mut a.0, &pipe))?;
            Ok(a)
        }
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn launch(program: &str, args: &[&str]) -> Launch {
        Launch::plain(program, args)
    }

    /// The threads' failure prints the line kauri printed when it was text, and so does the
    /// refusal every start gets, which keeps the system error's kind.
    #[test]
    fn the_threads_failure_prints_its_line() {
        let source = io::Error::from_raw_os_error(libc::EAGAIN);
        let line = format!("cannot make the thread that starts the ranks: {source}");
        let e: &'static ThreadsError = Box::leak(Box::new(ThreadsError { source }));
        assert_eq!(e.to_string(), line);
        let refused = e.refusal();
        assert_eq!(refused.to_string(), line);
        assert_eq!(refused.kind(), io::ErrorKind::WouldBlock);
    }

    /// Starts handed back by the threads out of order are taken in the order they were
    /// queued.
    #[tokio::test]
    async fn starts_come_back_in_the_order_they_were_queued() {
        let mut starts = Starts::new(None);
        starts.sent = 4;
        for n in [2, 0, 3, 1] {
            let e = io::Error::other(format!("start {n}"));
            starts.batch.tx.send((n, Err(e))).unwrap();
        }
        let mut got = Vec::new();
        while let Some(r) = starts.next().await {
            got.push(r.err().map(|e| e.to_string()).unwrap_or_default());
        }
        assert_eq!(got, ["start 0", "start 1", "start 2", "start 3"]);
    }

    #[test]
    fn exec_args_are_strings_and_a_bad_pair_is_left_out() {
        let l = Launch {
            env: vec![
                ("A".into(), "1".into()),
                ("B".into(), OsString::from("x\0y")),
                ("C".into(), "".into()),
            ],
            ..launch("/bin/prog", &["a", "b"])
        };
        let x = ExecArgs::new(&l).unwrap();
        let s = |v: &[CString]| -> Vec<String> {
            v.iter().map(|c| c.to_string_lossy().into_owned()).collect()
        };
        assert_eq!(s(&x.argv), ["/bin/prog", "a", "b"]);
        assert_eq!(s(&x.env), ["A=1", "C="]);
        assert_eq!(s(&x.sh_argv()), ["/bin/sh", "/bin/prog", "a", "b"]);
        assert_eq!(x.wdir.to_str(), Ok("/"));
        let bad = Launch {
            args: vec!["a\0".into()],
            ..l
        };
        assert!(ExecArgs::new(&bad).is_err());
    }

    /// Runs `l` through the spawner thread: its exit status and what it wrote on stderr.
    async fn run(l: Launch) -> (std::process::ExitStatus, String) {
        use tokio::io::AsyncReadExt;
        let mut starts = Starts::new(None);
        starts.start(l).unwrap();
        let child = starts.next().await.unwrap().unwrap().watch().unwrap();
        let mut err = String::new();
        let mut stderr = child.stderr;
        stderr.read_to_string(&mut err).await.unwrap();
        let status = tokio::time::timeout(Duration::from_secs(60), child.exit.wait())
            .await
            .expect("the child ended");
        (status, err)
    }

    /// A start that fails at the `execve` (an interpreter that does not exist) is a rank
    /// that says so on its stderr and exits 127, as it was before `posix_spawn`.
    #[tokio::test]
    async fn a_failed_exec_is_a_line_on_the_ranks_stderr_and_status_127() {
        let dir = std::env::temp_dir().join(format!("kauri-badinterp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prog = dir.join("prog");
        std::fs::write(&prog, "#!/nonexistent/kauri-interpreter\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (st, err) = run(launch(prog.to_str().unwrap(), &[])).await;
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(st.code(), Some(127), "{st:?}");
        assert_eq!(err, format!("kauri: cannot execute {}\n", prog.display()));
    }

    /// A script without `#!` runs under `/bin/sh`, as `execvp` runs it; its arguments,
    /// environment and directory are its own, and `SIGPIPE` is back at its default.
    #[tokio::test]
    async fn a_script_without_hashbang_runs_under_sh_with_its_own_plan() {
        let dir = std::env::temp_dir().join(format!("kauri-nohashbang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prog = dir.join("prog");
        std::fs::write(
            &prog,
            "echo \"$1 $X $(pwd) $(grep SigIgn /proc/self/status)\" >&2\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let l = Launch {
            env: vec![
                ("X".into(), "x".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
            ],
            wdir: dir.clone(),
            ..launch(prog.to_str().unwrap(), &["one"])
        };
        let (st, err) = run(l).await;
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(st.success(), "{st:?}: {err}");
        let ign = err
            .trim_end()
            .rsplit('\t')
            .next()
            .unwrap_or_default()
            .to_string();
        let ignored = u64::from_str_radix(&ign, 16).unwrap_or(u64::MAX);
        assert_eq!(
            err.split_whitespace().take(3).collect::<Vec<_>>(),
            ["one", "x", dir.to_str().unwrap()],
            "{err}"
        );
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE ignored: {err}"
        );
    }

    /// The rank's PMI socket reaches it open, under its own number; its stdin is
    /// `/dev/null`; it leads a process group of its own.
    #[tokio::test]
    async fn the_pmi_socket_stays_open_and_the_rank_leads_its_group() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let theirs: std::os::fd::OwnedFd = theirs.into();
        let fd = theirs.as_raw_fd();
        let script = format!(
            "echo ok >&{fd}; read -r _ _ _ _ g _ </proc/$$/stat; echo $g >&2; echo $$ >&2; cat >&2"
        );
        let l = Launch {
            pmi_fd: Some(theirs),
            ..launch("/bin/bash", &["-c", &script])
        };
        let (st, err) = run(l).await;
        assert!(st.success(), "{st:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert_eq!(lines[0], lines[1], "its own group: {err}");
        let mut got = String::new();
        use std::io::Read;
        ours.set_nonblocking(true).unwrap();
        let _ = (&ours).read_to_string(&mut got);
        assert_eq!(got, "ok\n");
    }

    /// A rank bound to one CPU has that CPU from its start, and the spawner thread is back
    /// on its own CPUs for the next, unbound, rank.
    #[tokio::test]
    async fn a_bound_rank_has_its_cpus_and_the_next_unbound_one_has_all() {
        let allowed = crate::bind::allowed_cpus();
        let last = *allowed.last().unwrap();
        let all = crate::bind::cpu_list(&allowed);
        let probe = "grep Cpus_allowed_list /proc/self/status | cut -f2 >&2";
        let bound = Launch {
            cpus: Some(crate::bind::cpu_set(&[last])),
            ..launch("/bin/sh", &["-c", probe])
        };
        let (_, err) = run(bound).await;
        assert_eq!(err.trim(), last.to_string());
        let (_, err) = run(launch("/bin/sh", &["-c", probe])).await;
        assert_eq!(err.trim(), all);
    }

    /// Starts given up are not made, and those made are killed and reaped before
    /// `abandon` returns.
    #[tokio::test]
    async fn abandoned_starts_leave_nothing() {
        let mut starts = Starts::new(None);
        for _ in 0..4 {
            starts.start(launch("/bin/sleep", &["100"])).unwrap();
        }
        let first = starts.next().await.unwrap().unwrap();
        let pid = first.pid() as libc::pid_t;
        drop(first);
        starts.abandon().await;
        // SAFETY: waitpid with WNOHANG takes plain numbers and a null status.
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        let e = io::Error::last_os_error().raw_os_error();
        assert_eq!((r, e), (-1, Some(libc::ECHILD)), "reaped, not running");
    }
}
