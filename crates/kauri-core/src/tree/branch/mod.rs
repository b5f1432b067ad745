//! One node of the tree, as decisions: this host's ranks, its child links and the fence
//! gathers. The root (the front end) and every agent are a `Branch` with different parents:
//! an agent sends what its branch hands up to its parent; the root acts on it itself (a
//! completed gather becomes the `FenceDone` it sends back down through the same branch).
//!
//! A branch takes one event at a time: [`Branch::on_node`] (its ranks), [`Branch::on_child`]
//! (its child links), [`Branch::on_down`] (its parent), and returns at most one [`Out`]: a
//! message for above, or a refused connection to tell the user about. It owns no socket, no
//! timer and no clock (the caller passes `now`, as `quinn-proto` is driven), and decides
//! nothing about the job: what ends a job, the exit status and when to kill are the roles'
//! (the tree crate's agent and root).
//!
//! It reaches its ranks through [`Host`] and its children through [`Links`] ([`ports`]): in
//! kauri the host layer's `Node` and the tree's `Children` hub, each implementing its trait
//! in its own crate; the benchmarks' simulator drives the same branch over virtual ranks and
//! loopback links, so its numbers describe this code.

use crate::proto::kvs::{Delta, FenceKeys, Packed};
use crate::proto::pmi::Output;
use crate::proto::service::ServiceReply;
use crate::tree::gather::{Contribution, Gather};
use crate::tree::msg::{Down, Report, Up};
use crate::tree::policy::{SIGKILL, SIGTERM};
use crate::tree::profile::{self, HostProfile};
use crate::tree::progress::Step;
use bytes::Bytes;
use std::time::Instant;
use tracing::debug;

pub mod ports;
mod status;
mod stdin;

pub use ports::{Host, HubEvent, Links, NodeEvent};

/// What a branch hands its owner after an event.
#[derive(Debug, PartialEq)]
pub enum Out {
    /// For above: an agent sends it to its parent; the root acts on it (a complete fence
    /// contribution, a report, a request, a direct-modex message to route).
    Up(Up),
    /// Connections that did not hold the job key were refused: a line for the user, without
    /// the `kauri: ` prefix (the first few name each connection, then summaries: see
    /// [`crate::hub::Refusals`]).
    Refused {
        /// The line.
        line: String,
    },
}

/// One report for above.
fn report(r: Report) -> Option<Out> {
    Some(Out::Up(Up::Reports(vec![r])))
}

/// This host's part of one job in the tree: its ranks `H`, its child links `L`.
pub struct Branch<H, L> {
    /// This node's agent id (0: the root).
    id: u32,
    host: String,
    node: Option<H>,
    kids: L,
    gather: Gather,
    pmix_gather: Gather<Bytes>,
    /// Ranks of this host whose end has not been handled yet: a rank's end travels through a
    /// channel after the node counts it out, so the branch is not done before they are in.
    local_left: usize,
    /// Report only the first local rank's `Initialized` (an agent's uplink needs no more).
    init_once: bool,
    told_initialized: bool,
    /// The job is being torn down here.
    ending: bool,
    /// Children that said `Done` or are lost: they contribute to no fence any more.
    finished: Vec<u32>,
    /// A PMI fence was found that can never complete (reported once).
    fence_stuck: bool,
    /// The same for the PMIx fence under way.
    pmix_fence_stuck: bool,
    /// At the root: the keys of the last merged delta, to check each one against.
    fence_keys: FenceKeys,
    /// The job is fault tolerant (`-with-ft`): PMIx fences go on without a lost host or a
    /// host whose ranks all ended ([`Branch::tolerate_failures`]).
    fault_tolerant: bool,
    /// What to send up after the answer of the event at hand ([`Branch::take_deferred`]).
    deferred: Vec<Out>,
    /// Report each rank's PMI init and each fence this host entered ([`Branch::show_progress`]).
    progress: bool,
    /// The zero of this host's clock: the profile's times are microseconds since it.
    origin: Instant,
    /// The startup profile of this host, when the job records one.
    prof: Option<HostProfile>,
    /// The profiles the children sent up, on this host's clock.
    below: Vec<HostProfile>,
}

