//! The PMI session engine: requests in, effects out, no I/O (the "sans-IO" style).
//!
//! One [`Engine`] serves one job on one agent: the connections of the job's local ranks, the
//! job's KVS as this agent sees it, its node-local attributes and its fence. The I/O layer
//! feeds it decoded requests ([`Engine::handle`]) and process events ([`Engine::rank_exited`]),
//! and acts on what it hands back ([`Engine::drain`]): bytes to send on a connection, a fence
//! contribution to pass up the tree, an abort, a rank that initialised or finalised.
//!
//! A fence (PMI-1 `barrier_in`, PMI-2 `kvs-fence`) is blocking: it completes when every local
//! rank has entered it and the tree has merged every agent's puts ([`Engine::fence_done`]).
//! So when any rank leaves a fence, every put made before it by anybody is readable, and a read
//! of a missing key can be answered "not found" at once; this is what MPICH's PMI-2 barrier
//! (a fence, then a read of a key nobody put) relies on.
//!
//! [`Framing`] tells the two protocols apart on one socket: PMI-1 lines until an `init` asks
//! for version 2, then PMI-2 frames.
//!
//! This module holds the engine, its state and the steps both protocols share; `v1` handles
//! PMI-1 requests and `v2` PMI-2 requests, one method per command.
//!
//! With `KAURI_PMI_TRACE=1` (or `kauri -v -v`), the engine logs every request it handles and
//! every reply it hands out, as wire text with the job and the rank, through `tracing` under
//! the target [`TRACE_TARGET`] (the subscriber adds the time). Off, it costs one `bool` test
//! per request and per drain.

use crate::proto::kvs::{Delta, Kvs, Packed};
use crate::proto::service::{Service, ServiceReply};
use bytes::{Bytes, BytesMut};
use pmi_wire::limits::{KEY_MAX, VALUE_MAX};
use pmi_wire::v2::Frame;
use pmi_wire::{Status, WireError};
use std::collections::{HashMap, HashSet};

mod v1;
mod v2;

/// The `tracing` target of the PMI wire trace.
pub const TRACE_TARGET: &str = "kauri_pmi_trace";

/// Identifies one PMI connection on an agent.
pub type ConnId = u64;

/// A decoded request in either protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A PMI-1 message.
    V1(pmi_wire::v1::Request),
    /// A PMI-2 frame.
    V2(Frame<pmi_wire::v2::Request>),
}

/// Per-connection framing: PMI-1 lines until `init` asks for version 2, then PMI-2 frames.
#[derive(Debug, Default)]
pub struct Framing {
    v2: bool,
}

impl Framing {
    /// Takes the next complete request off `buf` (see [`pmi_wire::v1::Request::decode`] for
    /// how errors consume input).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        if self.v2 {
            return Ok(Frame::<pmi_wire::v2::Request>::decode(buf)?.map(Incoming::V2));
        }
        let req = pmi_wire::v1::Request::decode(buf)?;
        if let Some(pmi_wire::v1::Request::Init { version: 2, .. }) = req {
            self.v2 = true;
        }
        Ok(req.map(Incoming::V1))
    }

    /// True once the connection speaks PMI-2.
    pub fn is_v2(&self) -> bool {
        self.v2
    }
}

/// What a job looks like to its ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The KVS name, which is also the PMI-2 job id.
    pub kvsname: String,
    /// The number of ranks.
    pub size: usize,
    /// The universe size reported to ranks.
    pub universe_size: i64,
    /// `appnum[r]`: rank `r`'s MPMD segment.
    pub appnum: Vec<u32>,
    /// `PMI_process_mapping`.
    pub process_mapping: String,
    /// The ranks this agent serves.
    pub local_ranks: Vec<usize>,
    /// The job id of the job that spawned this one, if any.
    pub spawner_jobid: Option<String>,
    /// Puts are visible at once, without a fence: a singleton's job. Its one rank joined
    /// after it had already put its pairs (MPICH's client caches them while it has no process
    /// manager and replays them, unfenced, once it has one).
    pub puts_visible_at_once: bool,
}

/// Something the I/O layer must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write these bytes to the connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// One or more encoded replies.
        bytes: Bytes,
    },
    /// Close the connection: its stream can no longer be trusted.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// A rank finished the PMI handshake.
    Initialized {
        /// The rank.
        rank: usize,
    },
    /// A rank called finalize.
    Finalized {
        /// The rank.
        rank: usize,
    },
    /// An initialized rank's last PMI connection ended without finalize. Its process may be
    /// ending too (a crash closes the socket an instant before the end is seen): wait a
    /// moment ([`HANGUP_GRACE`]), then call [`Engine::rank_hung_up`], which decides.
    HungUp {
        /// The rank.
        rank: usize,
    },
    /// An initialized rank closed its PMI connection without finalize and still runs
    /// ([`Engine::rank_hung_up`]): to the fence rules it has left, as if it had ended.
    LeftPmi {
        /// The rank.
        rank: usize,
    },
    /// A rank asked to end the job.
    Abort {
        /// The rank, when known.
        rank: Option<usize>,
        /// The exit code it asked for.
        code: i32,
        /// Its message.
        message: String,
    },
    /// Every local rank entered fence `epoch`: pass `delta` (this agent's puts) up the tree,
    /// then call [`Engine::fence_done`] with the merged delta.
    FenceReady {
        /// The fence's number, from 0.
        epoch: u64,
        /// The puts of this agent's ranks since the last fence.
        delta: Packed,
    },
    /// A client sent something wrong; the job goes on, the message names the rank.
    ProtocolError {
        /// The rank, when known.
        rank: Option<usize>,
        /// What was wrong.
        error: String,
    },
    /// Pairs to publish to the whole job at once, without a fence (`kauri kvs put`): pass
    /// them up the tree; they come back through [`Engine::preput`] on every host.
    Publish {
        /// The pairs.
        delta: Delta,
    },
    /// The job cannot go on (a fence that can never complete).
    Failed {
        /// One line saying why.
        reason: String,
    },
    /// A request only the front end can answer (spawn, the name service): pass it up, then
    /// hand the answer to [`Engine::service_reply`] with the same `id`.
    Request {
        /// The request's id on this engine.
        id: u64,
        /// The request.
        service: Service,
    },
}

/// Why the engine refuses a rank's request at once: each prints the reason the rank is given
/// in its reply's status (or, for a bad `initack`, in the protocol error reported up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An `initack`'s `pmiid` is not a number.
    #[error("bad pmiid {0:?}")]
    BadPmiid(String),
    /// A PMI id that is no rank of this agent's.
    #[error("PMI id {id} is not a rank served here")]
    NotServedHere {
        /// The id given.
        id: i64,
    },
    /// The rank has a connection already.
    #[error("rank {rank} is already connected")]
    AlreadyConnected {
        /// The rank.
        rank: usize,
    },
    /// A PMI-2 `fullinit` naming no rank on a connection that has none.
    #[error("fullinit without pmirank on an unbound connection")]
    NoPmirank,
    /// A put of an empty key.
    #[error("empty key")]
    EmptyKey,
    /// A put whose key is longer than the wire allows.
    #[error("key of {len} bytes exceeds {KEY_MAX}")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
    },
    /// A put whose value is longer than the wire allows.
    #[error("value of {len} bytes exceeds {VALUE_MAX}")]
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
    },
    /// A put of a key the process manager keeps for itself.
    #[error("key {key} is reserved (PMI_ prefix)")]
    ReservedKey {
        /// The key.
        key: String,
    },
    /// A fence on a connection with no rank.
    #[error("a connection with no rank cannot enter a fence (send initack first)")]
    FenceUnbound,
    /// A rank entering a fence it is in already.
    #[error("rank {rank} is already in fence {epoch}")]
    AlreadyInFence {
        /// The rank.
        rank: usize,
        /// The fence's number.
        epoch: u64,
    },
    /// A spawn with no command.
    #[error("spawn with no command")]
    SpawnNoCommand,
    /// A spawn of a command with an empty program name.
    #[error("spawn of an empty program name ({nprocs} processes)")]
    SpawnEmptyName {
        /// The processes that command asked for.
        nprocs: u32,
    },
}

