//! Starting one host's ranks: their programs, environments, binding, PMI sockets and
//! PMIx server, and their starts.

use super::conn::{accept_pmi, RankSock};
use super::poll::serve_conn;
use super::{abandon, rank_ended, Ctx, Node, NodeEvent, PmixState, ShmDir, PMIX_REQUESTS};
use crate::error::{NodeError, SingletonError, TopologyError};
use crate::events::JobTx;
use crate::gpu::Placed;
use crate::iofwd;
use crate::iofwd::Stream;
use crate::output::Route;
use crate::proc::{self, Launch};
use crate::spawn::Starts;
use kauri_core::plan::rank_env::{rank_env, HostFacts, PmiSocket, RankSeat, VADER_DIR_VAR};
use kauri_core::plan::{Adopt, AppPlan, HostPlan, JobPlan, RankPlan};
use kauri_proto::pmi::{ConnId, Engine, JobInfo};
use kauri_proto::pmix::{self, Upcall};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

/// The longest a singleton may take to answer the `singinit` exchange.
const SINGINIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Connects to a singleton (a program started without a launcher that ran
/// `kauri -pmi_args …`) and completes MPICH's `singinit` exchange: kauri says `singinit`, the
/// program answers `singinit` with its PMI version, kauri answers `singinit_info` with the
/// job's kvsname and no stdio forwarding (the program keeps its own stdio). The program then
/// speaks PMI-1 on the same connection, starting with `init`.
async fn singinit(a: &Adopt, kvsname: &str) -> Result<tokio::net::TcpStream, SingletonError> {
    let pid = a.pid;
    let io = |source| SingletonError::Io { pid, source };
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(&a.addr)
            .await
            .map_err(|source| SingletonError::Connect {
                pid,
                addr: a.addr.clone(),
                source,
            })?;
        let _ = s.set_nodelay(true);
        s.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=1 stdio=no authtype=none\n")
            .await
            .map_err(io)?;
        // One line, read byte by byte: the program sends nothing more until it has our answer.
        let mut line = Vec::new();
        loop {
            let mut b = [0u8; 1];
            match s.read(&mut b).await {
                Ok(0) => return Err(SingletonError::Closed { pid }),
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) if line.len() < 1024 => line.push(b[0]),
                Ok(_) => return Err(SingletonError::LongLine { pid }),
                Err(e) => return Err(io(e)),
            }
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
        };
        if field("cmd") != Some("singinit") {
            return Err(SingletonError::NotSinginit { pid, line });
        }
        if let Some(auth) = field("authtype").filter(|&t| t != "none") {
            return Err(SingletonError::Authentication {
                pid,
                auth: auth.to_string(),
            });
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
        .map_err(io)?;
        if versionok == "no" {
            return Err(SingletonError::Version { pid, line });
        }
        Ok(s)
    };
    tokio::time::timeout(SINGINIT_TIMEOUT, exchange)
        .await
        .map_err(|_| SingletonError::Timeout {
            pid,
            secs: SINGINIT_TIMEOUT.as_secs(),
        })?
}

impl PmixState {
    /// A PMIx job's state on this host before anything happened: namespace `nspace`, its
    /// upcalls coming on `upcall_tx`.
    pub(super) fn new(nspace: String, upcall_tx: mpsc::UnboundedSender<Upcall>) -> PmixState {
        PmixState {
            upcall_tx,
            next_req: PMIX_REQUESTS,
            spawns: HashMap::new(),
            terminates: HashMap::new(),
            queries: HashMap::new(),
            plans_asked: HashMap::new(),
            connects: HashMap::new(),
            collectives: HashMap::new(),
            foreign: Vec::new(),
            nspace,
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
        }
    }
}

/// A job's PMIx on this host, offered before its ranks start ([`offer_pmix`]): each local
/// rank's variables, and the channel of the namespace's upcalls.
pub(super) struct PmixOffer {
    env: HashMap<usize, Vec<(String, String)>>,
    tx: mpsc::UnboundedSender<Upcall>,
    rx: mpsc::UnboundedReceiver<Upcall>,
}

