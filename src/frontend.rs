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

use crate::branch::{Branch, Out};
use crate::events::{self, JobTx};
use crate::hub::{Children, HubEvent};
use crate::iofwd::{Dest, Stream};
use crate::job::{EnvPolicy, Evidence, HostSpec, JobSpec, Placement, PmiChoice, Wiring};
use crate::kvs::Delta;
use crate::nameserver::{Refusal, Waiting};
use crate::node::{is_local, local_host, Node, NodeEvent};
use crate::output::{Files, OutputOptions, OutputPlan};
use crate::plan::{Adopt, AppPlan, HostPlan, JobPlan, LaunchPlan, RankPlan};
use crate::pmix::Failure;
use crate::policy::{self, Ending, ExitVerdict};
use crate::proc;
use crate::profile::{Clock, HostProfile, JobProfile, ProfileFormat, RootFence};
use crate::service::{Service, ServiceReply, SpawnDone, Wait};
use crate::tree::{self, HostStatus, LaunchCost, Report, Up};
use bytes::Bytes;
use pmi_wire::SpawnCommand;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info};

pub use crate::policy::STATUS_LAUNCHER;

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
    /// It never spoke PMI or PMIx and ran as an Open MPI singleton.
    ran_alone: bool,
}

/// A job name unique across concurrent launches on this host.
fn kvsname(host: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kauri_{}_{nanos:x}_{host}", std::process::id())
}

/// How a job is wired up: as asked, or (`auto`) from what its segments' programs are linked
/// to and what their arguments name ([`segment_evidence`], [`crate::job::auto_wiring`]);
/// a job set up for Open MPI's PMI-1 path (`FLUX_PMI_LIBRARY_PATH` in its environment) is
/// PMI.
///
/// Also says whether the job looks like an MPI job (a segment's program is linked to an MPI
/// or a PMI library, or names one past itself; [`crate::policy::never_wired`] speaks only
/// of those), whatever `--pmi` asked.
fn wiring(choice: PmiChoice, apps: &[AppPlan]) -> (Wiring, bool) {
    let found: Vec<Evidence> = apps.iter().map(segment_evidence).collect();
    debug!(?found, ?choice, "the segments' programs");
    let mpi = found.iter().any(|e| *e != Evidence::None);
    let wiring = match choice {
        PmiChoice::Pmix => Wiring::Pmix,
        PmiChoice::Pmi1 | PmiChoice::Pmi2 => Wiring::Pmi,
        PmiChoice::Auto if apps.iter().any(AppPlan::uses_open_mpi_flux) => Wiring::Pmi,
        PmiChoice::Auto => crate::job::auto_wiring(&found),
    };
    (wiring, mpi)
}

/// The most bytes of a script (or of a file an argument names that is not an ELF program)
/// searched for [`crate::job::MPI_MARKERS`].
const SCRIPT_HEAD: u64 = 64 << 10;

/// What one segment's program is linked to, and, for a program linked to no MPI (an
/// interpreter, a shell, a wrapper such as `env` or `valgrind`, a script, a static binary),
/// what lies past it: an MPI marker in its arguments (`python3 -c 'from mpi4py …'`), in the
/// script it is, or in a script an argument names (`python3 prog.py`, `bash -c "julia x.jl"`),
/// or a program an argument names that is linked to an MPI (`valgrind ./app`). Only regular
/// files are opened, and only their first bytes read.
fn segment_evidence(a: &AppPlan) -> Evidence {
    use crate::job::{arg_words, mentions_mpi, needed_libraries_of, wants_pmi, wants_pmix};
    use std::os::unix::fs::MetadataExt;
    let path = a
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let wdir = std::path::Path::new(&a.wdir);
    let head = |p: &std::path::Path, max: u64| -> Vec<u8> {
        let mut b = Vec::new();
        if std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::File::open(p)
                .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, max), &mut b));
        }
        b
    };
    // What one file is: (linked to Open MPI, linked to another MPI or PMI, mentions an MPI).
    let inspect = |p: &std::path::Path| -> (bool, bool, bool) {
        let start = head(p, 4);
        if start == b"\x7fELF" {
            let libs = needed_libraries_of(p);
            (wants_pmix(&libs), wants_pmi(&libs), false)
        } else if start.is_empty() {
            (false, false, false)
        } else {
            (false, false, mentions_mpi(&head(p, SCRIPT_HEAD)))
        }
    };
    // kauri itself (`kauri pmi`, `kauri kvs`, `sh -c 'kauri kvs get …'`) loads libpmix for
    // its PMIx server, but may speak PMI-1, PMI-2 or PMIx: the same file (a hard link
    // counts) as the running kauri.
    let me = std::env::current_exe()
        .and_then(std::fs::metadata)
        .ok()
        .map(|m| (m.dev(), m.ino()));
    let is_me = |f: &std::path::Path| {
        me.is_some() && std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino())) == me
    };
    if let Ok(p) = proc::resolve(&a.program, path, wdir) {
        if is_me(&p) {
            return Evidence::Beyond;
        }
        match inspect(&p) {
            (true, _, _) => return Evidence::Pmix,
            (_, true, _) => return Evidence::Pmi,
            (_, _, true) => return Evidence::Beyond,
            _ => {}
        }
    }
    if a.args.iter().any(|s| mentions_mpi(s.as_bytes())) {
        return Evidence::Beyond;
    }
    let mut seen = std::collections::HashSet::new();
    for w in arg_words(&a.args) {
        if !seen.insert(w) {
            continue;
        }
        let file = wdir.join(w);
        let found = if std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            Some(file)
        } else if !w.contains('/') && !w.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            // A number (`-n 4 ./app 1000`) names no program on PATH.
            proc::resolve(w, path, wdir).ok()
        } else {
            None
        };
        if let Some(f) = found.filter(|f| !is_me(f)) {
            if let (true, _, _) | (_, true, _) | (_, _, true) = inspect(&f) {
                return Evidence::Beyond;
            }
        }
    }
    Evidence::None
}

/// The OpenPMIx library the job's servers load: `KAURI_PMIX_LIBRARY` when set, else the
/// `libpmix` the first segment that has one would load, when it is not the system's
/// ([`crate::pmix::library`]).
fn pmix_library(apps: &[AppPlan]) -> Option<String> {
    if let Some(v) = std::env::var(crate::pmix::ffi::LIBRARY_VAR)
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Some(v);
    }
    apps.iter().find_map(|a| {
        let var = |name: &str| {
            a.env
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let wdir = std::path::Path::new(&a.wdir);
        let program = proc::resolve(&a.program, var("PATH"), wdir).ok()?;
        let named: Vec<std::path::PathBuf> = crate::job::arg_words(&a.args)
            .into_iter()
            .filter_map(|w| {
                let f = wdir.join(w);
                if f.is_file() {
                    Some(f)
                } else if !w.contains('/') {
                    proc::resolve(w, var("PATH"), wdir).ok()
                } else {
                    None
                }
            })
            .collect();
        let found = crate::pmix::library::for_program(&crate::pmix::library::Program {
            path: &program,
            named: &named,
            ld_library_path: var("LD_LIBRARY_PATH"),
            virtual_env: var("VIRTUAL_ENV"),
        })?;
        Some(found.to_string_lossy().into_owned())
    })
}

/// Gives every segment that uses Open MPI's `flux` path (`FLUX_PMI_LIBRARY_PATH` set) a
/// `FLUX_JOB_ID` unique to the job, unless the user set one.
fn add_flux_job_id(apps: &mut [AppPlan], kvsname: &str) {
    for a in apps {
        if a.uses_open_mpi_flux() && !a.env.iter().any(|(k, _)| k == "FLUX_JOB_ID") {
            a.env.push((
                "FLUX_JOB_ID".into(),
                crate::job::flux_job_id(kvsname).to_string(),
            ));
        }
    }
}

/// The environment of one segment's ranks, before the PMI variables.
fn segment_env(spec: &JobSpec, app: usize) -> Vec<(String, String)> {
    let a = &spec.apps[app];
    let policy = a.env_policy.as_ref().unwrap_or(&spec.env_policy);
    // Inside a Slurm job, what describes srun's tasks and steps (not ours) stays behind, as
    // Hydra's slurm bootstrap leaves it; a variable named in -genvlist/-envlist still passes.
    let in_slurm_job =
        std::env::var_os("SLURM_JOB_ID").is_some() || std::env::var_os("SLURM_JOBID").is_some();
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            !proc::is_foreign_wiring(k)
                && !k.starts_with("KAURI_JOB_KEY")
                && match policy {
                    EnvPolicy::All => !(in_slurm_job && crate::allocation::is_slurm_task_var(k)),
                    EnvPolicy::None => false,
                    EnvPolicy::List(l) => l.iter().any(|n| n == k),
                }
        })
        .collect();
    if spec.ml_env {
        // A rank's place is kauri's to say: an inherited RANK (kauri run inside another
        // launcher's job) would shadow it. A name given with -genv/-env/-envlist still wins.
        env.retain(|(k, _)| {
            !crate::rank_env::ML_PLACE_VARS.contains(&k.as_str())
                || matches!(policy, EnvPolicy::List(l) if l.contains(k))
        });
    }
    for (k, v) in spec.genv.iter().chain(&a.env) {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    if spec.fault_tolerant {
        for (k, v) in FT_VARS {
            if !env.iter().any(|(ek, _)| ek == k) {
                env.push((k.into(), v.into()));
            }
        }
    }
    env
}

/// What `-with-ft` sets for every rank, unless the rank's environment already has it: Open
/// MPI 5's ULFM switch (PRRTE's `--with-ft ulfm` gives its ranks the same) and MPICH's
/// fault-tolerance switch (which MPICH's own `ft` tests set by hand).
const FT_VARS: [(&str, &str); 2] = [
    ("OMPI_MCA_mpi_ft_enable", "1"),
    ("MPIR_CVAR_ENABLE_FT", "1"),
];

/// The hosts (comma-separated) whose ranks `-ml-env` gives `OMP_NUM_THREADS=1`
/// ([`crate::rank_env::sets_omp_threads`]). `None` when there is none.
fn omp_threads_set(p: &Plan) -> Option<String> {
    let mut shared: Vec<&HostPlan> = p
        .local
        .iter()
        .chain(&p.remote)
        .filter(|h| {
            h.ranks.iter().any(|r| {
                crate::rank_env::sets_omp_threads(&p.job, &p.job.apps[r.app], h.ranks.len())
            })
        })
        .collect();
    shared.sort_by_key(|h| h.index);
    let hosts: Vec<&str> = shared.iter().map(|h| h.host.as_str()).collect();
    (!hosts.is_empty()).then(|| hosts.join(", "))
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

/// One of kauri's times in seconds ([`crate::cli::SECONDS_VARS`], checked when the command
/// line is read), or `default`.
fn env_secs(var: &str, default: f64) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| crate::cli::parse_secs(&v))
        .unwrap_or(Duration::from_secs_f64(default))
}

