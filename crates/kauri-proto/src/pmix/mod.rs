//! The PMIx server of a host: OpenPMIx's server library inside the front end or agent, for
//! programs that wire up through PMIx (Open MPI 4.1's `ext3x` component, anything linked to
//! `libpmix`).
//!
//! One server per process ([`start`], [`shutdown`]); every job of the process with ranks on
//! this host registers its namespace ([`JobInfo`], [`register`]) and its local clients, and
//! each rank's environment comes from the library ([`ffi::setup_fork`]). What the library asks
//! of its host arrives as [`Upcall`]s on the namespace's channel and is handled by the
//! `Node`: a fence is a tree allgather of the hosts' opaque blobs, a
//! direct-modex request is routed through the tree to the host of the rank in question;
//! publish, lookup and unpublish are requests to the run's name table, as PMI's are
//! ([`names`]); a job-control request is answered at once ([`control`]).
//!
//! This module decides *what* is registered (plain data, testable); [`ffi`] is the only place
//! that talks to the C library.

pub mod control;
pub mod door;
mod error;
pub mod ffi;
pub use kauri_core::proto::pmix::jobid;
pub mod library;
pub mod names;

pub use error::{NotPrivate, PmixError, PrivateDirError};
pub use ffi::{
    CollectiveReply, GroupOp, GroupReply, LookupReply, ModexReply, OpReply, SpawnApp, SpawnReply,
    Status, Upcall, Val,
};

use kauri_core::plan::{HostPlan, JobPlan};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What this process's server made: its own directory, the job's directory it lies in
/// (shared with the other agents of the job on the same machine, removed by the last to
/// leave), and its shared-memory directory.
struct Dirs {
    mine: PathBuf,
    job: PathBuf,
    shm: Option<PathBuf>,
    /// Made on disk ([`make_places`]); until then only named.
    made: bool,
}

static DIRS: Mutex<Option<Dirs>> = Mutex::new(None);

/// The namespaces registered with this process's server, each with its local ranks (none for
/// a namespace registered only because a local client connected to it).
static NSPACES: Mutex<Vec<(String, Vec<u32>)>> = Mutex::new(Vec::new());

/// Whether namespace `nspace` is registered with this process's server.
pub fn registered(nspace: &str) -> bool {
    NSPACES
        .lock()
        .map(|v| v.iter().any(|(n, _)| n == nspace))
        .unwrap_or(false)
}

/// The ranks of namespace `nspace` that are clients of this process's server.
pub fn local_ranks(nspace: &str) -> Vec<u32> {
    NSPACES
        .lock()
        .ok()
        .and_then(|v| v.iter().find(|(n, _)| n == nspace).map(|(_, r)| r.clone()))
        .unwrap_or_default()
}

fn remember(nspace: &str, local: &[u32]) {
    if let Ok(mut v) = NSPACES.lock() {
        v.retain(|(n, _)| n != nspace);
        v.push((nspace.to_string(), local.to_vec()));
    }
}

fn forget(nspace: &str) {
    if let Ok(mut v) = NSPACES.lock() {
        v.retain(|(n, _)| n != nspace);
    }
}

/// A short stable tag for a job's tmp directory name (a Unix socket path must stay short).
fn tag(kvsname: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in kvsname.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// The job's tmp directory on this machine: `$TMPDIR/kauri-<tag of the kvsname>`.
pub fn job_tmpdir(kvsname: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kauri-{}", tag(kvsname)))
}

/// The directories a PMIx job's ranks use on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// The server's own directory, `<job tmp dir>/n<node>-<pid>`: its rendezvous and
    /// shared-memory store files, and the ranks' `PMIX_TMPDIR`/`PMIX_NSDIR` (where Open MPI
    /// puts its session directory).
    pub tmpdir: PathBuf,
    /// A directory in `/dev/shm` (or `$KAURI_PMIX_SHM_DIR`) for Open MPI's shared-memory
    /// segments (`OMPI_MCA_btl_vader_backing_directory`), so none is left behind even by a
    /// job that aborts or crashes; `None` where there is no such directory.
    pub shm: Option<PathBuf>,
}

/// This process's PMIx directories, named once (for node `node` of job `kvsname`, the first
/// job it offers PMIx) and made when its server starts ([`make_places`]): a job whose ranks
/// never use PMIx leaves nothing on disk. Everything the library and the ranks put there is
/// removed by [`shutdown`].
pub fn places(kvsname: &str, node: usize) -> Result<Places, PmixError> {
    let mut dirs = DIRS.lock().map_err(|_| PmixError::Poisoned)?;
    let d = dirs.get_or_insert_with(|| {
        let job = job_tmpdir(kvsname);
        Dirs {
            mine: job.join(format!("n{node}-{}", std::process::id())),
            job,
            shm: shm_path(kvsname, node),
            made: false,
        }
    });
    Ok(Places {
        tmpdir: d.mine.clone(),
        shm: d.shm.clone(),
    })
}

/// Makes this process's PMIx directories ([`places`]), once.
fn make_places() -> Result<(), PmixError> {
    let mut dirs = DIRS.lock().map_err(|_| PmixError::Poisoned)?;
    let Some(d) = dirs.as_mut().filter(|d| !d.made) else {
        return Ok(());
    };
    create_private_dir(&d.job)?;
    create_private_dir(&d.mine)?;
    if let Some(shm) = &d.shm {
        create_private_dir(shm)?;
    }
    d.made = true;
    Ok(())
}

/// How this process's server starts: on which host name, in which directory, its loopback
/// port inside which range (`MPIEXEC_PORT_RANGE`).
#[derive(Debug, Clone)]
struct Start {
    host: String,
    tmpdir: String,
    range: Option<kauri_core::plan::port_range::PortRange>,
}