/// Offers the job PMIx on this host ([`pmix::offer`]: the server library starts later, when
/// a client knocks, or when [`Node::start`] starts it for a job of Open MPI), with each
/// local rank's CPUs (`cpus_of`, by local id), which the server tells the ranks.
fn offer_pmix(
    job: &JobPlan,
    me: &HostPlan,
    cpus_of: &[Vec<usize>],
) -> Result<PmixOffer, NodeError> {
    let on = |source| NodeError::PmixOffer {
        host: me.host.clone(),
        source,
    };
    if let Err(e) = pmix::ffi::choose_library(job.pmix_library.as_deref()) {
        tracing::warn!(job = %job.kvsname, "{e}: the job is served by it");
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let given = pmix::offer(job, me, cpus_of, tx.clone()).map_err(on)?;
    let places = pmix::places(&job.kvsname, me.node).map_err(on)?;
    let mut env = HashMap::new();
    for r in &me.ranks {
        let given = given.get(&r.rank).cloned().unwrap_or_default();
        env.insert(r.rank, rank_pmix_env(job, r, given, &places));
    }
    Ok(PmixOffer { env, tx, rx })
}

/// Serves a job offered PMIx here (`offer`) from this thread: its upcalls, the door, and,
/// for a job of Open MPI (`now`), the server library at once.
fn serve_pmix(
    ctx: &Rc<Ctx>,
    job: &JobPlan,
    offer: Option<PmixOffer>,
    now: bool,
) -> Result<(), NodeError> {
    let Some(o) = offer else {
        return Ok(());
    };
    *ctx.pmix.borrow_mut() = Some(PmixState::new(job.kvsname.clone(), o.tx));
    *ctx.upcalls.borrow_mut() = Some(o.rx);
    serve_upcalls(ctx);
    pmix::door::serve(pmix::start_now);
    if now {
        pmix::start_now()?;
    }
    Ok(())
}

/// Rank `r`'s PMIx environment: what the server gives it (`given`), and the variables Open
/// MPI needs besides, unless its segment sets them.
fn rank_pmix_env(
    job: &JobPlan,
    r: &RankPlan,
    mut e: Vec<(String, String)>,
    places: &pmix::Places,
) -> Vec<(String, String)> {
    let app_env = job.apps.get(r.app).map(|a| a.env.as_slice()).unwrap_or(&[]);
    let has = |k: &str| app_env.iter().any(|(n, _)| n == k);
    if !has("FLUX_JOB_ID") {
        // Open MPI 4.x recognises a direct launch only by its launcher's variables
        // (schizo: Slurm, Flux, JSM); under any other PMIx server it starts as a
        // singleton. FLUX_JOB_ID makes its schizo/flux declare the launch direct
        // (ess=pmi, no binding); PMIX_NAMESPACE then selects its PMIx component.
        e.push((
            "FLUX_JOB_ID".into(),
            kauri_core::plan::job::flux_job_id(&job.kvsname).to_string(),
        ));
    }
    if let (Some(shm), false) = (&places.shm, has(VADER_DIR_VAR)) {
        // Open MPI's shared-memory segments, removed with the directory when the server
        // ends, even after an abort or a crash.
        e.push((VADER_DIR_VAR.into(), shm.display().to_string()));
    }
    e
}

/// Handles the PMIx upcalls on this thread as they come, until their channel closes.
fn serve_upcalls(ctx: &Rc<Ctx>) {
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
}

/// True when rank `rank` is the singleton the job adopts (it runs already: nothing to start).
fn adopting(job: &JobPlan, rank: usize) -> bool {
    rank == 0 && job.adopt.is_some()
}

/// Resolves the programs of the segments that run here, by segment (an adopted singleton
/// has none to resolve), so a typo starts nothing.
fn resolve_programs(
    job: &JobPlan,
    me: &HostPlan,
    host: &str,
) -> Result<HashMap<usize, PathBuf>, NodeError> {
    let mut programs: HashMap<usize, PathBuf> = HashMap::new();
    for r in &me.ranks {
        if programs.contains_key(&r.app) || adopting(job, r.rank) {
            continue;
        }
        let a = job
            .apps
            .get(r.app)
            .ok_or(NodeError::NoSegment { rank: r.rank })?;
        let wdir = PathBuf::from(&a.wdir);
        if !wdir.is_dir() {
            return Err(NodeError::NoWorkingDir {
                wdir,
                host: host.to_string(),
            });
        }
        let p = kauri_os::program::resolve(&a.program, a.var("PATH"), &wdir).map_err(|source| {
            NodeError::Program {
                host: host.to_string(),
                source,
            }
        })?;
        programs.insert(r.app, p);
    }
    Ok(programs)
}

/// What the PMI engine knows of the job, seen from this host.
fn job_info(job: &JobPlan, me: &HostPlan) -> JobInfo {
    JobInfo {
        kvsname: job.kvsname.clone(),
        size: job.size,
        universe_size: job.universe_size,
        appnum: job.appnum.clone(),
        process_mapping: job.process_mapping.clone(),
        local_ranks: me.ranks.iter().map(|r| r.rank).collect(),
        spawner_jobid: job.spawner.clone(),
        puts_visible_at_once: job.adopt.is_some(),
    }
}

/// The state this host's ranks share, with the job's PMI engine (its pre-put pairs in).
pub(super) fn new_ctx(job: &JobPlan, me: &HostPlan, events: &JobTx<NodeEvent>) -> Rc<Ctx> {
    let mut engine = Engine::new(job_info(job, me));
    engine.set_trace(kauri_proto::trace_enabled());
    engine.set_topology(crate::topology::xml_file);
    for (k, v) in &job.preput {
        engine.preput(k.clone(), v.clone());
    }
    Rc::new_cyclic(|me| Ctx {
        me: me.clone(),
        started: std::time::SystemTime::now(),
        engine: RefCell::new(engine),
        outputs: RefCell::new(Vec::new()),
        batch: RefCell::new(Vec::new()),
        writers: RefCell::new(HashMap::new()),
        pmi_poll: RefCell::new(None),
        events: events.clone(),
        next_conn: Cell::new(job.size as ConnId),
        pmix: RefCell::new(None),
        upcalls: RefCell::new(None),
        alone_checks: Cell::new(0),
        last_heard: Cell::new(None),
    })
}

/// Listens for the ranks' PMI connections on a loopback port (`-pmi-port`) and serves them;
/// returns the address the ranks are given.
fn listen_pmi_port(ctx: &Rc<Ctx>, job: &JobPlan, host: &str) -> Result<String, NodeError> {
    let l = kauri_os::ports::listen_async(
        std::net::Ipv4Addr::LOCALHOST.into(),
        job.port_range.as_ref(),
    )
    .map_err(|source| NodeError::PmiPort {
        host: host.to_string(),
        source,
    })?;
    let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tokio::task::spawn_local(accept_pmi(ctx.clone(), l));
    Ok(addr)
}

/// Whether segment `a`'s ranks get a private shared-memory directory: Open MPI through its
/// flux component (the PMI-1 library path) gets one as a PMIx job does, so no segment
/// outlives the job and two simulated hosts' ranks never share one (unless the user set it).
fn vader_wanted(job: &JobPlan, a: &AppPlan) -> bool {
    !job.pmix && a.uses_open_mpi_flux() && !a.env.iter().any(|(k, _)| k == VADER_DIR_VAR)
}

/// Open MPI's private shared-memory directory on this host, when a rank here wants one
/// ([`vader_wanted`]).
fn private_vader_dir(
    job: &JobPlan,
    me: &HostPlan,
    host: &str,
) -> Result<Option<ShmDir>, NodeError> {
    if me
        .ranks
        .iter()
        .any(|r| job.apps.get(r.app).is_some_and(|a| vader_wanted(job, a)))
    {
        pmix::shm_dir(&job.kvsname, me.node)
            .map(|d| d.map(ShmDir))
            .map_err(|source| NodeError::ShmDir {
                host: host.to_string(),
                source,
            })
    } else {
        Ok(None)
    }
}

/// Whether `nlocal` ranks oversubscribe this host's cores. Open MPI ranks busy-poll while
/// they wait; when there are more ranks than cores here they must yield, which mpirun tells
/// them by a variable (its daemons set it when they oversubscribe a node). A direct launch
/// must say it too. `cores`: those this process may run on (`sched_getaffinity`, one system
/// call; `available_parallelism` also reads the cgroup's files, on every start).
///
/// Simulated hosts (`-launcher fork`) are one machine: the ranks that share its cores are
/// every host's, not this host's alone (`-hosts a,b -n 4` on 2 cores runs 4 ranks on them).
fn oversubscribed(job: &JobPlan, nlocal: usize, cores: usize) -> bool {
    let sharing = if job.simulated_hosts {
        job.size
    } else {
        nlocal
    };
    sharing > cores.max(1)
}

/// Each local rank's CPUs (`-bind-to`), by local id; empty when the job binds nothing.
fn rank_cpus(job: &JobPlan, nlocal: usize, host: &str) -> Result<Vec<Vec<usize>>, NodeError> {
    let Some(b) = &job.binding else {
        return Ok(Vec::new());
    };
    let root = crate::bind::system_root(host).join("sys/devices/system");
    let topo = crate::bind::Topology::read_from(&root, &crate::bind::allowed_cpus()).map_err(
        |source: TopologyError| NodeError::Topology {
            binding: b.kind.name(),
            host: host.to_string(),
            source,
        },
    )?;
    let (sets, wrapped) = topo.place(b, nlocal);
    if wrapped {
        let places = topo.objects(b.kind).len() / b.count.max(1);
        say!(
            "kauri: -bind-to {}: {nlocal} ranks on {host} and {} place(s) for them: \
             ranks share them, in turn",
            b.kind.name(),
            places.max(1)
        );
    }
    Ok(sets)
}

/// Each local rank's CPUs and GPUs: `-bind-to`'s ([`rank_cpus`]), then the GPUs the job
/// asks for (`-gpus-per-proc`, `-gpu-bind`), which may bind an unbound rank next to them.
fn rank_places(
    job: &JobPlan,
    me: &HostPlan,
    host: &str,
) -> Result<(Vec<Vec<usize>>, Option<Placed>), NodeError> {
    let nlocal = me.ranks.len();
    let mut cpus_of = rank_cpus(job, nlocal, host)?;
    let Some(ask) = &job.gpus else {
        return Ok((cpus_of, None));
    };
    let mut chooses = vec![false; nlocal];
    for rp in &me.ranks {
        let app = job.apps.get(rp.app);
        if let Some(c) = chooses.get_mut(rp.local_id) {
            *c = app.and_then(crate::gpu::user_choice).is_some();
        }
    }
    let root = crate::bind::system_root(host);
    let bound = job.binding.is_some();
    let placed = crate::gpu::place(ask, &root, host, &chooses, bound, &mut cpus_of)?;
    Ok((cpus_of, Some(placed)))
}

/// The lines of `-report-bindings`: each rank of this host and its CPUs (`cpus_of`, by local
/// id) and GPUs, in the host's rank order.
fn binding_report(
    job: &JobPlan,
    me: &HostPlan,
    cpus_of: &[Vec<usize>],
    gpus: Option<&Placed>,
) -> Vec<String> {
    let host = &me.host;
    me.ranks
        .iter()
        .map(|rp| {
            let cpus = cpus_of
                .get(rp.local_id)
                .filter(|c| !c.is_empty())
                .map_or_else(
                    || "not bound".to_string(),
                    |c| format!("bound to CPUs {}", crate::bind::cpu_list(c)),
                );
            let gpus = gpus
                .zip(job.apps.get(rp.app))
                .map(|(g, app)| format!("; {}", g.report(app, rp.local_id)))
                .unwrap_or_default();
            format!("kauri: rank {} on {host}: {cpus}{gpus}", rp.rank)
        })
        .collect()
}

/// A rank's environment: its segment's, without a keeper mark (`keeper`, this process's,
/// replaces one a surrounding kauri gave this process), then the variables kauri sets for it
/// (`kauri`), then `keeper`.
fn rank_environment(
    app_env: &[(OsString, OsString)],
    kauri: Vec<(String, String)>,
    keeper: (String, String),
) -> Vec<(OsString, OsString)> {
    app_env
        .iter()
        .filter(|(k, _)| k != crate::keeper::VAR)
        .cloned()
        .chain(
            kauri
                .into_iter()
                .chain([keeper])
                .map(|(k, v)| (k.into(), v.into())),
        )
        .collect()
}

/// Serves rank `r`'s PMI on kauri's end of its socket pair.
fn serve_rank_pmi(ctx: &Rc<Ctx>, r: usize, sock: UnixStream) {
    let conn = r as ConnId;
    let served = RankSock::new(sock.into());
    match served {
        Ok(s) => {
            ctx.engine.borrow_mut().connect(conn, Some(r));
            serve_conn(ctx, conn, s);
        }
        Err(e) => warn!("rank {r}: cannot serve PMI: {e}"),
    }
}

/// What starting the ranks of a host needs, besides the runtime's PMI service.
struct Launching<'a> {
    job: &'a JobPlan,
    me: &'a HostPlan,
    host: &'a str,
    /// The resolved programs, by segment.
    programs: HashMap<usize, PathBuf>,
    /// Each rank's PMIx variables (none in a PMI job).
    pmix_env: HashMap<usize, Vec<(String, String)>>,
    /// The loopback address of `-pmi-port`.
    port: Option<String>,
    /// Open MPI's private shared-memory directory.
    vader: Option<ShmDir>,
    /// How many CPUs this process may run on.
    cpus: usize,
    /// Each local rank's CPUs (`-bind-to`, or next to its GPUs), by local id; an empty
    /// entry is not bound.
    cpus_of: Vec<Vec<usize>>,
    /// Each local rank's GPUs, when the job asks for them.
    gpus: Option<Placed>,
    /// The ranks to start, in order (a singleton to adopt is not), and how many are queued.
    todo: Vec<&'a RankPlan>,
    next: usize,
    /// How many are queued at once ([`queue_depth`]).
    ahead: usize,
}