impl<H: Host, L: Links> Branch<H, L> {
    /// A branch over `node` (this host's ranks, if it runs any) and `kids`. `init_once`: report
    /// only the first local rank's PMI init. `prof`: this host's startup profile, whose times
    /// are microseconds since `origin` (as every `now` given to the branch is).
    pub fn new(
        id: u32,
        host: String,
        node: Option<H>,
        kids: L,
        init_once: bool,
        origin: Instant,
        prof: Option<HostProfile>,
    ) -> Branch<H, L> {
        let ids = kids.ids();
        Branch {
            id,
            host,
            gather: Gather::new(node.is_some(), ids.clone()),
            pmix_gather: Gather::new(node.is_some(), ids),
            local_left: node.as_ref().map_or(0, H::ranks),
            node,
            kids,
            init_once,
            told_initialized: false,
            ending: false,
            finished: Vec::new(),
            fence_stuck: false,
            pmix_fence_stuck: false,
            fence_keys: FenceKeys::default(),
            fault_tolerant: false,
            deferred: Vec::new(),
            progress: false,
            origin,
            prof,
            below: Vec::new(),
        }
    }

    /// This host's ranks, when it runs any.
    pub fn node(&self) -> Option<&H> {
        self.node.as_ref()
    }

    /// Rank 0's stdin, when rank 0 runs here: for a caller that pumps it itself.
    pub fn take_stdin(&mut self) -> Option<H::Stdin> {
        self.node.as_mut().and_then(H::take_stdin)
    }

    /// Takes this host's ranks out of a branch that is [`done`](Branch::done), for the caller
    /// to drain and drop while the run goes on; `None` before, or when taken already.
    /// The listener for this job's agents is closed then too.
    pub fn take_node(&mut self) -> Option<H> {
        if self.done() {
            self.kids.stop_listening();
            self.node.take()
        } else {
            None
        }
    }

    /// The child links.
    pub fn kids(&self) -> &L {
        &self.kids
    }

    /// Every local rank has ended (and its end was handled) and every child said `Done` or
    /// is lost.
    pub fn done(&self) -> bool {
        self.local_left == 0
            && self.node.as_ref().is_none_or(|n| n.running() == 0)
            && self.kids.all_done()
    }

    /// The job is being torn down on this branch.
    pub fn ending(&self) -> bool {
        self.ending
    }

    /// The job is fault tolerant (`-with-ft`), as Open MPI's ULFM expects of its runtime: a
    /// PMIx fence (`MPI_Finalize` begins with one) completes without the hosts that are lost
    /// or whose ranks all ended, instead of never completing. Those ranks failed, and the
    /// survivors were told ([`Host::pmix_failure`]): they will never contribute, and nobody
    /// asks for their data. PMI-1/PMI-2 fences are unchanged.
    pub fn tolerate_failures(&mut self) {
        self.fault_tolerant = true;
    }

    /// The job shows its progress (`-v`): every rank's PMI init and every fence this host's
    /// ranks entered go up as `Report::Progress` (with their children's launches and
    /// connections, which the hub says).
    pub fn show_progress(&mut self) {
        self.progress = true;
    }

    /// What the last event made for above besides its answer (a PMIx fence that a lost host
    /// completed, after the report of the loss): the caller sends each after the answer.
    pub fn take_deferred(&mut self) -> Option<Out> {
        (!self.deferred.is_empty()).then(|| self.deferred.remove(0))
    }

    /// Under [`Branch::tolerate_failures`], child `Some(id)` (lost, or done) or this host's
    /// own ranks (`None`: all ended) are dropped from the PMIx fences: one the drop completes
    /// goes up after the event's answer.
    fn drop_from_pmix_fences(&mut self, who: Option<u32>) {
        if !self.fault_tolerant || self.ending {
            return;
        }
        let done = match who {
            Some(id) => self.pmix_gather.drop_child(id),
            None => self.pmix_gather.drop_local(),
        };
        if let Some((epoch, data)) = done {
            self.deferred.push(Out::Up(Up::PmixFence { epoch, data }));
        }
    }