/// The address agents connect back to: `KAURI_ADDR`, else the local end of the route to the
/// first remote host (a UDP `connect` sends nothing), else loopback. (`-iface` overrides
/// it with the interface's address.)
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

/// What one launch costs, for the cost-model tree: `KAURI_LAUNCH_COST` (`SERIAL_MS,TOTAL_MS`
/// less the serial part is the latency), else measured once by launching `kauri --version` to
/// `host` the way agents will be launched: the serial cost is how long starting the launcher
/// takes here, the latency the rest of its run. A probe that fails or takes over 10 s counts
/// as 1 ms serial and 10 s latency (which gives a flat tree).
fn launch_cost(launch: &LaunchPlan, host: &str) -> LaunchCost {
    if let Some(c) = std::env::var("KAURI_LAUNCH_COST")
        .ok()
        .and_then(|v| LaunchCost::parse(&v))
    {
        return LaunchCost {
            serial_us: c.serial_us,
            latency_us: c.latency_us.saturating_sub(c.serial_us),
        };
    }
    let fallback = LaunchCost {
        serial_us: 1000,
        latency_us: 10_000_000,
    };
    let mut cmd = std::process::Command::new(&launch.exec);
    if launch.kind == "fork" {
        cmd.arg("--version");
    } else {
        cmd.args(&launch.extra_args).arg(host).arg(format!(
            "{} --version",
            crate::launch::shell_quote(&launch.agent_path)
        ));
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let t0 = std::time::Instant::now();
    let Ok(mut child) = cmd.spawn() else {
        return fallback;
    };
    let serial = t0.elapsed();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_micros(200))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return fallback;
            }
        }
    }
    let total = t0.elapsed();
    LaunchCost {
        serial_us: serial.as_micros() as u64,
        latency_us: (total - serial).as_micros() as u64,
    }
}

/// Everything decided before anything starts.
struct Plan {
    job: JobPlan,
    local: Option<HostPlan>,
    remote: Vec<HostPlan>,
    launch: LaunchPlan,
    width: usize,
    /// Shape the tree by launch cost (`-tree-width cost`).
    cost_tree: bool,
    /// Every host the user named (or the allocation gave), with its slots: where spawned
    /// jobs may go.
    hosts: Vec<HostSpec>,
    /// The index in `hosts` of the host the front end serves itself.
    served_here: Option<usize>,
    /// A segment's program is linked to an MPI or names one ([`wiring`]).
    looks_mpi: bool,
    /// `MASTER_PORT`'s reservation (`-ml-env`), kept for the run's whole life.
    master_port: Option<crate::ports::Reservation>,
}

/// The output options of `spec`: `-l` is the prefix `[%r] `, as in Hydra.
fn output_options(spec: &JobSpec) -> OutputOptions {
    let mut o = spec.output.clone();
    if spec.label && o.prepend.is_none() {
        o.prepend = crate::output::Pattern::parse("[%r] ").ok();
    }
    o
}

