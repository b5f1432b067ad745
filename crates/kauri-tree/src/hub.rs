//! A parent's side of the tree: it launches its child agents, accepts and authenticates their
//! connections, sends each its part of the job, reads what they report, and gathers fence
//! contributions. The front end and every agent with children run one.
//!
//! Every child's queue exists from its launch: what is sent to a child before it connects (stdin
//! for its rank 0, a publish, a signal) waits for it and follows its `Spec`. A child that
//! connects after the teardown began is turned away (it gets `Teardown` instead of its part
//! of the job) and counts as done.
//!
//! Launches are bounded ([`LaunchPlan::max_concurrent`] in flight, a slot freed when the agent
//! connects or fails) and retried with back-off when sshd turns connections away under
//! `MaxStartups`. An agent that cannot be started, does not connect back in time, or whose
//! link ends before it said `Done` is reported as [`HubEvent::Lost`], with one line saying
//! what and where.

use crate::branch::Links;
use crate::progress::Step;
pub use crate::refusals::{Refusal, Refusals, REFUSALS_INTERVAL, REFUSALS_SHOWN};
use crate::{self as tree, Down, Launching, Link, Queue, Up};
use bytes::Bytes;
use kauri_host::events::JobTx;
use kauri_host::iofwd::Stream;
use kauri_launch::{self as launch, Batching, LauncherKind, Target};
use kauri_plan::{JobPlan, LaunchPlan, Subtree};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

pub use super::gather::{Contribution, Gather};
pub use kauri_core::tree::branch::HubEvent;

/// The least time a new connection has to prove it holds the key; it has as long as a link
/// may be silent (`KAURI_HEARTBEAT_TIMEOUT`) when that is longer ([`handshake_window`]).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long a new connection has to answer the challenge: as long as a link may be silent,
/// and at least [`HANDSHAKE`]. An agent of the job on a starved host may take that long to
/// be scheduled (300 simulated hosts on 2 cores beside another job's as many took over
/// 10 s); a connection without the key holds one of [`HANDSHAKES_MAX`] places meanwhile.
fn handshake_window(silence: Option<Duration>) -> Duration {
    silence.map_or(HANDSHAKE, |s| s.max(HANDSHAKE))
}

/// The most connections of one listener in their handshake at once; more are closed at once
/// and counted as refused.
pub const HANDSHAKES_MAX: usize = 64;

/// Logs one refused connection through `refusals`: a line now, or counted into a summary
/// sent [`REFUSALS_INTERVAL`] after the first refusal it counts.
fn log_refusal(
    refusals: &Rc<RefCell<Refusals>>,
    events: &JobTx<HubEvent>,
    addr: SocketAddr,
    reason: &Refused,
) {
    let r = refusals.borrow_mut().refused(addr, &reason.to_string());
    match r {
        Refusal::Show(line) => {
            let _ = events.send(HubEvent::Refused { line });
        }
        Refusal::Held { first: true } => {
            let (refusals, events) = (refusals.clone(), events.clone());
            tokio::task::spawn_local(async move {
                tokio::time::sleep(REFUSALS_INTERVAL).await;
                let line = refusals.borrow_mut().summary();
                if let Some(line) = line {
                    let _ = events.send(HubEvent::Refused { line });
                }
            });
        }
        Refusal::Held { first: false } => {}
    }
}

/// Launch attempts per agent when sshd turns connections away.
const ATTEMPTS: u32 = 4;

struct Shared {
    pending: RefCell<HashMap<u32, Subtree>>,
    /// Each child's link, from its launch until it is done.
    links: RefCell<HashMap<u32, Link>>,
    /// What waits on each link, taken by the link's writer when the child connects.
    queued: RefCell<HashMap<u32, Queue>>,
    /// The teardown began: children that connect from now on are turned away.
    closing: std::cell::Cell<bool>,
    connected: RefCell<HashSet<u32>>,
    done: RefCell<HashSet<u32>>,
    connect_wait: RefCell<HashMap<u32, tokio::sync::oneshot::Sender<()>>>,
    /// When each child's launch began (for the startup profile).
    launched_at: RefCell<HashMap<u32, Instant>>,
    /// When each child's handshake was accepted.
    connected_at: RefCell<HashMap<u32, Instant>>,
    /// The refused connections, logged by [`log_refusal`].
    refusals: Rc<RefCell<Refusals>>,
}

/// The links to this node's child agents.
pub struct Children {
    /// The direct children's subtrees.
    pub subtrees: Vec<Subtree>,
    /// The children, biggest subtree first: the order a broadcast is queued in, so the frame
    /// that has the longest way to go leaves first.
    order: Vec<u32>,
    shared: Rc<Shared>,
    accept: Option<tokio::task::JoinHandle<()>>,
    /// The launcher that starts the children (`LaunchPlan::kind`), for `kauri --status`.
    launcher: String,
}

impl Drop for Children {
    fn drop(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
        }
    }
}

