//! The reading side of a job's PMI connections on this host: one loop for all of them.
//!
//! Their sockets sit in one epoll set of their own (level-triggered), and that set is the
//! one descriptor tokio's poller watches for them. When it is readable, one task asks the set
//! which sockets have something and serves each in turn: one read, every complete request
//! of it handed to the engine, its replies written at once ([`Ctx::dispatch`]). So a request
//! costs a `read`, the engine and a `write`, as in a hand-written epoll loop, and no task
//! wakes for it: a task per connection cost a wake-up, a place in tokio's run queue and a
//! poll of its own for every request (and a 256-rank allgather makes 65,000 of them per
//! round). The writing side that waits for a full socket stays one task per connection
//! ([`super::conn`]); it is rare.

use super::conn::{start_writer, ConnIo, RankSock};
use super::Ctx;
use bytes::BytesMut;
use kauri_proto::pmi::{ConnId, Framing};
use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use tracing::warn;

/// The readiness a set asks of each socket: something to read, an end or an error (the
/// last two are always reported).
const EVENTS: u32 = libc::EPOLLIN as u32;

/// Readable sockets taken from the set at once.
const BATCH: usize = 256;

/// Requests served before the loop lets the job's other tasks run (the tree's links, the
/// ranks' output, their ends).
const TURN: usize = 1024;

/// One job's PMI connections on this host, read from one loop ([`PmiPoll::run`]).
pub(super) struct PmiPoll {
    /// The epoll set of the connections' sockets, registered with tokio for reading.
    set: tokio::io::unix::AsyncFd<OwnedFd>,
    /// Each connection's reading state, by the slot its socket is registered under.
    slots: RefCell<Vec<Option<Reading>>>,
    /// Slots free for the next connection (the others hold one).
    free: RefCell<Vec<usize>>,
}

/// What reading one connection keeps between reads.
struct Reading {
    conn: ConnId,
    io: Rc<ConnIo>,
    framing: Framing,
    /// Bytes read and not yet a whole request.
    buf: BytesMut,
    /// Set when the connection speaks PMI-2 (its writer's error reply takes that form).
    v2: Rc<Cell<bool>>,
}

/// Serves PMI connection `conn` (already known to the engine) on `sock` until it closes:
/// gives it its writer, and its socket to the job's loop, started here when it has none.
/// The queue of replies a rank does not read holds at most
/// [`super::conn::PMI_REPLY_QUEUE_MAX`] bytes; a rank that lets it fill is closed.
pub(super) fn serve_conn(ctx: &Rc<Ctx>, conn: ConnId, sock: RankSock) {
    let io = Rc::new(ConnIo::new(sock));
    let v2 = start_writer(ctx, conn, &io);
    let reading = Reading {
        conn,
        io,
        framing: Framing::default(),
        buf: BytesMut::with_capacity(4096),
        v2,
    };
    let poll = ctx.pmi_poll.borrow().clone();
    let poll = match poll {
        Some(p) => Ok(p),
        None => PmiPoll::new().map(|p| {
            let p = Rc::new(p);
            *ctx.pmi_poll.borrow_mut() = Some(p.clone());
            tokio::task::spawn_local(PmiPoll::run(ctx.clone(), p.clone()));
            p
        }),
    };
    if let Err(e) = poll.and_then(|p| p.add(reading)) {
        warn!("cannot serve a PMI connection: {e}");
        close(ctx, conn);
    }
}

/// Forgets connection `conn`: its writer (which writes what is queued, then closes its
/// side) and the engine's view of it; then writes what the engine answered to that.
fn close(ctx: &Ctx, conn: ConnId) {
    ctx.writers.borrow_mut().remove(&conn);
    ctx.engine.borrow_mut().disconnect(conn);
    ctx.dispatch();
}