/// A job offered PMIx on this host before the library started: registered when it does.
struct Waiting {
    job: JobPlan,
    me: HostPlan,
    /// Each local rank's CPUs, by local id (see [`JobInfo::new`]).
    cpus_of: Vec<Vec<usize>>,
    tx: tokio::sync::mpsc::UnboundedSender<Upcall>,
    /// What kauri gave its first local rank, to compare with the library's own.
    first: (u32, Vec<(String, String)>),
}

/// The server's start, once a job was offered; the jobs waiting for it; its own address.
struct Server {
    start: Option<Start>,
    waiting: Vec<Waiting>,
    upstream: Option<std::net::SocketAddr>,
}

static SERVER: Mutex<Server> = Mutex::new(Server {
    start: None,
    waiting: Vec::new(),
    upstream: None,
});

/// Offers job `job` PMIx on host `me` (its upcalls to `tx`; `cpus_of[l]`: the CPUs local
/// rank `l` is bound to, none when unbound): each local rank's PMIx variables. With OpenPMIx 4 or 5 the library need not run: the ranks are given the door
/// ([`door`]), and the job is registered when the library starts ([`start_now`]: at the
/// first client's knock, or when the host asks). With another release, or `PMIX_MCA_*`
/// settings of the user's that change what a client is given, the library starts now and
/// gives each rank its variables itself.
pub fn offer(
    job: &JobPlan,
    me: &HostPlan,
    cpus_of: &[Vec<usize>],
    tx: tokio::sync::mpsc::UnboundedSender<Upcall>,
) -> Result<std::collections::HashMap<usize, Vec<(String, String)>>, PmixError> {
    let places = places(&job.kvsname, me.node)?;
    let tmpdir = places.tmpdir.to_string_lossy().into_owned();
    if let Ok(mut s) = SERVER.lock() {
        s.start.get_or_insert(Start {
            host: me.host.clone(),
            tmpdir: tmpdir.clone(),
            range: job.port_range.clone(),
        });
    }
    let release = door_release();
    let mut env = std::collections::HashMap::new();
    let Some(release) = release.filter(|_| !ffi::running()) else {
        // The library's own variables: it runs already, or kauri cannot make them.
        SERVER.lock().map_err(|_| PmixError::Poisoned)?.run()?;
        register_here(job, me, &tmpdir, cpus_of, tx)?;
        for r in &me.ranks {
            env.insert(r.rank, ffi::setup_fork(&job.kvsname, r.rank as u32)?);
        }
        return Ok(env);
    };
    let port = door::open(job.port_range.as_ref())?;
    for r in &me.ranks {
        let c = door::Client {
            nspace: &job.kvsname,
            rank: r.rank,
            host: &me.host,
            tmpdir: &tmpdir,
            release: &release,
            port,
        };
        env.insert(r.rank, door::client_env(&c));
    }
    let first = me.ranks.first().map_or(0, |r| r.rank);
    let waiting = Waiting {
        job: job.clone(),
        me: me.clone(),
        cpus_of: cpus_of.to_vec(),
        tx,
        first: (first as u32, env.get(&first).cloned().unwrap_or_default()),
    };
    SERVER
        .lock()
        .map_err(|_| PmixError::Poisoned)?
        .waiting
        .push(waiting);
    Ok(env)
}

/// Makes job `job`'s directory in the server's directory `tmpdir` and registers the job and its
/// clients on host `me` (bound to `cpus_of`) with the running library, its upcalls to `tx`.
fn register_here(
    job: &JobPlan,
    me: &HostPlan,
    tmpdir: &str,
    cpus_of: &[Vec<usize>],
    tx: tokio::sync::mpsc::UnboundedSender<Upcall>,
) -> Result<(), PmixError> {
    create_private_dir(Path::new(&nsdir(tmpdir, &job.kvsname))).map_err(PmixError::JobDir)?;
    let info = JobInfo::new(job, me, tmpdir, cpus_of);
    register(&info, tx).map_err(|e| PmixError::Register(Box::new(e)))
}

/// The release of the library a client behind the door would be served by, when kauri can
/// make its variables: OpenPMIx 4 or 5, read from the library's file, and no `PMIX_MCA_*`
/// setting of the user's but the data store `hash`, the security `native` and the port.
fn door_release() -> Option<String> {
    // (`vars_os`: another variable's value need not be UTF-8; Grid Engine's are not.)
    let mca_ok = std::env::vars_os().all(|(k, v)| match k.to_str() {
        Some("PMIX_MCA_gds") => v == "hash",
        Some("PMIX_MCA_psec") => v == "native",
        Some(ffi::PORT_VAR) => true,
        Some(k) => !k.starts_with("PMIX_MCA_"),
        None => true,
    });
    let release = ffi::library_file().and_then(|f| ffi::release_of(&f))?;
    (mca_ok && door::release_known(&release)).then_some(release)
}

/// Starts this process's server library, unless it runs, and registers every job waiting
/// for it: the library's own address (where the door carries its clients). An error says
/// what failed, on which host.
pub fn start_now() -> Result<std::net::SocketAddr, PmixError> {
    let mut s = SERVER.lock().map_err(|_| PmixError::Poisoned)?;
    s.run()?;
    s.upstream.ok_or(PmixError::NoAddress)
}

