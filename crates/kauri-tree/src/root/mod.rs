//! The front end: the root of the tree, one per job, where the user typed the command.
//!
//! It turns the [`JobSpec`] into a plan (hosts, placement, process mapping, each segment's
//! environment), runs the ranks of its own host through a [`Node`], starts the agents of the
//! other hosts through a launcher ([`Children`]), completes fences (its own ranks' puts and
//! one merged contribution per child), prints the output the tree forwards, forwards stdin and
//! signals, watches for failure, tears the job down, and computes the exit status.
//!
//! On one host it is the whole tree: no agent process, no TCP.
//!
//! It runs on a single-threaded tokio runtime: one thread owns every engine (no locks); the
//! ranks of its host are started by a thread of their own (`kauri_host::spawn`).

mod cluster;
mod end;
mod inbox;
mod progress;
mod reports;
mod services;
mod start;
mod status;

use cluster::who;
use inbox::{print_output, read_stdin, StdinCredit};
use kauri_plan::build::{env_secs, launch_cost, omp_threads_set, plan};
use kauri_plan::spawn::{plan_spawn, Cluster};
use start::start_job;
pub use start::{prepare_run, Prepared};

use crate::branch::{JobBranch, Links, Out};
use crate::hub::{Children, HubEvent};
use crate::policy::{self, Ending, ExitVerdict};
use crate::profile::{HostProfile, JobProfile, ProfileFormat, RootFence};
use crate::{self as tree, HostStatus, Report, Up};
use bytes::Bytes;
use kauri_host::events::{self, JobTx};
use kauri_host::iofwd::{Dest, Stream};
use kauri_host::node::{Host, Node, NodeEvent};
use kauri_host::output::Files;
use kauri_host::proc;
use kauri_os::clock::Clock;
use kauri_os::hostname::local_host;
use kauri_plan::job::{JobSpec, Wiring};
use kauri_plan::{HostPlan, JobPlan};
use kauri_proto::kvs::Delta;
use kauri_proto::nameserver::Waiting;
use kauri_proto::pmix::Failure;
use kauri_proto::rank::RankEnd;
use kauri_proto::service::{Refused, Service, ServiceReply, SpawnDone, Wait};
use pmi_wire::SpawnCommand;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info};

pub use crate::policy::STATUS_LAUNCHER;

/// What the front end knows of a rank.
#[derive(Debug, Clone, Default)]
struct RankState {
    /// Its host: the plan's, then the one that reported its end.
    host: String,
    /// How it ended, as its host reported it; `None` while it runs.
    end: Option<RankEnd>,
    /// It ended with the job (or its job was discarded): its end counts for nothing.
    during_teardown: bool,
    /// Its host reported that it finished the PMI handshake (until it ends: then its end
    /// says, [`RankState::initialized`]).
    told_initialized: bool,
    /// It closed its PMI connection without finalize and runs on: it uses PMI no more.
    left_pmi: bool,
}

impl RankState {
    /// It finished the PMI handshake: as its end says once it ended, else as its host told.
    fn initialized(&self) -> bool {
        self.end.map_or(self.told_initialized, |e| e.initialized)
    }

    /// It ended after calling finalize.
    fn finalized(&self) -> bool {
        self.end.is_some_and(|e| e.finalized)
    }

    /// It ended, having run as an Open MPI singleton.
    fn ran_alone(&self) -> bool {
        self.end.is_some_and(|e| e.ran_alone)
    }

    /// Its end was reported.
    fn ended(&self) -> bool {
        self.end.is_some()
    }
}

/// One job of this run: the one the user started (index 0) or one a rank spawned.
struct JobRun {
    plan: JobPlan,
    /// This host's part of the job's tree: its ranks here, its agents, its gathers.
    branch: JobBranch,
    ranks: Vec<RankState>,
    /// The index in the job list of the job that spawned this one.
    spawner: Option<usize>,
    /// Agents that have not yet said whether their ranks started.
    starting: usize,
    /// For a spawned job: whom to answer once every host has started its ranks.
    answer: Option<Asker>,
    /// Why the start failed, when it did.
    start_error: Option<String>,
    /// A spawned job that failed to start and was killed: its ranks' ends count for nothing.
    discarded: bool,
    /// Its ranks started so far, for the debugger's process table (the first job's; taken
    /// when the table is filled).
    procs: Vec<kauri_host::mpir::Proc>,
    /// Its ranks that died while it went on (`-disable-auto-cleanup`), in order: the value of
    /// `PMI_dead_processes` on every host.
    dead: Vec<usize>,
}

