//! The ranks of one host: started with their PMI sockets, served by a PMI [`Engine`], their
//! output forwarded as whole lines, their ends reported. The front end runs one for the ranks
//! on its own host; every agent runs one for its host.
//!
//! A `Node` decides nothing about the job: fence completion, failures and teardown are the
//! caller's ([`NodeEvent`] tells it what happened; [`Node::fence_done`], [`Node::signal`] act).
//!
//! A PMIx job ([`JobPlan::pmix`](kauri_core::plan::JobPlan::pmix)) has no PMI sockets: its ranks reach this process's PMIx
//! server ([`kauri_proto::pmix`]) with the environment the library makes for them, and the
//! library's upcalls (connect, finalize, abort, fence, direct modex) come back here on a
//! channel and become the same [`NodeEvent`]s as the PMI engine's outputs; its publish, lookup
//! and unpublish become the same name requests as PMI's (one per name, answered through
//! [`Node::service_reply`]).
//!
//! Here: the `Node`, its events and what it does once started; the start of the ranks in
//! `start`, the PMI connections in `conn`, the PMIx upcalls and their answers in `upcall`.

use crate::events::JobTx;
use crate::proc;
use bytes::Bytes;
use kauri_core::tree::msg::RankStatus;
use kauri_proto::kvs::{Delta, Packed};
use kauri_proto::pmi::{ConnId, Engine, Output};
use kauri_proto::pmix::{self, CollectiveReply, ModexReply, OpReply, SpawnReply, Upcall};
use kauri_proto::rank::RankEnd;
use kauri_proto::service::ServiceReply;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::rc::Rc;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

mod conn;
mod poll;
mod start;
mod upcall;

pub use conn::PMI_REPLY_QUEUE_MAX;
use conn::{Replies, Writer};
use upcall::NameCall;

pub use kauri_core::tree::branch::{Host, NodeEvent};

/// A PMIx job's state on this host.
struct PmixState {
    nspace: String,
    initialized: HashSet<usize>,
    finalized: HashSet<usize>,
    next_fence: u64,
    fences: HashMap<u64, ModexReply>,
    next_dmodex: u64,
    dmodex: HashMap<u64, ModexReply>,
    /// The channel the namespace's upcalls come on (another job's namespace registered here
    /// for a connect sends its direct-modex requests to it too).
    upcall_tx: mpsc::UnboundedSender<Upcall>,
    /// The next id of a request to the front end ([`PMIX_REQUESTS`] and up).
    next_req: u64,
    /// Spawns the front end has not answered, by request id.
    spawns: HashMap<u64, SpawnReply>,
    /// `PMIx_Abort`s of some processes the front end has not answered, by request id.
    terminates: HashMap<u64, pmix::ffi::OpReply>,
    /// Queries waiting for the run's jobs, by request id: the queries and their answer.
    queries: HashMap<u64, (Vec<pmix::ffi::Query>, pmix::ffi::QueryReply)>,
    /// Connects waiting for the plans of the jobs they name: request id -> connect.
    plans_asked: HashMap<u64, u64>,
    /// Those connects: the library's callback, how many plans are still due, the first error.
    connects: HashMap<u64, (OpReply, usize, Option<String>)>,
    /// Collectives under way, by signature (one at a time per signature and participant).
    collectives: HashMap<String, std::collections::VecDeque<CollectiveReply>>,
    /// Other jobs' namespaces this node registered for a connect (deregistered with its own).
    foreign: Vec<String>,
    /// Publish, lookup and unpublish calls waiting for the name table's answers.
    next_call: u64,
    calls: HashMap<u64, NameCall>,
    /// The requests sent for them (ids with [`PMIX_REQUEST`] set): request -> (call, index
    /// of its name in the call).
    next_request: u64,
    requests: HashMap<u64, (u64, usize)>,
}

/// The bit that marks the id of a request made for a PMIx client (the PMI engine numbers its
/// own from 0), so the front end's answer finds its way back ([`Node::service_reply`]).
const PMIX_REQUEST: u64 = 1 << 63;

/// Request ids at and above this one are the PMIx server's (below: the PMI engine's).
const PMIX_REQUESTS: u64 = 1 << 62;