impl Children {
    /// No children.
    pub fn none() -> Children {
        Children {
            subtrees: Vec::new(),
            order: Vec::new(),
            shared: Rc::new(Shared {
                pending: RefCell::new(HashMap::new()),
                links: RefCell::new(HashMap::new()),
                queued: RefCell::new(HashMap::new()),
                closing: std::cell::Cell::new(false),
                connected: RefCell::new(HashSet::new()),
                done: RefCell::new(HashSet::new()),
                connect_wait: RefCell::new(HashMap::new()),
                launched_at: RefCell::new(HashMap::new()),
                connected_at: RefCell::new(HashMap::new()),
                refusals: Rc::new(RefCell::new(Refusals::default())),
            }),
            accept: None,
            launcher: String::new(),
        }
    }

    /// Listens on `ip`, launches every child, and serves their links.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        subtrees: Vec<Subtree>,
        job: JobPlan,
        plan: LaunchPlan,
        key: String,
        ip: IpAddr,
        events: JobTx<HubEvent>,
        out: kauri_host::iofwd::OutputSender,
    ) -> Result<Children, ListenError> {
        let mut c = Children::none();
        if subtrees.is_empty() {
            return Ok(c);
        }
        c.subtrees = subtrees.clone();
        c.launcher = plan.kind.as_str().to_string();
        c.order = broadcast_order(&subtrees);
        c.open_links(&subtrees);
        let listener =
            kauri_os::ports::listen_async(IpAddr::from([0u8, 0, 0, 0]), job.port_range.as_ref())
                .map_err(ListenError::Listen)?;
        let port = listener
            .local_addr()
            .map_err(ListenError::LocalAddr)?
            .port();
        let parent = SocketAddr::new(ip, port).to_string();
        info!(%parent, children = subtrees.len(), "listening for agents");
        let ctx = Ctx {
            shared: c.shared.clone(),
            events,
            out,
            key,
            plan,
            progress: job.progress,
        };

        // Accept, authenticate, serve.
        c.accept = Some(spawn_accept(listener, ctx.clone(), Rc::new(job)));

        // Launch.
        let slots = Arc::new(Semaphore::new(ctx.plan.max_concurrent.max(1)));
        for batch in launch_batches(&subtrees, ctx.plan.kind) {
            let (ctx, parent, slots) = (ctx.clone(), parent.clone(), slots.clone());
            tokio::task::spawn_local(async move {
                // The slot is held until the agent connects or fails, not for its whole life.
                let permit = slots.acquire_owned().await.ok();
                launch_batch(batch, ctx, parent, permit).await;
            });
        }
        Ok(c)
    }

    /// Makes each child expected, with its link and the link's queue, from its launch on.
    fn open_links(&self, subtrees: &[Subtree]) {
        for t in subtrees {
            self.shared.pending.borrow_mut().insert(t.id, t.clone());
            let (link, queue) = tree::link();
            self.shared.links.borrow_mut().insert(t.id, link);
            self.shared.queued.borrow_mut().insert(t.id, queue);
        }
    }
}

impl Links for Children {
    /// Sends a message to child `id` (queued until it connects, dropped once it is done).
    fn send(&self, id: u32, msg: Down) {
        if let Some(l) = self.shared.links.borrow().get(&id) {
            l.send(&msg);
        }
    }

    /// Sends a message to every child that is not done (queued for those not connected yet).
    /// The message is encoded once and the same bytes go to every child (a fence's merged
    /// delta is the biggest message there is; a parent of many children used to clone and
    /// encode it once per child).
    fn broadcast(&self, msg: &Down) {
        let links = self.shared.links.borrow();
        if links.is_empty() {
            return;
        }
        match tree::encode(msg) {
            Ok(f) => {
                for l in self.order.iter().filter_map(|id| links.get(id)) {
                    l.send_frame(f.clone());
                }
            }
            Err(e) => warn!("cannot encode a message for the children: {e}"),
        }
    }

    /// Sends a frame as it came from this node's parent to every child: a fence's result
    /// is passed on without being encoded again.
    fn broadcast_frame(&self, frame: &Bytes) {
        let links = self.shared.links.borrow();
        for l in self.order.iter().filter_map(|id| links.get(id)) {
            l.send_frame(frame.clone());
        }
    }

    /// Sends a message towards agent `to`: to the direct child whose subtree holds it.
    /// Returns false when no child does.
    fn route(&self, to: u32, msg: Down) -> bool {
        match self.subtrees.iter().find(|t| t.contains_agent(to)) {
            Some(t) => {
                self.send(t.id, msg);
                true
            }
            None => false,
        }
    }

    /// Every rank in the subtree of child `id` (empty for an unknown child).
    fn ranks_below(&self, id: u32) -> Vec<usize> {
        self.subtrees
            .iter()
            .find(|t| t.id == id)
            .map(kauri_plan::Subtree::ranks)
            .unwrap_or_default()
    }

    /// The child whose subtree runs `rank`.
    fn child_with_rank(&self, rank: usize) -> Option<u32> {
        self.subtrees
            .iter()
            .find(|t| t.contains_rank(rank))
            .map(|t| t.id)
    }

    /// Records that child `id` is finished (it said `Done`, or it is lost).
    fn mark_done(&self, id: u32) {
        self.shared.done.borrow_mut().insert(id);
        self.shared.links.borrow_mut().remove(&id);
        self.shared.queued.borrow_mut().remove(&id);
    }