impl Server {
    /// Starts the library unless it runs, and registers the waiting jobs.
    fn run(&mut self) -> Result<(), PmixError> {
        let Some(start) = self.start.clone() else {
            return Err(PmixError::NotOffered);
        };
        let host = &start.host;
        let on = |e: PmixError| (host.clone(), Box::new(e));
        if !ffi::running() {
            let init = |port| ffi::init(&start.tmpdir, host, port);
            make_places()
                .and_then(|()| match &start.range {
                    Some(r) => kauri_os::ports::with_free_port(r, |port| init(Some(port)))
                        .unwrap_or_else(|e| Err(e.into())),
                    None => init(None),
                })
                .map_err(|e| {
                    let (host, source) = on(e);
                    PmixError::Start { host, source }
                })?;
        }
        for w in std::mem::take(&mut self.waiting) {
            register_here(&w.job, &w.me, &start.tmpdir, &w.cpus_of, w.tx).map_err(|e| {
                let (host, source) = on(e);
                PmixError::RegisterOn { host, source }
            })?;
            let (rank, ours) = &w.first;
            let library = ffi::setup_fork(&w.job.kvsname, *rank).map_err(|e| {
                let (host, source) = on(e);
                PmixError::On { host, source }
            })?;
            let differ = door::differences(ours, &library);
            if !differ.is_empty() {
                say!(
                    "kauri: the PMIx server library gives its clients other variables than \
                     kauri gave them: {}",
                    differ.join(", ")
                );
            }
            self.upstream = self.upstream.or_else(|| door::upstream(&library));
        }
        Ok(())
    }
}

/// Creates (private to the user) the directory for Open MPI's shared-memory segments of job
/// `kvsname`'s ranks on node `node` of this machine:
/// `<root>/kauri-<tag>-n<node>-<pid>`, the root being `$KAURI_PMIX_SHM_DIR` or `/dev/shm`.
/// `None` where the root is missing or the directory cannot be made. Ranks find it through
/// `OMPI_MCA_btl_vader_backing_directory`; whoever made it removes it with the job, so no
/// segment outlives a job that aborts or crashes, and ranks of two simulated hosts on one
/// machine (same hostname, same local ranks) never share a segment's name.
///
/// The path is predictable: something already there that is not a private directory of this
/// user (see [`create_private_dir`]) is an error, not a directory to share the job's memory
/// through.
pub fn shm_dir(kvsname: &str, node: usize) -> Result<Option<PathBuf>, PrivateDirError> {
    shm_dir_in(&shm_root(), kvsname, node)
}

/// Where the shared-memory directories go: `$KAURI_PMIX_SHM_DIR`, else `/dev/shm`.
fn shm_root() -> PathBuf {
    std::env::var_os("KAURI_PMIX_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// The path [`shm_dir`] would make, not made; `None` where the root is missing.
fn shm_path(kvsname: &str, node: usize) -> Option<PathBuf> {
    let root = shm_root();
    root.is_dir().then(|| root.join(shm_leaf(kvsname, node)))
}

/// The name of a shared-memory directory: `kauri-<tag>-n<node>-<pid>`.
fn shm_leaf(kvsname: &str, node: usize) -> String {
    format!("kauri-{}-n{node}-{}", tag(kvsname), std::process::id())
}

/// [`shm_dir`] under `root`.
fn shm_dir_in(root: &Path, kvsname: &str, node: usize) -> Result<Option<PathBuf>, PrivateDirError> {
    if !root.is_dir() {
        return Ok(None);
    }
    let p = root.join(shm_leaf(kvsname, node));
    match create_private_dir(&p) {
        Ok(()) => Ok(Some(p)),
        // Something is there, and it is not ours.
        Err(e) if std::fs::symlink_metadata(&p).is_ok() => Err(e),
        Err(e) => {
            tracing::debug!("no private shared-memory directory: {e}");
            Ok(None)
        }
    }
}

/// Creates directory `p` with mode 0700, or accepts it when it is there already as a private
/// directory of this user: a real directory (`lstat`, a symbolic link is never followed),
/// owned by this user, mode 0700 (another agent of the same job on this machine made it).
/// Anything else at the path (a directory open to others or owned by another user, a link)
/// was planted, and using it would hand the job's files to whoever did: an error that says
/// what is wrong.
pub fn create_private_dir(p: &Path) -> Result<(), PrivateDirError> {
    use std::os::unix::fs::DirBuilderExt;
    // mkdir(2) creates no file through a symbolic link at the last component: it fails.
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => check_private_dir(p),
        Err(source) => Err(PrivateDirError::Create {
            path: p.to_path_buf(),
            source,
        }),
    }
}

/// Checks that `p`, which is there, is a private directory of this user (see
/// [`create_private_dir`]): else an error that says what is wrong.
pub fn check_private_dir(p: &Path) -> Result<(), PrivateDirError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).map_err(|source| PrivateDirError::Inspect {
        path: p.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let why = if m.file_type().is_symlink() {
        NotPrivate::Symlink
    } else if !m.is_dir() {
        NotPrivate::NotDirectory
    } else if m.uid() != me {
        NotPrivate::Owner(m.uid())
    } else if m.mode() & 0o777 != 0o700 {
        NotPrivate::Mode(m.mode() & 0o777)
    } else {
        return Ok(());
    };
    Err(PrivateDirError::NotPrivate {
        path: p.to_path_buf(),
        why,
    })
}

/// Finalizes the server (if this process started one) and removes its files; the job's
/// directory goes too once no other agent on this machine uses it.
pub fn shutdown() {
    ffi::finalize();
    let Ok(mut dirs) = DIRS.lock() else { return };
    if let Some(d) = dirs.take().filter(|d| d.made) {
        let _ = std::fs::remove_dir_all(&d.mine);
        let _ = std::fs::remove_dir(&d.job);
        if let Some(shm) = d.shm {
            let _ = std::fs::remove_dir_all(shm);
        }
    }
}

/// The directory of job `kvsname` in a server's directory `tmpdir` (`PMIX_NSDIR`): one per
/// job, since several jobs may share a server.
pub fn nsdir(tmpdir: &str, kvsname: &str) -> String {
    format!("{tmpdir}/ns-{}", tag(kvsname))
}

/// What the library is told about one job on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The namespace (the job's kvsname).
    pub nspace: String,
    /// The keys and values of `PMIx_server_register_nspace`.
    pub info: Vec<(String, Val)>,
    /// The local ranks.
    pub local: Vec<u32>,
}

