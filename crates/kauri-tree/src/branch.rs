//! One node of the tree: this host's ranks (a [`Node`]), its child links ([`Children`]) and
//! the fence gathers. The root (the front end) and every agent are a `Branch` with different
//! parents: an agent sends what its branch hands up to its parent; the root acts on it
//! itself (a completed gather becomes the `FenceDone` it sends back down through the same
//! branch).
//!
//! A branch takes one event at a time: [`Branch::on_node`] (its ranks), [`Branch::on_child`]
//! (its child links), [`Branch::on_down`] (its parent), and returns at most one [`Out`]: a
//! message for above, or a refused connection to tell the user about. It owns no socket and
//! no timer and decides nothing about the job: what ends a job, the exit status and when to
//! kill are the roles' (`agent`, `frontend`).
//!
//! It reaches its ranks through [`Host`] and its children through [`Links`]: in kauri a
//! [`Node`] and a [`Children`] hub, each implementing its trait in its own module (`Host`
//! is defined beside `Node`, in `host::node`, so implementing it takes the host's code no
//! import of the tree); the benchmarks' simulator drives the same branch over virtual ranks
//! and loopback links, so its numbers describe this code.

use crate::hub::{Children, Gather, HubEvent};
use crate::profile::HostProfile;
use crate::progress::Step;
use crate::{Down, Launching, Report, Up};
use bytes::Bytes;
pub use kauri_host::node::Host;
use kauri_host::node::{Node, NodeEvent};
use kauri_os::clock::Clock;
use kauri_proto::kvs::{Delta, FenceKeys, Packed};
use kauri_proto::pmi::Output;
use kauri_proto::service::ServiceReply;
use std::time::Instant;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tracing::debug;

mod status;
mod stdin;

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

/// What a branch needs of its links to its children ([`Children`] in kauri). A child's link
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

/// One report for above.
fn report(r: Report) -> Option<Out> {
    Some(Out::Up(Up::Reports(vec![r])))
}

/// This host's part of one job in the tree: its ranks `H`, its child links `L`.
pub struct Branch<H = Node, L = Children> {
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
    /// The writer of local rank 0's stdin, once input arrived for it.
    stdin: Option<mpsc::UnboundedSender<Option<Vec<u8>>>>,
    /// Where the writer of rank 0's stdin says what it wrote (`Up::StdinTaken`): an agent's
    /// link to its parent, so the front end reads stdin no faster than rank 0 takes it.
    stdin_taken: Option<crate::Link>,
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
    clock: Clock,
    /// The startup profile of this host, when the job records one.
    prof: Option<HostProfile>,
    /// The profiles the children sent up, on this host's clock.
    below: Vec<HostProfile>,
}

