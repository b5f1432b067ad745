//! The hang diagnosis from outside the job, a running kauri's side: the Unix socket only the
//! job's user can open, on which `kauri --status` (`cli::status`) asks where its ranks are;
//! and the stacks of the ranks that are stuck, for `-timeout-stacks` and `kauri --status
//! --stacks`.
//!
//! Every kauri that runs a job listens on `<dir>/<pid>.sock`, where `<dir>` is
//! `$XDG_RUNTIME_DIR/kauri` or else `$TMPDIR/kauri-<uid>` (see [`socket_dir`]): a directory of
//! mode 0700 that kauri refuses to use when someone else planted it. A connection whose peer
//! is another user (`SO_PEERCRED`) is closed unanswered. The request is one line, `status` or
//! `status stacks`; the answer is the diagnosis as text, and the connection closes. At most
//! [`CLIENTS_MAX`] connections are served at once, and each has a deadline to send its
//! request and one to take its answer.

use crate::msg::{HostStatus, RankStatus};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// At most this many ranks per host get their stack taken.
pub const STACK_RANKS: usize = 8;

/// A stack is cut after this many lines.
pub const STACK_LINES: usize = 24;

/// A stack's line is cut after this many characters.
const STACK_LINE_CHARS: usize = 160;

/// How long one stack may take (the debugger attaches, walks every thread, detaches).
const STACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `kauri --status` waits for a job's answer (stacks take a while).
pub const CLIENT_WAIT: Duration = Duration::from_secs(60);

/// A request line is at most this long.
const REQUEST_MAX: usize = 64;

/// The most `kauri --status` connections served at once; one more is closed as soon as it is
/// accepted (as the agents' port caps its handshakes, `hub::HANDSHAKES_MAX`), so that idle
/// connections cost a bounded number of descriptors and tasks.
pub const CLIENTS_MAX: usize = 16;

/// How long a connection has to send its request, and then to take its answer: an idle one
/// is closed after it.
const CLIENT_DEADLINE: Duration = Duration::from_secs(5);

/// This user's effective uid.
fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The directory of this user's status sockets: `$XDG_RUNTIME_DIR/kauri` when the session has
/// a runtime directory, else `kauri-<uid>` in `$TMPDIR` (or `/tmp`).
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("kauri"),
        None => std::env::temp_dir().join(format!("kauri-{}", my_uid())),
    }
}

/// A request for the diagnosis, from a `kauri --status` connection.
#[derive(Debug)]
pub struct Ask {
    /// Add the stuck ranks' stacks.
    pub stacks: bool,
    /// Where the diagnosis goes, line by line.
    pub reply: oneshot::Sender<Vec<String>>,
}

