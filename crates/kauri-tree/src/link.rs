//! The sending side of one tree link: a queue of encoded frames ([`Link`]) and the one task
//! that writes them to the link's socket, in order ([`Queue::write`]). Every message on a
//! link after the handshake goes this one way.
//!
//! The queue exists before its socket does: a parent makes a child's link when it launches
//! the child, so what it sends before the child connects (stdin for its rank 0, published
//! pairs, a signal, the teardown) waits there and follows the child's `Spec`. Sending never
//! waits, so a slow link blocks no other work; a message for every child is encoded once and
//! the same bytes are queued for each ([`Link::send_frame`]).
//!
//! An agent's link to its parent also carries its ranks' output ([`Queue::write`]'s
//! `output`): whole lines from an output queue bounded in lines and in bytes
//! ([`kauri_host::iofwd::output_queue`]), so a parent that reads slowly slows the ranks' pipes
//! rather than filling memory. Control frames go first; output goes in runs of
//! up to 64 KiB per stream; the last frame ([`Link::finish`], the agent's `Done`) goes after
//! every line still queued.
//!
//! It owns the queue and the writing; the framing is [`super::frame`]'s, the messages
//! [`super::msg`]'s.

use super::frame::encode;
use super::msg::Up;
use bytes::Bytes;
use kauri_host::iofwd::Dest;
use serde::Serialize;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::warn;

/// The most output one `Output` message carries.
const OUTPUT_RUN: usize = 256 * 1024;

enum Item {
    Frame(Bytes),
    Last(Bytes),
}

/// The sending end of a link: cheap to clone, never waits.
#[derive(Clone, Debug)]
pub struct Link {
    tx: mpsc::UnboundedSender<Item>,
}

/// What waits to be written on a link, until [`Queue::write`] is given its socket.
#[derive(Debug)]
pub struct Queue {
    rx: mpsc::UnboundedReceiver<Item>,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Frame(b) => write!(f, "Frame({} bytes)", b.len()),
            Item::Last(b) => write!(f, "Last({} bytes)", b.len()),
        }
    }
}

/// A new link: its sending end and its queue.
pub fn link() -> (Link, Queue) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Link { tx }, Queue { rx })
}

impl Link {
    /// Queues `msg`, encoded. False when it cannot be encoded (logged) or the link's writer is
    /// gone.
    pub fn send<M: Serialize>(&self, msg: &M) -> bool {
        match encode(msg) {
            Ok(f) => self.send_frame(f),
            Err(e) => {
                warn!("cannot encode a message for a link: {e}");
                false
            }
        }
    }

    /// Queues a frame encoded already (one encoding for every child, or a frame passed on as
    /// it came).
    pub fn send_frame(&self, frame: Bytes) -> bool {
        self.tx.send(Item::Frame(frame)).is_ok()
    }

    /// Queues the link's last message: it is written after every frame and every line of
    /// output queued before it, and then the socket is shut.
    pub fn finish<M: Serialize>(&self, msg: &M) -> bool {
        match encode(msg) {
            Ok(f) => self.tx.send(Item::Last(f)).is_ok(),
            Err(e) => {
                warn!("cannot encode a message for a link: {e}");
                false
            }
        }
    }
}

/// Sends `msg` on `link` every `every` until the link's writer is gone: the link's heartbeat.
/// It comes from the sender's event loop, not from its ranks, so ranks that compute for hours
/// never stop it, and a host that stops (frozen, cut off, `SIGSTOP`) does.
pub async fn beat<M: Serialize>(link: Link, msg: M, every: Duration) {
    let Ok(frame) = encode(&msg) else { return };
    loop {
        tokio::time::sleep(every).await;
        if !link.send_frame(frame.clone()) {
            return;
        }
    }
}

/// Which end of a link a socket is (for [`keepalive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The parent's: it writes control messages, which the child always reads.
    Parent,
    /// The child's (the uplink): it writes the ranks' output too, which the parent stops
    /// reading while its own output is slow (a terminal nobody reads).
    Child,
}

