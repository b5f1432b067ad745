//! The job plan's construction: from a [`JobSpec`] to everything decided before anything
//! starts ([`Plan`]): the hosts (named, from an allocation, or this one), the launcher and its
//! cost, each segment's wiring evidence and environment, the PMIx library, and the split into
//! the ranks of this host and the hosts agents serve.

use crate::hosts::{host_list, HostList};
use kauri_core::plan::job::{EnvPolicy, Evidence, HostSpec, JobSpec, Placement, PmiChoice, Wiring};
use kauri_core::plan::output::{OutputOptions, OutputPlan};
use kauri_core::plan::{Adopt, AppPlan, HostPlan, JobPlan, LaunchPlan, RankPlan};
use kauri_core::tree::shape::LaunchCost;
use kauri_launch::kind::LauncherKind;
use kauri_os::hostname::is_local;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;
use tracing::debug;

pub use kauri_core::tree::policy::STATUS_LAUNCHER;

/// The default width of the agent tree.
pub const DEFAULT_TREE_WIDTH: usize = 8;

/// A job name unique across concurrent launches on this host.
pub fn kvsname(host: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kauri_{}_{nanos:x}_{host}", std::process::id())
}

/// How a job is wired up: as asked, or (`auto`) both PMI-1/PMI-2 and PMIx, whatever its
/// programs are (each rank speaks the one its MPI speaks; the PMIx server starts only when a
/// client needs it: [`kauri_proto::pmix::door`]); a job set up for Open MPI's PMI-1 path
/// (`FLUX_PMI_LIBRARY_PATH` in its environment) is PMI.
///
/// Also says what reading the segments' programs found ([`segment_evidence`]), whatever
/// `--pmi` asked: whether the job looks like an MPI job (a segment's program is linked to an
/// MPI or a PMI library, or names one past itself; [`kauri_core::tree::policy::never_wired`]
/// speaks only of those), and whether a segment's program is linked to Open MPI or
/// `libpmix` (its hosts start their PMIx servers at once).
pub fn wiring(choice: PmiChoice, apps: &[AppPlan]) -> Wired {
    let found: Vec<Evidence> = apps.iter().map(segment_evidence).collect();
    debug!(?found, ?choice, "the segments' programs");
    let wiring = match choice {
        PmiChoice::Pmix => Wiring::Pmix,
        PmiChoice::Pmi1 | PmiChoice::Pmi2 => Wiring::Pmi,
        PmiChoice::Auto if apps.iter().any(AppPlan::uses_open_mpi_flux) => Wiring::Pmi,
        PmiChoice::Auto => Wiring::Both,
    };
    Wired {
        wiring,
        mpi: kauri_core::plan::job::MpiSign::of(&found),
        pmix_now: wiring == Wiring::Pmix || found.contains(&Evidence::Pmix),
        pmix_library: None,
    }
}

/// The most bytes of a script (or of a file an argument names that is not an ELF program)
/// searched for [`kauri_core::plan::job::MPI_MARKERS`].
pub const SCRIPT_HEAD: u64 = 64 << 10;

