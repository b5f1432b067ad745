//! Starting a job: the root's own node and its child agents; the run's first job.

use super::*;
use crate::shape::LaunchCost;
use kauri_plan::build::Plan;

/// Raises the soft limit of open files to the hard limit.
pub(super) fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Starts job `idx`'s agents and, if it has ranks here, its local ranks. The error is a start
/// failure on this host (the agents report theirs later, one `NodeStarted` each). `prof`: this
/// host's startup profile, for the job the user started when it records one.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_job(
    idx: usize,
    cluster: &Cluster,
    plan: JobPlan,
    local: Option<HostPlan>,
    remote: Vec<HostPlan>,
    wires: &Wires,
    clock: Clock,
    prof: Option<HostProfile>,
) -> Result<JobRun, (String, Option<JobRun>)> {
    let ranks = rank_hosts(plan.size, local.iter().chain(&remote));
    let key = tree::new_key().map_err(|e| (format!("cannot make a job key: {e}"), None))?;
    let starting = remote.len();
    let subtrees = match cluster.cost {
        Some(c) => tree::build_cost(remote, c, cluster.launch.max_concurrent),
        None => tree::build(remote, cluster.width),
    };
    let kids = Children::start(
        subtrees,
        plan.clone(),
        cluster.launch.clone(),
        key,
        cluster.ip,
        JobTx::new(idx, wires.hub.clone()),
        wires.out.clone(),
    )
    .await
    .map_err(|e| (e.to_string(), None))?;
    let (node, error) = start_node(idx, &plan, local.as_ref(), wires).await;
    let here = local
        .as_ref()
        .map_or(cluster.me.as_str(), |hp| hp.host.as_str());
    let procs = node
        .as_ref()
        .map_or_else(Vec::new, |n| mpir_procs(here, &n.procs));
    let mut branch = JobBranch::new(
        0,
        cluster.me.clone(),
        node,
        kids,
        false,
        clock.origin(),
        prof,
    );
    if plan.fault_tolerant {
        branch.tolerate_failures();
    }
    if plan.progress {
        branch.show_progress();
    }
    let run = JobRun {
        procs,
        branch,
        plan,
        ranks,
        spawner: None,
        starting,
        answer: None,
        start_error: None,
        discarded: false,
        dead: Vec::new(),
    };
    match error {
        None => Ok(run),
        Some(e) => Err((e, Some(run))),
    }
}

/// The record of each of a job's `size` ranks before it starts: its host, from the hosts'
/// plans.
fn rank_hosts<'a>(size: usize, hosts: impl Iterator<Item = &'a HostPlan>) -> Vec<RankState> {
    let mut ranks = vec![RankState::default(); size];
    for hp in hosts {
        for r in &hp.ranks {
            ranks[r.rank].host = hp.host.clone();
        }
    }
    ranks
}

/// Starts job `idx`'s ranks on this host, when it has some (`local`): the node, or why it
/// could not start.
async fn start_node(
    idx: usize,
    plan: &JobPlan,
    local: Option<&HostPlan>,
    wires: &Wires,
) -> (Option<Node>, Option<String>) {
    let Some(hp) = local else {
        return (None, None);
    };
    let events = JobTx::new(idx, wires.node.clone());
    match Node::start(plan, hp, events, wires.out.clone()).await {
        Ok(n) => (Some(n), None),
        Err(e) => (None, Some(kauri_host::proc::fd_cause(e))),
    }
}

/// The debugger's process table entries of the ranks started on `host`: (rank, pid,
/// executable) each.
fn mpir_procs(
    host: &str,
    procs: &[(usize, u32, std::ffi::OsString)],
) -> Vec<kauri_host::mpir::Proc> {
    procs
        .iter()
        .map(|(rank, pid, exe)| kauri_host::mpir::Proc {
            rank: *rank,
            host: host.to_string(),
            executable: exe.clone(),
            pid: *pid,
        })
        .collect()
}

