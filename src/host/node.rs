//! The ranks of one host: started with their PMI sockets, served by a PMI [`Engine`], their
//! output forwarded as whole lines, their ends reported. The front end runs one for the ranks
//! on its own host; every agent runs one for its host.
//!
//! A `Node` decides nothing about the job: fence completion, failures and teardown are the
//! caller's ([`NodeEvent`] tells it what happened; [`Node::fence_done`], [`Node::signal`] act).
//!
//! A PMIx job ([`JobPlan::pmix`]) has no PMI sockets: its ranks reach this process's PMIx
//! server ([`crate::proto::pmix`]) with the environment the library makes for them, and the
//! library's upcalls (connect, finalize, abort, fence, direct modex) come back here on a
//! channel and become the same [`NodeEvent`]s as the PMI engine's outputs; its publish, lookup
//! and unpublish become the same name requests as PMI's (one per name, answered through
//! [`Node::service_reply`]).

use crate::host::iofwd;
use crate::host::iofwd::Stream;
use crate::host::output::Route;
use crate::host::proc::{self, Launch};
use crate::plan::rank_env::{rank_env, HostFacts, PmiSocket, RankSeat, VADER_DIR_VAR, YIELD_VAR};
use crate::plan::{Adopt, HostPlan, JobPlan};
use crate::proto::pmi::{ConnId, Engine, Framing, JobInfo, Output};
use crate::proto::pmix::{
    self, CollectiveReply, LookupReply, ModexReply, OpReply, SpawnReply, Upcall,
};
use crate::proto::service::{Service, ServiceReply, Wait};
use crate::tree::events::JobTx;
use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::rc::{Rc, Weak};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// What happened on this host.
#[derive(Debug)]
pub enum NodeEvent {
    /// A rank ended.
    Exited {
        /// The rank.
        rank: usize,
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: ExitStatus,
        /// It had finished the PMI handshake.
        initialized: bool,
        /// It had called finalize.
        finalized: bool,
        /// It never spoke PMI or PMIx and ran as an Open MPI singleton ([`crate::host::ompi`]).
        ran_alone: bool,
    },
    /// Something from the PMI engine: `FenceReady`, `Abort`, `Failed`, `ProtocolError`,
    /// `Initialized`, `Finalized` (for a PMIx job: the same, from the PMIx server).
    Engine(Output),
    /// A rank let its PMI reply queue fill (it does not read its replies): its connection
    /// was closed.
    UnreadReplies {
        /// The rank, when known.
        rank: Option<usize>,
        /// The bytes its queue held ([`PMI_REPLY_QUEUE_MAX`]).
        queued: usize,
    },
    /// Every local rank of a PMIx job entered fence `epoch`; `data` is this host's blob.
    PmixFence {
        /// The fence (counted per host from 0).
        epoch: u64,
        /// The blob.
        data: Vec<u8>,
    },
    /// A local rank of a PMIx job wants the data of `rank`, which runs on another host;
    /// answer with [`Node::pmix_dmodex_reply`] and `id`.
    PmixDmodex {
        /// The request.
        id: u64,
        /// The rank whose data is wanted.
        rank: usize,
        /// Its namespace, when it is another job's (one a local client connected to).
        nspace: Option<String>,
    },
    /// Every local participant of a PMIx collective that is not this job's own fence (a
    /// fence over part of a namespace or several, a disconnect) entered it; answer with
    /// [`Node::pmix_collective_done`] and `sig`.
    PmixCollective {
        /// The collective's signature: its participants, sorted.
        sig: String,
        /// The participants (rank [`pmix::ffi::PMIX_RANK_WILDCARD`]: a whole namespace).
        procs: Vec<(String, u32)>,
        /// The participants that are clients of this process's server.
        covered: Vec<(String, u32)>,
        /// This server's contribution.
        data: Vec<u8>,
        /// The participants want a context id unique in the run (a group construct's
        /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`).
        context_id: bool,
    },
    /// This host's PMIx server answered [`Node::pmix_dmodex_serve`]: the data of one of its
    /// ranks, for request `req` of agent `to`.
    DmodexServed {
        /// The agent that asked.
        to: u32,
        /// Its request id.
        req: u64,
        /// The PMIx status.
        status: i32,
        /// The data.
        data: Vec<u8>,
    },
}

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

/// A PMIx publish, lookup or unpublish: one request per name, one callback for the call.
struct NameCall {
    batch: pmix::names::Batch,
    reply: NameReply,
}

/// The library's callback for a [`NameCall`].
enum NameReply {
    Op(OpReply),
    Lookup(LookupReply),
}

/// Request ids at and above this one are the PMIx server's (below: the PMI engine's).
const PMIX_REQUESTS: u64 = 1 << 62;

/// Where a PMIx spawn's directive goes among a spawn command's info keys (as a PMI spawn
/// spells them); `None`: not acted on.
fn spawn_info_key(key: &str, value: &str) -> Option<(String, String)> {
    let k = match key {
        "pmix.host" | "pmix.addhost" => "host",
        "pmix.hostfile" | "pmix.addhostfile" => "hostfile",
        "pmix.wdir" => "wdir",
        "pmix.prefix" => return Some(("path".into(), format!("{value}/bin"))),
        "pmix.ppr" => "ppr",
        "pmix.mapby" => "map-by",
        _ => return None,
    };
    Some((k.into(), value.to_string()))
}

/// Variables kauri sets for each rank from what its host is (see [`Node::start`]).
const PER_HOST_VARS: [&str; 2] = [VADER_DIR_VAR, YIELD_VAR];

/// Whether `k=v`, in a PMIx spawn's environment, is one of [`PER_HOST_VARS`] as kauri set it
/// for the parent rank: Open MPI copies every `OMPI_MCA_*` variable of the parent into its
/// spawn's environment, and a child on another host must have its own host's value (two
/// simulated hosts' children that shared one shared-memory directory shared their vader
/// segments). The user's own setting, in this process's environment too, is kept.
fn set_per_host(k: &str, v: &str) -> bool {
    PER_HOST_VARS.contains(&k) && std::env::var(k).map_or(true, |mine| mine != v)
}

/// A PMIx spawn's applications as the commands of a spawn request.
fn spawn_service(
    rank: u32,
    apps: Vec<pmix::SpawnApp>,
    job_info: &[(String, String)],
) -> crate::proto::service::Service {
    // Job-level directives (Open MPI sends npernode and map_by so) hold for every command
    // that does not say otherwise.
    let job_wide: Vec<(String, String)> = job_info
        .iter()
        .filter_map(|(k, v)| match k.as_str() {
            "pmix.ppr" | "pmix.mapby" => spawn_info_key(k, v),
            _ => None,
        })
        .collect();
    let mut env = Vec::with_capacity(apps.len());
    let commands = apps
        .into_iter()
        .map(|a| {
            let mut info: Vec<(String, String)> = a
                .info
                .iter()
                .filter_map(|(k, v)| {
                    let mapped = spawn_info_key(k, v);
                    if mapped.is_none() {
                        tracing::info!(key = %k, value = %v, "PMIx spawn: directive not acted on");
                    }
                    mapped
                })
                .collect();
            if let Some(cwd) = a.cwd.filter(|_| !info.iter().any(|(k, _)| k == "wdir")) {
                info.push(("wdir".into(), cwd));
            }
            for (k, v) in &job_wide {
                if !info.iter().any(|(n, _)| n == k) {
                    info.push((k.clone(), v.clone()));
                }
            }
            env.push(
                a.env
                    .into_iter()
                    .filter(|(k, v)| !set_per_host(k, v))
                    .collect(),
            );
            pmi_wire::SpawnCommand {
                execname: a.cmd,
                nprocs: a.maxprocs,
                args: a.args,
                info,
            }
        })
        .collect();
    crate::proto::service::Service::Spawn {
        commands,
        preput: Default::default(),
        pmix: Some(crate::proto::service::PmixSpawn { env, parent: rank }),
    }
}

/// Answers a client's queries from the run's `jobs` (namespace, size), `own` being the
/// asker's namespace: `PMIX_QUERY_NAMESPACES` (every job of the run, comma-separated),
/// `PMIX_JOB_SIZE` (of the namespace a `PMIX_NSPACE` qualifier names; the library does not
/// say who asked, so without one it is not known), and the process sets and groups kauri has none of
/// (`PMIX_QUERY_NUM_PSETS`/`PMIX_QUERY_NUM_GROUPS` 0, `PMIX_QUERY_PSET_NAMES` empty).
/// Returns the status (`PMIX_SUCCESS`, `PMIX_ERR_PARTIAL_SUCCESS` when some keys are not
/// known, `PMIX_ERR_NOT_FOUND` when none is) and the answers, each under its key.
fn answer_queries(
    queries: &[pmix::ffi::Query],
    jobs: &[(String, usize)],
) -> (i32, Vec<(String, pmix::ffi::Val)>) {
    use pmix::ffi::{InfoVal, Val};
    let (mut answers, mut missed) = (Vec::new(), 0);
    for q in queries {
        let nspace = q
            .qualifiers
            .iter()
            .find_map(|(k, v)| match (k.as_str(), v) {
                ("pmix.nspace", InfoVal::Str(s)) => Some(s.as_str()),
                _ => None,
            });
        for key in &q.keys {
            let v = match key.as_str() {
                "pmix.qry.ns" => Some(Val::Str(
                    jobs.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                )),
                "pmix.job.size" => jobs
                    .iter()
                    .find(|(n, _)| Some(n.as_str()) == nspace)
                    .map(|(_, s)| Val::U32(*s as u32)),
                "pmix.qry.psetnum" | "pmix.qry.pgrpnum" => Some(Val::Size(0)),
                "pmix.qry.psets" => Some(Val::Str(String::new())),
                _ => None,
            };
            match v {
                Some(v) => answers.push((key.clone(), v)),
                None => {
                    debug!(%key, ?nspace, "PMIx query: not known");
                    missed += 1;
                }
            }
        }
    }
    let status = match (answers.is_empty(), missed) {
        (_, 0) => pmix::ffi::PMIX_SUCCESS,
        (true, _) => pmix::ffi::PMIX_ERR_NOT_FOUND,
        (false, _) => pmix::ffi::PMIX_ERR_PARTIAL_SUCCESS,
    };
    (status, answers)
}

/// A collective's signature: its participants, sorted, as text.
fn collective_sig(procs: &[(String, u32)]) -> String {
    let mut v: Vec<String> = procs.iter().map(|(n, r)| format!("{n}:{r}")).collect();
    v.sort();
    v.join(",")
}

/// The signature of a group operation: the operation, the group's id and its members (so
/// two groups of the same processes, or a construct and a fence over them, stay apart).
fn group_sig(op: pmix::GroupOp, grpid: &str, procs: &[(String, u32)]) -> String {
    format!("group {} {grpid} {}", op.name(), collective_sig(procs))
}

/// The participants of a collective over `procs` that are clients of this process's server.
fn covered(procs: &[(String, u32)]) -> Vec<(String, u32)> {
    procs
        .iter()
        .flat_map(|(n, r)| {
            let local = pmix::local_ranks(n);
            if *r == pmix::ffi::PMIX_RANK_WILDCARD {
                local.into_iter().map(|l| (n.clone(), l)).collect()
            } else if local.contains(r) {
                vec![(n.clone(), *r)]
            } else {
                Vec::new()
            }
        })
        .collect()
}

/// The most reply bytes queued for one PMI connection. A rank past it does not read its
/// replies: its connection is closed (see [`Writer::queue`]); a rank that reads them, however
/// slowly, never gets near it (a reply is at most a few kB, and a rank waits for each).
pub const PMI_REPLY_QUEUE_MAX: usize = 4 << 20;

/// Writes what it can of some bytes to a connection's socket now, without waiting.
type DirectWrite = Rc<dyn Fn(&[u8]) -> std::io::Result<usize>>;

/// The sending side of one PMI connection: its socket for direct writes, and what waits for
/// its writer task.
struct Writer {
    /// Writes what it can of the bytes to the socket now, without waiting.
    direct: DirectWrite,
    /// Replies the socket did not take yet, in order; the writer task writes them as the
    /// socket drains.
    pending: Rc<RefCell<BytesMut>>,
    /// Wakes the writer task: something is pending, or the connection is done.
    wake: Rc<tokio::sync::Notify>,
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
    /// It would have taken the queue past [`PMI_REPLY_QUEUE_MAX`]: the writer was told to
    /// give up, and the connection must be closed.
    Overflow,
}

impl Writer {
    /// Writes `bytes` now as far as the socket takes them, and queues the rest for the writer
    /// task (behind what is queued already), unless the queue would pass
    /// [`PMI_REPLY_QUEUE_MAX`]: then the writer task is told to drop everything queued, write
    /// an error reply naming `rank` if the socket takes it at once, and close the socket.
    fn queue(&mut self, bytes: &[u8], rank: Option<usize>) -> Queued {
        let mut pending = self.pending.borrow_mut();
        let mut rest = bytes;
        if pending.is_empty() {
            // The common case: the rank reads its replies, and the socket has room. No task
            // wakes, nothing is copied.
            match (self.direct)(rest) {
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
            self.wake.notify_one();
            return Queued::Yes;
        }
        drop(pending);
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
        Queued::Overflow
    }
}

/// A PMI connection's socket (a Unix socket of a `PMI_FD`, or a TCP one of `-pmi-port`),
/// read and written through `&self` (no split, no lock between the halves), so that
/// `dispatch` can write a reply straight away.
///
/// It is registered with the poller for reading only. A socket registered for writing too
/// (as tokio's streams are) wakes the poller each time the rank reads a reply, since its
/// send buffer drains: one wake-up of kauri per reply, for nothing. Replies are written with
/// a plain non-blocking `write`; only when the socket is full does [`RankSock::writable`]
/// register a duplicate of the descriptor for writing, for as long as it waits.
struct RankSock {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl RankSock {
    /// Serves `fd`, a connected stream socket, made non-blocking here.
    fn new(fd: std::os::fd::OwnedFd) -> std::io::Result<RankSock> {
        let raw = fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
        unsafe {
            let fl = libc::fcntl(raw, libc::F_GETFL);
            if fl < 0 || libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: the AsyncFd owns the descriptor, which stays open for as long as it is
        // registered (it closes it only when dropped).
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        Ok(RankSock { fd })
    }

    /// Waits until the socket has something to read (or an end), then reads what it holds
    /// into `buf`'s spare room. A read that leaves room unfilled emptied the socket: the
    /// readiness is cleared then, so the next call waits for new data instead of costing one
    /// more read that would block (new data is a new edge for the edge-triggered poller, so
    /// nothing is missed).
    async fn read_buf(&self, buf: &mut BytesMut) -> std::io::Result<usize> {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        loop {
            let mut ready = self.fd.readable().await?;
            let spare = buf.spare_capacity_mut();
            let room = spare.len();
            // SAFETY: read(2) writes at most `room` bytes into the spare capacity.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), spare.as_mut_ptr().cast(), room) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    ready.clear_ready();
                    continue;
                }
                return Err(e);
            }
            let n = n as usize;
            // SAFETY: the kernel initialised the first n bytes of the spare capacity.
            unsafe { buf.set_len(buf.len() + n) };
            if n > 0 && n < room {
                ready.clear_ready();
            }
            return Ok(n);
        }
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
enum Replies {
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

/// State shared by the tasks of one host's ranks (all on one thread).
struct Ctx {
    engine: RefCell<Engine>,
    /// The engine's outputs of one `dispatch` round (kept for its room).
    outputs: RefCell<Vec<Output>>,
    /// One `dispatch` round's replies, by connection (kept for its room).
    batch: RefCell<Vec<(ConnId, Replies)>>,
    writers: RefCell<HashMap<ConnId, Writer>>,
    events: JobTx<NodeEvent>,
    next_conn: Cell<ConnId>,
    pmix: RefCell<Option<PmixState>>,
    upcalls: RefCell<Option<mpsc::UnboundedReceiver<Upcall>>>,
    /// Ends of ranks that never spoke PMI or PMIx looked at for an Open MPI singleton's
    /// traces ([`crate::host::ompi`]).
    alone_checks: Cell<u32>,
    /// When this host's ranks were about to start: an Open MPI 5 singleton's session
    /// directory modified since then is one of theirs.
    started: std::time::SystemTime,
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

    fn upcall(self: &Rc<Self>, u: Upcall) {
        use pmix::ffi::{PMIX_ERR_BAD_PARAM, PMIX_ERR_NOT_SUPPORTED};
        use pmix::names::{lookup_wait, publish_items};
        let me = |rank: u32| {
            let ns = self.pmix.borrow().as_ref().map(|p| p.nspace.clone());
            Some(format!("{}:{rank}", ns.unwrap_or_default()))
        };
        let u = match u {
            Upcall::Publish {
                rank,
                info,
                types,
                reply,
            } => {
                let by = me(rank);
                let items = match publish_items(&info, &types, by.as_deref().unwrap_or("")) {
                    Ok(items) => items,
                    Err(status) => return reply.done(status),
                };
                let asks = items
                    .into_iter()
                    .map(|(name, port)| {
                        let s = Service::Publish {
                            name: name.clone(),
                            port,
                            by: by.clone(),
                        };
                        (name, s)
                    })
                    .collect();
                return self.ask_names(asks, NameReply::Op(reply), Wait::No);
            }
            Upcall::Unpublish {
                rank, keys, reply, ..
            } => {
                if keys.is_empty() {
                    // "Everything this process published": the table is not kept by process.
                    return reply.done(PMIX_ERR_NOT_SUPPORTED);
                }
                let by = me(rank);
                let asks = keys
                    .into_iter()
                    .map(|name| {
                        let s = Service::Unpublish {
                            name: name.clone(),
                            by: by.clone(),
                        };
                        (name, s)
                    })
                    .collect();
                return self.ask_names(asks, NameReply::Op(reply), Wait::No);
            }
            Upcall::Lookup {
                rank,
                keys,
                info,
                reply,
            } => {
                if keys.is_empty() {
                    return reply.done(PMIX_ERR_BAD_PARAM, &[], "");
                }
                let wait = lookup_wait(&info);
                let by = me(rank);
                let asks = keys
                    .into_iter()
                    .map(|name| {
                        let s = Service::Lookup {
                            name: name.clone(),
                            wait,
                            by: by.clone(),
                        };
                        (name, s)
                    })
                    .collect();
                return self.ask_names(asks, NameReply::Lookup(reply), wait);
            }
            u => u,
        };
        let mut st = self.pmix.borrow_mut();
        let Some(st) = st.as_mut() else { return };
        let ev = match u {
            Upcall::Spawn {
                rank,
                apps,
                job_info,
                reply,
            } => {
                for (k, v) in &job_info {
                    if !matches!(k.as_str(), "pmix.ppr" | "pmix.mapby") {
                        tracing::info!(key = %k, value = %v, "PMIx spawn: job directive not acted on");
                    }
                }
                let id = st.next_req;
                st.next_req += 1;
                st.spawns.insert(id, reply);
                NodeEvent::Engine(Output::Request {
                    id,
                    service: spawn_service(rank, apps, &job_info),
                })
            }
            Upcall::Connect { procs, reply } => {
                let mut unknown: Vec<String> = procs
                    .iter()
                    .map(|(n, _)| n.clone())
                    .filter(|n| !pmix::registered(n))
                    .collect();
                unknown.sort();
                unknown.dedup();
                if unknown.is_empty() {
                    reply.done(pmix::ffi::PMIX_SUCCESS);
                    return;
                }
                let cid = st.next_req;
                st.next_req += 1;
                st.connects.insert(cid, (reply, unknown.len(), None));
                for nspace in unknown {
                    let id = st.next_req;
                    st.next_req += 1;
                    st.plans_asked.insert(id, cid);
                    let _ = self.events.send(NodeEvent::Engine(Output::Request {
                        id,
                        service: crate::proto::service::Service::JobOf { nspace },
                    }));
                }
                return;
            }
            Upcall::Collective { procs, data, reply } => {
                let sig = collective_sig(&procs);
                let covered = covered(&procs);
                st.collectives
                    .entry(sig.clone())
                    .or_default()
                    .push_back(reply);
                NodeEvent::PmixCollective {
                    sig,
                    procs,
                    covered,
                    data,
                    context_id: false,
                }
            }
            Upcall::Group {
                op,
                grpid,
                procs,
                data,
                assign_context_id,
                reply,
            } => {
                // Its own signature: a fence over the same processes is another collective.
                let sig = group_sig(op, &grpid, &procs);
                debug!(%sig, assign_context_id, "PMIx group operation");
                let covered = covered(&procs);
                st.collectives
                    .entry(sig.clone())
                    .or_default()
                    .push_back(CollectiveReply::Group(reply));
                NodeEvent::PmixCollective {
                    sig,
                    procs,
                    covered,
                    data,
                    context_id: assign_context_id && op == pmix::GroupOp::Construct,
                }
            }
            Upcall::Connected { rank } => {
                st.initialized.insert(rank as usize);
                NodeEvent::Engine(Output::Initialized {
                    rank: rank as usize,
                })
            }
            Upcall::Finalized { rank } => {
                st.finalized.insert(rank as usize);
                NodeEvent::Engine(Output::Finalized {
                    rank: rank as usize,
                })
            }
            Upcall::Query {
                rank,
                queries,
                reply,
            } => {
                debug!(rank, ?queries, "PMIx query");
                let id = st.next_req;
                st.next_req += 1;
                st.queries.insert(id, (queries, reply));
                NodeEvent::Engine(Output::Request {
                    id,
                    service: Service::Jobs,
                })
            }
            Upcall::Abort {
                rank,
                status,
                message,
                procs,
                reply: Some(reply),
            } => {
                let id = st.next_req;
                st.next_req += 1;
                st.terminates.insert(id, reply);
                NodeEvent::Engine(Output::Request {
                    id,
                    service: Service::Terminate {
                        procs,
                        by: format!("{}:{rank}", st.nspace),
                        status,
                        message,
                    },
                })
            }
            Upcall::Abort {
                rank,
                status,
                message,
                ..
            } => NodeEvent::Engine(Output::Abort {
                rank: Some(rank as usize),
                code: status,
                message,
            }),
            Upcall::Fence { data, reply } => {
                let epoch = st.next_fence;
                st.next_fence += 1;
                st.fences.insert(epoch, reply);
                NodeEvent::PmixFence { epoch, data }
            }
            Upcall::Publish { .. } | Upcall::Unpublish { .. } | Upcall::Lookup { .. } => return,
            Upcall::Dmodex {
                nspace,
                rank,
                reply,
            } => {
                let id = st.next_dmodex;
                st.next_dmodex += 1;
                debug!(
                    rank,
                    id, "PMIx direct modex: asking for a remote rank's data"
                );
                st.dmodex.insert(id, reply);
                NodeEvent::PmixDmodex {
                    id,
                    rank: rank as usize,
                    nspace: (nspace != st.nspace).then_some(nspace),
                }
            }
        };
        let _ = self.events.send(ev);
    }

    /// Sends one name request per `(name, request)` of a PMIx call up to the front end (as
    /// the PMI engine's requests go); `reply` answers the call once every name is answered,
    /// or when a lookup's wait is over.
    fn ask_names(self: &Rc<Self>, asks: Vec<(String, Service)>, reply: NameReply, wait: Wait) {
        let call = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let call = st.next_call;
            st.next_call += 1;
            let mut names = Vec::with_capacity(asks.len());
            for (i, (name, service)) in asks.into_iter().enumerate() {
                let id = PMIX_REQUEST | st.next_request;
                st.next_request += 1;
                st.requests.insert(id, (call, i));
                names.push(name);
                let _ = self
                    .events
                    .send(NodeEvent::Engine(Output::Request { id, service }));
            }
            let batch = pmix::names::Batch::new(names);
            st.calls.insert(call, NameCall { batch, reply });
            call
        };
        if let Wait::For(ms) = wait {
            let ctx: Weak<Ctx> = Rc::downgrade(self);
            tokio::task::spawn_local(async move {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                if let Some(c) = ctx.upgrade() {
                    debug!(call, ms, "a PMIx lookup's wait is over");
                    c.name_call_done(call, pmix::ffi::PMIX_ERR_TIMEOUT, Vec::new());
                }
            });
        }
    }

    /// The front end's answer to name request `id` (see [`Ctx::ask_names`]).
    fn name_reply(&self, id: u64, reply: &ServiceReply) {
        let done = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let Some((call, i)) = st.requests.remove(&id) else {
                return; // its call ended already (a lookup's wait was over)
            };
            let Some(c) = st.calls.get_mut(&call) else {
                return;
            };
            c.batch
                .answer(i, pmix::names::result_of(reply))
                .map(|(status, found)| (call, status, found))
        };
        if let Some((call, status, found)) = done {
            self.name_call_done(call, status, found);
        }
    }

    /// Ends name call `call` (if it has not ended): its callback gets `status` and, for a
    /// lookup, the names found.
    fn name_call_done(&self, call: u64, status: i32, found: Vec<(String, String)>) {
        let (c, nspace) = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let Some(c) = st.calls.remove(&call) else {
                return;
            };
            st.requests.retain(|_, (k, _)| *k != call);
            (c, st.nspace.clone())
        };
        debug!(call, status, found = found.len(), "PMIx name call done");
        // Outside the borrows: the library may take its time in the callback.
        match c.reply {
            NameReply::Op(r) => r.done(status),
            // The publisher's process is not kept with the name: the answers are said to
            // come from the asker's own namespace.
            NameReply::Lookup(r) => r.done(status, &found, &nspace),
        }
    }

    /// Writes replies; hands everything else to the node's owner.
    fn dispatch(&self) {
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

    /// Writes (or queues) `bytes` for connection `conn`; a rank whose queue overflows is
    /// closed and reported.
    fn send(&self, conn: ConnId, bytes: &[u8]) {
        let rank = self.engine.borrow().rank_of(conn);
        let queued = match self.writers.borrow_mut().get_mut(&conn) {
            Some(w) => w.queue(bytes, rank),
            None => Queued::Yes,
        };
        if let Queued::Overflow = queued {
            self.writers.borrow_mut().remove(&conn);
            self.engine.borrow_mut().disconnect(conn);
            let _ = self.events.send(NodeEvent::UnreadReplies {
                rank,
                queued: PMI_REPLY_QUEUE_MAX,
            });
        }
    }

    fn new_conn(&self) -> ConnId {
        let c = self.next_conn.get();
        self.next_conn.set(c + 1);
        c
    }
}

/// Serves one PMI connection until it closes. The reader (this task) reads what the socket
/// has, hands every complete request to the engine, and lets `dispatch` write the replies of
/// that read straight to the socket, one write per connection; only what the socket does not
/// take waits, for a writer task, so a rank that does not read its replies blocks nobody. The
/// queue holds at most [`PMI_REPLY_QUEUE_MAX`] bytes, and a rank that lets it fill is closed
/// (its replies dropped, an error reply written if the socket takes it).
async fn serve_conn(ctx: Rc<Ctx>, conn: ConnId, sock: RankSock) {
    let sock = Rc::new(sock);
    let pending = Rc::new(RefCell::new(BytesMut::new()));
    let wake = Rc::new(tokio::sync::Notify::new());
    // The last words, once the connection is abandoned; a `Writer` dropped without them (the
    // connection closed as usual) abandons nothing: what is queued is still written.
    let (abandon, mut abandoned) = tokio::sync::oneshot::channel::<Bytes>();
    let v2 = Rc::new(Cell::new(false));
    let direct = {
        let s = sock.clone();
        Rc::new(move |b: &[u8]| s.try_write(b)) as DirectWrite
    };
    ctx.writers.borrow_mut().insert(
        conn,
        Writer {
            direct,
            pending: pending.clone(),
            wake: wake.clone(),
            abandon: Some(abandon),
            v2: v2.clone(),
        },
    );
    let (s, p, w) = (sock.clone(), pending.clone(), wake.clone());
    tokio::task::spawn_local(async move {
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
                        let _ = p.borrow_mut().split_to(n);
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
            // The rank reads nothing: its error reply goes out only if the socket has room
            // for it now. Nothing waits on it.
            let _ = s.try_write(&b);
        }
        s.shutdown_write();
    });
    let mut framing = Framing::default();
    let mut buf = BytesMut::with_capacity(4096);
    'read: loop {
        match sock.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            let decoded = framing.decode(&mut buf);
            v2.set(framing.is_v2());
            match decoded {
                Ok(Some(req)) => ctx.engine.borrow_mut().handle(conn, req),
                Ok(None) => break,
                Err(e) => {
                    let fatal = e.is_fatal();
                    ctx.engine.borrow_mut().bad_input(conn, framing.is_v2(), &e);
                    if fatal {
                        ctx.dispatch();
                        break 'read;
                    }
                }
            }
        }
        ctx.dispatch();
        if !ctx.writers.borrow().contains_key(&conn) {
            break; // closed by the engine
        }
    }
    ctx.writers.borrow_mut().remove(&conn);
    ctx.engine.borrow_mut().disconnect(conn);
    ctx.dispatch();
}

/// The longest a singleton may take to answer the `singinit` exchange.
const SINGINIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Connects to a singleton (a program started without a launcher that ran
/// `kauri -pmi_args …`) and completes MPICH's `singinit` exchange: kauri says `singinit`, the
/// program answers `singinit` with its PMI version, kauri answers `singinit_info` with the
/// job's kvsname and no stdio forwarding (the program keeps its own stdio). The program then
/// speaks PMI-1 on the same connection, starting with `init`.
async fn singinit(a: &Adopt, kvsname: &str) -> Result<tokio::net::TcpStream, String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(&a.addr).await.map_err(|e| {
            format!(
                "cannot connect to the singleton (pid {}) at {}: {e}",
                a.pid, a.addr
            )
        })?;
        let _ = s.set_nodelay(true);
        s.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=1 stdio=no authtype=none\n")
            .await
            .map_err(|e| format!("singleton (pid {}): {e}", a.pid))?;
        // One line, read byte by byte: the program sends nothing more until it has our answer.
        let mut line = Vec::new();
        loop {
            let mut b = [0u8; 1];
            match s.read(&mut b).await {
                Ok(0) => {
                    return Err(format!(
                        "the singleton (pid {}) closed the connection during singinit",
                        a.pid
                    ))
                }
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) if line.len() < 1024 => line.push(b[0]),
                Ok(_) => {
                    return Err(format!(
                        "the singleton (pid {}) sent an over-long singinit line",
                        a.pid
                    ))
                }
                Err(e) => return Err(format!("singleton (pid {}): {e}", a.pid)),
            }
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
        };
        if field("cmd") != Some("singinit") {
            return Err(format!(
                "the singleton (pid {}) answered {line:?}, not cmd=singinit",
                a.pid
            ));
        }
        if let Some(auth) = field("authtype").filter(|&t| t != "none") {
            return Err(format!(
                "the singleton (pid {}) asks for authentication {auth:?}; kauri offers none",
                a.pid
            ));
        }
        let versionok = if field("pmi_version").is_none_or(|v| v == "1") {
            "yes"
        } else {
            "no"
        };
        s.write_all(
            format!("cmd=singinit_info versionok={versionok} stdio=no kvsname={kvsname}\n")
                .as_bytes(),
        )
        .await
        .map_err(|e| format!("singleton (pid {}): {e}", a.pid))?;
        if versionok == "no" {
            return Err(format!(
                "the singleton (pid {}) speaks {line:?}; kauri serves singletons PMI-1",
                a.pid
            ));
        }
        Ok(s)
    };
    tokio::time::timeout(SINGINIT_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            format!(
                "the singleton (pid {}) did not complete singinit within {} s",
                a.pid,
                SINGINIT_TIMEOUT.as_secs()
            )
        })?
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
    let ran_alone = !initialized && c.alone_checks.get() < crate::host::ompi::CHECKS_MAX && {
        let found = crate::host::ompi::singleton_traces(c.started);
        c.alone_checks.set(if found {
            crate::host::ompi::CHECKS_MAX
        } else {
            c.alone_checks.get() + 1
        });
        found
    };
    // The end first, then what the engine makes of it ("rank 1 exited before PMI init while
    // 1 rank(s) wait in a fence"): the front end must see a rank's own failure as the cause
    // of the teardown, not as one of its casualties.
    let _ = ev.send(NodeEvent::Exited {
        rank: r,
        pid,
        status: status(finalized),
        initialized,
        finalized,
        ran_alone,
    });
    c.dispatch();
}

/// Kills the ranks a failed [`Node::start`] had forked, with whatever they started in their
/// process groups, and reaps them. Each is signalled as a group and alone: a rank forked an
/// instant ago may not have made its group yet (`setsid` in the child), and a signal to a
/// group that does not exist reaches nobody.
fn abandon(forked: Vec<(usize, u32, proc::ExitWatch)>) {
    for (_, pid, _) in &forked {
        proc::signal_group(*pid, libc::SIGKILL);
        proc::signal_pid(*pid, libc::SIGKILL);
    }
    for (rank, pid, exit) in forked {
        let status = exit.wait_blocking();
        crate::host::keeper::reaped(pid);
        debug!(rank, pid, ?status, "killed: the start failed");
    }
}

/// Starts this process's PMIx server if needed, registers the job's namespace and local
/// clients, and returns each local rank's PMIx environment.
fn start_pmix(
    ctx: &Rc<Ctx>,
    job: &JobPlan,
    me: &HostPlan,
) -> Result<HashMap<usize, Vec<(String, String)>>, String> {
    let host = &me.host;
    if let Err(e) = pmix::ffi::choose_library(job.pmix_library.as_deref()) {
        tracing::warn!(job = %job.kvsname, "{e}: the job is served by it");
    }
    let places = pmix::start(&job.kvsname, me.node, host, job.port_range.as_ref())
        .map_err(|e| format!("cannot start the PMIx server on {host}: {e}"))?;
    let tmpdir = places.tmpdir.to_string_lossy();
    pmix::create_private_dir(std::path::Path::new(&pmix::nsdir(&tmpdir, &job.kvsname)))
        .map_err(|e| format!("cannot make the job's PMIx directory on {host}: {e}"))?;
    let info = pmix::JobInfo::new(job, me, &tmpdir);
    let (tx, rx) = mpsc::unbounded_channel();
    pmix::register(&info, tx.clone())
        .map_err(|e| format!("cannot register the job with the PMIx server on {host}: {e}"))?;
    *ctx.pmix.borrow_mut() = Some(PmixState {
        upcall_tx: tx.clone(),
        next_req: PMIX_REQUESTS,
        spawns: HashMap::new(),
        terminates: HashMap::new(),
        queries: HashMap::new(),
        plans_asked: HashMap::new(),
        connects: HashMap::new(),
        collectives: HashMap::new(),
        foreign: Vec::new(),
        nspace: job.kvsname.clone(),
        initialized: HashSet::new(),
        finalized: HashSet::new(),
        next_fence: 0,
        fences: HashMap::new(),
        next_dmodex: 0,
        dmodex: HashMap::new(),
        next_call: 0,
        calls: HashMap::new(),
        next_request: 0,
        requests: HashMap::new(),
    });
    *ctx.upcalls.borrow_mut() = Some(rx);
    let mut env = HashMap::new();
    for r in &me.ranks {
        let mut e = pmix::ffi::setup_fork(&job.kvsname, r.rank as u32)
            .map_err(|e| format!("rank {}: {e} (on {host})", r.rank))?;
        let app_env = job.apps.get(r.app).map(|a| a.env.as_slice()).unwrap_or(&[]);
        let has = |k: &str| app_env.iter().any(|(n, _)| n == k);
        if !has("FLUX_JOB_ID") {
            // Open MPI 4.x recognises a direct launch only by its launcher's variables
            // (schizo: Slurm, Flux, JSM); under any other PMIx server it starts as a
            // singleton. FLUX_JOB_ID makes its schizo/flux declare the launch direct
            // (ess=pmi, no binding); PMIX_NAMESPACE then selects its PMIx component.
            e.push((
                "FLUX_JOB_ID".into(),
                crate::plan::job::flux_job_id(&job.kvsname).to_string(),
            ));
        }
        if let (Some(shm), false) = (&places.shm, has(VADER_DIR_VAR)) {
            // Open MPI's shared-memory segments, removed with the directory when the server
            // ends, even after an abort or a crash.
            e.push((VADER_DIR_VAR.into(), shm.display().to_string()));
        }
        env.insert(r.rank, e);
    }
    // The upcalls, handled on this thread as they come.
    let c = ctx.clone();
    tokio::task::spawn_local(async move {
        loop {
            let next = std::future::poll_fn(|cx| match c.upcalls.borrow_mut().as_mut() {
                Some(rx) => rx.poll_recv(cx),
                None => std::task::Poll::Ready(None),
            })
            .await;
            match next {
                Some(u) => c.upcall(u),
                None => break,
            }
        }
    });
    Ok(env)
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
    /// Rank 0's stdin, when rank 0 runs here.
    pub stdin: Option<pipe::Sender>,
    /// The pid of a singleton served as rank 0: not ours, signalled alone, never swept.
    adopted: Option<u32>,
    ranks: Vec<usize>,
    /// Open MPI's shared-memory directory for ranks on the flux path, removed with the node.
    _vader: Option<ShmDir>,
    /// Each rank started: rank, pid, executable (the debugger's process table).
    pub procs: Vec<(usize, u32, String)>,
}

/// A directory removed (with what is in it) when dropped.
struct ShmDir(PathBuf);

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// True when `name` means this machine.
pub fn is_local(name: &str, me: &str) -> bool {
    name == "localhost"
        || name == me
        || name.starts_with("127.")
        || name == "::1"
        || me.split('.').next() == Some(name)
}

/// This machine's host name.
pub fn local_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl Node {
    /// Starts the ranks `me` lists. Programs are resolved first, so a typo starts nothing;
    /// the error is one line naming the host. A start that fails after it forked some ranks
    /// (a later fork refused, no descriptors left for a PMI socket) kills them with their
    /// process groups and reaps them before it returns the error: nothing it started outlives
    /// it, and no [`NodeEvent::Exited`] follows for them.
    pub async fn start(
        job: &JobPlan,
        me: &HostPlan,
        events: JobTx<NodeEvent>,
        out: iofwd::OutputSender,
    ) -> Result<Node, String> {
        let host = me.host.clone();
        // Resolve the programs of the segments that run here.
        let mut programs: HashMap<usize, PathBuf> = HashMap::new();
        let adopting = |rank: usize| rank == 0 && job.adopt.is_some();
        for r in &me.ranks {
            if programs.contains_key(&r.app) || adopting(r.rank) {
                continue;
            }
            let a = job
                .apps
                .get(r.app)
                .ok_or_else(|| format!("rank {} names a segment that does not exist", r.rank))?;
            let wdir = PathBuf::from(&a.wdir);
            if !wdir.is_dir() {
                return Err(format!(
                    "working directory {} does not exist on {host}",
                    a.wdir
                ));
            }
            let path = a
                .env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_str());
            let p =
                proc::resolve(&a.program, path, &wdir).map_err(|e| format!("{e} (on {host})"))?;
            programs.insert(r.app, p);
        }
        let info = JobInfo {
            kvsname: job.kvsname.clone(),
            size: job.size,
            universe_size: job.universe_size,
            appnum: job.appnum.clone(),
            process_mapping: job.process_mapping.clone(),
            local_ranks: me.ranks.iter().map(|r| r.rank).collect(),
            spawner_jobid: job.spawner.clone(),
            puts_visible_at_once: job.adopt.is_some(),
        };
        let mut engine = Engine::new(info);
        for (k, v) in &job.preput {
            engine.preput(k.clone(), v.clone());
        }
        let ctx = Rc::new(Ctx {
            engine: RefCell::new(engine),
            outputs: RefCell::new(Vec::new()),
            batch: RefCell::new(Vec::new()),
            writers: RefCell::new(HashMap::new()),
            events: events.clone(),
            next_conn: Cell::new(job.size as ConnId),
            pmix: RefCell::new(None),
            upcalls: RefCell::new(None),
            alone_checks: Cell::new(0),
            started: std::time::SystemTime::now(),
        });
        let pmix_env = if job.pmix {
            start_pmix(&ctx, job, me)?
        } else {
            HashMap::new()
        };
        let port = if job.pmi_port {
            let l = crate::launch::ports::listen_async(
                std::net::Ipv4Addr::LOCALHOST.into(),
                job.port_range.as_ref(),
            )
            .map_err(|e| format!("cannot listen for PMI on loopback on {host}: {e}"))?;
            let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            let c = ctx.clone();
            tokio::task::spawn_local(async move {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let me = unsafe { libc::geteuid() };
                while let Ok((s, peer)) = l.accept().await {
                    // Any local user can reach a loopback port and claim a rank's PMI_ID:
                    // only the job's own user is served.
                    let (owner, port) = match s.local_addr() {
                        Ok(local) => (crate::host::peer::uid(peer, local), local.port()),
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
                    tokio::task::spawn_local(serve_conn(c.clone(), conn, sock));
                }
            });
            Some(addr)
        } else {
            None
        };

        // Open MPI through its flux component (the PMI-1 library path) gets a private
        // shared-memory directory as a PMIx job does: no segment outlives the job, and two
        // simulated hosts' ranks never share one.
        let vader_wanted = |a: &crate::plan::AppPlan| {
            !job.pmix && a.uses_open_mpi_flux() && !a.env.iter().any(|(k, _)| k == VADER_DIR_VAR)
        };
        let vader = if me
            .ranks
            .iter()
            .any(|r| job.apps.get(r.app).is_some_and(vader_wanted))
        {
            pmix::shm_dir(&job.kvsname, me.node).map_err(|e| format!("{e} (on {host})"))?
        } else {
            None
        };
        let (ended, ended_rx) = watch::channel(false);
        let mut node = Node {
            ctx: ctx.clone(),
            host: host.clone(),
            running: Rc::new(RefCell::new(HashMap::new())),
            pids: Vec::new(),
            forwarders: Vec::new(),
            ended,
            stdin: None,
            adopted: None,
            ranks: me.ranks.iter().map(|r| r.rank).collect(),
            _vader: vader.clone().map(ShmDir),
            procs: Vec::new(),
        };
        let nlocal = me.ranks.len();
        // Open MPI ranks busy-poll while they wait; when there are more ranks than cores here
        // they must yield, which mpirun tells them by this variable (its daemons set it when
        // they oversubscribe a node). A direct launch must say it too.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let yield_idle = nlocal > cores;
        // The ranks forked so far; their ends are watched only once all have started.
        let mut forked: Vec<(usize, u32, proc::ExitWatch)> = Vec::new();
        let started: Result<(), String> = async {
            // Each local rank's CPUs (-bind-to), by local id.
            let cpus_of: Vec<Vec<usize>> = match &job.binding {
                None => Vec::new(),
                Some(b) => {
                    let what = format!("-bind-to {}", b.kind.name());
                    let topo =
                        crate::host::bind::Topology::read(&crate::host::bind::allowed_cpus())
                            .map_err(|e| {
                                format!("{what}: cannot read the topology of {host}: {e}")
                            })?;
                    let (sets, wrapped) = topo.place(b, nlocal);
                    if wrapped {
                        let places = topo.objects(b.kind).len() / b.count.max(1);
                        say!(
                            "kauri: {what}: {nlocal} ranks on {host} and {} place(s) for them: \
                             ranks share them, in turn",
                            places.max(1)
                        );
                    }
                    sets
                }
            };
            if job.report_bindings {
                for rp in &me.ranks {
                    let cpus = cpus_of.get(rp.local_id).map_or_else(
                        || "not bound".to_string(),
                        |c| format!("bound to CPUs {}", crate::host::bind::cpu_list(c)),
                    );
                    say!("kauri: rank {} on {host}: {cpus}", rp.rank);
                }
            }
            for rp in &me.ranks {
                let r = rp.rank;
                if let (true, Some(a)) = (adopting(r), &job.adopt) {
                    let stream = singinit(a, &job.kvsname).await?;
                    let stream = stream
                        .into_std()
                        .and_then(|s| RankSock::new(s.into()))
                        .map_err(|e| format!("cannot serve the singleton's PMI: {e}"))?;
                    let conn = r as ConnId;
                    ctx.engine.borrow_mut().connect(conn, Some(r));
                    tokio::task::spawn_local(serve_conn(ctx.clone(), conn, stream));
                    node.adopted = Some(a.pid);
                    node.running.borrow_mut().insert(r, a.pid);
                    let exe = std::fs::read_link(format!("/proc/{}/exe", a.pid))
                        .map_or_else(|_| "singleton".into(), |p| p.display().to_string());
                    node.procs.push((r, a.pid, exe));
                    let (ev, c, running) = (events.clone(), ctx.clone(), node.running.clone());
                    let (pid, watch) = (a.pid, proc::ForeignWatch::new(a.pid));
                    tokio::task::spawn_local(async move {
                        watch.ended().await;
                        debug!(pid, "the singleton ended");
                        // Its exit status is its own parent's to read; kauri knows whether it
                        // finalized.
                        let status =
                            |finalized| ExitStatus::from_raw(if finalized { 0 } else { 1 << 8 });
                        rank_ended(&c, &ev, &running, r, pid, status);
                    });
                    continue;
                }
                let a = &job.apps[rp.app];
                let mut ours = None;
                let mut theirs: Option<OwnedFd> = None;
                let socket = match &port {
                    _ if !job.serves_pmi() => None,
                    Some(addr) => Some(PmiSocket::Port(addr)),
                    None => {
                        let (a, b) = std::os::unix::net::UnixStream::pair().map_err(|e| {
                            proc::note_fd_error(&e);
                            format!("cannot create a PMI socket on {host}: {e}")
                        })?;
                        let fd = b.as_raw_fd();
                        ours = Some(a);
                        theirs = Some(b.into());
                        Some(PmiSocket::Fd(fd))
                    }
                };
                let vader_dir = vader
                    .as_ref()
                    .filter(|_| vader_wanted(a))
                    .map(|d| d.display().to_string());
                let seat = RankSeat {
                    rank: r,
                    local_id: rp.local_id,
                    local_size: nlocal,
                    node: me.index,
                    host: &host,
                };
                let facts = HostFacts {
                    pmix: pmix_env.get(&r).map_or(&[], Vec::as_slice),
                    vader_dir: vader_dir.as_deref(),
                    oversubscribed: yield_idle,
                    socket,
                };
                // The keeper's mark replaces one a surrounding kauri gave this process.
                let env: Vec<(OsString, OsString)> = a
                    .env
                    .iter()
                    .filter(|(k, _)| k != crate::host::keeper::VAR)
                    .cloned()
                    .chain(rank_env(job, a, &seat, &facts))
                    .chain([crate::host::keeper::env()])
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect();
                let launch = Launch {
                    program: programs[&rp.app].clone(),
                    argv0: a.program.clone(),
                    args: a.args.clone(),
                    env,
                    wdir: PathBuf::from(&a.wdir),
                    pmi_fd: theirs,
                    // Only the job the user started reads kauri's stdin; a spawned job's
                    // ranks read end-of-file at once, as under Hydra.
                    stdin: r == 0 && job.spawner.is_none(),
                    cpus: cpus_of
                        .get(rp.local_id)
                        .map(|c| crate::host::bind::cpu_set(c)),
                };
                // Whatever happens to this process from now on, what the ranks start ends.
                crate::host::keeper::ensure(std::time::Duration::from_millis(job.kill_grace_ms));
                let child = proc::spawn(launch).map_err(|e| {
                    proc::note_fd_error(&e);
                    format!("cannot start rank {r} ({}) on {host}: {e}", a.program)
                })?;
                let pid = child.pid;
                crate::host::keeper::started(pid);
                debug!(rank = r, pid, "started");
                node.procs
                    .push((r, pid, programs[&rp.app].display().to_string()));
                node.pids.push(pid);
                node.running.borrow_mut().insert(r, pid);
                if let Some(sock) = ours {
                    let conn = r as ConnId;
                    let served = RankSock::new(sock.into());
                    match served {
                        Ok(s) => {
                            ctx.engine.borrow_mut().connect(conn, Some(r));
                            tokio::task::spawn_local(serve_conn(ctx.clone(), conn, s));
                        }
                        Err(e) => warn!("rank {r}: cannot serve PMI: {e}"),
                    }
                }
                let proxy = job.rank_node.get(r).copied().unwrap_or(0);
                for (stream, reader) in [
                    (Stream::Stdout, child.stdout),
                    (Stream::Stderr, child.stderr),
                ] {
                    let stdout = stream == Stream::Stdout;
                    let route = Route::new(&job.output, stdout, r, proxy, &host);
                    node.forwarders
                        .push(tokio::task::spawn_local(iofwd::forward_lines(
                            reader,
                            stream,
                            route,
                            out.clone(),
                            ended_rx.clone(),
                        )));
                }
                node.stdin = node.stdin.take().or(child.stdin);
                forked.push((r, pid, child.exit));
            }
            Ok(())
        }
        .await;
        if let Err(e) = started {
            abandon(forked);
            return Err(e);
        }
        for (r, pid, exit) in forked {
            let ev = events.clone();
            let c = ctx.clone();
            let running = node.running.clone();
            tokio::task::spawn_local(async move {
                let status = exit.wait().await;
                crate::host::keeper::reaped(pid);
                debug!(rank = r, ?status, "exited");
                rank_ended(&c, &ev, &running, r, pid, |_| status);
            });
        }
        Ok(node)
    }

    /// Applies the merged delta of a fence the whole tree completed, releasing local ranks.
    pub fn fence_done(&self, epoch: u64, delta: &crate::proto::kvs::Packed) {
        self.ctx.engine.borrow_mut().fence_done(epoch, delta);
        self.ctx.dispatch();
    }

    /// Hands a PMIx fence's result (every host's blob) to the local PMIx server, releasing
    /// the local ranks.
    pub fn pmix_fence_done(&self, epoch: u64, data: Vec<u8>) {
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
    pub fn pmix_dmodex_reply(&self, id: u64, status: i32, data: Vec<u8>) {
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
    pub fn pmix_collective_done(
        &self,
        sig: &str,
        status: i32,
        data: Vec<u8>,
        context_id: Option<u64>,
    ) {
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

    /// The front end's answer to one of the PMIx server's requests.
    fn pmix_service_reply(&self, id: u64, reply: crate::proto::service::ServiceReply) {
        use crate::proto::service::ServiceReply;
        let mut st = self.ctx.pmix.borrow_mut();
        let Some(p) = st.as_mut() else { return };
        if let Some((queries, r)) = p.queries.remove(&id) {
            drop(st);
            let jobs = match reply {
                ServiceReply::Jobs(j) => j,
                other => {
                    debug!(?other, "PMIx query answered with something else");
                    Vec::new()
                }
            };
            let (status, answers) = answer_queries(&queries, &jobs);
            return r.done(status, &answers);
        }
        if let Some(r) = p.terminates.remove(&id) {
            drop(st);
            let status = match reply {
                ServiceReply::Done(Ok(())) => pmix::ffi::PMIX_SUCCESS,
                other => {
                    debug!(?other, "PMIx abort of processes refused");
                    pmix::ffi::PMIX_ERROR
                }
            };
            return r.done(status);
        }
        if let Some(r) = p.spawns.remove(&id) {
            drop(st);
            match reply {
                ServiceReply::Spawn(Ok(done)) => r.reply(pmix::ffi::PMIX_SUCCESS, &done.jobid),
                ServiceReply::Spawn(Err(e)) => {
                    say!("kauri: a PMIx spawn failed: {e}");
                    r.reply(pmix::ffi::PMIX_ERR_JOB_FAILED_TO_LAUNCH, "")
                }
                other => {
                    debug!(?other, "PMIx spawn answered with something else");
                    r.reply(pmix::ffi::PMIX_ERROR, "")
                }
            }
            return;
        }
        let Some(cid) = p.plans_asked.remove(&id) else {
            return;
        };
        let registered = match reply {
            ServiceReply::Job(Ok(plan)) => {
                pmix::register_foreign(&plan, p.upcall_tx.clone()).map(|mine| {
                    if mine {
                        p.foreign.push(plan.kvsname.clone());
                    }
                })
            }
            ServiceReply::Job(Err(e)) => Err(e),
            other => Err(format!("answered with {other:?}")),
        };
        let Some(c) = p.connects.get_mut(&cid) else {
            return;
        };
        c.1 -= 1;
        if let Err(e) = registered {
            c.2.get_or_insert(e);
        }
        if c.1 > 0 {
            return;
        }
        let (reply, _, err) = p.connects.remove(&cid).expect("the connect is there");
        drop(st);
        match err {
            None => reply.done(pmix::ffi::PMIX_SUCCESS),
            Some(e) => {
                say!("kauri: a PMIx connect failed: {e}");
                reply.done(pmix::ffi::PMIX_ERR_NOT_FOUND)
            }
        }
    }

    /// Tells the local clients of this host's PMIx server that `ranks` of the job failed with
    /// `status`: one event per rank, each from that rank (see
    /// [`pmix::ffi::notify_failure`]). Returns once the library has handed them to its
    /// clients, so a signal sent after this call follows them. Nothing for a PMI job.
    pub fn pmix_failure(&self, status: i32, ranks: &[usize], exit_code: Option<i32>) {
        let nspace = self.ctx.pmix.borrow().as_ref().map(|p| p.nspace.clone());
        let Some(nspace) = nspace else { return };
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
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// True when `rank` runs on this host.
    pub fn has_rank(&self, rank: usize) -> bool {
        self.ranks.contains(&rank)
    }

    /// Asks this host's PMIx server for the data of local rank `rank`, for request `req` of
    /// agent `to`; the answer comes as [`NodeEvent::DmodexServed`].
    pub fn pmix_dmodex_serve(&self, rank: usize, to: u32, req: u64) {
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
    pub fn service_reply(&self, id: u64, reply: ServiceReply) {
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
    pub fn publish(&self, delta: crate::proto::kvs::Delta) {
        let mut e = self.ctx.engine.borrow_mut();
        for (k, v) in delta {
            e.preput(k, v);
        }
    }

    /// The job's dead ranks are `ranks`: the engine serves them as `PMI_dead_processes`
    /// from now on, then `SIGUSR1` goes to the running ranks that initialized PMI-1/PMI-2
    /// and did not finalize it (MPICH's handler is installed between the two; a rank out of
    /// PMI, a PMIx one among them, would die of it).
    pub fn dead_processes(&self, ranks: &[usize]) {
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
    pub fn signal(&self, sig: i32) {
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
    pub fn signal_ranks(&self, sig: i32, ranks: &[usize]) {
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

    /// Where each rank of this host is, in rank order (the hang diagnosis).
    pub fn status(&self) -> Vec<crate::tree::RankStatus> {
        use crate::proto::pmi::RankPmi;
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
        states
            .into_iter()
            .map(|(rank, pmi)| crate::tree::RankStatus {
                rank,
                pid: running.get(&rank).copied(),
                pmi: if running.contains_key(&rank) || pmi == RankPmi::Exited {
                    pmi
                } else {
                    RankPmi::Exited
                },
                stack: None,
            })
            .collect()
    }

    /// How many ranks are still running.
    pub fn running(&self) -> usize {
        self.running.borrow().len()
    }

    /// [`Node::drain`] for a spawned job that ended while the run goes on: what its ranks
    /// left in their process groups is killed, but children of ours in sessions of their
    /// own are not swept (the run's other ranks are such children); the run's last drain
    /// sweeps them.
    pub async fn release(self) {
        self.drain_with(proc::kill_groups_left).await;
    }

    /// After every rank ended: kills what they left in their process groups, then forwards
    /// the rest of their output (see [`iofwd::forward_lines`]).
    pub async fn drain(self) {
        self.drain_with(proc::kill_leftovers).await;
    }

    async fn drain_with(self, kill: fn(&[u32]) -> usize) {
        let names = self
            .ctx
            .pmix
            .borrow()
            .as_ref()
            .map(|p| (p.nspace.clone(), p.foreign.clone()));
        if let Some((ns, foreign)) = names {
            pmix::deregister(&ns);
            for f in foreign {
                pmix::deregister(&f);
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

#[cfg(test)]
mod tests {
    use super::*;
    use pmix::ffi::{InfoVal, Query, Val};

    #[test]
    fn queries_are_answered_from_the_runs_jobs() {
        let jobs = vec![("j1".to_string(), 4), ("j1_s1".to_string(), 2)];
        let q = |keys: &[&str], ns: Option<&str>| Query {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            qualifiers: ns
                .map(|n| vec![("pmix.nspace".to_string(), InfoVal::Str(n.into()))])
                .unwrap_or_default(),
        };
        let (status, a) = answer_queries(&[q(&["pmix.qry.ns", "pmix.qry.psetnum"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_SUCCESS);
        assert_eq!(
            a,
            vec![
                ("pmix.qry.ns".into(), Val::Str("j1,j1_s1".into())),
                ("pmix.qry.psetnum".into(), Val::Size(0)),
            ]
        );
        let (status, a) = answer_queries(&[q(&["pmix.job.size"], Some("j1_s1"))], &jobs);
        assert_eq!(
            (status, a),
            (
                pmix::ffi::PMIX_SUCCESS,
                vec![("pmix.job.size".into(), Val::U32(2))]
            )
        );
        // Unqualified, the size is not known (the library does not say who asks).
        let (status, _) = answer_queries(&[q(&["pmix.job.size"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_ERR_NOT_FOUND);
        let (status, a) = answer_queries(&[q(&["pmix.qry.nsinfo", "pmix.qry.psets"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_ERR_PARTIAL_SUCCESS);
        assert_eq!(a, vec![("pmix.qry.psets".into(), Val::Str(String::new()))]);
    }

    #[test]
    fn a_spawn_drops_only_the_per_host_variables_kauri_set() {
        // Not in this process's environment: kauri set it for the parent.
        assert!(set_per_host(VADER_DIR_VAR, "/dev/shm/kauri-x-n0-1"));
        assert!(set_per_host(YIELD_VAR, "1"));
        // Anything else is the program's.
        assert!(!set_per_host("OMPI_MCA_btl", "self,tcp"));
        assert!(!set_per_host("OMPI_PARENT_PORT", "x"));
    }
}