/// What one segment's program is linked to, and, for a program linked to no MPI (an
/// interpreter, a shell, a wrapper such as `env` or `valgrind`, a script, a static binary),
/// what lies past it: an MPI marker in its arguments (`python3 -c 'from mpi4py …'`), in the
/// script it is, or in a script an argument names (`python3 prog.py`, `bash -c "julia x.jl"`),
/// or a program an argument names that is linked to an MPI (`valgrind ./app`). Only regular
/// files are opened, and only their first bytes read.
pub fn segment_evidence(a: &AppPlan) -> Evidence {
    use kauri_core::plan::job::{arg_words, mentions_mpi, wants_pmi, wants_pmix};
    use kauri_os::elf::needed_libraries_of;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let path = a.var("PATH");
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
    if let Ok(p) = kauri_os::program::resolve(&a.program, path, wdir) {
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
        } else if !w.as_bytes().contains(&b'/')
            && !w
                .as_bytes()
                .iter()
                .all(|&b| b.is_ascii_digit() || b == b'.')
        {
            // A number (`-n 4 ./app 1000`) names no program on PATH.
            kauri_os::program::resolve(w, path, wdir).ok()
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
/// ([`kauri_proto::pmix::library`]) and kauri may load it
/// ([`kauri_proto::pmix::library::trusted`]: else one line says why not, and the job is
/// served with the system's library).
pub fn pmix_library(apps: &[AppPlan]) -> Option<String> {
    if let Some(v) = std::env::var(kauri_proto::pmix::ffi::LIBRARY_VAR)
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Some(v);
    }
    apps.iter().find_map(|a| {
        // The library search reads these as text: one that is not UTF-8 is not searched.
        let var = |name: &str| a.var(name).and_then(std::ffi::OsStr::to_str);
        let wdir = std::path::Path::new(&a.wdir);
        let program = kauri_os::program::resolve(&a.program, a.var("PATH"), wdir).ok()?;
        let named: Vec<std::path::PathBuf> = kauri_core::plan::job::arg_words(&a.args)
            .into_iter()
            .filter_map(|w| {
                let f = wdir.join(w);
                if f.is_file() {
                    Some(f)
                } else if !std::os::unix::ffi::OsStrExt::as_bytes(w).contains(&b'/') {
                    kauri_os::program::resolve(w, a.var("PATH"), wdir).ok()
                } else {
                    None
                }
            })
            .collect();
        let found =
            kauri_proto::pmix::library::for_program(&kauri_proto::pmix::library::Program {
                path: &program,
                named: &named,
                ld_library_path: var("LD_LIBRARY_PATH"),
                virtual_env: var("VIRTUAL_ENV"),
            })?;
        match kauri_proto::pmix::library::trusted(&found) {
            Ok(f) => Some(f.to_string_lossy().into_owned()),
            Err(why) => {
                say!(
                    "kauri: not loading {}: {why}; serving the job with the system's OpenPMIx library",
                    found.display()
                );
                None
            }
        }
    })
}

/// Gives every segment that uses Open MPI's `flux` path (`FLUX_PMI_LIBRARY_PATH` set) a
/// `FLUX_JOB_ID` unique to the job, unless the user set one.
pub fn add_flux_job_id(apps: &mut [AppPlan], kvsname: &str) {
    for a in apps {
        if a.uses_open_mpi_flux() && !a.sets("FLUX_JOB_ID") {
            a.env.push((
                "FLUX_JOB_ID".into(),
                kauri_core::plan::job::flux_job_id(kvsname)
                    .to_string()
                    .into(),
            ));
        }
    }
}

/// The environment of one segment's ranks, before the PMI variables. Names and values are
/// the bytes the OS gave kauri, UTF-8 or not; a name that is not UTF-8 is none of kauri's
/// (nor can `-genvlist` name it) and passes under `-genvall` only.
pub fn segment_env(spec: &JobSpec, app: usize) -> Vec<(OsString, OsString)> {
    let a = &spec.apps[app];
    let policy = a.env_policy.as_ref().unwrap_or(&spec.env_policy);
    // Inside a Slurm job, what describes srun's tasks and steps (not ours) stays behind, as
    // Hydra's slurm bootstrap leaves it; a variable named in -genvlist/-envlist still passes.
    let in_slurm_job =
        std::env::var_os("SLURM_JOB_ID").is_some() || std::env::var_os("SLURM_JOBID").is_some();
    let listed = |k: &str| matches!(policy, EnvPolicy::List(l) if l.iter().any(|n| n == k));
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| match k.to_str() {
            None => *policy == EnvPolicy::All,
            Some(k) => {
                !kauri_core::plan::rank_env::is_foreign_wiring(k)
                    && !k.starts_with("KAURI_JOB_KEY")
                    && k != kauri_core::plan::job::Attempt::VAR
                    && match policy {
                        EnvPolicy::All => {
                            !(in_slurm_job && kauri_launch::allocation::is_slurm_task_var(k))
                        }
                        EnvPolicy::None => false,
                        EnvPolicy::List(_) => listed(k),
                    }
            }
        })
        .collect();
    if spec.ml_env {
        // A rank's place is kauri's to say: an inherited RANK (kauri run inside another
        // launcher's job) would shadow it. A name given with -genv/-env/-envlist still wins.
        env.retain(|(k, _)| {
            k.to_str().is_none_or(|k| {
                !kauri_core::plan::rank_env::ML_PLACE_VARS.contains(&k) || listed(k)
            })
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
pub const FT_VARS: [(&str, &str); 2] = [
    ("OMPI_MCA_mpi_ft_enable", "1"),
    ("MPIR_CVAR_ENABLE_FT", "1"),
];

/// The hosts (comma-separated) whose ranks `-ml-env` gives `OMP_NUM_THREADS=1`
/// ([`kauri_core::plan::rank_env::sets_omp_threads`]). `None` when there is none.
pub fn omp_threads_set(p: &Plan) -> Option<String> {
    let mut shared: Vec<&HostPlan> = p
        .local
        .iter()
        .chain(&p.remote)
        .filter(|h| {
            h.ranks.iter().any(|r| {
                kauri_core::plan::rank_env::sets_omp_threads(
                    &p.job,
                    &p.job.apps[r.app],
                    h.ranks.len(),
                )
            })
        })
        .collect();
    shared.sort_by_key(|h| h.index);
    let hosts: Vec<&str> = shared.iter().map(|h| h.host.as_str()).collect();
    (!hosts.is_empty()).then(|| hosts.join(", "))
}

/// The address agents connect back to: `KAURI_ADDR`, else the local end of the route to the
/// first remote host (a UDP `connect` sends nothing), else loopback. (`-iface` overrides
/// it with the interface's address.)
pub fn advertise(first_remote: Option<&str>, fork: bool) -> IpAddr {
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
pub fn launch_cost(launch: &LaunchPlan, host: &str) -> LaunchCost {
    if let Some(c) = std::env::var("KAURI_LAUNCH_COST")
        .ok()
        .and_then(|v| LaunchCost::parse(&v))
    {
        return LaunchCost {
            serial_us: c.serial_us,
            latency_us: c.latency_us.saturating_sub(c.serial_us),
        };
    }
    match kauri_launch::time_launch(launch, host) {
        Some((serial, total)) => LaunchCost {
            serial_us: serial.as_micros() as u64,
            latency_us: (total - serial).as_micros() as u64,
        },
        None => LaunchCost {
            serial_us: 1000,
            latency_us: 10_000_000,
        },
    }
}

/// Everything decided before anything starts.
pub struct Plan {
    /// The job, as sent down the tree.
    pub job: JobPlan,
    /// The host the front end serves itself, if it runs ranks.
    pub local: Option<HostPlan>,
    /// The hosts an agent serves, each with its ranks.
    pub remote: Vec<HostPlan>,
    /// How agents are started on the remote hosts.
    pub launch: LaunchPlan,
    /// The width of the agent tree; 0 is flat.
    pub width: usize,
    /// Shape the tree by launch cost (`-tree-width cost`).
    pub cost_tree: bool,
    /// Every host the user named (or the allocation gave), with its slots: where spawned
    /// jobs may go.
    pub hosts: Vec<HostSpec>,
    /// The index in `hosts` of the host the front end serves itself.
    pub served_here: Option<usize>,
    /// How surely the job uses an MPI ([`wiring`]).
    pub mpi: kauri_core::plan::job::MpiSign,
    /// `MASTER_PORT`'s reservation (`-ml-env`), kept for the run's whole life.
    pub master_port: Option<kauri_os::ports::Reservation>,
    /// The directory kauri was started in: relative `-wdir`s and spawn's `wdir` and `path`
    /// are taken from it.
    pub cwd: PathBuf,
}

/// The output options of `spec`: `-l` is the prefix `[%r] `, as in Hydra.
pub fn output_options(spec: &JobSpec) -> OutputOptions {
    let mut o = spec.output.clone();
    if spec.label && o.prepend.is_none() {
        o.prepend = kauri_core::plan::output::Pattern::parse("[%r] ").ok();
    }
    // SAFETY: isatty takes a descriptor number and only answers.
    let on_terminal = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
    o.terminal = on_terminal && !o.no_pty && o.outfile.is_none();
    o
}

/// Why a job cannot be planned: each prints the one line kauri gives for it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A restart leaves out the hosts an earlier attempt lost, and the others cannot hold
    /// the job.
    #[error(
        "restart {restart}: without {}, the hosts have {slots} slot(s) for {size} ranks: the run ends",
        lost.join(",")
    )]
    LostHostsNeeded {
        /// The restart.
        restart: u32,
        /// The hosts lost.
        lost: Vec<String>,
        /// The slots of the others.
        slots: usize,
        /// The job's size.
        size: usize,
    },
    /// `-launcher` names no launcher.
    #[error(transparent)]
    UnknownLauncher(#[from] kauri_launch::kind::UnknownLauncher),
    /// The resource manager's allocation cannot be read.
    #[error(transparent)]
    Allocation(#[from] kauri_launch::allocation::AllocationError),
    /// The allocation's slots come to more ranks than a job may have.
    #[error("{}", kauri_core::plan::job::too_many_ranks(&format!("{size} processes in all (the allocation's slots)")))]
    TooManyRanks {
        /// The ranks the slots come to.
        size: usize,
    },
    /// `-output-from` names a rank the job does not have.
    #[error("-output-from {rank}: the job has {size} rank{} (0 to {})", plural(*.size), .size - 1)]
    OutputFrom {
        /// The rank named.
        rank: usize,
        /// The job's ranks.
        size: usize,
    },
    /// The current directory is gone.
    #[error(
        "the current directory cannot be read ({why}): was it deleted? cd to a directory \
         that exists and start the job again"
    )]
    NoWorkingDir {
        /// What the system said.
        #[source]
        why: std::io::Error,
    },
    /// No port could be reserved for `MASTER_PORT` (`-ml-env`).
    #[error("cannot find a free port for MASTER_PORT: {why}")]
    MasterPort {
        /// Why.
        #[source]
        why: std::io::Error,
    },
}

/// The `s` of `size` ranks.
fn plural(size: usize) -> &'static str {
    if size == 1 {
        ""
    } else {
        "s"
    }
}

/// Plans the job the user started: from `spec` to everything decided before anything
/// starts, on the host named `me`.
pub fn plan(spec: &JobSpec, me: &str) -> Result<Plan, PlanError> {
    let (launcher, mut entries) = choose_hosts(spec, me)?;
    if let Some(a) = spec.attempt.as_ref().filter(|a| !a.without.is_empty()) {
        entries = without_lost(a, entries, spec.size())?;
    }
    let self_os = std::env::current_exe().map_or_else(|_| "kauri".into(), PathBuf::into_os_string);
    let (kind, exec) = kauri_launch::program_for(
        launcher.unwrap_or_default(),
        spec.launcher_exec.clone(),
        &self_os.to_string_lossy(),
    );
    // Each machine once, however many entries name it ([`HostList`]).
    let mut list = host_list(&entries, me, kind);
    // Segments without -n: the hosts' slots (Hydra's rule), or 1 on this host alone.
    let mut spec = spec.clone();
    let slots_total = default_nprocs(spec.ppn, &list.hosts);
    for a in spec.apps.iter_mut().filter(|a| a.nprocs == 0) {
        a.nprocs = slots_total;
    }
    let spec = &spec;
    let size = spec.size();
    check_size(spec, size)?;
    let hosts_named = !list.hosts.is_empty();
    if list.hosts.is_empty() {
        let me = [HostSpec {
            name: me.to_string(),
            slots: size,
        }];
        list = HostList::merge(&me, &|_| true, false);
    }
    let (slots, placement) = place(spec, size, &list);
    let appnum = appnums(spec);
    let cwd = working_dir()?;
    let mut apps = segment_plans(spec, &cwd);
    // The front end serves the host that is this machine (unless the launcher must start
    // every agent); every other host with ranks gets an agent.
    let served_here = list.here.filter(|_| kind.front_end_serves_its_host());
    let hosts = list.hosts;
    let (on_host, used) = ranks_by_host(&placement.node, hosts.len());
    let (master, master_port) = master(spec, &placement, &hosts, served_here, kind)?;
    let adopt = adopt(spec);
    let name = kvsname(me);
    let wired = wire_segments(spec.pmi, &mut apps, &name);
    let universe_size = spec.universe_size.unwrap_or(if hosts_named {
        slots.iter().sum::<usize>() as i64
    } else {
        -1
    });
    let job = job_plan(
        spec,
        JobParts {
            kvsname: name,
            size,
            universe_size,
            appnum: appnum.clone(),
            placement: &placement,
            apps,
            hosts: used.iter().map(|&n| hosts[n].name.clone()).collect(),
            used: &used,
            master,
            adopt,
            simulated_hosts: kind.simulates_hosts(),
            wired: &wired,
        },
    );
    let (local, remote) = split_hosts(&hosts, on_host, &appnum, &used, served_here);
    let launch = launch_plan(kind, exec, self_os);
    let tree_var = std::env::var("KAURI_TREE_WIDTH").ok();
    let (width, cost_tree) = tree_shape(spec, kind, tree_var.as_deref());
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
        mpi: wired.mpi,
        master_port,
        cwd,
    })
}

