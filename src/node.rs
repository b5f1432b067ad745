//! The ranks of one host: started with their PMI sockets, served by a PMI [`Engine`], their
//! output forwarded as whole lines, their ends reported. The front end runs one for the ranks
//! on its own host; every agent runs one for its host.
//!
//! A `Node` decides nothing about the job: fence completion, failures and teardown are the
//! caller's ([`NodeEvent`] tells it what happened; [`Node::fence_done`], [`Node::signal`] act).

use crate::iofwd;
use crate::pmi::{ConnId, Engine, Framing, JobInfo, Output};
use crate::proc::{self, Launch};
use crate::tree::{Adopt, HostPlan, JobPlan, Stream};
use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::rc::Rc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// What happened on this host.
#[derive(Debug)]
pub enum NodeEvent {
    /// A rank ended.
    Exited {
        /// The rank.
        rank: usize,
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: ExitStatus,
        /// It had finished the PMI handshake.
        initialized: bool,
        /// It had called finalize.
        finalized: bool,
    },
    /// Something from the PMI engine: `FenceReady`, `Abort`, `Failed`, `ProtocolError`,
    /// `Initialized`, `Finalized`.
    Engine(Output),
}

/// State shared by the tasks of one host's ranks (all on one thread).
struct Ctx {
    engine: RefCell<Engine>,
    writers: RefCell<HashMap<ConnId, mpsc::UnboundedSender<Bytes>>>,
    events: mpsc::UnboundedSender<NodeEvent>,
    next_conn: Cell<ConnId>,
}

impl Ctx {
    /// Writes replies; hands everything else to the node's owner.
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
                    other => {
                        let _ = self.events.send(NodeEvent::Engine(other));
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

/// Serves one PMI connection until it closes. Each connection has a reader (this task) and a
/// writer task with a queue, so a rank that does not read its replies blocks nobody.
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

/// MPICH ch3's variable for the host name or address it listens and connects on.
const ICH3_IFACE: &str = "MPIR_CVAR_CH3_INTERFACE_HOSTNAME";

/// The longest a singleton may take to answer the `singinit` exchange.
const SINGINIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Connects to a singleton (a program started without a launcher that ran
/// `kauri -pmi_args …`) and completes MPICH's `singinit` exchange: kauri says `singinit`, the
/// program answers `singinit` with its PMI version, kauri answers `singinit_info` with the
/// job's kvsname and no stdio forwarding (the program keeps its own stdio). The program then
/// speaks PMI-1 on the same connection, starting with `init`.
async fn singinit(a: &Adopt, kvsname: &str) -> Result<tokio::net::TcpStream, String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(&a.addr).await.map_err(|e| {
            format!(
                "cannot connect to the singleton (pid {}) at {}: {e}",
                a.pid, a.addr
            )
        })?;
        let _ = s.set_nodelay(true);
        s.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=1 stdio=no authtype=none\n")
            .await
            .map_err(|e| format!("singleton (pid {}): {e}", a.pid))?;
        // One line, read byte by byte: the program sends nothing more until it has our answer.
        let mut line = Vec::new();
        loop {
            let mut b = [0u8; 1];
            match s.read(&mut b).await {
                Ok(0) => {
                    return Err(format!(
                        "the singleton (pid {}) closed the connection during singinit",
                        a.pid
                    ))
                }
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) if line.len() < 1024 => line.push(b[0]),
                Ok(_) => {
                    return Err(format!(
                        "the singleton (pid {}) sent an over-long singinit line",
                        a.pid
                    ))
                }
                Err(e) => return Err(format!("singleton (pid {}): {e}", a.pid)),
            }
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
        };
        if field("cmd") != Some("singinit") {
            return Err(format!(
                "the singleton (pid {}) answered {line:?}, not cmd=singinit",
                a.pid
            ));
        }
        if let Some(auth) = field("authtype").filter(|&t| t != "none") {
            return Err(format!(
                "the singleton (pid {}) asks for authentication {auth:?}; kauri offers none",
                a.pid
            ));
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
        .map_err(|e| format!("singleton (pid {}): {e}", a.pid))?;
        if versionok == "no" {
            return Err(format!(
                "the singleton (pid {}) speaks {line:?}; kauri serves singletons PMI-1",
                a.pid
            ));
        }
        Ok(s)
    };
    tokio::time::timeout(SINGINIT_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            format!(
                "the singleton (pid {}) did not complete singinit within {} s",
                a.pid,
                SINGINIT_TIMEOUT.as_secs()
            )
        })?
}