    /// The teardown began: a child that connects from now on is sent `Teardown` instead of
    /// its part of the job, and counts as done.
    fn close(&self) {
        self.shared.closing.set(true);
    }

    /// Stops accepting agents: the listener's socket and its task go (a job that ended while
    /// the run goes on).
    fn stop_listening(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
        }
    }

    /// True when every child is finished.
    fn all_done(&self) -> bool {
        let done = self.shared.done.borrow();
        self.subtrees.iter().all(|t| done.contains(&t.id))
    }

    /// The summary of the refusals held for a summary that has not been printed yet (at the
    /// end of the job, so that none goes unsaid).
    fn refusal_summary(&self) -> Option<String> {
        self.shared.refusals.borrow_mut().summary()
    }

    /// The hosts of the children that are not finished.
    fn unfinished(&self) -> Vec<String> {
        let done = self.shared.done.borrow();
        self.subtrees
            .iter()
            .filter(|t| !done.contains(&t.id))
            .map(|t| t.plan.host.clone())
            .collect()
    }

    /// The host of child `id`.
    fn host(&self, id: u32) -> String {
        self.subtrees
            .iter()
            .find(|t| t.id == id)
            .map_or_else(|| format!("agent {id}"), |t| t.plan.host.clone())
    }

    /// When child `id`'s launch began and when its handshake was accepted.
    fn timings(&self, id: u32) -> (Option<Instant>, Option<Instant>) {
        (
            self.shared.launched_at.borrow().get(&id).copied(),
            self.shared.connected_at.borrow().get(&id).copied(),
        )
    }

    /// The children that have not connected yet (nor been lost), by id: being launched, or
    /// waiting for a launch slot.
    fn launching(&self) -> Vec<(u32, Launching)> {
        let connected = self.shared.connected.borrow();
        let done = self.shared.done.borrow();
        let launched = self.shared.launched_at.borrow();
        let now = Instant::now();
        self.subtrees
            .iter()
            .filter(|t| !connected.contains(&t.id) && !done.contains(&t.id))
            .map(|t| {
                let since = launched
                    .get(&t.id)
                    .map(|at| now.saturating_duration_since(*at));
                let agent = Launching {
                    host: t.plan.host.clone(),
                    since_ms: since.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    launcher: self.launcher.clone(),
                    below: t.hosts_below(),
                };
                (t.id, agent)
            })
            .collect()
    }

    /// The ids of the direct children.
    fn ids(&self) -> Vec<u32> {
        self.subtrees.iter().map(|t| t.id).collect()
    }

    /// How many agents there are below, at every depth.
    fn agents(&self) -> usize {
        self.subtrees.iter().map(Subtree::agents).sum()
    }
}

/// The children's ids, biggest subtree first (ties: in the given order).
pub fn broadcast_order(subtrees: &[Subtree]) -> Vec<u32> {
    let mut v: Vec<(usize, u32)> = subtrees.iter().map(|t| (t.agents(), t.id)).collect();
    v.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
    v.into_iter().map(|(_, id)| id).collect()
}

/// What the tasks of one parent's hub share: the children's state, where their events and
/// output go, the job key and how agents are launched.
#[derive(Clone)]
struct Ctx {
    shared: Rc<Shared>,
    events: JobTx<HubEvent>,
    out: kauri_host::iofwd::OutputSender,
    key: String,
    plan: LaunchPlan,
    /// Say each launch and connection ([`HubEvent::Progress`]).
    progress: bool,
}

impl Shared {
    /// Child `id` on `host` passed its handshake: it counts as connected, and its launch
    /// stops waiting for it.
    fn note_connected(&self, id: u32, host: &str) {
        debug!(id, host = %host, "agent connected");
        self.connected.borrow_mut().insert(id);
        self.connected_at.borrow_mut().insert(id, Instant::now());
        if let Some(w) = self.connect_wait.borrow_mut().remove(&id) {
            let _ = w.send(());
        }
    }
}

/// Accepts connections on `listener` for ever, each served by [`serve_child`] in a task of
/// its own; one over [`HANDSHAKES_MAX`] in their handshake at once is refused.
fn spawn_accept(
    listener: tokio::net::TcpListener,
    ctx: Ctx,
    job: Rc<JobPlan>,
) -> tokio::task::JoinHandle<()> {
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES_MAX));
    tokio::task::spawn_local(async move {
        loop {
            let (sock, addr) = accept_with_backoff(|| listener.accept()).await;
            let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                // Closed at once: an unauthenticated peer holds no more than
                // HANDSHAKES_MAX sockets and buffers of this listener.
                drop(sock);
                let why = Refused::OverTheLimit;
                log_refusal(&ctx.shared.refusals, &ctx.events, addr, &why);
                continue;
            };
            let (ctx, job) = (ctx.clone(), job.clone());
            tokio::task::spawn_local(async move {
                serve_child(sock, addr, permit, ctx, job).await;
            });
        }
    })
}

