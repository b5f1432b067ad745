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
//! It runs on a single-threaded tokio runtime: one thread owns every engine (no locks), and
//! every rank is forked from that thread, so `PR_SET_PDEATHSIG` ties the ranks' lives to
//! kauri's.

use crate::hub::{Children, Gather, HubEvent};
use crate::job::{EnvPolicy, HostSpec, JobSpec, Placement};
use crate::node::{is_local, local_host, Node, NodeEvent};
use crate::pmi::Output;
use crate::proc;
use crate::tree::{
    self, AppPlan, Down, HostPlan, JobPlan, LaunchPlan, RankPlan, Report, Stream, Up,
};
use bytes::Bytes;
use std::net::IpAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info};

/// Exit status when kauri itself ends the job (timeout, a failed launch, a fence that can
/// never complete), as Hydra does.
pub const STATUS_LAUNCHER: i32 = 255;

/// The default width of the agent tree.
pub const DEFAULT_TREE_WIDTH: usize = 8;

/// What the front end knows of a rank.
#[derive(Debug, Clone, Default)]
struct RankState {
    host: String,
    pid: u32,
    ended: Option<(Option<i32>, Option<i32>)>,
    during_teardown: bool,
    initialized: bool,
    finalized: bool,
}

/// Why the job ended early.
enum Ending {
    Abort(i32),
    Timeout,
    Signal(i32),
    Failed,
    OutputClosed,
}

/// A job name unique across concurrent launches on this host.
fn kvsname(host: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kauri_{}_{nanos:x}_{host}", std::process::id())
}

/// The environment of one segment's ranks, before the PMI variables.
fn segment_env(spec: &JobSpec, app: usize) -> Vec<(String, String)> {
    let a = &spec.apps[app];
    let policy = a.env_policy.as_ref().unwrap_or(&spec.env_policy);
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            !proc::is_foreign_wiring(k)
                && !k.starts_with("KAURI_JOB_KEY")
                && match policy {
                    EnvPolicy::All => true,
                    EnvPolicy::None => false,
                    EnvPolicy::List(l) => l.iter().any(|n| n == k),
                }
        })
        .collect();
    for (k, v) in spec.genv.iter().chain(&a.env) {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

fn raise_fd_limit() {
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

fn env_secs(var: &str, default: f64) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs_f64(default))
}

/// The address agents connect back to: `KAURI_ADDR`, else the local end of the route to the
/// first remote host (a UDP `connect` sends nothing), else loopback.
fn advertise(first_remote: Option<&str>, fork: bool) -> IpAddr {
    if let Some(ip) = std::env::var("KAURI_ADDR")
        .ok()
        .and_then(|a| a.trim().parse().ok())
    {
        return ip;
    }
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let (Some(host), false) = (first_remote, fork) else {
        return loopback;
    };
    let probe = || -> std::io::Result<IpAddr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect((host, 9))?;
        Ok(s.local_addr()?.ip())
    };
    probe().unwrap_or(loopback)
}

/// Everything decided before anything starts.
struct Plan {
    job: JobPlan,
    local: Option<HostPlan>,
    remote: Vec<HostPlan>,
    launch: LaunchPlan,
    width: usize,
    rank_host: Vec<String>,
}