fn join<T: ToString>(v: impl IntoIterator<Item = T>, sep: &str) -> String {
    v.into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

fn kv(k: &str, v: Val) -> (String, Val) {
    (k.to_string(), v)
}

impl JobInfo {
    /// The job information of `job` for a host that runs none of its ranks (see
    /// [`register_foreign`]): everything but what describes this host.
    pub fn foreign(job: &JobPlan) -> JobInfo {
        let none = HostPlan {
            host: String::new(),
            node: usize::MAX,
            index: usize::MAX,
            ranks: Vec::new(),
        };
        let mut j = JobInfo::new(job, &none, "", &[]);
        const THIS_HOST: [&str; 8] = [
            "pmix.hname",
            "pmix.nodeid",
            "pmix.local.size",
            "pmix.node.size",
            "pmix.lpeers",
            "pmix.lldr",
            "pmix.tmpdir",
            "pmix.nsdir",
        ];
        j.info.retain(|(k, _)| !THIS_HOST.contains(&k.as_str()));
        j
    }

    /// The job information of `job` as host `me` registers it: session, job, per-app,
    /// per-node and per-process entries, in the keys and types of OpenPMIx 4 (what PRRTE
    /// and Slurm's `mpi/pmix` register, and what Open MPI 4.1's `ext3x` reads).
    /// `tmpdir` is this host's tmp directory for the job; `cpus_of[l]` the CPUs local rank
    /// `l` is bound to (none: unbound), given as its `PMIX_CPUSET` as PRRTE gives it.
    pub fn new(job: &JobPlan, me: &HostPlan, tmpdir: &str, cpus_of: &[Vec<usize>]) -> JobInfo {
        let on_node = ranks_by_node(job);
        let apps = Apps::of(job);
        let local: Vec<u32> = me.ranks.iter().map(|r| r.rank as u32).collect();
        let mut info = job_entries(job, me, tmpdir, &on_node, &local);
        if let (Some(ns), Some(r)) = (&job.spawner, job.parent_rank) {
            // PMIX_PARENT_ID: the process whose spawn started this job.
            info.push(kv("pmix.parent", Val::Proc(ns.clone(), r)));
        }
        info.extend(apps.entries());
        info.extend(node_entries(job, me, &on_node));
        info.extend(proc_entries(job, me, &on_node, &apps, cpus_of));
        JobInfo {
            nspace: job.kvsname.clone(),
            info,
            local,
        }
    }
}

/// Every node's ranks, in rank order (one list per host of `job`, at least one).
fn ranks_by_node(job: &JobPlan) -> Vec<Vec<u32>> {
    let nodes = job.hosts.len().max(1);
    let mut on_node: Vec<Vec<u32>> = vec![Vec::new(); nodes];
    for (r, &n) in job.rank_node.iter().enumerate() {
        if let Some(list) = on_node.get_mut(n as usize) {
            list.push(r as u32);
        }
    }
    on_node
}

/// The name of node `n` of `job` (this host's when the plan has no such node).
fn host_of(job: &JobPlan, me: &HostPlan, n: u32) -> String {
    job.hosts
        .get(n as usize)
        .cloned()
        .unwrap_or_else(|| me.host.clone())
}

/// The first rank and the size of every app (MPMD segment) of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Apps {
    /// `first[a]`: app `a`'s lowest rank, `u32::MAX` when it has none.
    first: Vec<u32>,
    /// `size[a]`: how many ranks app `a` has.
    size: Vec<u32>,
}

impl Apps {
    /// The apps of `job` (at least one), from its ranks' `appnum`.
    fn of(job: &JobPlan) -> Apps {
        let napps = job.apps.len().max(1);
        let mut first = vec![u32::MAX; napps];
        let mut size = vec![0u32; napps];
        for (r, &a) in job.appnum.iter().enumerate() {
            if let Some(f) = first.get_mut(a as usize) {
                *f = (*f).min(r as u32);
                size[a as usize] += 1;
            }
        }
        Apps { first, size }
    }

    /// One `pmix.app.arr` per app: its number, size and leader.
    fn entries(&self) -> Vec<(String, Val)> {
        let mut info = Vec::new();
        for (a, (&first, &n)) in self.first.iter().zip(&self.size).enumerate() {
            info.push(kv(
                "pmix.app.arr",
                Val::Infos(vec![
                    kv("pmix.appnum", Val::U32(a as u32)),
                    kv("pmix.app.size", Val::U32(n)),
                    kv(
                        "pmix.aldr",
                        Val::Rank(if first == u32::MAX { 0 } else { first }),
                    ),
                ]),
            ));
        }
        info
    }
}