/// The launcher processes to start, each with the agents it stands for: one for all of them
/// (Slurm's one `srun`), or one per agent ([`Batching`]).
fn launch_batches(subtrees: &[Subtree], kind: LauncherKind) -> Vec<Vec<Target>> {
    let targets: Vec<Target> = subtrees
        .iter()
        .map(|t| Target {
            id: t.id,
            host: t.plan.host.clone(),
        })
        .collect();
    match kind.batching() {
        Batching::AllInOne => vec![targets],
        Batching::OnePerAgent => targets.into_iter().map(|t| vec![t]).collect(),
    }
}

/// The handshake and then the life of one child link.
async fn serve_child(
    sock: TcpStream,
    addr: SocketAddr,
    handshake: tokio::sync::OwnedSemaphorePermit,
    ctx: Ctx,
    job: Rc<JobPlan>,
) {
    let _ = sock.set_nodelay(true);
    let (mut rd, mut wr) = sock.into_split();
    let Ctx {
        shared,
        events,
        out,
        key,
        plan,
        progress,
    } = ctx;
    let refuse = |reason: Refused| log_refusal(&shared.refusals, &events, addr, &reason);
    let within = handshake_window(plan.silence());
    let (id, host) = match check_hello(&mut rd, &mut wr, &key, addr, within).await {
        Ok(hello) => hello,
        Err(Some(reason)) => return refuse(reason),
        Err(None) => return,
    };
    let id = match agent_id(&shared.pending.borrow(), id, &host) {
        Ok(id) => id,
        Err(reason) => return refuse(reason),
    };
    let Some(subtree) = shared.pending.borrow_mut().remove(&id) else {
        return refuse(Refused::NotExpected(id));
    };
    drop(handshake);
    shared.note_connected(id, &subtree.plan.host);
    if progress {
        let _ = events.send(HubEvent::Progress(Step::Connected(id)));
    }
    let Some(queue) = shared.queued.borrow_mut().remove(&id) else {
        // Lost already (its launch timed out, say) and then connected after all.
        let _ = tree::send(&mut wr, &Down::Teardown).await;
        return;
    };
    if shared.closing.get() {
        return turn_away(&shared, &events, wr, id).await;
    }
    let (every, silence) = (plan.heartbeat(), plan.silence());
    if let Some(s) = silence {
        tree::link::keepalive(rd.as_ref(), s, tree::link::End::Parent);
    }
    let spec = tree::encode(&Down::Spec {
        id,
        job: Box::new((*job).clone()),
        me: subtree.plan.clone(),
        children: subtree.children.clone(),
        launch: plan,
    });
    let spec = match spec {
        Ok(f) => f,
        Err(e) => return refuse(Refused::Unencodable(e)),
    };
    // Its Spec first, then whatever was queued for it since its launch, then the rest.
    tokio::task::spawn_local(queue.write(wr, Some(spec), None));
    let heartbeat = shared
        .links
        .borrow()
        .get(&id)
        .cloned()
        .map(|l| tokio::task::spawn_local(tree::link::beat(l, Down::Heartbeat, every)));
    let _stop_beating = heartbeat.map(AbortOnDrop);
    let host = subtree.plan.host;
    let Some(why) = relay_up(&mut rd, id, &host, silence, &events, &out).await else {
        return;
    };
    if !shared.done.borrow().contains(&id) {
        let reason = kauri_host::proc::fd_cause(why);
        let _ = events.send(HubEvent::Lost { id, reason });
    }
}

/// Challenges a new connection and checks its answer: the id and host it gave, or why it is
/// refused (`None`: it goes without a word, as when the challenge could not be sent).
async fn check_hello(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    key: &str,
    addr: SocketAddr,
    within: Duration,
) -> Result<(u32, String), Option<Refused>> {
    let nonce = match tree::nonce() {
        Ok(n) => n,
        Err(e) => {
            kauri_host::proc::note_fd_error(&e);
            debug!("no nonce for a connection from {addr}: {e}");
            return Err(None);
        }
    };
    if tree::send(wr, &Down::Challenge { nonce }).await.is_err() {
        return Err(None);
    }
    let hello = tokio::time::timeout(
        within,
        tree::recv_limited::<_, Up>(rd, tree::HANDSHAKE_FRAME_MAX),
    )
    .await;
    let refused = |why: Refused| Err(Some(why));
    let (id, host, mac) = match hello {
        Ok(Ok(Some(Up::Hello { id, host, mac }))) => (id, host, mac),
        Ok(Ok(Some(_))) => return refused(Refused::NoHandshake),
        Ok(Ok(None)) => return refused(Refused::ClosedInHandshake),
        Ok(Err(e)) => return refused(Refused::Unreadable(e)),
        Err(_) => return refused(Refused::Silent(within)),
    };
    if !tree::verify(key, &nonce, id, &mac) {
        return refused(Refused::WrongKey);
    }
    Ok((id, host))
}