/// How many ranks are queued for the threads that start them at once, when descriptors are
/// plenty ([`queue_depth`]): four per thread ([`crate::spawn::THREADS`]), so that a
/// thread never waits for this one to queue its next rank.
const QUEUED_AHEAD: usize = 4 * crate::spawn::THREADS;

/// How many of a host's `ranks` are queued at once: [`QUEUED_AHEAD`] when this process may
/// open far more descriptors than the ranks will hold (four each once started: PMI socket,
/// stdout, stderr, pidfd; a queued rank holds more until it starts), else one, so that each
/// rank's socket, pipes and start come in turn and a host short of descriptors fails at the
/// rank that could not start, with the line that says so, not at another rank's socket or
/// at the keeper's pipe. A PMI socket that cannot be made while others are queued is made
/// again once they are started ([`Launching::queue_ahead`]).
/// `limit` is this process's (soft) limit of open descriptors, `None` for none.
fn queue_depth(ranks: usize, limit: Option<u64>) -> usize {
    match limit {
        Some(n) if n < 8 * ranks as u64 + 256 => 1,
        _ => QUEUED_AHEAD,
    }
}

/// Why a rank was not queued: its PMI socket pair could not be made, or the line that says
/// why it cannot start.
enum NotQueued {
    Socket(std::io::Error),
    Start(NodeError),
}

