//! The messages on a tree link: [`Down`] (parent to child), [`Up`] (child to parent) and the
//! [`Report`]s of what happened below, batched into one [`Up::Reports`].
//!
//! Plain data with serde derives, framed by [`super::frame`]. It carries the job plan
//! (`crate::plan`) and the service requests (`crate::proto::service`); it does no I/O.

use crate::plan::{HostPlan, JobPlan, LaunchPlan, Subtree};
use crate::proto::kvs::{Delta, Packed};
use crate::proto::pmi::RankPmi;
use crate::proto::rank::RankEnd;
use crate::proto::service::{Service, ServiceReply};
use crate::tree::profile::HostProfile;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Which output stream a run of lines came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stream {
    /// The ranks' stdout.
    Stdout,
    /// The ranks' stderr.
    Stderr,
}

/// Parent to child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Down {
    /// The first message on a link: prove you hold the job key.
    Challenge {
        /// A random nonce.
        nonce: [u8; 32],
    },
    /// The child's part of the job, and the subtrees it must start.
    Spec {
        /// The child's agent id.
        id: u32,
        /// The job.
        job: Box<JobPlan>,
        /// The child's own host.
        me: HostPlan,
        /// The subtrees below it.
        children: Vec<Subtree>,
        /// How to start them.
        launch: LaunchPlan,
    },
    /// Fence `epoch` is complete everywhere: apply the merged delta and release the ranks.
    FenceDone {
        /// The fence.
        epoch: u64,
        /// Every put of the job since the previous fence.
        delta: Packed,
        /// The root checked `delta` and found its keys those of the previous fence's delta,
        /// in the same order: an agent's store replaces that delta with it.
        same_keys: bool,
    },
    /// The parent is alive (sent every `KAURI_HEARTBEAT` seconds).
    Heartbeat,
    /// Say where your ranks are (`Up::Status`), and ask the children: the hang diagnosis.
    Status {
        /// Add the stacks of the ranks that are stuck (`-timeout-stacks`, `kauri --status
        /// --stacks`).
        stacks: bool,
    },
    /// Pairs published without a fence (`kauri kvs put`): commit them at once.
    Publish(Delta),
    /// PMIx fence `epoch` is complete everywhere: every host's blob, concatenated.
    PmixFenceDone {
        /// The fence.
        epoch: u64,
        /// The blobs, shared with the frame that brought them.
        #[serde(with = "crate::proto::kvs::shared_bytes")]
        data: Bytes,
    },
    /// PMIx collective `sig` is complete: every participant's contribution, concatenated (an
    /// empty one and an error status when it cannot complete). Sent down every tree of the
    /// jobs that take part; the hosts with a part in it answer their server.
    PmixCollectiveDone {
        /// The participants, sorted, as text.
        sig: String,
        /// The PMIx status.
        status: i32,
        /// The contributions.
        #[serde(with = "crate::proto::kvs::byte_string")]
        data: Vec<u8>,
        /// The context id the front end gave it (a group construct that asked for one):
        /// unique in the run, the same for every participant.
        context_id: Option<u64>,
    },
    /// Ask the PMIx server hosting `rank` for its data (direct modex), for agent `from`;
    /// routed down towards the agent that runs `rank`.
    DmodexServe {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The rank whose data is wanted.
        rank: usize,
    },
    /// The answer to a direct-modex request, routed down to agent `to`.
    DmodexData {
        /// The agent that asked.
        to: u32,
        /// Its request id.
        req: u64,
        /// The PMIx status.
        status: i32,
        /// The rank's data.
        #[serde(with = "crate::proto::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// Ranks of a PMIx job failed (ended abnormally, or were lost with their host): every
    /// host that serves the job's namespace tells its local clients with one PMIx event per
    /// rank. Sent before the `Teardown` it may precede (the links keep their order).
    PmixFailure {
        /// The PMIx status of the events (`PMIX_ERR_PROC_ABORTED_BY_SIG`, …).
        status: i32,
        /// The ranks.
        ranks: Vec<usize>,
        /// Their exit code (`PMIX_EXIT_CODE`), when there is one.
        exit_code: Option<i32>,
    },
    /// Ranks of the job died and the job goes on (`-disable-auto-cleanup`): every host sets
    /// `PMI_dead_processes` to `ranks`, then sends `SIGUSR1` to its ranks still in PMI, as
    /// Hydra does for MPICH's fault tolerance.
    DeadProcesses {
        /// Every dead rank of the job so far, in the order they died.
        ranks: Vec<usize>,
    },
    /// Bytes for rank 0's stdin (routed to the agent that hosts rank 0).
    Stdin(#[serde(with = "crate::proto::kvs::byte_string")] Vec<u8>),
    /// End of rank 0's stdin.
    StdinEof,
    /// Forward a signal to every rank.
    Signal(i32),
    /// Send signal `sig` to the ranks `ranks` of the job (wherever they run: each host signals
    /// its own).
    SignalRanks {
        /// The signal.
        sig: i32,
        /// The ranks.
        ranks: Vec<usize>,
    },
    /// End the job: SIGTERM, the grace period, SIGKILL.
    Teardown,
    /// Kill every rank now.
    Kill,
    /// The answer to a [`Up::Request`], routed down to agent `to`.
    Reply {
        /// The agent that asked (0: the front end's own host).
        to: u32,
        /// Its request id.
        req: u64,
        /// The answer.
        reply: ServiceReply,
    },
}

/// Something that happened below, reported up to the front end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// A rank finished the PMI handshake (sent for an agent's first one only).
    Initialized {
        /// The rank.
        rank: usize,
    },
    /// A rank ended.
    Exited {
        /// Its host.
        host: String,
        /// Its host had already begun tearing the job down when it ended (so it is a
        /// casualty of the teardown, not a cause).
        in_teardown: bool,
        /// How it ended, as its host's node saw it.
        end: RankEnd,
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
    /// A rank sent a malformed PMI message.
    ProtocolError {
        /// The rank, when known.
        rank: Option<usize>,
        /// What was wrong.
        error: String,
    },
    /// A rank did not read its PMI replies: its connection was closed once `queued` bytes
    /// waited for it.
    UnreadReplies {
        /// The rank, when known.
        rank: Option<usize>,
        /// The bytes that waited.
        queued: usize,
    },
    /// A running rank that never spoke PMI or PMIx runs as an Open MPI singleton.
    Singleton {
        /// The rank.
        rank: usize,
    },
    /// An initialized rank closed its PMI connection without finalize and runs on.
    LeftPmi {
        /// The rank.
        rank: usize,
    },
    /// The job cannot go on.
    Failed {
        /// One line saying why.
        reason: String,
    },
    /// An agent below was lost: it could not be started, did not connect back, or its link
    /// ended before it said `Done`.
    Lost {
        /// Its host.
        host: String,
        /// One line for the user.
        reason: String,
        /// The ranks of its subtree (its own and those of the agents below it): they are lost
        /// with it.
        ranks: Vec<usize>,
    },
    /// A step of the job's start, for the progress lines (`-v`: only when the job plan asks
    /// for them).
    Progress(crate::tree::progress::Step),
    /// An agent started its host's ranks, or could not (`error`).
    NodeStarted {
        /// Its host.
        host: String,
        /// Why its ranks could not start.
        error: Option<String>,
        /// Each rank started: rank, pid, executable (the debugger's process table).
        #[serde(default)]
        procs: Vec<(usize, u32, std::ffi::OsString)>,
    },
}

/// A host's part of a PMIx collective that is not its job's own fence (over part of a
/// namespace, or several: a disconnect, a group): what this host's PMIx server says when every
/// local participant entered it, and what goes up the tree as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmixCollective {
    /// The collective's signature: its participants, sorted, as text.
    pub sig: String,
    /// The participants (rank `PMIX_RANK_WILDCARD`: a whole namespace).
    pub procs: Vec<(String, u32)>,
    /// The participants that are clients of the sender's server.
    pub covered: Vec<(String, u32)>,
    /// The sender's contribution.
    #[serde(with = "crate::proto::kvs::byte_string")]
    pub data: Vec<u8>,
    /// The participants want a context id unique in the run (a group construct's
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`; see [`Down::PmixCollectiveDone`]).
    pub context_id: bool,
}

/// Child to parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Up {
    /// The answer to the challenge.
    Hello {
        /// The agent's id.
        id: u32,
        /// Its host as it was told.
        host: String,
        /// HMAC-SHA256(key, nonce || id).
        mac: Vec<u8>,
    },
    /// The subtree's contribution to fence `epoch`.
    Fence {
        /// The fence.
        epoch: u64,
        /// Every put of the subtree's ranks since the previous fence.
        delta: Packed,
    },
    /// Pairs to publish to the whole job at once (relayed to the front end).
    Publish(Delta),
    /// The subtree's contribution to PMIx fence `epoch`: its hosts' blobs, concatenated.
    PmixFence {
        /// The fence.
        epoch: u64,
        /// The blobs, shared with the frame that brought them.
        #[serde(with = "crate::proto::kvs::shared_bytes")]
        data: Bytes,
    },
    /// A direct-modex request for the front end to route to the host of `rank`.
    Dmodex {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The rank whose data is wanted.
        rank: usize,
        /// Its namespace when it is another job's (one a local client connected to).
        nspace: Option<String>,
    },
    /// A host's part of a PMIx collective that is not its job's own fence, relayed up
    /// unchanged: the front end counts the participants each server covers.
    PmixCollective(PmixCollective),
    /// A direct-modex answer for the front end to route down to agent `to`.
    DmodexData {
        /// The agent that asked.
        to: u32,
        /// Its request id.
        req: u64,
        /// The PMIx status.
        status: i32,
        /// The rank's data.
        #[serde(with = "crate::proto::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// A request for the front end, relayed up unchanged.
    Request {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The request.
        service: Service,
    },
    /// A run of whole output lines.
    Output {
        /// Which stream.
        stream: Stream,
        /// The output file they go to instead (`-outfile-pattern`, `-errfile-pattern`).
        file: Option<String>,
        /// The bytes.
        #[serde(with = "crate::proto::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// Events for the front end.
    Reports(Vec<Report>),
    /// The startup profile of the subtree's hosts, on the sender's clock (sent just before
    /// `Done`, only when the job records one).
    Profile(Vec<HostProfile>),
    /// The agent is alive (sent every `KAURI_HEARTBEAT` seconds, whatever its ranks do).
    Heartbeat,
    /// Where the ranks of one or more hosts are (an agent's own answer to `Down::Status`,
    /// and its children's, passed up as they come).
    Status(Vec<HostStatus>),
    /// Every rank of the subtree has ended and its output is sent; the agent is leaving.
    Done,
    /// The agent of the job's rank 0 wrote this many bytes of its stdin into its pipe:
    /// the front end may read that many more (the window of stdin in flight, so kauri reads
    /// stdin no faster than rank 0 takes it).
    StdinTaken(u64),
}

/// One host's answer to [`Down::Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    /// The host.
    pub host: String,
    /// Its ranks, in rank order.
    pub ranks: Vec<RankStatus>,
    /// The fence under way on this host, if one is: its number, whether it still waits for
    /// this host's own ranks, and the hosts of the children it still waits for.
    pub fence: Option<(u64, bool, Vec<String>)>,
    /// How many milliseconds ago this host's ranks of the job last asked something of
    /// kauri (a PMI request or a PMIx upcall); `None` while none has, or with no ranks here.
    pub quiet_ms: Option<u64>,
    /// This host's child agents that have not connected yet: they were not asked, and
    /// neither was any host below them.
    pub launching: Vec<Launching>,
}

/// A child agent its parent is still starting, in a [`HostStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launching {
    /// The agent's host.
    pub host: String,
    /// How many milliseconds ago its launch began; `None` while it waits for a launch slot
    /// (`LaunchPlan::max_concurrent` are in flight).
    pub since_ms: Option<u64>,
    /// The launcher that starts it (`ssh`, `slurm`, …).
    pub launcher: String,
    /// The hosts of the agents it launches once it runs (its subtree, at every depth).
    pub below: Vec<String>,
}

impl Launching {
    /// How many hosts will not answer because this agent is not up: itself and those below.
    pub fn hosts(&self) -> usize {
        1 + self.below.len()
    }
}

/// Where one rank is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    /// The rank.
    pub rank: usize,
    /// Its pid while it runs.
    pub pid: Option<u32>,
    /// Its PMI state.
    pub pmi: RankPmi,
    /// Its stack, when asked for and the rank is stuck (capped; or why there is none).
    pub stack: Option<String>,
}
