//! What a branch reaches and what reaches it: its host's ranks ([`Host`], whose events are
//! [`NodeEvent`]s) and its links to its children ([`Links`], whose events are [`HubEvent`]s).
//! kauri's own are the host layer's `Node` and the tree's `Children` hub; the benchmarks'
//! simulator and the branch's tests have their own.

use crate::proto::kvs::{Delta, Packed};
use crate::proto::pmi::Output;
use crate::proto::rank::RankEnd;
use crate::proto::service::ServiceReply;
use crate::tree::msg::{Down, Launching, PmixCollective, RankStatus, Up};
use crate::tree::progress::Step;
use bytes::Bytes;
use std::future::Future;
use std::time::Instant;

/// What happened on a host (its [`Host`]'s ranks).
#[derive(Debug)]
pub enum NodeEvent {
    /// A rank ended: its record, which goes up the tree and to the front end as it is.
    Exited(RankEnd),
    /// Something from the PMI engine: `FenceReady`, `Abort`, `Failed`, `ProtocolError`,
    /// `Initialized`, `Finalized` (for a PMIx job: the same, from the PMIx server).
    Engine(Output),
    /// A running rank that never spoke PMI or PMIx shows an Open MPI singleton's trace
    /// (the host layer's `ompi::singleton_running`).
    Singleton {
        /// The rank.
        rank: usize,
    },
    /// A rank let its PMI reply queue fill (it does not read its replies): its connection
    /// was closed.
    UnreadReplies {
        /// The rank, when known.
        rank: Option<usize>,
        /// The bytes its queue held (the host layer's `PMI_REPLY_QUEUE_MAX`).
        queued: usize,
    },
    /// Every local rank of a PMIx job entered fence `epoch`; `data` is this host's blob.
    PmixFence {
        /// The fence (counted per host from 0).
        epoch: u64,
        /// The blob.
        data: bytes::Bytes,
    },
    /// A local rank of a PMIx job wants the data of `rank`, which runs on another host;
    /// answer with [`Host::pmix_dmodex_reply`] and `id`.
    PmixDmodex {
        /// The request.
        id: u64,
        /// The rank whose data is wanted.
        rank: usize,
        /// Its namespace, when it is another job's (one a local client connected to).
        nspace: Option<String>,
    },
    /// Every local participant of a PMIx collective that is not this job's own fence
    /// entered it; answer with [`Host::pmix_collective_done`] and its `sig`.
    PmixCollective(PmixCollective),
    /// This host's PMIx server answered [`Host::pmix_dmodex_serve`]: the data of one of its
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

/// What a [`Branch`](super::Branch) needs of its host's ranks: the host layer's `Node` in
/// kauri; the benchmarks' simulator and the branch's tests have their own.
pub trait Host {
    /// How many ranks this host runs.
    fn ranks(&self) -> usize;
    /// How many of them are still running.
    fn running(&self) -> usize;
    /// True when `rank` runs here.
    fn has_rank(&self, rank: usize) -> bool;
    /// Fence `epoch` is complete everywhere: commit `delta`, which the root checked, with
    /// the root's word on whether its keys are the last fence's
    /// ([`crate::proto::kvs::Kvs::commit_checked`]); release the ranks.
    fn fence_done(&self, epoch: u64, delta: &Packed, same_keys: bool);
    /// PMIx fence `epoch` is complete everywhere: every host's blob.
    fn pmix_fence_done(&self, epoch: u64, data: Bytes);
    /// PMIx collective `sig` is complete (or failed, `status`): every contribution, and the
    /// context id the run gave it (a group construct that asked for one).
    fn pmix_collective_done(&self, sig: &str, status: i32, data: Vec<u8>, context_id: Option<u64>);
    /// Tell the local clients of the job's PMIx server that `ranks` failed with `status`
    /// (nothing where no PMIx server serves the job).
    fn pmix_failure(&self, status: i32, ranks: &[usize], exit_code: Option<i32>);
    /// The job's dead ranks are `ranks`: serve them as `PMI_dead_processes`, then send
    /// `SIGUSR1` to the local ranks still in PMI.
    fn dead_processes(&self, ranks: &[usize]);
    /// Serve local `rank`'s PMIx data to request `req` of agent `to`.
    fn pmix_dmodex_serve(&self, rank: usize, to: u32, req: u64);
    /// The answer to this host's direct-modex request `req`.
    fn pmix_dmodex_reply(&self, req: u64, status: i32, data: Vec<u8>);
    /// Commit pairs published without a fence.
    fn publish(&self, delta: Delta);
    /// The root's answer to this host's request `req`.
    fn service_reply(&self, req: u64, reply: ServiceReply);
    /// Send `sig` to every running rank.
    fn signal(&self, sig: i32);
    /// Send `sig` to the running ranks among `ranks`.
    fn signal_ranks(&self, sig: i32, ranks: &[usize]);
    /// Where each rank is, in rank order, and how many ms ago the ranks here last asked
    /// something of kauri (`None` while none has).
    fn status(&self) -> (Vec<RankStatus>, Option<u64>);
    /// Rank 0's stdin as the host hands it to a caller that pumps it itself.
    type Stdin;
    /// Rank 0's stdin, when rank 0 runs here and it was neither taken nor written yet.
    fn take_stdin(&mut self) -> Option<Self::Stdin>;
    /// Input for rank 0, which runs here (`None`: its end): written to its stdin in order,
    /// dropped when that is closed or was taken.
    fn write_stdin(&mut self, data: Option<Vec<u8>>);
    /// After the last event: forward the rest of the output, kill what the ranks left.
    fn drain(self) -> impl Future<Output = ()>;
}

/// What the children did.
#[derive(Debug)]
pub enum HubEvent {
    /// A message from child `id` (output goes straight to the output channel instead).
    Up {
        /// The child.
        id: u32,
        /// The message.
        msg: Up,
    },
    /// Child `id` is gone or never came; `reason` is one line for the user.
    Lost {
        /// The child.
        id: u32,
        /// Why.
        reason: String,
    },
    /// Connections that did not hold the job key were refused: one line for the user
    /// (without the `kauri: ` prefix), from [`crate::tree::refusals::Refusals`].
    Refused {
        /// The line.
        line: String,
    },
    /// Children were launched or one connected (only when the job shows its progress,
    /// `JobPlan::progress`).
    Progress(Step),
}

/// What a branch needs of its links to its children (the tree's `Children` in kauri). A
/// child's link
/// takes messages from the child's launch on: what is sent before it connects waits for it.
pub trait Links {
    /// The direct children's ids.
    fn ids(&self) -> Vec<u32>;
    /// Sends `msg` to child `id`.
    fn send(&self, id: u32, msg: Down);
    /// Sends `msg` to every child that is not done, encoded once.
    fn broadcast(&self, msg: &Down);
    /// Sends a frame as it came from the parent to every child that is not done.
    fn broadcast_frame(&self, frame: &Bytes);
    /// Sends `msg` to the child whose subtree holds agent `to`; false when none does.
    fn route(&self, to: u32, msg: Down) -> bool;
    /// The child whose subtree runs `rank`.
    fn child_with_rank(&self, rank: usize) -> Option<u32>;
    /// Every rank in the subtree of child `id`.
    fn ranks_below(&self, id: u32) -> Vec<usize>;
    /// Child `id` said `Done` or is lost: nothing more goes to it.
    fn mark_done(&self, id: u32);
    /// Every child is done.
    fn all_done(&self) -> bool;
    /// The teardown began: a child that connects from now on starts nothing.
    fn close(&self);
    /// Child `id`'s host, for messages.
    fn host(&self, id: u32) -> String;
    /// The hosts of the children that are not done.
    fn unfinished(&self) -> Vec<String>;
    /// How many agents there are below, at every depth.
    fn agents(&self) -> usize;
    /// The summary line of the refused connections not told yet, if any.
    fn refusal_summary(&self) -> Option<String>;
    /// When child `id`'s launch began and when it connected (for the startup profile).
    fn timings(&self, id: u32) -> (Option<Instant>, Option<Instant>);
    /// The children that have not connected yet (nor been lost), by id, for the hang
    /// diagnosis.
    fn launching(&self) -> Vec<(u32, Launching)>;
    /// Every child is done and the job too: stop listening for agents (the listener's
    /// socket and task go). Nothing by default.
    fn stop_listening(&mut self) {}
}