    /// An event of this host's ranks, at `now` (microseconds since the origin).
    pub fn on_node(&mut self, ev: NodeEvent, now: u64) -> Option<Out> {
        let t = now;
        match ev {
            NodeEvent::Exited(end) => {
                let exited = Report::Exited {
                    host: self.host.clone(),
                    in_teardown: self.ending,
                    end,
                };
                Some(self.rank_exited(t, exited))
            }
            NodeEvent::PmixFence { epoch, data } => match self.pmix_gather.local(epoch, data) {
                Some((epoch, data)) => Some(Out::Up(Up::PmixFence { epoch, data })),
                None => self.stuck_pmix_fence().and_then(report),
            },
            NodeEvent::PmixDmodex { id, rank, nspace } => Some(Out::Up(Up::Dmodex {
                from: self.id,
                req: id,
                rank,
                nspace,
            })),
            NodeEvent::PmixCollective(c) => Some(Out::Up(Up::PmixCollective(c))),
            NodeEvent::DmodexServed {
                to,
                req,
                status,
                data,
            } => {
                if to == self.id {
                    if let Some(n) = &self.node {
                        n.pmix_dmodex_reply(req, status, data);
                    }
                    return None;
                }
                Some(Out::Up(Up::DmodexData {
                    to,
                    req,
                    status,
                    data,
                }))
            }
            NodeEvent::UnreadReplies { rank, queued } => {
                report(Report::UnreadReplies { rank, queued })
            }
            NodeEvent::Singleton { rank } => report(Report::Singleton { rank }),
            NodeEvent::Engine(o) => self.on_engine(o, t),
        }
    }

    /// One of this host's ranks ended (`exited`, its report, at `t`): one fewer to wait for;
    /// the fences it leaves stuck are reported with it.
    fn rank_exited(&mut self, t: u64, exited: Report) -> Out {
        self.local_left = self.local_left.saturating_sub(1);
        if let Some(p) = self.prof.as_mut() {
            p.exited(t);
        }
        if self.local_left == 0 {
            self.drop_from_pmix_fences(None);
        }
        let mut reports = vec![exited];
        reports.extend(self.stuck_fence());
        reports.extend(self.stuck_pmix_fence());
        Out::Up(Up::Reports(reports))
    }

    /// What this host's PMI engine said, at `t`: a fence contribution for the gather, a
    /// publish or a request for above, a report, or a point of the profile.
    fn on_engine(&mut self, o: Output, t: u64) -> Option<Out> {
        match o {
            Output::FenceReady { epoch, delta } => {
                debug!(host = %self.host, epoch, "local fence ready");
                if let Some(p) = self.prof.as_mut() {
                    p.fence_ready(epoch, t);
                }
                let out = match self.gather.local(epoch, delta) {
                    Some((epoch, delta)) => Some(Out::Up(Up::Fence { epoch, delta })),
                    None => self.stuck_fence().and_then(report),
                };
                if !self.progress {
                    return out;
                }
                // Its progress first: the fence it may complete goes up after it.
                let ranks = self.node.as_ref().map_or(0, |n| n.ranks() as u32);
                self.deferred.extend(out);
                report(Report::Progress(Step::FenceEntered { epoch, ranks }))
            }
            Output::Publish { delta } => Some(Out::Up(Up::Publish(delta))),
            Output::Request { id, service } => Some(Out::Up(Up::Request {
                from: self.id,
                req: id,
                service,
            })),
            Output::Finalized { .. } => {
                if let Some(p) = self.prof.as_mut() {
                    p.finalized(t);
                }
                None
            }
            Output::Initialized { rank } => {
                if let Some(p) = self.prof.as_mut() {
                    p.initialized(t);
                }
                if self.init_once && self.told_initialized {
                    return self
                        .progress
                        .then(|| report(Report::Progress(Step::Initialized(rank))))?;
                }
                self.told_initialized = true;
                report(Report::Initialized { rank })
            }
            Output::Abort {
                rank,
                code,
                message,
            } => report(Report::Abort {
                rank,
                code,
                message,
            }),
            Output::Failed { reason } => report(Report::Failed { reason }),
            Output::LeftPmi { rank } => report(Report::LeftPmi { rank }),
            Output::ProtocolError { rank, error } => report(Report::ProtocolError { rank, error }),
            _ => None,
        }
    }