/// Reports that rank `r` (pid `pid`) ended: the engine's view first (it knows who waits in a
/// fence here), then the event, with the status `status` gives knowing whether it finalized.
fn rank_ended(
    c: &Ctx,
    ev: &mpsc::UnboundedSender<NodeEvent>,
    running: &RefCell<HashMap<usize, u32>>,
    r: usize,
    pid: u32,
    status: impl FnOnce(bool) -> ExitStatus,
) {
    running.borrow_mut().remove(&r);
    let (initialized, finalized) = {
        let mut e = c.engine.borrow_mut();
        e.rank_exited(r);
        (e.initialized(r), e.finalized(r))
    };
    c.dispatch();
    let _ = ev.send(NodeEvent::Exited {
        rank: r,
        pid,
        status: status(finalized),
        initialized,
        finalized,
    });
}

/// The ranks of one host.
pub struct Node {
    ctx: Rc<Ctx>,
    /// The host's name.
    pub host: String,
    /// Running ranks: rank -> pid (process group).
    running: Rc<RefCell<HashMap<usize, u32>>>,
    /// Every pid this node started (for the leftover sweep).
    pids: Vec<u32>,
    forwarders: Vec<JoinHandle<()>>,
    ended: watch::Sender<bool>,
    /// Rank 0's stdin, when rank 0 runs here.
    pub stdin: Option<pipe::Sender>,
    /// The pid of a singleton served as rank 0: not ours, signalled alone, never swept.
    adopted: Option<u32>,
}

/// True when `name` means this machine.
pub fn is_local(name: &str, me: &str) -> bool {
    name == "localhost"
        || name == me
        || name.starts_with("127.")
        || name == "::1"
        || me.split('.').next() == Some(name)
}

