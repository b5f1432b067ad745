//! The front end of a job on this host: it places the ranks, starts them with their PMI
//! sockets, serves PMI through the [`Engine`], forwards stdio and signals, watches for
//! failure, tears the job down, and computes the exit status.
//!
//! It runs on a single-threaded tokio runtime: one thread owns the engine (no locks), and every
//! rank is forked from that thread, so `PR_SET_PDEATHSIG` ties the ranks' lives to kauri's.
//! Each PMI connection has a reader task (decode, [`Engine::handle`], dispatch) and a writer
//! task with a queue, so a rank that does not read its replies never blocks anybody else.

use crate::iofwd;
use crate::job::{EnvPolicy, JobSpec, Placement};
use crate::pmi::{ConnId, Engine, Framing, JobInfo, Output};
use crate::proc::{self, Launch};
use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Exit status when kauri itself ends the job (timeout, a failed launch, a fence that can
/// never complete), as Hydra does.
pub const STATUS_LAUNCHER: i32 = 255;

/// Events that reach the main loop.
enum Event {
    Exited { rank: usize, status: ExitStatus },
    Engine(Output),
    OutputClosed,
}

/// State shared by the tasks of one job (all on one thread).
struct Ctx {
    engine: RefCell<Engine>,
    writers: RefCell<HashMap<ConnId, mpsc::UnboundedSender<Bytes>>>,
    events: mpsc::UnboundedSender<Event>,
    next_conn: Cell<ConnId>,
}

impl Ctx {
    /// Acts on the engine's outputs. On one host the front end is the whole tree, so a fence
    /// that is ready locally is complete.
    fn dispatch(&self) {
        loop {
            let outputs = self.engine.borrow_mut().drain();
            if outputs.is_empty() {
                return;
            }
            for o in outputs {
                match o {
                    Output::Send { conn, bytes } => {
                        if let Some(w) = self.writers.borrow().get(&conn) {
                            let _ = w.send(bytes);
                        }
                    }
                    Output::Close { conn } => {
                        self.writers.borrow_mut().remove(&conn);
                        self.engine.borrow_mut().disconnect(conn);
                    }
                    Output::FenceReady { epoch, delta } => {
                        self.engine.borrow_mut().fence_done(epoch, delta);
                    }
                    other => {
                        let _ = self.events.send(Event::Engine(other));
                    }
                }
            }
        }
    }

    fn new_conn(&self) -> ConnId {
        let c = self.next_conn.get();
        self.next_conn.set(c + 1);
        c
    }
}

/// Serves one PMI connection until it closes.
async fn serve_conn<S>(ctx: Rc<Ctx>, conn: ConnId, stream: S)
where
    S: AsyncRead + AsyncWrite + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    ctx.writers.borrow_mut().insert(conn, tx);
    tokio::task::spawn_local(async move {
        let mut out = BytesMut::new();
        while let Some(b) = rx.recv().await {
            out.extend_from_slice(&b);
            while let Ok(more) = rx.try_recv() {
                out.extend_from_slice(&more);
            }
            if wr.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        let _ = wr.shutdown().await;
    });
    let mut framing = Framing::default();
    let mut buf = BytesMut::with_capacity(4096);
    'read: loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            let decoded = framing.decode(&mut buf);
            match decoded {
                Ok(Some(req)) => ctx.engine.borrow_mut().handle(conn, req),
                Ok(None) => break,
                Err(e) => {
                    let fatal = e.is_fatal();
                    ctx.engine.borrow_mut().bad_input(conn, framing.is_v2(), &e);
                    if fatal {
                        ctx.dispatch();
                        break 'read;
                    }
                }
            }
        }
        ctx.dispatch();
        if !ctx.writers.borrow().contains_key(&conn) {
            break; // closed by the engine
        }
    }
    ctx.writers.borrow_mut().remove(&conn);
    ctx.engine.borrow_mut().disconnect(conn);
    ctx.dispatch();
}

/// One started rank.
struct Rank {
    pid: u32,
    status: Option<ExitStatus>,
    /// Ended after kauri began tearing the job down: not the cause of the failure.
    during_teardown: bool,
}

/// Sends `sig` to every rank still running.
fn signal_all(ranks: &[Rank], sig: i32) {
    for rk in ranks.iter().filter(|rk| rk.status.is_none()) {
        proc::signal_group(rk.pid, sig);
    }
}

/// Starts ending the job, once: `SIGTERM` now, `SIGKILL` after the grace period.
fn teardown(
    ranks: &[Rank],
    why: Ending,
    ending: &mut Option<Ending>,
    kill_at: &mut Option<Instant>,
    grace: Duration,
) {
    if ending.is_none() {
        *ending = Some(why);
    }
    if kill_at.is_none() {
        signal_all(ranks, libc::SIGTERM);
        *kill_at = Some(Instant::now() + grace);
    }
}