/// A job in the run's list, whose index is the job's number for good: running (or ended and
/// not given back yet), or released.
enum Job {
    Live(Box<JobRun>),
    /// A spawned job that ended while the run went on and gave back what it held
    /// ([`Root::release_if_done`]).
    Released(Released),
}

/// What a released job keeps, whatever its plan held: its name and size (for a namespace a
/// rank still names) and its ranks that failed (for the exit status, usually none).
struct Released {
    kvsname: Box<str>,
    size: usize,
    failed: Vec<(usize, RankState)>,
}

/// Who asked for a service: a job, the agent of that job's tree (0: the front end's host),
/// the request's id there.
#[derive(Debug, Clone, Copy)]
struct Asker {
    job: usize,
    agent: u32,
    req: u64,
}

/// How long the hang diagnosis waits for the hosts' answers.
const STATUS_WAIT: Duration = Duration::from_secs(2);

/// How long it waits when the hosts take their stuck ranks' stacks.
const STACKS_WAIT: Duration = Duration::from_secs(25);

/// At most this many ranks are listed one per line; the rest are counted by state.
const STATUS_LINES: usize = 32;

/// A hang diagnosis under way.
struct StatusRound {
    /// When it prints what it has.
    due: Instant,
    /// How many hosts' answers it waits for.
    want: usize,
    /// The answers so far, with their job's index.
    got: Vec<(usize, HostStatus)>,
    /// Who waits for it.
    for_whom: Vec<Asked>,
}

/// The agent id a direct-modex request carries when the front end asks one job's tree for
/// the data of a rank on behalf of another job's (see [`Root::cross_dmodex`]).
const CROSS_JOB: u32 = u32::MAX - 1;

/// A PMIx collective over several jobs (or part of one) at the front end: which ranks it
/// waits for, which have come, and their contributions.
#[derive(Debug, Default)]
struct Collective {
    /// The participants: (job, rank).
    want: std::collections::HashSet<(usize, usize)>,
    /// Those whose server contributed.
    have: std::collections::HashSet<(usize, usize)>,
    /// The jobs that take part (their trees get the result).
    jobs: std::collections::BTreeSet<usize>,
    /// The contributions so far, concatenated.
    data: Vec<u8>,
    /// Why it cannot complete (a participant of no job of this run).
    failed: Option<String>,
    /// Some participant's server asked for a context id (a group construct).
    context_id: bool,
}

/// Who asked for a hang diagnosis.
enum Asked {
    /// `MPIEXEC_TIMEOUT` fired: print it, then end the job.
    Timeout,
    /// `SIGUSR1` to kauri: print it; the job goes on.
    Signal,
    /// `kauri --status` from another shell: send it there.
    Client(tokio::sync::oneshot::Sender<Vec<String>>),
}

/// What an attempt of a job that restarts tells the kauri that supervises it.
struct AttemptLog {
    /// Restarts before this attempt, and allowed.
    restart: (u32, u32),
    /// The report file.
    report: Option<String>,
    /// The first failure's line.
    why: Option<String>,
    /// The hosts lost.
    lost: Vec<String>,
}

/// The channels every job's events flow into, each event tagged with its job.
struct Wires {
    node: mpsc::UnboundedSender<(usize, NodeEvent)>,
    hub: mpsc::UnboundedSender<(usize, HubEvent)>,
    out: kauri_host::iofwd::OutputSender,
}

/// The run's name service: a table of its own, or a shared `kauri nameserver`.
enum Names {
    Own(kauri_proto::nameserver::Table),
    Server(kauri_proto::nameserver::Client),
}

/// Runs a job `prepared` planned (and may have started: [`prepare_run`], called before the
/// runtime) and returns kauri's exit status.
pub async fn run(spec: JobSpec, prepared: Prepared) -> i32 {
    let (mut root, mut inbox) = match Root::start(&spec, prepared).await {
        Ok(started) => started,
        Err(status) => return status,
    };
    while !root.done() {
        let event = inbox.next(root.timers()).await;
        root.on_event(event);
        root.serve_requests().await;
    }
    root.finish().await
}

