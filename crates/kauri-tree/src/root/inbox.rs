//! The root's inputs and its terminal: one [`Inbox`] that waits for the next event of any kind
//! (ranks, children, signals, stdin, timers), and the output printer.

use super::*;
use std::rc::Rc;

impl Inbox {
    /// The next event.
    pub(super) async fn next(&mut self, timers: Timers) -> Event {
        let Timers {
            timing,
            kill_at,
            leave_at,
            status_at,
            progress_at,
        } = timers;
        let signals = futures_signal(&mut self.signals);
        tokio::pin!(signals);
        let deadline = self.deadline.filter(|_| timing);
        tokio::select! {
            Some((j, ev)) = self.node.recv() => Event::Node(j, ev),
            Some((j, ev)) = self.hub.recv() => Event::Child(j, ev),
            Some((a, r)) = self.replies.recv() => Event::Reply(a, r),
            Some(chunk) = self.stdin.recv() => Event::Stdin(chunk),
            Some(e) = self.closed.recv() => Event::Output(e),
            Some(ask) = self.asks.recv() => Event::StatusAsk(ask),
            Some((j, h)) = self.own.recv() => Event::OwnStatus(j, h),
            sig = &mut signals => Event::Signal(sig),
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => Event::Timeout,
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => Event::KillTimer,
            _ = tokio::time::sleep_until(leave_at.unwrap_or_else(Instant::now)), if leave_at.is_some() => Event::GiveUp,
            _ = tokio::time::sleep_until(status_at.unwrap_or_else(Instant::now)), if status_at.is_some() => Event::StatusDue,
            _ = tokio::time::sleep_until(progress_at.unwrap_or_else(Instant::now)), if progress_at.is_some() => Event::Progress,
        }
    }
}