/// The front end answered a rank's question with a reply to another one: an internal error,
/// reported as a protocol error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("internal: {asked:?} answered with {reply:?}")]
struct Mismatch {
    /// The question.
    asked: Asked,
    /// The reply.
    reply: ServiceReply,
}

/// Which reply a pending [`Output::Request`] is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Spawn,
    Publish,
    Unpublish,
    Lookup,
}

/// A connection waiting for an answer: a fence's end, a node attribute, the front end's reply.
#[derive(Debug, Clone)]
struct Waiter {
    conn: ConnId,
    thrid: Option<String>,
    v2: bool,
}

impl Waiter {
    /// A PMI-1 connection waiting.
    fn v1(conn: ConnId) -> Waiter {
        Waiter {
            conn,
            thrid: None,
            v2: false,
        }
    }

    /// A PMI-2 connection waiting; the answer goes under `thrid`.
    fn v2(conn: ConnId, thrid: Option<String>) -> Waiter {
        Waiter {
            conn,
            thrid,
            v2: true,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct RankState {
    initialized: bool,
    finalized: bool,
    exited: bool,
    /// Its PMI connection ended without finalize while the process ran on: it can never
    /// enter a fence (in `PMI_FD` mode it has no way back; in `PMI_PORT` mode a new
    /// handshake brings it back).
    hung_up: bool,
}

#[derive(Debug, Default)]
struct Conn {
    rank: Option<usize>,
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    job: JobInfo,
    conns: HashMap<ConnId, Conn>,
    ranks: HashMap<usize, RankState>,
    kvs: Kvs,
    epoch: u64,
    in_fence: HashSet<usize>,
    fence_waiters: Vec<Waiter>,
    node_attrs: HashMap<String, String>,
    node_waiters: HashMap<String, Vec<Waiter>>,
    pending: HashMap<u64, (Waiter, Asked)>,
    next_request: u64,
    failed: bool,
    /// The job's ranks that died, in the order the front end heard of it: the value of
    /// [`DEAD_PROCESSES_KEY`].
    dead: Vec<usize>,
    out: Vec<Output>,
    trace: bool,
    /// Where replies are encoded: each is split off as its own `Bytes`, so replies share a
    /// few allocations instead of one each.
    wbuf: BytesMut,
    /// Names the host's topology file ([`HWLOC_XMLFILE_KEY`]), if the host has a way to.
    topology: Option<TopologyFile>,
}

/// Where a rank is, as its host's PMI engine sees it: what a hang diagnosis prints.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RankPmi {
    /// It has not finished the PMI handshake (or does not use PMI).
    NotInitialized,
    /// It uses PMI and waits for nothing from it.
    Running,
    /// It waits in fence `epoch` (counted from 0).
    InFence(u64),
    /// It waits for a node attribute that nobody has put yet.
    WaitingAttr(String),
    /// It waits for the front end's answer to a spawn, publish, unpublish or lookup.
    WaitingRoot(String),
    /// It called finalize.
    Finalized,
    /// Its process has ended.
    Exited,
    /// It closed its PMI connection without finalize, and runs on.
    HungUp,
}

impl std::fmt::Display for RankPmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankPmi::NotInitialized => write!(f, "not in PMI yet"),
            RankPmi::Running => write!(f, "running (in no PMI call)"),
            RankPmi::InFence(e) => write!(f, "in fence {e}"),
            RankPmi::WaitingAttr(k) => write!(f, "waiting for node attribute {k}"),
            RankPmi::WaitingRoot(what) => write!(f, "waiting for its {what} to be answered"),
            RankPmi::Finalized => write!(f, "finalized"),
            RankPmi::Exited => write!(f, "exited"),
            RankPmi::HungUp => write!(
                f,
                "running, but it closed its PMI connection without finalizing"
            ),
        }
    }
}

/// How long an initialized rank whose PMI connection ended without finalize has to be seen
/// ending before it counts as a rank that left PMI alive ([`Output::HungUp`]).
pub const HANGUP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The kvsname under which a PMI-1 `put` is published at once instead of at the next fence.
pub const PUBLISH_KVS: &str = "kauri.publish";

/// The PMI versions the engine serves, as `(version, subversion)`: what it answers a
/// client's `cmd=init pmi_version=V` with (`kauri -info` prints them).
pub const SERVED_VERSIONS: [(u32, u32); 2] = [(1, 1), (2, 0)];

/// Keys that are job attributes, served read-only from [`JobInfo`].
const MAPPING_KEY: &str = "PMI_process_mapping";

/// The reserved key whose value lists the job's dead ranks, as Hydra serves it: decimal ranks
/// joined by commas, in the order they died, no ranges (`3`, then `3,1`); empty while none
/// has died, and always found. Under `-disable-auto-cleanup` a rank that ends without
/// finalizing PMI is added on every host before its survivors get `SIGUSR1`; MPICH's fault
/// tolerance (`MPIR_CVAR_ENABLE_FT`) reads it when the signal comes. Served by PMI-1 `get`
/// (under any kvsname), PMI-2 `kvs-get` and `info-getjobattr`.
pub const DEAD_PROCESSES_KEY: &str = "PMI_dead_processes";

/// The reserved key that names the host's hardware topology as an hwloc XML file, as Hydra's
/// proxy serves it: MPICH 4.1 and later ask in `MPI_Init` when ranks share a host, and load
/// the file instead of probing the machine each. Served by PMI-1 `get` (under any kvsname;
/// `unavailable` when the host has none) and PMI-2 `info-getjobattr` (not found then).
pub const HWLOC_XMLFILE_KEY: &str = "PMI_hwloc_xmlfile";

/// What makes the host's topology file on first use, and names it: see
/// [`Engine::set_topology`].
pub type TopologyFile = fn() -> Option<String>;

impl Engine {
    /// An engine for `job`, serving its `local_ranks`.
    pub fn new(job: JobInfo) -> Engine {
        let ranks = job
            .local_ranks
            .iter()
            .map(|&r| (r, RankState::default()))
            .collect();
        Engine {
            job,
            conns: HashMap::new(),
            ranks,
            kvs: Kvs::default(),
            epoch: 0,
            in_fence: HashSet::new(),
            fence_waiters: Vec::new(),
            node_attrs: HashMap::new(),
            node_waiters: HashMap::new(),
            pending: HashMap::new(),
            next_request: 0,
            failed: false,
            dead: Vec::new(),
            out: Vec::new(),
            trace: false,
            wbuf: BytesMut::new(),
            topology: None,
        }
    }