/// The ends of the run's channels the root keeps, with the printer and the status socket.
struct Ends {
    wires: Wires,
    svc_tx: mpsc::UnboundedSender<(Asker, ServiceReply)>,
    own_status: mpsc::UnboundedSender<(usize, HostStatus)>,
    /// Where `kauri --status` asks arrive; the socket itself is bound by [`Root::start`]
    /// once this host's ranks are started (the bind makes an inode: not before the first
    /// rank's start).
    status_asks: mpsc::UnboundedSender<crate::status::Ask>,
    status_socket: Option<crate::status::Listener>,
    printer: (
        tokio::task::JoinHandle<bool>,
        tokio::sync::oneshot::Sender<()>,
    ),
}

/// The ends of the run's channels the inbox reads.
struct Receivers {
    node: events::Receiver<NodeEvent>,
    hub: events::Receiver<HubEvent>,
    replies: mpsc::UnboundedReceiver<(Asker, ServiceReply)>,
    closed: mpsc::UnboundedReceiver<Ending>,
    asks: mpsc::UnboundedReceiver<crate::status::Ask>,
    own: mpsc::UnboundedReceiver<(usize, HostStatus)>,
}

/// What the root is made of besides the command line and the plan.
struct Parts {
    clock: Clock,
    first: JobRun,
    cluster: Cluster,
    names: Names,
    ends: Ends,
}

/// What the root does before its runtime exists: the plan, checked ([`prepare_run`]).
pub struct Prepared {
    clock: Clock,
    me: String,
    plan: Plan,
    iface_ip: Option<std::net::IpAddr>,
    files: Files,
}

/// Raises the limit of open files, plans the run and checks what it needs ([`prepare`]),
/// before the runtime is built; when the first job has ranks here, starts the thread that
/// starts them, and has it start the keeper of this host's ranks, so that the keeper's start
/// overlaps kauri's own (the runtime, the channels, the signals) rather than the ranks'. `Err`: kauri's exit
/// status, its line printed.
pub fn prepare_run(spec: &JobSpec) -> Result<Prepared, i32> {
    let clock = Clock::start();
    let me = local_host();
    raise_fd_limit();
    let (plan, iface_ip, files) = prepare(spec, &me)?;
    if plan.local.is_some() {
        kauri_host::spawn::ready(Duration::from_millis(plan.job.kill_grace_ms));
    }
    Ok(Prepared {
        clock,
        me,
        plan,
        iface_ip,
        files,
    })
}

/// Plans the run and checks what it needs before anything starts: `-iface`'s address and
/// the output files. `Err`: kauri's exit status, its line printed.
fn prepare(spec: &JobSpec, me: &str) -> Result<(Plan, Option<std::net::IpAddr>, Files), i32> {
    let p = plan(spec, me).map_err(|e| {
        say!("kauri: {e}");
        STATUS_LAUNCHER
    })?;
    let iface_ip = match &spec.iface {
        None => None,
        Some(i) => Some(kauri_os::iface::address(i).map_err(|e| {
            say!("kauri: -iface {i}: {e}");
            STATUS_LAUNCHER
        })?),
    };
    if spec.display_map {
        for line in kauri_plan::rank_map(&p.job.hosts, &p.job.rank_node) {
            say!("{line}");
        }
    }
    info!(kvsname = %p.job.kvsname, size = p.job.size, hosts = p.remote.len() + p.local.is_some() as usize, "starting job");
    if let Some(hosts) = omp_threads_set(&p) {
        info!("-ml-env: OMP_NUM_THREADS=1 for the ranks on {hosts}, which run more than one rank each (as torchrun); set OMP_NUM_THREADS to choose");
    }
    // The output files the patterns name, created before anything starts: a directory
    // that does not exist fails the run here, with one line.
    let job = &p.job;
    let paths = kauri_host::output::files_of_job(&job.output, job.size, |r| {
        let n = job.rank_node[r];
        (n, job.hosts[n as usize].as_str())
    });
    let files = Files::create(&paths).map_err(|e| {
        say!("kauri: {e}");
        STATUS_LAUNCHER
    })?;
    Ok((p, iface_ip, files))
}