/// Why a connection to the hub was turned away: the reason its refusal line gives.
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// [`HANDSHAKES_MAX`] handshakes were under way.
    #[error("over the handshake limit ({HANDSHAKES_MAX} at once)")]
    OverTheLimit,
    /// Its first frame was not a hello.
    #[error("it did not start with the handshake")]
    NoHandshake,
    /// It closed before its hello.
    #[error("it closed the connection during the handshake")]
    ClosedInHandshake,
    /// Its hello could not be read.
    #[error("unreadable handshake ({0})")]
    Unreadable(#[source] std::io::Error),
    /// No hello within the handshake's window.
    #[error("no handshake within {} s", .0.as_secs_f64())]
    Silent(Duration),
    /// Its hello was not signed with the job's key.
    #[error("wrong job key")]
    WrongKey,
    /// A Slurm agent from a host where no agent is expected.
    #[error("no agent is expected on host {0}")]
    NoAgentOn(String),
    /// An id that is not pending (unknown, or connected already).
    #[error("agent {0} is not expected (or already connected)")]
    NotExpected(u32),
    /// Its part of the job does not fit in a frame.
    #[error("cannot encode its part of the job: {0}")]
    Unencodable(#[source] std::io::Error),
}

/// Why a host cannot take connections from the agents it launches.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// No listening socket (a port of `MPIEXEC_PORT_RANGE`, or any).
    #[error("cannot listen for agents: {0}")]
    Listen(#[source] std::io::Error),
    /// The socket has no address.
    #[error("{0}")]
    LocalAddr(#[source] std::io::Error),
}

/// The id of the agent that said hello as `id` from `host`. A Slurm agent knows its host,
/// not its id (it says `u32::MAX`): it is the expected agent of that host, by its full name
/// or its first label.
fn agent_id(pending: &HashMap<u32, Subtree>, id: u32, host: &str) -> Result<u32, Refused> {
    if id != u32::MAX {
        return Ok(id);
    }
    pending
        .values()
        .find(|t| t.plan.host == host || host.split('.').next() == Some(&t.plan.host))
        .map(|t| t.id)
        .ok_or_else(|| Refused::NoAgentOn(host.to_string()))
}

/// The job is ending: child `id`, connected only now, starts nothing and leaves; it counts
/// as done.
async fn turn_away(
    shared: &Shared,
    events: &JobTx<HubEvent>,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    id: u32,
) {
    debug!(id, "agent connected during the teardown; turned away");
    shared.done.borrow_mut().insert(id);
    shared.links.borrow_mut().remove(&id);
    let _ = tree::send(&mut wr, &Down::Teardown).await;
    let _ = events.send(HubEvent::Up { id, msg: Up::Done });
}

/// Reads child `id`'s link until it ends: output goes to `out`, other messages to `events`.
/// `None` when the child said `Done`; else why the link ended, for the user.
async fn relay_up(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    id: u32,
    host: &str,
    silence: Option<Duration>,
    events: &JobTx<HubEvent>,
    out: &kauri_host::iofwd::OutputSender,
) -> Option<String> {
    let mut why = format!("agent on {host} died");
    loop {
        let next = match silence {
            Some(s) => match tokio::time::timeout(s, tree::recv::<_, Up>(rd)).await {
                Ok(r) => r,
                Err(_) => {
                    why = format!(
                        "agent on {host} was silent for {} s (KAURI_HEARTBEAT_TIMEOUT)",
                        s.as_secs_f64()
                    );
                    break;
                }
            },
            None => tree::recv::<_, Up>(rd).await,
        };
        match next {
            Ok(Some(Up::Heartbeat)) => {}
            Ok(Some(Up::Output { stream, file, data })) => {
                let dest = kauri_host::iofwd::Dest {
                    stream,
                    file: file.map(Into::into),
                    close: false,
                };
                if out.send(dest, Bytes::from(data)).await.is_err() {
                    break;
                }
            }
            Ok(Some(Up::Done)) => {
                let _ = events.send(HubEvent::Up { id, msg: Up::Done });
                return None;
            }
            Ok(Some(msg)) => {
                let _ = events.send(HubEvent::Up { id, msg });
            }
            Ok(None) | Err(_) => break,
        }
    }
    Some(why)
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts one launcher process (one agent, or all of Slurm's), retrying when sshd refuses,
/// and reports agents that never connect.
async fn launch_batch(
    batch: Vec<Target>,
    ctx: Ctx,
    parent: String,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    let mut permit = permit;
    let waits = expect_connections(&ctx.shared, &batch);
    if ctx.progress {
        let ids = batch.iter().map(|t| t.id).collect();
        let _ = ctx.events.send(HubEvent::Progress(Step::Launched(ids)));
    }
    let names: Vec<String> = batch.iter().map(|t| t.host.clone()).collect();
    let what = names.join(",");
    let all_connected = async {
        for w in waits {
            let _ = w.await;
        }
    };
    tokio::pin!(all_connected);
    let plan = &ctx.plan;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(plan.connect_timeout_s);
    let lose = |reason: String| lose_unconnected(&ctx, &batch, reason);
    for attempt in 1..=ATTEMPTS {
        AGENTS_LAUNCHED.store(true, std::sync::atomic::Ordering::Relaxed);
        let Some(launch) = launch::for_kind(plan.kind)
            .prepare(plan, &batch, &parent, &ctx.key)
            .into_iter()
            .next()
        else {
            return;
        };
        let started = match launch::start(launch).await {
            Ok(s) => s,
            Err(e) if kauri_host::proc::note_fd_error(&e) => {
                return lose(format!("cannot start an agent on {what}"))
            }
            Err(e) => {
                return lose(format!(
                    "cannot start an agent on {what}: {}: {e}",
                    plan.exec
                ))
            }
        };
        let mut child = started.child;
        let last = Rc::new(RefCell::new(Vec::<String>::new()));
        if let Some(err) = child.stderr.take() {
            spawn_stderr_tail(err, last.clone(), &ctx, &batch);
        }
        tokio::select! {
            _ = &mut all_connected => {
                // Running: the links report from now on. Free the launch slot; reap the
                // launcher when it ends.
                drop(permit.take());
                let _running = RunningLauncher::new();
                let _ = child.wait().await;
                return;
            }
            status = child.wait() => {
                // Give the stderr reader a moment to take the last words.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let exit = LauncherExit {
                    what: &what,
                    exec: &plan.exec,
                    tail: last.borrow().join(" / "),
                    status: status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                    attempt,
                    connected: batch_connected(&ctx.shared, &batch),
                };
                match exit.next() {
                    AfterExit::Retry(wait) => {
                        info!(%what, attempt, "sshd refused the launch; retrying in {wait:?}");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    AfterExit::Connected => return,
                    AfterExit::Failed(reason) => return lose(reason),
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                kill_launcher(&mut child).await;
                return lose(format!(
                    "agent on {what} did not connect back within {} s",
                    plan.connect_timeout_s
                ));
            }
        }
    }
}

/// Notes the launch of `batch` (for the startup profile) and returns what says, for each of
/// its agents, that it connected.
fn expect_connections(
    shared: &Shared,
    batch: &[Target],
) -> Vec<tokio::sync::oneshot::Receiver<()>> {
    let now = Instant::now();
    for t in batch {
        shared.launched_at.borrow_mut().insert(t.id, now);
    }
    let mut waits = Vec::new();
    for t in batch {
        let (tx, rx) = tokio::sync::oneshot::channel();
        shared.connect_wait.borrow_mut().insert(t.id, tx);
        waits.push(rx);
    }
    waits
}

/// Every agent of `batch` has connected.
fn batch_connected(shared: &Shared, batch: &[Target]) -> bool {
    shared.connected.borrow().len() >= batch.len()
        && batch
            .iter()
            .all(|t| shared.connected.borrow().contains(&t.id))
}

/// Reports each agent of `batch` that has not connected as lost, for `reason`.
fn lose_unconnected(ctx: &Ctx, batch: &[Target], reason: String) {
    let reason = kauri_host::proc::fd_cause(reason);
    for t in batch {
        if !ctx.shared.connected.borrow().contains(&t.id) {
            let _ = ctx.events.send(HubEvent::Lost {
                id: t.id,
                reason: reason.clone(),
            });
        }
    }
}

/// How many of a launcher's last stderr lines are kept to explain its failure.
const LAST_LINES: usize = 3;

/// Appends `line` to `last`, keeping only the last [`LAST_LINES`].
fn keep_last(last: &mut Vec<String>, line: String) {
    last.push(line);
    if last.len() > LAST_LINES {
        last.remove(0);
    }
}

/// The launcher's stderr (ssh's complaints, the agent's own messages) goes to ours; its
/// last lines, kept in `last`, explain a failure.
fn spawn_stderr_tail(
    err: tokio::process::ChildStderr,
    last: Rc<RefCell<Vec<String>>>,
    ctx: &Ctx,
    batch: &[Target],
) {
    let (out, shared) = (ctx.out.clone(), ctx.shared.clone());
    let ids: Vec<u32> = batch.iter().map(|t| t.id).collect();
    tokio::task::spawn_local(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            // Once the job is ending, what an agent that never connected says is a
            // consequence (its parent closed, say): kept for its own failure line,
            // not printed.
            let unconnected = ids.iter().any(|i| !shared.connected.borrow().contains(i));
            if shared.closing.get() && unconnected {
                keep_last(&mut last.borrow_mut(), l);
                continue;
            }
            keep_last(&mut last.borrow_mut(), l.clone());
            let _ = out
                .send(Stream::Stderr, Bytes::from(format!("{l}\n")))
                .await;
        }
    });
}

/// A launcher process that ended before all its agents connected.
struct LauncherExit<'a> {
    /// The hosts it launched on.
    what: &'a str,
    /// The launcher's program.
    exec: &'a str,
    /// Its last stderr lines, joined.
    tail: String,
    /// How it ended.
    status: String,
    /// Which attempt it was, from 1.
    attempt: u32,
    /// Its agents all connected after all.
    connected: bool,
}

/// What to do after a [`LauncherExit`].
#[derive(Debug, PartialEq)]
enum AfterExit {
    /// sshd turned the launch away: try again after this wait.
    Retry(Duration),
    /// Nothing: its agents connected (the links report from now on).
    Connected,
    /// Its agents are lost: the line for the user.
    Failed(String),
}

impl LauncherExit<'_> {
    /// sshd turning connections away under `MaxStartups` is retried, [`ATTEMPTS`] times at
    /// most, waiting longer each time; any other end of a launcher whose agents did not all
    /// connect loses them, with its last words as the reason.
    fn next(self) -> AfterExit {
        let refused = self.tail.contains("exchange_identification")
            || self.tail.contains("Connection closed by")
            || self.tail.contains("Connection reset by");
        if refused && self.attempt < ATTEMPTS {
            return AfterExit::Retry(Duration::from_millis(500 << self.attempt));
        }
        if self.connected {
            return AfterExit::Connected;
        }
        let why = if self.tail.is_empty() {
            format!("{} {}", self.exec, self.status)
        } else {
            self.tail
        };
        AfterExit::Failed(format!("cannot start an agent on {}: {why}", self.what))
    }
}

/// Kills a launcher whose agents did not connect back in time, and reaps it.
async fn kill_launcher(child: &mut tokio::process::Child) {
    // The launcher leads its own process group: take all of it.
    if let Some(pid) = child.id() {
        kauri_host::proc::signal_group(pid, libc::SIGKILL);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Set once this process has tried to start an agent: see [`agents_launched`].
static AGENTS_LAUNCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process ever tried to start an agent (a launcher run for some host). When it
/// did not, no agent of its can have been lost and left it ranks to adopt.
pub fn agents_launched() -> bool {
    AGENTS_LAUNCHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Launcher processes whose agents connected and that have not ended yet.
static RUNNING_LAUNCHERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts one launcher process in [`RUNNING_LAUNCHERS`] while it lives.
struct RunningLauncher;

impl RunningLauncher {
    fn new() -> RunningLauncher {
        RUNNING_LAUNCHERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RunningLauncher
    }
}

impl Drop for RunningLauncher {
    fn drop(&mut self) {
        if RUNNING_LAUNCHERS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            LAUNCHERS_GONE.notify_waiters();
        }
    }
}

/// Told when the last running launcher ended: [`launchers_ended`] waits for it.
static LAUNCHERS_GONE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Waits, at most `patience`, until every launcher process this process started has ended
/// (the agents it stands for said `Done` and are leaving). A resource manager's launcher
/// (`qrsh -inherit`, `srun`, `blaunch`) reports its task's end to the manager when it ends:
/// killed before that, the manager counts the task as failed (Grid Engine then fails the
/// whole job: "tightly integrated parallel task … failed - killing job").
///
/// Woken by the last one's end, not by a timer: a poll's period would be added to every
/// teardown.
pub async fn launchers_ended(patience: Duration) {
    let all_ended = async {
        loop {
            let gone = LAUNCHERS_GONE.notified();
            tokio::pin!(gone);
            // Registered before the count is read: an end in between still wakes it.
            gone.as_mut().enable();
            if RUNNING_LAUNCHERS.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            gone.await;
        }
    };
    let _ = tokio::time::timeout(patience, all_ended).await;
}

/// Accepts the next connection. An error (EMFILE or ENFILE when file descriptors run out,
/// ENOBUFS, …) is usually still there a moment later: wait before trying again, from 10 ms
/// doubling to 1 s, instead of spinning on it; the first error of a run is logged.
pub async fn accept_with_backoff<T, F, Fut>(mut accept: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<T>>,
{
    let mut wait = Duration::from_millis(10);
    loop {
        match accept().await {
            Ok(x) => return x,
            Err(e) => {
                // Out of descriptors: said once, as the cause, by whatever fails because of
                // it (kauri_host::proc::fd_cause); the retries are not news.
                let fds = kauri_host::proc::note_fd_error(&e);
                if wait == Duration::from_millis(10) && !fds {
                    warn!("cannot accept a connection: {e}; retrying");
                } else if wait == Duration::from_millis(10) {
                    debug!("cannot accept a connection: {e}; retrying");
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait for the launchers ends when the last one ends, not at the next tick of a
    /// poll (it polled every 10 ms: here it would end at 10 ms, not 3).
    #[tokio::test(start_paused = true)]
    async fn the_wait_for_launchers_ends_with_the_last_one() {
        let t0 = tokio::time::Instant::now();
        let (a, b) = (RunningLauncher::new(), RunningLauncher::new());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(a);
            tokio::time::sleep(Duration::from_millis(2)).await;
            drop(b);
        });
        launchers_ended(Duration::from_secs(10)).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(3));
    }

    /// A persistent accept error (here EMFILE, five times) is waited out with a growing
    /// pause, not retried at once in a loop that holds the thread.
    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off() {
        let calls = std::cell::Cell::new(0);
        let t0 = tokio::time::Instant::now();
        let got = accept_with_backoff(|| {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move {
                if n <= 5 {
                    Err(std::io::Error::from_raw_os_error(libc::EMFILE))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got, 6);
        // 10 + 20 + 40 + 80 + 160 ms of waiting, in the runtime's (paused) clock.
        assert!(
            t0.elapsed() >= Duration::from_millis(310),
            "retried after {:?}",
            t0.elapsed()
        );
    }

    /// Seven hosts under a root of width 3: children 1, 2 and 3, on h0, h1 and h2.
    fn three_children() -> Vec<Subtree> {
        let hosts = (0..7)
            .map(|i| kauri_plan::HostPlan {
                host: format!("h{i}"),
                node: i,
                index: i,
                ranks: Vec::new(),
            })
            .collect();
        crate::build(hosts, 3)
    }

    #[test]
    fn slurm_launches_every_agent_at_once_others_one_each() {
        let t = three_children();
        let ids = |b: &Vec<Target>| b.iter().map(|t| t.id).collect::<Vec<_>>();
        let slurm = launch_batches(&t, LauncherKind::Slurm);
        assert_eq!(
            slurm.iter().map(ids).collect::<Vec<_>>(),
            vec![vec![1, 2, 3]]
        );
        let ssh = launch_batches(&t, LauncherKind::Ssh);
        assert_eq!(
            ssh.iter().map(ids).collect::<Vec<_>>(),
            vec![vec![1], vec![2], vec![3]]
        );
        assert_eq!(ssh[1][0].host, t[1].plan.host);
    }

    /// The listening errors' lines are the ones the host printed when they were text.
    #[test]
    fn listen_errors_say_what_they_said() {
        let io = || std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let busy = "Address already in use (os error 98)";
        assert_eq!(
            ListenError::Listen(io()).to_string(),
            format!("cannot listen for agents: {busy}")
        );
        assert_eq!(ListenError::LocalAddr(io()).to_string(), busy);
    }

    /// An agent that gave its id is taken at its word; a Slurm agent is found by its host,
    /// whole or by its first label.
    #[test]
    fn a_slurm_agent_is_known_by_its_host() {
        let pending: HashMap<u32, Subtree> =
            three_children().into_iter().map(|t| (t.id, t)).collect();
        let host_of = |id: u32| pending[&id].plan.host.clone();
        assert_eq!(agent_id(&pending, 7, "anywhere").ok(), Some(7));
        assert_eq!(agent_id(&pending, u32::MAX, &host_of(2)).ok(), Some(2));
        let long = format!("{}.cluster.example", host_of(3));
        assert_eq!(agent_id(&pending, u32::MAX, &long).ok(), Some(3));
        assert_eq!(
            agent_id(&pending, u32::MAX, "x.h1").map_err(|e| e.to_string()),
            Err("no agent is expected on host x.h1".to_string())
        );
    }

    /// Each refusal reads as the line it printed when reasons were strings.
    #[test]
    fn refusals_read_as_before() {
        let io = || std::io::Error::other("bad frame");
        for (r, line) in [
            (
                Refused::OverTheLimit,
                "over the handshake limit (64 at once)",
            ),
            (Refused::NoHandshake, "it did not start with the handshake"),
            (
                Refused::ClosedInHandshake,
                "it closed the connection during the handshake",
            ),
            (
                Refused::Unreadable(io()),
                "unreadable handshake (bad frame)",
            ),
            (
                Refused::Silent(Duration::from_millis(2500)),
                "no handshake within 2.5 s",
            ),
            (Refused::WrongKey, "wrong job key"),
            (
                Refused::NoAgentOn("h1".into()),
                "no agent is expected on host h1",
            ),
            (
                Refused::NotExpected(4),
                "agent 4 is not expected (or already connected)",
            ),
            (
                Refused::Unencodable(io()),
                "cannot encode its part of the job: bad frame",
            ),
        ] {
            assert_eq!(r.to_string(), line);
        }
    }

    #[test]
    fn a_launchers_last_three_lines_are_kept() {
        let mut v = Vec::new();
        for l in ["a", "b", "c", "d", "e"] {
            keep_last(&mut v, l.to_string());
        }
        assert_eq!(v, vec!["c", "d", "e"]);
    }

    /// sshd's refusals are retried with a growing wait, but not after the last attempt; a
    /// launcher whose agents connected anyway loses nothing; else its last words (or its
    /// status when it said nothing) are the reason.
    #[test]
    fn a_launchers_end_is_retried_lost_or_nothing() {
        let exit = |tail: &str, attempt: u32, connected: bool| LauncherExit {
            what: "h1,h2",
            exec: "ssh",
            tail: tail.to_string(),
            status: "exit status: 255".to_string(),
            attempt,
            connected,
        };
        let refused = "kex_exchange_identification: Connection closed by remote host";
        assert_eq!(
            exit(refused, 1, false).next(),
            AfterExit::Retry(Duration::from_millis(1000))
        );
        assert_eq!(
            exit("Connection reset by peer", 3, true).next(),
            AfterExit::Retry(Duration::from_millis(4000))
        );
        assert_eq!(
            exit(refused, ATTEMPTS, false).next(),
            AfterExit::Failed(format!("cannot start an agent on h1,h2: {refused}"))
        );
        assert_eq!(exit("bye", 1, true).next(), AfterExit::Connected);
        assert_eq!(
            exit("", 1, false).next(),
            AfterExit::Failed("cannot start an agent on h1,h2: ssh exit status: 255".into())
        );
    }

    #[test]
    fn a_broadcast_goes_to_the_biggest_subtree_first() {
        // Width 3 over 7 hosts: 1(4,5,6), 2(7), 3.
        let t = three_children();
        assert_eq!(broadcast_order(&t), vec![1, 2, 3]);
        let reversed: Vec<Subtree> = t.into_iter().rev().collect();
        assert_eq!(broadcast_order(&reversed), vec![1, 2, 3]);
    }
}