/// The session- and job-level entries of `job`, then those of this host `me`, whose ranks
/// are `local`: `on_node` gives the process map.
fn job_entries(
    job: &JobPlan,
    me: &HostPlan,
    tmpdir: &str,
    on_node: &[Vec<u32>],
    local: &[u32],
) -> Vec<(String, Val)> {
    let size = job.size as u32;
    let universe = if job.universe_size > 0 {
        job.universe_size as u32
    } else {
        size
    };
    let napps = job.apps.len().max(1);
    let node_list = job.hosts.join(",");
    let nmap = ffi::generate(&node_list, false).unwrap_or_else(|| node_list.clone());
    let ppn_input = join(on_node.iter().map(|l| join(l, ",")), ";");
    let pmap = ffi::generate(&ppn_input, true).unwrap_or_else(|| ppn_input.clone());
    vec![
        kv(
            "pmix.ssn.arr",
            Val::Infos(vec![
                kv("pmix.session.id", Val::U32(1)),
                kv("pmix.univ.size", Val::U32(universe)),
            ]),
        ),
        kv("pmix.univ.size", Val::U32(universe)),
        kv("pmix.jobid", Val::Str(job.kvsname.clone())),
        kv("pmix.nspace", Val::Str(job.kvsname.clone())),
        kv("pmix.job.size", Val::U32(size)),
        kv("pmix.max.size", Val::U32(universe)),
        kv("pmix.job.napps", Val::U32(napps as u32)),
        kv("pmix.num.nodes", Val::U32(on_node.len() as u32)),
        kv("pmix.nmap", Val::Str(nmap)),
        kv("pmix.pmap", Val::Str(pmap)),
        kv("pmix.nlist", Val::Str(node_list)),
        kv("pmix.spawned", Val::Bool(job.spawner.is_some())),
        kv("pmix.tmpdir", Val::Str(tmpdir.to_string())),
        // The job's own directory in it: Open MPI makes its job session directory there
        // and registers it for removal at the job's end; jobs of one server (spawned
        // ones) sharing one, a job's end removed it under the next job's feet.
        kv("pmix.nsdir", Val::Str(nsdir(tmpdir, &job.kvsname))),
        // This host.
        kv("pmix.hname", Val::Str(me.host.clone())),
        kv("pmix.nodeid", Val::U32(me.index as u32)),
        kv("pmix.local.size", Val::U32(local.len() as u32)),
        kv("pmix.node.size", Val::U32(local.len() as u32)),
        kv("pmix.lpeers", Val::Str(join(local, ","))),
        kv(
            "pmix.lldr",
            Val::Rank(local.iter().copied().min().unwrap_or(0)),
        ),
    ]
}

/// One `pmix.node.arr` per node: its id, name, size, ranks and leader.
fn node_entries(job: &JobPlan, me: &HostPlan, on_node: &[Vec<u32>]) -> Vec<(String, Val)> {
    let mut info = Vec::new();
    for (n, ranks) in on_node.iter().enumerate() {
        info.push(kv(
            "pmix.node.arr",
            Val::Infos(vec![
                kv("pmix.nodeid", Val::U32(n as u32)),
                kv("pmix.hname", Val::Str(host_of(job, me, n as u32))),
                kv("pmix.local.size", Val::U32(ranks.len() as u32)),
                kv("pmix.node.size", Val::U32(ranks.len() as u32)),
                kv("pmix.lpeers", Val::Str(join(ranks, ","))),
                kv("pmix.lldr", Val::Rank(ranks.first().copied().unwrap_or(0))),
            ]),
        ));
    }
    info
}

/// One `pmix.pdata` per rank of `job`: its app, node and local rank, and for a local rank
/// bound to CPUs (`cpus_of`, by local id) its `pmix.cpuset` (a list with ranges, `0-3,8`),
/// for an unbound one a NULL `pmix.locstr`.
fn proc_entries(
    job: &JobPlan,
    me: &HostPlan,
    on_node: &[Vec<u32>],
    apps: &Apps,
    cpus_of: &[Vec<usize>],
) -> Vec<(String, Val)> {
    let local_ids: std::collections::HashMap<u32, u16> = me
        .ranks
        .iter()
        .map(|r| (r.rank as u32, r.local_id as u16))
        .collect();
    let cpus = |lr: u16| cpus_of.get(usize::from(lr)).filter(|c| !c.is_empty());
    let node_of = |r: usize| job.rank_node.get(r).copied().unwrap_or(0);
    let mut info = Vec::new();
    for r in 0..job.size {
        let rank = r as u32;
        let app = job.appnum.get(r).copied().unwrap_or(0);
        let first = apps.first.get(app as usize).copied().unwrap_or(0);
        let node = node_of(r);
        let mut p = vec![
            kv("pmix.rank", Val::Rank(rank)),
            kv("pmix.appnum", Val::U32(app)),
            kv("pmix.aldr", Val::Rank(first)),
            kv("pmix.apprank", Val::Rank(rank.saturating_sub(first))),
            kv("pmix.grank", Val::Rank(rank)),
            kv("pmix.nodeid", Val::U32(node)),
            kv("pmix.hname", Val::Str(host_of(job, me, node))),
        ];
        // Local and node rank: the index among the ranks of its node.
        let lr = local_ids.get(&rank).copied().or_else(|| {
            on_node
                .get(node as usize)
                .and_then(|l| l.iter().position(|&x| x == rank))
                .map(|i| i as u16)
        });
        if let Some(lr) = lr {
            p.push(kv("pmix.lrank", Val::U16(lr)));
            p.push(kv("pmix.nrank", Val::U16(lr)));
        }
        if let Some(&lr) = local_ids.get(&rank) {
            // An unbound local rank has no locality, which PRRTE says with a NULL string;
            // a bound one's is found by the library (`with_locality`).
            p.push(match cpus(lr) {
                Some(c) => kv("pmix.cpuset", Val::Str(kauri_core::plan::rank_ranges(c))),
                None => kv("pmix.locstr", Val::NoStr),
            });
        }
        info.push(kv("pmix.pdata", Val::Infos(p)));
    }
    info
}