    /// An event of the child links.
    pub fn on_child(&mut self, ev: HubEvent) -> Option<Out> {
        match ev {
            HubEvent::Up {
                id,
                msg: Up::Fence { epoch, delta },
            } => {
                debug!(host = %self.host, id, epoch, "fence contribution");
                match self.gather.child(id, epoch, delta) {
                    Some((epoch, delta)) => Some(Out::Up(Up::Fence { epoch, delta })),
                    None => self.stuck_fence().and_then(report),
                }
            }
            HubEvent::Up {
                id,
                msg: Up::PmixFence { epoch, data },
            } => match self.pmix_gather.child(id, epoch, data) {
                Some((epoch, data)) => Some(Out::Up(Up::PmixFence { epoch, data })),
                None => self.stuck_pmix_fence().and_then(report),
            },
            HubEvent::Up {
                msg:
                    m @ (Up::Dmodex { .. }
                    | Up::DmodexData { .. }
                    | Up::PmixCollective(_)
                    | Up::Reports(_)
                    | Up::Publish(_)
                    | Up::Request { .. }
                    | Up::Status(_)
                    | Up::StdinTaken(_)),
                ..
            } => Some(Out::Up(m)),
            HubEvent::Up { id, msg: Up::Done } => {
                self.kids.mark_done(id);
                self.finished.push(id);
                self.drop_from_pmix_fences(Some(id));
                let stuck: Vec<Report> = self
                    .stuck_fence()
                    .into_iter()
                    .chain(self.stuck_pmix_fence())
                    .collect();
                (!stuck.is_empty()).then_some(Out::Up(Up::Reports(stuck)))
            }
            HubEvent::Up {
                id,
                msg: Up::Profile(mut v),
            } => {
                let (l, c) = self.kids.timings(id);
                let at = |t: Instant| t.saturating_duration_since(self.origin).as_micros() as u64;
                profile::adopt(&mut v, id, l.map(at), c.map(at));
                self.below.extend(v);
                None
            }
            HubEvent::Up { .. } => None,
            HubEvent::Lost { id, reason } => {
                let host = self.kids.host(id);
                let ranks = self.kids.ranks_below(id);
                self.kids.mark_done(id);
                self.finished.push(id);
                self.drop_from_pmix_fences(Some(id));
                // Lost first: a fence that waited for the host can then never complete.
                let mut reports = vec![Report::Lost {
                    host,
                    reason,
                    ranks,
                }];
                reports.extend(self.stuck_fence());
                reports.extend(self.stuck_pmix_fence());
                Some(Out::Up(Up::Reports(reports)))
            }
            HubEvent::Refused { line } => Some(Out::Refused { line }),
            HubEvent::Progress(step) => report(Report::Progress(step)),
        }
    }

    /// Why `gather`'s fence under way here can never complete: every rank of this host has
    /// ended without entering it (`None` inside), or child `Some(id)`, which has not
    /// contributed, is finished or lost. `None` while it still can.
    fn why_stuck<T: Contribution>(&self, gather: &Gather<T>) -> Option<Option<u32>> {
        if self.ending || !gather.under_way() {
            return None;
        }
        if self.node.is_some() && self.local_left == 0 && gather.needs_local() {
            return Some(None);
        }
        let id = self
            .finished
            .iter()
            .copied()
            .find(|&id| gather.needs_child(id))?;
        Some(Some(id))
    }

    /// A PMI fence under way here that can never complete, once (see [`Branch::why_stuck`]).
    /// (A rank that ends while other ranks of its host wait is the engine's to report.)
    fn stuck_fence(&mut self) -> Option<Report> {
        if self.fence_stuck {
            return None;
        }
        let why = match self.why_stuck(&self.gather)? {
            None => format!("every rank on {} ended before entering it", self.host),
            Some(id) => format!(
                "every rank on {} (and the hosts below it) ended before entering it",
                self.kids.host(id)
            ),
        };
        self.fence_stuck = true;
        Some(Report::Failed {
            reason: format!("fence {} can never complete: {why}", self.gather.epoch()),
        })
    }