/// The first of `signals` to arrive (pending for ever when there are none).
pub(super) async fn futures_signal(signals: &mut [(i32, tokio::signal::unix::Signal)]) -> i32 {
    if signals.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for (n, s) in signals.iter_mut() {
            if s.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*n);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

impl<W: tokio::io::AsyncWrite + Unpin> Terminal<W> {
    /// The terminal writing to `stream`, whose descriptor is `fd`.
    pub(super) fn new(stream: W, fd: std::os::fd::RawFd) -> Self {
        Terminal {
            stream,
            open: true,
            fd,
            direct: Direct::of(fd),
        }
    }

    /// Writes `data` and flushes it; false only for the write that finds the stream closed
    /// (the later ones, dropped, are true: the job is already ending).
    pub(super) async fn write(&mut self, data: &[u8]) -> bool {
        if !self.open {
            return true;
        }
        let written = match self.direct(data) {
            Some(r) => r,
            // (tokio's stream holds nothing between calls: each write is flushed before it
            // returns, so a direct write never overtakes an earlier one.)
            None => match self.stream.write_all(data).await {
                Ok(()) => self.stream.flush().await,
                Err(e) => Err(e),
            },
        };
        self.open = written.is_ok();
        self.open
    }

    /// Writes `data` on this thread if that cannot block ([`Direct`]); `None` when it could.
    fn direct(&self, data: &[u8]) -> Option<std::io::Result<()>> {
        match self.direct {
            Direct::Never => return None,
            Direct::WhenRoom if data.len() > libc::PIPE_BUF || !has_room(self.fd) => return None,
            _ => {}
        }
        let mut rest = data;
        while !rest.is_empty() {
            // SAFETY: write(2) reads at most rest.len() bytes from `rest`.
            let n = unsafe { libc::write(self.fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Some(Err(e));
            }
            rest = &rest[(n as usize).min(rest.len())..];
        }
        Some(Ok(()))
    }
}

impl Direct {
    /// How descriptor `fd` may be written directly.
    fn of(fd: std::os::fd::RawFd) -> Direct {
        // SAFETY: fstat writes at most one `stat` into `st`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Direct::Never;
        }
        Direct::of_stat(st.st_mode & libc::S_IFMT, st.st_rdev)
    }

    /// The same from the file type bits of `st_mode` and the device number.
    fn of_stat(kind: libc::mode_t, rdev: libc::dev_t) -> Direct {
        match kind {
            libc::S_IFREG => Direct::Always,
            // /dev/null is character device 1:3 on Linux.
            libc::S_IFCHR if rdev == libc::makedev(1, 3) => Direct::Always,
            libc::S_IFIFO => Direct::WhenRoom,
            _ => Direct::Never,
        }
    }
}

/// Whether `poll` says descriptor `fd` takes a write now.
fn has_room(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: poll reads and writes one pollfd; a zero timeout never waits.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLOUT != 0 && p.revents & (libc::POLLERR | libc::POLLHUP) == 0
}

/// Prints what the ranks and agents write, whole lines as they come, and writes the lines
/// bound for output files to `files`; once `stop` fires, what is still queued and no more. A
/// failed write to stdout or stderr is told on `closed` (the job ends), and that stream is not
/// written again ([`Terminal`]).
/// A file that cannot be created or written is one line on stderr and ends the job as a
/// failure (its later lines are dropped, the others' still written); it returns whether one
/// failed.
pub(super) async fn print_output(
    mut out: mpsc::Receiver<(Dest, Bytes)>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    closed: mpsc::UnboundedSender<Ending>,
    mut files: Files,
) -> bool {
    let mut file_failed = false;
    let mut so = Terminal::new(tokio::io::stdout(), libc::STDOUT_FILENO);
    let mut se = Terminal::new(tokio::io::stderr(), libc::STDERR_FILENO);
    let mut stopping = false;
    let mut held: Option<(Dest, Bytes)> = None;
    loop {
        let next = if held.is_some() {
            held.take()
        } else if stopping {
            out.try_recv().ok()
        } else {
            tokio::select! {
                biased;
                m = out.recv() => m,
                _ = &mut stop => {
                    stopping = true;
                    continue;
                }
            }
        };
        let Some((dest, data)) = next else { break };
        if let (Some(path), true) = (&dest.file, dest.close) {
            files.close_one(path).await;
            continue;
        }
        if let Some(path) = &dest.file {
            // The first failure only: the job ends with it, and any other is its echo.
            if let Err(e) = files.write(path, &data).await {
                if !file_failed {
                    se.write(format!("kauri: {e}\n").as_bytes()).await;
                    file_failed = true;
                    let _ = closed.send(Ending::Failed);
                }
            }
            continue;
        }
        let data = run_of(data, &dest, &mut out, &mut held);
        let written = match dest.stream {
            Stream::Stdout => so.write(&data).await,
            Stream::Stderr => se.write(&data).await,
        };
        if !written {
            let _ = closed.send(Ending::OutputClosed);
        }
    }
    files.close().await;
    file_failed
}

/// The most bytes of output [`print_output`] writes at once: what is queued for the same
/// stream is joined up to it, so many short lines cost one write, not one each.
const WRITE_RUN: usize = 256 * 1024;

/// `first` (bound for `dest`, one of kauri's streams) and what is already queued for the same
/// stream after it, up to [`WRITE_RUN`] bytes; a message for elsewhere is kept in `held`.
fn run_of(
    first: Bytes,
    dest: &Dest,
    out: &mut mpsc::Receiver<(Dest, Bytes)>,
    held: &mut Option<(Dest, Bytes)>,
) -> Bytes {
    if first.len() >= WRITE_RUN {
        return first;
    }
    // Alone in the queue (the common case for a quiet job): written as it is, uncopied.
    let next = match out.try_recv() {
        Ok((d, more)) if d == *dest => more,
        Ok(other) => {
            *held = Some(other);
            return first;
        }
        Err(_) => return first,
    };
    let mut run = Vec::with_capacity(WRITE_RUN + next.len());
    run.extend_from_slice(&first);
    run.extend_from_slice(&next);
    kauri_host::iofwd::join_queued(&mut run, dest, out, held, WRITE_RUN);
    run.into()
}

/// The most bytes of stdin in flight to a rank 0 on another host: read by kauri and not yet
/// written into rank 0's pipe by its agent (in the links' queues and sockets, in the agent).
pub const STDIN_WINDOW: usize = 4 << 20;

/// The most bytes of stdin one `Down::Stdin` carries.
const STDIN_CHUNK: usize = 64 * 1024;

/// How much stdin kauri may still read for a rank 0 on another host: [`STDIN_WINDOW`] less
/// what is in flight. Its agent gives credit back as it writes into rank 0's pipe
/// (`Up::StdinTaken`), so back-pressure from rank 0's pipe reaches kauri's read of stdin
/// across the tree, as a pipe's does on one host.
#[derive(Clone)]
pub(super) struct StdinCredit(Rc<tokio::sync::Semaphore>);

impl StdinCredit {
    /// A whole window of credit.
    pub(super) fn new() -> StdinCredit {
        StdinCredit(Rc::new(tokio::sync::Semaphore::new(STDIN_WINDOW)))
    }

    /// Rank 0's agent wrote `n` bytes into its pipe: as many may be read again. Never more
    /// than is in flight (a number from the network).
    pub(super) fn give_back(&self, n: u64) {
        let in_flight = STDIN_WINDOW.saturating_sub(self.0.available_permits());
        self.0
            .add_permits(usize::try_from(n).unwrap_or(usize::MAX).min(in_flight));
    }

    /// Waits for a chunk's worth of credit and takes it.
    async fn take_chunk(&self) {
        if let Ok(p) = self.0.acquire_many(STDIN_CHUNK as u32).await {
            p.forget();
        }
    }
}

/// Reads kauri's stdin for a rank 0 on another host, in chunks, each once `credit` allows it;
/// `None` at its end.
pub(super) async fn read_stdin(to: mpsc::Sender<Option<Vec<u8>>>, credit: StdinCredit) {
    let mut input = tokio::io::stdin();
    let mut buf = vec![0u8; STDIN_CHUNK];
    loop {
        credit.take_chunk().await;
        let chunk = match input.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(buf[..n].to_vec()),
        };
        // What this read did not use goes back at once.
        let used = chunk.as_ref().map_or(0, Vec::len);
        credit.0.add_permits(STDIN_CHUNK - used);
        let eof = chunk.is_none();
        if to.send(chunk).await.is_err() || eof {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// Credit comes back no further than what is in flight, whatever a peer claims.
    #[test]
    fn stdin_credit_never_exceeds_its_window() {
        let c = StdinCredit::new();
        c.give_back(u64::MAX);
        assert_eq!(c.0.available_permits(), STDIN_WINDOW);
        c.0.try_acquire_many(STDIN_CHUNK as u32).unwrap().forget();
        c.give_back(10);
        assert_eq!(c.0.available_permits(), STDIN_WINDOW - STDIN_CHUNK + 10);
        c.give_back(u64::MAX);
        assert_eq!(c.0.available_permits(), STDIN_WINDOW);
    }

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors, owned by the OwnedFds at once.
        unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        }
    }

    /// Queued output for the same stream is written in one run (many short lines cost one
    /// write, not one each); a message for another stream or a file waits for the next run,
    /// in order; a run stops at [`WRITE_RUN`] bytes.
    #[tokio::test]
    async fn queued_lines_for_one_stream_are_one_write() {
        let (tx, mut rx) = mpsc::channel(16);
        let line = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        for l in ["a\n", "b\n", "c\n"] {
            tx.send((Dest::from(Stream::Stdout), line(l)))
                .await
                .unwrap();
        }
        tx.send((Dest::from(Stream::Stderr), line("e\n")))
            .await
            .unwrap();
        tx.send((Dest::from(Stream::Stdout), line("d\n")))
            .await
            .unwrap();
        let mut held = None;
        let (d, first) = rx.recv().await.unwrap();
        assert_eq!(&run_of(first, &d, &mut rx, &mut held)[..], b"a\nb\nc\n");
        let (d, e) = held.take().unwrap();
        assert_eq!((d.stream, &e[..]), (Stream::Stderr, &b"e\n"[..]));
        assert_eq!(&run_of(e, &d, &mut rx, &mut held)[..], b"e\n");
        let (d, last) = held.take().unwrap();
        assert_eq!(&run_of(last, &d, &mut rx, &mut held)[..], b"d\n");
        let big = Bytes::from(vec![b'x'; WRITE_RUN / 2 + 1]);
        for _ in 0..3 {
            tx.send((Dest::from(Stream::Stdout), big.clone()))
                .await
                .unwrap();
        }
        let (d, first) = rx.recv().await.unwrap();
        assert_eq!(run_of(first, &d, &mut rx, &mut held).len(), 2 * big.len());
        assert!(held.is_none());
        assert_eq!(rx.recv().await.unwrap().1.len(), big.len());
    }

    #[test]
    fn what_is_written_directly() {
        let file = std::fs::File::create(
            std::env::temp_dir().join(format!("kauri-direct-{}", std::process::id())),
        )
        .unwrap();
        assert_eq!(Direct::of(file.as_raw_fd()), Direct::Always);
        let null = std::fs::File::create("/dev/null").unwrap();
        assert_eq!(Direct::of(null.as_raw_fd()), Direct::Always);
        let (r, w) = pipe();
        assert_eq!(Direct::of(w.as_raw_fd()), Direct::WhenRoom);
        assert_eq!(Direct::of(r.as_raw_fd()), Direct::WhenRoom);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(Direct::of(a.as_raw_fd()), Direct::Never);
        assert_eq!(Direct::of(-1), Direct::Never);
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("kauri-direct-{}", std::process::id())),
        );
    }

    #[tokio::test]
    async fn a_pipe_with_room_is_written_at_once_and_a_full_one_waits() {
        let (r, w) = pipe();
        let mut t = Terminal::new(tokio::io::sink(), w.as_raw_fd());
        // Written on this thread: the bytes are in the pipe, not in the sink.
        assert!(t.direct(b"line 1\n").is_some());
        assert!(t.write(b"line 2\n").await);
        let mut buf = [0u8; 64];
        // SAFETY: read writes at most buf.len() bytes into buf.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(&buf[..n as usize], b"line 1\nline 2\n");
        // More than PIPE_BUF: never directly (it might block).
        assert!(t.direct(&vec![b'x'; libc::PIPE_BUF + 1]).is_none());
        // A full pipe: not directly either.
        // SAFETY: fcntl sets a flag on a descriptor owned here.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let chunk = [0u8; 4096];
        // SAFETY: write reads at most chunk.len() bytes from chunk.
        while unsafe { libc::write(w.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) } > 0 {}
        assert!(t.direct(b"x\n").is_none());
    }

    #[tokio::test]
    async fn a_pipe_whose_reader_left_is_a_closed_terminal() {
        let (r, w) = pipe();
        drop(r);
        let mut t = Terminal::new(tokio::io::sink(), w.as_raw_fd());
        // poll says POLLERR: not written directly (tokio's stream would meet the EPIPE;
        // here it is a sink). Written directly all the same, it fails with EPIPE.
        assert!(t.direct(b"x\n").is_none());
        t.direct = Direct::Always;
        assert!(matches!(t.direct(b"x\n"), Some(Err(_))));
        assert!(!t.write(b"x\n").await, "the first failed write closes it");
        assert!(t.write(b"y\n").await, "later ones are dropped");
    }
}