fn plan(spec: &JobSpec, me: &str) -> Result<Plan, String> {
    let mut launcher = spec.launcher.clone();
    let mut hosts: Vec<HostSpec> = spec.hosts.clone();
    if spec.singleton.is_some() {
        // A singleton runs here; its spawned processes run here too (it has no way to name
        // hosts but the spawn's own info keys).
        hosts.clear();
        launcher = Some("fork".into());
    } else if hosts.is_empty() {
        if let Some(a) = crate::allocation::detect()? {
            // The manager's own launcher starts agents inside its job, as Hydra picks its
            // bootstrap: slurm, sge, lsf, pbs.
            if launcher.is_none() && a.hosts.iter().any(|h| !is_local(&h.name, me)) {
                launcher = Some(a.manager.into());
            }
            hosts = a.hosts;
        }
    }
    // Segments without -n: the hosts' slots (Hydra's rule), or 1 on this host alone.
    let mut spec = spec.clone();
    let slots_total: usize = match spec.ppn {
        Some(ppn) => ppn.saturating_mul(hosts.len().max(1)),
        None => hosts
            .iter()
            .fold(0usize, |n, h| n.saturating_add(h.slots))
            .max(1),
    };
    for a in spec.apps.iter_mut().filter(|a| a.nprocs == 0) {
        a.nprocs = slots_total;
    }
    let spec = &spec;
    let size = spec.size();
    if size > crate::job::RANKS_MAX {
        return Err(crate::job::too_many_ranks(&format!(
            "{size} processes in all (the allocation's slots)"
        )));
    }
    if let Some(r) = spec.output.output_from.filter(|&r| r >= size) {
        return Err(format!(
            "-output-from {r}: the job has {size} rank{} (0 to {})",
            if size == 1 { "" } else { "s" },
            size - 1
        ));
    }
    let hosts_named = !hosts.is_empty();
    if hosts.is_empty() {
        hosts.push(HostSpec {
            name: me.to_string(),
            slots: size,
        });
    }
    let mut kind = launcher.unwrap_or_else(|| "ssh".into());
    if !crate::launch::NAMES.contains(&kind.as_str()) {
        return Err(format!(
            "unknown launcher {kind:?} ({})",
            crate::launch::NAMES.join(", ")
        ));
    }
    // PBS without pbs_tmrsh (Torque, say): ssh, as Hydra built without TM does.
    let pbs_tmrsh = (kind == "pbs" && spec.launcher_exec.is_none())
        .then(|| crate::launch::in_path("pbs_tmrsh"))
        .flatten();
    if kind == "pbs" && spec.launcher_exec.is_none() && pbs_tmrsh.is_none() {
        kind = "ssh".into();
    }
    let slots: Vec<usize> = hosts.iter().map(|h| spec.ppn.unwrap_or(h.slots)).collect();
    let placement = if spec.map_by_node {
        Placement::cyclic(size, hosts.len())
    } else {
        Placement::block(size, &slots)
    };
    // A trainer computes RANK = GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK: under -ml-env,
    // each host's ranks are consecutive (Hydra's counts per host, numbered host by host),
    // unless the user chose a mapping.
    let placement = if spec.ml_env && !spec.mapping_asked {
        placement.by_host()
    } else {
        placement
    };
    let appnum: Vec<u32> = spec
        .apps
        .iter()
        .enumerate()
        .flat_map(|(i, a)| std::iter::repeat_n(i as u32, a.nprocs))
        .collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut apps: Vec<AppPlan> = spec
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
        let held = crate::ports::reserve(spec.port_range.as_ref())
            .map_err(|e| format!("cannot find a free port for MASTER_PORT: {e}"))?;
        Some((addr, held))
    } else {
        None
    };
    let (master, master_port) = match master {
        Some((addr, held)) => (Some((addr, held.port())), Some(held)),
        None => (None, None),
    };
    let named_slots: usize = slots.iter().sum();
    // A singleton is rank 0 of a one-rank job on this host. It gets a kvsname of its own, as
    // MPICH's reference server gives it: its client made up `singinit_kvs_PID_0` while it had
    // no process manager, and MPICH's ch3 renames its process group to the name the process
    // manager gives (`MPIDI_PG_CheckForSingleton`) only when that name differs.
    // MPICH 4.0.2's client formats the pid after its fork, in the child: the pid it passes is
    // the launcher's own, and the program is its parent.
    let singleton_pid = spec.singleton.as_ref().map(|s| {
        if s.pid == std::process::id() {
            std::os::unix::process::parent_id()
        } else {
            s.pid
        }
    });
    let adopt = spec
        .singleton
        .as_ref()
        .zip(singleton_pid)
        .map(|(s, pid)| Adopt {
            addr: match s.interface.as_str() {
                "default_interface" | "" => format!("127.0.0.1:{}", s.port),
                h if h.contains(':') && !h.starts_with('[') => format!("[{h}]:{}", s.port),
                h => format!("{h}:{}", s.port),
            },
            pid,
        });
    let name = kvsname(me);
    let (wiring, looks_mpi) = wiring(spec.pmi, &apps);
    let pmix = wiring != Wiring::Pmi;
    let pmix_library = pmix.then(|| pmix_library(&apps)).flatten();
    if let Some(prefix) = pmix_library
        .as_deref()
        .and_then(|l| crate::pmix::library::open_mpi_prefix(std::path::Path::new(l)))
    {
        // Open MPI's relocated tree (the wheel's): its help texts, as its own mpirun says.
        for a in apps.iter_mut() {
            if !a.env.iter().any(|(k, _)| k == "OPAL_PREFIX") {
                a.env
                    .push(("OPAL_PREFIX".into(), prefix.to_string_lossy().into_owned()));
            }
        }
    }
    if !pmix {
        add_flux_job_id(&mut apps, &name);
    }
    let rank_node: Vec<u32> = placement
        .node
        .iter()
        .map(|n| used.iter().position(|u| u == n).unwrap_or(0) as u32)
        .collect();
    let job = JobPlan {
        kvsname: name,
        size,
        universe_size: spec.universe_size.unwrap_or(if hosts_named {
            named_slots as i64
        } else {
            -1
        }),
        appnum: appnum.clone(),
        process_mapping: placement.process_mapping(),
        apps,
        output: OutputPlan {
            options: output_options(spec),
            pgid: 0,
            start_unix_ms: crate::output::unix_ms(),
        },
        pmi_port: spec.pmi_port,
        kill_grace_ms: env_secs("KAURI_KILL_GRACE", 3.0).as_millis() as u64,
        hosts: used.iter().map(|&n| hosts[n].name.clone()).collect(),
        master,
        spawner: None,
        parent_rank: None,
        preput: Vec::new(),
        adopt,
        simulated_hosts: kind == "fork",
        rank_node,
        pmix,
        pmi_too: wiring == Wiring::Both,
        pmix_library,
        profile: spec.profile.is_some(),
        binding: spec.binding,
        report_bindings: spec.report_bindings,
        iface: spec.iface.clone(),
        port_range: spec.port_range.clone(),
        fault_tolerant: spec.fault_tolerant,
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
            "sge" => crate::launch::Sge::default_exec(),
            "lsf" => crate::launch::Lsf::default_exec(),
            "pbs" => pbs_tmrsh.clone().unwrap_or_else(|| "pbs_tmrsh".into()),
            "fork" => self_path.clone(),
            k => k.to_string(),
        });
    let launch = LaunchPlan {
        kind: kind.clone(),
        exec,
        extra_args: crate::hydra_env::launcher_extra_args(&|k| std::env::var(k).ok()),
        agent_path: std::env::var("KAURI_AGENT_PATH").unwrap_or(self_path),
        connect_timeout_s: env_secs("KAURI_CONNECT_TIMEOUT", 60.0).as_secs().max(1),
        max_concurrent: std::env::var("KAURI_LAUNCH_CONCURRENCY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32),
        heartbeat_ms: env_secs("KAURI_HEARTBEAT", 5.0).as_millis() as u64,
        silence_ms: env_secs("KAURI_HEARTBEAT_TIMEOUT", 30.0).as_millis() as u64,
    };
    // The resource managers' launchers start every agent from here (as Hydra does): a flat
    // tree.
    let rm_launcher = ["slurm", "sge", "lsf", "pbs"].contains(&kind.as_str());
    let width = if rm_launcher {
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
    let cost_tree = !rm_launcher
        && (spec.cost_tree
            || (spec.tree_width.is_none()
                && std::env::var("KAURI_TREE_WIDTH").is_ok_and(|v| v.trim() == "cost")));
    Ok(Plan {
        cost_tree,
        job,
        local,
        remote,
        launch,
        width,
        hosts: hosts
            .into_iter()
            .zip(slots)
            .map(|(h, slots)| HostSpec { slots, ..h })
            .collect(),
        served_here,
        looks_mpi,
        master_port,
    })
}

/// One job of this run: the one the user started (index 0) or one a rank spawned.
struct JobRun {
    plan: JobPlan,
    /// This host's part of the job's tree: its ranks here, its agents, its gathers.
    branch: Branch,
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
    procs: Vec<crate::mpir::Proc>,
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

impl Job {
    /// The running job's record; `None` once released.
    fn live(&self) -> Option<&JobRun> {
        match self {
            Job::Live(j) => Some(j),
            Job::Released(_) => None,
        }
    }

    /// The same, to change it.
    fn live_mut(&mut self) -> Option<&mut JobRun> {
        match self {
            Job::Live(j) => Some(j),
            Job::Released(_) => None,
        }
    }

    /// Its KVS name (PMIx namespace).
    fn kvsname(&self) -> &str {
        match self {
            Job::Live(j) => &j.plan.kvsname,
            Job::Released(r) => &r.kvsname,
        }
    }

    /// Its number of ranks.
    fn size(&self) -> usize {
        match self {
            Job::Live(j) => j.plan.size,
            Job::Released(r) => r.size,
        }
    }

    /// Its ranks' records, by rank, for the end's summary: every rank of a running job, the
    /// failed ones of a released job.
    fn rank_states(&self) -> Vec<(usize, RankState)> {
        match self {
            Job::Live(j) => j.ranks.iter().cloned().enumerate().collect(),
            Job::Released(r) => r.failed.clone(),
        }
    }
}

impl JobRun {
    /// "rank 3" for the first job, "rank 3 of spawned job 2" for the others.
    fn who(&self, idx: usize, rank: usize) -> String {
        who(idx, rank)
    }
}

/// "rank 3" for the first job, "rank 3 of spawned job 2" for the others.
fn who(idx: usize, rank: usize) -> String {
    if idx == 0 {
        format!("rank {rank}")
    } else {
        format!("rank {rank} of spawned job {idx}")
    }
}

/// Who asked for a service: a job, the agent of that job's tree (0: the front end's host),
/// the request's id there.
#[derive(Debug, Clone, Copy)]
struct Asker {
    job: usize,
    agent: u32,
    req: u64,
}

/// What every job of the run shares: the hosts, how to reach them, and the slots in use.
struct Cluster {
    me: String,
    hosts: Vec<HostSpec>,
    served_here: Option<usize>,
    /// Ranks of running jobs on each host.
    in_use: Vec<usize>,
    /// Where the next spawned rank's search for a free slot starts.
    cursor: usize,
    launch: LaunchPlan,
    width: usize,
    /// The launch cost the cost-model tree is shaped by, when it was asked for.
    cost: Option<LaunchCost>,
    ip: IpAddr,
    /// The environment of spawned ranks (the launcher's, by the global policy, and `-genv`).
    env: Vec<(String, String)>,
    cwd: PathBuf,
    universe_size: i64,
    /// The run's output options, and when it started (`%t`).
    output: OutputPlan,
    pmi_port: bool,
    kill_grace_ms: u64,
    jobs_started: usize,
    /// The most processes one spawn may start (`KAURI_SPAWN_MAX`).
    spawn_max: u64,
    /// The ports listeners keep to (`MPIEXEC_PORT_RANGE`).
    port_range: Option<crate::ports::PortRange>,
    /// `-with-ft`: spawned jobs are fault tolerant too.
    fault_tolerant: bool,
}

/// The most processes one spawn may start unless `KAURI_SPAWN_MAX` says otherwise. A spawn
/// beyond the universe oversubscribes the run's hosts, as Hydra's does; this bound only
/// keeps a mistaken or hostile `nprocs` from planning millions of ranks.
pub const SPAWN_MAX: u64 = 65536;

/// `KAURI_SPAWN_MAX`, or [`SPAWN_MAX`].
fn spawn_max() -> u64 {
    std::env::var("KAURI_SPAWN_MAX")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(SPAWN_MAX)
}

impl Cluster {
    /// The run's hosts and how to reach them, from the plan of the job the user started;
    /// `cost`: the launch cost, when the tree is shaped by it.
    fn new(spec: &JobSpec, p: &Plan, me: &str, cost: Option<LaunchCost>) -> Cluster {
        let mut in_use = vec![0; p.hosts.len()];
        for hp in p.local.iter().chain(&p.remote) {
            in_use[hp.node] += hp.ranks.len();
        }
        // Spawned ranks' environment: the launcher's, by the global policy, and -genv.
        let global = JobSpec {
            apps: vec![crate::job::AppSpec::default()],
            ..spec.clone()
        };
        Cluster {
            me: me.to_string(),
            hosts: p.hosts.clone(),
            served_here: p.served_here,
            in_use,
            cursor: 0,
            launch: p.launch.clone(),
            width: p.width,
            cost,
            ip: advertise(
                p.remote.first().map(|h| h.host.as_str()),
                p.launch.kind == "fork",
            ),
            env: segment_env(&global, 0),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            universe_size: p.job.universe_size,
            output: p.job.output.clone(),
            pmi_port: p.job.pmi_port,
            kill_grace_ms: p.job.kill_grace_ms,
            jobs_started: 0,
            spawn_max: spawn_max(),
            port_range: p.job.port_range.clone(),
            fault_tolerant: p.job.fault_tolerant,
        }
    }
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

/// The diagnosis, line by line: every rank's host, pid and PMI state (at most
/// [`STATUS_LINES`] one per line, the rest counted by state), the ranks whose host did not
/// answer, and what each open fence still waits for.
fn status_lines(got: &[(usize, HostStatus)], jobs: &[Vec<RankState>]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut seen: Vec<Vec<bool>> = jobs.iter().map(|r| vec![false; r.len()]).collect();
    let mut rest: std::collections::BTreeMap<String, usize> = Default::default();
    let mut listed = 0;
    let mut rows: Vec<(usize, &str, &crate::tree::RankStatus)> = got
        .iter()
        .flat_map(|(j, h)| h.ranks.iter().map(move |r| (*j, h.host.as_str(), r)))
        .collect();
    rows.sort_by_key(|(j, _, r)| (*j, r.rank));
    for (j, host, r) in rows {
        if let Some(s) = seen.get_mut(j).and_then(|v| v.get_mut(r.rank)) {
            *s = true;
        }
        let state = r.pmi.to_string();
        if listed < STATUS_LINES {
            let pid = r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
            lines.push(format!("{} on {host}{pid}: {state}", who(j, r.rank)));
            listed += 1;
        } else {
            *rest.entry(state).or_default() += 1;
        }
    }
    if !rest.is_empty() {
        let counts: Vec<String> = rest.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        lines.push(format!(
            "and {} more ranks ({})",
            rest.values().sum::<usize>(),
            counts.join(", ")
        ));
    }
    let mut silent: Vec<String> = Vec::new();
    for (j, ranks) in jobs.iter().enumerate() {
        for (r, st) in ranks.iter().enumerate() {
            if !seen[j][r] && st.ended.is_none() && !silent.contains(&st.host) {
                silent.push(st.host.clone());
            }
        }
    }
    if !silent.is_empty() {
        lines.push(format!("no answer from the host(s) {}", silent.join(", ")));
    }
    for (j, h) in got {
        for r in &h.ranks {
            if let Some(stack) = &r.stack {
                let pid = r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                lines.push(format!("stack of {} on {}{pid}:", who(*j, r.rank), h.host));
                lines.extend(stack.lines().map(|l| format!("  {l}")));
            }
        }
    }
    for (_, h) in got {
        if let Some((epoch, local, kids)) = &h.fence {
            let mut waits = Vec::new();
            if *local {
                waits.push(format!("the ranks on {}", h.host));
            }
            waits.extend(kids.iter().map(|k| format!("the agent on {k}")));
            if !waits.is_empty() {
                lines.push(format!(
                    "on {}, fence {epoch} waits for {}",
                    h.host,
                    waits.join(", ")
                ));
            }
        }
    }
    lines
}

/// The channels every job's events flow into, each event tagged with its job.
struct Wires {
    node: mpsc::UnboundedSender<(usize, NodeEvent)>,
    hub: mpsc::UnboundedSender<(usize, HubEvent)>,
    out: crate::iofwd::OutputSender,
}

/// Starts job `idx`'s agents and, if it has ranks here, its local ranks. The error is a start
/// failure on this host (the agents report theirs later, one `NodeStarted` each). `prof`: this
/// host's startup profile, for the job the user started when it records one.
#[allow(clippy::too_many_arguments)]
async fn start_job(
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
            Err(e) => (None, Some(crate::proc::fd_cause(e))),
        },
    };
    let host = cluster.me.clone();
    let procs = node
        .iter()
        .flat_map(|n| n.procs.iter())
        .map(|(rank, pid, exe)| crate::mpir::Proc {
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

/// The hosts an info key names, as indices into the cluster's hosts.
fn named_hosts(cluster: &Cluster, names: &[String]) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        // host:slots is accepted; the slots part is ignored (the job's slots hold).
        let name = name.split(':').next().unwrap_or(name);
        let found = cluster
            .hosts
            .iter()
            .position(|h| h.name == name)
            .or_else(|| {
                is_local(name, &cluster.me)
                    .then(|| {
                        cluster
                            .hosts
                            .iter()
                            .position(|h| is_local(&h.name, &cluster.me))
                    })
                    .flatten()
            });
        match found {
            Some(n) => out.push(n),
            None => {
                let known: Vec<&str> = cluster.hosts.iter().map(|h| h.name.as_str()).collect();
                return Err(format!(
                    "spawn: host {name} is not one of this run's hosts ({})",
                    known.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("spawn: the host info key names no host".into());
    }
    Ok(out)
}

/// Reads a spawn's `ppr` directive, `N:n` or `N:node` (Open MPI's `npernode` and `pernode`
/// arrive so): N processes per host.
fn parse_ppr(v: &str) -> Result<u64, String> {
    let (n, obj) = v.split_once(':').unwrap_or((v, "node"));
    let n: u64 = n
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("spawn: ppr {v}: not a count of processes"))?;
    match obj.trim() {
        "n" | "node" => Ok(n),
        other => Err(format!(
            "spawn: ppr {v}: only per node is supported, not per {other}"
        )),
    }
}

/// Plans a spawned job: its ranks go round-robin over the free slots of the run's hosts (or
/// of the hosts its info keys name), oversubscribing in turn when every slot is taken. A
/// command's `map-by slot` fills each host's free slots before the next; its `ppr N:n`
/// places N of its processes on each host in order (an error when the hosts are too few).
fn plan_spawn(
    cluster: &mut Cluster,
    spawner: &JobPlan,
    commands: &[SpawnCommand],
    preput: Delta,
    pmix: Option<&crate::service::PmixSpawn>,
) -> Result<(JobPlan, Option<HostPlan>, Vec<HostPlan>), String> {
    let total: u64 = commands.iter().map(|c| u64::from(c.nprocs)).sum();
    if total == 0 {
        return Err("spawn of 0 processes".into());
    }
    if total > cluster.spawn_max {
        return Err(format!(
            "spawn of {total} processes: more than the {} one spawn may start (KAURI_SPAWN_MAX)",
            cluster.spawn_max
        ));
    }
    let size = total as usize;
    let mut node_of: Vec<usize> = Vec::with_capacity(size);
    let mut appnum = Vec::with_capacity(size);
    let mut apps = Vec::with_capacity(commands.len());
    let nhosts = cluster.hosts.len();
    for (i, c) in commands.iter().enumerate() {
        let mut candidates: Vec<usize> = (0..nhosts).collect();
        let mut env = cluster.env.clone();
        let mut wdir = cluster.cwd.clone();
        let mut per_node: Option<u64> = None;
        let mut by_slot = false;
        for (k, v) in &c.info {
            match k.as_str() {
                // Open MPI's npernode/pernode/ppr (PMIX_PPR: "N:n" or "N:node").
                "ppr" => per_node = Some(parse_ppr(v)?),
                // Open MPI's map_by (PMIX_MAPBY): node (the default here), or slot and its
                // spellings (fill each host's slots before the next host).
                "map-by" | "map_by" => match v.split(':').next().unwrap_or("") {
                    "node" => by_slot = false,
                    "slot" | "core" | "hwthread" | "socket" | "package" | "numa" => by_slot = true,
                    other => {
                        return Err(format!(
                            "spawn: map-by {other} is not supported (node or slot)"
                        ))
                    }
                },
                "host" | "hosts" => {
                    let names: Vec<String> = v.split(',').map(str::to_string).collect();
                    candidates = named_hosts(cluster, &names)?;
                }
                "hostfile" => {
                    let path = cluster.cwd.join(v);
                    let listed =
                        crate::cli::read_hostfile(&path).map_err(|e| format!("spawn: {}", e.0))?;
                    let names: Vec<String> = listed.into_iter().map(|h| h.name).collect();
                    candidates = named_hosts(cluster, &names)?;
                }
                "wdir" => wdir = cluster.cwd.join(v),
                "path" => {
                    let old = env
                        .iter()
                        .find(|(k, _)| k == "PATH")
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    env.retain(|(k, _)| k != "PATH");
                    let new = if old.is_empty() {
                        v.clone()
                    } else {
                        format!("{v}:{old}")
                    };
                    env.push(("PATH".into(), new));
                }
                other => debug!(key = other, value = %v, "spawn: info key ignored"),
            }
        }
        // A PMIx client's variables for the command (Open MPI's OMPI_PARENT_PORT, …).
        for (k, v) in pmix.and_then(|p| p.env.get(i)).into_iter().flatten() {
            env.retain(|(n, _)| n != k);
            env.push((k.clone(), v.clone()));
        }
        if let Some(ppn) = per_node {
            // A host named twice is one host.
            let mut distinct = candidates.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let room = ppn.saturating_mul(distinct.len() as u64);
            if u64::from(c.nprocs) > room {
                return Err(format!(
                    "spawn of {} processes at {ppn} per host needs more hosts than the {} it may use",
                    c.nprocs,
                    distinct.len()
                ));
            }
        }
        // This command's processes on each host so far (for ppr).
        let mut mine = vec![0u64; nhosts];
        for _ in 0..c.nprocs {
            let n = if let Some(ppn) = per_node {
                // In host order, each up to ppn processes of this command (there is room:
                // checked above).
                match candidates.iter().find(|&&n| mine[n] < ppn) {
                    Some(&n) => n,
                    None => return Err("spawn: no host has room left".into()),
                }
            } else {
                let start = if by_slot { 0 } else { cluster.cursor };
                let free = (0..candidates.len())
                    .map(|k| candidates[(start + k) % candidates.len()])
                    .find(|&n| cluster.in_use[n] < cluster.hosts[n].slots);
                free.unwrap_or(candidates[cluster.cursor % candidates.len()])
            };
            mine[n] += 1;
            cluster.in_use[n] += 1;
            cluster.cursor = candidates.iter().position(|&h| h == n).map_or(0, |p| p + 1);
            node_of.push(n);
            appnum.push(i as u32);
        }
        apps.push(AppPlan {
            program: c.execname.clone(),
            args: c.args.clone(),
            env,
            wdir: wdir.display().to_string(),
        });
    }
    let mut used: Vec<usize> = node_of.clone();
    used.sort_unstable();
    used.dedup();
    // Node ids are the job's own, dense from 0 (MPICH sizes its node tables by them).
    let placement = crate::job::Placement {
        node: node_of
            .iter()
            .map(|n| used.binary_search(n).unwrap_or(0))
            .collect(),
        nodes: used.len(),
    };
    cluster.jobs_started += 1;
    let name = format!("{}_s{}", kvsname(&cluster.me), cluster.jobs_started);
    add_flux_job_id(&mut apps, &name);
    let plan = JobPlan {
        kvsname: name,
        size,
        universe_size: cluster.universe_size,
        appnum: appnum.clone(),
        process_mapping: placement.process_mapping(),
        apps,
        output: OutputPlan {
            pgid: cluster.jobs_started as u32,
            ..cluster.output.clone()
        },
        pmi_port: cluster.pmi_port,
        kill_grace_ms: cluster.kill_grace_ms,
        hosts: used
            .iter()
            .map(|&n| cluster.hosts[n].name.clone())
            .collect(),
        master: None,
        spawner: Some(spawner.kvsname.clone()),
        parent_rank: pmix.map(|p| p.parent),
        preput,
        adopt: None,
        simulated_hosts: cluster.launch.kind == "fork",
        rank_node: placement.node.iter().map(|&n| n as u32).collect(),
        // Spawned by a PMI client: PMI; by a PMIx client: PMIx.
        pmix: pmix.is_some(),
        pmi_too: false,
        // The server of this run is already started, with its library.
        pmix_library: None,
        profile: false,
        binding: None,
        report_bindings: false,
        iface: spawner.iface.clone(),
        port_range: cluster.port_range.clone(),
        fault_tolerant: cluster.fault_tolerant,
    };
    let (mut local, mut remote) = (None, Vec::new());
    for (index, &n) in used.iter().enumerate() {
        let ranks: Vec<RankPlan> = node_of
            .iter()
            .enumerate()
            .filter(|&(_, &m)| m == n)
            .enumerate()
            .map(|(local_id, (rank, _))| RankPlan {
                rank,
                app: appnum[rank] as usize,
                local_id,
            })
            .collect();
        let hp = HostPlan {
            host: cluster.hosts[n].name.clone(),
            node: index,
            index,
            ranks,
        };
        if Some(n) == cluster.served_here {
            local = Some(hp);
        } else {
            remote.push(hp);
        }
    }
    Ok((plan, local, remote))
}

/// The run's name service: a table of its own, or a shared `kauri nameserver`.
enum Names {
    Own(crate::nameserver::Table),
    Server(crate::nameserver::Client),
}

/// Runs a job and returns kauri's exit status.
pub async fn run(spec: JobSpec) -> i32 {
    let (mut root, mut inbox) = match Root::start(&spec).await {
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

impl Inbox {
    /// The next event.
    async fn next(&mut self, timers: Timers) -> Event {
        let Timers {
            timing,
            kill_at,
            leave_at,
            status_at,
        } = timers;
        let signals = futures_signal(&mut self.signals);
        tokio::pin!(signals);
        let deadline = self.deadline.filter(|_| timing);
        tokio::select! {
            Some((j, ev)) = self.node.recv() => Event::Node(j, ev),
            Some((j, ev)) = self.hub.recv() => Event::Child(j, ev),
            Some((a, r)) = self.replies.recv() => Event::Reply(a, r),
            Some(chunk) = self.stdin.recv() => Event::Stdin(chunk),
            Some(e) = self.closed.recv() => Event::Output(e),
            Some(ask) = self.asks.recv() => Event::StatusAsk(ask),
            Some((j, h)) = self.own.recv() => Event::OwnStatus(j, h),
            sig = &mut signals => Event::Signal(sig),
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => Event::Timeout,
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => Event::KillTimer,
            _ = tokio::time::sleep_until(leave_at.unwrap_or_else(Instant::now)), if leave_at.is_some() => Event::GiveUp,
            _ = tokio::time::sleep_until(status_at.unwrap_or_else(Instant::now)), if status_at.is_some() => Event::StatusDue,
        }
    }
}

/// The first of `signals` to arrive (pending for ever when there are none).
async fn futures_signal(signals: &mut [(i32, tokio::signal::unix::Signal)]) -> i32 {
    if signals.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for (n, s) in signals.iter_mut() {
            if s.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*n);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// One of kauri's two output streams, as the ranks' lines reach it: written until a write
/// fails (its reader closed it), then never again. Both streams are handled alike: the first
/// failure ends the job with SIGPIPE's status (`Ending::OutputClosed`), as Hydra's death by
/// SIGPIPE does; the lines after it are read from the ranks and dropped.
struct Terminal<W> {
    stream: W,
    open: bool,
}

impl<W: tokio::io::AsyncWrite + Unpin> Terminal<W> {
    fn new(stream: W) -> Self {
        Terminal { stream, open: true }
    }

    /// Writes `data` and flushes it; false only for the write that finds the stream closed
    /// (the later ones, dropped, are true: the job is already ending).
    async fn write(&mut self, data: &[u8]) -> bool {
        if !self.open {
            return true;
        }
        let written = match self.stream.write_all(data).await {
            Ok(()) => self.stream.flush().await,
            Err(e) => Err(e),
        };
        self.open = written.is_ok();
        self.open
    }
}

/// Prints what the ranks and agents write, whole lines as they come, and writes the lines
/// bound for output files to `files`; once `stop` fires, what is still queued and no more. A
/// failed write to stdout or stderr is told on `closed` (the job ends), and that stream is not
/// written again ([`Terminal`]).
/// A file that cannot be created or written is one line on stderr and ends the job as a
/// failure (its later lines are dropped, the others' still written); it returns whether one
/// failed.
async fn print_output(
    mut out: mpsc::Receiver<(Dest, Bytes)>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    closed: mpsc::UnboundedSender<Ending>,
    mut files: Files,
) -> bool {
    let mut file_failed = false;
    let mut so = Terminal::new(tokio::io::stdout());
    let mut se = Terminal::new(tokio::io::stderr());
    let mut stopping = false;
    loop {
        let next = if stopping {
            out.try_recv().ok()
        } else {
            tokio::select! {
                biased;
                m = out.recv() => m,
                _ = &mut stop => {
                    stopping = true;
                    continue;
                }
            }
        };
        let Some((dest, data)) = next else { break };
        if let (Some(path), true) = (&dest.file, dest.close) {
            files.close_one(path).await;
            continue;
        }
        if let Some(path) = &dest.file {
            // The first failure only: the job ends with it, and any other is its echo.
            if let Err(e) = files.write(path, &data).await {
                if !file_failed {
                    se.write(format!("kauri: {e}\n").as_bytes()).await;
                    file_failed = true;
                    let _ = closed.send(Ending::Failed);
                }
            }
            continue;
        }
        let written = match dest.stream {
            Stream::Stdout => so.write(&data).await,
            Stream::Stderr => se.write(&data).await,
        };
        if !written {
            let _ = closed.send(Ending::OutputClosed);
        }
    }
    files.close().await;
    file_failed
}

/// Reads kauri's stdin for a rank 0 on another host, in chunks; `None` at its end.
async fn read_stdin(to: mpsc::Sender<Option<Vec<u8>>>) {
    let mut input = tokio::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let chunk = match input.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(buf[..n].to_vec()),
        };
        let eof = chunk.is_none();
        if to.send(chunk).await.is_err() || eof {
            break;
        }
    }
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
    /// The hang diagnosis under way: the hosts' answers so far.
    status: Option<StatusRound>,
    /// Where this host's answers with stacks go, once taken.
    own_status: mpsc::UnboundedSender<(usize, HostStatus)>,
    /// `-timeout-stacks`: a timeout's diagnosis has the stuck ranks' stacks.
    timeout_stacks: bool,
    /// The socket `kauri --status` asks through (none when it could not be made).
    _status_socket: Option<crate::status::Listener>,
    /// `MASTER_PORT`'s reservation (`-ml-env`): no other kauri job takes the port while this
    /// run lives.
    _master_port: Option<crate::ports::Reservation>,
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
    /// The first job looks like an MPI job ([`wiring`]).
    looks_mpi: bool,
    /// The tree's shape, in words, for the profile.
    tree: String,
    /// The output printer and the signal that stops it once everything is sent.
    printer: Option<(
        tokio::task::JoinHandle<bool>,
        tokio::sync::oneshot::Sender<()>,
    )>,
}

impl Root {
    /// Plans the job, starts the printer, the first job's agents and its ranks here, and the
    /// stdin reader; returns the root and where its events will come from, or kauri's exit
    /// status when nothing could start.
    async fn start(spec: &JobSpec) -> Result<(Root, Inbox), i32> {
        let clock = Clock::start();
        let me = local_host();
        raise_fd_limit();
        let p = plan(spec, &me).map_err(|e| {
            say!("kauri: {e}");
            STATUS_LAUNCHER
        })?;
        let iface_ip = match &spec.iface {
            None => None,
            Some(i) => Some(crate::iface::address(i).map_err(|e| {
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
        let paths = crate::output::files_of_job(&job.output, job.size, |r| {
            let n = job.rank_node[r];
            (n, job.hosts[n as usize].as_str())
        });
        let files = Files::create(&paths).map_err(|e| {
            say!("kauri: {e}");
            STATUS_LAUNCHER
        })?;

        // Output: everything the ranks and agents write, printed whole line by whole line.
        let (out_tx, out_rx) = crate::iofwd::output_queue();
        let (closed_tx, closed_rx) = mpsc::unbounded_channel::<Ending>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // `kauri --status` from another shell, and this host's answers with stacks.
        let (asks_tx, asks_rx) = mpsc::unbounded_channel();
        let status_socket = crate::status::Listener::start(asks_tx)
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
            Some(a) => Names::Server(crate::nameserver::Client::new(crate::nameserver::address(
                &a,
            ))),
            None => Names::Own(crate::nameserver::Table::default()),
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
            tokio::task::spawn_local(crate::iofwd::pump(tokio::io::stdin(), pipe));
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
                s.ended
                    .is_some_and(|(code, sig)| policy::rank_failure(code, sig).is_some())
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
            crate::output::files_of_job(&plan.output, plan.size, |r| {
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
                    let close = crate::iofwd::Dest {
                        stream: crate::iofwd::Stream::Stdout,
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

    /// After the last event: forwards the last output, reports the ranks that failed, prints
    /// the startup profile, and returns kauri's exit status.
    async fn finish(mut self) -> i32 {
        for j in 0..self.jobs.len() {
            let out = self.live_mut(j).and_then(|job| job.branch.last_refusals());
            self.on_out(j, out);
        }
        for d in std::mem::take(&mut self.draining) {
            let _ = d.await;
        }
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            if self.gave_up {
                // Ranks that did not die when killed may hold their pipes: do not wait long.
                let _ = tokio::time::timeout(Duration::from_secs(2), j.branch.drain()).await;
            } else {
                j.branch.drain().await;
            }
        }
        // A resource manager's launcher tells the manager how its agent ended: let it (a
        // killed qrsh -inherit fails the whole Grid Engine job).
        if ["slurm", "sge", "lsf", "pbs"].contains(&self.cluster.launch.kind.as_str()) {
            crate::hub::launchers_ended(Duration::from_secs(10)).await;
        }
        // The ranks of a lost agent started by `-launcher fork` are adopted by this process
        // (the subreaper): killed and reaped here, or nobody would.
        let adopted = proc::kill_leftovers(&[]);
        if adopted > 0 {
            debug!(adopted, "killed the ranks of lost agents");
        }
        let profile = self.first().branch.take_profile();
        let size = self.first().plan.size;
        let offered = match (self.first().plan.pmix, self.first().plan.pmi_too) {
            (false, _) => Wiring::Pmi,
            (true, false) => Wiring::Pmix,
            (true, true) => Wiring::Both,
        };
        let looks_mpi = self.looks_mpi;
        let fault_tolerant = self.fault_tolerant;
        let summary: Vec<Vec<(usize, RankState)>> =
            self.jobs.iter().map(Job::rank_states).collect();
        let printer = self.printer.take();
        // A host lost under -disable-auto-cleanup: the job did not end well, whatever the
        // ranks that were left say (under -with-ft, a fault the survivors were told of).
        let lost_fails = self.lost && !fault_tolerant;
        let (ending, fences, tree, clock) = (
            self.ending.or(lost_fails.then_some(Ending::Failed)),
            self.profile.take(),
            self.tree.clone(),
            self.clock,
        );
        // Under -disable-auto-cleanup a rank's exit code is the program's business (the
        // survivors were told and went on): no line, as under Hydra, which prints none for an
        // exit code. MPICH's fault-tolerance tests fail on any line but ` No Errors`.
        let quiet_codes = !self.auto_cleanup;
        // Every sender of output goes with the jobs and the wires; the printer then empties
        // its queue and ends.
        drop(self);
        let mut ending = ending;
        if let Some((printer, stop)) = printer {
            let _ = stop.send(());
            if printer.await.unwrap_or(false) {
                ending = ending.or(Some(Ending::Failed));
            }
        }
        let end_us = clock.now();
        let mut worst = 0;
        for (idx, ranks) in summary.iter().enumerate() {
            for (r, s) in ranks {
                let Some((code, sig)) = s.ended else { continue };
                if s.during_teardown {
                    continue;
                }
                if let Some((status, words)) = policy::rank_failure(code, sig) {
                    let tolerated = policy::tolerated(fault_tolerant, sig);
                    if !tolerated {
                        worst = worst.max(status);
                    }
                    if quiet_codes && code.is_some() {
                        continue;
                    }
                    say!(
                        "kauri: {} (pid {}) on {} {words}{}",
                        who(idx, *r),
                        s.pid,
                        s.host,
                        if tolerated {
                            " (tolerated: -with-ft)"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        if let Some(first) = summary.first() {
            let spoke = first.iter().filter(|(_, s)| s.initialized).count();
            let traces = first.iter().any(|(_, s)| s.ran_alone);
            if let Some(line) = policy::never_wired(size, spoke, looks_mpi || traces, offered) {
                say!("{line}");
            }
        }
        if let (Some((format, fences)), Some((here, below))) = (fences, profile) {
            let mut hosts = vec![here];
            hosts.extend(below);
            let profile = JobProfile::build(size, tree, hosts, &fences, end_us);
            match format {
                ProfileFormat::Text => crate::console::err(&profile.text()),
                ProfileFormat::Json => say!("{}", profile.json()),
            }
        }
        debug!(worst, "job ended");
        policy::exit_status(ending, worst)
    }

    /// An event of job `j`'s ranks on this host.
    fn on_node(&mut self, j: usize, ev: NodeEvent) {
        let Some(job) = self.live_mut(j) else {
            return debug!(j, "an event of a released job's ranks");
        };
        let out = job.branch.on_node(ev);
        self.on_out(j, out);
        self.on_deferred(j);
    }

    /// An event of job `j`'s child links.
    fn on_child(&mut self, j: usize, ev: HubEvent) {
        let Some(job) = self.live_mut(j) else {
            return debug!(j, "an event of a released job's links");
        };
        let out = job.branch.on_child(ev);
        self.on_out(j, out);
        self.on_deferred(j);
    }

    /// What job `j`'s branch made besides the answer of the event at hand.
    fn on_deferred(&mut self, j: usize) {
        while let Some(out) = self.live_mut(j).and_then(|job| job.branch.take_deferred()) {
            self.on_out(j, Some(out));
        }
    }

    /// What job `j`'s branch handed up: at the root, it is acted on here.
    fn on_out(&mut self, j: usize, out: Option<Out>) {
        match out {
            None => {}
            Some(Out::Refused { line }) => say!("kauri: {line}"),
            Some(Out::Up(up)) => self.on_up(j, up),
        }
    }

    fn on_up(&mut self, j: usize, up: Up) {
        let Some(job) = self.jobs.get_mut(j).and_then(Job::live_mut) else {
            return debug!(j, "a message up a released job's tree");
        };
        let branch = &mut job.branch;
        match up {
            Up::Fence { epoch, delta } => {
                // The whole tree has contributed: release everyone.
                if let Some((_, fences)) = self.profile.as_mut().filter(|_| j == 0) {
                    fences.push(RootFence::new(epoch, self.clock.now(), &delta));
                }
                branch.fence_done(epoch, delta, None);
            }
            Up::PmixFence { epoch, data } => branch.pmix_fence_done(epoch, data, None),
            Up::Publish(delta) => branch.publish(delta),
            Up::Dmodex {
                from,
                req,
                rank,
                nspace: None,
            } => {
                let out = branch.dmodex_serve(from, req, rank);
                self.on_out(j, out);
            }
            Up::Dmodex {
                from,
                req,
                rank,
                nspace: Some(ns),
            } => self.cross_dmodex(j, from, req, rank, &ns),
            Up::DmodexData {
                to: CROSS_JOB,
                req,
                status,
                data,
            } => {
                if let Some((k, from, asked)) = self.cross_dmodex.remove(&req) {
                    if let Some(job) = self.live_mut(k) {
                        job.branch.dmodex_data(from, asked, status, data);
                    }
                }
            }
            Up::DmodexData {
                to,
                req,
                status,
                data,
            } => branch.dmodex_data(to, req, status, data),
            Up::PmixCollective {
                sig,
                procs,
                covered,
                data,
                context_id,
            } => self.collective(sig, &procs, &covered, data, context_id),
            Up::Request { from, req, service } => self.requests.push((
                Asker {
                    job: j,
                    agent: from,
                    req,
                },
                service,
            )),
            Up::Reports(reports) => {
                for r in reports {
                    self.on_report(j, r);
                }
            }
            Up::Status(hosts) => self.status_answer(j, hosts),
            Up::Hello { .. } | Up::Output { .. } | Up::Profile(_) | Up::Heartbeat | Up::Done => {}
        }
    }

    fn on_report(&mut self, j: usize, r: Report) {
        let Some(discarded) = self.live_mut(j).map(|job| job.discarded) else {
            return debug!(j, "a report of a released job");
        };
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
                ran_alone,
            } => {
                if let Some(n) = self.cluster.hosts.iter().position(|h| h.name == host) {
                    self.cluster.in_use[n] = self.cluster.in_use[n].saturating_sub(1);
                }
                // A rank killed by the signal kauri forwarded to it (SIGINT, SIGHUP) ended
                // with the job, not as a failure. Here, the teardown began with the signal,
                // so its host says so; an agent can see its rank die of the forwarded signal
                // before the teardown that follows it reaches it, so the root decides.
                let forwarded = signal.is_some_and(|s| self.ending == Some(Ending::Signal(s)));
                let in_teardown = in_teardown || forwarded;
                let Some(job) = self.jobs[j].live_mut() else {
                    return;
                };
                let Some(st) = job.ranks.get_mut(rank) else {
                    return;
                };
                *st = RankState {
                    host,
                    pid,
                    ended: Some((code, signal)),
                    during_teardown: in_teardown || discarded,
                    initialized,
                    finalized,
                    ran_alone,
                };
                self.end_stuck_lookups();
                if discarded {
                    return;
                }
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                let others_in_pmi =
                    job.ranks.iter().enumerate().any(|(r, s)| {
                        r != rank && s.initialized && !s.finalized && s.ended.is_none()
                    });
                let verdict = policy::on_exit(
                    code,
                    initialized,
                    finalized,
                    self.ending.is_some(),
                    self.auto_cleanup,
                    others_in_pmi,
                );
                // The other ranks hear of an abnormal end first (with -disable-auto-cleanup,
                // instead of the teardown).
                let abnormal = code != Some(0) || matches!(verdict, ExitVerdict::LeftPmi(_));
                if abnormal && !in_teardown && self.ending.is_none() {
                    self.pmix_failure(j, Failure::Ended { code, signal }, vec![rank]);
                }
                // As Hydra: a rank that leaves PMI without finalize has died, and the job goes
                // on without it; the survivors are told.
                let died = initialized && !finalized && !in_teardown;
                if died && verdict == ExitVerdict::Nothing && !self.auto_cleanup {
                    self.dead_processes(j, [rank]);
                }
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                match verdict {
                    ExitVerdict::Nothing => {}
                    ExitVerdict::Failed => self.teardown(Ending::Failed),
                    ExitVerdict::LeftPmi(what) => {
                        say!(
                            "kauri: {} on {} {what} while other ranks use PMI; ending the job",
                            job.who(j, rank),
                            job.ranks[rank].host
                        );
                        self.teardown(Ending::Failed);
                    }
                }
            }
            Report::Initialized { rank } => {
                let Some(job) = self.jobs[j].live_mut() else {
                    return;
                };
                if let Some(s) = job.ranks.get_mut(rank) {
                    s.initialized = true;
                }
                // A rank that already left without finalize can never join this one's fences.
                let gone = job
                    .ranks
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.ended == Some((Some(0), None)) && !s.finalized);
                if let (Some((g, s)), None, false) = (gone, &self.ending, discarded) {
                    say!(
                        "kauri: {} on {} {} while other ranks use PMI; ending the job",
                        job.who(j, g),
                        s.host,
                        policy::left_pmi(s.initialized)
                    );
                    let left = Failure::Ended {
                        code: Some(0),
                        signal: None,
                    };
                    self.pmix_failure(j, left, vec![g]);
                    self.teardown(Ending::Failed);
                }
            }
            Report::Abort {
                rank,
                code,
                message,
            } => {
                let who = rank.map_or("a process".to_string(), |r| who(j, r));
                let msg = if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                };
                say!("kauri: {who} aborted the job with code {code}{msg}");
                crate::mpir::aborting(&format!("{who} aborted the job with code {code}{msg}"));
                self.teardown(Ending::Abort(code));
            }
            Report::Failed { reason } => {
                if discarded {
                    return;
                }
                if self.ending.is_none() {
                    say!("kauri: {reason}; ending the job");
                }
                self.teardown(Ending::Failed);
            }
            Report::Lost {
                host,
                reason,
                ranks,
            } => {
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                if job.answer.is_none() && !discarded && self.ending.is_none() {
                    // Its ranks (and those of the hosts below it) are gone with it.
                    let gone: Vec<usize> = ranks
                        .into_iter()
                        .filter(|&r| job.ranks.get(r).is_some_and(|s| s.ended.is_none()))
                        .collect();
                    let lost = if self.fault_tolerant {
                        Failure::Aborted
                    } else {
                        Failure::Lost
                    };
                    self.pmix_failure(j, lost, gone.clone());
                    if !self.auto_cleanup {
                        self.dead_processes(j, gone);
                    }
                }
                if self.jobs[j].live().is_some_and(|job| job.answer.is_some()) {
                    // A host of a job being spawned cannot be reached: the spawn fails.
                    debug!(%host, "a host of a spawned job was lost");
                    self.fail_spawn(j, reason);
                } else if !discarded && !self.auto_cleanup && self.ending.is_none() {
                    // The user asked the job to go on when a part of it fails: without this
                    // host. A fence that needs its ranks fails the job when it starts.
                    let why = if self.fault_tolerant {
                        "-with-ft"
                    } else {
                        "-disable-auto-cleanup"
                    };
                    say!("kauri: {reason}; the job goes on without it ({why})");
                    self.lost = true;
                } else if !discarded {
                    if self.ending.is_none() {
                        say!("kauri: {reason}");
                    }
                    self.teardown(Ending::Failed);
                }
            }
            Report::NodeStarted { host, error, procs } => {
                // The debugger's table covers the first job only.
                if j == 0 {
                    self.first()
                        .procs
                        .extend(procs.into_iter().map(|(rank, pid, exe)| crate::mpir::Proc {
                            rank,
                            host: host.clone(),
                            executable: exe,
                            pid,
                        }));
                    self.mpir_check(j);
                }
                if let Some(e) = self.node_started(j, error) {
                    if self.ending.is_none() {
                        say!("kauri: {e}; ending the job");
                    }
                    debug!(%host, "a host could not start its ranks");
                    self.teardown(Ending::Failed);
                }
            }
            Report::ProtocolError { rank, error } => {
                let who = rank.map_or("a PMI client".to_string(), |r| who(j, r));
                say!("kauri: {who} sent a bad PMI message: {error}");
            }
            Report::UnreadReplies { rank, queued } => {
                let who = rank.map_or("a PMI client".to_string(), |r| who(j, r));
                say!(
                    "kauri: {who} does not read its PMI replies ({} MiB queued); closing its \
                     connection",
                    queued >> 20
                );
            }
        }
    }

    /// A signal to kauri: SIGINT, SIGTERM and SIGHUP end the job (a second SIGINT during
    /// the teardown kills at once); SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the
    /// ranks first.
    fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGINT if self.ending.is_some() => self.kill_all(),
            libc::SIGTERM => self.teardown(Ending::Signal(sig)),
            libc::SIGINT | libc::SIGHUP => {
                self.signal_all(sig);
                self.teardown(Ending::Signal(sig));
            }
            libc::SIGUSR1 => self.diagnose(Asked::Signal, false),
            _ => self.signal_all(sig),
        }
    }

    /// `MPIEXEC_TIMEOUT` bounds the whole run: it starts the teardown, or, when one is under
    /// way already, kills everything and stops waiting soon after.
    fn on_timeout(&mut self) {
        self.timed_out = true;
        let secs = self.timeout.unwrap_or_default().as_secs();
        if self.ending.is_none() {
            say!("kauri: job timed out after {secs} s (MPIEXEC_TIMEOUT)");
            // Where is everybody? The teardown follows the answers (or the wait's end).
            self.diagnose(Asked::Timeout, self.timeout_stacks);
            return;
        }
        say!("kauri: job timed out after {secs} s (MPIEXEC_TIMEOUT) during its teardown");
        self.kill_all();
        self.kill_at = None;
        let soon = Instant::now() + Duration::from_secs(1);
        self.leave_at = Some(self.leave_at.map_or(soon, |t| t.min(soon)));
    }

    /// Asks every host of every job where its ranks are (with the stuck ranks' stacks when
    /// `stacks`), for `whom`; joins the round under way, if one is.
    fn diagnose(&mut self, whom: Asked, stacks: bool) {
        if let Some(round) = self.status.as_mut() {
            round.for_whom.push(whom);
            return;
        }
        let wait = if stacks { STACKS_WAIT } else { STATUS_WAIT };
        let mut round = StatusRound {
            due: Instant::now() + wait,
            want: 0,
            got: Vec::new(),
            for_whom: vec![whom],
        };
        for (j, job) in self.jobs.iter_mut().enumerate() {
            let Some(job) = job.live_mut() else {
                continue;
            };
            round.want += job.branch.hosts();
            let mine = job.branch.ask_status(stacks);
            if stacks {
                let tx = self.own_status.clone();
                tokio::task::spawn_local(async move {
                    let _ = tx.send((j, crate::status::add_stacks(mine).await));
                });
            } else {
                round.got.push((j, mine));
            }
        }
        self.status = Some(round);
        self.status_complete();
    }

    /// Hosts' answers to the diagnosis under way (late ones, after it printed, are dropped).
    fn status_answer(&mut self, j: usize, hosts: Vec<HostStatus>) {
        if let Some(round) = self.status.as_mut() {
            round.got.extend(hosts.into_iter().map(|h| (j, h)));
            self.status_complete();
        }
    }

    /// Prints the diagnosis once every host has answered.
    fn status_complete(&mut self) {
        if self.status.as_ref().is_some_and(|r| r.got.len() >= r.want) {
            self.print_status();
        }
    }

    /// Gives the diagnosis (what the hosts said, and which hosts did not answer) to whoever
    /// asked: printed for a timeout (which then tears the job down) or a signal, sent to a
    /// `kauri --status`.
    fn print_status(&mut self) {
        let Some(round) = self.status.take() else {
            return;
        };
        let names: Vec<Vec<RankState>> = self
            .jobs
            .iter()
            .map(|j| j.live().map_or_else(Vec::new, |j| j.ranks.clone()))
            .collect();
        let lines = status_lines(&round.got, &names);
        let timeout = round.for_whom.iter().any(|w| matches!(w, Asked::Timeout));
        let heading = if timeout {
            "where the ranks were:"
        } else {
            "where the ranks are:"
        };
        let mut printed = false;
        let mut timed_out = false;
        for whom in round.for_whom {
            match whom {
                Asked::Timeout | Asked::Signal if !printed => {
                    printed = true;
                    say!("kauri:   {heading}");
                    for line in &lines {
                        say!("kauri:   {line}");
                    }
                    timed_out |= matches!(whom, Asked::Timeout);
                }
                Asked::Timeout => timed_out = true,
                Asked::Signal => {}
                Asked::Client(tx) => {
                    let ranks: usize = names.iter().map(Vec::len).sum();
                    let mut text = vec![format!(
                        "kauri {} ({} job(s), {ranks} ranks, running for {:.0} s): {}",
                        std::process::id(),
                        names.len(),
                        self.clock.now() as f64 / 1e6,
                        self.command
                    )];
                    text.push(format!("  {heading}"));
                    text.extend(lines.iter().map(|l| format!("  {l}")));
                    let _ = tx.send(text);
                }
            }
        }
        if timed_out {
            self.teardown(Ending::Timeout);
        }
    }

    /// The agents had their time after the kill: name the ones that never answered and stop
    /// waiting (leaving closes their links, which ends them and their ranks).
    fn give_up(&mut self) {
        self.leave_at = None;
        let mut silent: Vec<String> = Vec::new();
        for j in self.jobs.iter().filter_map(Job::live) {
            for h in j.branch.kids().unfinished() {
                if !silent.contains(&h) {
                    silent.push(h);
                }
            }
            if j.branch.node().is_some_and(|n| n.running() > 0) {
                silent.push(format!("{} (this host's ranks)", self.cluster.me));
            }
        }
        let waited = self.answer_wait.as_secs_f64();
        say!(
            "kauri: no answer from {} {waited:.0} s after the kill; leaving without it",
            if silent.is_empty() {
                "the job".to_string()
            } else {
                format!("the agent(s) on {}", silent.join(", "))
            }
        );
        self.gave_up = true;
    }

    fn on_kill_timer(&mut self) {
        self.leave_at = Some(Instant::now() + self.answer_wait);
        self.kill_all();
        self.kill_at = None;
    }

    fn signal_all(&mut self, sig: i32) {
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.signal(sig);
        }
    }

    fn kill_all(&mut self) {
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.kill();
        }
    }

    /// Tells every host of job `j`, when it is a PMIx job, that `ranks` failed: their PMIx
    /// servers notify their local clients. Called before the teardown the failure may bring,
    /// which follows it down the same links.
    fn pmix_failure(&mut self, j: usize, failure: Failure, ranks: Vec<usize>) {
        let Some(job) = self.live_mut(j) else {
            return;
        };
        if !job.plan.pmix || ranks.is_empty() {
            return;
        }
        let (status, exit_code) = failure.event();
        job.branch.pmix_failure(status, ranks, exit_code, None);
    }

    /// Adds `ranks` to job `j`'s dead ranks (`-disable-auto-cleanup`, the job going on) and
    /// tells every host of the job: each serves the list as `PMI_dead_processes`, then sends
    /// `SIGUSR1` to its ranks in PMI. Nothing once the job is ending.
    fn dead_processes(&mut self, j: usize, ranks: impl IntoIterator<Item = usize>) {
        if self.ending.is_some() {
            return;
        }
        let Some(job) = self.jobs[j].live_mut() else {
            return;
        };
        let before = job.dead.len();
        for r in ranks {
            if !job.dead.contains(&r) {
                job.dead.push(r);
            }
        }
        if job.dead.len() > before {
            job.branch.dead_processes(job.dead.clone(), None);
        }
    }

    /// Ends the run: `SIGTERM` to every rank of every job, `SIGKILL` after the grace. The
    /// first reason is the one that counts.
    fn teardown(&mut self, why: Ending) {
        if self.ending.is_none() {
            self.ending = Some(why);
        }
        if self
            .jobs
            .iter()
            .filter_map(Job::live)
            .all(|j| j.branch.ending())
        {
            return;
        }
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.teardown();
        }
        self.kill_at = Some(Instant::now() + self.grace);
    }

    /// Sends an answer to whoever asked.
    /// Ends the lookups that wait for names nobody is left to publish: once every process of
    /// the run still running waits in a lookup, each waiting lookup is answered "not
    /// published" (the PMIx client gets `PMIX_ERR_NOT_FOUND`), with one line saying so. Only
    /// for the run's own name table: through `kauri nameserver`, another run may publish.
    fn end_stuck_lookups(&mut self) {
        if self.waiting.is_empty() || !matches!(self.names, Names::Own(_)) {
            return;
        }
        let now = std::time::Instant::now();
        let waiting: std::collections::HashSet<&str> = self
            .waiting
            .iter(now)
            .filter_map(|(_, (_, by))| by.as_deref())
            .collect();
        // A released job's ranks have all ended.
        let all_wait = self.jobs.iter().filter_map(Job::live).all(|j| {
            j.ranks.iter().enumerate().all(|(r, s)| {
                s.ended.is_some() || waiting.contains(format!("{}:{r}", j.plan.kvsname).as_str())
            })
        });
        if !all_wait {
            return;
        }
        let stuck = self.waiting.drain(now);
        if stuck.is_empty() {
            return;
        }
        let mut names: Vec<&str> = stuck.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        say!(
            "kauri: a PMIx lookup of {} can never succeed: every process of the run still running waits in a lookup; it ends with PMIX_ERR_NOT_FOUND",
            names.join(", ")
        );
        for (name, (asker, _)) in stuck {
            let e = format!("nobody is left to publish the name {name}: it is not published");
            debug_assert_eq!(Refusal::of(&e), Refusal::NotPublished);
            self.answer(asker, ServiceReply::Found(Err(e)));
        }
    }

    fn answer(&mut self, a: Asker, reply: ServiceReply) {
        if let Some(j) = self.live_mut(a.job) {
            j.branch.reply(a.agent, a.req, reply);
        }
    }

    /// A spawned job whose start failed: answer the spawner, kill what did start.
    fn fail_spawn(&mut self, idx: usize, why: String) {
        let Some(j) = self.live_mut(idx) else {
            return;
        };
        j.discarded = true;
        j.branch.kill();
        if let Some(a) = j.answer.take() {
            debug!(idx, %why, "spawn failed");
            self.answer(a, ServiceReply::Spawn(Err(why)));
        }
    }

    /// Answers the spawner once every host of spawned job `idx` has said how its start went.
    fn check_spawn(&mut self, idx: usize) {
        let Some(j) = self.live_mut(idx) else {
            return;
        };
        if j.starting > 0 || j.answer.is_none() || j.discarded {
            return;
        }
        if let Some(e) = j.start_error.clone() {
            self.fail_spawn(idx, e);
        } else if let Some(a) = j.answer.take() {
            let done = SpawnDone {
                jobid: j.plan.kvsname.clone(),
                size: j.plan.size,
            };
            self.answer(a, ServiceReply::Spawn(Ok(done)));
        }
    }

    /// One more host of job `idx` has started its ranks (or failed to); the error when it
    /// ends the run (a host of the job the user started).
    fn node_started(&mut self, idx: usize, error: Option<String>) -> Option<String> {
        let j = self.live_mut(idx)?;
        j.starting = j.starting.saturating_sub(1);
        if j.discarded {
            // Late agents of a failed spawn: make sure they end too.
            j.branch.kill();
            return None;
        }
        if let Some(e) = error {
            if j.spawner.is_none() {
                return Some(e);
            }
            j.start_error.get_or_insert(e);
        }
        self.check_spawn(idx);
        None
    }

    /// Fills the debugger's process table (MPIR) once every host of the first job has
    /// started its ranks: the table covers the job the user started, as mpiexec's does.
    fn mpir_check(&mut self, j: usize) {
        let Some(job) = self.live_mut(j) else {
            return;
        };
        let all_in = job.procs.len() == job.plan.size;
        if j != 0 || !all_in {
            return;
        }
        crate::mpir::publish(std::mem::take(&mut job.procs));
    }

    /// The job whose namespace (kvsname) is `nspace`.
    fn job_named(&self, nspace: &str) -> Option<usize> {
        self.jobs.iter().position(|j| j.kvsname() == nspace)
    }

    /// Agent `from` of job `j` wants the PMIx data of `rank` of namespace `nspace`, another
    /// job's (one its ranks connected to): asked through that job's tree, under an id of its
    /// own; the answer comes up that tree to [`CROSS_JOB`] and goes down `j`'s to the asker.
    fn cross_dmodex(&mut self, j: usize, from: u32, req: u64, rank: usize, nspace: &str) {
        let Some(k) = self.job_named(nspace) else {
            let none = crate::pmix::ffi::PMIX_ERR_NOT_FOUND;
            if let Some(job) = self.live_mut(j) {
                job.branch.dmodex_data(from, req, none, Vec::new());
            }
            return;
        };
        let Some(job) = self.live_mut(k) else {
            // An ended job's data went with it, as under Hydra.
            let none = crate::pmix::ffi::PMIX_ERR_NOT_FOUND;
            if let Some(job) = self.live_mut(j) {
                job.branch.dmodex_data(from, req, none, Vec::new());
            }
            return;
        };
        if k == j {
            let out = job.branch.dmodex_serve(from, req, rank);
            return self.on_out(j, out);
        }
        let id = (0..)
            .find(|i| !self.cross_dmodex.contains_key(i))
            .expect("a free id");
        self.cross_dmodex.insert(id, (j, from, req));
        let out = self
            .live_mut(k)
            .and_then(|job| job.branch.dmodex_serve(CROSS_JOB, id, rank));
        self.on_out(k, out);
    }

    /// One server's part of PMIx collective `sig` over `procs`: it covers the participants
    /// `covered`. Once every participant is covered, every host of every job taking part gets
    /// the contributions (the hosts with a part in it answer their server), and a context id
    /// new in the run if a server asked for one (`context_id`: a group construct).
    fn collective(
        &mut self,
        sig: String,
        procs: &[(String, u32)],
        covered: &[(String, u32)],
        data: Vec<u8>,
        context_id: bool,
    ) {
        let wild = crate::pmix::ffi::PMIX_RANK_WILDCARD;
        if !self.collectives.contains_key(&sig) {
            let mut c = Collective::default();
            for (ns, r) in procs {
                let Some(k) = self.job_named(ns) else {
                    c.failed
                        .get_or_insert(format!("{ns} is no job of this run"));
                    continue;
                };
                c.jobs.insert(k);
                if *r == wild {
                    c.want.extend((0..self.jobs[k].size()).map(|r| (k, r)));
                } else {
                    c.want.insert((k, *r as usize));
                }
            }
            self.collectives.insert(sig.clone(), c);
        }
        let mut names = std::collections::HashMap::new();
        for (ns, r) in covered {
            let k = *names
                .entry(ns.clone())
                .or_insert_with(|| self.job_named(ns));
            if let Some(k) = k {
                self.collectives
                    .get_mut(&sig)
                    .expect("made above")
                    .have
                    .insert((k, *r as usize));
            }
        }
        let c = self.collectives.get_mut(&sig).expect("made above");
        c.data.extend_from_slice(&data);
        c.context_id |= context_id;
        if c.failed.is_none() && !c.want.is_subset(&c.have) {
            return;
        }
        let c = self.collectives.remove(&sig).expect("made above");
        let status = match &c.failed {
            None => crate::pmix::ffi::PMIX_SUCCESS,
            Some(why) => {
                say!("kauri: a PMIx collective cannot complete: {why}");
                crate::pmix::ffi::PMIX_ERR_NOT_FOUND
            }
        };
        let id = (c.context_id && c.failed.is_none()).then(|| {
            self.next_context_id += 1;
            self.next_context_id
        });
        debug!(%sig, jobs = c.jobs.len(), context_id = ?id, "PMIx collective complete");
        for k in c.jobs {
            if let Some(job) = self.live_mut(k) {
                job.branch
                    .pmix_collective_done(sig.clone(), status, c.data.clone(), id);
            }
        }
    }

    /// Serves the requests the last event brought: spawns start their job here; the name
    /// service answers from the run's table or asks the shared server.
    async fn serve_requests(&mut self) {
        for (asker, service) in std::mem::take(&mut self.requests) {
            match service {
                Service::Spawn {
                    commands,
                    preput,
                    pmix,
                } => self.spawn(asker, &commands, preput, pmix).await,
                Service::Terminate {
                    procs,
                    by,
                    status,
                    message,
                } => {
                    let reply = self.terminate(&procs, &by, status, &message);
                    self.answer(asker, ServiceReply::Done(reply));
                }
                Service::Jobs => {
                    let jobs = self
                        .jobs
                        .iter()
                        .map(|j| (j.kvsname().to_string(), j.size()))
                        .collect();
                    self.answer(asker, ServiceReply::Jobs(jobs));
                }
                Service::JobOf { nspace } => {
                    let plan = self
                        .job_named(&nspace)
                        .and_then(|k| self.jobs[k].live())
                        .map(|j| Box::new(j.plan.clone()))
                        .ok_or(format!("no running job of this run is named {nspace}"));
                    self.answer(asker, ServiceReply::Job(plan));
                }
                s => match &mut self.names {
                    Names::Own(t) => {
                        let reply = t.apply(0, &s);
                        let now = std::time::Instant::now();
                        match (&s, &reply) {
                            // Nobody published the name yet: a lookup that waits is answered
                            // by the publish.
                            (Service::Lookup { name, wait, by }, ServiceReply::Found(Err(e)))
                                if *wait != Wait::No && Refusal::of(e) == Refusal::NotPublished =>
                            {
                                debug!(%name, ?wait, "a lookup waits for its name");
                                self.waiting.add(name, (asker, by.clone()), *wait, now);
                                self.end_stuck_lookups();
                            }
                            (Service::Publish { name, port, .. }, ServiceReply::Done(Ok(()))) => {
                                let waiting = self.waiting.published(name, now);
                                self.answer(asker, reply);
                                for (w, _) in waiting {
                                    self.answer(w, ServiceReply::Found(Ok(port.clone())));
                                }
                            }
                            _ => self.answer(asker, reply),
                        }
                    }
                    Names::Server(c) => {
                        let (c, tx) = (c.clone(), self.svc_tx.clone());
                        tokio::task::spawn_local(async move {
                            let r = c.ask(s).await;
                            let _ = tx.send((asker, r));
                        });
                    }
                },
            }
        }
    }

    /// `PMIx_Abort` of some processes by `by`: one line, then `SIGKILL` to each (a rank of
    /// `PMIX_RANK_WILDCARD`: every rank of that namespace) down its job's tree. What follows is what
    /// follows any rank killed by a signal (the job ends, unless `-disable-auto-cleanup`).
    fn terminate(
        &mut self,
        procs: &[(String, u32)],
        by: &str,
        status: i32,
        message: &str,
    ) -> Result<(), String> {
        let mut by_job: Vec<(usize, Vec<usize>)> = Vec::new();
        for (ns, r) in procs {
            let k = self
                .job_named(ns)
                .ok_or(format!("no job of this run is named {ns}"))?;
            let size = self.jobs[k].size();
            let ranks: Vec<usize> = if *r == crate::pmix::ffi::PMIX_RANK_WILDCARD {
                (0..size).collect()
            } else if (*r as usize) < size {
                vec![*r as usize]
            } else {
                return Err(format!("{ns} has no rank {r}"));
            };
            match by_job.iter_mut().find(|(j, _)| *j == k) {
                Some((_, v)) => v.extend(ranks),
                None => by_job.push((k, ranks)),
            }
        }
        let what: Vec<String> = by_job
            .iter()
            .map(|(k, ranks)| {
                let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
                format!("{} rank(s) {}", self.jobs[*k].kvsname(), list.join(","))
            })
            .collect();
        let why = if message.is_empty() {
            String::new()
        } else {
            format!(": {message}")
        };
        say!(
            "kauri: {by} called PMIx_Abort (status {status}) on {}{why}",
            what.join("; ")
        );
        for (k, mut ranks) in by_job {
            ranks.sort_unstable();
            ranks.dedup();
            if let Some(job) = self.live_mut(k) {
                job.branch.signal_ranks(libc::SIGKILL, ranks);
            }
        }
        Ok(())
    }

    /// Starts the job a rank asked for; the answer goes back once every host started its
    /// ranks, or at once when it cannot start.
    async fn spawn(
        &mut self,
        asker: Asker,
        commands: &[SpawnCommand],
        preput: Delta,
        pmix: Option<crate::service::PmixSpawn>,
    ) {
        if self.ending.is_some() {
            let reply = ServiceReply::Spawn(Err("the run is ending".into()));
            return self.answer(asker, reply);
        }
        let Some(spawner) = self.jobs.get(asker.job).and_then(Job::live) else {
            return debug!(job = asker.job, "a spawn asked by a released job");
        };
        let spawner = &spawner.plan;
        let planned = plan_spawn(&mut self.cluster, spawner, commands, preput, pmix.as_ref());
        let (plan, local, remote) = match planned {
            Ok(x) => x,
            Err(e) => return self.answer(asker, ServiceReply::Spawn(Err(e))),
        };
        let idx = self.jobs.len();
        info!(idx, kvsname = %plan.kvsname, size = plan.size, "spawning a job");
        let started = start_job(
            idx,
            &self.cluster,
            plan,
            local,
            remote,
            &self.wires,
            self.clock,
            None,
        )
        .await;
        match started {
            Ok(mut j) => {
                j.spawner = Some(asker.job);
                j.answer = Some(asker);
                self.jobs.push(Job::Live(Box::new(j)));
                self.check_spawn(idx);
            }
            Err((e, Some(mut j))) => {
                j.spawner = Some(asker.job);
                j.answer = Some(asker);
                self.jobs.push(Job::Live(Box::new(j)));
                self.fail_spawn(idx, e);
            }
            Err((e, None)) => self.answer(asker, ServiceReply::Spawn(Err(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_ppr;

    #[test]
    fn ppr_is_a_count_per_node() {
        assert_eq!(parse_ppr("2:n"), Ok(2));
        assert_eq!(parse_ppr("1:node"), Ok(1));
        assert_eq!(parse_ppr("3"), Ok(3));
        assert!(parse_ppr("0:n").is_err());
        assert!(parse_ppr("x:n").is_err());
        assert!(parse_ppr("2:socket").unwrap_err().contains("per socket"));
    }
}