/// A rank queued for its start, with kauri's end of its PMI socket pair.
struct Queued {
    rank: usize,
    app: usize,
    pmi: Option<UnixStream>,
}

/// A rank started, with kauri's end of its PMI socket pair: what [`Node::start`] serves and
/// watches. Dropped before, it is killed and reaped ([`proc::Forked`]).
struct Unwatched {
    rank: usize,
    app: usize,
    child: proc::Forked,
    pmi: Option<UnixStream>,
}

impl Launching<'_> {
    /// Reports the bindings of this host's ranks (computed then: [`rank_cpus`]).
    fn report_bindings(&self) {
        if self.job.report_bindings {
            for line in binding_report(self.job, self.me, &self.cpus_of, self.gpus.as_ref()) {
                say!("{line}");
            }
        }
    }

    /// Queues the next ranks on `starts`, the threads that start them, into `queued`, until
    /// `self.ahead` are queued ([`queue_depth`]) or none is left. A PMI socket that cannot be made while
    /// ranks are queued is tried again once they are started (their ends of their pipes and
    /// sockets are then closed here).
    fn queue_ahead(
        &mut self,
        starts: &mut Starts,
        queued: &mut VecDeque<Queued>,
    ) -> Result<(), NodeError> {
        while queued.len() < self.ahead {
            let Some(&rp) = self.todo.get(self.next) else {
                return Ok(());
            };
            let cpus = self.cpus_of.get(rp.local_id).filter(|c| !c.is_empty());
            match self.queue_rank(starts, rp, cpus) {
                Ok(q) => queued.push_back(q),
                Err(NotQueued::Socket(_)) if !queued.is_empty() => return Ok(()),
                Err(NotQueued::Socket(source)) => {
                    return Err(NodeError::PmiSocket {
                        host: self.host.to_string(),
                        source,
                    })
                }
                Err(NotQueued::Start(e)) => return Err(e),
            }
            self.next += 1;
        }
        Ok(())
    }

    /// Queues rank `rp` (bound to `cpus`) with its PMI socket and environment. (Whatever
    /// happens to this process from then on, the rank and what it starts end: the keeper,
    /// started before the first rank, is told of each.)
    fn queue_rank(
        &self,
        starts: &mut Starts,
        rp: &RankPlan,
        cpus: Option<&Vec<usize>>,
    ) -> Result<Queued, NotQueued> {
        let r = rp.rank;
        let a = &self.job.apps[rp.app];
        let mut pair = None;
        let socket = match &self.port {
            _ if !self.job.serves_pmi() => None,
            Some(addr) => Some(PmiSocket::Port(addr)),
            None => {
                let (ours, theirs) = UnixStream::pair().map_err(NotQueued::Socket)?;
                let theirs = OwnedFd::from(theirs);
                let fd = theirs.as_raw_fd();
                pair = Some((ours, theirs));
                Some(PmiSocket::Fd(fd))
            }
        };
        let (ours, theirs) = pair.unzip();
        let env = self.rank_env(rp, socket);
        let launch = Launch {
            program: self.programs[&rp.app].clone(),
            argv0: a.program.clone(),
            args: a.args.clone(),
            env,
            wdir: PathBuf::from(&a.wdir),
            pmi_fd: theirs,
            // Only the job the user started reads kauri's stdin; a spawned job's
            // ranks read end-of-file at once, as under Hydra.
            stdin: r == 0 && self.job.spawner.is_none(),
            cpus: cpus.map(|c| crate::bind::cpu_set(c)),
            pty: self.job.output.options.terminal,
            merge_stderr: self.job.output.options.merge_stderr,
        };
        starts
            .start(launch)
            .map_err(|e| NotQueued::Start(start_error(r, &a.program_text(), self.host, e)))?;
        Ok(Queued {
            rank: r,
            app: rp.app,
            pmi: ours,
        })
    }

    /// Rank `rp`'s whole environment, its PMI socket being `socket`.
    fn rank_env(&self, rp: &RankPlan, socket: Option<PmiSocket<'_>>) -> Vec<(OsString, OsString)> {
        let a = &self.job.apps[rp.app];
        let vader_dir = self
            .vader
            .as_ref()
            .filter(|_| vader_wanted(self.job, a))
            .map(|d| d.0.display().to_string());
        let seat = RankSeat {
            rank: rp.rank,
            local_id: rp.local_id,
            local_size: self.me.ranks.len(),
            node: self.me.index,
            host: self.host,
        };
        let facts = HostFacts {
            pmix: self.pmix_env.get(&rp.rank).map_or(&[], Vec::as_slice),
            vader_dir: vader_dir.as_deref(),
            oversubscribed: oversubscribed(self.job, self.me.ranks.len(), self.cpus),
            socket,
        };
        let mut kauri = rank_env(self.job, a, &seat, &facts);
        if let Some(g) = &self.gpus {
            kauri.extend(g.rank_env(self.job, a, rp.local_id));
        }
        rank_environment(&a.env, kauri, crate::keeper::env())
    }
}