/// Starts the output printer (into `files` and kauri's own streams) and makes the run's
/// channels: the root's ends and the inbox's.
fn open_channels(files: Files) -> (Ends, Receivers) {
    // Output: everything the ranks and agents write, printed whole line by whole line.
    let (out_tx, out_rx) = kauri_host::iofwd::output_queue();
    let (closed_tx, closed_rx) = mpsc::unbounded_channel::<Ending>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // `kauri --status` from another shell, and this host's answers with stacks.
    let (asks_tx, asks_rx) = mpsc::unbounded_channel();
    let (own_status, own_rx) = mpsc::unbounded_channel();
    let printer = tokio::task::spawn_local(print_output(out_rx, stop_rx, closed_tx, files));
    // The root holds a sender of each channel for its whole life, so none reads as closed.
    let (node_tx, node_rx) = events::channel::<NodeEvent>();
    let (hub_tx, hub_rx) = events::channel::<HubEvent>();
    let (svc_tx, svc_rx) = mpsc::unbounded_channel::<(Asker, ServiceReply)>();
    let wires = Wires {
        node: node_tx,
        hub: hub_tx,
        out: out_tx,
    };
    let ends = Ends {
        wires,
        svc_tx,
        own_status,
        status_asks: asks_tx,
        status_socket: None,
        printer: (printer, stop_tx),
    };
    let receivers = Receivers {
        node: node_rx,
        hub: hub_rx,
        replies: svc_rx,
        closed: closed_rx,
        asks: asks_rx,
        own: own_rx,
    };
    (ends, receivers)
}

/// The launch cost to the first remote host, when the tree is shaped by it
/// (`-tree-width cost`).
fn measure_cost(p: &Plan) -> Option<LaunchCost> {
    let cost =
        (p.cost_tree && !p.remote.is_empty()).then(|| launch_cost(&p.launch, &p.remote[0].host));
    if let Some(c) = cost {
        info!(
            serial_us = c.serial_us,
            latency_us = c.latency_us,
            "launch cost"
        );
    }
    cost
}

/// The shared name server's address: `-nameserver`, else `KAURI_NAMESERVER`, else
/// `HYDRA_NAMESERVER`; none when the first one set is blank.
fn nameserver_address(
    flag: Option<String>,
    kauri: Option<String>,
    hydra: Option<String>,
) -> Option<String> {
    flag.or(kauri).or(hydra).filter(|s| !s.trim().is_empty())
}

/// The run's name service: the shared name server when one is named, else a table of its
/// own.
fn names_of(spec: &JobSpec) -> Names {
    let address = nameserver_address(
        spec.nameserver.clone(),
        std::env::var("KAURI_NAMESERVER").ok(),
        std::env::var("HYDRA_NAMESERVER").ok(),
    );
    match address {
        Some(a) => Names::Server(kauri_proto::nameserver::Client::new(
            kauri_proto::nameserver::address(&a),
        )),
        None => Names::Own(kauri_proto::nameserver::Table::default()),
    }
}

/// The tree's shape, in words, for the profile: by launch cost, flat, or its width.
fn tree_words(cost: Option<LaunchCost>, width: usize) -> String {
    match (cost, width) {
        (Some(c), _) => format!(
            "cost (launch {:.1} ms serial, {:.1} ms in all)",
            c.serial_us as f64 / 1e3,
            (c.serial_us + c.latency_us) as f64 / 1e3
        ),
        (None, 0) => "flat".into(),
        (None, w) => w.to_string(),
    }
}

/// The signals kauri handles, each with its stream (one that cannot be watched is left
/// out).
fn watch_signals() -> Vec<(i32, tokio::signal::unix::Signal)> {
    [
        (libc::SIGINT, SignalKind::interrupt()),
        (libc::SIGTERM, SignalKind::terminate()),
        (libc::SIGHUP, SignalKind::hangup()),
        (libc::SIGUSR1, SignalKind::user_defined1()),
        (libc::SIGUSR2, SignalKind::user_defined2()),
    ]
    .into_iter()
    .filter_map(|(n, k)| Some((n, signal(k).ok()?)))
    .collect()
}