/// `info` with, for each rank it gives a `pmix.cpuset`, where the library finds that rank:
/// its `pmix.locstr` and its `pmix.dev.dist` ([`ffi::locate`]), as PRRTE registers them.
/// Open MPI computes a peer's locality from them (which ranks share a socket, a NUMA node, a
/// cache: `MPI_Comm_split_type`, its collectives' choices), and Open MPI 5 chooses its NICs
/// by the distances. Ranks bound alike are located once. A rank the library cannot locate
/// is registered without them, and the agent's log says why.
fn with_locality(info: &[(String, Val)]) -> Vec<(String, Val)> {
    let mut known: std::collections::HashMap<String, Option<ffi::Located>> =
        std::collections::HashMap::new();
    let mut out = info.to_vec();
    for (k, v) in &mut out {
        let Val::Infos(p) = v else { continue };
        if k != "pmix.pdata" {
            continue;
        }
        let Some(cpus) = p.iter().find_map(|(k, v)| match v {
            Val::Str(c) if k == "pmix.cpuset" => Some(c.clone()),
            _ => None,
        }) else {
            continue;
        };
        let found = known.entry(cpus.clone()).or_insert_with(|| {
            ffi::locate(&cpus)
                .map_err(|e| tracing::warn!("the ranks bound to CPUs {cpus} are not located: {e}"))
                .ok()
        });
        if let Some(at) = found {
            let locality = at.locality.clone().map_or(Val::NoStr, Val::Str);
            p.push(kv("pmix.locstr", locality));
            if !at.distances.is_empty() {
                p.push(kv("pmix.dev.dist", Val::Distances(at.distances.clone())));
            }
        }
    }
    out
}

/// Registers a job's namespace and its local clients with this process's server, and sends
/// the namespace's upcalls to `tx`.
pub fn register(
    job: &JobInfo,
    tx: tokio::sync::mpsc::UnboundedSender<Upcall>,
) -> Result<(), PmixError> {
    ffi::route(&job.nspace, tx);
    let info = with_locality(&job.info);
    let done = ffi::register_nspace(&job.nspace, job.local.len(), &info).and_then(|()| {
        job.local
            .iter()
            .try_for_each(|&r| ffi::register_client(&job.nspace, r))
    });
    if done.is_err() {
        ffi::unroute(&job.nspace);
    } else {
        remember(&job.nspace, &job.local);
    }
    done
}

/// Registers job `job`, which has no rank on this host, because a local client connected to
/// it (`PMIx_Connect`, `MPI_Comm_accept`/`connect` and the parent side of a spawn): its clients
/// can then resolve the job's information, and ask for its ranks' data (a direct modex that
/// reaches `tx` unless the namespace's own channel is here). False when it was registered
/// already.
pub fn register_foreign(
    job: &JobPlan,
    tx: tokio::sync::mpsc::UnboundedSender<Upcall>,
) -> Result<bool, PmixError> {
    if registered(&job.kvsname) {
        return Ok(false);
    }
    let info = JobInfo::foreign(job);
    ffi::register_nspace(&info.nspace, 0, &info.info)?;
    ffi::route_if_none(&info.nspace, tx);
    remember(&info.nspace, &[]);
    Ok(true)
}

/// How the job's other ranks are told that a rank failed: a rank's abnormal end or its
/// host's loss, in the PMIx event kauri sends (see docs/pmix.md, "Failure events").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It ended: `code` when it exited, `signal` when a signal killed it. An exit with code 0
    /// is a failure only when it left without finalizing while others use PMIx.
    Ended {
        /// Its exit code.
        code: Option<i32>,
        /// The signal that killed it.
        signal: Option<i32>,
    },
    /// Its host's agent was lost.
    Lost,
    /// Its host's agent was lost in a fault-tolerant job (`-with-ft`): told as an aborted
    /// process, the event by which Open MPI's ULFM marks a peer failed (it takes
    /// `PMIX_ERR_LOST_CONNECTION` for its own server gone, and aborts).
    Aborted,
}

impl Failure {
    /// The event's status and its `PMIX_EXIT_CODE`: a signal is
    /// `PMIX_ERR_PROC_ABORTED_BY_SIG` (exit code 128 + N, as PRRTE gives it), a non-zero
    /// exit `PMIX_ERR_PROC_ABORTED` (Open MPI 4.1's mpirun's code for any failed process),
    /// an exit 0 without finalize `PMIX_ERR_PROC_TERM_WO_SYNC`, a lost host
    /// `PMIX_ERR_LOST_CONNECTION`, or under `-with-ft` `PMIX_ERR_PROC_ABORTED` (no exit code
    /// either way: nobody saw the ranks end).
    pub fn event(self) -> (Status, Option<i32>) {
        match self {
            Failure::Ended {
                signal: Some(s), ..
            } => (ffi::PMIX_ERR_PROC_ABORTED_BY_SIG, Some(128 + s)),
            Failure::Ended { code: Some(0), .. } => (ffi::PMIX_ERR_PROC_TERM_WO_SYNC, Some(0)),
            Failure::Ended { code, .. } => (ffi::PMIX_ERR_PROC_ABORTED, code),
            Failure::Lost => (ffi::PMIX_ERR_LOST_CONNECTION, None),
            Failure::Aborted => (ffi::PMIX_ERR_PROC_ABORTED, None),
        }
    }
}