    /// A PMIx fence under way here that can never complete, once (see [`Branch::why_stuck`]).
    /// The PMIx servers' clients would wait for it forever (`-disable-auto-cleanup` keeps a
    /// job going after a lost host, and Open MPI's `MPI_Finalize` begins with a fence over the
    /// whole job): like a PMI fence, it ends the job with the reason.
    fn stuck_pmix_fence(&mut self) -> Option<Report> {
        if self.pmix_fence_stuck {
            return None;
        }
        let why = match self.why_stuck(&self.pmix_gather)? {
            None => format!("every rank on {} ended before entering it", self.host),
            Some(id) => format!(
                "the ranks on {} (and the hosts below it) ended or were lost before entering it",
                self.kids.host(id)
            ),
        };
        self.pmix_fence_stuck = true;
        Some(Report::Failed {
            reason: format!(
                "PMIx fence {} can never complete: {why}",
                self.pmix_gather.epoch()
            ),
        })
    }

    /// A message from the parent, at `now`; `frame` is it as it came, passed on to the
    /// children without encoding it again where it is for all of them.
    pub fn on_down(&mut self, msg: Down, frame: Bytes, now: u64) -> Option<Out> {
        match msg {
            Down::FenceDone {
                epoch,
                delta,
                same_keys,
            } => self.release_fence(epoch, delta, same_keys, Some(frame), now),
            Down::PmixFenceDone { epoch, data } => self.pmix_fence_done(epoch, data, Some(frame)),
            Down::DmodexServe { from, req, rank } => return self.dmodex_serve(from, req, rank),
            Down::PmixCollectiveDone {
                sig,
                status,
                data,
                context_id,
            } => self.pmix_collective_done(sig, status, data, context_id),
            Down::DmodexData {
                to,
                req,
                status,
                data,
            } => self.dmodex_data(to, req, status, data),
            Down::Publish(delta) => self.publish(delta),
            Down::PmixFailure {
                status,
                ranks,
                exit_code,
            } => self.pmix_failure(status, ranks, exit_code, Some(frame)),
            Down::DeadProcesses { ranks } => self.dead_processes(ranks, Some(frame)),
            Down::Stdin(data) => self.stdin(Some(data)),
            Down::StdinEof => self.stdin(None),
            Down::Signal(sig) => self.signal(sig),
            Down::SignalRanks { sig, ranks } => self.signal_ranks(sig, ranks),
            Down::Teardown => {
                self.teardown();
            }
            Down::Kill => self.kill(),
            Down::Reply { to, req, reply } => self.reply(to, req, reply),
            Down::Status { stacks } => {
                return Some(Out::Up(Up::Status(vec![self.ask_status(stacks)])))
            }
            Down::Challenge { .. } | Down::Spec { .. } | Down::Heartbeat => {}
        }
        None
    }

    /// Fence `epoch` is complete everywhere, and this is the root, at `now`: the merged delta is
    /// checked, once for every agent, and sent down with whether its keys are the last
    /// fence's ([`FenceKeys::check`]), so no agent walks it. A delta that does not unpack
    /// (a child sent a bad contribution) goes nowhere, and the job fails with the reason.
    pub fn fence_done(&mut self, epoch: u64, delta: Packed, now: u64) -> Option<Out> {
        match self.fence_keys.check(&delta) {
            Ok(same_keys) => {
                self.release_fence(epoch, delta, same_keys, None, now);
                None
            }
            Err(e) => report(Report::Failed {
                reason: format!("fence {epoch}: {e}"),
            }),
        }
    }

    /// Fence `epoch` is complete everywhere, at `now`: the children get the merged delta
    /// (`frame`, when it came from the parent, as it came), then this host's ranks are
    /// released.
    fn release_fence(
        &mut self,
        epoch: u64,
        delta: Packed,
        same_keys: bool,
        frame: Option<Bytes>,
        now: u64,
    ) {
        debug!(host = %self.host, epoch, bytes = delta.byte_len(), same_keys, "fence done");
        if let Some(p) = self.prof.as_mut() {
            p.fence_released(epoch, now);
        }
        let msg = Down::FenceDone {
            epoch,
            delta,
            same_keys,
        };
        match frame {
            Some(f) => self.kids.broadcast_frame(&f),
            None => self.kids.broadcast(&msg),
        }
        if let (Some(n), Down::FenceDone { delta, .. }) = (&self.node, &msg) {
            n.fence_done(epoch, delta, same_keys);
        }
    }

