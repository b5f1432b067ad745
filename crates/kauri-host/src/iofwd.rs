//! Output forwarding: rank stdout/stderr to kauri's, whole lines at a time, labelled and routed
//! as the output options say (`-l`, `-prepend-pattern`, `-outfile-pattern`, `-output-from`: see
//! [`crate::output`]); and kauri's stdin to rank 0.
//!
//! Each rank stream is read by its own task, cut after its last newline, and the complete
//! lines of each read go as one message to a single writer task per destination, so lines of
//! two ranks never interleave (and a rank that writes many short lines costs one message per
//! read, not one per line). A line longer than [`LINE_MAX`] is passed on in pieces rather than
//! held without bound.
//!
//! The lines wait for their writer in an output queue ([`output_queue`]) bounded in bytes as
//! well as in lines: a sender waits while [`OUTPUT_QUEUE_BYTES`] are queued, so a rank that
//! writes faster than kauri's stdout (or a parent's link, or an output file) drains stops being
//! read, its pipe fills and the rank blocks in `write`, and kauri's memory stays bounded
//! whatever the lines' length. The front end and every agent hold one queue each.

use crate::output::Route;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

pub use kauri_core::tree::msg::Stream;

/// Where queued output goes: one of kauri's streams, or the output file a pattern named for
/// the rank that wrote it (`-outfile-pattern`, `-errfile-pattern`), by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    /// The stream the lines came from (and go to, without a file).
    pub stream: Stream,
    /// The file they go to instead, relative to the front end's working directory.
    pub file: Option<Arc<str>>,
    /// With `file`: close it after these bytes (none, usually): the job that wrote it ended.
    /// A later write opens it again to append.
    pub close: bool,
}

impl From<Stream> for Dest {
    fn from(stream: Stream) -> Dest {
        Dest {
            stream,
            file: None,
            close: false,
        }
    }
}

/// The read of a stream whose last read filled its buffer ([`forward_lines`]).
const READ_BIG: usize = 64 * 1024;

/// The longest line held back waiting for its newline.
pub const LINE_MAX: usize = 64 * 1024;

/// The most bytes of output an output queue holds; a sender waits beyond it (a line longer
/// than this waits until the queue is empty).
pub const OUTPUT_QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// The most lines (or runs of lines from an agent) an output queue holds.
pub const OUTPUT_QUEUE_LINES: usize = 1024;

/// The sending end of an output queue ([`output_queue`]): cheap to clone, and its
/// [`send`](OutputSender::send) waits while the queue is full, in lines or in bytes.
#[derive(Clone, Debug)]
pub struct OutputSender {
    tx: mpsc::Sender<(Dest, Bytes)>,
    budget: Arc<Semaphore>,
}