/// This machine's host name.
pub fn local_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl Node {
    /// Starts the ranks `me` lists. Programs are resolved first, so a typo starts nothing;
    /// the error is one line naming the host.
    pub async fn start(
        job: &JobPlan,
        me: &HostPlan,
        events: mpsc::UnboundedSender<NodeEvent>,
        out: mpsc::Sender<(Stream, Bytes)>,
    ) -> Result<Node, String> {
        let host = me.host.clone();
        // Resolve the programs of the segments that run here.
        let mut programs: HashMap<usize, PathBuf> = HashMap::new();
        let adopting = |rank: usize| rank == 0 && job.adopt.is_some();
        for r in &me.ranks {
            if programs.contains_key(&r.app) || adopting(r.rank) {
                continue;
            }
            let a = job
                .apps
                .get(r.app)
                .ok_or_else(|| format!("rank {} names a segment that does not exist", r.rank))?;
            let wdir = PathBuf::from(&a.wdir);
            if !wdir.is_dir() {
                return Err(format!(
                    "working directory {} does not exist on {host}",
                    a.wdir
                ));
            }
            let path = a
                .env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_str());
            let p =
                proc::resolve(&a.program, path, &wdir).map_err(|e| format!("{e} (on {host})"))?;
            programs.insert(r.app, p);
        }
        let info = JobInfo {
            kvsname: job.kvsname.clone(),
            size: job.size,
            universe_size: job.universe_size,
            appnum: job.appnum.clone(),
            process_mapping: job.process_mapping.clone(),
            local_ranks: me.ranks.iter().map(|r| r.rank).collect(),
            spawner_jobid: job.spawner.clone(),
            puts_visible_at_once: job.adopt.is_some(),
        };
        let mut engine = Engine::new(info);
        for (k, v) in &job.preput {
            engine.preput(k.clone(), v.clone());
        }
        let ctx = Rc::new(Ctx {
            engine: RefCell::new(engine),
            writers: RefCell::new(HashMap::new()),
            events: events.clone(),
            next_conn: Cell::new(job.size as ConnId),
        });
        let port = if job.pmi_port {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("cannot listen for PMI on loopback on {host}: {e}"))?;
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
        } else {
            None
        };

        let (ended, ended_rx) = watch::channel(false);
        let mut node = Node {
            ctx: ctx.clone(),
            host: host.clone(),
            running: Rc::new(RefCell::new(HashMap::new())),
            pids: Vec::new(),
            forwarders: Vec::new(),
            ended,
            stdin: None,
            adopted: None,
        };
        let nlocal = me.ranks.len();
        for rp in &me.ranks {
            let r = rp.rank;
            if let (true, Some(a)) = (adopting(r), &job.adopt) {
                let stream = singinit(a, &job.kvsname).await?;
                let conn = r as ConnId;
                ctx.engine.borrow_mut().connect(conn, Some(r));
                tokio::task::spawn_local(serve_conn(ctx.clone(), conn, stream));
                node.adopted = Some(a.pid);
                node.running.borrow_mut().insert(r, a.pid);
                let (ev, c, running) = (events.clone(), ctx.clone(), node.running.clone());
                let (pid, watch) = (a.pid, proc::ForeignWatch::new(a.pid));
                tokio::task::spawn_local(async move {
                    watch.ended().await;
                    debug!(pid, "the singleton ended");
                    // Its exit status is its own parent's to read; kauri knows whether it
                    // finalized.
                    rank_ended(&c, &ev, &running, r, pid, |finalized| {
                        ExitStatus::from_raw(if finalized { 0 } else { 1 << 8 })
                    });
                });
                continue;
            }
            let a = &job.apps[rp.app];
            let mut env: Vec<(OsString, OsString)> =
                a.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
            let mut set = |k: &str, v: String| env.push((k.into(), v.into()));
            set("PMI_RANK", r.to_string());
            set("PMI_SIZE", job.size.to_string());
            set("MPI_LOCALNRANKS", nlocal.to_string());
            set("MPI_LOCALRANKID", rp.local_id.to_string());
            set("KAURI_RANK", r.to_string());
            set("KAURI_SIZE", job.size.to_string());
            set("KAURI_LOCAL_RANK", rp.local_id.to_string());
            set("KAURI_LOCAL_SIZE", nlocal.to_string());
            set("KAURI_NODE", me.index.to_string());
            set("KAURI_NODES", job.hosts.len().to_string());
            set("KAURI_HOST", host.clone());
            set("KAURI_HOSTS", job.hosts.join(","));
            set("KAURI_JOBID", job.kvsname.clone());
            if job.spawner.is_some() {
                set("PMI_SPAWNED", "1".into());
            }
            // As Hydra does: MPICH's ch3 then listens and connects on the address of the host
            // as named (on loopback for simulated hosts) instead of picking an interface.
            if !a.env.iter().any(|(k, _)| k == ICH3_IFACE) {
                let iface = if job.simulated_hosts {
                    "127.0.0.1"
                } else {
                    host.as_str()
                };
                set(ICH3_IFACE, iface.to_string());
            }
            if let Some((addr, port)) = &job.master {
                set("RANK", r.to_string());
                set("WORLD_SIZE", job.size.to_string());
                set("LOCAL_RANK", rp.local_id.to_string());
                set("LOCAL_WORLD_SIZE", nlocal.to_string());
                set("MASTER_ADDR", addr.clone());
                set("MASTER_PORT", port.to_string());
            }
            let mut ours = None;
            let mut theirs: Option<OwnedFd> = None;
            match &port {
                Some(addr) => {
                    set("PMI_PORT", addr.clone());
                    set("PMI_ID", r.to_string());
                }
                None => {
                    let (a, b) = std::os::unix::net::UnixStream::pair()
                        .map_err(|e| format!("cannot create a PMI socket on {host}: {e}"))?;
                    set("PMI_FD", b.as_raw_fd().to_string());
                    ours = Some(a);
                    theirs = Some(b.into());
                }
            }
            let launch = Launch {
                program: programs[&rp.app].clone(),
                argv0: a.program.clone(),
                args: a.args.clone(),
                env,
                wdir: PathBuf::from(&a.wdir),
                pmi_fd: theirs,
                stdin: r == 0,
            };
            let child = match proc::spawn(launch) {
                Ok(c) => c,
                Err(e) => {
                    node.signal(libc::SIGKILL);
                    return Err(format!(
                        "cannot start rank {r} ({}) on {host}: {e}",
                        a.program
                    ));
                }
            };
            let pid = child.pid;
            debug!(rank = r, pid, "started");
            node.pids.push(pid);
            node.running.borrow_mut().insert(r, pid);
            if let Some(sock) = ours {
                let conn = r as ConnId;
                let served = sock
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(sock));
                match served {
                    Ok(s) => {
                        ctx.engine.borrow_mut().connect(conn, Some(r));
                        tokio::task::spawn_local(serve_conn(ctx.clone(), conn, s));
                    }
                    Err(e) => warn!("rank {r}: cannot serve PMI: {e}"),
                }
            }
            let label = job.label.then(|| Bytes::from(format!("[{r}] ")));
            for (stream, reader) in [
                (Stream::Stdout, child.stdout),
                (Stream::Stderr, child.stderr),
            ] {
                node.forwarders
                    .push(tokio::task::spawn_local(iofwd::forward_lines(
                        reader,
                        stream,
                        label.clone(),
                        out.clone(),
                        ended_rx.clone(),
                    )));
            }
            node.stdin = node.stdin.take().or(child.stdin);
            let ev = events.clone();
            let c = ctx.clone();
            let running = node.running.clone();
            let exit = child.exit;
            tokio::task::spawn_local(async move {
                let status = exit.wait().await;
                debug!(rank = r, ?status, "exited");
                rank_ended(&c, &ev, &running, r, pid, |_| status);
            });
        }
        Ok(node)
    }

    /// Applies the merged delta of a fence the whole tree completed, releasing local ranks.
    pub fn fence_done(&self, epoch: u64, delta: crate::kvs::Delta) {
        self.ctx.engine.borrow_mut().fence_done(epoch, delta);
        self.ctx.dispatch();
    }

    /// Hands the front end's answer to a request back to the engine that asked.
    pub fn service_reply(&self, id: u64, reply: crate::tree::ServiceReply) {
        self.ctx.engine.borrow_mut().service_reply(id, reply);
        self.ctx.dispatch();
    }

    /// Commits pairs published without a fence.
    pub fn publish(&self, delta: crate::kvs::Delta) {
        let mut e = self.ctx.engine.borrow_mut();
        for (k, v) in delta {
            e.preput(k, v);
        }
    }

    /// Sends `sig` to every running rank's process group.
    pub fn signal(&self, sig: i32) {
        for &pid in self.running.borrow().values() {
            if Some(pid) == self.adopted {
                // A singleton's process group is its shell's job, kauri included.
                proc::signal_pid(pid, sig);
            } else {
                proc::signal_group(pid, sig);
            }
        }
    }

    /// How many ranks are still running.
    pub fn running(&self) -> usize {
        self.running.borrow().len()
    }

    /// After every rank ended: kills what they left in their process groups, then forwards
    /// the rest of their output (see [`iofwd::forward_lines`]).
    pub async fn drain(self) {
        let left = proc::kill_leftovers(&self.pids);
        if left > 0 {
            debug!(left, "killed processes the ranks left behind");
        }
        let _ = self.ended.send(true);
        for f in self.forwarders {
            let _ = f.await;
        }
    }
}