    /// PMIx fence `epoch` is complete everywhere: every host gets every blob.
    pub fn pmix_fence_done(&mut self, epoch: u64, data: Bytes, frame: Option<Bytes>) {
        debug!(host = %self.host, epoch, bytes = data.len(), "PMIx fence done");
        let msg = Down::PmixFenceDone { epoch, data };
        match frame {
            Some(f) => self.kids.broadcast_frame(&f),
            None => self.kids.broadcast(&msg),
        }
        if let (Some(n), Down::PmixFenceDone { data, .. }) = (&self.node, msg) {
            n.pmix_fence_done(epoch, data);
        }
    }

    /// PMIx collective `sig` is complete (or failed), with the context id the run gave it
    /// if it asked for one: down to every host below, and to this host's server if it has a
    /// part in it.
    pub fn pmix_collective_done(
        &mut self,
        sig: String,
        status: i32,
        data: Vec<u8>,
        context_id: Option<u64>,
    ) {
        if let Some(n) = &self.node {
            n.pmix_collective_done(&sig, status, data.clone(), context_id);
        }
        self.kids.broadcast(&Down::PmixCollectiveDone {
            sig,
            status,
            data,
            context_id,
        });
    }

    /// Ranks of a PMIx job failed: every host below is told (`frame`, when it came from the
    /// parent, as it came), then this host's PMIx server tells its local clients. A
    /// `Teardown` sent after this reaches every host after it, and the local clients are told
    /// before this host's ranks are signalled.
    pub fn pmix_failure(
        &mut self,
        status: i32,
        ranks: Vec<usize>,
        exit_code: Option<i32>,
        frame: Option<Bytes>,
    ) {
        debug!(host = %self.host, status, ?ranks, "PMIx failure event");
        match frame {
            Some(f) => self.kids.broadcast_frame(&f),
            None => self.kids.broadcast(&Down::PmixFailure {
                status,
                ranks: ranks.clone(),
                exit_code,
            }),
        }
        if let Some(n) = &self.node {
            n.pmix_failure(status, &ranks, exit_code);
        }
    }

    /// The job's dead ranks are `ranks` (`-disable-auto-cleanup`): every host below is told
    /// (`frame`, when it came from the parent, as it came), then this host, which serves
    /// them as `PMI_dead_processes` before it signals its ranks, so a rank that reads the
    /// key on `SIGUSR1` finds the rank that caused it.
    pub fn dead_processes(&mut self, ranks: Vec<usize>, frame: Option<Bytes>) {
        debug!(host = %self.host, ?ranks, "dead processes");
        match frame {
            Some(f) => self.kids.broadcast_frame(&f),
            None => self.kids.broadcast(&Down::DeadProcesses {
                ranks: ranks.clone(),
            }),
        }
        if let Some(n) = &self.node {
            n.dead_processes(&ranks);
        }
    }

    /// Pairs published without a fence: committed on this host and every host below.
    pub fn publish(&mut self, delta: Delta) {
        self.kids.broadcast(&Down::Publish(delta.clone()));
        if let Some(n) = &self.node {
            n.publish(delta);
        }
    }

    /// Agent `from` wants the PMIx data of `rank`: served here, or sent down towards the host
    /// that runs it; a rank that runs nowhere below is answered "not found" (handed up).
    pub fn dmodex_serve(&mut self, from: u32, req: u64, rank: usize) -> Option<Out> {
        if let Some(n) = self.node.as_ref().filter(|n| n.has_rank(rank)) {
            n.pmix_dmodex_serve(rank, from, req);
            return None;
        }
        match self.kids.child_with_rank(rank) {
            Some(id) => {
                self.kids.send(id, Down::DmodexServe { from, req, rank });
                None
            }
            None => Some(Out::Up(Up::DmodexData {
                to: from,
                req,
                status: crate::proto::pmix::ERR_NOT_FOUND,
                data: Vec::new(),
            })),
        }
    }