/// Forgets a namespace: no more upcalls, the library's data about it released.
pub fn deregister(nspace: &str) {
    forget_here(nspace);
    ffi::deregister_nspace(nspace);
}

/// Kauri's half of a deregistration: no more upcalls are routed for `nspace`, and it no longer
/// waits to be registered.
fn forget_here(nspace: &str) {
    forget(nspace);
    // A job that ended before any client knocked is no longer waiting for the library (a run
    // of a thousand spawns of programs that never speak PMIx would otherwise keep them all).
    if let Ok(mut s) = SERVER.lock() {
        s.waiting.retain(|w| w.job.kvsname != nspace);
    }
    ffi::unroute(nspace);
}

/// [`deregister`] for a spawned job that ended while the run goes on: kauri forgets the
/// namespace at once, the library [`DEREGISTER_GRACE`] later. Must run inside a `LocalSet`.
///
/// The library's deregistration also ends each client of the namespace whose connection it
/// still holds: a rank has exited, but the library's progress thread has not yet read the end
/// of its connection. Under Open MPI 5's mpi4py `test_spawn`, where the next spawn's clients
/// connect at once, OpenPMIx 5.0 then went on to handle a lost connection for a client record
/// it had already freed: the cores showed its progress thread taking the lock of that record
/// (`pmix_psensor_base_stop`) in memory malloc had back on its free list, and kauri's own
/// thread aborting in `malloc` on the list that lock had overwritten ("unsorted double linked
/// list corrupted"); other runs hung. By the time the grace is over the library has read
/// every end, and the deregistration has no connection left to end.
pub fn deregister_later(nspace: &str) {
    forget_here(nspace);
    let nspace = nspace.to_string();
    tokio::task::spawn_local(async move {
        tokio::time::sleep(DEREGISTER_GRACE).await;
        ffi::deregister_nspace(&nspace);
    });
}

