//! The PMI connection hot path's writing side: a rank's socket, the replies written straight
//! to it, and the writer task that waits for a socket that does not take them at once. (The
//! reading side is [`super::poll`].)

use super::{Ctx, NodeEvent};
use bytes::{Buf, Bytes, BytesMut};
use kauri_proto::pmi::{ConnId, Output};
use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use tracing::warn;

/// The most reply bytes queued for one PMI connection. A rank past it does not read its
/// replies: its connection is closed (see [`Writer::queue`]); a rank that reads them, however
/// slowly, never gets near it (a reply is at most a few kB, and a rank waits for each).
pub const PMI_REPLY_QUEUE_MAX: usize = 4 << 20;

/// What a connection's [`Writer`], its reader and its writer task share, in one allocation:
/// a reply touches the queue's length and the socket together, and with hundreds of ranks
/// running between two replies, each separate allocation is a cache miss of its own.
pub(super) struct ConnIo {
    /// Replies the socket did not take yet, in order; the writer task writes them as the
    /// socket drains.
    pending: RefCell<BytesMut>,
    /// The rank's socket, for direct writes (and its reads).
    pub(super) sock: RankSock,
    /// Wakes the writer task: something is pending, or the connection is done.
    wake: tokio::sync::Notify,
}

impl ConnIo {
    /// A connection on `sock`, nothing pending.
    pub(super) fn new(sock: RankSock) -> ConnIo {
        ConnIo {
            pending: RefCell::new(BytesMut::new()),
            sock,
            wake: tokio::sync::Notify::new(),
        }
    }
}

/// The sending side of one PMI connection: its socket for direct writes, and what waits for
/// its writer task.
pub(super) struct Writer {
    io: Rc<ConnIo>,
    /// Tells the writer task to give up: what is queued is dropped, the last words (an error
    /// reply) are written if the socket takes them, and the socket is closed.
    abandon: Option<tokio::sync::oneshot::Sender<Bytes>>,
    /// The connection speaks PMI-2 (for the error reply's form); set by its reader. (Dropping
    /// the writer, `abandon` with it, tells the task the connection is done: it writes what is
    /// pending and closes its side.)
    v2: Rc<Cell<bool>>,
}

/// What became of a reply given to [`Writer::queue`].
enum Queued {
    /// It was written, or waits for the writer task.
    Yes,
    /// It would have taken the queue past [`PMI_REPLY_QUEUE_MAX`]: the writer must give up
    /// ([`Writer::abandon`]), and the connection be closed.
    Overflow,
}