/// The current directory; an error when it is gone (deleted, or a mount that went away):
/// ranks are never started in `/` instead, as they once were, writing their files there.
fn working_dir() -> Result<PathBuf, PlanError> {
    std::env::current_dir().map_err(|why| PlanError::NoWorkingDir { why })
}

/// The launcher asked for and the hosts to run on: a singleton's on this host alone (by
/// the fork launcher), else the hosts named, else an allocation's (with its manager's
/// launcher when it has a host that is not this one), else none yet. An unknown launcher is
/// an error.
fn choose_hosts(
    spec: &JobSpec,
    me: &str,
) -> Result<(Option<LauncherKind>, Vec<HostSpec>), PlanError> {
    if spec.singleton.is_some() {
        // A singleton runs here; its spawned processes run here too (it has no way to name
        // hosts but the spawn's own info keys).
        return Ok((Some(LauncherKind::Fork), Vec::new()));
    }
    let mut hosts: Vec<HostSpec> = spec.hosts.clone();
    let allocation = if hosts.is_empty() {
        kauri_launch::allocation::detect()?
    } else {
        None
    };
    let mut launcher = spec.launcher.as_deref().map(str::parse).transpose()?;
    if let Some(a) = allocation {
        // The manager's own launcher starts agents inside its job, as Hydra picks its
        // bootstrap: slurm, sge, lsf, pbs.
        if launcher.is_none() && a.hosts.iter().any(|h| !is_local(&h.name, me)) {
            launcher = Some(a.manager);
        }
        hosts = a.hosts;
    }
    Ok((launcher, hosts))
}