/// Turns on TCP keepalive for a link's socket, scaled to `silence`, and on the parent's end
/// also bounds how long sent data may stay unacknowledged (`TCP_USER_TIMEOUT`): a peer whose
/// host vanished from the network (no FIN, no RST) then fails the link's reads and writes
/// instead of holding them for many minutes. Not on the child's end: Linux also ends a
/// connection whose peer's receive window stays closed longer than `TCP_USER_TIMEOUT`, even
/// while the peer answers every probe, and the uplink's window is closed for as long as the
/// parent's output is throttled; a parent that vanished is noticed by its heartbeats' silence
/// instead. Best effort: an error is ignored.
pub fn keepalive(sock: &tokio::net::TcpStream, silence: Duration, end: End) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let secs = silence.as_secs().max(3) as libc::c_int;
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: setsockopt reads an int of the given size from a live stack variable; the
        // fd is the socket's own, open for the call.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 3).max(1));
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (secs / 6).max(1));
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
    if end == End::Parent {
        set(
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            secs.saturating_mul(1000),
        );
    }
}

/// What the writer does next.
enum Next {
    Frame(Bytes),
    Last(Bytes),
    Output(Bytes),
    End,
}

impl Queue {
    /// Writes `first` (a child's `Spec`), then every frame queued, in order, and, between
    /// them, `output` (whole lines, for an agent's link to its parent) in runs of up to 64 KiB
    /// per stream, control frames first. Ends when a write fails, when every [`Link`] is gone
    /// (after the output still queued), or after the last frame ([`Link::finish`]).
    pub async fn write<W: AsyncWrite + Unpin>(
        mut self,
        mut wr: W,
        first: Option<Bytes>,
        mut output: Option<mpsc::Receiver<(Dest, Bytes)>>,
    ) {
        if let Some(f) = first {
            if wr.write_all(&f).await.is_err() {
                return;
            }
        }
        let mut held: Option<(Dest, Bytes)> = None;
        loop {
            let next = if let Some(h) = held.take() {
                Next::Output(output_run(h, output.as_mut(), &mut held))
            } else {
                tokio::select! {
                    biased;
                    item = self.rx.recv() => match item {
                        Some(Item::Frame(f)) => Next::Frame(f),
                        Some(Item::Last(f)) => Next::Last(f),
                        None => Next::End,
                    },
                    o = recv_output(&mut output) => match o {
                        Some(first) => Next::Output(output_run(first, output.as_mut(), &mut held)),
                        None => {
                            output = None;
                            continue;
                        }
                    },
                }
            };
            let f = match next {
                Next::Frame(f) | Next::Output(f) => f,
                Next::Last(f) => {
                    if flush_output(&mut wr, output.as_mut(), &mut held).await {
                        let _ = wr.write_all(&f).await;
                    }
                    let _ = wr.shutdown().await;
                    return;
                }
                Next::End => {
                    if flush_output(&mut wr, output.as_mut(), &mut held).await {
                        let _ = wr.shutdown().await;
                    }
                    return;
                }
            };
            if wr.write_all(&f).await.is_err() {
                return;
            }
        }
    }
}

/// The next run of output, or `None` once every sender is gone (never, without output).
async fn recv_output(output: &mut Option<mpsc::Receiver<(Dest, Bytes)>>) -> Option<(Dest, Bytes)> {
    match output {
        Some(o) => o.recv().await,
        None => std::future::pending().await,
    }
}

/// Writes every line of output already queued; false when a write failed.
async fn flush_output<W: AsyncWrite + Unpin>(
    wr: &mut W,
    mut output: Option<&mut mpsc::Receiver<(Dest, Bytes)>>,
    held: &mut Option<(Dest, Bytes)>,
) -> bool {
    loop {
        let first = match held.take() {
            Some(h) => h,
            None => match output.as_mut().map(|o| o.try_recv()) {
                Some(Ok(x)) => x,
                _ => return true,
            },
        };
        let f = output_run(first, output.as_deref_mut(), held);
        if wr.write_all(&f).await.is_err() {
            return false;
        }
    }
}