/// How long after a spawned job's end its namespace stays registered with the library: see
/// [`deregister_later`]. A deregistration still waiting when the run ends is left to the
/// library's finalize.
pub const DEREGISTER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use kauri_core::plan::{AppPlan, RankPlan};

    /// A directory kauri makes at a predictable path is used only when it is its user's: made
    /// here with mode 0700, or found there as a real directory of this user with mode 0700
    /// (another agent of the same job made it). A planted directory open to others, another
    /// user's, or a symbolic link (to a good directory, or dangling) is refused.
    #[test]
    fn a_planted_private_dir_is_refused() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let mode = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).unwrap().mode() & 0o777
        };
        let base = std::env::temp_dir().join(format!("kauri-private-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let fresh = base.join("fresh");
        create_private_dir(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        // Ours already: used as it is.
        create_private_dir(&fresh).unwrap();
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = create_private_dir(&open).expect_err("a directory open to all is refused");
        assert!(
            matches!(
                &e,
                PrivateDirError::NotPrivate {
                    why: NotPrivate::Mode(0o777),
                    ..
                }
            ),
            "{e}"
        );
        let link = base.join("link");
        symlink(&fresh, &link).unwrap();
        let e = create_private_dir(&link).expect_err("a symlink is refused");
        assert!(
            matches!(
                &e,
                PrivateDirError::NotPrivate {
                    why: NotPrivate::Symlink,
                    ..
                }
            ),
            "{e}"
        );
        let dangling = base.join("dangling");
        symlink(base.join("target"), &dangling).unwrap();
        assert!(create_private_dir(&dangling).is_err());
        assert!(
            !base.join("target").exists(),
            "a planted symlink is not followed"
        );
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = base.join("theirs");
            create_private_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = create_private_dir(&theirs).expect_err("another user's directory is refused");
            assert!(
                matches!(
                    &e,
                    PrivateDirError::NotPrivate {
                        why: NotPrivate::Owner(65534),
                        ..
                    }
                ),
                "{e}"
            );
        }
        // Under a root where the shared-memory directory was planted: the host's start fails.
        let root = base.join("shm");
        create_private_dir(&root).unwrap();
        let made = shm_dir_in(&root, "kauri_1_x", 3).unwrap().expect("made");
        assert_eq!(mode(&made), 0o700);
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = shm_dir_in(&root, "kauri_1_x", 3).expect_err("a planted one is an error");
        assert!(e.to_string().contains("not a private directory"), "{e}");
        assert!(shm_dir_in(&base.join("none"), "kauri_1_x", 3).is_ok_and(|d| d.is_none()));
        std::fs::remove_dir_all(&base).unwrap();
    }

    fn plan(rank_node: Vec<u32>, hosts: &[&str]) -> JobPlan {
        let size = rank_node.len();
        JobPlan {
            kvsname: "kauri_1_abc_vm".into(),
            size,
            universe_size: -1,
            appnum: vec![0; size],
            process_mapping: String::new(),
            apps: vec![AppPlan {
                program: "a".into(),
                args: vec![],
                env: vec![],
                wdir: "/".into(),
            }],
            output: Default::default(),
            pmi_port: false,
            kill_grace_ms: 0,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            master: None,
            spawner: None,
            parent_rank: None,
            preput: vec![],
            adopt: None,
            simulated_hosts: false,
            rank_node,
            pmix: true,
            pmi_too: false,
            pmix_now: true,
            pmix_library: None,
            profile: false,
            progress: false,
            binding: None,
            report_bindings: false,
            gpus: None,
            restart: None,
            iface: None,
            port_range: None,
            fault_tolerant: false,
            topology_ahead: false,
        }
    }

    fn get<'a>(info: &'a [(String, Val)], key: &str) -> Vec<&'a Val> {
        info.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    /// Ranks are listed per node in rank order, a rank on an unknown node left out; each
    /// app's leader is its lowest rank, an app with no rank has none (`u32::MAX`).
    #[test]
    fn ranks_are_grouped_by_node_and_by_app() {
        let mut j = plan(vec![1, 0, 1, 7], &["a", "b"]);
        assert_eq!(ranks_by_node(&j), vec![vec![1], vec![0, 2]]);
        j.apps.push(j.apps[0].clone());
        j.apps.push(j.apps[0].clone());
        j.appnum = vec![1, 1, 0, 1];
        let apps = Apps::of(&j);
        assert_eq!(apps.first, vec![2, 0, u32::MAX]);
        assert_eq!(apps.size, vec![1, 3, 0]);
        let leaders: Vec<Val> = apps
            .entries()
            .into_iter()
            .map(|(_, v)| match v {
                Val::Infos(kvs) => kvs[2].1.clone(),
                v => v,
            })
            .collect();
        assert_eq!(leaders, vec![Val::Rank(2), Val::Rank(0), Val::Rank(0)]);
        assert_eq!(ranks_by_node(&plan(vec![0, 0], &[])), vec![vec![0, 1]]);
    }

    #[test]
    fn two_hosts_round_robin() {
        let job = plan(vec![0, 1, 0, 1], &["n1", "n2"]);
        let me = HostPlan {
            host: "n2".into(),
            node: 1,
            index: 1,
            ranks: vec![
                RankPlan {
                    rank: 1,
                    app: 0,
                    local_id: 0,
                },
                RankPlan {
                    rank: 3,
                    app: 0,
                    local_id: 1,
                },
            ],
        };
        // Local rank 0 (rank 1) bound to CPUs 0 to 2, local rank 1 (rank 3) unbound.
        let j = JobInfo::new(&job, &me, "/tmp/x", &[vec![0, 1, 2], vec![]]);
        assert_eq!(j.local, vec![1, 3]);
        assert_eq!(get(&j.info, "pmix.lpeers"), [&Val::Str("1,3".into())]);
        assert_eq!(get(&j.info, "pmix.lldr"), [&Val::Rank(1)]);
        assert_eq!(get(&j.info, "pmix.job.size"), [&Val::U32(4)]);
        assert_eq!(get(&j.info, "pmix.univ.size"), [&Val::U32(4)]);
        assert_eq!(get(&j.info, "pmix.nodeid"), [&Val::U32(1)]);
        // The library is not running in unit tests: the plain lists are registered.
        assert_eq!(get(&j.info, "pmix.nmap"), [&Val::Str("n1,n2".into())]);
        assert_eq!(get(&j.info, "pmix.pmap"), [&Val::Str("0,2;1,3".into())]);
        let pdata = get(&j.info, "pmix.pdata");
        assert_eq!(pdata.len(), 4);
        // Rank 2 is on n1, its second rank.
        let Val::Infos(r2) = pdata[2] else {
            panic!("pdata is an array")
        };
        assert!(r2.contains(&kv("pmix.lrank", Val::U16(1))));
        assert!(r2.contains(&kv("pmix.hname", Val::Str("n1".into()))));
        assert_eq!(get(&j.info, "pmix.node.arr").len(), 2);
        // Where a rank is, for this host's ranks only: a bound one's CPUs, an unbound one's
        // NULL locality; nothing for another host's (rank 2).
        let (Val::Infos(r1), Val::Infos(r3)) = (pdata[1], pdata[3]) else {
            panic!("pdata is an array")
        };
        assert!(r1.contains(&kv("pmix.cpuset", Val::Str("0-2".into()))));
        assert!(!r1.iter().any(|(k, _)| k == "pmix.locstr"));
        assert!(r3.contains(&kv("pmix.locstr", Val::NoStr)));
        assert!(!r3.iter().any(|(k, _)| k == "pmix.cpuset"));
        assert!(!r2
            .iter()
            .any(|(k, _)| k == "pmix.cpuset" || k == "pmix.locstr"));
    }

    #[test]
    fn bad_plans_do_not_panic() {
        // A rank map shorter than the job and pointing past the host list.
        let mut job = plan(vec![5], &[]);
        job.size = 3;
        job.appnum = vec![7, 0];
        let me = HostPlan {
            host: "h".into(),
            node: 0,
            index: 0,
            ranks: vec![],
        };
        let j = JobInfo::new(&job, &me, "/tmp", &[]);
        assert_eq!(get(&j.info, "pmix.pdata").len(), 3);
    }

    #[test]
    fn failures_and_their_events() {
        let ended = |code, signal| Failure::Ended { code, signal }.event();
        assert_eq!(
            ended(None, Some(9)),
            (ffi::PMIX_ERR_PROC_ABORTED_BY_SIG, Some(137))
        );
        assert_eq!(ended(Some(3), None), (ffi::PMIX_ERR_PROC_ABORTED, Some(3)));
        assert_eq!(
            ended(Some(0), None),
            (ffi::PMIX_ERR_PROC_TERM_WO_SYNC, Some(0))
        );
        assert_eq!(ended(None, None), (ffi::PMIX_ERR_PROC_ABORTED, None));
        assert_eq!(Failure::Lost.event(), (ffi::PMIX_ERR_LOST_CONNECTION, None));
        assert_eq!(Failure::Aborted.event(), (ffi::PMIX_ERR_PROC_ABORTED, None));
    }

    #[test]
    fn tags_are_short_and_stable() {
        assert_eq!(tag("a"), tag("a"));
        assert_ne!(tag("a"), tag("b"));
        assert_eq!(tag("kauri_123_abcdef_host").len(), 8);
    }
}