/// Rank `r` (of `program`) could not start on `host`, for `e`.
fn start_error(r: usize, program: &str, host: &str, e: std::io::Error) -> NodeError {
    NodeError::StartRank {
        rank: r,
        program: program.to_string(),
        host: host.to_string(),
        source: e,
    }
}

/// What serving and watching the ranks of a host shares, once they are started.
struct Serving<'a> {
    job: &'a JobPlan,
    host: &'a str,
    ctx: &'a Rc<Ctx>,
    events: &'a JobTx<NodeEvent>,
    out: &'a iofwd::OutputSender,
    /// Tells the output forwarders the ranks' ends were handled ([`Node::drain`]).
    ended_rx: watch::Receiver<bool>,
}

/// A rank watched by [`Node::start`]: rank, pid, and its end to watch.
type Watched = (usize, u32, proc::ExitWatch);

/// A host's ranks being started: what is left to queue, the thread's queue, and the ranks
/// queued on it, in order.
struct Start<'l, 'a> {
    l: &'l mut Launching<'a>,
    starts: &'l mut Starts,
    queued: VecDeque<Queued>,
}

impl Node {
    /// Starts the ranks `me` lists. Programs are resolved first, so a typo starts nothing;
    /// the error is one line naming the host. The ranks are started by the thread that
    /// starts them ([`crate::spawn`]) while this one serves those started already.
    /// A start that fails after it started some ranks (a later start refused, no descriptors
    /// left for a PMI socket) kills them with their process groups and reaps them before it
    /// returns the error: nothing it started outlives it, and no [`NodeEvent::Exited`]
    /// follows for them. A failure that comes of running out of file descriptors is
    /// recorded as this process's ([`proc::note_out_of_fds`]).
    pub async fn start(
        job: &JobPlan,
        me: &HostPlan,
        events: JobTx<NodeEvent>,
        out: iofwd::OutputSender,
    ) -> Result<Node, NodeError> {
        let started = Node::start_ranks(job, me, events, out).await;
        if started.as_ref().is_err_and(NodeError::out_of_fds) {
            proc::note_out_of_fds();
        }
        started
    }