fn plan(spec: &JobSpec, me: &str) -> Result<Plan, String> {
    let mut launcher = spec.launcher.clone();
    let mut hosts: Vec<HostSpec> = spec.hosts.clone();
    if hosts.is_empty() {
        if let Some(a) = crate::allocation::detect()? {
            if launcher.is_none()
                && a.manager == "slurm"
                && a.hosts.iter().any(|h| !is_local(&h.name, me))
            {
                launcher = Some("slurm".into());
            }
            hosts = a.hosts;
        }
    }
    // Segments without -n: the hosts' slots (Hydra's rule), or 1 on this host alone.
    let mut spec = spec.clone();
    let slots_total: usize = match spec.ppn {
        Some(ppn) => ppn * hosts.len().max(1),
        None => hosts.iter().map(|h| h.slots).sum::<usize>().max(1),
    };
    for a in spec.apps.iter_mut().filter(|a| a.nprocs == 0) {
        a.nprocs = slots_total;
    }
    let spec = &spec;
    let size = spec.size();
    if hosts.is_empty() {
        hosts.push(HostSpec {
            name: me.to_string(),
            slots: size,
        });
    }
    let kind = launcher.unwrap_or_else(|| "ssh".into());
    if !["ssh", "rsh", "fork", "slurm"].contains(&kind.as_str()) {
        return Err(format!("unknown launcher {kind:?} (ssh, rsh, slurm, fork)"));
    }
    let slots: Vec<usize> = hosts.iter().map(|h| spec.ppn.unwrap_or(h.slots)).collect();
    let placement = if spec.map_by_node {
        Placement::cyclic(size, hosts.len())
    } else {
        Placement::block(size, &slots)
    };
    let appnum: Vec<u32> = spec
        .apps
        .iter()
        .enumerate()
        .flat_map(|(i, a)| std::iter::repeat_n(i as u32, a.nprocs))
        .collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let apps = spec
        .apps
        .iter()
        .enumerate()
        .map(|(i, a)| AppPlan {
            program: a.program.clone(),
            args: a.args.clone(),
            env: segment_env(spec, i),
            wdir: cwd
                .join(a.wdir.clone().or(spec.wdir.clone()).unwrap_or(cwd.clone()))
                .display()
                .to_string(),
        })
        .collect();
    // The front end serves the first host entry that is this machine (unless Slurm must
    // start every agent); every other host with ranks gets an agent.
    let served_here = (kind != "slurm")
        .then(|| hosts.iter().position(|h| is_local(&h.name, me)))
        .flatten();
    // Each host's ranks, in one pass over the placement.
    let mut on_host: Vec<Vec<usize>> = vec![Vec::new(); hosts.len()];
    for (rank, &n) in placement.node.iter().enumerate() {
        on_host[n].push(rank);
    }
    let used: Vec<usize> = (0..hosts.len())
        .filter(|&n| !on_host[n].is_empty())
        .collect();
    let master = if spec.ml_env {
        let n0 = placement.node.first().copied().unwrap_or(0);
        let here = Some(n0) == served_here || kind == "fork";
        let addr = if here {
            "127.0.0.1".to_string()
        } else {
            hosts[n0].name.clone()
        };
        let port = std::net::TcpListener::bind("0.0.0.0:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port for MASTER_PORT: {e}"))?
            .port();
        Some((addr, port))
    } else {
        None
    };
    let job = JobPlan {
        kvsname: kvsname(me),
        size,
        universe_size: spec.universe_size.unwrap_or(size as i64),
        appnum: appnum.clone(),
        process_mapping: placement.process_mapping(),
        apps,
        label: spec.label,
        pmi_port: spec.pmi_port,
        kill_grace_ms: env_secs("KAURI_KILL_GRACE", 3.0).as_millis() as u64,
        hosts: used.iter().map(|&n| hosts[n].name.clone()).collect(),
        master,
    };
    let (mut local, mut remote) = (None, Vec::new());
    for (n, h) in hosts.iter().enumerate() {
        let ranks: Vec<RankPlan> = std::mem::take(&mut on_host[n])
            .into_iter()
            .enumerate()
            .map(|(local_id, rank)| RankPlan {
                rank,
                app: appnum[rank] as usize,
                local_id,
            })
            .collect();
        if ranks.is_empty() {
            continue;
        }
        let hp = HostPlan {
            host: h.name.clone(),
            node: n,
            index: used.iter().position(|&u| u == n).unwrap_or(0),
            ranks,
        };
        if Some(n) == served_here {
            local = Some(hp);
        } else {
            remote.push(hp);
        }
    }
    let self_path = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "kauri".into());
    let exec = spec
        .launcher_exec
        .clone()
        .unwrap_or_else(|| match kind.as_str() {
            "slurm" => "srun".into(),
            "fork" => self_path.clone(),
            k => k.to_string(),
        });
    let launch = LaunchPlan {
        kind: kind.clone(),
        exec,
        extra_args: std::env::var("KAURI_LAUNCHER_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        agent_path: std::env::var("KAURI_AGENT_PATH").unwrap_or(self_path),
        connect_timeout_s: env_secs("KAURI_CONNECT_TIMEOUT", 60.0).as_secs().max(1),
        max_concurrent: std::env::var("KAURI_LAUNCH_CONCURRENCY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32),
    };
    let width = if kind == "slurm" {
        0
    } else {
        spec.tree_width
            .or_else(|| {
                std::env::var("KAURI_TREE_WIDTH").ok().and_then(|v| {
                    if v == "flat" {
                        Some(0)
                    } else {
                        v.parse().ok()
                    }
                })
            })
            .unwrap_or(DEFAULT_TREE_WIDTH)
    };
    let rank_host = placement
        .node
        .iter()
        .map(|&n| hosts[n].name.clone())
        .collect();
    Ok(Plan {
        job,
        local,
        remote,
        launch,
        width,
        rank_host,
    })
}

/// Runs a job and returns kauri's exit status.
pub async fn run(spec: JobSpec) -> i32 {
    let me = local_host();
    raise_fd_limit();
    let p = match plan(&spec, &me) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kauri: {e}");
            return STATUS_LAUNCHER;
        }
    };
    info!(kvsname = %p.job.kvsname, size = p.job.size, hosts = p.remote.len() + p.local.is_some() as usize, "starting job");
    let mut ranks: Vec<RankState> = p
        .rank_host
        .iter()
        .map(|h| RankState {
            host: h.clone(),
            ..Default::default()
        })
        .collect();

    // Output: everything the ranks and agents write, printed whole line by whole line.
    let (out_tx, mut out_rx) = mpsc::channel::<(Stream, Bytes)>(1024);
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<()>();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let printer = {
        let ev = ev_tx.clone();
        tokio::task::spawn_local(async move {
            let (mut so, mut se) = (tokio::io::stdout(), tokio::io::stderr());
            let mut stdout_ok = true;
            let mut stopping = false;
            loop {
                let next = if stopping {
                    out_rx.try_recv().ok()
                } else {
                    tokio::select! {
                        biased;
                        m = out_rx.recv() => m,
                        _ = &mut stop_rx => {
                            stopping = true;
                            continue;
                        }
                    }
                };
                let Some((stream, data)) = next else { break };
                match stream {
                    Stream::Stdout if stdout_ok => {
                        if so.write_all(&data).await.is_err() || so.flush().await.is_err() {
                            stdout_ok = false;
                            let _ = ev.send(());
                        }
                    }
                    Stream::Stdout => {}
                    Stream::Stderr => {
                        let _ = se.write_all(&data).await;
                        let _ = se.flush().await;
                    }
                }
            }
        })
    };

    let key = match tree::new_key() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("kauri: cannot make a job key: {e}");
            return STATUS_LAUNCHER;
        }
    };
    let (hub_tx, mut hub_rx) = mpsc::unbounded_channel();
    let subtrees = tree::build(p.remote.clone(), p.width);
    let ip = advertise(
        p.remote.first().map(|h| h.host.as_str()),
        p.launch.kind == "fork",
    );
    let kids = match Children::start(
        subtrees,
        p.job.clone(),
        p.launch.clone(),
        key,
        ip,
        hub_tx,
        out_tx.clone(),
    )
    .await
    {
        Ok(k) => k,
        Err(e) => {
            eprintln!("kauri: {e}");
            return STATUS_LAUNCHER;
        }
    };
    let (node_tx, mut node_rx) = mpsc::unbounded_channel();
    let mut start_error = None;
    let mut node = match &p.local {
        None => None,
        Some(hp) => match Node::start(&p.job, hp, node_tx, out_tx.clone()).await {
            Ok(n) => {
                for r in &hp.ranks {
                    ranks[r.rank].pid = 0;
                }
                Some(n)
            }
            Err(e) => {
                start_error = Some(e);
                None
            }
        },
    };
    // stdin goes to rank 0, here or down the tree.
    let (stdin_tx, mut stdin_rx) = mpsc::channel::<Down>(16);
    let stdin_child = kids.child_with_rank(0);
    if let Some(pipe) = node.as_mut().and_then(|n| n.stdin.take()) {
        tokio::task::spawn_local(crate::iofwd::pump(tokio::io::stdin(), pipe));
    } else if stdin_child.is_some() {
        tokio::task::spawn_local(async move {
            let mut input = tokio::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let msg = match input.read(&mut buf).await {
                    Ok(0) | Err(_) => Down::StdinEof,
                    Ok(n) => Down::Stdin(buf[..n].to_vec()),
                };
                let eof = msg == Down::StdinEof;
                if stdin_tx.send(msg).await.is_err() || eof {
                    break;
                }
            }
        });
    }

    let mut gather = Gather::new(node.is_some(), kids.ids());
    let (mut hub_open, mut node_open) = (true, true);
    let grace = Duration::from_millis(p.job.kill_grace_ms);
    let mut ending: Option<Ending> = None;
    let mut kill_at: Option<Instant> = None;
    let mut sigint = signal(SignalKind::interrupt()).ok();
    let mut sigterm = signal(SignalKind::terminate()).ok();
    let mut sighup = signal(SignalKind::hangup()).ok();
    let mut sigusr1 = signal(SignalKind::user_defined1()).ok();
    let mut sigusr2 = signal(SignalKind::user_defined2()).ok();
    let deadline = spec.timeout.map(|t| Instant::now() + t);
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86400);

    async fn recv_sig(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }

    let teardown = |why: Ending,
                    ending: &mut Option<Ending>,
                    kill_at: &mut Option<Instant>,
                    node: &Option<Node>,
                    kids: &Children| {
        if ending.is_none() {
            *ending = Some(why);
        }
        if kill_at.is_none() {
            if let Some(n) = node {
                n.signal(libc::SIGTERM);
            }
            kids.broadcast(&Down::Teardown);
            *kill_at = Some(Instant::now() + grace);
        }
    };
    if let Some(e) = start_error {
        eprintln!("kauri: {e}");
        teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
    }

    loop {
        let local_done = node.as_ref().is_none_or(|n| n.running() == 0);
        if local_done && kids.all_done() {
            break;
        }
        let mut reports: Vec<Report> = Vec::new();
        tokio::select! {
            ev = node_rx.recv(), if node.is_some() && node_open => {
                let Some(ev) = ev else {
                    node_open = false;
                    continue;
                };
                match ev {
                    NodeEvent::Exited { rank, pid, status, initialized, finalized } => reports.push(Report::Exited {
                        rank, pid, host: ranks[rank].host.clone(), code: status.code(), signal: status.signal(), finalized, initialized,
                        in_teardown: ending.is_some(),
                    }),
                    NodeEvent::Engine(Output::FenceReady { epoch, delta }) => {
                        if let Some((e, d)) = gather.local(epoch, delta) {
                            complete_fence(e, d, &node, &kids);
                        }
                    }
                    NodeEvent::Engine(Output::Initialized { rank }) => reports.push(Report::Initialized { rank }),
                    NodeEvent::Engine(Output::Publish { delta }) => publish(delta, &node, &kids),
                    NodeEvent::Engine(Output::Abort { rank, code, message }) => reports.push(Report::Abort { rank, code, message }),
                    NodeEvent::Engine(Output::Failed { reason }) => reports.push(Report::Failed { reason }),
                    NodeEvent::Engine(Output::ProtocolError { rank, error }) => reports.push(Report::ProtocolError { rank, error }),
                    NodeEvent::Engine(_) => {}
                }
            }
            ev = hub_rx.recv(), if hub_open => {
                let Some(ev) = ev else {
                    // No children (or all gone): this branch has nothing more to say.
                    hub_open = false;
                    continue;
                };
                match ev {
                    HubEvent::Up { id, msg: Up::Fence { epoch, delta } } => {
                        debug!(id, epoch, "fence contribution");
                        if let Some((e, d)) = gather.child(id, epoch, delta) {
                            complete_fence(e, d, &node, &kids);
                        }
                    }
                    HubEvent::Up { msg: Up::Reports(r), .. } => reports.extend(r),
                    HubEvent::Up { msg: Up::Publish(d), .. } => publish(d, &node, &kids),
                    HubEvent::Up { id, msg: Up::Done } => kids.mark_done(id),
                    HubEvent::Up { .. } => {}
                    HubEvent::Lost { id, reason } => {
                        kids.mark_done(id);
                        if ending.is_none() {
                            eprintln!("kauri: {reason}");
                        }
                        teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
                    }
                    HubEvent::Refused { addr, reason } => eprintln!("kauri: refused a connection from {addr}: {reason}"),
                }
            }
            Some(m) = stdin_rx.recv() => {
                if let Some(id) = stdin_child {
                    kids.send(id, m);
                }
            }
            _ = ev_rx.recv() => teardown(Ending::OutputClosed, &mut ending, &mut kill_at, &node, &kids),
            _ = recv_sig(&mut sigint) => {
                if kill_at.is_some() {
                    if let Some(n) = &node { n.signal(libc::SIGKILL); }
                    kids.broadcast(&Down::Kill);
                } else {
                    if let Some(n) = &node { n.signal(libc::SIGINT); }
                    kids.broadcast(&Down::Signal(libc::SIGINT));
                    teardown(Ending::Signal(libc::SIGINT), &mut ending, &mut kill_at, &node, &kids);
                }
            }
            _ = recv_sig(&mut sigterm) => teardown(Ending::Signal(libc::SIGTERM), &mut ending, &mut kill_at, &node, &kids),
            _ = recv_sig(&mut sighup) => {
                if let Some(n) = &node { n.signal(libc::SIGHUP); }
                kids.broadcast(&Down::Signal(libc::SIGHUP));
                teardown(Ending::Signal(libc::SIGHUP), &mut ending, &mut kill_at, &node, &kids);
            }
            _ = recv_sig(&mut sigusr1) => {
                if let Some(n) = &node { n.signal(libc::SIGUSR1); }
                kids.broadcast(&Down::Signal(libc::SIGUSR1));
            }
            _ = recv_sig(&mut sigusr2) => {
                if let Some(n) = &node { n.signal(libc::SIGUSR2); }
                kids.broadcast(&Down::Signal(libc::SIGUSR2));
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && ending.is_none() => {
                eprintln!("kauri: job timed out after {} s (MPIEXEC_TIMEOUT)", spec.timeout.unwrap_or_default().as_secs());
                teardown(Ending::Timeout, &mut ending, &mut kill_at, &node, &kids);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                if let Some(n) = &node { n.signal(libc::SIGKILL); }
                kids.broadcast(&Down::Kill);
                kill_at = Some(far);
            }
        }
        for r in reports {
            match r {
                Report::Exited {
                    rank,
                    pid,
                    host,
                    code,
                    signal,
                    finalized,
                    initialized,
                    in_teardown,
                } => {
                    let Some(st) = ranks.get_mut(rank) else {
                        continue;
                    };
                    *st = RankState {
                        host,
                        pid,
                        ended: Some((code, signal)),
                        during_teardown: in_teardown,
                        initialized,
                        finalized,
                    };
                    let failed = code != Some(0);
                    if failed && ending.is_none() && spec.auto_cleanup {
                        teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
                    } else if !failed && !finalized && ending.is_none() {
                        // A rank that ends without finalize can never join a fence again.
                        let waiting = ranks.iter().enumerate().any(|(r, s)| {
                            r != rank && s.initialized && !s.finalized && s.ended.is_none()
                        });
                        if waiting {
                            let what = if initialized {
                                "exited without finalizing PMI"
                            } else {
                                "exited before PMI init"
                            };
                            eprintln!("kauri: rank {rank} on {} {what} while other ranks use PMI; ending the job", ranks[rank].host);
                            teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
                        }
                    }
                }
                Report::Initialized { rank } => {
                    if let Some(s) = ranks.get_mut(rank) {
                        s.initialized = true;
                    }
                    let gone = ranks
                        .iter()
                        .enumerate()
                        .find(|(_, s)| s.ended == Some((Some(0), None)) && !s.finalized);
                    if let (Some((g, s)), None) = (gone, &ending) {
                        let what = if s.initialized {
                            "exited without finalizing PMI"
                        } else {
                            "exited before PMI init"
                        };
                        eprintln!("kauri: rank {g} on {} {what} while other ranks use PMI; ending the job", s.host);
                        teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
                    }
                }
                Report::Abort {
                    rank,
                    code,
                    message,
                } => {
                    let who = rank.map_or("a process".to_string(), |r| format!("rank {r}"));
                    let msg = if message.is_empty() {
                        String::new()
                    } else {
                        format!(": {message}")
                    };
                    eprintln!("kauri: {who} aborted the job with code {code}{msg}");
                    teardown(Ending::Abort(code), &mut ending, &mut kill_at, &node, &kids);
                }
                Report::Failed { reason } => {
                    if ending.is_none() {
                        eprintln!("kauri: {reason}; ending the job");
                    }
                    teardown(Ending::Failed, &mut ending, &mut kill_at, &node, &kids);
                }
                Report::ProtocolError { rank, error } => {
                    let who = rank.map_or("a PMI client".to_string(), |r| format!("rank {r}"));
                    eprintln!("kauri: {who} sent a bad PMI message: {error}");
                }
            }
        }
    }

    // Forward the last output, then report failed ranks and compute the status.
    if let Some(n) = node {
        n.drain().await;
    }
    drop(out_tx);
    drop(kids);
    let _ = stop_tx.send(());
    let _ = printer.await;
    let mut worst = 0;
    for (r, s) in ranks.iter().enumerate() {
        let Some((code, sig)) = s.ended else { continue };
        if s.during_teardown || code == Some(0) {
            continue;
        }
        let c = match (code, sig) {
            (Some(c), _) => {
                eprintln!(
                    "kauri: rank {r} (pid {}) on {} exited with code {c}",
                    s.pid, s.host
                );
                c
            }
            (None, Some(sig)) => {
                eprintln!(
                    "kauri: rank {r} (pid {}) on {} killed by signal {sig} ({})",
                    s.pid,
                    s.host,
                    proc::signal_name(sig)
                );
                sig
            }
            _ => 1,
        };
        worst = worst.max(c);
    }
    debug!(worst, "job ended");
    match ending {
        Some(Ending::Abort(code)) => code & 0xff,
        Some(Ending::Timeout) => STATUS_LAUNCHER,
        Some(Ending::Signal(s)) => 128 + s,
        Some(Ending::OutputClosed) => 128 + libc::SIGPIPE,
        Some(Ending::Failed) if worst == 0 => STATUS_LAUNCHER,
        _ => worst,
    }
}

/// Pairs published without a fence reach the root: commit them on every host.
fn publish(delta: crate::kvs::Delta, node: &Option<Node>, kids: &Children) {
    kids.broadcast(&Down::Publish(delta.clone()));
    if let Some(n) = node {
        n.publish(delta);
    }
}

/// The whole tree has contributed to fence `epoch`: release the local ranks, tell the children.
fn complete_fence(epoch: u64, delta: crate::kvs::Delta, node: &Option<Node>, kids: &Children) {
    debug!(epoch, keys = delta.len(), "fence complete");
    kids.broadcast(&Down::FenceDone {
        epoch,
        delta: delta.clone(),
    });
    if let Some(n) = node {
        n.fence_done(epoch, delta);
    }
}