impl Root {
    /// Starts the printer, the first job's agents and its ranks here, and the stdin reader, for the run `prepared` planned; returns the
    /// root and where its events will come from, or kauri's exit status when nothing could
    /// start.
    pub(super) async fn start(spec: &JobSpec, prepared: Prepared) -> Result<(Root, Inbox), i32> {
        let Prepared {
            clock,
            me,
            plan: p,
            iface_ip,
            files,
        } = prepared;
        let (mut ends, receivers) = open_channels(files);
        let cost = measure_cost(&p);
        let mut cluster = Cluster::new(spec, &p, &me, cost);
        if let Some(ip) = iface_ip {
            cluster.ip = ip;
        }
        let names = names_of(spec);
        let (first, start_error) = start_first(spec, &p, &me, &cluster, &ends.wires, clock).await?;
        // `kauri --status` from another shell, and this host's answers with stacks.
        ends.status_socket = crate::status::Listener::start(ends.status_asks.clone())
            .map_err(|e| info!("no status socket: {e}"))
            .ok();
        let parts = Parts {
            clock,
            first,
            cluster,
            names,
            ends,
        };
        let mut root = Root::new(spec, p, parts);
        let inbox = root.open_inbox(spec, receivers);
        if let Some(e) = start_error {
            say!("kauri: {e}");
            root.teardown(Ending::Failed);
        } else {
            // Every rank here, and no host elsewhere: the table is complete now.
            root.mpir_check(0);
            let here = root.first().branch.node().map_or(0, Node::ranks);
            root.note_progress(|p, now| p.started(here, now));
        }
        Ok((root, inbox))
    }

    /// The root of the run, its first job started, before any event.
    fn new(spec: &JobSpec, p: Plan, parts: Parts) -> Root {
        let Parts {
            clock,
            first,
            cluster,
            names,
            ends,
        } = parts;
        let tree = tree_words(cluster.cost, p.width);
        let progress = p.job.progress.then(|| {
            let subtrees = &first.branch.kids().subtrees;
            crate::progress::Progress::new(clock.origin(), p.job.size, subtrees)
        });
        Root {
            jobs: vec![Job::Live(Box::new(first))],
            draining: Vec::new(),
            cluster,
            names,
            waiting: Waiting::default(),
            wires: ends.wires,
            svc_tx: ends.svc_tx,
            requests: Vec::new(),
            cross_dmodex: Default::default(),
            collectives: Default::default(),
            next_context_id: 0,
            ending: None,
            kill_at: None,
            grace: Duration::from_millis(p.job.kill_grace_ms),
            answer_wait: env_secs("KAURI_TEARDOWN_WAIT", 5.0),
            leave_at: None,
            timed_out: false,
            gave_up: false,
            lost: false,
            status: None,
            own_status: ends.own_status,
            timeout_stacks: spec.timeout_stacks,
            stdin_credit: StdinCredit::new(),
            _status_socket: ends.status_socket,
            // As text: a word that is not UTF-8 shows its bytes as `�`.
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            auto_cleanup: spec.auto_cleanup,
            fault_tolerant: spec.fault_tolerant,
            timeout: spec.timeout,
            clock,
            profile: spec.profile.map(|format| (format, Vec::new())),
            progress,
            mpi: p.mpi,
            singleton_seen: false,
            attempt: spec.attempt.as_ref().map(|a| AttemptLog {
                restart: (a.restart, a.max_restarts),
                report: a.report.clone(),
                why: None,
                lost: Vec::new(),
            }),
            print_exit_codes: spec.print_exit_codes,
            _master_port: p.master_port,
            tree,
            printer: Some(ends.printer),
        }
    }