/// One thing that happened, for the root.
enum Event {
    /// Job `j`'s ranks on this host.
    Node(usize, NodeEvent),
    /// Job `j`'s child links.
    Child(usize, HubEvent),
    /// The shared name server answered.
    Reply(Asker, ServiceReply),
    /// Input for rank 0 of the first job (`None`: its end).
    Stdin(Option<Vec<u8>>),
    /// kauri's stdout or stderr is closed (`Ending::OutputClosed`), or an output file failed
    /// (`Ending::Failed`).
    Output(Ending),
    /// A signal to kauri.
    Signal(i32),
    /// `MPIEXEC_TIMEOUT` ran out.
    Timeout,
    /// The teardown's grace is over.
    KillTimer,
    /// The agents had their time to answer after the kill.
    GiveUp,
    /// The hosts had their time to say where their ranks are.
    StatusDue,
    /// `kauri --status` from another shell.
    StatusAsk(crate::status::Ask),
    /// The progress line is due (`-v`).
    Progress,
    /// Job `j`'s ranks here, with their stacks taken.
    OwnStatus(usize, HostStatus),
}

/// The root's timers, as the inbox waits on them.
#[derive(Debug, Clone, Copy)]
struct Timers {
    /// `MPIEXEC_TIMEOUT` still counts (it fires once).
    timing: bool,
    /// When the grace ends, during a teardown.
    kill_at: Option<Instant>,
    /// When the root stops waiting for agents that have not answered the kill.
    leave_at: Option<Instant>,
    /// When the hang diagnosis prints what it has, during one.
    status_at: Option<Instant>,
    /// When the progress line of the phases under way is due (`-v`).
    progress_at: Option<Instant>,
}

/// Where the root's events come from: its channels, its signals, its timers. It only
/// receives; the root decides.
struct Inbox {
    node: events::Receiver<NodeEvent>,
    hub: events::Receiver<HubEvent>,
    replies: mpsc::UnboundedReceiver<(Asker, ServiceReply)>,
    stdin: mpsc::Receiver<Option<Vec<u8>>>,
    closed: mpsc::UnboundedReceiver<Ending>,
    signals: Vec<(i32, tokio::signal::unix::Signal)>,
    deadline: Option<Instant>,
    /// Requests from `kauri --status`.
    asks: mpsc::UnboundedReceiver<crate::status::Ask>,
    /// This host's own answers with stacks, once taken.
    own: mpsc::UnboundedReceiver<(usize, HostStatus)>,
}

/// One of kauri's two output streams, as the ranks' lines reach it: written until a write
/// fails (its reader closed it), then never again. Both streams are handled alike: the first
/// failure ends the job with SIGPIPE's status (`Ending::OutputClosed`), as Hydra's death by
/// SIGPIPE does; the lines after it are read from the ranks and dropped.
///
/// Where a write cannot block the loop it is made at once, on this thread
/// ([`Terminal::direct`]); otherwise it goes through tokio's stream, whose writes run on a
/// thread of the blocking pool (one more thread started, the first time).
struct Terminal<W> {
    stream: W,
    open: bool,
    /// The descriptor under `stream` (1 or 2), and how it may be written directly.
    fd: std::os::fd::RawFd,
    direct: Direct,
}

/// Whether a [`Terminal`]'s descriptor can be written without going through the blocking
/// pool, by what it is (`fstat`, once).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Direct {
    /// A regular file or `/dev/null`: a write never waits for a reader.
    Always,
    /// A pipe: a write of at most `PIPE_BUF` bytes when `poll` says it has room takes it
    /// whole at once.
    WhenRoom,
    /// A terminal, a socket, anything else: never (a terminal stopped by `^S` would block
    /// the loop).
    Never,
}