/// The host entries of an attempt without the hosts an earlier one lost, when the others
/// have slots for the job's `size` ranks (every segment gave its `-n`; else the slots left
/// decide the size).
fn without_lost(
    a: &kauri_core::plan::job::Attempt,
    entries: Vec<HostSpec>,
    size: usize,
) -> Result<Vec<HostSpec>, PlanError> {
    let kept: Vec<HostSpec> = entries
        .into_iter()
        .filter(|h| !a.without.contains(&h.name))
        .collect();
    let slots: usize = kept.iter().map(|h| h.slots).sum();
    if kept.is_empty() || slots < size {
        return Err(PlanError::LostHostsNeeded {
            restart: a.restart,
            lost: a.without.clone(),
            slots,
            size,
        });
    }
    Ok(kept)
}

/// The processes of a segment without `-n`: `ppn` on every host (at least one), else the
/// hosts' slots, and at least 1.
fn default_nprocs(ppn: Option<usize>, hosts: &[HostSpec]) -> usize {
    match ppn {
        Some(ppn) => ppn.saturating_mul(hosts.len().max(1)),
        None => hosts
            .iter()
            .fold(0usize, |n, h| n.saturating_add(h.slots))
            .max(1),
    }
}

/// Whether a job of `size` ranks may run as `spec` asks: at most [`kauri_core::plan::job::RANKS_MAX`]
/// ranks, and an `-output-from` rank it has.
fn check_size(spec: &JobSpec, size: usize) -> Result<(), PlanError> {
    if size > kauri_core::plan::job::RANKS_MAX {
        return Err(PlanError::TooManyRanks { size });
    }
    if let Some(rank) = spec.output.output_from.filter(|&r| r >= size) {
        return Err(PlanError::OutputFrom { rank, size });
    }
    Ok(())
}

/// Each host's slots (its own, or under `-ppn N` `N` for each name it was given) and where
/// the ranks go: in blocks over the entries' slots in the list's order ([`HostList::block`]),
/// or over the hosts' in the order of their first entries under `-ppn`, or round-robin over
/// the hosts (`-map-by node`); consecutive on each host under `-ml-env`.
fn place(spec: &JobSpec, size: usize, list: &HostList) -> (Vec<usize>, Placement) {
    let hosts = &list.hosts;
    let slots: Vec<usize> = hosts
        .iter()
        .zip(&list.names)
        .map(|(h, &names)| spec.ppn.map_or(h.slots, |n| n.saturating_mul(names)))
        .collect();
    let placement = if spec.map_by_node {
        Placement::cyclic(size, hosts.len())
    } else if spec.ppn.is_some() {
        Placement::block(size, &slots)
    } else {
        list.block(size)
    };
    // A trainer computes RANK = GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK: under -ml-env,
    // each host's ranks are consecutive (Hydra's counts per host, numbered host by host),
    // unless the user chose a mapping.
    let placement = if spec.ml_env && !spec.mapping_asked {
        placement.by_host()
    } else {
        placement
    };
    (slots, placement)
}

/// `appnum[r]`: the segment of every rank.
fn appnums(spec: &JobSpec) -> Vec<u32> {
    spec.apps
        .iter()
        .enumerate()
        .flat_map(|(i, a)| std::iter::repeat_n(i as u32, a.nprocs))
        .collect()
}

/// Every segment's program, arguments, environment ([`segment_env`]) and working directory
/// (relative to the current one).
fn segment_plans(spec: &JobSpec, cwd: &std::path::Path) -> Vec<AppPlan> {
    spec.apps
        .iter()
        .enumerate()
        .map(|(i, a)| AppPlan {
            program: a.program.clone(),
            args: a.args.clone(),
            env: segment_env(spec, i),
            wdir: cwd
                .join(
                    a.wdir
                        .clone()
                        .or(spec.wdir.clone())
                        .unwrap_or(cwd.to_path_buf()),
                )
                .into_os_string(),
        })
        .collect()
}

/// Each of `nhosts` hosts' ranks (in one pass over the placement `node`), and the hosts
/// that have any, in order.
fn ranks_by_host(node: &[usize], nhosts: usize) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut on_host: Vec<Vec<usize>> = vec![Vec::new(); nhosts];
    for (rank, &n) in node.iter().enumerate() {
        on_host[n].push(rank);
    }
    let used: Vec<usize> = (0..nhosts).filter(|&n| !on_host[n].is_empty()).collect();
    (on_host, used)
}

/// `MASTER_ADDR` and `MASTER_PORT`, and the reservation that holds the port.
type Master = (Option<(String, u16)>, Option<kauri_os::ports::Reservation>);

/// `MASTER_ADDR` and `MASTER_PORT` under `-ml-env`, and the port's reservation: rank 0's
/// host (loopback when it is served here or simulated), and a free port held for the run.
fn master(
    spec: &JobSpec,
    placement: &Placement,
    hosts: &[HostSpec],
    served_here: Option<usize>,
    kind: LauncherKind,
) -> Result<Master, PlanError> {
    if !spec.ml_env {
        return Ok((None, None));
    }
    let n0 = placement.node.first().copied().unwrap_or(0);
    let addr = master_addr(n0, hosts, served_here, kind);
    let held = kauri_os::ports::reserve(spec.port_range.as_ref())
        .map_err(|why| PlanError::MasterPort { why })?;
    Ok((Some((addr, held.port())), Some(held)))
}

/// `MASTER_ADDR`: loopback when rank 0's host `n0` is served here or simulated, else its
/// name.
fn master_addr(
    n0: usize,
    hosts: &[HostSpec],
    served_here: Option<usize>,
    kind: LauncherKind,
) -> String {
    let here = Some(n0) == served_here || kind.simulates_hosts();
    if here {
        "127.0.0.1".to_string()
    } else {
        hosts[n0].name.clone()
    }
}