    /// Starts stdin's forwarding and watches kauri's signals: the inbox, from the ends of the
    /// run's channels.
    fn open_inbox(&mut self, spec: &JobSpec, receivers: Receivers) -> Inbox {
        // stdin goes to the first job's rank 0: straight into its pipe when it runs here,
        // else down the tree (queued for its agent until that agent connects).
        // Nothing to read (`/dev/null`, as under a batch system): rank 0 reads end-of-file
        // at once, and no reader thread is started.
        let (stdin_tx, stdin_rx) = mpsc::channel::<Option<Vec<u8>>>(16);
        let empty = kauri_host::iofwd::reads_nothing(0);
        if let Some(pipe) = self.first().branch.take_stdin() {
            if !empty {
                tokio::task::spawn_local(kauri_host::iofwd::pump(tokio::io::stdin(), pipe));
            }
        } else if self.first().branch.kids().child_with_rank(0).is_some() {
            if empty {
                let _ = stdin_tx.try_send(None);
            } else {
                tokio::task::spawn_local(read_stdin(stdin_tx, self.stdin_credit.clone()));
            }
        }
        Inbox {
            node: receivers.node,
            hub: receivers.hub,
            replies: receivers.replies,
            stdin: stdin_rx,
            closed: receivers.closed,
            signals: watch_signals(),
            deadline: spec.timeout.map(|t| Instant::now() + t),
            asks: receivers.asks,
            own: receivers.own,
        }
    }
}

/// Starts the job the user started, with this host's startup profile when it is recorded
/// and the start of its ranks here in it. `Err`:
/// kauri's exit status when nothing could start; the error besides the job when its ranks
/// here could not.
async fn start_first(
    spec: &JobSpec,
    p: &Plan,
    me: &str,
    cluster: &Cluster,
    wires: &Wires,
    clock: Clock,
) -> Result<(JobRun, Option<String>), i32> {
    let prof = spec.profile.map(|_| HostProfile {
        ranks: p.local.as_ref().map_or(0, |h| h.ranks.len() as u32),
        ..HostProfile::new(0, me)
    });
    let fork_start = clock.now();
    let started = start_job(
        0,
        cluster,
        p.job.clone(),
        p.local.clone(),
        p.remote.clone(),
        wires,
        clock,
        prof,
    )
    .await;
    let forked = clock.now();
    let (mut first, start_error) = match started {
        Ok(j) => (j, None),
        Err((e, Some(j))) => (j, Some(e)),
        Err((e, None)) => {
            say!("kauri: {e}");
            return Err(STATUS_LAUNCHER);
        }
    };
    if p.local.is_some() {
        first.branch.profile_fork(fork_start, forked);
    }
    Ok((first, start_error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kauri_plan::RankPlan;

    fn host(name: &str, ranks: &[usize]) -> HostPlan {
        HostPlan {
            host: name.into(),
            node: 0,
            index: 0,
            ranks: ranks
                .iter()
                .map(|&rank| RankPlan {
                    rank,
                    app: 0,
                    local_id: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn each_rank_is_on_its_hosts_plan() {
        let hosts = [host("a", &[0, 2]), host("b", &[1])];
        let ranks = rank_hosts(4, hosts.iter());
        let names: Vec<&str> = ranks.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(names, ["a", "b", "a", ""]);
        assert!(ranks.iter().all(|r| r.end.is_none()));
    }

    #[test]
    fn the_trees_shape_in_words() {
        let cost = LaunchCost {
            serial_us: 1500,
            latency_us: 2000,
        };
        assert_eq!(
            tree_words(Some(cost), 4),
            "cost (launch 1.5 ms serial, 3.5 ms in all)"
        );
        assert_eq!(tree_words(None, 0), "flat");
        assert_eq!(tree_words(None, 8), "8");
    }

    #[test]
    fn the_name_server_named_first_wins_unless_blank() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(nameserver_address(s("a"), s("b"), s("c")), s("a"));
        assert_eq!(nameserver_address(None, s("b"), s("c")), s("b"));
        assert_eq!(nameserver_address(None, None, s("c")), s("c"));
        assert_eq!(nameserver_address(s(" "), s("b"), None), None);
        assert_eq!(nameserver_address(None, None, None), None);
    }

    #[test]
    fn the_debuggers_entries_name_the_host() {
        let procs = mpir_procs("h", &[(3, 77, "/bin/x".into())]);
        assert_eq!(
            procs,
            [kauri_host::mpir::Proc {
                rank: 3,
                host: "h".into(),
                executable: "/bin/x".into(),
                pid: 77,
            }]
        );
    }
}