/// The root of the run: every job's [`Branch`] on this host, the run's hosts and name service,
/// and the teardown state. Each event is one method; the loop in [`run`] only dispatches.
struct Root {
    jobs: Vec<Job>,
    /// The drains of spawned jobs that ended while the run goes on (their last output, what
    /// their ranks left behind); awaited at the end, finished ones pruned as new ones come.
    draining: Vec<tokio::task::JoinHandle<()>>,
    cluster: Cluster,
    names: Names,
    /// Lookups waiting for a name nobody published yet (the run's own table).
    waiting: Waiting<(Asker, Option<String>)>,
    wires: Wires,
    svc_tx: mpsc::UnboundedSender<(Asker, ServiceReply)>,
    /// Requests for the root, served after the event that brought them (a spawn starts a job,
    /// which waits).
    requests: Vec<(Asker, Service)>,
    /// Direct-modex requests for a rank of another job than the asker's, by the id the
    /// other job's tree knows them by: (the asker's job, agent, request id).
    cross_dmodex: std::collections::HashMap<u64, (usize, u32, u64)>,
    /// PMIx collectives over several jobs or part of one, by signature.
    collectives: std::collections::HashMap<String, Collective>,
    /// The last context id given to a PMIx group (0: none yet; Open MPI's predefined
    /// communicators have context id 0, so the first is 1).
    next_context_id: u64,
    ending: Option<Ending>,
    /// When the ranks get SIGKILL, once the teardown began.
    kill_at: Option<Instant>,
    grace: Duration,
    /// How long the root waits for the agents' `Done` after the kill.
    answer_wait: Duration,
    /// When it stops waiting, once the kill was sent.
    leave_at: Option<Instant>,
    /// `MPIEXEC_TIMEOUT` fired.
    timed_out: bool,
    /// The root stopped waiting for agents that never answered.
    gave_up: bool,
    /// A host was lost and the job went on without it (`-disable-auto-cleanup`).
    lost: bool,
    /// This run is one attempt of a job that restarts: where it says how it ended
    /// ([`kauri_plan::job::AttemptEnd`]), what failed first, and the hosts it lost.
    attempt: Option<AttemptLog>,
    /// The hang diagnosis under way: the hosts' answers so far.
    status: Option<StatusRound>,
    /// Where this host's answers with stacks go, once taken.
    own_status: mpsc::UnboundedSender<(usize, HostStatus)>,
    /// `-timeout-stacks`: a timeout's diagnosis has the stuck ranks' stacks.
    timeout_stacks: bool,
    /// How much stdin may still be read for the first job's rank 0 on another host.
    stdin_credit: StdinCredit,
    /// The socket `kauri --status` asks through (none when it could not be made).
    _status_socket: Option<crate::status::Listener>,
    /// `MASTER_PORT`'s reservation (`-ml-env`): no other kauri job takes the port while this
    /// run lives.
    _master_port: Option<kauri_os::ports::Reservation>,
    /// The command line, for `kauri --status`.
    command: String,
    auto_cleanup: bool,
    /// `-with-ft`: a lost host's ranks are aborted processes to PMIx clients, and neither a
    /// rank killed by a signal nor a lost host fails the exit status ([`policy::tolerated`]).
    fault_tolerant: bool,
    /// `MPIEXEC_TIMEOUT`, for its message.
    timeout: Option<Duration>,
    clock: Clock,
    /// The startup profile's format and every fence the root completed, when it is recorded.
    profile: Option<(ProfileFormat, Vec<RootFence>)>,
    /// The first job's start so far, for the progress lines (`-v`).
    progress: Option<crate::progress::Progress>,
    /// How surely the first job uses an MPI ([`kauri_plan::build::wiring`]).
    mpi: kauri_plan::job::MpiSign,
    /// A rank ran as an Open MPI singleton and ended the run, with its own line: the end's
    /// report adds none ([`policy::never_wired`]).
    singleton_seen: bool,
    /// `-print-all-exitcodes`: the end lists every rank's exit status.
    print_exit_codes: bool,
    /// The tree's shape, in words, for the profile.
    tree: String,
    /// The output printer and the signal that stops it once everything is sent.
    printer: Option<(
        tokio::task::JoinHandle<bool>,
        tokio::sync::oneshot::Sender<()>,
    )>,
}

impl Root {
    /// The job the user started, which is never released.
    fn first(&mut self) -> &mut JobRun {
        self.jobs[0]
            .live_mut()
            .expect("the first job is never released")
    }

