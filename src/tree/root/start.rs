//! Starting a job: the root's own node and its child agents; the run's first job.

use super::*;

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
    let mut ranks = vec![RankState::default(); plan.size];
    for hp in local.iter().chain(&remote) {
        for r in &hp.ranks {
            ranks[r.rank].host = hp.host.clone();
        }
    }
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
    .map_err(|e| (e, None))?;
    let (node, error) = match &local {
        None => (None, None),
        Some(hp) => match Node::start(
            &plan,
            hp,
            JobTx::new(idx, wires.node.clone()),
            wires.out.clone(),
        )
        .await
        {
            Ok(n) => (Some(n), None),
            Err(e) => (None, Some(crate::host::proc::fd_cause(e))),
        },
    };
    let host = cluster.me.clone();
    let procs = node
        .iter()
        .flat_map(|n| n.procs.iter())
        .map(|(rank, pid, exe)| crate::host::mpir::Proc {
            rank: *rank,
            host: local
                .as_ref()
                .map_or_else(|| host.clone(), |hp| hp.host.clone()),
            executable: exe.clone(),
            pid: *pid,
        })
        .collect();
    let run = JobRun {
        procs,
        branch: {
            let mut b = Branch::new(0, cluster.me.clone(), node, kids, false, clock, prof);
            if plan.fault_tolerant {
                b.tolerate_failures();
            }
            b
        },
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

impl Root {
    /// Plans the job, starts the printer, the first job's agents and its ranks here, and the
    /// stdin reader; returns the root and where its events will come from, or kauri's exit
    /// status when nothing could start.
    pub(super) async fn start(spec: &JobSpec) -> Result<(Root, Inbox), i32> {
        let clock = Clock::start();
        let me = local_host();
        raise_fd_limit();
        let p = plan(spec, &me).map_err(|e| {
            say!("kauri: {e}");
            STATUS_LAUNCHER
        })?;
        let iface_ip = match &spec.iface {
            None => None,
            Some(i) => Some(crate::launch::iface::address(i).map_err(|e| {
                say!("kauri: -iface {i}: {e}");
                STATUS_LAUNCHER
            })?),
        };
        info!(kvsname = %p.job.kvsname, size = p.job.size, hosts = p.remote.len() + p.local.is_some() as usize, "starting job");
        if let Some(hosts) = omp_threads_set(&p) {
            info!("-ml-env: OMP_NUM_THREADS=1 for the ranks on {hosts}, which run more than one rank each (as torchrun); set OMP_NUM_THREADS to choose");
        }
        // The output files the patterns name, created before anything starts: a directory
        // that does not exist fails the run here, with one line.
        let job = &p.job;
        let paths = crate::host::output::files_of_job(&job.output, job.size, |r| {
            let n = job.rank_node[r];
            (n, job.hosts[n as usize].as_str())
        });
        let files = Files::create(&paths).map_err(|e| {
            say!("kauri: {e}");
            STATUS_LAUNCHER
        })?;

        // Output: everything the ranks and agents write, printed whole line by whole line.
        let (out_tx, out_rx) = crate::host::iofwd::output_queue();
        let (closed_tx, closed_rx) = mpsc::unbounded_channel::<Ending>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // `kauri --status` from another shell, and this host's answers with stacks.
        let (asks_tx, asks_rx) = mpsc::unbounded_channel();
        let status_socket = crate::cli::status::Listener::start(asks_tx)
            .map_err(|e| info!("no status socket: {e}"))
            .ok();
        let (own_status, own_rx) = mpsc::unbounded_channel();
        let printer = tokio::task::spawn_local(print_output(out_rx, stop_rx, closed_tx, files));

        let cost = (p.cost_tree && !p.remote.is_empty())
            .then(|| launch_cost(&p.launch, &p.remote[0].host));
        if let Some(c) = cost {
            info!(
                serial_us = c.serial_us,
                latency_us = c.latency_us,
                "launch cost"
            );
        }
        let mut cluster = Cluster::new(spec, &p, &me, cost);
        if let Some(ip) = iface_ip {
            cluster.ip = ip;
        }
        let names = match spec
            .nameserver
            .clone()
            .or_else(|| std::env::var("KAURI_NAMESERVER").ok())
            .or_else(|| std::env::var("HYDRA_NAMESERVER").ok())
            .filter(|s| !s.trim().is_empty())
        {
            Some(a) => Names::Server(crate::proto::nameserver::Client::new(
                crate::proto::nameserver::address(&a),
            )),
            None => Names::Own(crate::proto::nameserver::Table::default()),
        };
        // The root holds a sender of each channel for its whole life, so none reads as closed.
        let (node_tx, node_rx) = events::channel::<NodeEvent>();
        let (hub_tx, hub_rx) = events::channel::<HubEvent>();
        let (svc_tx, svc_rx) = mpsc::unbounded_channel::<(Asker, ServiceReply)>();
        let wires = Wires {
            node: node_tx,
            hub: hub_tx,
            out: out_tx,
        };
        let prof = spec.profile.map(|_| HostProfile {
            ranks: p.local.as_ref().map_or(0, |h| h.ranks.len() as u32),
            ..HostProfile::new(0, &me)
        });
        let fork_start = clock.now();
        let started = start_job(
            0,
            &cluster,
            p.job.clone(),
            p.local.clone(),
            p.remote.clone(),
            &wires,
            clock,
            prof,
        )
        .await;
        let forked = clock.now();
        let (first, start_error) = match started {
            Ok(j) => (j, None),
            Err((e, Some(j))) => (j, Some(e)),
            Err((e, None)) => {
                say!("kauri: {e}");
                return Err(STATUS_LAUNCHER);
            }
        };
        let tree = match (cost, p.width) {
            (Some(c), _) => format!(
                "cost (launch {:.1} ms serial, {:.1} ms in all)",
                c.serial_us as f64 / 1e3,
                (c.serial_us + c.latency_us) as f64 / 1e3
            ),
            (None, 0) => "flat".into(),
            (None, w) => w.to_string(),
        };
        let mut root = Root {
            jobs: vec![Job::Live(Box::new(first))],
            draining: Vec::new(),
            cluster,
            names,
            waiting: Waiting::default(),
            wires,
            svc_tx,
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
            own_status,
            timeout_stacks: spec.timeout_stacks,
            _status_socket: status_socket,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            auto_cleanup: spec.auto_cleanup,
            fault_tolerant: spec.fault_tolerant,
            timeout: spec.timeout,
            clock,
            profile: spec.profile.map(|format| (format, Vec::new())),
            looks_mpi: p.looks_mpi,
            _master_port: p.master_port,
            tree,
            printer: Some((printer, stop_tx)),
        };
        if p.local.is_some() {
            root.first().branch.profile_fork(fork_start, forked);
        }

        // stdin goes to the first job's rank 0: straight into its pipe when it runs here,
        // else down the tree (queued for its agent until that agent connects).
        let (stdin_tx, stdin_rx) = mpsc::channel::<Option<Vec<u8>>>(16);
        if let Some(pipe) = root.first().branch.take_stdin() {
            tokio::task::spawn_local(crate::host::iofwd::pump(tokio::io::stdin(), pipe));
        } else if root.first().branch.kids().child_with_rank(0).is_some() {
            tokio::task::spawn_local(read_stdin(stdin_tx));
        }
        let signals = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGUSR1, SignalKind::user_defined1()),
            (libc::SIGUSR2, SignalKind::user_defined2()),
        ]
        .into_iter()
        .filter_map(|(n, k)| Some((n, signal(k).ok()?)))
        .collect();
        let inbox = Inbox {
            node: node_rx,
            hub: hub_rx,
            replies: svc_rx,
            stdin: stdin_rx,
            closed: closed_rx,
            signals,
            deadline: spec.timeout.map(|t| Instant::now() + t),
            asks: asks_rx,
            own: own_rx,
        };
        if let Some(e) = start_error {
            say!("kauri: {e}");
            root.teardown(Ending::Failed);
        } else {
            // Every rank here, and no host elsewhere: the table is complete now.
            root.mpir_check(0);
        }
        Ok((root, inbox))
    }
}