    /// A direct-modex answer for agent `to`: this host's, or routed down.
    pub fn dmodex_data(&mut self, to: u32, req: u64, status: i32, data: Vec<u8>) {
        if to == self.id {
            if let Some(n) = &self.node {
                n.pmix_dmodex_reply(req, status, data);
            }
        } else {
            self.kids.route(
                to,
                Down::DmodexData {
                    to,
                    req,
                    status,
                    data,
                },
            );
        }
    }

    /// The root's answer to request `req` of agent `to`: this host's, or routed down.
    pub fn reply(&mut self, to: u32, req: u64, reply: ServiceReply) {
        if to == self.id {
            if let Some(n) = &self.node {
                n.service_reply(req, reply);
            }
        } else {
            self.kids.route(to, Down::Reply { to, req, reply });
        }
    }

    /// How many hosts this branch and its subtree have (the answers a status round waits for).
    pub fn hosts(&self) -> usize {
        1 + self.kids.agents()
    }

    /// Sends `sig` to every rank of this branch and below.
    pub fn signal(&mut self, sig: i32) {
        self.kids.broadcast(&Down::Signal(sig));
        if let Some(n) = &self.node {
            n.signal(sig);
        }
    }

    /// Sends `sig` to the ranks `ranks` wherever they run in this branch: each child whose
    /// subtree runs some of them gets those; this host signals its own.
    pub fn signal_ranks(&mut self, sig: i32, ranks: Vec<usize>) {
        let mut below: Vec<(u32, Vec<usize>)> = Vec::new();
        let mut here = Vec::new();
        for r in ranks {
            match self.kids.child_with_rank(r) {
                Some(id) => match below.iter_mut().find(|(c, _)| *c == id) {
                    Some((_, v)) => v.push(r),
                    None => below.push((id, vec![r])),
                },
                None => here.push(r),
            }
        }
        for (id, ranks) in below {
            self.kids.send(id, Down::SignalRanks { sig, ranks });
        }
        if let (Some(n), false) = (&self.node, here.is_empty()) {
            n.signal_ranks(sig, &here);
        }
    }

    /// Begins the teardown here and below: `SIGTERM` to the ranks, `Teardown` to the
    /// children (a child that has not connected yet is turned away when it does). True the
    /// first time, when the caller arms its kill timer.
    pub fn teardown(&mut self) -> bool {
        if self.ending {
            return false;
        }
        self.ending = true;
        self.kids.broadcast(&Down::Teardown);
        self.kids.close();
        if let Some(n) = &self.node {
            n.signal(SIGTERM);
        }
        true
    }

    /// Kills every rank here and below.
    pub fn kill(&mut self) {
        self.kids.broadcast(&Down::Kill);
        self.kids.close();
        if let Some(n) = &self.node {
            n.signal(SIGKILL);
        }
    }

    /// At the end of the job: the refused connections not told yet, so none goes unsaid.
    pub fn last_refusals(&self) -> Option<Out> {
        self.kids
            .refusal_summary()
            .map(|line| Out::Refused { line })
    }

    /// After the last event: the rest of the local ranks' output is forwarded and what they
    /// left behind is killed.
    pub async fn drain(&mut self) {
        if let Some(n) = self.node.take() {
            n.drain().await;
        }
    }

    /// The startup profile of this host and of every host below, when it was recorded.
    pub fn take_profile(&mut self) -> Option<(HostProfile, Vec<HostProfile>)> {
        let p = self.prof.take()?;
        Some((p, std::mem::take(&mut self.below)))
    }

    /// Records when this host's ranks were being forked (the profile's fork phase).
    pub fn profile_fork(&mut self, start_us: u64, end_us: u64) {
        if let Some(p) = self.prof.as_mut() {
            p.fork_start_us = Some(start_us);
            p.forked_us = Some(end_us);
        }
    }
}

#[cfg(test)]
mod tests;