    /// Serves [`HWLOC_XMLFILE_KEY`] with what `file` returns, called when a rank asks (it
    /// may make the file then); without it, the key names no file.
    pub fn set_topology(&mut self, file: TopologyFile) {
        self.topology = Some(file);
    }

    /// Turns the wire trace on or off (default: off; the host turns it on when
    /// [`crate::proto::trace_enabled`]).
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// Logs one message of `conn` as wire text: `->` from the rank, `<-` to it.
    fn trace_line(&self, conn: ConnId, arrow: &str, bytes: &[u8]) {
        let rank = self
            .rank_of(conn)
            .map_or_else(|| format!("? (connection {conn})"), |r| r.to_string());
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|l| !l.is_empty()) {
            tracing::info!(
                target: TRACE_TARGET,
                "pmi {} rank {rank} {arrow} {line}",
                self.job.kvsname
            );
        }
    }

    /// The job this engine serves.
    pub fn job(&self) -> &JobInfo {
        &self.job
    }

    /// Registers a connection; `rank` is known in `PMI_FD` mode, learnt from the handshake
    /// (`initack`, `fullinit`) in `PMI_PORT` mode.
    pub fn connect(&mut self, conn: ConnId, rank: Option<usize>) {
        self.conns.insert(conn, Conn { rank });
    }

    /// Forgets a connection whose socket closed. When it was an initialized, unfinalized
    /// rank's last one, says so ([`Output::HungUp`]).
    pub fn disconnect(&mut self, conn: ConnId) {
        if let Some(r) = self.conns.remove(&conn).and_then(|c| c.rank) {
            let others = self.conns.values().any(|c| c.rank == Some(r));
            if let Some(s) = self.ranks.get(&r) {
                if s.initialized && !s.finalized && !s.exited && !others {
                    self.out.push(Output::HungUp { rank: r });
                }
            }
        }
        self.fence_waiters.retain(|w| w.conn != conn);
        for ws in self.node_waiters.values_mut() {
            ws.retain(|w| w.conn != conn);
        }
        self.pending.retain(|_, (w, _)| w.conn != conn);
    }

    /// Takes everything the engine wants done, in order.
    pub fn drain(&mut self) -> Vec<Output> {
        self.trace_replies();
        std::mem::take(&mut self.out)
    }

    /// Like [`Engine::drain`], into `into` (cleared first), whose room the engine keeps for
    /// its next outputs: a caller that drains in a loop allocates nothing.
    pub fn drain_into(&mut self, into: &mut Vec<Output>) {
        self.trace_replies();
        into.clear();
        std::mem::swap(&mut self.out, into);
    }

    /// With the wire trace on, logs the replies about to be drained.
    fn trace_replies(&self) {
        if self.trace {
            for o in &self.out {
                if let Output::Send { conn, bytes } = o {
                    self.trace_line(*conn, "<-", bytes);
                }
            }
        }
    }

    /// Encodes one reply with `encode` and queues it for `conn`.
    fn push_send(&mut self, conn: ConnId, encode: impl FnOnce(&mut BytesMut)) {
        // Room for a typical reply; `reserve` reuses the buffer once the replies split off
        // it earlier have been written and dropped.
        self.wbuf.reserve(256);
        encode(&mut self.wbuf);
        let bytes = self.wbuf.split().freeze();
        self.out.push(Output::Send { conn, bytes });
    }

    /// Where each local rank is, in rank order.
    pub fn status(&self) -> Vec<(usize, RankPmi)> {
        let waiting = |conn: ConnId| self.rank_of(conn);
        let mut v: Vec<(usize, RankPmi)> = self
            .ranks
            .iter()
            .map(|(&r, s)| {
                let state = if s.exited {
                    RankPmi::Exited
                } else if s.hung_up {
                    RankPmi::HungUp
                } else if s.finalized {
                    RankPmi::Finalized
                } else if self.in_fence.contains(&r) {
                    RankPmi::InFence(self.epoch)
                } else if let Some(k) = self.node_waiters.iter().find_map(|(k, ws)| {
                    ws.iter()
                        .any(|w| waiting(w.conn) == Some(r))
                        .then(|| k.clone())
                }) {
                    RankPmi::WaitingAttr(k)
                } else if let Some(a) = self
                    .pending
                    .values()
                    .find_map(|(w, a)| (waiting(w.conn) == Some(r)).then_some(*a))
                {
                    RankPmi::WaitingRoot(
                        match a {
                            Asked::Spawn => "spawn",
                            Asked::Publish => "publish",
                            Asked::Unpublish => "unpublish",
                            Asked::Lookup => "lookup",
                        }
                        .into(),
                    )
                } else if s.initialized {
                    RankPmi::Running
                } else {
                    RankPmi::NotInitialized
                };
                (r, state)
            })
            .collect();
        v.sort_by_key(|(r, _)| *r);
        v
    }

    /// True when `rank` called finalize.
    pub fn finalized(&self, rank: usize) -> bool {
        self.ranks.get(&rank).is_some_and(|s| s.finalized)
    }

    /// True when `rank` finished the PMI handshake.
    pub fn initialized(&self, rank: usize) -> bool {
        self.ranks.get(&rank).is_some_and(|s| s.initialized)
    }

    /// Sets the job's dead ranks (every host's, in the order they died): the value of
    /// [`DEAD_PROCESSES_KEY`] from now on.
    pub fn set_dead(&mut self, ranks: &[usize]) {
        self.dead = ranks.to_vec();
    }

    /// The value of [`DEAD_PROCESSES_KEY`]: `3,1`, or empty.
    fn dead_processes(&self) -> String {
        let ranks: Vec<String> = self.dead.iter().map(usize::to_string).collect();
        ranks.join(",")
    }

    /// A moment ([`HANGUP_GRACE`]) after [`Output::HungUp`]: a rank that has neither ended
    /// nor connected again since has left PMI alive (a library that closed every descriptor,
    /// a program that closed the socket), and can never enter a fence: like a rank that ended,
    /// it fails a fence under way or to come ([`Output::LeftPmi`] says so above).
    pub fn rank_hung_up(&mut self, rank: usize) {
        let connected = self.conns.values().any(|c| c.rank == Some(rank));
        let Some(s) = self.ranks.get_mut(&rank) else {
            return;
        };
        if s.exited || s.finalized || connected {
            return;
        }
        s.hung_up = true;
        self.out.push(Output::LeftPmi { rank });
        self.check_fence_possible();
    }

    /// Records that a local rank's process ended. A rank that has ended can never enter a
    /// fence, and a fence needs every rank: if one is under way, or starts later, the job has
    /// failed, whether the rank had finalized or not (a shell rank's `kauri kvs` calls each
    /// finalize, and such a rank may still be wanted in a fence).
    pub fn rank_exited(&mut self, rank: usize) {
        if let Some(s) = self.ranks.get_mut(&rank) {
            s.exited = true;
        }
        self.check_fence_possible();
    }

    fn check_fence_possible(&mut self) {
        if self.in_fence.is_empty() || self.failed {
            return;
        }
        let mut gone: Vec<usize> = self
            .ranks
            .iter()
            .filter(|(r, s)| (s.exited || s.hung_up) && !self.in_fence.contains(r))
            .map(|(&r, _)| r)
            .collect();
        gone.sort_unstable();
        if let Some(&r) = gone.first() {
            let s = &self.ranks[&r];
            let how = if s.hung_up && !s.exited {
                "closed its PMI connection without finalizing (and runs on)"
            } else if s.finalized {
                "exited (after finalizing PMI)"
            } else if s.initialized {
                "exited without finalizing PMI"
            } else {
                "exited before PMI init"
            };
            self.failed = true;
            self.out.push(Output::Failed {
                reason: format!(
                    "rank {r} {how} while {} rank(s) wait in a fence",
                    self.in_fence.len()
                ),
            });
        }
    }

    /// Applies the merged delta of fence `epoch` and releases every rank waiting in it. The
    /// tree's root checked the delta and says whether its keys are the last fence's
    /// (`same_keys`, [`crate::proto::kvs::Kvs::commit_checked`]): nothing here walks it.
    pub fn fence_done(&mut self, epoch: u64, delta: &Packed, same_keys: bool) {
        if epoch != self.epoch || self.failed {
            return;
        }
        self.kvs.commit_checked(delta, same_keys);
        self.epoch += 1;
        self.in_fence.clear();
        for w in std::mem::take(&mut self.fence_waiters) {
            if w.v2 {
                self.send_v2(
                    w.conn,
                    w.thrid,
                    pmi_wire::v2::Response::KvsFence(Status::ok()),
                );
            } else {
                self.send_v1(
                    w.conn,
                    pmi_wire::v1::Response::BarrierOut {
                        status: Status::ok(),
                        tag: None,
                    },
                );
            }
        }
    }

    /// Puts a pair into the committed store directly (spawn preputs).
    pub fn preput(&mut self, key: String, value: String) {
        self.kvs.preput(key, value);
    }

    /// Reports a message that did not parse. Framing errors close the connection.
    pub fn bad_input(&mut self, conn: ConnId, v2: bool, error: &WireError) {
        if self.trace {
            self.trace_line(conn, "->", format!("(bad request: {error})").as_bytes());
        }
        let rank = self.rank_of(conn);
        self.out.push(Output::ProtocolError {
            rank,
            error: error.to_string(),
        });
        if error.is_fatal() {
            self.out.push(Output::Close { conn });
            return;
        }
        let status = Status::error(-1, error.to_string());
        let name = match error {
            WireError::UnknownCommand(c) => c.as_str(),
            _ => "error",
        };
        self.push_send(conn, |b| {
            if v2 {
                pmi_wire::v2::encode_error(name, None, &status, b);
            } else {
                pmi_wire::v1::encode_error(name, &status, b);
            }
        });
    }

    /// Handles one request from `conn`.
    pub fn handle(&mut self, conn: ConnId, req: Incoming) {
        if self.trace {
            let mut b = BytesMut::new();
            match &req {
                Incoming::V1(r) => r.encode(&mut b),
                Incoming::V2(f) => f.encode(&mut b),
            }
            self.trace_line(conn, "->", &b);
        }
        match req {
            Incoming::V1(r) => self.handle_v1(conn, r),
            Incoming::V2(f) => self.handle_v2(conn, f),
        }
    }

    /// The rank `conn` serves, once known.
    pub fn rank_of(&self, conn: ConnId) -> Option<usize> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    fn appnum(&self, conn: ConnId) -> u32 {
        self.rank_of(conn)
            .and_then(|r| self.job.appnum.get(r).copied())
            .unwrap_or(0)
    }

    fn bind(&mut self, conn: ConnId, id: i64) -> Result<usize, Refusal> {
        let r = usize::try_from(id)
            .ok()
            .filter(|r| self.ranks.contains_key(r))
            .ok_or(Refusal::NotServedHere { id })?;
        if self.conns.values().any(|c| c.rank == Some(r)) {
            match self.conns.get(&conn) {
                Some(c) if c.rank == Some(r) => {}
                _ => return Err(Refusal::AlreadyConnected { rank: r }),
            }
        }
        self.conns.entry(conn).or_default().rank = Some(r);
        Ok(r)
    }

    fn mark_initialized(&mut self, conn: ConnId) {
        if let Some(r) = self.rank_of(conn) {
            if let Some(s) = self.ranks.get_mut(&r) {
                s.hung_up = false;
                if !s.initialized {
                    s.initialized = true;
                    self.out.push(Output::Initialized { rank: r });
                }
            }
        }
    }

    fn finalize(&mut self, conn: ConnId) {
        if let Some(r) = self.rank_of(conn) {
            if let Some(s) = self.ranks.get_mut(&r) {
                s.finalized = true;
            }
            self.out.push(Output::Finalized { rank: r });
        }
    }

    fn check_put(key: &str, value: &str) -> Result<(), Refusal> {
        if key.is_empty() {
            Err(Refusal::EmptyKey)
        } else if key.len() > KEY_MAX {
            Err(Refusal::KeyTooLong { len: key.len() })
        } else if value.len() > VALUE_MAX {
            Err(Refusal::ValueTooLong { len: value.len() })
        } else if key.starts_with("PMI_") {
            Err(Refusal::ReservedKey {
                key: key.to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// Enters the fence; `Err` when the connection has no rank.
    fn enter_fence(&mut self, conn: ConnId, waiter: Waiter) -> Result<(), Refusal> {
        let rank = self.rank_of(conn).ok_or(Refusal::FenceUnbound)?;
        if !self.in_fence.insert(rank) {
            return Err(Refusal::AlreadyInFence {
                rank,
                epoch: self.epoch,
            });
        }
        self.fence_waiters.push(waiter);
        if self.in_fence.len() == self.ranks.len() {
            let delta = self.kvs.take_pending();
            self.out.push(Output::FenceReady {
                epoch: self.epoch,
                delta,
            });
        } else {
            self.check_fence_possible();
        }
        Ok(())
    }

    fn job_attr(&self, key: &str) -> Option<String> {
        match key {
            MAPPING_KEY => Some(self.job.process_mapping.clone()),
            DEAD_PROCESSES_KEY => Some(self.dead_processes()),
            "universeSize" => Some(self.job.universe_size.to_string()),
            HWLOC_XMLFILE_KEY => self.topology.and_then(|file| file()),
            _ => None,
        }
    }

    /// Sends `service` up the tree; the reply goes to `waiter` when it comes back.
    fn ask(&mut self, waiter: Waiter, asked: Asked, service: Service) {
        let id = self.next_request;
        self.next_request += 1;
        self.pending.insert(id, (waiter, asked));
        self.out.push(Output::Request { id, service });
    }

    /// Answers request `id` (see [`Output::Request`]); a reply for a connection that has gone
    /// is dropped.
    pub fn service_reply(&mut self, id: u64, reply: ServiceReply) {
        let Some((w, asked)) = self.pending.remove(&id) else {
            return;
        };
        let sent = if w.v2 {
            v2::service_answer(asked, reply).map(|msg| self.send_v2(w.conn, w.thrid, msg))
        } else {
            v1::service_answer(asked, reply).map(|msg| self.send_v1(w.conn, msg))
        };
        if let Err(e) = sent {
            self.out.push(Output::ProtocolError {
                rank: self.rank_of(w.conn),
                error: e.to_string(),
            });
        }
    }

    fn spawn_request(spawn: pmi_wire::Spawn) -> Result<Service, Refusal> {
        if spawn.commands.is_empty() {
            return Err(Refusal::SpawnNoCommand);
        }
        if let Some(c) = spawn.commands.iter().find(|c| c.execname.is_empty()) {
            return Err(Refusal::SpawnEmptyName { nprocs: c.nprocs });
        }
        Ok(Service::Spawn {
            commands: spawn.commands,
            preput: spawn.preput,
            pmix: None,
        })
    }

    /// Reports that the rank on `conn` asked to end the job with `code`.
    fn abort(&mut self, conn: ConnId, code: i32, message: Option<String>) {
        self.out.push(Output::Abort {
            rank: self.rank_of(conn),
            code,
            message: message.unwrap_or_default(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmi_wire::v2;

    fn engine(size: usize) -> Engine {
        let mut e = Engine::new(JobInfo {
            kvsname: "kvs_test".into(),
            size,
            universe_size: size as i64,
            appnum: vec![0; size],
            process_mapping: "(vector,(0,1,4))".into(),
            local_ranks: (0..size).collect(),
            spawner_jobid: None,
            puts_visible_at_once: false,
        });
        for r in 0..size {
            e.connect(r as ConnId, Some(r));
        }
        e
    }

    /// Feeds raw client bytes through the framing, as the I/O layer does.
    fn feed(e: &mut Engine, f: &mut Framing, conn: ConnId, bytes: &[u8]) {
        let mut buf = BytesMut::from(bytes);
        while let Some(req) = f.decode(&mut buf).unwrap() {
            e.handle(conn, req);
        }
    }

    /// Runs outputs the way a one-host front end does; returns the bytes sent per connection.
    fn settle(e: &mut Engine) -> (HashMap<ConnId, String>, Vec<Output>) {
        let mut sent: HashMap<ConnId, String> = HashMap::new();
        let mut other = Vec::new();
        loop {
            let out = e.drain();
            if out.is_empty() {
                return (sent, other);
            }
            for o in out {
                match o {
                    Output::Send { conn, bytes } => sent
                        .entry(conn)
                        .or_default()
                        .push_str(std::str::from_utf8(&bytes).unwrap()),
                    // the root's check of the delta is the branch's (tested there)
                    Output::FenceReady { epoch, delta } => e.fence_done(epoch, &delta, false),
                    o => other.push(o),
                }
            }
        }
    }

    /// The engine says where each rank is: before init, in a fence, waiting for a node
    /// attribute, finalized, exited.
    #[test]
    fn status_says_where_each_rank_is() {
        let mut e = engine(4);
        let mut f: Vec<Framing> = (0..4).map(|_| Framing::default()).collect();
        feed(
            &mut e,
            &mut f[0],
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=barrier_in\n",
        );
        feed(
            &mut e,
            &mut f[1],
            1,
            b"cmd=init pmi_version=2 pmi_subversion=0\n",
        );
        feed(
            &mut e,
            &mut f[1],
            1,
            b"38    cmd=fullinit;pmirank=1;threaded=FALSE;37    cmd=info-getnodeattr;key=k;wait=TRUE;",
        );
        feed(
            &mut e,
            &mut f[2],
            2,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=finalize\n",
        );
        e.rank_exited(3);
        let _ = e.drain();
        assert_eq!(
            e.status(),
            vec![
                (0, RankPmi::InFence(0)),
                (1, RankPmi::WaitingAttr("k".into())),
                (2, RankPmi::Finalized),
                (3, RankPmi::Exited),
            ]
        );
        assert_eq!(RankPmi::InFence(0).to_string(), "in fence 0");
    }

    /// The root checks each merged delta (the branch's test), so the engine does not walk
    /// it; one that reached an engine unchecked and does not unpack still cannot make a read
    /// panic: the pairs before the bad one read as committed, the rest as missing.
    #[test]
    fn an_unchecked_bad_delta_reads_as_missing_keys_not_a_panic() {
        let mut e = engine(1);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=kvs_test key=a value=1\ncmd=barrier_in\n",
        );
        let mut ready = None;
        for o in e.drain() {
            if let Output::FenceReady { epoch, delta } = o {
                ready = Some((epoch, delta));
            }
        }
        let (epoch, delta) = ready.expect("the fence is ready");
        assert_eq!(delta.to_delta().unwrap(), vec![("a".into(), "1".into())]);
        let mut bytes = bincode::serialize(&delta).unwrap();
        bytes.extend_from_slice(&[9, 0, 0, 0, b'b']);
        let len = bytes.len() as u64 - 8;
        bytes[..8].copy_from_slice(&len.to_le_bytes());
        let bad: Packed = bincode::deserialize(&bytes).unwrap();
        assert!(bad.count().is_err());
        e.fence_done(epoch, &bad, true);
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=get kvsname=kvs_test key=a\ncmd=get kvsname=kvs_test key=b\n",
        );
        let (sent, _) = settle(&mut e);
        assert!(sent[&0].contains("cmd=barrier_out rc=0"), "{}", sent[&0]);
        assert!(
            sent[&0].contains("cmd=get_result rc=0 value=1"),
            "{}",
            sent[&0]
        );
        assert!(
            sent[&0].contains("cmd=get_result rc=1 msg=key_b_not_found"),
            "{}",
            sent[&0]
        );
    }

    #[test]
    fn init_answers_the_served_versions() {
        for (v, sub) in SERVED_VERSIONS {
            let mut e = engine(1);
            let mut f = Framing::default();
            let line = format!("cmd=init pmi_version={v} pmi_subversion=9\n");
            feed(&mut e, &mut f, 0, line.as_bytes());
            let (sent, _) = settle(&mut e);
            let want = format!("cmd=response_to_init rc=0 pmi_version={v} pmi_subversion={sub}");
            assert!(sent[&0].contains(&want), "{}", sent[&0]);
        }
    }

    #[test]
    fn pmi1_session_put_barrier_get() {
        let mut e = engine(2);
        let mut f = [Framing::default(), Framing::default()];
        for r in 0..2u64 {
            feed(
                &mut e,
                &mut f[r as usize],
                r,
                b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\ncmd=get_my_kvsname\n",
            );
        }
        let (sent, other) = settle(&mut e);
        assert!(sent[&0].contains("cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"));
        assert!(sent[&0].contains("cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"));
        assert!(sent[&1].contains("cmd=my_kvsname rc=0 kvsname=kvs_test"));
        assert_eq!(other.len(), 2, "{other:?}");
        feed(
            &mut e,
            &mut f[0],
            0,
            b"cmd=put kvsname=kvs_test key=a value=x y z\ncmd=barrier_in\n",
        );
        let (sent, _) = settle(&mut e);
        assert_eq!(
            sent[&0], "cmd=put_result rc=0\n",
            "no barrier_out before everyone"
        );
        feed(
            &mut e,
            &mut f[1],
            1,
            b"cmd=get kvsname=kvs_test key=a\ncmd=barrier_in\n",
        );
        let (sent, _) = settle(&mut e);
        assert!(
            sent[&1].starts_with("cmd=get_result rc=1"),
            "not visible before the barrier"
        );
        assert!(sent[&0].contains("cmd=barrier_out rc=0"));
        assert!(sent[&1].contains("cmd=barrier_out rc=0"));
        feed(
            &mut e,
            &mut f[1],
            1,
            b"cmd=get kvsname=kvs_test key=a\ncmd=get kvsname=kvs_test key=PMI_process_mapping\n",
        );
        let (sent, _) = settle(&mut e);
        assert!(sent[&1].contains("cmd=get_result rc=0 value=x y z\n"));
        assert!(sent[&1].contains("value=(vector,(0,1,4))\n"));
    }

    /// A PMI-1 `get` names a KVS; only the job's own is served, as Hydra does (its server
    /// refuses a kvsname that is not the group's). Job attributes such as
    /// `PMI_process_mapping` are answered whatever the name (Hydra's proxy answers those itself).
    #[test]
    fn pmi1_get_from_another_kvs_is_refused() {
        let mut e = engine(1);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=kvs_test key=a value=1\ncmd=barrier_in\n",
        );
        settle(&mut e);
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=get kvsname=kvs_other key=a\ncmd=get kvsname=kvs_test key=a\ncmd=get kvsname=kvs_other key=PMI_process_mapping\n",
        );
        let (sent, _) = settle(&mut e);
        let lines: Vec<&str> = sent[&0].lines().collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("cmd=get_result rc=-1 msg=")
                && lines[0].contains("kvs_other")
                && !lines[0].contains("value=1"),
            "{lines:?}"
        );
        assert_eq!(lines[1], "cmd=get_result rc=0 value=1");
        assert_eq!(lines[2], "cmd=get_result rc=0 value=(vector,(0,1,4))");
    }

    #[test]
    fn pmi2_session_fence_and_node_attr_wait() {
        let mut e = engine(2);
        let mut f = [Framing::default(), Framing::default()];
        let frame = |msg: v2::Request| {
            let mut b = BytesMut::new();
            Frame {
                thrid: Some("t1".into()),
                msg,
            }
            .encode(&mut b);
            b
        };
        for r in 0..2u64 {
            let mut bytes = BytesMut::from(&b"cmd=init pmi_version=2 pmi_subversion=0\n"[..]);
            bytes.extend_from_slice(&frame(v2::Request::FullInit {
                pmijobid: None,
                pmirank: Some(r as i64),
                threaded: Some(false),
            }));
            feed(&mut e, &mut f[r as usize], r, &bytes);
        }
        let (sent, _) = settle(&mut e);
        assert!(sent[&1].contains("cmd=fullinit-response;thrid=t1;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;"));
        // A waiting node-attribute read is answered by a later put on the node.
        feed(
            &mut e,
            &mut f[1],
            1,
            &frame(v2::Request::InfoGetNodeAttr {
                key: "shm".into(),
                wait: true,
            }),
        );
        assert!(settle(&mut e).0.is_empty());
        feed(
            &mut e,
            &mut f[0],
            0,
            &frame(v2::Request::InfoPutNodeAttr {
                key: "shm".into(),
                value: "seg1".into(),
            }),
        );
        let (sent, _) = settle(&mut e);
        assert!(
            sent[&1].contains("cmd=info-getnodeattr-response;thrid=t1;rc=0;found=TRUE;value=seg1;")
        );
        // Fence, then MPICH's read of a key nobody put: answered not-found at once.
        feed(
            &mut e,
            &mut f[0],
            0,
            &frame(v2::Request::KvsPut {
                key: "bc-0".into(),
                value: "addr0".into(),
            }),
        );
        feed(&mut e, &mut f[0], 0, &frame(v2::Request::KvsFence));
        feed(&mut e, &mut f[1], 1, &frame(v2::Request::KvsFence));
        let (sent, _) = settle(&mut e);
        assert!(sent[&1].contains("cmd=kvs-fence-response;thrid=t1;rc=0;"));
        feed(
            &mut e,
            &mut f[1],
            1,
            &frame(v2::Request::KvsGet {
                jobid: None,
                srcid: Some(0),
                key: "bc-0".into(),
            }),
        );
        feed(
            &mut e,
            &mut f[1],
            1,
            &frame(v2::Request::KvsGet {
                jobid: None,
                srcid: None,
                key: "-NONEXIST-KEY".into(),
            }),
        );
        let (sent, _) = settle(&mut e);
        assert!(sent[&1].contains("found=TRUE;value=addr0;"));
        assert!(sent[&1].contains("rc=1;errmsg=key -NONEXIST-KEY not found;found=FALSE;"));
    }

    /// `PMI_dead_processes` is found and empty until the front end names dead ranks, then
    /// lists them in the order they died: through PMI-1 `get` (under any kvsname, as Hydra
    /// 4.0's server answers it), PMI-2 `kvs-get` and `info-getjobattr`.
    #[test]
    fn dead_processes_are_served_by_both_protocols() {
        let mut e = engine(2);
        let mut f = [Framing::default(), Framing::default()];
        let frame = |msg: v2::Request| {
            let mut b = BytesMut::from(&b""[..]);
            Frame { thrid: None, msg }.encode(&mut b);
            b
        };
        feed(
            &mut e,
            &mut f[0],
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1
",
        );
        let mut init2 = BytesMut::from(
            &b"cmd=init pmi_version=2 pmi_subversion=0
"[..],
        );
        init2.extend_from_slice(&frame(v2::Request::FullInit {
            pmijobid: None,
            pmirank: Some(1),
            threaded: Some(false),
        }));
        feed(&mut e, &mut f[1], 1, &init2);
        settle(&mut e);
        let ask = |e: &mut Engine, f: &mut [Framing; 2]| {
            feed(
                e,
                &mut f[0],
                0,
                b"cmd=get kvsname=kvs_test key=PMI_dead_processes
cmd=get kvsname=other key=PMI_dead_processes
",
            );
            let mut q = frame(v2::Request::KvsGet {
                jobid: Some("kvs_test".into()),
                srcid: None,
                key: DEAD_PROCESSES_KEY.into(),
            });
            q.extend_from_slice(&frame(v2::Request::InfoGetJobAttr {
                key: DEAD_PROCESSES_KEY.into(),
            }));
            feed(e, &mut f[1], 1, &q);
            settle(e).0
        };
        let sent = ask(&mut e, &mut f);
        assert_eq!(
            sent[&0],
            "cmd=get_result rc=0 value=\ncmd=get_result rc=0 value=\n"
        );
        assert_eq!(
            sent[&1].matches("rc=0;found=TRUE;value=;").count(),
            2,
            "{}",
            sent[&1]
        );
        e.set_dead(&[3]);
        let sent = ask(&mut e, &mut f);
        assert_eq!(
            sent[&0],
            "cmd=get_result rc=0 value=3\ncmd=get_result rc=0 value=3\n"
        );
        assert!(
            sent[&1].contains("cmd=kvs-get-response;rc=0;found=TRUE;value=3;"),
            "{}",
            sent[&1]
        );
        assert!(sent[&1].contains("cmd=info-getjobattr-response;rc=0;found=TRUE;value=3;"));
        e.set_dead(&[3, 1]);
        let sent = ask(&mut e, &mut f);
        assert!(
            sent[&0].starts_with("cmd=get_result rc=0 value=3,1\n"),
            "{}",
            sent[&0]
        );
        assert_eq!(sent[&1].matches("value=3,1;").count(), 2, "{}", sent[&1]);
    }

    /// `PMI_hwloc_xmlfile` names the host's topology file, as Hydra's proxy does: PMI-1 `get`
    /// under any kvsname and PMI-2 `info-getjobattr`. A host that has none answers PMI-1
    /// "unavailable" (rc 0, what MPICH looks for) and PMI-2 "not found"; so does an engine
    /// given no topology at all.
    #[test]
    fn the_topology_file_is_served_by_both_protocols() {
        fn here() -> Option<String> {
            Some("/proc/1/fd/7".into())
        }
        fn none() -> Option<String> {
            None
        }
        let frame = |msg: v2::Request| {
            let mut b = BytesMut::new();
            Frame { thrid: None, msg }.encode(&mut b);
            b
        };
        let ask = |topology: Option<fn() -> Option<String>>| {
            let mut e = engine(2);
            if let Some(t) = topology {
                e.set_topology(t);
            }
            let mut f = [Framing::default(), Framing::default()];
            feed(
                &mut e,
                &mut f[0],
                0,
                b"cmd=init pmi_version=1 pmi_subversion=1\n\
                  cmd=get kvsname=kvs_test key=PMI_hwloc_xmlfile\n\
                  cmd=get kvsname=other key=PMI_hwloc_xmlfile\n",
            );
            let mut q = BytesMut::from(&b"cmd=init pmi_version=2 pmi_subversion=0\n"[..]);
            q.extend_from_slice(&frame(v2::Request::FullInit {
                pmijobid: None,
                pmirank: Some(1),
                threaded: Some(false),
            }));
            q.extend_from_slice(&frame(v2::Request::InfoGetJobAttr {
                key: HWLOC_XMLFILE_KEY.into(),
            }));
            feed(&mut e, &mut f[1], 1, &q);
            settle(&mut e).0
        };
        let sent = ask(Some(here));
        assert!(
            sent[&0].ends_with(
                "cmd=get_result rc=0 value=/proc/1/fd/7\ncmd=get_result rc=0 value=/proc/1/fd/7\n"
            ),
            "{}",
            sent[&0]
        );
        assert!(
            sent[&1].contains("cmd=info-getjobattr-response;rc=0;found=TRUE;value=/proc/1/fd/7;"),
            "{}",
            sent[&1]
        );
        for sent in [ask(Some(none)), ask(None)] {
            assert!(
                sent[&0].ends_with(
                    "cmd=get_result rc=0 value=unavailable\ncmd=get_result rc=0 value=unavailable\n"
                ),
                "{}",
                sent[&0]
            );
            assert!(
                sent[&1].contains("cmd=info-getjobattr-response;rc=1;"),
                "{}",
                sent[&1]
            );
            assert!(sent[&1].contains("found=FALSE;"), "{}", sent[&1]);
        }
    }

    #[test]
    fn bad_input_gets_an_error_reply_and_names_the_rank() {
        let mut e = engine(1);
        let mut f = Framing::default();
        let mut buf = BytesMut::from(&b"cmd=frobnicate x=1\ncmd=put key=k\n"[..]);
        for _ in 0..2 {
            let err = f.decode(&mut buf).unwrap_err();
            e.bad_input(0, false, &err);
        }
        let (sent, other) = settle(&mut e);
        assert!(sent[&0].contains("cmd=frobnicate_result rc=-1 msg=unknown_command_`frobnicate`"));
        assert!(sent[&0].contains("cmd=error_result rc=-1 msg=`put`_lacks_the_field_`value`"));
        assert!(matches!(
            &other[0],
            Output::ProtocolError { rank: Some(0), .. }
        ));
    }

    #[test]
    fn over_long_and_reserved_keys_are_refused() {
        let mut e = engine(1);
        let mut f = Framing::default();
        let long_key = "k".repeat(KEY_MAX + 1);
        let long_val = "v".repeat(VALUE_MAX + 1);
        feed(&mut e, &mut f, 0, format!("cmd=put kvsname=x key={long_key} value=1\ncmd=put kvsname=x key=a value={long_val}\ncmd=put kvsname=x key=PMI_x value=1\n").as_bytes());
        let (sent, _) = settle(&mut e);
        let lines: Vec<&str> = sent[&0].lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("rc=-1") && lines[0].contains("key_of_65_bytes"));
        assert!(lines[1].contains("rc=-1") && lines[1].contains("value_of_1025_bytes"));
        assert!(lines[2].contains("rc=-1") && lines[2].contains("reserved"));
    }

    #[test]
    fn a_rank_gone_before_init_fails_a_waiting_fence_once() {
        let mut e = engine(3);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=barrier_in\n",
        );
        e.rank_exited(1);
        let mut f2 = Framing::default();
        feed(
            &mut e,
            &mut f2,
            2,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=barrier_in\n",
        );
        let (_, other) = settle(&mut e);
        let failures: Vec<_> = other
            .iter()
            .filter(|o| matches!(o, Output::Failed { .. }))
            .collect();
        assert_eq!(failures.len(), 1, "{other:?}");
        assert!(
            matches!(failures[0], Output::Failed { reason } if reason.contains("rank 1 exited before PMI init"))
        );
    }

    /// A rank that finalized and then ended can no more join a fence than one that did not
    /// finalize: a shell rank's `kauri kvs put` finalizes its session, then the script exits.
    #[test]
    fn a_finalized_rank_gone_fails_a_waiting_fence() {
        let mut e = engine(2);
        let mut f = [Framing::default(), Framing::default()];
        feed(
            &mut e,
            &mut f[1],
            1,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=kauri.publish key=a value=1\ncmd=finalize\n",
        );
        e.rank_exited(1);
        let (_, other) = settle(&mut e);
        assert!(
            !other.iter().any(|o| matches!(o, Output::Failed { .. })),
            "no fence yet: {other:?}"
        );
        feed(
            &mut e,
            &mut f[0],
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=barrier_in\n",
        );
        let (sent, other) = settle(&mut e);
        assert!(!sent[&0].contains("barrier_out"), "{sent:?}");
        assert!(
            other.iter().any(|o| matches!(o, Output::Failed { reason }
                if reason == "rank 1 exited (after finalizing PMI) while 1 rank(s) wait in a fence")),
            "{other:?}"
        );
    }

    /// A rank whose connection ends without finalize is said to have hung up; a moment
    /// later, if it has not ended, it counts as gone to the fence rules (a fence waiting for
    /// it fails) and its status says so; one that ended meanwhile is judged by its end.
    #[test]
    fn a_rank_that_hangs_up_and_runs_on_fails_a_waiting_fence() {
        let mut e = engine(3);
        let mut f = [Framing::default(), Framing::default(), Framing::default()];
        for (r, f) in f.iter_mut().enumerate() {
            feed(
                &mut e,
                f,
                r as ConnId,
                b"cmd=init pmi_version=1 pmi_subversion=1\n",
            );
        }
        settle(&mut e);
        e.disconnect(1);
        e.disconnect(2);
        let (_, other) = settle(&mut e);
        assert!(other.contains(&Output::HungUp { rank: 1 }), "{other:?}");
        assert!(other.contains(&Output::HungUp { rank: 2 }), "{other:?}");
        // Rank 2's end is seen within the grace: it is judged by that, not as hung up.
        e.rank_exited(2);
        e.rank_hung_up(2);
        e.rank_hung_up(1);
        let (_, other) = settle(&mut e);
        assert_eq!(other, vec![Output::LeftPmi { rank: 1 }]);
        assert_eq!(
            e.status(),
            vec![
                (0, RankPmi::Running),
                (1, RankPmi::HungUp),
                (2, RankPmi::Exited)
            ]
        );
        feed(&mut e, &mut f[0], 0, b"cmd=barrier_in\n");
        let (sent, other) = settle(&mut e);
        assert!(
            !sent.get(&0).is_some_and(|s| s.contains("barrier_out")),
            "{sent:?}"
        );
        assert!(
            other
                .iter()
                .any(|o| matches!(o, Output::Failed { reason } if reason
                == "rank 1 closed its PMI connection without finalizing (and runs on) \
                    while 1 rank(s) wait in a fence")),
            "{other:?}"
        );
    }

    /// A finalized rank's connection ends as it should: no hang-up.
    #[test]
    fn a_finalized_rank_that_disconnects_has_not_hung_up() {
        let mut e = engine(1);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=finalize\n",
        );
        settle(&mut e);
        e.disconnect(0);
        let (_, other) = settle(&mut e);
        assert!(other.is_empty(), "{other:?}");
    }

    #[test]
    fn port_mode_binds_ranks_by_pmi_id() {
        let mut e = engine(2);
        e.conns.clear();
        e.connect(10, None);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            10,
            b"cmd=initack pmiid=1\ncmd=init pmi_version=1 pmi_subversion=1\ncmd=get_appnum\n",
        );
        let (sent, _) = settle(&mut e);
        assert!(
            sent[&10].starts_with("cmd=initack\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n")
        );
        e.connect(11, None);
        feed(&mut e, &mut f, 11, b"cmd=initack pmiid=1\n");
        let (_, other) = settle(&mut e);
        assert!(
            other
                .iter()
                .any(|o| matches!(o, Output::Close { conn: 11 })),
            "{other:?}"
        );
    }

    #[test]
    fn unsupported_versions_are_refused_loudly() {
        let mut e = engine(1);
        let mut f = Framing::default();
        feed(
            &mut e,
            &mut f,
            0,
            b"cmd=init pmi_version=3 pmi_subversion=0\n",
        );
        let (sent, _) = settle(&mut e);
        assert!(sent[&0].contains("rc=-1"));
        assert!(!f.is_v2());
    }

    #[test]
    fn abort_is_reported_with_its_code() {
        let mut e = engine(2);
        let mut f = Framing::default();
        feed(&mut e, &mut f, 1, b"cmd=abort exitcode=7\n");
        let (_, other) = settle(&mut e);
        assert_eq!(
            other,
            vec![Output::Abort {
                rank: Some(1),
                code: 7,
                message: String::new()
            }]
        );
    }

    /// A writer for the test subscriber: everything goes into one shared buffer.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Runs `f` with a subscriber that keeps every event; returns what was logged.
    fn logged(f: impl FnOnce()) -> String {
        let out = Captured::default();
        let w = out.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::with_default(sub, f);
        let text = String::from_utf8_lossy(&out.0.lock().unwrap()).into_owned();
        text
    }

    /// With the trace on, every request and every reply is logged with the job, the rank and
    /// the direction; with it off, nothing is.
    #[test]
    fn the_wire_trace_logs_requests_and_replies_per_rank() {
        let session = |trace: bool| {
            logged(|| {
                let mut e = engine(2);
                e.set_trace(trace);
                let mut f = [Framing::default(), Framing::default()];
                feed(
                    &mut e,
                    &mut f[1],
                    1,
                    b"cmd=init pmi_version=1 pmi_subversion=1
",
                );
                feed(
                    &mut e,
                    &mut f[1],
                    1,
                    b"cmd=put kvsname=kvs_test key=k value=v
",
                );
                feed(
                    &mut e,
                    &mut f[0],
                    0,
                    b"cmd=init pmi_version=2 pmi_subversion=0
",
                );
                feed(&mut e, &mut f[0], 0, b"21    cmd=kvs-get;key=nope;");
                settle(&mut e);
            })
        };
        let text = session(true);
        for want in [
            "pmi kvs_test rank 1 -> cmd=init pmi_version=1 pmi_subversion=1",
            "pmi kvs_test rank 1 <- cmd=response_to_init rc=0",
            "pmi kvs_test rank 1 -> cmd=put kvsname=kvs_test key=k value=v",
            "pmi kvs_test rank 1 <- cmd=put_result rc=0",
            "pmi kvs_test rank 0 -> cmd=init pmi_version=2",
            "pmi kvs_test rank 0 -> 21    cmd=kvs-get;key=nope;",
            "pmi kvs_test rank 0 <- ",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
        assert!(text.contains("cmd=kvs-get-response;"), "{text}");
        assert!(text.contains(TRACE_TARGET), "{text}");
        // A timestamp on each line (the subscriber's): the year.
        assert!(text.lines().all(|l| l.starts_with("20")), "{text}");
        assert_eq!(session(false), "", "the trace was off");
    }

    /// Each refusal prints the reason ranks were given as text before it had a type.
    #[test]
    fn each_refusal_prints_its_reason() {
        let cases = [
            (Refusal::BadPmiid("x".into()), "bad pmiid \"x\""),
            (
                Refusal::NotServedHere { id: -1 },
                "PMI id -1 is not a rank served here",
            ),
            (
                Refusal::AlreadyConnected { rank: 3 },
                "rank 3 is already connected",
            ),
            (
                Refusal::NoPmirank,
                "fullinit without pmirank on an unbound connection",
            ),
            (Refusal::EmptyKey, "empty key"),
            (
                Refusal::KeyTooLong { len: 65 },
                "key of 65 bytes exceeds 64",
            ),
            (
                Refusal::ValueTooLong { len: 1025 },
                "value of 1025 bytes exceeds 1024",
            ),
            (
                Refusal::ReservedKey {
                    key: "PMI_x".into(),
                },
                "key PMI_x is reserved (PMI_ prefix)",
            ),
            (
                Refusal::FenceUnbound,
                "a connection with no rank cannot enter a fence (send initack first)",
            ),
            (
                Refusal::AlreadyInFence { rank: 1, epoch: 2 },
                "rank 1 is already in fence 2",
            ),
            (Refusal::SpawnNoCommand, "spawn with no command"),
            (
                Refusal::SpawnEmptyName { nprocs: 4 },
                "spawn of an empty program name (4 processes)",
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }

    /// The engine's checks give the kind of refusal.
    #[test]
    fn the_checks_refuse_by_kind() {
        assert_eq!(Engine::check_put("", "v"), Err(Refusal::EmptyKey));
        assert_eq!(
            Engine::check_put(&"k".repeat(65), "v"),
            Err(Refusal::KeyTooLong { len: 65 })
        );
        assert_eq!(
            Engine::check_put("k", &"v".repeat(1025)),
            Err(Refusal::ValueTooLong { len: 1025 })
        );
        let mut e = engine(2);
        assert_eq!(e.bind(9, 5), Err(Refusal::NotServedHere { id: 5 }));
        assert_eq!(e.bind(9, 0), Err(Refusal::AlreadyConnected { rank: 0 }));
        assert_eq!(e.enter_fence(9, Waiter::v1(9)), Err(Refusal::FenceUnbound));
        assert_eq!(e.enter_fence(0, Waiter::v1(0)), Ok(()));
        assert_eq!(
            e.enter_fence(0, Waiter::v1(0)),
            Err(Refusal::AlreadyInFence { rank: 0, epoch: 0 })
        );
        let spawn = pmi_wire::Spawn::default();
        assert_eq!(
            Engine::spawn_request(spawn).unwrap_err(),
            Refusal::SpawnNoCommand
        );
    }
}