    /// Job `j`'s record while it is not released.
    fn live_mut(&mut self, j: usize) -> Option<&mut JobRun> {
        self.jobs.get_mut(j).and_then(Job::live_mut)
    }

    /// Every job's ranks have ended, here and below, and every agent said `Done`; or the
    /// root stopped waiting for the agents that never answered the kill.
    fn done(&self) -> bool {
        self.gave_up
            || self
                .jobs
                .iter()
                .filter_map(Job::live)
                .all(|j| j.branch.done())
    }

    /// What the inbox waits for besides messages.
    fn timers(&self) -> Timers {
        Timers {
            timing: !self.timed_out,
            kill_at: self.kill_at,
            leave_at: self.leave_at,
            status_at: self.status.as_ref().map(|s| s.due),
            progress_at: self.progress_due(),
        }
    }

    /// Dispatches one event.
    fn on_event(&mut self, event: Event) {
        match event {
            Event::Node(j, ev) => {
                self.on_node(j, ev);
                self.release_if_done(j);
            }
            Event::Child(j, ev) => {
                self.on_child(j, ev);
                self.release_if_done(j);
            }
            Event::Reply(a, reply) => self.answer(a, reply),
            Event::Stdin(chunk) => self.first().branch.stdin(chunk),
            Event::Output(e) => self.teardown(e),
            Event::Signal(sig) => self.on_signal(sig),
            Event::Timeout => self.on_timeout(),
            Event::KillTimer => self.on_kill_timer(),
            Event::GiveUp => self.give_up(),
            Event::StatusDue => self.print_status(),
            Event::StatusAsk(ask) => {
                self.diagnose(Asked::Client(ask.reply), ask.stacks);
            }
            Event::OwnStatus(j, h) => self.status_answer(j, vec![h]),
            Event::Progress => self.progress_tick(),
        }
    }

    /// A spawned job whose ranks have all ended, here and below, gives back what it holds
    /// while the run goes on: its ranks' node (their PMI engine and KVS, output pipes, PMI
    /// sockets) is drained and dropped, its agents' listener closed, and its record (plan,
    /// branch, ranks) replaced by a [`Released`] one: its name, its size and its failed
    /// ranks (for the exit status), the same few dozen bytes for every job. Hydra
    /// also frees a spawned process group's KVS when its proxies end: a later `get` from its
    /// kvsname finds nothing.
    fn release_if_done(&mut self, j: usize) {
        let Some(slot) = self.jobs.get_mut(j).filter(|_| j > 0) else {
            return;
        };
        if !slot.live().is_some_and(|job| job.branch.done()) {
            return;
        }
        let failed = slot
            .rank_states()
            .into_iter()
            .filter(|(_, s)| {
                s.end
                    .is_some_and(|e| policy::rank_failure(e.code, e.signal).is_some())
                    && !s.during_teardown
            })
            .collect();
        let released = Job::Released(Released {
            kvsname: slot.kvsname().into(),
            size: slot.size(),
            failed,
        });
        let Job::Live(mut job) = std::mem::replace(slot, released) else {
            return;
        };
        let refused = job.branch.last_refusals();
        // Its output files are closed once its last output is written (a remote host's came
        // before its `Done`; this host's comes with the drain).
        let plan = &job.plan;
        let files: Vec<std::sync::Arc<str>> =
            kauri_host::output::files_of_job(&plan.output, plan.size, |r| {
                let n = plan.rank_node[r];
                (n, plan.hosts[n as usize].as_str())
            })
            .into_iter()
            .map(|(path, _)| path.into())
            .collect();
        let node = job.branch.take_node();
        if node.is_some() || !files.is_empty() {
            let out = self.wires.out.clone();
            self.draining.retain(|d| !d.is_finished());
            self.draining.push(tokio::task::spawn_local(async move {
                if let Some(node) = node {
                    node.release().await;
                }
                for path in files {
                    let close = kauri_host::iofwd::Dest {
                        stream: kauri_host::iofwd::Stream::Stdout,
                        file: Some(path),
                        close: true,
                    };
                    let _ = out.send(close, Bytes::new()).await;
                }
            }));
        }
        drop(job);
        self.on_out(j, refused);
    }
}