/// The bytes of one queued message, holding their share of the queue's byte budget until the
/// receiver drops them.
struct Budgeted {
    data: Bytes,
    _share: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// A new output queue: at most [`OUTPUT_QUEUE_LINES`] messages and [`OUTPUT_QUEUE_BYTES`]
/// bytes wait in it. The receiver sees plain `(Dest, Bytes)`; the bytes go back to the
/// budget when it drops them.
pub fn output_queue() -> (OutputSender, mpsc::Receiver<(Dest, Bytes)>) {
    let (tx, rx) = mpsc::channel(OUTPUT_QUEUE_LINES);
    let budget = Arc::new(Semaphore::new(OUTPUT_QUEUE_BYTES));
    (OutputSender { tx, budget }, rx)
}

impl OutputSender {
    /// Queues `data` for `dest` (a [`Stream`] for kauri's own), waiting while the queue is
    /// full. An error: the receiver is gone.
    pub async fn send(
        &self,
        dest: impl Into<Dest>,
        data: Bytes,
    ) -> Result<(), mpsc::error::SendError<()>> {
        let share = data.len().min(OUTPUT_QUEUE_BYTES) as u32;
        let Ok(share) = self.budget.clone().acquire_many_owned(share).await else {
            return Err(mpsc::error::SendError(())); // never closed
        };
        let data = Bytes::from_owner(Budgeted {
            data,
            _share: share,
        });
        self.tx
            .send((dest.into(), data))
            .await
            .map_err(|_| mpsc::error::SendError(()))
    }
}

/// Appends to `run` what is already queued in `rx` for `dest`, until `run` holds `max` bytes
/// (or nothing more is queued); a message for another destination is kept in `held`, to go
/// next. Many short lines so cost one write (the front end) or one link message (an agent).
pub fn join_queued(
    run: &mut Vec<u8>,
    dest: &Dest,
    rx: &mut mpsc::Receiver<(Dest, Bytes)>,
    held: &mut Option<(Dest, Bytes)>,
    max: usize,
) {
    while run.len() < max {
        match rx.try_recv() {
            Ok((d, more)) if d == *dest => run.extend_from_slice(&more),
            Ok(other) => {
                *held = Some(other);
                return;
            }
            Err(_) => return,
        }
    }
}

/// How long a forwarder keeps reading, once the job has ended, while nothing arrives: a pipe
/// can be held open by a process that escaped the rank's process group.
pub const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// Reads `r` to its end, sending its lines to `out` as `route` says (a prefix before each, to
/// its file or to `stream`; nowhere when it drops them): the complete lines of each read as
/// one message. A last line without a newline is sent
/// as it is. Once `ended` turns true, a read that brings nothing for [`DRAIN_IDLE`] ends it;
/// sends are never cut short, so a slow reader of kauri's output loses nothing.
pub async fn forward_lines<R: AsyncRead + Unpin>(
    mut r: R,
    stream: Stream,
    route: Route,
    out: OutputSender,
    mut ended: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(8192);
    let mut full = false;
    loop {
        if let Some(nl) = buf.iter().rposition(|&b| b == b'\n') {
            let lines = buf.split_to(nl + 1).freeze();
            if send(&out, stream, &route, lines).await.is_err() {
                return;
            }
        }
        if buf.len() >= LINE_MAX {
            let piece = buf.split().freeze();
            if send(&out, stream, &route, piece).await.is_err() {
                return;
            }
        }
        // A stream that filled the last read gets a bigger one: a rank that writes fast
        // costs fewer reads and messages; a quiet one holds no more than 8 KiB.
        buf.reserve(if full { READ_BIG } else { 8192 });
        let room = buf.capacity() - buf.len();
        let read = if *ended.borrow() {
            match tokio::time::timeout(DRAIN_IDLE, r.read_buf(&mut buf)).await {
                Ok(read) => read,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                read = r.read_buf(&mut buf) => read,
                changed = ended.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    continue;
                }
            }
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => full = n == room,
        }
    }
    if !buf.is_empty() {
        let _ = send(&out, stream, &route, buf.freeze()).await;
    }
}

/// Sends `lines` (whole lines, but for a stream's last or an over-long one) as `route` says:
/// as they are, or with the prefix before each.
async fn send(
    out: &OutputSender,
    stream: Stream,
    route: &Route,
    lines: Bytes,
) -> Result<(), mpsc::error::SendError<()>> {
    if route.drop {
        return Ok(());
    }
    let msg = match route.prefix.as_ref().map(|p| p.now()) {
        None => lines,
        Some(p) => prefixed(p.as_bytes(), &lines),
    };
    let dest = Dest {
        stream,
        file: route.file.as_ref().map(|f| f.now()),
        close: false,
    };
    out.send(dest, msg).await
}

/// `lines` with `prefix` before each line (and before a last piece without a newline).
fn prefixed(prefix: &[u8], lines: &[u8]) -> Bytes {
    let n = lines.split_inclusive(|&b| b == b'\n').count();
    let mut m = BytesMut::with_capacity(n * prefix.len() + lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        m.extend_from_slice(prefix);
        m.extend_from_slice(line);
    }
    m.freeze()
}

/// Writes every message from `rx` to `w` until all senders are gone; an error (a closed pipe)
/// ends it and is returned so the job can be ended.
pub async fn write_all<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Bytes>,
    mut w: W,
) -> std::io::Result<()> {
    while let Some(first) = rx.recv().await {
        w.write_all(&first).await?;
        while let Ok(more) = rx.try_recv() {
            w.write_all(&more).await?;
        }
        w.flush().await?;
    }
    Ok(())
}

