//! The root's inputs and its terminal: one [`Inbox`] that waits for the next event of any kind
//! (ranks, children, signals, stdin, timers), and the output printer.

use super::*;

impl Inbox {
    /// The next event.
    pub(super) async fn next(&mut self, timers: Timers) -> Event {
        let Timers {
            timing,
            kill_at,
            leave_at,
            status_at,
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
    pub(super) fn new(stream: W) -> Self {
        Terminal { stream, open: true }
    }

    /// Writes `data` and flushes it; false only for the write that finds the stream closed
    /// (the later ones, dropped, are true: the job is already ending).
    pub(super) async fn write(&mut self, data: &[u8]) -> bool {
        if !self.open {
            return true;
        }
        let written = match self.stream.write_all(data).await {
            Ok(()) => self.stream.flush().await,
            Err(e) => Err(e),
        };
        self.open = written.is_ok();
        self.open
    }
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
    let mut so = Terminal::new(tokio::io::stdout());
    let mut se = Terminal::new(tokio::io::stderr());
    let mut stopping = false;
    loop {
        let next = if stopping {
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

/// Reads kauri's stdin for a rank 0 on another host, in chunks; `None` at its end.
pub(super) async fn read_stdin(to: mpsc::Sender<Option<Vec<u8>>>) {
    let mut input = tokio::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let chunk = match input.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(buf[..n].to_vec()),
        };
        let eof = chunk.is_none();
        if to.send(chunk).await.is_err() || eof {
            break;
        }
    }
}