/// State shared by the tasks of one host's ranks (all on one thread).
struct Ctx {
    engine: RefCell<Engine>,
    /// The engine's outputs of one `dispatch` round (kept for its room).
    outputs: RefCell<Vec<Output>>,
    /// One `dispatch` round's replies, by connection (kept for its room).
    batch: RefCell<Vec<(ConnId, Replies)>>,
    writers: RefCell<HashMap<ConnId, Writer>>,
    /// The loop reading this job's PMI connections here, while it has any.
    pmi_poll: RefCell<Option<Rc<poll::PmiPoll>>>,
    events: JobTx<NodeEvent>,
    next_conn: Cell<ConnId>,
    pmix: RefCell<Option<PmixState>>,
    upcalls: RefCell<Option<mpsc::UnboundedReceiver<Upcall>>>,
    /// Ends of ranks that never spoke PMI or PMIx looked at for an Open MPI singleton's
    /// traces ([`crate::ompi`]).
    alone_checks: Cell<u32>,
    /// When this host's ranks of the job last asked something of kauri: a PMI request or a
    /// PMIx upcall (`None` while none has).
    last_heard: Cell<Option<std::time::Instant>>,
    /// This context, for the tasks it starts itself ([`Output::HungUp`]'s wait).
    me: std::rc::Weak<Ctx>,
    /// When the job's part here began, before its ranks were forked: an Open MPI singleton's
    /// trace older than this is another process's ([`crate::ompi`]).
    started: std::time::SystemTime,
}

impl Ctx {
    /// A rank here asked something of kauri.
    fn heard(&self) {
        self.last_heard.set(Some(std::time::Instant::now()));
    }

    /// Whether rank `r` spoke PMI or PMIx (either counts in a job served both).
    fn spoke(&self, r: usize) -> bool {
        self.engine.borrow().initialized(r)
            || self
                .pmix
                .borrow()
                .as_ref()
                .is_some_and(|p| p.initialized.contains(&r))
    }
}