/// The running program a singleton job adopts as its rank 0.
fn adopt(spec: &JobSpec) -> Option<Adopt> {
    // A singleton is rank 0 of a one-rank job on this host. It gets a kvsname of its own, as
    // MPICH's reference server gives it: its client made up `singinit_kvs_PID_0` while it had
    // no process manager, and MPICH's ch3 renames its process group to the name the process
    // manager gives (`MPIDI_PG_CheckForSingleton`) only when that name differs.
    // MPICH 4.0.2's client formats the pid after its fork, in the child: the pid it passes is
    // the launcher's own, and the program is its parent.
    let s = spec.singleton.as_ref()?;
    let pid = if s.pid == std::process::id() {
        std::os::unix::process::parent_id()
    } else {
        s.pid
    };
    Some(Adopt {
        addr: singleton_addr(&s.interface, s.port),
        pid,
    })
}

/// Where a singleton listens, as `host:port` from the interface and port it gave
/// (`default_interface`: loopback; an IPv6 address in brackets).
fn singleton_addr(interface: &str, port: u16) -> String {
    match interface {
        "default_interface" | "" => format!("127.0.0.1:{port}"),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]:{port}"),
        h => format!("{h}:{port}"),
    }
}

/// How the job is wired ([`wiring`]) and what that adds to its segments.
pub struct Wired {
    /// PMI, PMIx, or both.
    pub wiring: Wiring,
    /// How surely the job uses an MPI: a segment's program is linked to one or names one.
    pub mpi: kauri_core::plan::job::MpiSign,
    /// A segment's program is linked to Open MPI or `libpmix` (or `--pmi=pmix`): the
    /// job's PMIx servers start at once.
    pub pmix_now: bool,
    /// The OpenPMIx library the servers load, for a PMIx job ([`pmix_library`]).
    pmix_library: Option<String>,
}

/// Chooses the job's wiring and gives its segments what it needs: `OPAL_PREFIX` for a
/// relocated Open MPI's PMIx library, `FLUX_JOB_ID` for a PMI job ([`add_flux_job_id`]).
fn wire_segments(choice: PmiChoice, apps: &mut [AppPlan], kvsname: &str) -> Wired {
    let mut wired = wiring(choice, apps);
    let pmix = wired.wiring != Wiring::Pmi;
    let pmix_library = pmix.then(|| pmix_library(apps)).flatten();
    if let Some(prefix) = pmix_library
        .as_deref()
        .and_then(|l| kauri_proto::pmix::library::open_mpi_prefix(std::path::Path::new(l)))
    {
        // Open MPI's relocated tree (the wheel's): its help texts, as its own mpirun says.
        for a in apps.iter_mut() {
            if !a.sets("OPAL_PREFIX") {
                a.env
                    .push(("OPAL_PREFIX".into(), prefix.clone().into_os_string()));
            }
        }
    }
    if !pmix {
        add_flux_job_id(apps, kvsname);
    }
    wired.pmix_library = pmix_library;
    wired
}

/// What [`job_plan`] is made of, beyond the spec.
struct JobParts<'a> {
    kvsname: String,
    size: usize,
    universe_size: i64,
    appnum: Vec<u32>,
    placement: &'a Placement,
    apps: Vec<AppPlan>,
    /// The names of the hosts that run ranks, in node order.
    hosts: Vec<String>,
    /// Their indices among all hosts.
    used: &'a [usize],
    master: Option<(String, u16)>,
    adopt: Option<Adopt>,
    simulated_hosts: bool,
    wired: &'a Wired,
}

/// The [`JobPlan`] of the job the user started.
fn job_plan(spec: &JobSpec, p: JobParts<'_>) -> JobPlan {
    let rank_node: Vec<u32> = p
        .placement
        .node
        .iter()
        .map(|n| p.used.iter().position(|u| u == n).unwrap_or(0) as u32)
        .collect();
    let pmix = p.wired.wiring != Wiring::Pmi;
    let topology_ahead = p.wired.mpi != kauri_core::plan::job::MpiSign::None
        && p.wired.wiring != Wiring::Pmix
        && !shares_one_machine(p.simulated_hosts, p.used.len());
    JobPlan {
        kvsname: p.kvsname,
        size: p.size,
        universe_size: p.universe_size,
        appnum: p.appnum,
        process_mapping: p.placement.process_mapping(),
        apps: p.apps,
        output: OutputPlan {
            options: output_options(spec),
            pgid: 0,
            start_unix_ms: kauri_os::clock::unix_ms(),
        },
        pmi_port: spec.pmi_port,
        kill_grace_ms: env_secs("KAURI_KILL_GRACE", 3.0).as_millis() as u64,
        hosts: p.hosts,
        master: p.master,
        spawner: None,
        parent_rank: None,
        preput: Vec::new(),
        adopt: p.adopt,
        simulated_hosts: p.simulated_hosts,
        rank_node,
        pmix,
        pmi_too: p.wired.wiring == Wiring::Both,
        pmix_now: p.wired.pmix_now,
        pmix_library: p.wired.pmix_library.clone(),
        profile: spec.profile.is_some(),
        progress: spec.verbose > 0,
        binding: spec.binding,
        report_bindings: spec.report_bindings,
        gpus: spec.gpus.clone(),
        restart: spec.attempt.as_ref().map(|a| kauri_core::plan::Restart {
            count: a.restart,
            max: a.max_restarts,
            run_id: a.run_id.clone(),
        }),
        iface: spec.iface.clone(),
        port_range: spec.port_range.clone(),
        fault_tolerant: spec.fault_tolerant,
        topology_ahead,
    }
}

/// Whether a job's hosts are several simulated hosts, that is several agents on this one
/// machine. Each would run hwloc's discovery ahead at once while the agents after it and
/// their ranks are still starting (16 ranks on 4: 0.450 s against 0.408 s with the file made
/// when a rank asks), so such a job's topology is made when asked, as Hydra's proxies make
/// theirs.
pub fn shares_one_machine(simulated_hosts: bool, hosts_used: usize) -> bool {
    simulated_hosts && hosts_used > 1
}