    /// [`Node::start`], but for noting a shortage of descriptors.
    async fn start_ranks(
        job: &JobPlan,
        me: &HostPlan,
        events: JobTx<NodeEvent>,
        out: iofwd::OutputSender,
    ) -> Result<Node, NodeError> {
        let host = me.host.clone();
        let ctx = new_ctx(job, me, &events);
        let programs = resolve_programs(job, me, &host)?;
        let (cpus_of, gpus) = rank_places(job, me, &host)?;
        let mut offer = job
            .pmix
            .then(|| offer_pmix(job, me, &cpus_of))
            .transpose()?;
        let port = if job.pmi_port {
            Some(listen_pmi_port(&ctx, job, &host)?)
        } else {
            None
        };
        let mut l = Launching {
            job,
            me,
            host: &host,
            programs,
            pmix_env: offer
                .as_mut()
                .map(|o| std::mem::take(&mut o.env))
                .unwrap_or_default(),
            port,
            vader: private_vader_dir(job, me, &host)?,
            cpus: crate::bind::allowed_cpus().len().max(1),
            cpus_of,
            gpus,
            todo: me.ranks.iter().filter(|r| !adopting(job, r.rank)).collect(),
            next: 0,
            ahead: queue_depth(
                me.ranks.len(),
                rustix::process::getrlimit(rustix::process::Resource::Nofile).current,
            ),
        };
        l.report_bindings();
        let mut starts = Starts::new(Some(std::time::Duration::from_millis(job.kill_grace_ms)));
        // The first ranks are queued before the PMIx server starts: its start overlaps theirs.
        let mut queued = VecDeque::new();
        let ahead = l.queue_ahead(&mut starts, &mut queued);
        if let Err(e) = ahead.and_then(|()| serve_pmix(&ctx, job, offer, job.pmix_now)) {
            starts.abandon().await;
            return Err(e);
        }
        if job.topology_ahead && !l.todo.is_empty() {
            crate::topology::make_ahead();
        }
        let (ended, ended_rx) = watch::channel(false);
        let mut node = Node::new(ctx.clone(), me, ended, None);
        let s = Serving {
            job,
            host: &host,
            ctx: &ctx,
            events: &events,
            out: &out,
            ended_rx,
        };
        // The ranks watched so far; their ends are awaited only once all are watched.
        let mut watched: Vec<Watched> = Vec::new();
        let mut start = Start {
            l: &mut l,
            starts: &mut starts,
            queued,
        };
        if let Err(e) = node.take_over(&s, &mut start, &mut watched).await {
            starts.abandon().await;
            abandon(watched);
            return Err(e);
        }
        node._vader = l.vader.take();
        node.watch_ends(&ctx, &events, watched);
        super::watch_singletons(ctx.clone(), node.running.clone(), node.ended.subscribe());
        Ok(node)
    }