/// Why a job has no status socket.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The sockets' directory is not a private directory of this user.
    #[error(transparent)]
    Dir(#[from] kauri_proto::pmix::PrivateDirError),
    /// The socket cannot be bound.
    #[error("cannot listen on {}: {source}", path.display())]
    Listen {
        /// The socket's path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A job's status socket; dropping it closes and removes the socket.
pub struct Listener {
    path: PathBuf,
    /// The socket itself, owned here alone (the accept task holds a `Weak` between its
    /// polls), so that [`Drop`] closes it before it unlinks its path.
    socket: Option<std::rc::Rc<tokio::net::UnixListener>>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Listens on this process's socket in [`socket_dir`] and sends every request to `asks`.
    /// Must run inside a `LocalSet`.
    pub fn start(asks: mpsc::UnboundedSender<Ask>) -> Result<Listener, StatusError> {
        let dir = socket_dir();
        let path = dir.join(format!("{}.sock", std::process::id()));
        // Another kauri may remove the directory when it leaves (it does once it is empty):
        // then make it again.
        let mut tries = 0;
        let listener = loop {
            kauri_proto::pmix::create_private_dir(&dir)?;
            // A socket left by an earlier process that had this pid (the directory is ours).
            let _ = std::fs::remove_file(&path);
            match tokio::net::UnixListener::bind(&path) {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
                Err(source) => return Err(StatusError::Listen { path, source }),
            }
        };
        // The directory keeps others out already; the socket's own mode says so too.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        let socket = std::rc::Rc::new(listener);
        let task = tokio::task::spawn_local(accept(std::rc::Rc::downgrade(&socket), asks));
        Ok(Listener {
            path,
            socket: Some(socket),
            task,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
        // Closed first, while its path is still there: a socket bound in a directory that
        // was removed holds that directory's inode until it closes, and the close then pays
        // for the inode's end (ext4: its orphan record and its release), which costs more
        // than the rmdir after the close. The task, aborted, may be dropped later or never
        // (kauri leaves with `exit`).
        drop(self.socket.take());
        let _ = std::fs::remove_file(&self.path);
        // The directory too when no other job of the user's uses it (rmdir fails otherwise).
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Accepts `kauri --status` connections: the user's own, [`CLIENTS_MAX`] at once. Holds the
/// socket only while it polls it (see [`Listener`]), and ends once the socket is closed.
async fn accept(
    listener: std::rc::Weak<tokio::net::UnixListener>,
    asks: mpsc::UnboundedSender<Ask>,
) {
    let me = my_uid();
    let clients = std::sync::Arc::new(tokio::sync::Semaphore::new(CLIENTS_MAX));
    loop {
        let next = std::future::poll_fn(|cx| match listener.upgrade() {
            Some(l) => l.poll_accept(cx).map(Some),
            None => std::task::Poll::Ready(None),
        });
        let conn = match next.await {
            None => return,
            Some(Ok((c, _))) => c,
            Some(Err(_)) => {
                // Out of file descriptors, most likely: try again later.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        match conn.peer_cred() {
            Ok(c) if c.uid() == me => {}
            Ok(c) => {
                say!("kauri: refused a status request from uid {}", c.uid());
                continue;
            }
            Err(_) => continue,
        }
        let Ok(permit) = clients.clone().try_acquire_owned() else {
            // Over the limit: closed unanswered (dropped here).
            tracing::debug!("status connection over the limit ({CLIENTS_MAX} at once)");
            continue;
        };
        let asks = asks.clone();
        tokio::task::spawn_local(async move {
            answer(conn, asks).await;
            drop(permit);
        });
    }
}

/// Reads one request line, has the root make the diagnosis, writes it; each step on the
/// client's side within [`CLIENT_DEADLINE`].
async fn answer(conn: tokio::net::UnixStream, asks: mpsc::UnboundedSender<Ask>) {
    let (rd, mut wr) = conn.into_split();
    let mut line = String::new();
    let mut rd = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(rd, REQUEST_MAX as u64));
    match tokio::time::timeout(CLIENT_DEADLINE, rd.read_line(&mut line)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    let stacks = match line.trim() {
        "status" => false,
        "status stacks" => true,
        other => {
            let _ = wr
                .write_all(format!("kauri: unknown request {other:?}\n").as_bytes())
                .await;
            return;
        }
    };
    let (tx, rx) = oneshot::channel();
    if asks.send(Ask { stacks, reply: tx }).is_err() {
        return;
    }
    let Ok(lines) = rx.await else {
        let _ = wr
            .write_all(b"kauri: the job ended before it answered\n")
            .await;
        return;
    };
    let mut text = lines.join("\n");
    text.push('\n');
    let write = async {
        wr.write_all(text.as_bytes()).await?;
        wr.shutdown().await
    };
    let _ = tokio::time::timeout(CLIENT_DEADLINE, write).await;
}

/// Whether a rank is stuck enough for its stack to tell something: it runs and has not
/// finalized.
fn stuck(r: &RankStatus) -> bool {
    use kauri_proto::pmi::RankPmi;
    r.pid.is_some() && !matches!(r.pmi, RankPmi::Finalized | RankPmi::Exited)
}

/// The debugger that takes stacks here: `eu-stack` (quick), else `gdb`.
fn stack_tool() -> Option<(&'static str, PathBuf)> {
    let path = std::env::var_os("PATH")?;
    for tool in ["eu-stack", "gdb"] {
        for d in std::env::split_paths(&path) {
            let p = d.join(tool);
            if p.is_file() {
                return Some((tool, p));
            }
        }
    }
    None
}

/// Adds the stacks of this host's stuck ranks (at most [`STACK_RANKS`]) to its status.
pub async fn add_stacks(mut hs: HostStatus) -> HostStatus {
    let Some((tool, path)) = stack_tool() else {
        for r in hs.ranks.iter_mut().filter(|r| stuck(r)).take(STACK_RANKS) {
            r.stack = Some(format!(
                "no stack: neither eu-stack nor gdb is installed on {}",
                hs.host
            ));
        }
        return hs;
    };
    let mut set = tokio::task::JoinSet::new();
    for (i, r) in hs.ranks.iter().enumerate().filter(|(_, r)| stuck(r)) {
        if set.len() == STACK_RANKS {
            break;
        }
        let (path, pid) = (path.clone(), r.pid.unwrap_or_default());
        set.spawn(async move { (i, stack_of(tool, &path, pid).await) });
    }
    while let Some(done) = set.join_next().await {
        if let Ok((i, stack)) = done {
            hs.ranks[i].stack = Some(stack);
        }
    }
    hs
}

/// The stack of every thread of `pid`, taken by `tool` at `path`, cut to [`STACK_LINES`].
async fn stack_of(tool: &str, path: &Path, pid: u32) -> String {
    let mut cmd = tokio::process::Command::new(path);
    if tool == "gdb" {
        cmd.args(["-q", "-nx", "-batch", "-p", &pid.to_string()])
            .args(["-ex", "thread apply all bt"]);
    } else {
        cmd.args(["-p", &pid.to_string()]);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(STACK_TIMEOUT, cmd.output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return format!("no stack: cannot run {tool}: {e}"),
        Err(_) => {
            return format!(
                "no stack: {tool} took more than {} s",
                STACK_TIMEOUT.as_secs()
            )
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let errs = String::from_utf8_lossy(&out.stderr);
    trim_stack(&text, pid).unwrap_or_else(|| {
        let why = errs
            .lines()
            .chain(text.lines())
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("it printed nothing");
        format!("no stack from {tool}: {why}")
    })
}

/// The frames and thread headers of a debugger's output, the main thread's (thread `pid`)
/// first (gdb lists it last, after the runtime's progress threads), each line cut to a sane
/// width, at most [`STACK_LINES`] of them; `None` when there is none.
fn trim_stack(text: &str, pid: u32) -> Option<String> {
    let mut threads: Vec<Vec<&str>> = Vec::new();
    for l in text.lines() {
        if l.starts_with("Thread ") || l.starts_with("TID ") {
            threads.push(vec![l]);
        } else if l.starts_with('#') {
            match threads.last_mut() {
                Some(t) => t.push(l),
                None => threads.push(vec![l]),
            }
        }
    }
    let main = |t: &Vec<&str>| {
        let h = t[0];
        h.contains(&format!("(LWP {pid})")) || h.starts_with(&format!("TID {pid}:"))
    };
    if let Some(i) = threads.iter().position(main) {
        let t = threads.remove(i);
        threads.insert(0, t);
    }
    let kept: Vec<&str> = threads.into_iter().flatten().collect();
    if !kept.iter().any(|l| l.starts_with('#')) {
        return None;
    }
    let mut lines: Vec<String> = kept
        .iter()
        .take(STACK_LINES)
        .map(|l| match l.char_indices().nth(STACK_LINE_CHARS) {
            Some((at, _)) => format!("{}…", &l[..at]),
            None => l.to_string(),
        })
        .collect();
    if kept.len() > STACK_LINES {
        lines.push(format!("… {} more lines", kept.len() - STACK_LINES));
    }
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_output_keeps_threads_and_frames() {
        let gdb = "[Thread debugging using libthread_db enabled]\n\
            Using host libthread_db library \"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n\
            0x00007f in clock_nanosleep () from /lib/libc.so.6\n\
            \n\
            Thread 1 (Thread 0x7f (LWP 42) \"sleep\"):\n\
            #0  0x00007f in clock_nanosleep () from /lib/libc.so.6\n\
            #1  0x00007f in nanosleep () from /lib/libc.so.6\n\
            [Inferior 1 (process 42) detached]\n";
        let s = trim_stack(gdb, 42).unwrap();
        assert_eq!(s.lines().count(), 3, "{s}");
        assert!(s.starts_with("Thread 1"));
        assert!(s.ends_with("nanosleep () from /lib/libc.so.6"));
    }

    #[test]
    fn long_stacks_and_lines_are_cut() {
        let mut t = String::new();
        for i in 0..100 {
            t.push_str(&format!("#{i} {}\n", "x".repeat(500)));
        }
        let s = trim_stack(&t, 1).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), STACK_LINES + 1);
        assert_eq!(lines[STACK_LINES], "… 76 more lines");
        assert!(lines[0].chars().count() <= STACK_LINE_CHARS + 1);
    }

    #[test]
    fn no_frames_is_no_stack() {
        assert_eq!(trim_stack("ptrace: Operation not permitted.\n", 1), None);
        assert_eq!(trim_stack("Thread 1 (LWP 3):\n", 3), None);
    }

    #[test]
    fn the_main_thread_comes_first() {
        let gdb = "Thread 2 (Thread 0x7f (LWP 43) \"progress\"):\n\
            #0  epoll_wait ()\n\
            Thread 1 (Thread 0x7e (LWP 42) \"app\"):\n\
            #0  MPI_Recv ()\n\
            #1  main ()\n";
        let s = trim_stack(gdb, 42).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].contains("(LWP 42)"), "{s}");
        assert_eq!(lines[1], "#0  MPI_Recv ()");
        assert_eq!(lines[3], "Thread 2 (Thread 0x7f (LWP 43) \"progress\"):");
        let eu = "PID 42 - process\nTID 43:\n#0  0x1 epoll_wait\nTID 42:\n#0  0x2 main\n";
        assert!(trim_stack(eu, 42)
            .unwrap()
            .starts_with("TID 42:\n#0  0x2 main"));
    }
}
