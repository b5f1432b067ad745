//! `kauri agent`: the per-host process of a multi-host job (an internal role, started by its
//! parent through a launcher).
//!
//! It connects back to its parent, proves it holds the job key, receives its part of the job,
//! starts its own child agents and its host's ranks, and then relays: fence contributions up
//! (its subtree's puts merged into one message), merged deltas down, output and reports up,
//! stdin, signals and teardown down. It exits when its ranks and its children are done, or at
//! once, killing its ranks, when its parent disappears.

use crate::branch::{JobBranch, Out};
use crate::hub::{Children, HubEvent};
use crate::profile::HostProfile;
use crate::{self as tree, Down, Link, Report, Up};
use bytes::Bytes;
use kauri_host::events::{self, JobTx};
use kauri_host::iofwd::Stream;
use kauri_host::node::{Host, Node, NodeEvent};
use kauri_os::clock::Clock;
use kauri_plan::{HostPlan, JobPlan, LaunchPlan, Subtree};
use std::io::BufRead;
use std::net::IpAddr;
use std::time::Duration;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

/// The command line of `kauri agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    /// `ip:port` of the parent.
    pub parent: String,
    /// The agent's id; `None` under Slurm, where the host name identifies the agent.
    pub id: Option<u32>,
    /// The host name it stands for.
    pub host: String,
    /// `--pmi-trace`: log the PMI wire trace (`KAURI_PMI_TRACE`, which a remote shell does
    /// not carry).
    pub pmi_trace: bool,
}