/// The hosts with ranks, split into the one the front end serves (`served_here`) and those
/// agents serve, each with its ranks (`on_host`) numbered on the host.
fn split_hosts(
    hosts: &[HostSpec],
    mut on_host: Vec<Vec<usize>>,
    appnum: &[u32],
    used: &[usize],
    served_here: Option<usize>,
) -> (Option<HostPlan>, Vec<HostPlan>) {
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
    (local, remote)
}

/// How agents are launched: the launcher and its program (`-launcher-exec`, or the kind's
/// own), where kauri is on the hosts (`self_os`, kauri's own path, unless
/// `KAURI_AGENT_PATH` says), and the times and limits from kauri's variables.
fn launch_plan(kind: LauncherKind, exec: String, self_os: OsString) -> LaunchPlan {
    LaunchPlan {
        kind,
        exec,
        extra_args: kauri_launch::hydra_env::launcher_extra_args(&|k| std::env::var(k).ok()),
        agent_path: std::env::var_os("KAURI_AGENT_PATH").unwrap_or(self_os),
        connect_timeout_s: env_secs("KAURI_CONNECT_TIMEOUT", 60.0).as_secs().max(1),
        max_concurrent: std::env::var("KAURI_LAUNCH_CONCURRENCY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32),
        heartbeat_ms: env_secs("KAURI_HEARTBEAT", 5.0).as_millis() as u64,
        silence_ms: env_secs("KAURI_HEARTBEAT_TIMEOUT", 30.0).as_millis() as u64,
    }
}

/// The tree's width and whether launch cost shapes it, from `-tree-width` or (`tree_var`)
/// `KAURI_TREE_WIDTH`: `flat` is 0, `cost` the cost-model tree. A resource manager's
/// launcher gets a flat tree.
fn tree_shape(spec: &JobSpec, kind: LauncherKind, tree_var: Option<&str>) -> (usize, bool) {
    // The resource managers' launchers start every agent from here (as Hydra does): a flat
    // tree.
    let rm_launcher = kind.is_resource_manager();
    let width = if rm_launcher {
        0
    } else {
        spec.tree_width
            .or_else(|| tree_var.and_then(|v| if v == "flat" { Some(0) } else { v.parse().ok() }))
            .unwrap_or(DEFAULT_TREE_WIDTH)
    };
    let cost_tree = !rm_launcher
        && (spec.cost_tree
            || (spec.tree_width.is_none() && tree_var.is_some_and(|v| v.trim() == "cost")));
    (width, cost_tree)
}

/// One of kauri's times in seconds ([`kauri_core::plan::knobs::SECONDS_VARS`], checked when the command
/// line is read), or `default`.
pub fn env_secs(var: &str, default: f64) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| kauri_core::plan::knobs::parse_secs(&v))
        .unwrap_or(Duration::from_secs_f64(default))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{hosts_of, job, launcher, on_hosts, pmi, ppn, run};

    fn hosts(slots: &[usize]) -> Vec<HostSpec> {
        slots
            .iter()
            .enumerate()
            .map(|(i, &slots)| HostSpec {
                name: format!("h{i}"),
                slots,
            })
            .collect()
    }

    /// The topology file is made ahead for a job whose programs use an MPI served PMI-1 or
    /// PMI-2 (MPICH's ask for it), alone or beside PMIx (an interpreter's MPI module), not for
    /// a program that uses none, nor a PMIx-only job.
    #[test]
    fn the_topology_is_made_ahead_for_an_mpi_served_pmi() {
        let ahead = |s: JobSpec| {
            let p = plan(&s, "localhost").unwrap();
            (
                p.job.topology_ahead,
                p.mpi != kauri_core::plan::job::MpiSign::None,
            )
        };
        let (mpi4py, none) = (run(2, "sh -c mpi4py"), run(2, "sh -c true"));
        let (pmi1, pmi2, pmix) = (PmiChoice::Pmi1, PmiChoice::Pmi2, PmiChoice::Pmix);
        assert_eq!(ahead(pmi(pmi2, mpi4py.clone())), (true, true));
        assert_eq!(ahead(pmi(pmi1, mpi4py.clone())), (true, true));
        assert_eq!(ahead(mpi4py.clone()), (true, true), "served PMIx too");
        assert_eq!(ahead(pmi(pmix, mpi4py.clone())), (false, true));
        assert_eq!(ahead(none.clone()), (false, false));
        assert_eq!(ahead(pmi(pmi1, none)), (false, false));
        // simulated hosts: one is this machine as usual; several share it, and make the
        // file when a rank asks
        let fork = |list: &str| {
            let s = pmi(pmi1, launcher("fork", mpi4py.clone()));
            JobSpec {
                hosts: hosts_of(list),
                ..s
            }
        };
        assert_eq!(ahead(fork("a")), (true, true));
        assert_eq!(ahead(fork("a:2,b")), (true, true));
        assert_eq!(ahead(fork("a,b")), (false, true));
    }

    /// Each host of a plan with its ranks: the one the front end serves, then the agents'.
    type Layout = (Option<(String, Vec<usize>)>, Vec<(String, Vec<usize>)>);

    /// The layout of the plan of `s` on the machine named `vm`, and its hosts' slots.
    fn layout(s: JobSpec) -> (Layout, Vec<(String, usize)>) {
        let p = plan(&s, "vm").unwrap();
        let ranks = |h: &HostPlan| (h.host.clone(), h.ranks.iter().map(|r| r.rank).collect());
        let slots = p.hosts.iter().map(|h| (h.name.clone(), h.slots)).collect();
        (
            (
                p.local.as_ref().map(ranks),
                p.remote.iter().map(ranks).collect(),
            ),
            slots,
        )
    }

    /// The host `name` with `ranks`.
    fn on(name: &str, ranks: &[usize]) -> (String, Vec<usize>) {
        (name.to_string(), ranks.to_vec())
    }

    /// Every entry that is this machine, by a loopback name or address or by its own name, is
    /// the one host the front end serves, in the place of the first, with every entry's
    /// slots: none of them gets an agent (it used to get one, through an ssh to this machine).
    #[test]
    fn every_entry_that_is_this_machine_is_the_one_host_served_here() {
        let (l, slots) = layout(on_hosts("localhost,localhost", 2));
        assert_eq!(l, (Some(on("localhost", &[0, 1])), vec![]));
        assert_eq!(slots, vec![("localhost".to_string(), 2)]);
        let (l, _) = layout(on_hosts("vm,vm", 2));
        assert_eq!(l, (Some(on("vm", &[0, 1])), vec![]));
        let (l, slots) = layout(on_hosts("127.0.0.1:2,localhost:2,vm", 5));
        assert_eq!(l, (Some(on("127.0.0.1", &[0, 1, 2, 3, 4])), vec![]));
        assert_eq!(slots, vec![("127.0.0.1".to_string(), 5)]);
        // without -n: every entry's slots (the command line counts them)
        let (l, _) = layout(on_hosts("localhost:2,127.0.0.1:2", 4));
        assert_eq!(l, (Some(on("localhost", &[0, 1, 2, 3])), vec![]));
        // an address of one of this machine's interfaces
        let mine = kauri_os::iface::all_addresses()
            .into_iter()
            .find(|a| a.is_ipv4() && !a.is_loopback());
        if let Some(ip) = mine {
            let (l, _) = layout(on_hosts(&format!("localhost,{ip}"), 2));
            assert_eq!(l, (Some(on("localhost", &[0, 1])), vec![]), "{ip}");
        }
    }

    /// A remote host named twice is one host with both entries' slots (one agent), and ranks
    /// fill the entries' slots in list order as Hydra's do: `a,b,a` puts ranks 0 and 2 on a.
    #[test]
    fn a_remote_host_named_twice_is_one_host_filled_in_list_order() {
        let (a, b) = ("203.0.113.1", "203.0.113.2");
        let aba = format!("{a},{b},{a}");
        let (l, slots) = layout(on_hosts(&aba, 3));
        assert_eq!(l, (None, vec![on(a, &[0, 2]), on(b, &[1])]));
        assert_eq!(slots, vec![(a.to_string(), 2), (b.to_string(), 1)]);
        let (l, _) = layout(on_hosts(&aba, 4));
        assert_eq!(l, (None, vec![on(a, &[0, 2, 3]), on(b, &[1])]));
        let (l, slots) = layout(on_hosts(&format!("{a}:2,{a}:3"), 5));
        assert_eq!(l, (None, vec![on(a, &[0, 1, 2, 3, 4])]));
        assert_eq!(slots, vec![(a.to_string(), 5)]);
        // and this machine among them
        let (l, _) = layout(on_hosts(&format!("localhost,{a},127.0.0.1"), 3));
        assert_eq!(l, (Some(on("localhost", &[0, 2])), vec![on(a, &[1])]));
        let p = plan(&on_hosts(&aba, 3), "vm").unwrap();
        assert_eq!(p.job.hosts, vec![a.to_string(), b.to_string()]);
        assert_eq!(p.job.rank_node, vec![0, 1, 0]);
        assert_eq!(p.job.process_mapping, "(vector,(0,2,1),(0,1,1))");
    }

    /// Under `-launcher fork` a host name is a label: a label named twice is one simulated
    /// host, but two labels are two hosts even when both read as this machine's.
    #[test]
    fn simulated_hosts_are_told_apart_by_their_labels() {
        let fork = |list: &str, ranks: usize| launcher("fork", on_hosts(list, ranks));
        let (l, _) = layout(fork("a,b,a", 3));
        assert_eq!(l, (None, vec![on("a", &[0, 2]), on("b", &[1])]));
        let (l, _) = layout(fork("localhost,vm", 2));
        assert_eq!(l, (Some(on("localhost", &[0])), vec![on("vm", &[1])]));
        let (l, _) = layout(fork("a:2,b:2", 4));
        assert_eq!(l, (None, vec![on("a", &[0, 1]), on("b", &[2, 3])]));
    }

    /// `-ppn N` is `N` slots for each name a host was given, a name given twice counting
    /// once: Hydra's `N` for each of its nodes, whose list merges consecutive entries of one
    /// name. Without `-n`, the command line gives the job `N` ranks for each name.
    #[test]
    fn ppn_gives_each_name_of_a_host_its_slots_once() {
        let (l, slots) = layout(ppn(2, on_hosts("localhost,localhost", 2)));
        assert_eq!(l, (Some(on("localhost", &[0, 1])), vec![]));
        assert_eq!(slots, vec![("localhost".to_string(), 2)]);
        let (l, _) = layout(ppn(2, on_hosts("localhost,127.0.0.1", 4)));
        assert_eq!(l, (Some(on("localhost", &[0, 1, 2, 3])), vec![]));
        let (l, _) = layout(ppn(2, launcher("fork", on_hosts("a,b,a", 4))));
        assert_eq!(l, (None, vec![on("a", &[0, 1]), on("b", &[2, 3])]));
    }

    #[test]
    fn segments_without_n_take_the_slots_or_ppn_per_host_or_one() {
        assert_eq!(default_nprocs(None, &hosts(&[2, 3])), 5);
        assert_eq!(default_nprocs(None, &[]), 1);
        assert_eq!(default_nprocs(Some(4), &hosts(&[2, 3])), 8);
        assert_eq!(default_nprocs(Some(4), &[]), 4);
        assert_eq!(default_nprocs(None, &hosts(&[usize::MAX, 3])), usize::MAX);
    }

    #[test]
    fn too_many_ranks_or_an_output_from_rank_past_the_job_is_an_error() {
        let mut s = run(2, "a");
        assert!(check_size(&s, 2).is_ok());
        let e = check_size(&s, kauri_core::plan::job::RANKS_MAX + 1).unwrap_err();
        assert!(matches!(e, PlanError::TooManyRanks { .. }), "{e:?}");
        assert!(e
            .to_string()
            .contains("processes in all (the allocation's slots)"));
        s.output.output_from = Some(1);
        assert!(check_size(&s, 2).is_ok());
        let e = check_size(&s, 1).unwrap_err();
        assert!(matches!(e, PlanError::OutputFrom { rank: 1, size: 1 }));
        assert_eq!(e.to_string(), "-output-from 1: the job has 1 rank (0 to 0)");
        s.output.output_from = Some(3);
        assert_eq!(
            check_size(&s, 2).unwrap_err().to_string(),
            "-output-from 3: the job has 2 ranks (0 to 1)"
        );
    }

    /// The errors this module made as text print the same lines.
    #[test]
    fn each_plan_error_prints_its_line() {
        let io = || std::io::Error::from_raw_os_error(2);
        assert_eq!(
            PlanError::NoWorkingDir { why: io() }.to_string(),
            "the current directory cannot be read (No such file or directory (os error 2)): \
             was it deleted? cd to a directory that exists and start the job again"
        );
        assert_eq!(
            PlanError::MasterPort { why: io() }.to_string(),
            "cannot find a free port for MASTER_PORT: No such file or directory (os error 2)"
        );
        assert_eq!(
            PlanError::Allocation(kauri_launch::allocation::AllocationError::HostList {
                list: "n[1-".into()
            })
            .to_string(),
            "bad host list \"n[1-\""
        );
        assert_eq!(
            PlanError::TooManyRanks { size: 7 }.to_string(),
            kauri_core::plan::job::too_many_ranks("7 processes in all (the allocation's slots)")
        );
    }

    #[test]
    fn the_launcher_is_as_named_and_must_be_known() {
        let x = JobSpec {
            hosts: hosts_of("a"),
            ..run(1, "x")
        };
        let hosts = |s: JobSpec| choose_hosts(&s, "localhost").map(|(l, _)| l);
        let hosts_ok = |s: JobSpec| hosts(s).ok();
        assert_eq!(hosts_ok(x.clone()), Some(None));
        assert_eq!(
            hosts_ok(launcher("fork", x.clone())),
            Some(Some(LauncherKind::Fork))
        );
        assert!(matches!(
            hosts(launcher("telnet", x)),
            Err(PlanError::UnknownLauncher(u)) if u.name == "telnet"
        ));
    }

    #[test]
    fn placement_in_blocks_round_robin_or_by_host_under_ml_env() {
        let mut s = run(5, "a");
        let h = HostList::merge(&hosts(&[2, 3]), &|_| false, false);
        let (slots, p) = place(&s, 5, &h);
        assert_eq!(slots, vec![2, 3]);
        assert_eq!(p.node, vec![0, 0, 1, 1, 1]);
        s.ppn = Some(1);
        let (slots, p) = place(&s, 5, &h);
        assert_eq!(slots, vec![1, 1]);
        assert_eq!(p.node, vec![0, 1, 0, 1, 0]);
        s.ml_env = true;
        assert_eq!(place(&s, 5, &h).1.node, vec![0, 0, 0, 1, 1]);
        s.mapping_asked = true;
        assert_eq!(place(&s, 5, &h).1.node, vec![0, 1, 0, 1, 0]);
        s.ppn = None;
        s.map_by_node = true;
        assert_eq!(place(&s, 5, &h).1.node, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn each_segment_numbers_its_ranks() {
        let s = job(&[(2, "a"), (1, "b"), (3, "c")]);
        assert_eq!(appnums(&s), vec![0, 0, 1, 2, 2, 2]);
    }

    #[test]
    fn ranks_by_host_and_the_hosts_used() {
        let (on_host, used) = ranks_by_host(&[2, 0, 2, 0], 4);
        assert_eq!(on_host, vec![vec![1, 3], vec![], vec![0, 2], vec![]]);
        assert_eq!(used, vec![0, 2]);
    }

    #[test]
    fn the_master_is_loopback_when_here_or_simulated() {
        let h = hosts(&[1, 1]);
        let (ssh, fork) = (LauncherKind::Ssh, LauncherKind::Fork);
        assert_eq!(master_addr(1, &h, Some(0), ssh), "h1");
        assert_eq!(master_addr(0, &h, Some(0), ssh), "127.0.0.1");
        assert_eq!(master_addr(1, &h, None, fork), "127.0.0.1");
    }

    #[test]
    fn a_singletons_address() {
        assert_eq!(singleton_addr("default_interface", 5), "127.0.0.1:5");
        assert_eq!(singleton_addr("", 5), "127.0.0.1:5");
        assert_eq!(singleton_addr("::1", 5), "[::1]:5");
        assert_eq!(singleton_addr("[::1]", 5), "[::1]:5");
        assert_eq!(singleton_addr("node7", 5), "node7:5");
    }

    #[test]
    fn hosts_split_into_the_served_one_and_the_agents() {
        let h = hosts(&[1, 1, 1]);
        let (on_host, used) = ranks_by_host(&[2, 0, 2], 3);
        let (local, remote) = split_hosts(&h, on_host, &[0, 1, 1], &used, Some(2));
        let local = local.unwrap();
        assert_eq!((local.host.as_str(), local.node, local.index), ("h2", 2, 1));
        let ids: Vec<(usize, usize, usize)> = local
            .ranks
            .iter()
            .map(|r| (r.rank, r.app, r.local_id))
            .collect();
        assert_eq!(ids, vec![(0, 0, 0), (2, 1, 1)]);
        assert_eq!(remote.len(), 1);
        assert_eq!((remote[0].host.as_str(), remote[0].index), ("h0", 0));
        let (_, remote) = split_hosts(&h, ranks_by_host(&[1], 3).0, &[0], &[1], None);
        assert_eq!(remote[0].node, 1);
    }

    #[test]
    fn tree_width_from_the_option_the_variable_or_the_launcher() {
        let mut s = run(1, "a");
        let (ssh, slurm, pbs) = (LauncherKind::Ssh, LauncherKind::Slurm, LauncherKind::Pbs);
        assert_eq!(tree_shape(&s, ssh, None), (DEFAULT_TREE_WIDTH, false));
        assert_eq!(tree_shape(&s, ssh, Some("flat")), (0, false));
        assert_eq!(tree_shape(&s, ssh, Some("3")), (3, false));
        assert_eq!(
            tree_shape(&s, ssh, Some(" cost ")),
            (DEFAULT_TREE_WIDTH, true)
        );
        assert_eq!(tree_shape(&s, slurm, Some("cost")), (0, false));
        s.tree_width = Some(2);
        assert_eq!(tree_shape(&s, ssh, Some("cost")), (2, false));
        s.cost_tree = true;
        assert_eq!(tree_shape(&s, ssh, None), (2, true));
        assert_eq!(tree_shape(&s, pbs, None), (0, false));
    }
}