impl<H: Host, L: Links> Branch<H, L> {
    /// A branch over `node` (this host's ranks, if it runs any) and `kids`. `init_once`: report
    /// only the first local rank's PMI init. `prof`: this host's startup profile, recorded
    /// on `clock`.
    pub fn new(
        id: u32,
        host: String,
        node: Option<H>,
        kids: L,
        init_once: bool,
        clock: Clock,
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
            stdin: None,
            stdin_taken: None,
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
            clock,
            prof,
            below: Vec::new(),
        }
    }

    /// This host's ranks, when it runs any.
    pub fn node(&self) -> Option<&H> {
        self.node.as_ref()
    }

    /// Rank 0's stdin pipe, when rank 0 runs here: for a caller that pumps it itself.
    pub fn take_stdin(&mut self) -> Option<pipe::Sender> {
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

    /// An event of this host's ranks.
    pub fn on_node(&mut self, ev: NodeEvent) -> Option<Out> {
        let t = self.clock.now();
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
            NodeEvent::PmixCollective {
                sig,
                procs,
                covered,
                data,
                context_id,
            } => Some(Out::Up(Up::PmixCollective {
                sig,
                procs,
                covered,
                data,
                context_id,
            })),
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
                    | Up::PmixCollective { .. }
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
                let clock = self.clock;
                crate::profile::adopt(&mut v, id, l.map(|t| clock.at(t)), c.map(|t| clock.at(t)));
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
    fn why_stuck<T: crate::hub::Contribution>(&self, gather: &Gather<T>) -> Option<Option<u32>> {
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

    /// A message from the parent; `frame` is it as it came, passed on to the children
    /// without encoding it again where it is for all of them.
    pub fn on_down(&mut self, msg: Down, frame: Bytes) -> Option<Out> {
        match msg {
            Down::FenceDone {
                epoch,
                delta,
                same_keys,
            } => self.release_fence(epoch, delta, same_keys, Some(frame)),
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

    /// Fence `epoch` is complete everywhere, and this is the root: the merged delta is
    /// checked, once for every agent, and sent down with whether its keys are the last
    /// fence's ([`FenceKeys::check`]), so no agent walks it. A delta that does not unpack
    /// (a child sent a bad contribution) goes nowhere, and the job fails with the reason.
    pub fn fence_done(&mut self, epoch: u64, delta: Packed) -> Option<Out> {
        match self.fence_keys.check(&delta) {
            Ok(same_keys) => {
                self.release_fence(epoch, delta, same_keys, None);
                None
            }
            Err(e) => report(Report::Failed {
                reason: format!("fence {epoch}: {e}"),
            }),
        }
    }

    /// Fence `epoch` is complete everywhere: the children get the merged delta (`frame`, when
    /// it came from the parent, as it came), then this host's ranks are released.
    fn release_fence(&mut self, epoch: u64, delta: Packed, same_keys: bool, frame: Option<Bytes>) {
        debug!(host = %self.host, epoch, bytes = delta.byte_len(), same_keys, "fence done");
        if let Some(p) = self.prof.as_mut() {
            p.fence_released(epoch, self.clock.now());
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
                status: kauri_proto::pmix::ffi::PMIX_ERR_NOT_FOUND,
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
            n.signal(libc::SIGTERM);
        }
        true
    }

    /// Kills every rank here and below.
    pub fn kill(&mut self) {
        self.kids.broadcast(&Down::Kill);
        self.kids.close();
        if let Some(n) = &self.node {
            n.signal(libc::SIGKILL);
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
mod tests {
    use super::*;
    use crate::RankStatus;
    use kauri_proto::rank::RankEnd;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// What the fakes were asked to do, in order.
    type Log = Rc<RefCell<Vec<String>>>;

    struct FakeHost(Log);

    impl Host for FakeHost {
        fn ranks(&self) -> usize {
            1
        }
        fn running(&self) -> usize {
            1
        }
        fn has_rank(&self, rank: usize) -> bool {
            rank == 0
        }
        fn fence_done(&self, epoch: u64, delta: &Packed, same_keys: bool) {
            self.0
                .borrow_mut()
                .push(format!("fence {epoch} {delta:?} {same_keys}"));
        }
        fn pmix_fence_done(&self, _: u64, _: Bytes) {}
        fn pmix_collective_done(&self, _sig: &str, _status: i32, _data: Vec<u8>, _id: Option<u64>) {
        }
        fn pmix_failure(&self, status: i32, ranks: &[usize], exit_code: Option<i32>) {
            self.0
                .borrow_mut()
                .push(format!("notify {status} {ranks:?} {exit_code:?}"));
        }
        fn dead_processes(&self, ranks: &[usize]) {
            self.0.borrow_mut().push(format!("dead {ranks:?}"));
        }
        fn pmix_dmodex_serve(&self, _: usize, _: u32, _: u64) {}
        fn pmix_dmodex_reply(&self, _: u64, _: i32, _: Vec<u8>) {}
        fn publish(&self, _: Delta) {}
        fn service_reply(&self, _: u64, _: ServiceReply) {}
        fn signal(&self, sig: i32) {
            self.0.borrow_mut().push(format!("signal {sig}"));
        }
        fn signal_ranks(&self, sig: i32, ranks: &[usize]) {
            self.0.borrow_mut().push(format!("signal {sig} {ranks:?}"));
        }
        fn status(&self) -> (Vec<RankStatus>, Option<u64>) {
            (Vec::new(), None)
        }
        fn take_stdin(&mut self) -> Option<pipe::Sender> {
            None
        }
        async fn drain(self) {}
    }

    /// One child, id 1, whose subtree runs ranks 1 and 2.
    struct FakeLinks(Log);

    impl Links for FakeLinks {
        fn ids(&self) -> Vec<u32> {
            vec![1]
        }
        fn send(&self, id: u32, msg: Down) {
            self.0.borrow_mut().push(format!("send {id} {msg:?}"));
        }
        fn broadcast(&self, msg: &Down) {
            self.0.borrow_mut().push(format!("broadcast {msg:?}"));
        }
        fn broadcast_frame(&self, frame: &Bytes) {
            let msg: Down = bincode::deserialize(&frame[4..]).expect("a frame");
            self.0.borrow_mut().push(format!("frame {msg:?}"));
        }
        fn route(&self, _: u32, _: Down) -> bool {
            true
        }
        fn child_with_rank(&self, rank: usize) -> Option<u32> {
            (1..=2).contains(&rank).then_some(1)
        }
        fn ranks_below(&self, id: u32) -> Vec<usize> {
            if id == 1 {
                vec![1, 2]
            } else {
                Vec::new()
            }
        }
        fn mark_done(&self, _: u32) {}
        fn all_done(&self) -> bool {
            false
        }
        fn close(&self) {}
        fn host(&self, id: u32) -> String {
            format!("h{id}")
        }
        fn unfinished(&self) -> Vec<String> {
            Vec::new()
        }
        fn agents(&self) -> usize {
            1
        }
        fn refusal_summary(&self) -> Option<String> {
            None
        }
        fn timings(&self, _: u32) -> (Option<Instant>, Option<Instant>) {
            (None, None)
        }
        fn launching(&self) -> Vec<(u32, Launching)> {
            Vec::new()
        }
    }

    fn branch(log: &Log) -> Branch<FakeHost, FakeLinks> {
        Branch::new(
            2,
            "h2".into(),
            Some(FakeHost(log.clone())),
            FakeLinks(log.clone()),
            true,
            Clock::start(),
            None,
        )
    }

    /// A failure event from the parent goes on to the children as it came, then to this
    /// host's clients; the teardown after it reaches the children after it, and this host's
    /// ranks are signalled after their server told them.
    #[test]
    fn a_failure_event_goes_down_before_the_teardown() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let msg = Down::PmixFailure {
            status: -402,
            ranks: vec![3],
            exit_code: Some(137),
        };
        let frame = crate::encode(&msg).expect("encodes");
        assert_eq!(b.on_down(msg.clone(), frame), None);
        assert!(b.teardown());
        assert_eq!(
            *log.borrow(),
            [
                format!("frame {msg:?}"),
                "notify -402 [3] Some(137)".to_string(),
                format!("broadcast {:?}", Down::Teardown),
                format!("signal {}", libc::SIGTERM),
            ]
        );
    }

    /// The dead ranks go down as they came, then to this host (which sets the key before it
    /// signals its ranks); from the root, encoded once for every child.
    #[test]
    fn dead_processes_go_down_then_to_this_host() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let msg = Down::DeadProcesses { ranks: vec![3, 1] };
        let frame = crate::encode(&msg).expect("encodes");
        assert_eq!(b.on_down(msg.clone(), frame), None);
        b.dead_processes(vec![3, 1, 2], None);
        assert_eq!(
            *log.borrow(),
            [
                format!("frame {msg:?}"),
                "dead [3, 1]".to_string(),
                format!(
                    "broadcast {:?}",
                    Down::DeadProcesses {
                        ranks: vec![3, 1, 2]
                    }
                ),
                "dead [3, 1, 2]".to_string(),
            ]
        );
    }

    /// What rank 0's agent says it wrote of rank 0's stdin goes up as it came, from any
    /// depth: the front end's window of stdin in flight closes without it.
    #[test]
    fn stdin_taken_by_a_child_goes_up() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let ev = HubEvent::Up {
            id: 1,
            msg: Up::StdinTaken(65536),
        };
        assert_eq!(b.on_child(ev), Some(Out::Up(Up::StdinTaken(65536))));
    }

    /// The engine's events reach `on_engine`: an agent (init_once) reports the first
    /// initialized rank only, a publish goes up as it came, and what is only for the
    /// profile makes nothing.
    #[test]
    fn an_agent_reports_its_first_initialized_rank_only() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let init = |rank| NodeEvent::Engine(Output::Initialized { rank });
        assert_eq!(
            b.on_node(init(3)),
            Some(Out::Up(Up::Reports(vec![Report::Initialized { rank: 3 }])))
        );
        assert_eq!(b.on_node(init(4)), None);
        let delta: Delta = vec![("k".into(), "v".into())];
        assert_eq!(
            b.on_node(NodeEvent::Engine(Output::Publish {
                delta: delta.clone()
            })),
            Some(Out::Up(Up::Publish(delta)))
        );
        assert_eq!(
            b.on_node(NodeEvent::Engine(Output::Finalized { rank: 3 })),
            None
        );
    }

    /// Showing progress, an agent also reports every later rank's PMI init, and its host's
    /// entry into a fence before the contribution it may complete; its children's launches
    /// and connections go up as they came. Without, none of these.
    #[test]
    fn showing_progress_an_agent_reports_each_init_and_fence_entry() {
        let log: Log = Rc::default();
        let init = |rank| NodeEvent::Engine(Output::Initialized { rank });
        let ready = |epoch| {
            NodeEvent::Engine(Output::FenceReady {
                epoch,
                delta: Packed::default(),
            })
        };
        let progress = |s| Some(Out::Up(Up::Reports(vec![Report::Progress(s)])));
        let mut quiet = branch(&log);
        quiet.on_node(init(3));
        assert_eq!(quiet.on_node(init(4)), None);
        assert_eq!(quiet.on_node(ready(0)), None, "waits for its child");
        assert_eq!(quiet.take_deferred(), None);

        let mut b = branch(&log);
        b.show_progress();
        b.on_node(init(3));
        assert_eq!(b.on_node(init(4)), progress(Step::Initialized(4)));
        let entered = Step::FenceEntered { epoch: 0, ranks: 1 };
        assert_eq!(b.on_node(ready(0)), progress(entered.clone()));
        assert_eq!(b.take_deferred(), None, "the fence waits for its child");
        let fence = |epoch| Up::Fence {
            epoch,
            delta: Packed::default(),
        };
        let child = |epoch| HubEvent::Up {
            id: 1,
            msg: fence(epoch),
        };
        assert_eq!(b.on_child(child(0)), Some(Out::Up(fence(0))));
        // The child first this time: this host's entry completes the fence.
        assert_eq!(b.on_child(child(1)), None);
        let entered = Step::FenceEntered { epoch: 1, ranks: 1 };
        assert_eq!(b.on_node(ready(1)), progress(entered));
        assert_eq!(
            b.take_deferred(),
            Some(Out::Up(fence(1))),
            "the contribution after it"
        );
        assert_eq!(b.take_deferred(), None);
        let launched = Step::Launched(vec![5, 6]);
        assert_eq!(
            b.on_child(HubEvent::Progress(launched.clone())),
            progress(launched)
        );
    }

    /// At the root, each merged delta is checked once for every agent: it goes down (and to
    /// this host) with whether its keys are the last fence's, in order; one that does not
    /// unpack goes nowhere and fails the job with the reason; the next good one is compared
    /// with the last good one.
    #[test]
    fn the_root_checks_each_merged_delta_and_says_when_its_keys_repeat() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let d = |pairs: &[(&str, &str)]| Packed::from_pairs(pairs.iter().copied());
        let fences = [
            d(&[("a", "1"), ("b", "2")]),
            d(&[("a", "3"), ("b", "4")]),
            d(&[("b", "5"), ("a", "6")]),
            Packed::default(),
            d(&[("b", "7"), ("a", "8")]),
        ];
        for (epoch, delta) in fences.iter().enumerate() {
            assert_eq!(b.fence_done(epoch as u64, delta.clone()), None);
        }
        let went: Vec<(bool, bool)> = fences
            .iter()
            .enumerate()
            .map(|(epoch, delta)| {
                let down = |same_keys| Down::FenceDone {
                    epoch: epoch as u64,
                    delta: delta.clone(),
                    same_keys,
                };
                let log = log.borrow();
                let at = |line: String| log.iter().position(|l| *l == line);
                let same = at(format!("broadcast {:?}", down(true)));
                let host = at(format!("fence {epoch} {delta:?} true"));
                let other = at(format!("broadcast {:?}", down(false)));
                assert_eq!(log.len(), 2 * fences.len(), "{log:?}");
                (same.is_some() && host.is_some(), other.is_some())
            })
            .collect();
        assert_eq!(
            went,
            [
                (false, true),
                (true, false),
                (false, true),
                (false, true),
                (false, true)
            ]
        );
        log.borrow_mut().clear();
        let cut = {
            let mut v = bincode::serialize(&d(&[("a", "9"), ("b", "10")])).unwrap();
            v.truncate(v.len() - 1);
            let len = v.len() as u64 - 8;
            v[..8].copy_from_slice(&len.to_le_bytes());
            bincode::deserialize::<Packed>(&v).unwrap()
        };
        let out = b.fence_done(5, cut);
        assert!(
            matches!(&out, Some(Out::Up(Up::Reports(r))) if matches!(&r[..],
                [Report::Failed { reason }] if reason.starts_with("fence 5: malformed key-value data"))),
            "{out:?}"
        );
        assert!(log.borrow().is_empty(), "{:?}", log.borrow());
        b.fence_done(6, d(&[("b", "11"), ("a", "12")]));
        assert!(
            log.borrow()[0].ends_with("same_keys: true }"),
            "{:?}",
            log.borrow()
        );
    }

    /// A lost child's report names the ranks of its subtree, for the root to tell the others.
    #[test]
    fn a_lost_child_is_reported_with_its_ranks() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let out = b.on_child(HubEvent::Lost {
            id: 1,
            reason: "agent on h1 died".into(),
        });
        assert_eq!(
            out,
            Some(Out::Up(Up::Reports(vec![Report::Lost {
                host: "h1".into(),
                reason: "agent on h1 died".into(),
                ranks: vec![1, 2],
            }])))
        );
    }

    /// A PMIx fence this host entered while its child's host was lost: it can never complete
    /// and the job is told so; under `-with-ft` (tolerate_failures) it completes without the
    /// child, after the loss's report, and the next fences do not wait for it.
    #[test]
    fn a_lost_child_stops_a_pmix_fence_unless_failures_are_tolerated() {
        let lost = || HubEvent::Lost {
            id: 1,
            reason: "agent on h1 died".into(),
        };
        let log: Log = Rc::default();
        let mut b = branch(&log);
        let fence = |epoch| NodeEvent::PmixFence {
            epoch,
            data: Bytes::from_static(b"a"),
        };
        assert_eq!(b.on_node(fence(0)), None);
        let Some(Out::Up(Up::Reports(r))) = b.on_child(lost()) else {
            panic!("no report")
        };
        assert!(
            matches!(&r[1], Report::Failed { reason } if reason.contains("can never complete")),
            "{r:?}"
        );
        assert_eq!(b.take_deferred(), None);

        let mut b = branch(&log);
        b.tolerate_failures();
        assert_eq!(b.on_node(fence(0)), None);
        let Some(Out::Up(Up::Reports(r))) = b.on_child(lost()) else {
            panic!("no report")
        };
        assert_eq!(r.len(), 1, "only the loss: {r:?}");
        assert_eq!(
            b.take_deferred(),
            Some(Out::Up(Up::PmixFence {
                epoch: 0,
                data: Bytes::from_static(b"a")
            }))
        );
        assert_eq!(b.take_deferred(), None);
        assert_eq!(
            b.on_node(fence(1)),
            Some(Out::Up(Up::PmixFence {
                epoch: 1,
                data: Bytes::from_static(b"a")
            })),
            "the next fence is this host's alone"
        );
    }

    /// Under `-with-ft`, a PMIx fence the child entered while this host's only rank was
    /// killed completes with the child's part when the rank's end comes in.
    #[test]
    fn a_host_whose_ranks_all_ended_is_not_waited_for_when_failures_are_tolerated() {
        let log: Log = Rc::default();
        let mut b = branch(&log);
        b.tolerate_failures();
        let child = HubEvent::Up {
            id: 1,
            msg: Up::PmixFence {
                epoch: 0,
                data: Bytes::from_static(b"c"),
            },
        };
        assert_eq!(b.on_child(child), None);
        let end = RankEnd {
            rank: 0,
            pid: 7,
            code: None,
            signal: Some(libc::SIGKILL),
            initialized: true,
            finalized: false,
            ran_alone: false,
        };
        let Some(Out::Up(Up::Reports(r))) = b.on_node(NodeEvent::Exited(end)) else {
            panic!("no report")
        };
        // Only the rank's end, its record as the node made it.
        let exited = Report::Exited {
            host: "h2".into(),
            in_teardown: false,
            end,
        };
        assert_eq!(r, [exited]);
        assert_eq!(
            b.take_deferred(),
            Some(Out::Up(Up::PmixFence {
                epoch: 0,
                data: Bytes::from_static(b"c")
            }))
        );
    }
}