/// Why an agent stops before its part of the job is done; the line it prints after
/// `kauri agent on HOST: `.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Stdin cannot be read for the job key.
    #[error("cannot read the job key: {0}")]
    ReadKey(#[source] std::io::Error),
    /// No job key given.
    #[error("no job key on stdin or in the environment")]
    NoKey,
    /// The parent cannot be reached.
    #[error("cannot connect to its parent {parent}: {source}")]
    Connect {
        /// The parent's address.
        parent: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The connection has no local address.
    #[error("{0}")]
    LocalAddr(#[source] std::io::Error),
    /// The parent did not open the handshake.
    #[error("its parent did not send the handshake")]
    NoChallenge,
    /// The agent's hello cannot be sent.
    #[error("handshake: {0}")]
    Handshake(#[source] std::io::Error),
    /// The parent closed the link after the hello (a wrong key).
    #[error("its parent refused it")]
    Refused,
    /// The parent sent something else than the job.
    #[error("its parent did not send the job")]
    NoJob,
    /// The parent is gone; the agent killed its ranks.
    #[error("{0}; killed its ranks")]
    ParentGone(ParentGone),
}

/// How an agent's parent was lost.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ParentGone {
    /// Nothing came from it for this long.
    #[error("its parent was silent for {} s", .0.as_secs_f64())]
    Silent(Duration),
    /// Its link ended.
    #[error("its parent disappeared")]
    Disappeared,
}

/// The job key: from the environment (removed at once, so ranks never see it) or from the
/// first line of stdin.
fn take_key() -> Result<String, AgentError> {
    if let Ok(k) = std::env::var(kauri_launch::KEY_VAR) {
        std::env::remove_var(kauri_launch::KEY_VAR);
        return Ok(k);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(AgentError::ReadKey)?;
    let k = line.trim().to_string();
    if k.is_empty() {
        return Err(AgentError::NoKey);
    }
    Ok(k)
}

/// Runs the agent; returns its exit status.
pub async fn run(args: AgentArgs) -> i32 {
    let key = match take_key() {
        Ok(k) => k,
        Err(e) => {
            say!("kauri agent on {}: {e}", args.host);
            return 1;
        }
    };
    match serve(args.clone(), key).await {
        Ok(()) => 0,
        Err(e) => {
            say!("kauri agent on {}: {e}", args.host);
            // No teardown ran (its parent is gone, most likely): what the ranks left is the
            // keeper's to end.
            kauri_host::keeper::hand_over();
            1
        }
    }
}

async fn serve(args: AgentArgs, key: String) -> Result<(), AgentError> {
    let Some((mut agent, mut inbox)) = Agent::join(&args, key).await? else {
        // The job ended before this agent connected: nothing to start.
        return Ok(());
    };
    while !agent.branch.done() {
        match inbox.next(agent.kill_at).await {
            AgentEvent::Node(ev) => agent.on_node(ev),
            AgentEvent::Child(ev) => agent.on_child(ev),
            AgentEvent::Down(down) => agent.on_down(down)?,
            AgentEvent::KillTimer => agent.on_kill_timer(),
        }
    }
    agent.finish().await;
    inbox.until_parent_closes().await;
    Ok(())
}

/// One thing that happened, for an agent.
enum AgentEvent {
    /// Its ranks.
    Node(NodeEvent),
    /// Its child links.
    Child(HubEvent),
    /// A message from its parent, or why the parent is gone.
    Down(Result<(Down, Bytes), ParentGone>),
    /// The teardown's grace is over.
    KillTimer,
}

/// Where an agent's events come from. It holds a sender of each event channel, so neither
/// ever reads as closed (a closed channel is ready at once, every time).
struct AgentInbox {
    node: events::Receiver<NodeEvent>,
    hub: events::Receiver<HubEvent>,
    down: mpsc::UnboundedReceiver<Result<(Down, Bytes), ParentGone>>,
    _keep: (events::Sender<NodeEvent>, events::Sender<HubEvent>),
}

impl AgentInbox {
    /// The next event; `kill_at`: when the grace ends, during a teardown.
    async fn next(&mut self, kill_at: Option<Instant>) -> AgentEvent {
        tokio::select! {
            Some((_, ev)) = self.node.recv() => AgentEvent::Node(ev),
            Some((_, ev)) = self.hub.recv() => AgentEvent::Child(ev),
            down = self.down.recv() => AgentEvent::Down(
                down.unwrap_or_else(|| Err(ParentGone::Disappeared)),
            ),
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => AgentEvent::KillTimer,
        }
    }

    /// After its `Done` went up (and its side of the link was shut, a FIN): reads and drops
    /// what the parent still sends (its heartbeats) until the parent closes its end, having
    /// read `Done`, or is silent too long. A socket closed with bytes unread in its receive
    /// queue is reset by the kernel, not shut, and the reset throws away what the parent has
    /// not read yet: behind a slow reader of kauri's output, the end of the output and `Done`.
    async fn until_parent_closes(&mut self) {
        while let Some(Ok(_)) = self.down.recv().await {}
    }
}

/// An agent's part of the job, as its parent's `Spec` gave it.
struct Part {
    /// The agent's id.
    id: u32,
    /// The job.
    job: Box<JobPlan>,
    /// Its own host.
    me: HostPlan,
    /// The subtrees below it.
    children: Vec<Subtree>,
    /// How to start them.
    launch: LaunchPlan,
}

/// An agent its parent accepted: its link, its part of the job.
struct Joined {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    /// Where its parent reached it.
    my_ip: IpAddr,
    /// The agent's clock, started at the handshake.
    clock: Clock,
    part: Part,
}

/// Connects to the parent and proves the job key: the link and this agent's part of the job,
/// or `None` when the parent says the job has ended already.
async fn handshake(args: &AgentArgs, key: &str) -> Result<Option<Joined>, AgentError> {
    let sock = TcpStream::connect(&args.parent)
        .await
        .map_err(|source| AgentError::Connect {
            parent: args.parent.clone(),
            source,
        })?;
    let _ = sock.set_nodelay(true);
    let my_ip = sock.local_addr().map_err(AgentError::LocalAddr)?.ip();
    let (mut rd, mut wr) = sock.into_split();
    let id = args.id.unwrap_or(u32::MAX);
    let nonce = match tree::recv_limited::<_, Down>(&mut rd, tree::HANDSHAKE_FRAME_MAX).await {
        Ok(Some(Down::Challenge { nonce })) => nonce,
        _ => return Err(AgentError::NoChallenge),
    };
    // The agent's clock starts at its handshake: its parent moves the profile onto its
    // own clock by the moment the handshake arrived.
    let clock = Clock::start();
    let hello = Up::Hello {
        id,
        host: args.host.clone(),
        mac: tree::mac(key, &nonce, id),
    };
    tree::send(&mut wr, &hello)
        .await
        .map_err(AgentError::Handshake)?;
    let part = match tree::recv::<_, Down>(&mut rd).await {
        Ok(Some(Down::Spec {
            id,
            job,
            me,
            children,
            launch,
        })) => Part {
            id,
            job,
            me,
            children,
            launch,
        },
        Ok(Some(Down::Teardown | Down::Kill)) => return Ok(None),
        Ok(None) => return Err(AgentError::Refused),
        _ => return Err(AgentError::NoJob),
    };
    Ok(Some(Joined {
        rd,
        wr,
        my_ip,
        clock,
        part,
    }))
}

/// Where this agent's children connect to. -iface: this host's address of the interface,
/// where it has one (else `my_ip`, the address its parent reached it at).
fn children_address(job: &JobPlan, children: &[Subtree], my_ip: IpAddr) -> IpAddr {
    if let (Some(i), false) = (&job.iface, children.is_empty()) {
        match kauri_os::iface::address(i) {
            Ok(ip) => return ip,
            Err(e) => debug!("-iface {i}: {e}; the children connect to {my_ip}"),
        }
    }
    my_ip
}

/// This host's ranks, started or not.
struct Ranks {
    /// The ranks, when they started.
    node: Option<Node>,
    /// Why they did not.
    error: Option<String>,
    /// When their fork began and ended (on the agent's clock), when they started.
    fork: Option<(u64, u64)>,
}

impl Ranks {
    /// The report of this start, for the root.
    fn report(&self, host: &str) -> Report {
        Report::NodeStarted {
            host: host.to_string(),
            error: self.error.clone(),
            procs: self
                .node
                .as_ref()
                .map(|n| n.procs.clone())
                .unwrap_or_default(),
        }
    }
}

/// Starts this host's ranks, timing the fork on `clock`; not when rank 0 runs here and the
/// job's `MASTER_PORT` is taken here.
async fn start_ranks(
    job: &JobPlan,
    me: &HostPlan,
    events: JobTx<NodeEvent>,
    out: kauri_host::iofwd::OutputSender,
    clock: Clock,
) -> Ranks {
    let host = &me.host;
    // MASTER_PORT was free where the front end runs; check it where rank 0 runs.
    let port_taken = match &job.master {
        Some((_, port)) if me.ranks.iter().any(|r| r.rank == 0) => {
            std::net::TcpListener::bind(("0.0.0.0", *port))
                .err()
                .map(|e| format!("MASTER_PORT {port} is not free on {host}: {e}"))
        }
        _ => None,
    };
    let fork_start = clock.now();
    let node = match port_taken {
        Some(e) => Err(e),
        None => Node::start(job, me, events, out)
            .await
            .map_err(|e| e.to_string()),
    };
    let forked = clock.now();
    match node {
        Ok(n) => Ranks {
            node: Some(n),
            error: None,
            fork: Some((fork_start, forked)),
        },
        Err(e) => Ranks {
            node: None,
            error: Some(kauri_host::proc::fd_cause(e)),
            fork: None,
        },
    }
}

/// Reads the parent's link in a task of its own: its messages, then why it ended. The
/// link's liveness: a parent silent too long is a parent gone.
fn listen_to_parent(
    mut rd: OwnedReadHalf,
    silence: Option<Duration>,
) -> mpsc::UnboundedReceiver<Result<(Down, Bytes), ParentGone>> {
    if let Some(s) = silence {
        tree::link::keepalive(rd.as_ref(), s, tree::link::End::Child);
    }
    let (down_tx, down_rx) = mpsc::unbounded_channel::<Result<(Down, Bytes), ParentGone>>();
    tokio::task::spawn_local(async move {
        let mut frames = tree::FrameReader::default();
        loop {
            let read = frames.next::<_, Down>(&mut rd, tree::FRAME_MAX);
            let next = match silence {
                Some(s) => match tokio::time::timeout(s, read).await {
                    Ok(r) => r,
                    Err(_) => {
                        let _ = down_tx.send(Err(ParentGone::Silent(s)));
                        break;
                    }
                },
                None => read.await,
            };
            match next {
                Ok(Some(m)) => {
                    if down_tx.send(Ok(m)).is_err() {
                        break;
                    }
                }
                _ => {
                    let _ = down_tx.send(Err(ParentGone::Disappeared));
                    break;
                }
            }
        }
    });
    down_rx
}

/// An agent with its part of the job: its [`Branch`], its link to its parent, its kill
/// timer. Each event is one method; what the branch hands up goes to the parent.
struct Agent {
    host: String,
    branch: JobBranch,
    /// The link to the parent (control messages go before queued output).
    up: Link,
    /// The task writing that link.
    writer: tokio::task::JoinHandle<()>,
    /// The task sending the link's heartbeat.
    heartbeat: tokio::task::JoinHandle<()>,
    /// When the ranks get SIGKILL, once the teardown began.
    kill_at: Option<Instant>,
    /// Between the teardown's SIGTERM and SIGKILL.
    grace: Duration,
    /// The agent's clock: the branch's `now`.
    clock: Clock,
}

impl Agent {
    /// Connects to the parent, proves the job key, takes its part of the job, and starts its
    /// children and its ranks. `None` when the parent says the job has ended already.
    async fn join(
        args: &AgentArgs,
        key: String,
    ) -> Result<Option<(Agent, AgentInbox)>, AgentError> {
        let Some(joined) = handshake(args, &key).await? else {
            return Ok(None);
        };
        let Joined {
            rd,
            wr,
            my_ip,
            clock,
            part,
        } = joined;
        let (my_id, job, me) = (part.id, part.job, part.me);
        let (children, launch) = (part.children, part.launch);
        let host = me.host.clone();
        debug!(%host, ranks = me.ranks.len(), children = children.len(), "agent starting");
        let my_ip = children_address(&job, &children, my_ip);
        let (every, silence) = (launch.heartbeat(), launch.silence());
        let prof = job.profile.then(|| HostProfile {
            ranks: me.ranks.len() as u32,
            ..HostProfile::new(my_id, &host)
        });

        // The link up: control messages first, the ranks' output in runs.
        let (up, queue) = tree::link();
        let (out_tx, out_rx) = kauri_host::iofwd::output_queue();
        let writer = tokio::task::spawn_local(queue.write(wr, None, Some(out_rx)));
        // Beating from now on: starting the children and the ranks may take a while.
        let heartbeat =
            tokio::task::spawn_local(tree::link::beat(up.clone(), Up::Heartbeat, every));
        let report = |r: Report| {
            up.send(&Up::Reports(vec![r]));
        };

        let (hub_tx, hub_rx) = events::channel();
        let kids = Children::start(
            children,
            (*job).clone(),
            launch,
            key,
            my_ip,
            JobTx::new(0, hub_tx.clone()),
            out_tx.clone(),
        )
        .await;
        let kids = kids.unwrap_or_else(|e| {
            report(Report::Failed {
                reason: format!("agent on {host}: {e}"),
            });
            Children::none()
        });
        let (node_tx, node_rx) = events::channel();
        let ranks = start_ranks(&job, &me, JobTx::new(0, node_tx.clone()), out_tx, clock).await;
        report(ranks.report(&host));
        let mut node = ranks.node;
        if let Some(n) = node.as_mut() {
            let up = up.clone();
            n.tell_stdin_taken(move |n| {
                up.send(&Up::StdinTaken(n));
            });
        }
        let origin = clock.origin();
        let mut branch = JobBranch::new(my_id, host.clone(), node, kids, true, origin, prof);
        if job.fault_tolerant {
            branch.tolerate_failures();
        }
        if job.progress {
            branch.show_progress();
        }
        if let Some((start, end)) = ranks.fork {
            branch.profile_fork(start, end);
        }
        let agent = Agent {
            host,
            branch,
            up,
            writer,
            heartbeat,
            kill_at: None,
            grace: Duration::from_millis(job.kill_grace_ms),
            clock,
        };
        let inbox = AgentInbox {
            node: node_rx,
            hub: hub_rx,
            down: listen_to_parent(rd, silence),
            _keep: (node_tx, hub_tx),
        };
        Ok(Some((agent, inbox)))
    }

    fn send(&self, out: Option<Out>) {
        match out {
            Some(Out::Up(m)) => {
                self.up.send(&m);
            }
            Some(Out::Refused { line }) => {
                let line = format!("kauri: {line}\n");
                self.up.send(&Up::Output {
                    stream: Stream::Stderr,
                    file: None,
                    data: line.into_bytes(),
                });
            }
            None => {}
        }
    }

    fn on_node(&mut self, ev: NodeEvent) {
        let out = self.branch.on_node(ev, self.clock.now());
        self.send(out);
        self.send_deferred();
    }

    fn on_child(&mut self, ev: HubEvent) {
        let out = self.branch.on_child(ev);
        self.send(out);
        self.send_deferred();
    }

    fn send_deferred(&mut self) {
        while let Some(out) = self.branch.take_deferred() {
            self.send(Some(out));
        }
    }

    /// A message from the parent, or why it is gone, which ends the agent.
    fn on_down(&mut self, down: Result<(Down, Bytes), ParentGone>) -> Result<(), AgentError> {
        let (msg, frame) = match down {
            Ok(m) => m,
            Err(why) => {
                // Nobody can use this part of the job any more.
                self.branch.kill();
                return Err(AgentError::ParentGone(why));
            }
        };
        if msg == Down::Teardown {
            if self.branch.teardown() {
                self.kill_at = Some(Instant::now() + self.grace);
            }
            return Ok(());
        }
        let stacks = matches!(msg, Down::Status { stacks: true });
        let out = self.branch.on_down(msg, frame, self.clock.now());
        match out {
            // The stacks take a while: the answer goes up when they are taken.
            Some(Out::Up(Up::Status(mine))) if stacks => {
                let up = self.up.clone();
                tokio::task::spawn_local(async move {
                    let mut all = Vec::with_capacity(mine.len());
                    for h in mine {
                        all.push(crate::status::add_stacks(h).await);
                    }
                    up.send(&Up::Status(all));
                });
            }
            out => self.send(out),
        }
        Ok(())
    }

    fn on_kill_timer(&mut self) {
        self.kill_at = None;
        if let Some(n) = self.branch.node() {
            n.signal(libc::SIGKILL);
        }
    }

    /// Every rank here and below has ended: the rest of the output, the profile, `Done`.
    async fn finish(mut self) {
        let host = self.host.clone();
        debug!(%host, "agent done");
        self.branch.drain().await;
        debug!(%host, "agent drained");
        // Its ranks are reaped and swept: the keeper is killed now, its exit overlapping the
        // rest of the end (reaped as the agent leaves).
        kauri_host::keeper::dismiss();
        // Before Done: a fork-launched agent dies with its parent, which may leave right after.
        kauri_proto::pmix::shutdown();
        if let Some((p, mut below)) = self.branch.take_profile() {
            let mut all = vec![p];
            all.append(&mut below);
            self.up.send(&Up::Profile(all));
        }
        self.heartbeat.abort();
        self.send(self.branch.last_refusals());
        self.up.finish(&Up::Done);
        let Agent {
            writer, branch, up, ..
        } = self;
        // The output's senders go with the branch (its hub's launch tasks keep theirs until
        // those end; Done does not wait for them).
        drop((branch, up));
        let _ = writer.await;
        debug!(%host, "agent leaving");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error's line is the one the agent printed when it was built as text.
    #[test]
    fn every_line_is_the_old_one() {
        let io = || std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        let refused = "Connection refused (os error 111)";
        for (e, line) in [
            (
                AgentError::ReadKey(io()),
                format!("cannot read the job key: {refused}"),
            ),
            (
                AgentError::NoKey,
                "no job key on stdin or in the environment".into(),
            ),
            (
                AgentError::Connect {
                    parent: "10.0.0.1:7000".into(),
                    source: io(),
                },
                format!("cannot connect to its parent 10.0.0.1:7000: {refused}"),
            ),
            (AgentError::LocalAddr(io()), refused.into()),
            (
                AgentError::NoChallenge,
                "its parent did not send the handshake".into(),
            ),
            (AgentError::Handshake(io()), format!("handshake: {refused}")),
            (AgentError::Refused, "its parent refused it".into()),
            (AgentError::NoJob, "its parent did not send the job".into()),
            (
                AgentError::ParentGone(ParentGone::Silent(Duration::from_millis(2500))),
                "its parent was silent for 2.5 s; killed its ranks".into(),
            ),
            (
                AgentError::ParentGone(ParentGone::Disappeared),
                "its parent disappeared; killed its ranks".into(),
            ),
        ] {
            assert_eq!(e.to_string(), line);
        }
    }
}