/// Why the job ended early.
enum Ending {
    Abort(i32),
    Timeout,
    Signal(i32),
    Failed,
    OutputClosed,
}

fn local_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// True when `name` means this machine.
pub fn is_local(name: &str, me: &str) -> bool {
    name == "localhost"
        || name == me
        || name.starts_with("127.")
        || name == "::1"
        || me.split('.').next() == Some(name)
}

/// A job name unique across concurrent launches on this host.
fn kvsname(host: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kauri_{}_{nanos:x}_{host}", std::process::id())
}

/// The environment of one rank's segment, before the PMI variables.
fn base_env(spec: &JobSpec, app: usize) -> Vec<(OsString, OsString)> {
    let a = &spec.apps[app];
    let policy = a.env_policy.as_ref().unwrap_or(&spec.env_policy);
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            !proc::is_foreign_wiring(&k)
                && match policy {
                    EnvPolicy::All => true,
                    EnvPolicy::None => false,
                    EnvPolicy::List(l) => l.iter().any(|n| *n == k),
                }
        })
        .collect();
    for (k, v) in spec.genv.iter().chain(&a.env) {
        env.retain(|(ek, _)| ek.to_string_lossy() != *k);
        env.push((k.into(), v.into()));
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

fn kill_grace() -> Duration {
    std::env::var("KAURI_KILL_GRACE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(3))
}

/// Runs a job on this host and returns kauri's exit status.
pub async fn run(spec: JobSpec) -> i32 {
    let me = local_host();
    if let Some(h) = spec.hosts.iter().find(|h| !is_local(&h.name, &me)) {
        eprintln!(
            "kauri: host {} is not this host ({me}); this kauri launches on one host only",
            h.name
        );
        return STATUS_LAUNCHER;
    }
    if let Some(l) = spec.launcher.as_deref().filter(|l| *l != "fork") {
        eprintln!("kauri: launcher {l:?} is not available: this kauri has the fork launcher only");
        return STATUS_LAUNCHER;
    }
    raise_fd_limit();
    let size = spec.size();
    let placement = Placement::single(size);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));

    // Resolve every program before starting anything: a typo starts nothing.
    let mut programs = Vec::new();
    let mut envs = Vec::new();
    for (i, a) in spec.apps.iter().enumerate() {
        let env = base_env(&spec, i);
        let wdir = a.wdir.clone().or(spec.wdir.clone()).unwrap_or(cwd.clone());
        let wdir = cwd.join(wdir);
        if !wdir.is_dir() {
            eprintln!("kauri: working directory {} does not exist", wdir.display());
            return STATUS_LAUNCHER;
        }
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.to_string_lossy().into_owned());
        match proc::resolve(&a.program, path.as_deref(), &wdir) {
            Ok(p) => programs.push((p, wdir)),
            Err(e) => {
                eprintln!("kauri: {e}");
                return STATUS_LAUNCHER;
            }
        }
        envs.push(env);
    }
    let appnum: Vec<u32> = spec
        .apps
        .iter()
        .enumerate()
        .flat_map(|(i, a)| std::iter::repeat_n(i as u32, a.nprocs))
        .collect();
    let job = JobInfo {
        kvsname: kvsname(&me),
        size,
        universe_size: spec.universe_size.unwrap_or(size as i64),
        appnum: appnum.clone(),
        process_mapping: placement.process_mapping(),
        local_ranks: (0..size).collect(),
        spawner_jobid: None,
    };
    info!(kvsname = %job.kvsname, size, "starting job");
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let ctx = Rc::new(Ctx {
        engine: RefCell::new(Engine::new(job)),
        writers: RefCell::new(HashMap::new()),
        events: ev_tx.clone(),
        next_conn: Cell::new(size as ConnId),
    });

    // Output: one writer per destination, so lines never interleave.
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(1024);
    let (err_tx, err_rx) = mpsc::channel::<Bytes>(1024);
    let ev = ev_tx.clone();
    let out_writer = tokio::task::spawn_local(async move {
        if iofwd::write_all(out_rx, tokio::io::stdout()).await.is_err() {
            let _ = ev.send(Event::OutputClosed);
        }
    });
    let err_writer = tokio::task::spawn_local(iofwd::write_all(err_rx, tokio::io::stderr()));

    // PMI over loopback TCP, when asked for.
    let port = if spec.pmi_port {
        match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => {
                let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
                let c = ctx.clone();
                tokio::task::spawn_local(async move {
                    while let Ok((s, _)) = l.accept().await {
                        let _ = s.set_nodelay(true);
                        let conn = c.new_conn();
                        c.engine.borrow_mut().connect(conn, None);
                        tokio::task::spawn_local(serve_conn(c.clone(), conn, s));
                    }
                });
                Some(addr)
            }
            Err(e) => {
                eprintln!("kauri: cannot listen for PMI on loopback: {e}");
                return STATUS_LAUNCHER;
            }
        }
    } else {
        None
    };

    // Start the ranks.
    let on_node: Vec<Vec<usize>> = (0..placement.nodes)
        .map(|n| placement.ranks_on(n))
        .collect();
    let mut ranks: Vec<Rank> = Vec::with_capacity(size);
    let mut forwarders = Vec::new();
    let (ended_tx, ended_rx) = tokio::sync::watch::channel(false);
    let mut start_error = None;
    for (r, &app) in appnum.iter().enumerate() {
        let app = app as usize;
        let a = &spec.apps[app];
        let local = &on_node[placement.node[r]];
        let mut env = envs[app].clone();
        let mut set = |k: &str, v: String| env.push((k.into(), v.into()));
        set("PMI_RANK", r.to_string());
        set("PMI_SIZE", size.to_string());
        set("MPI_LOCALNRANKS", local.len().to_string());
        let local_id = local.iter().position(|&x| x == r).unwrap_or(0);
        set("MPI_LOCALRANKID", local_id.to_string());
        let mut ours = None;
        let mut theirs: Option<OwnedFd> = None;
        match &port {
            Some(addr) => {
                set("PMI_PORT", addr.clone());
                set("PMI_ID", r.to_string());
            }
            None => match std::os::unix::net::UnixStream::pair() {
                Ok((a, b)) => {
                    use std::os::fd::AsRawFd;
                    set("PMI_FD", b.as_raw_fd().to_string());
                    ours = Some(a);
                    theirs = Some(b.into());
                }
                Err(e) => {
                    start_error = Some(format!("cannot create a PMI socket: {e}"));
                    break;
                }
            },
        }
        let launch = Launch {
            program: programs[app].0.clone(),
            argv0: a.program.clone(),
            args: a.args.clone(),
            env,
            wdir: programs[app].1.clone(),
            pmi_fd: theirs,
            stdin: r == 0,
        };
        let child = match proc::spawn(launch) {
            Ok(c) => c,
            Err(e) => {
                start_error = Some(format!("cannot start rank {r} ({}): {e}", a.program));
                break;
            }
        };
        let pid = child.pid;
        debug!(rank = r, pid, "started");
        if let Some(sock) = ours {
            let _ = sock.set_nonblocking(true);
            match tokio::net::UnixStream::from_std(sock) {
                Ok(s) => {
                    let conn = r as ConnId;
                    ctx.engine.borrow_mut().connect(conn, Some(r));
                    tokio::task::spawn_local(serve_conn(ctx.clone(), conn, s));
                }
                Err(e) => warn!("rank {r}: cannot serve PMI: {e}"),
            }
        }
        let label = |r: usize| spec.label.then(|| Bytes::from(format!("[{r}] ")));
        forwarders.push(tokio::task::spawn_local(iofwd::forward_lines(
            child.stdout,
            label(r),
            out_tx.clone(),
            ended_rx.clone(),
        )));
        forwarders.push(tokio::task::spawn_local(iofwd::forward_lines(
            child.stderr,
            label(r),
            err_tx.clone(),
            ended_rx.clone(),
        )));
        if let Some(i) = child.stdin {
            tokio::task::spawn_local(iofwd::pump(tokio::io::stdin(), i));
        }
        let ev = ev_tx.clone();
        let exit = child.exit;
        tokio::task::spawn_local(async move {
            let status = exit.wait().await;
            let _ = ev.send(Event::Exited { rank: r, status });
        });
        ranks.push(Rank {
            pid,
            status: None,
            during_teardown: false,
        });
    }
    drop(out_tx);
    drop(err_tx);

    // Watch the job.
    let grace = kill_grace();
    let mut ending: Option<Ending> = None;
    let mut kill_at: Option<Instant> = None;
    let mut running = ranks.len();
    let mut sigint = signal(SignalKind::interrupt()).ok();
    let mut sigterm = signal(SignalKind::terminate()).ok();
    let mut sighup = signal(SignalKind::hangup()).ok();
    let mut sigusr1 = signal(SignalKind::user_defined1()).ok();
    let mut sigusr2 = signal(SignalKind::user_defined2()).ok();
    let deadline = spec.timeout.map(|t| Instant::now() + t);
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86400);

    if let Some(e) = start_error {
        eprintln!("kauri: {e}");
        teardown(&ranks, Ending::Failed, &mut ending, &mut kill_at, grace);
    }

    async fn recv_sig(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }

    while running > 0 {
        tokio::select! {
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::Exited { rank, status } => {
                        running -= 1;
                        let rk = &mut ranks[rank];
                        rk.status = Some(status);
                        rk.during_teardown = ending.is_some();
                        debug!(rank, ?status, "exited");
                        ctx.engine.borrow_mut().rank_exited(rank);
                        ctx.dispatch();
                        let failed = !status.success();
                        if failed && !rk.during_teardown && spec.auto_cleanup {
                            teardown(&ranks, Ending::Failed, &mut ending, &mut kill_at, grace);
                            // A rank that failed is the cause, not a casualty.
                            ranks[rank].during_teardown = false;
                        }
                    }
                    Event::Engine(Output::Abort { rank, code, message }) => {
                        let who = rank.map_or("a process".to_string(), |r| format!("rank {r}"));
                        let msg = if message.is_empty() { String::new() } else { format!(": {message}") };
                        eprintln!("kauri: {who} aborted the job with code {code}{msg}");
                        teardown(&ranks, Ending::Abort(code), &mut ending, &mut kill_at, grace);
                    }
                    Event::Engine(Output::Failed { reason }) => {
                        eprintln!("kauri: {reason}; ending the job");
                        teardown(&ranks, Ending::Failed, &mut ending, &mut kill_at, grace);
                    }
                    Event::Engine(Output::ProtocolError { rank, error }) => {
                        let who = rank.map_or("a PMI client".to_string(), |r| format!("rank {r}"));
                        eprintln!("kauri: {who} sent a bad PMI message: {error}");
                    }
                    Event::Engine(other) => debug!(?other, "engine"),
                    Event::OutputClosed => {
                        teardown(&ranks, Ending::OutputClosed, &mut ending, &mut kill_at, grace);
                    }
                }
            }
            _ = recv_sig(&mut sigint) => {
                if kill_at.is_some() {
                    signal_all(&ranks, libc::SIGKILL);
                } else {
                    signal_all(&ranks, libc::SIGINT);
                    teardown(&ranks, Ending::Signal(libc::SIGINT), &mut ending, &mut kill_at, grace);
                }
            }
            _ = recv_sig(&mut sigterm) => {
                teardown(&ranks, Ending::Signal(libc::SIGTERM), &mut ending, &mut kill_at, grace);
            }
            _ = recv_sig(&mut sighup) => {
                signal_all(&ranks, libc::SIGHUP);
                teardown(&ranks, Ending::Signal(libc::SIGHUP), &mut ending, &mut kill_at, grace);
            }
            _ = recv_sig(&mut sigusr1) => signal_all(&ranks, libc::SIGUSR1),
            _ = recv_sig(&mut sigusr2) => signal_all(&ranks, libc::SIGUSR2),
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && ending.is_none() => {
                eprintln!("kauri: job timed out after {} s (MPIEXEC_TIMEOUT)", spec.timeout.unwrap_or_default().as_secs());
                teardown(&ranks, Ending::Timeout, &mut ending, &mut kill_at, grace);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                signal_all(&ranks, libc::SIGKILL);
                kill_at = Some(far);
            }
        }
    }

    // What the ranks left behind dies with the job.
    let pgids: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    let left = proc::kill_leftovers(&pgids);
    if left > 0 {
        debug!(left, "killed processes the ranks left behind");
    }
    // Forward everything the ranks wrote; then the writers end with their last sender.
    let _ = ended_tx.send(true);
    for f in forwarders {
        let _ = f.await;
    }
    let _ = out_writer.await;
    let _ = err_writer.await;

    // Report failed ranks, then the status.
    let mut worst = 0;
    for (r, rk) in ranks.iter().enumerate() {
        let Some(st) = rk.status else { continue };
        if rk.during_teardown || st.success() {
            continue;
        }
        let code = match (st.code(), st.signal()) {
            (Some(c), _) => {
                eprintln!(
                    "kauri: rank {r} (pid {}) on {me} exited with code {c}",
                    rk.pid
                );
                c
            }
            (None, Some(s)) => {
                eprintln!(
                    "kauri: rank {r} (pid {}) on {me} killed by signal {s} ({})",
                    rk.pid,
                    proc::signal_name(s)
                );
                s
            }
            _ => 1,
        };
        worst = worst.max(code);
    }
    match ending {
        Some(Ending::Abort(code)) => code & 0xff,
        Some(Ending::Timeout) => STATUS_LAUNCHER,
        Some(Ending::Signal(s)) => 128 + s,
        Some(Ending::OutputClosed) => 128 + libc::SIGPIPE,
        Some(Ending::Failed) if worst == 0 => STATUS_LAUNCHER,
        _ => worst,
    }
}