    /// A node for host `me` that runs nothing yet.
    fn new(ctx: Rc<Ctx>, me: &HostPlan, ended: watch::Sender<bool>, vader: Option<ShmDir>) -> Node {
        Node {
            ctx,
            host: me.host.clone(),
            running: Rc::new(RefCell::new(HashMap::new())),
            pids: Vec::new(),
            forwarders: Vec::new(),
            ended,
            stdin: None,
            stdin_writer: None,
            stdin_taken: None,
            adopted: None,
            ranks: me.ranks.iter().map(|r| r.rank).collect(),
            _vader: vader,
            procs: Vec::new(),
        }
    }

    /// Starts the ranks in turn ([`QUEUED_AHEAD`]) on the thread that starts them; then adopts the singleton when it is a rank of this host; then serves and
    /// watches each rank started, each into `watched`. (Served only once all are started, as
    /// a fork of each in turn did: a host short of descriptors fails at the start of the rank
    /// that could not start, not at serving a rank started before it.)
    async fn take_over(
        &mut self,
        s: &Serving<'_>,
        start: &mut Start<'_, '_>,
        watched: &mut Vec<Watched>,
    ) -> Result<(), NodeError> {
        let mut started = Vec::new();
        loop {
            start.l.queue_ahead(start.starts, &mut start.queued)?;
            let Some(q) = start.queued.pop_front() else {
                break;
            };
            let program = || s.job.apps[q.app].program_text();
            let child = match start.starts.next().await {
                Some(Ok(child)) => child,
                Some(Err(e)) => return Err(start_error(q.rank, &program(), s.host, e)),
                None => {
                    let e = std::io::Error::other("the thread that starts the ranks is gone");
                    return Err(start_error(q.rank, &program(), s.host, e));
                }
            };
            let exe = start.l.programs[&q.app].clone();
            let u = Unwatched {
                rank: q.rank,
                app: q.app,
                child,
                pmi: q.pmi,
            };
            started.push((u, exe));
        }
        if let (Some(a), true) = (&s.job.adopt, self.ranks.contains(&0)) {
            self.adopt_singleton(s, a, 0).await?;
        }
        for (u, exe) in started {
            watched.push(self.watch_rank(s, u, exe)?);
        }
        Ok(())
    }

    /// Serves the singleton that started kauri as rank `r` (over its `singinit` connection)
    /// and watches for its end.
    async fn adopt_singleton(
        &mut self,
        s: &Serving<'_>,
        a: &Adopt,
        r: usize,
    ) -> Result<(), NodeError> {
        let stream = singinit(a, &s.job.kvsname).await?;
        let stream = stream
            .into_std()
            .and_then(|s| RankSock::new(s.into()))
            .map_err(NodeError::SingletonPmi)?;
        let conn = r as ConnId;
        s.ctx.engine.borrow_mut().connect(conn, Some(r));
        serve_conn(s.ctx, conn, stream);
        self.adopted = Some(a.pid);
        self.running.borrow_mut().insert(r, a.pid);
        let exe = std::fs::read_link(format!("/proc/{}/exe", a.pid))
            .map_or_else(|_| "singleton".into(), std::path::PathBuf::into_os_string);
        self.procs.push((r, a.pid, exe));
        let (ev, c, running) = (s.events.clone(), s.ctx.clone(), self.running.clone());
        let (pid, watch) = (a.pid, proc::ForeignWatch::new(a.pid));
        tokio::task::spawn_local(async move {
            watch.ended().await;
            debug!(pid, "the singleton ended");
            // Its exit status is its own parent's to read; kauri knows whether it
            // finalized.
            let status = |finalized| ExitStatus::from_raw(if finalized { 0 } else { 1 << 8 });
            rank_ended(&c, &ev, &running, r, pid, status);
        });
        Ok(())
    }

    /// Serves rank `u`'s PMI, forwards its output, and registers its end to be watched.
    fn watch_rank(
        &mut self,
        s: &Serving<'_>,
        u: Unwatched,
        exe: PathBuf,
    ) -> Result<Watched, NodeError> {
        let Unwatched {
            rank: r,
            app,
            child,
            pmi,
        } = u;
        let pid = child.pid();
        // A rank that cannot be watched is killed and reaped by `watch`.
        let child = child
            .watch()
            .map_err(|e| start_error(r, &s.job.apps[app].program_text(), s.host, e))?;
        debug!(rank = r, pid, "started");
        self.procs.push((r, pid, exe.into_os_string()));
        self.pids.push(pid);
        self.running.borrow_mut().insert(r, pid);
        if let Some(sock) = pmi {
            serve_rank_pmi(s.ctx, r, sock);
        }
        self.forward_output(s, r, child.stdout, child.stderr);
        self.stdin = self.stdin.take().or(child.stdin);
        Ok((r, pid, child.exit))
    }