impl Writer {
    /// Writes `bytes` now as far as the socket takes them, and queues the rest for the writer
    /// task (behind what is queued already), unless the queue would pass
    /// [`PMI_REPLY_QUEUE_MAX`] (then see [`Writer::abandon`]).
    fn queue(&mut self, bytes: &[u8]) -> Queued {
        let mut pending = self.io.pending.borrow_mut();
        let mut rest = bytes;
        if pending.is_empty() {
            // The common case: the rank reads its replies, and the socket has room. No task
            // wakes, nothing is copied.
            match self.io.sock.try_write(rest) {
                Ok(n) => rest = &rest[n.min(rest.len())..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // A socket that fails is the reader's to notice (it reads EOF or an error).
                Err(_) => return Queued::Yes,
            }
            if rest.is_empty() {
                return Queued::Yes;
            }
        }
        if pending.len() + rest.len() <= PMI_REPLY_QUEUE_MAX {
            pending.extend_from_slice(rest);
            drop(pending);
            self.io.wake.notify_one();
            return Queued::Yes;
        }
        Queued::Overflow
    }

    /// After a [`Queued::Overflow`]: tells the writer task to drop everything queued, write an
    /// error reply naming `rank` if the socket takes it at once, and close the socket.
    fn abandon(&mut self, rank: Option<usize>) {
        if let Some(a) = self.abandon.take() {
            let who = rank.map_or("this PMI client".to_string(), |r| format!("rank {r}"));
            let status = pmi_wire::Status::error(
                -1,
                format!(
                    "{who} does not read its PMI replies ({} MiB queued); closing its connection",
                    PMI_REPLY_QUEUE_MAX >> 20
                ),
            );
            let mut b = BytesMut::new();
            if self.v2.get() {
                pmi_wire::v2::encode_error("error", None, &status, &mut b);
            } else {
                pmi_wire::v1::encode_error("error", &status, &mut b);
            }
            let _ = a.send(b.freeze());
        }
    }
}

/// A PMI connection's socket (a Unix socket of a `PMI_FD`, or a TCP one of `-pmi-port`),
/// read and written through `&self` (no split, no lock between the halves), so that
/// `dispatch` can write a reply straight away.
///
/// It is watched for reading only, in its job's epoll set ([`super::poll`]). A socket
/// registered for writing too (as tokio's streams are) wakes the poller each time the rank
/// reads a reply, since its send buffer drains: one wake-up of kauri per reply, for nothing.
/// Replies are written with a plain non-blocking `write`; only when the socket is full does
/// [`RankSock::writable`] register a duplicate of the descriptor for writing, for as long as
/// it waits.
pub(super) struct RankSock {
    fd: std::os::fd::OwnedFd,
}

impl AsRawFd for RankSock {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl RankSock {
    /// Serves `fd`, a connected stream socket, made non-blocking here.
    pub(super) fn new(fd: std::os::fd::OwnedFd) -> std::io::Result<RankSock> {
        let raw = fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
        unsafe {
            let fl = libc::fcntl(raw, libc::F_GETFL);
            if fl < 0 || libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(RankSock { fd })
    }

    /// Reads what the socket holds into `buf`'s spare room, without waiting (`WouldBlock`
    /// when it holds nothing; `Ok(0)` at its end).
    pub(super) fn read_into(&self, buf: &mut BytesMut) -> std::io::Result<usize> {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let spare = buf.spare_capacity_mut();
        // SAFETY: read(2) writes at most `spare.len()` bytes into the spare capacity.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel initialised the first n bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
        Ok(n as usize)
    }

    /// Writes what the socket takes of `b` now, without waiting.
    fn try_write(&self, b: &[u8]) -> std::io::Result<usize> {
        // SAFETY: send(2) reads at most b.len() bytes from `b`. MSG_NOSIGNAL: a rank that
        // closed its end is an EPIPE here, not a signal.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                b.as_ptr().cast(),
                b.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Waits until the socket can take more, through a duplicate of its descriptor
    /// registered for writing while this waits (see the type's doc).
    async fn writable(&self) -> std::io::Result<()> {
        // SAFETY: dup returns a new descriptor (or -1) that nobody else owns.
        let dup = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `dup` was just created and is owned by this OwnedFd alone.
        let dup = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
        // SAFETY: as in `new`: the AsyncFd owns the duplicate for as long as it is registered.
        let w = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(dup, tokio::io::Interest::WRITABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        let _ready = w.writable().await?;
        Ok(())
    }

    /// Shuts the write side down (the rank reads EOF).
    fn shutdown_write(&self) {
        // SAFETY: shutdown(2) on the descriptor this socket owns; no memory passed.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) };
    }
}

/// One connection's replies of one `dispatch` round.
pub(super) enum Replies {
    /// The usual case: one reply, as the engine encoded it.
    One(Bytes),
    /// Several, joined.
    Many(BytesMut),
}

impl Replies {
    fn push(&mut self, more: Bytes) {
        match self {
            Replies::One(first) => {
                let mut all = BytesMut::with_capacity(first.len() + more.len());
                all.extend_from_slice(first);
                all.extend_from_slice(&more);
                *self = Replies::Many(all);
            }
            Replies::Many(all) => all.extend_from_slice(&more),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Replies::One(b) => b,
            Replies::Many(b) => b,
        }
    }
}

impl Ctx {
    /// Writes replies; hands everything else to the node's owner.
    pub(super) fn dispatch(&self) {
        // The engine's outputs and this round's replies, in vectors kept from round to round
        // (taken out while in use, so a nested dispatch would only allocate its own).
        let mut outputs = std::mem::take(&mut *self.outputs.borrow_mut());
        let mut batch = std::mem::take(&mut *self.batch.borrow_mut());
        loop {
            self.engine.borrow_mut().drain_into(&mut outputs);
            if outputs.is_empty() {
                break;
            }
            // Each connection's replies of this round, in order: one write each. Most
            // connections get one reply, written from the engine's bytes without a copy.
            for o in outputs.drain(..) {
                match o {
                    Output::Send { conn, bytes } => {
                        match batch.iter_mut().find(|(c, _)| *c == conn) {
                            Some((_, b)) => b.push(bytes),
                            None => batch.push((conn, Replies::One(bytes))),
                        }
                    }
                    Output::Close { conn } => {
                        if let Some(k) = batch.iter().position(|(c, _)| *c == conn) {
                            let (c, b) = batch.remove(k);
                            self.send(c, b.as_slice());
                        }
                        self.writers.borrow_mut().remove(&conn);
                        self.engine.borrow_mut().disconnect(conn);
                    }
                    Output::HungUp { rank } => self.after_hangup(rank),
                    other => {
                        let _ = self.events.send(NodeEvent::Engine(other));
                    }
                }
            }
            for (conn, b) in batch.drain(..) {
                self.send(conn, b.as_slice());
            }
        }
        *self.outputs.borrow_mut() = outputs;
        *self.batch.borrow_mut() = batch;
    }

    /// Rank `rank` closed its PMI connection without finalize: a moment later, unless its
    /// end was seen meanwhile, the engine counts it as a rank that left PMI alive.
    fn after_hangup(&self, rank: usize) {
        let me = self.me.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(kauri_proto::pmi::HANGUP_GRACE).await;
            if let Some(ctx) = me.upgrade() {
                ctx.engine.borrow_mut().rank_hung_up(rank);
                ctx.dispatch();
            }
        });
    }

    /// Writes (or queues) `bytes` for connection `conn`; a rank whose queue overflows is
    /// closed and reported.
    pub(super) fn send(&self, conn: ConnId, bytes: &[u8]) {
        let queued = match self.writers.borrow_mut().get_mut(&conn) {
            Some(w) => w.queue(bytes),
            None => Queued::Yes,
        };
        if let Queued::Overflow = queued {
            let rank = self.engine.borrow().rank_of(conn);
            if let Some(mut w) = self.writers.borrow_mut().remove(&conn) {
                w.abandon(rank);
            }
            self.engine.borrow_mut().disconnect(conn);
            let _ = self.events.send(NodeEvent::UnreadReplies {
                rank,
                queued: PMI_REPLY_QUEUE_MAX,
            });
        }
    }

    pub(super) fn new_conn(&self) -> ConnId {
        let c = self.next_conn.get();
        self.next_conn.set(c + 1);
        c
    }
}

/// Gives connection `conn` its [`Writer`] (direct writes to `io`'s socket) and starts its
/// writer task; returns the flag its reader sets when the connection speaks PMI-2.
pub(super) fn start_writer(ctx: &Ctx, conn: ConnId, io: &Rc<ConnIo>) -> Rc<Cell<bool>> {
    // The last words, once the connection is abandoned; a `Writer` dropped without them (the
    // connection closed as usual) abandons nothing: what is queued is still written.
    let (abandon, abandoned) = tokio::sync::oneshot::channel::<Bytes>();
    let v2 = Rc::new(Cell::new(false));
    ctx.writers.borrow_mut().insert(
        conn,
        Writer {
            io: io.clone(),
            abandon: Some(abandon),
            v2: v2.clone(),
        },
    );
    tokio::task::spawn_local(write_pending(io.clone(), abandoned));
    v2
}

/// The writer task of one connection: writes what is pending to its socket as the socket
/// drains, each time its [`Writer`] wakes it, until the writer is dropped (then it finishes
/// what is pending) or abandons the connection (then only the last words go, if the socket
/// takes them); then it closes its side.
async fn write_pending(io: Rc<ConnIo>, mut abandoned: tokio::sync::oneshot::Receiver<Bytes>) {
    let (s, p, w) = (&io.sock, &io.pending, &io.wake);
    // The writer is gone: finish what is pending, then close.
    let mut closing = false;
    let last_words = 'task: loop {
        // Write what is pending, as the socket drains.
        while !p.borrow().is_empty() {
            tokio::select! {
                biased;
                last = &mut abandoned, if !closing => match last {
                    Ok(b) => break 'task Some(b),
                    Err(_) => closing = true,
                },
                ready = s.writable() => if ready.is_err() { break 'task None },
            }
            let r = {
                let b = p.borrow();
                s.try_write(&b)
            };
            match r {
                Ok(n) => {
                    p.borrow_mut().advance(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break 'task None,
            }
        }
        if closing {
            break None;
        }
        tokio::select! {
            biased;
            last = &mut abandoned => match last {
                Ok(b) => break Some(b),
                Err(_) => closing = true,
            },
            () = w.notified() => {}
        }
    };
    if let Some(b) = last_words {
        // What was queued goes now, not when the reader lets go of the connection.
        *p.borrow_mut() = BytesMut::new();
        // The rank reads nothing: its error reply goes out only if the socket has room
        // for it now. Nothing waits on it.
        let _ = s.try_write(&b);
    }
    s.shutdown_write();
}

/// Accepts the ranks' PMI connections on the `-pmi-port` listener `l` and serves each (the
/// connection says which rank it is, with `PMI_ID`).
pub(super) async fn accept_pmi(c: Rc<Ctx>, l: tokio::net::TcpListener) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    while let Ok((s, peer)) = l.accept().await {
        // Any local user can reach a loopback port and claim a rank's PMI_ID:
        // only the job's own user is served.
        let (owner, port) = match s.local_addr() {
            Ok(local) => (kauri_os::peer::uid(peer, local), local.port()),
            Err(_) => (None, 0),
        };
        if owner != Some(me) {
            let who = owner.map_or("unknown".into(), |u| u.to_string());
            say!("kauri: refused a PMI connection from uid {who} on port {port}");
            continue; // dropped: closed without a reply
        }
        let _ = s.set_nodelay(true);
        let sock = match s.into_std().and_then(|s| RankSock::new(s.into())) {
            Ok(sock) => sock,
            Err(e) => {
                warn!("cannot serve a PMI connection: {e}");
                continue;
            }
        };
        let conn = c.new_conn();
        c.engine.borrow_mut().connect(conn, None);
        super::poll::serve_conn(&c, conn, sock);
    }
}