/// When a host looks for Open MPI singletons among its running ranks that have not spoken PMI
/// or PMIx: seconds after they started.
const ALONE_LOOKS: [u64; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Watches this host's running ranks that have not spoken PMI or PMIx for an Open MPI
/// singleton's trace ([`crate::ompi::singleton_running`]), at most
/// [`crate::ompi::CHECKS_MAX`] ranks each time, at [`ALONE_LOOKS`]: the first found is
/// reported ([`NodeEvent::Singleton`]), and the front end ends the job. It ends with the node
/// (`ended`).
fn watch_singletons(
    c: Rc<Ctx>,
    running: Rc<RefCell<HashMap<usize, u32>>>,
    mut ended: tokio::sync::watch::Receiver<bool>,
) {
    tokio::task::spawn_local(async move {
        let start = tokio::time::Instant::now();
        for at in ALONE_LOOKS {
            // A node that ended lets go of its context at once, not at the next look (a run
            // of many short spawned jobs would otherwise hold a second's worth of them).
            tokio::select! {
                _ = tokio::time::sleep_until(start + std::time::Duration::from_secs(at)) => {}
                _ = ended.wait_for(|e| *e) => return,
            }
            let mut quiet: Vec<(usize, u32)> = running
                .borrow()
                .iter()
                .filter(|(r, _)| !c.spoke(**r))
                .map(|(r, p)| (*r, *p))
                .collect();
            if running.borrow().is_empty() {
                return;
            }
            quiet.sort_unstable();
            quiet.truncate(crate::ompi::CHECKS_MAX as usize);
            let alone = quiet
                .iter()
                .find(|(_, pid)| crate::ompi::singleton_running(*pid, c.started));
            if let Some((rank, _)) = alone {
                let _ = c.events.send(NodeEvent::Singleton { rank: *rank });
                return;
            }
        }
    });
}

impl Ctx {
    /// Handles the PMIx upcalls already queued (so a rank's finalize is seen before its exit).
    fn drain_upcalls(self: &Rc<Self>) {
        let mut got = Vec::new();
        if let Some(rx) = self.upcalls.borrow_mut().as_mut() {
            while let Ok(u) = rx.try_recv() {
                got.push(u);
            }
        }
        for u in got {
            self.upcall(u);
        }
    }
}

/// Reports that rank `r` (pid `pid`) ended: the engine's view first (it knows who waits in a
/// fence here), then the event, with the status `status` gives knowing whether it finalized.
fn rank_ended(
    c: &Rc<Ctx>,
    ev: &JobTx<NodeEvent>,
    running: &RefCell<HashMap<usize, u32>>,
    r: usize,
    pid: u32,
    status: impl FnOnce(bool) -> ExitStatus,
) {
    running.borrow_mut().remove(&r);
    // A PMIx rank's finalize arrives on the upcall channel: take it in before its end.
    c.drain_upcalls();
    let (initialized, finalized) = {
        let mut e = c.engine.borrow_mut();
        e.rank_exited(r);
        // A rank of a job served both speaks one of them: either counts.
        let (pi, pf) = match c.pmix.borrow().as_ref() {
            Some(p) => (p.initialized.contains(&r), p.finalized.contains(&r)),
            None => (false, false),
        };
        (pi || e.initialized(r), pf || e.finalized(r))
    };
    // A rank that never spoke PMI or PMIx may have been an Open MPI singleton: a few such
    // ends are looked at, until one is found (one says enough).
    let ran_alone = !initialized && c.alone_checks.get() < crate::ompi::CHECKS_MAX && {
        let found = crate::ompi::singleton_ended(pid, c.started);
        c.alone_checks.set(if found {
            crate::ompi::CHECKS_MAX
        } else {
            c.alone_checks.get() + 1
        });
        found
    };
    // The end first, then what the engine makes of it ("rank 1 exited before PMI init while
    // 1 rank(s) wait in a fence"): the front end must see a rank's own failure as the cause
    // of the teardown, not as one of its casualties.
    let status = status(finalized);
    let _ = ev.send(NodeEvent::Exited(RankEnd {
        rank: r,
        pid,
        code: status.code(),
        signal: status.signal(),
        initialized,
        finalized,
        ran_alone,
    }));
    c.dispatch();
}

/// Kills the ranks a failed [`Node::start`] had started, with whatever they started in their
/// process groups, and reaps them. Each is signalled as a group and alone.
fn abandon(forked: Vec<(usize, u32, proc::ExitWatch)>) {
    for (_, pid, _) in &forked {
        proc::signal_group(*pid, libc::SIGKILL);
        proc::signal_pid(*pid, libc::SIGKILL);
    }
    for (rank, pid, exit) in forked {
        let status = exit.wait_blocking();
        crate::keeper::reaped(pid);
        debug!(rank, pid, ?status, "killed: the start failed");
    }
}

/// The ranks of one host.
pub struct Node {
    ctx: Rc<Ctx>,
    /// The host's name.
    pub host: String,
    /// Running ranks: rank -> pid (process group).
    running: Rc<RefCell<HashMap<usize, u32>>>,
    /// Every pid this node started (for the leftover sweep).
    pids: Vec<u32>,
    forwarders: Vec<JoinHandle<()>>,
    ended: watch::Sender<bool>,
    /// Rank 0's stdin, when rank 0 runs here and neither taken nor written yet.
    pub stdin: Option<pipe::Sender>,
    /// The writer of rank 0's stdin, once input arrived for it ([`Host::write_stdin`]).
    stdin_writer: Option<mpsc::UnboundedSender<Option<Vec<u8>>>>,
    /// Where that writer says how much it wrote ([`Node::tell_stdin_taken`]).
    stdin_taken: Option<Rc<dyn Fn(u64)>>,
    /// The pid of a singleton served as rank 0: not ours, signalled alone, never swept.
    adopted: Option<u32>,
    ranks: Vec<usize>,
    /// Open MPI's shared-memory directory for ranks on the flux path, removed with the node.
    _vader: Option<ShmDir>,
    /// Each rank started: rank, pid, executable (the debugger's process table).
    pub procs: Vec<(usize, u32, std::ffi::OsString)>,
}

/// A directory removed (with what is in it) when dropped.
struct ShmDir(PathBuf);

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Host for Node {
    /// Applies the merged delta of a fence the whole tree completed (checked at the root,
    /// which says whether its keys are the last fence's), releasing local ranks.
    fn fence_done(&self, epoch: u64, delta: &Packed, same_keys: bool) {
        self.ctx
            .engine
            .borrow_mut()
            .fence_done(epoch, delta, same_keys);
        self.ctx.dispatch();
    }

    /// Hands a PMIx fence's result (every host's blob) to the local PMIx server, releasing
    /// the local ranks.
    fn pmix_fence_done(&self, epoch: u64, data: Bytes) {
        self.ctx.drain_upcalls();
        let reply = self
            .ctx
            .pmix
            .borrow_mut()
            .as_mut()
            .and_then(|p| p.fences.remove(&epoch));
        if let Some(reply) = reply {
            reply.reply(pmix::ffi::PMIX_SUCCESS, data);
        }
    }

    /// Answers the local PMIx server's direct-modex request `id` (see
    /// [`NodeEvent::PmixDmodex`]).
    fn pmix_dmodex_reply(&self, id: u64, status: i32, data: Vec<u8>) {
        let reply = self
            .ctx
            .pmix
            .borrow_mut()
            .as_mut()
            .and_then(|p| p.dmodex.remove(&id));
        if let Some(reply) = reply {
            reply.reply(status, data);
        }
    }

    /// Answers the local PMIx server's collective `sig` (see [`NodeEvent::PmixCollective`]),
    /// with the context id the run gave it if it asked for one; nothing when none is under
    /// way here.
    fn pmix_collective_done(&self, sig: &str, status: i32, data: Vec<u8>, context_id: Option<u64>) {
        self.ctx.drain_upcalls();
        let reply = self.ctx.pmix.borrow_mut().as_mut().and_then(|p| {
            let q = p.collectives.get_mut(sig)?;
            let r = q.pop_front();
            if q.is_empty() {
                p.collectives.remove(sig);
            }
            r
        });
        if let Some(reply) = reply {
            reply.reply(status, data, context_id);
        }
    }

    /// Tells the local clients of this host's PMIx server that `ranks` of the job failed with
    /// `status`: one event per rank, each from that rank (see
    /// [`pmix::ffi::notify_failure`]). Returns once the library has handed them to its
    /// clients, so a signal sent after this call follows them. Nothing for a PMI job, nor
    /// while the server has not started (no client ever knocked: there is nobody to tell).
    fn pmix_failure(&self, status: i32, ranks: &[usize], exit_code: Option<i32>) {
        let nspace = self.ctx.pmix.borrow().as_ref().map(|p| p.nspace.clone());
        let Some(nspace) = nspace.filter(|_| pmix::ffi::running()) else {
            return;
        };
        for &r in ranks {
            if let Err(e) = pmix::ffi::notify_failure(&nspace, r as u32, status, exit_code) {
                warn!(
                    "cannot tell the ranks on {} that rank {r} failed: {e}",
                    self.host
                );
            }
        }
    }

    /// How many ranks this host runs.
    fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// True when `rank` runs on this host.
    fn has_rank(&self, rank: usize) -> bool {
        self.ranks.contains(&rank)
    }

    /// Asks this host's PMIx server for the data of local rank `rank`, for request `req` of
    /// agent `to`; the answer comes as [`NodeEvent::DmodexServed`].
    fn pmix_dmodex_serve(&self, rank: usize, to: u32, req: u64) {
        let nspace = self.ctx.pmix.borrow().as_ref().map(|p| p.nspace.clone());
        let events = self.ctx.events.clone();
        let answer = move |status: i32, data: Vec<u8>| {
            let _ = events.send(NodeEvent::DmodexServed {
                to,
                req,
                status,
                data,
            });
        };
        let Some(nspace) = nspace else {
            return answer(pmix::ffi::PMIX_ERR_NOT_FOUND, Vec::new());
        };
        debug!(
            rank,
            to, req, "PMIx direct modex: serving a local rank's data"
        );
        let a = answer.clone();
        if let Err(e) = pmix::ffi::dmodex_request(&nspace, rank as u32, Box::new(answer)) {
            debug!("direct modex for rank {rank}: {e}");
            a(pmix::ffi::PMIX_ERROR, Vec::new());
        }
    }

    /// Hands the front end's answer to a request back to the engine (or PMIx client) that
    /// asked.
    fn service_reply(&self, id: u64, reply: ServiceReply) {
        if id & PMIX_REQUEST != 0 {
            return self.ctx.name_reply(id, &reply);
        }
        if id >= PMIX_REQUESTS {
            self.ctx.drain_upcalls();
            return self.pmix_service_reply(id, reply);
        }
        self.ctx.engine.borrow_mut().service_reply(id, reply);
        self.ctx.dispatch();
    }

    /// Commits pairs published without a fence.
    fn publish(&self, delta: Delta) {
        let mut e = self.ctx.engine.borrow_mut();
        for (k, v) in delta {
            e.preput(k, v);
        }
    }

    /// The job's dead ranks are `ranks`: the engine serves them as `PMI_dead_processes`
    /// from now on, then `SIGUSR1` goes to the running ranks that initialized PMI-1/PMI-2
    /// and did not finalize it (MPICH's handler is installed between the two; a rank out of
    /// PMI, a PMIx one among them, would die of it).
    fn dead_processes(&self, ranks: &[usize]) {
        let survivors: Vec<usize> = {
            let mut e = self.ctx.engine.borrow_mut();
            e.set_dead(ranks);
            self.running
                .borrow()
                .keys()
                .copied()
                .filter(|&r| e.initialized(r) && !e.finalized(r))
                .collect()
        };
        debug!(
            ?ranks,
            ?survivors,
            "dead processes: SIGUSR1 to the survivors"
        );
        self.signal_ranks(libc::SIGUSR1, &survivors);
    }

    /// Sends `sig` to every running rank's process group.
    fn signal(&self, sig: i32) {
        for &pid in self.running.borrow().values() {
            if Some(pid) == self.adopted {
                // A singleton's process group is its shell's job, kauri included.
                proc::signal_pid(pid, sig);
            } else {
                proc::signal_group(pid, sig);
            }
        }
    }

    /// Sends `sig` to the process groups of the ranks `ranks` that run here.
    fn signal_ranks(&self, sig: i32, ranks: &[usize]) {
        for (r, &pid) in self.running.borrow().iter() {
            if !ranks.contains(r) {
                continue;
            }
            debug!(rank = r, pid, sig, "signalling a rank");
            if Some(pid) == self.adopted {
                proc::signal_pid(pid, sig);
            } else {
                proc::signal_group(pid, sig);
            }
        }
    }

    /// Where each rank of this host is, in rank order (the hang diagnosis), and how many
    /// milliseconds ago the ranks here last asked something of kauri (a PMI request or a PMIx
    /// upcall).
    fn status(&self) -> (Vec<RankStatus>, Option<u64>) {
        use kauri_proto::pmi::RankPmi;
        let running = self.running.borrow();
        let pmix = self.ctx.pmix.borrow();
        let engine = self.ctx.engine.borrow().status();
        let states: Vec<(usize, RankPmi)> = match pmix.as_ref() {
            None => engine,
            Some(p) => self
                .ranks
                .iter()
                .map(|&r| {
                    // A job served both: a rank that never spoke PMIx may be in PMI.
                    let in_pmi = || {
                        engine
                            .iter()
                            .find(|(e, _)| *e == r)
                            .map_or(RankPmi::NotInitialized, |(_, s)| s.clone())
                    };
                    let s = if !running.contains_key(&r) {
                        RankPmi::Exited
                    } else if p.finalized.contains(&r) {
                        RankPmi::Finalized
                    } else if p.initialized.contains(&r) {
                        RankPmi::Running
                    } else {
                        in_pmi()
                    };
                    (r, s)
                })
                .collect(),
        };
        let quiet_ms = self
            .ctx
            .last_heard
            .get()
            .map(|t| t.elapsed().as_millis() as u64);
        let ranks = states
            .into_iter()
            .map(|(rank, pmi)| RankStatus {
                rank,
                pid: running.get(&rank).copied(),
                pmi: if running.contains_key(&rank) || pmi == RankPmi::Exited {
                    pmi
                } else {
                    RankPmi::Exited
                },
                stack: None,
            })
            .collect();
        (ranks, quiet_ms)
    }

    /// How many ranks are still running.
    fn running(&self) -> usize {
        self.running.borrow().len()
    }

    /// After every rank ended: kills what they left in their process groups, then forwards
    /// the rest of their output (see
    /// [`iofwd::forward_lines`](crate::iofwd::forward_lines)).
    async fn drain(self) {
        self.drain_with(proc::kill_leftovers, pmix::deregister)
            .await;
    }

    type Stdin = pipe::Sender;

    /// Rank 0's stdin pipe ([`Node::stdin`]), once.
    fn take_stdin(&mut self) -> Option<pipe::Sender> {
        self.stdin.take()
    }

    /// Writes input for rank 0 into its pipe, from a task of its own that the first input
    /// starts (each chunk written is told to [`Node::tell_stdin_taken`]'s callback).
    fn write_stdin(&mut self, data: Option<Vec<u8>>) {
        if self.stdin_writer.is_none() {
            if let Some(pipe) = self.stdin.take() {
                self.stdin_writer = Some(stdin_writer(pipe, self.stdin_taken.clone()));
            }
        }
        if let Some(tx) = &self.stdin_writer {
            let eof = data.is_none();
            let _ = tx.send(data);
            if eof {
                // Dropping the sender too, so the writer ends even if nothing more comes.
                self.stdin_writer = None;
            }
        }
    }
}

/// A task that writes rank 0's input into `pipe` in order, telling `taken` each chunk's size
/// once written, and closes the pipe at the input's end (`None`) or when the sender goes.
fn stdin_writer(
    mut pipe: pipe::Sender,
    taken: Option<Rc<dyn Fn(u64)>>,
) -> mpsc::UnboundedSender<Option<Vec<u8>>> {
    use tokio::io::AsyncWriteExt;
    // Unbounded, but the front end sends no more than its window ahead of what the writer
    // says it took.
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    tokio::task::spawn_local(async move {
        while let Some(Some(chunk)) = rx.recv().await {
            if pipe.write_all(&chunk).await.is_err() {
                break;
            }
            if let Some(taken) = &taken {
                taken(chunk.len() as u64);
            }
        }
        let _ = pipe.shutdown().await;
    });
    tx
}

impl Node {
    /// Says to `taken` how many bytes of rank 0's stdin were written into its pipe here: an
    /// agent sends it to its parent (`Up::StdinTaken`), so the front end reads stdin no
    /// faster than rank 0 takes it.
    pub fn tell_stdin_taken(&mut self, taken: impl Fn(u64) + 'static) {
        self.stdin_taken = Some(Rc::new(taken));
    }

    /// [`Node::drain`] for a spawned job that ended while the run goes on: what its ranks
    /// left in their process groups is killed, but children of ours in sessions of their
    /// own are not swept (the run's other ranks are such children); the run's last drain
    /// sweeps them.
    ///
    /// Its PMIx namespaces are deregistered from the library a moment later
    /// ([`pmix::deregister_later`]).
    pub async fn release(self) {
        self.drain_with(proc::kill_groups_left, pmix::deregister_later)
            .await;
    }

    /// `kill` sweeps what the ranks left; `deregister` ends the job's PMIx namespaces.
    async fn drain_with(self, kill: fn(&[u32]) -> usize, deregister: fn(&str)) {
        let names = self
            .ctx
            .pmix
            .borrow()
            .as_ref()
            .map(|p| (p.nspace.clone(), p.foreign.clone()));
        if let Some((ns, foreign)) = names {
            for n in std::iter::once(ns).chain(foreign) {
                deregister(&n);
            }
        }
        let left = kill(&self.pids);
        if left > 0 {
            debug!(left, "killed processes the ranks left behind");
        }
        let _ = self.ended.send(true);
        for f in self.forwarders {
            let _ = f.await;
        }
    }
}