    /// Forwards rank `r`'s stdout and stderr, as whole lines, where the job's output goes.
    fn forward_output(
        &mut self,
        s: &Serving<'_>,
        r: usize,
        stdout: proc::Output,
        stderr: pipe::Receiver,
    ) {
        let proxy = s.job.rank_node.get(r).copied().unwrap_or(0);
        let route = |is_stdout| Route::new(&s.job.output, is_stdout, r, proxy, s.host);
        self.forwarders
            .push(tokio::task::spawn_local(iofwd::forward_lines(
                stdout,
                Stream::Stdout,
                route(true),
                s.out.clone(),
                s.ended_rx.clone(),
            )));
        self.forwarders
            .push(tokio::task::spawn_local(iofwd::forward_lines(
                stderr,
                Stream::Stderr,
                route(false),
                s.out.clone(),
                s.ended_rx.clone(),
            )));
    }

    /// Watches the ends of the ranks forked: each is reaped and reported as it ends.
    fn watch_ends(&self, ctx: &Rc<Ctx>, events: &JobTx<NodeEvent>, forked: Vec<Watched>) {
        for (r, pid, exit) in forked {
            let ev = events.clone();
            let c = ctx.clone();
            let running = self.running.clone();
            tokio::task::spawn_local(async move {
                let status = exit.wait().await;
                crate::keeper::reaped(pid);
                debug!(rank = r, ?status, "exited");
                rank_ended(&c, &ev, &running, r, pid, |_| status);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kauri_core::plan::RankPlan;

    /// Ranks are queued several at once only when descriptors are plenty; near the limit (as
    /// under `ulimit -n 64` with 40 ranks, tests/bounds.rs) they start one at a time.
    #[test]
    fn ranks_are_queued_ahead_only_with_descriptors_to_spare() {
        assert_eq!(queue_depth(40, Some(64)), 1);
        assert_eq!(queue_depth(8, Some(24)), 1);
        assert_eq!(queue_depth(1024, Some(1024)), 1);
        assert_eq!(queue_depth(1024, Some(1 << 20)), QUEUED_AHEAD);
        assert_eq!(queue_depth(64, Some(1024)), QUEUED_AHEAD);
        assert_eq!(queue_depth(1 << 20, None), QUEUED_AHEAD);
        const { assert!(QUEUED_AHEAD > 1) };
    }

    #[test]
    fn a_rank_environment_replaces_an_inherited_keeper_mark() {
        let app = vec![
            ("PATH".into(), "/bin".into()),
            (crate::keeper::VAR.into(), "outer".into()),
            ("A".into(), "1".into()),
        ];
        let kauri = vec![("PMI_RANK".to_string(), "3".to_string())];
        let keeper = (crate::keeper::VAR.to_string(), "mine".to_string());
        let got: Vec<(String, String)> = rank_environment(&app, kauri, keeper)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        let want: Vec<(String, String)> = [
            ("PATH", "/bin"),
            ("A", "1"),
            ("PMI_RANK", "3"),
            (crate::keeper::VAR, "mine"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_binding_report_names_each_rank_and_its_cpus() {
        let rank = |rank, local_id| RankPlan {
            rank,
            app: 0,
            local_id,
        };
        let me = HostPlan {
            host: "h1".into(),
            node: 0,
            index: 0,
            ranks: vec![rank(4, 0), rank(5, 1)],
        };
        let job = JobPlan {
            apps: vec![kauri_core::plan::AppPlan {
                program: "true".into(),
                args: Vec::new(),
                env: Vec::new(),
                wdir: "/".into(),
            }],
            ..JobPlan::default()
        };
        assert_eq!(
            binding_report(&job, &me, &[vec![0, 1, 2]], None),
            [
                format!(
                    "kauri: rank 4 on h1: bound to CPUs {}",
                    crate::bind::cpu_list(&[0, 1, 2])
                ),
                "kauri: rank 5 on h1: not bound".to_string(),
            ]
        );
        assert_eq!(
            binding_report(&job, &me, &[], None),
            [
                "kauri: rank 4 on h1: not bound",
                "kauri: rank 5 on h1: not bound"
            ]
        );
        let gpu = |index, pci: &str| crate::gpu::Gpu {
            vendor: crate::gpu::Vendor::Nvidia,
            index,
            pci: pci.into(),
            numa: None,
            cpus: Vec::new(),
        };
        let placed = Placed {
            hidden: false,
            gpus: vec![gpu(0, "0000:3b:00.0"), gpu(1, "0000:88:00.0")],
            of: vec![vec![1], vec![0]],
        };
        assert_eq!(
            binding_report(&job, &me, &[], Some(&placed)),
            [
                "kauri: rank 4 on h1: not bound; GPU nvidia:1 (0000:88:00.0)",
                "kauri: rank 5 on h1: not bound; GPU nvidia:0 (0000:3b:00.0)"
            ]
        );
    }
}