/// Copies `r` into `w` until either ends; used for stdin to rank 0.
pub async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(mut r: R, mut w: W) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = w.shutdown().await;
}

/// True when descriptor `fd` can only ever read end-of-file at once: it is `/dev/null`, or
/// it is not open. Then there is nothing to forward, and no reader (tokio reads stdin on a
/// thread of its blocking pool, started for it) is needed: the rank's stdin pipe is closed
/// straight away.
pub fn reads_nothing(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: fstat writes only into the local struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
    }
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{OutputPlan, Pattern};

    #[test]
    fn only_dev_null_or_a_closed_descriptor_reads_nothing() {
        use std::os::fd::AsRawFd;
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(reads_nothing(null.as_raw_fd()));
        let zero = std::fs::File::open("/dev/zero").unwrap();
        assert!(!reads_nothing(zero.as_raw_fd()));
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(!reads_nothing(file.as_raw_fd()));
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors, closed below.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        assert!(!reads_nothing(fds[0]));
        // SAFETY: both are ours.
        unsafe { (libc::close(fds[0]), libc::close(fds[1])) };
        // Far above any descriptor this test process has open.
        assert!(reads_nothing(999_999));
    }

    #[tokio::test]
    async fn lines_are_whole_and_labelled() {
        let (tx, mut rx) = output_queue();
        let (_end_tx, end_rx) = watch::channel(false);
        let input: &[u8] = b"one\ntwo\nthree";
        let mut plan = OutputPlan::default();
        plan.options.prepend = Some(Pattern::parse("[%r] ").unwrap());
        let route = Route::new(&plan, true, 3, 0, "a");
        forward_lines(input, Stream::Stdout, route, tx, end_rx).await;
        let mut got = Vec::new();
        while let Some((d, b)) = rx.recv().await {
            assert_eq!(d, Dest::from(Stream::Stdout));
            got.push(String::from_utf8(b.to_vec()).unwrap());
        }
        // One read: its two complete lines in one message, the last piece at the end.
        assert_eq!(got, vec!["[3] one\n[3] two\n", "[3] three"]);
    }

    #[test]
    fn every_line_of_a_run_gets_the_prefix() {
        assert_eq!(&prefixed(b"[1] ", b"a\nbb\n")[..], b"[1] a\n[1] bb\n");
        assert_eq!(&prefixed(b"[1] ", b"a\ntail")[..], b"[1] a\n[1] tail");
        assert_eq!(&prefixed(b"[1] ", b"")[..], b"");
    }

    #[tokio::test]
    async fn long_lines_are_cut_not_buffered_forever() {
        let (tx, mut rx) = output_queue();
        let (_end_tx, end_rx) = watch::channel(false);
        let input = vec![b'x'; LINE_MAX * 2 + 10];
        forward_lines(&input[..], Stream::Stderr, Route::default(), tx, end_rx).await;
        let mut total = 0;
        while let Some((_, b)) = rx.recv().await {
            assert!(b.len() <= LINE_MAX + 8192);
            total += b.len();
        }
        assert_eq!(total, input.len());
    }

    #[tokio::test]
    async fn files_and_dropped_ranks() {
        let mut plan = OutputPlan::default();
        plan.options.outfile = Some(Pattern::parse("o.%r").unwrap());
        plan.options.output_from = Some(1);
        let (_end_tx, end_rx) = watch::channel(false);
        let (tx, mut rx) = output_queue();
        let dropped = Route::new(&plan, true, 0, 0, "a");
        forward_lines(
            &b"zero\n"[..],
            Stream::Stdout,
            dropped,
            tx.clone(),
            end_rx.clone(),
        )
        .await;
        let kept = Route::new(&plan, true, 1, 0, "a");
        forward_lines(&b"one\n"[..], Stream::Stdout, kept, tx, end_rx).await;
        let (dest, line) = rx.recv().await.unwrap();
        assert_eq!(dest.file.as_deref(), Some("o.1"));
        assert_eq!(&line[..], b"one\n");
        assert!(rx.recv().await.is_none(), "rank 0's line is dropped");
    }
}