impl PmiPoll {
    fn new() -> std::io::Result<PmiPoll> {
        // SAFETY: epoll_create1 takes no memory; the descriptor it returns is owned here.
        let set = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if set < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `set` was just created and nobody else owns it.
        let set = unsafe { OwnedFd::from_raw_fd(set) };
        // SAFETY: the AsyncFd owns the set, which stays open for as long as it is registered
        // (it closes it only when dropped).
        let set = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(set, tokio::io::Interest::READABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        Ok(PmiPoll {
            set,
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
        })
    }

    /// Puts a connection's socket in the set.
    fn add(&self, r: Reading) -> std::io::Result<()> {
        let fd = r.io.sock.as_raw_fd();
        let mut slots = self.slots.borrow_mut();
        let slot = self.free.borrow_mut().pop().unwrap_or(slots.len());
        let mut ev = libc::epoll_event {
            events: EVENTS,
            u64: slot as u64,
        };
        // SAFETY: registers a descriptor `r` owns (it stays open until `end` takes it out);
        // the kernel copies `ev`.
        if unsafe { libc::epoll_ctl(self.set.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            let e = std::io::Error::last_os_error();
            if slot < slots.len() {
                self.free.borrow_mut().push(slot);
            }
            return Err(e);
        }
        if slot == slots.len() {
            slots.push(Some(r));
        } else {
            slots[slot] = Some(r);
        }
        Ok(())
    }

    /// How many connections are in the set.
    fn live(&self) -> usize {
        self.slots.borrow().len() - self.free.borrow().len()
    }

    /// Takes the connection in `slot` out of the set and closes it.
    fn end(&self, ctx: &Ctx, slot: usize, r: Reading) {
        // SAFETY: deregisters a descriptor still open (`r` owns it); no event is passed.
        unsafe {
            libc::epoll_ctl(
                self.set.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                r.io.sock.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
        self.free.borrow_mut().push(slot);
        let conn = r.conn;
        drop(r);
        close(ctx, conn);
    }

    /// The loop: while the set has connections, waits until some are readable and serves
    /// them, letting the job's other tasks run after every [`TURN`] requests. With no
    /// connection left it ends, and the job's next connection starts another.
    async fn run(ctx: Rc<Ctx>, me: Rc<PmiPoll>) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; BATCH];
        'wait: while me.live() > 0 {
            let Ok(mut ready) = me.set.readable().await else {
                break;
            };
            let mut served = 0;
            while served < TURN {
                // SAFETY: epoll_wait writes at most `events.len()` entries into `events`.
                let k = unsafe {
                    libc::epoll_wait(
                        me.set.as_raw_fd(),
                        events.as_mut_ptr(),
                        events.len() as i32,
                        0,
                    )
                };
                if k < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    warn!("cannot wait for the ranks' PMI requests: {e}");
                    break 'wait;
                }
                if k == 0 {
                    // Nothing is readable. Something that became readable since tokio said
                    // so keeps the readiness (tokio compares its counts), so no request
                    // waits unseen.
                    ready.clear_ready();
                    break;
                }
                for e in &events[..k as usize] {
                    me.serve(&ctx, e.u64 as usize);
                }
                if me.live() == 0 {
                    break 'wait;
                }
                served += k as usize;
            }
            if served >= TURN {
                drop(ready);
                tokio::task::yield_now().await;
            }
        }
        me.end_all(&ctx);
        let mut current = ctx.pmi_poll.borrow_mut();
        if current.as_ref().is_some_and(|p| Rc::ptr_eq(p, &me)) {
            *current = None;
        }
    }

    /// Closes every connection still in the set (only when the set itself failed).
    fn end_all(&self, ctx: &Ctx) {
        let all: Vec<(usize, Reading)> = self
            .slots
            .borrow_mut()
            .iter_mut()
            .enumerate()
            .filter_map(|(slot, r)| r.take().map(|r| (slot, r)))
            .collect();
        for (slot, r) in all {
            self.end(ctx, slot, r);
        }
    }

    /// Serves the readable connection in `slot` (a slot emptied earlier in the same batch is
    /// passed over).
    fn serve(&self, ctx: &Ctx, slot: usize) {
        let taken = self.slots.borrow_mut().get_mut(slot).and_then(Option::take);
        let Some(mut r) = taken else {
            return;
        };
        if read_requests(ctx, &mut r) {
            self.slots.borrow_mut()[slot] = Some(r);
        } else {
            self.end(ctx, slot, r);
        }
    }
}