/// One encoded `Output` message: `first` and whatever lines for the same destination are
/// already queued, up to [`OUTPUT_RUN`]; a line for another is held for the next run.
fn output_run(
    first: (Dest, Bytes),
    output: Option<&mut mpsc::Receiver<(Dest, Bytes)>>,
    held: &mut Option<(Dest, Bytes)>,
) -> Bytes {
    let (dest, bytes) = first;
    let mut data = Vec::with_capacity(bytes.len().max(OUTPUT_RUN.min(4 * bytes.len())));
    data.extend_from_slice(&bytes);
    if let Some(out) = output {
        kauri_host::iofwd::join_queued(&mut data, &dest, out, held, OUTPUT_RUN);
    }
    let msg = Up::Output {
        stream: dest.stream,
        file: dest.file.map(|f| f.to_string()),
        data,
    };
    // Output is at most 64 KiB plus one line: it always encodes.
    encode(&msg).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::recv;
    use crate::msg::Down;

    /// Everything `write` put on the wire, decoded.
    async fn written(
        queue: Queue,
        first: Option<Bytes>,
        output: Option<mpsc::Receiver<(Dest, Bytes)>>,
    ) -> Vec<Up> {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        queue.write(a, first, output).await;
        let mut msgs = Vec::new();
        while let Ok(Some(m)) = recv::<_, Up>(&mut b).await {
            msgs.push(m);
        }
        msgs
    }

    #[tokio::test]
    async fn frames_queued_before_the_socket_follow_the_first() {
        let (link, queue) = link();
        assert!(link.send(&Up::Publish(vec![("k".into(), "v".into())])));
        assert!(link.send_frame(encode(&Up::Done).unwrap()));
        drop(link);
        let first = encode(&Up::Reports(vec![])).unwrap();
        let got = written(queue, Some(first), None).await;
        assert_eq!(
            got,
            vec![
                Up::Reports(vec![]),
                Up::Publish(vec![("k".into(), "v".into())]),
                Up::Done
            ]
        );
    }

    #[tokio::test]
    async fn output_is_batched_per_destination_and_the_last_frame_goes_after_it() {
        use kauri_host::iofwd::Stream;
        let (link, queue) = link();
        let (out_tx, out_rx) = mpsc::channel(16);
        let file = |f: &str| Dest {
            stream: Stream::Stdout,
            file: Some(f.into()),
            close: false,
        };
        for (d, l) in [
            (Stream::Stdout.into(), "a\n"),
            (Stream::Stdout.into(), "b\n"),
            (Stream::Stderr.into(), "e\n"),
            (Stream::Stdout.into(), "c\n"),
            (file("o.1"), "f\n"),
            (file("o.1"), "g\n"),
            (file("o.2"), "h\n"),
        ] {
            out_tx.send((d, Bytes::from(l))).await.unwrap();
        }
        assert!(link.finish(&Up::Done));
        let got = written(queue, None, Some(out_rx)).await;
        let out = |stream, file: Option<&str>, d: &str| Up::Output {
            stream,
            file: file.map(str::to_string),
            data: d.as_bytes().to_vec(),
        };
        assert_eq!(
            got,
            vec![
                out(Stream::Stdout, None, "a\nb\n"),
                out(Stream::Stderr, None, "e\n"),
                out(Stream::Stdout, None, "c\n"),
                out(Stream::Stdout, Some("o.1"), "f\ng\n"),
                out(Stream::Stdout, Some("o.2"), "h\n"),
                Up::Done
            ]
        );
        drop(out_tx);
    }

    #[tokio::test]
    async fn a_link_with_no_socket_yet_keeps_what_is_sent() {
        let (link, queue) = link();
        for i in 0..3 {
            assert!(link.send(&Down::Signal(i)));
        }
        drop(link);
        let (a, mut b) = tokio::io::duplex(1 << 16);
        queue.write(a, None, None).await;
        for i in 0..3 {
            assert_eq!(
                recv::<_, Down>(&mut b).await.unwrap(),
                Some(Down::Signal(i))
            );
        }
        assert_eq!(recv::<_, Down>(&mut b).await.unwrap(), None);
    }
}