/// One read of connection `r`: hands every complete request to the engine and writes the
/// replies. Returns whether the connection stays open: not after its end, an error, input
/// beyond repair, or the engine closing it.
fn read_requests(ctx: &Ctx, r: &mut Reading) -> bool {
    match r.io.sock.read_into(&mut r.buf) {
        Ok(0) => return false,
        Ok(_) => {}
        // Nothing after all (level-triggered: a later readiness says when).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ) =>
        {
            return true
        }
        Err(_) => return false,
    }
    loop {
        let decoded = r.framing.decode(&mut r.buf);
        r.v2.set(r.framing.is_v2());
        match decoded {
            Ok(Some(req)) => {
                ctx.heard();
                ctx.engine.borrow_mut().handle(r.conn, req)
            }
            Ok(None) => break,
            Err(e) => {
                let fatal = e.is_fatal();
                ctx.engine
                    .borrow_mut()
                    .bad_input(r.conn, r.framing.is_v2(), &e);
                if fatal {
                    ctx.dispatch();
                    return false;
                }
            }
        }
    }
    ctx.dispatch();
    // closed by the engine?
    ctx.writers.borrow().contains_key(&r.conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::JobTx;
    use kauri_core::plan::{AppPlan, HostPlan, JobPlan, RankPlan};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::UnixStream;

    /// A job of three ranks on this host (`-n 3 --pmi=pmi1 true`: one segment, every rank
    /// here), and its events' receiving end. Written out rather than parsed and planned: the
    /// command line's parser is the `kauri` crate's, above this one; the PMI engine reads the
    /// job's name, size, segments, process mapping and which ranks are here.
    fn job() -> (Rc<Ctx>, crate::events::Receiver<super::super::NodeEvent>) {
        let ranks = (0..3)
            .map(|rank| RankPlan {
                rank,
                app: 0,
                local_id: rank,
            })
            .collect();
        let job = JobPlan {
            kvsname: "kvs_poll_0".into(),
            size: 3,
            universe_size: 3,
            appnum: vec![0; 3],
            process_mapping: "(vector,(0,1,3))".into(),
            apps: vec![AppPlan {
                program: "true".into(),
                args: Vec::new(),
                env: Vec::new(),
                wdir: "/".into(),
            }],
            hosts: vec!["localhost".into()],
            rank_node: vec![0; 3],
            ..JobPlan::default()
        };
        let me = HostPlan {
            host: "localhost".into(),
            node: 0,
            index: 0,
            ranks,
        };
        let (tx, rx) = crate::events::channel();
        (
            super::super::start::new_ctx(&job, &me, &JobTx::new(0, tx)),
            rx,
        )
    }

    /// Connects rank `r` to `ctx`: the rank's end of its socket.
    fn connect(ctx: &Rc<Ctx>, r: usize) -> BufReader<UnixStream> {
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        mine.set_nonblocking(true).unwrap();
        ctx.engine.borrow_mut().connect(r as ConnId, Some(r));
        serve_conn(ctx, r as ConnId, RankSock::new(theirs.into()).unwrap());
        BufReader::new(UnixStream::from_std(mine).unwrap())
    }

    /// Sends `line` from a rank and reads the reply's line.
    async fn ask(rank: &mut BufReader<UnixStream>, line: &str) -> String {
        rank.get_mut().write_all(line.as_bytes()).await.unwrap();
        let mut reply = String::new();
        rank.read_line(&mut reply).await.unwrap();
        reply
    }

    /// Lets the loop run until `done` holds (a few seconds at most).
    async fn until(done: impl Fn() -> bool) {
        for _ in 0..5000 {
            if done() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("the loop did not get there");
    }

    #[test]
    fn one_loop_serves_every_connection_and_ends_with_the_last() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let (ctx, _events) = job();
            let mut ranks: Vec<_> = (0..3).map(|r| connect(&ctx, r)).collect();
            let first = ctx.pmi_poll.borrow().clone().expect("a loop");
            assert_eq!(first.live(), 3, "one loop for the three");
            for rank in &mut ranks {
                let init = ask(rank, "cmd=init pmi_version=1 pmi_subversion=1\n").await;
                assert!(init.starts_with("cmd=response_to_init"), "{init}");
                let maxes = ask(rank, "cmd=get_maxes\n").await;
                assert!(maxes.starts_with("cmd=maxes"), "{maxes}");
            }
            // A rank's end takes its connection out; the others are still served.
            drop(ranks.remove(1));
            until(|| first.live() == 2).await;
            let maxes = ask(&mut ranks[1], "cmd=get_maxes\n").await;
            assert!(maxes.starts_with("cmd=maxes"), "{maxes}");
            // The last end ends the loop; a new connection starts another.
            ranks.clear();
            until(|| ctx.pmi_poll.borrow().is_none()).await;
            assert_eq!(first.live(), 0);
            let mut again = connect(&ctx, 1);
            let second = ctx.pmi_poll.borrow().clone().expect("a new loop");
            assert!(!Rc::ptr_eq(&first, &second));
            let maxes = ask(&mut again, "cmd=get_maxes\n").await;
            assert!(maxes.starts_with("cmd=maxes"), "{maxes}");
        });
    }
}
