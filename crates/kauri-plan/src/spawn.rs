//! Spawn planning: the run's hosts and the slots its jobs use ([`Cluster`]), and where a spawned
//! job's ranks go ([`plan_spawn`]): round-robin over free slots, the hosts its info keys name,
//! `map-by slot`, `ppr N:n`.

use crate::build::{add_flux_job_id, advertise, segment_env, shares_one_machine, Plan};

use kauri_core::plan::job::{HostSpec, JobSpec, UsageError};
use kauri_core::plan::output::OutputPlan;
use kauri_core::plan::{AppPlan, HostPlan, JobPlan, LaunchPlan, RankPlan};
use kauri_core::tree::shape::LaunchCost;
use kauri_os::hostname::is_local;
use kauri_proto::kvs::Delta;
use kauri_proto::pmix::jobid::JobNames;
use pmi_wire::SpawnCommand;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use tracing::debug;

pub use kauri_core::tree::policy::STATUS_LAUNCHER;

/// What every job of the run shares: the hosts, how to reach them, and the slots in use.
pub struct Cluster {
    /// This machine's name, as the front end knows it.
    pub me: String,
    /// Every host of the run, with its slots.
    pub hosts: Vec<HostSpec>,
    /// The index in `hosts` of the host the front end serves itself.
    pub served_here: Option<usize>,
    /// Ranks of running jobs on each host.
    pub in_use: Vec<usize>,
    /// Where the next spawned rank's search for a free slot starts.
    pub cursor: usize,
    /// How agents are started on the hosts.
    pub launch: LaunchPlan,
    /// The width of the agent tree; 0 is flat.
    pub width: usize,
    /// The launch cost the cost-model tree is shaped by, when it was asked for.
    pub cost: Option<LaunchCost>,
    /// The address agents connect back to ([`advertise`]).
    pub ip: IpAddr,
    /// The environment of spawned ranks (the launcher's, by the global policy, and `-genv`).
    pub env: Vec<(OsString, OsString)>,
    /// The directory kauri was started in: spawn's `wdir` and `path` are taken from it.
    pub cwd: PathBuf,
    /// The universe size reported to ranks; -1 when unknown.
    pub universe_size: i64,
    /// The run's output options, and when it started (`%t`).
    pub output: OutputPlan,
    /// Serve PMI over loopback TCP (`PMI_PORT`), as the first job does.
    pub pmi_port: bool,
    /// Grace between SIGTERM and SIGKILL at teardown, in milliseconds, as the first job's.
    pub kill_grace_ms: u64,
    /// The jobs spawned so far: a spawned job's output group (`pgid`) is its number among them.
    pub jobs_started: usize,
    /// The names of the jobs the run spawns: the first job's, `@N`.
    pub names: JobNames,
    /// The most processes one spawn may start (`KAURI_SPAWN_MAX`).
    pub spawn_max: u64,
    /// The ports listeners keep to (`MPIEXEC_PORT_RANGE`).
    pub port_range: Option<kauri_core::plan::port_range::PortRange>,
    /// `-with-ft`: spawned jobs are fault tolerant too.
    pub fault_tolerant: bool,
}

/// The most processes one spawn may start unless `KAURI_SPAWN_MAX` says otherwise. A spawn
/// beyond the universe oversubscribes the run's hosts, as Hydra's does; this bound only
/// keeps a mistaken or hostile `nprocs` from planning millions of ranks.
pub const SPAWN_MAX: u64 = 65536;

/// `KAURI_SPAWN_MAX`, or [`SPAWN_MAX`].
pub fn spawn_max() -> u64 {
    std::env::var("KAURI_SPAWN_MAX")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(SPAWN_MAX)
}

impl Cluster {
    /// The run's hosts and how to reach them, from the plan of the job the user started;
    /// `cost`: the launch cost, when the tree is shaped by it.
    pub fn new(spec: &JobSpec, p: &Plan, me: &str, cost: Option<LaunchCost>) -> Cluster {
        let mut in_use = vec![0; p.hosts.len()];
        for hp in p.local.iter().chain(&p.remote) {
            in_use[hp.node] += hp.ranks.len();
        }
        // Spawned ranks' environment: the launcher's, by the global policy, and -genv.
        let global = JobSpec {
            apps: vec![kauri_core::plan::job::AppSpec::default()],
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
                p.launch.kind.simulates_hosts(),
            ),
            env: segment_env(&global, 0),
            cwd: p.cwd.clone(),
            universe_size: p.job.universe_size,
            output: p.job.output.clone(),
            pmi_port: p.job.pmi_port,
            kill_grace_ms: p.job.kill_grace_ms,
            jobs_started: 0,
            names: JobNames::new(&p.job.kvsname),
            spawn_max: spawn_max(),
            port_range: p.job.port_range.clone(),
            fault_tolerant: p.job.fault_tolerant,
        }
    }
}

/// Why a spawn cannot be planned: each prints the reason the spawning rank is given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// A `host` (or `hostfile`) info key names a host the run does not have.
    #[error("spawn: host {name} is not one of this run's hosts ({})", .known.join(", "))]
    NotAHost {
        /// The name given.
        name: String,
        /// The run's hosts.
        known: Vec<String>,
    },
    /// A `host` (or `hostfile`) info key names no host at all.
    #[error("spawn: the host info key names no host")]
    NoHostNamed,
    /// The `hostfile` info key's file cannot be read.
    #[error("spawn: {}", .0.0)]
    Hostfile(UsageError),
    /// A `ppr` whose count is not a positive number.
    #[error("spawn: ppr {ppr}: not a count of processes")]
    PprCount {
        /// The directive.
        ppr: String,
    },
    /// A `ppr` per something other than a node.
    #[error("spawn: ppr {ppr}: only per node is supported, not per {per}")]
    PprPer {
        /// The directive.
        ppr: String,
        /// What it counts per.
        per: String,
    },
    /// A `map-by` other than node or slot.
    #[error("spawn: map-by {how} is not supported (node or slot)")]
    MapBy {
        /// The mapping asked for.
        how: String,
    },
    /// A spawn of no process.
    #[error("spawn of 0 processes")]
    NoProcesses,
    /// A spawn of more processes than one spawn may start.
    #[error(
        "spawn of {total} processes: more than the {max} one spawn may start (KAURI_SPAWN_MAX)"
    )]
    TooMany {
        /// The processes asked for.
        total: u64,
        /// The most one spawn may start.
        max: u64,
    },
    /// `ppr` asks for more hosts than the command may use.
    #[error(
        "spawn of {nprocs} processes at {ppn} per host needs more hosts than the {hosts} it may use"
    )]
    PprRoom {
        /// The command's processes.
        nprocs: u32,
        /// Its processes per host.
        ppn: u64,
        /// The distinct hosts it may use.
        hosts: usize,
    },
    /// No candidate host has room left for `ppr`.
    #[error("spawn: no host has room left")]
    NoRoomLeft,
    /// The run has no job number left for another job.
    #[error(transparent)]
    JobNumbers(#[from] kauri_proto::pmix::jobid::JobNumbersUsed),
}

/// The hosts an info key names, as indices into the cluster's hosts.
pub fn named_hosts(cluster: &Cluster, names: &[String]) -> Result<Vec<usize>, SpawnError> {
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        // host:slots is accepted; the slots part is ignored (the job's slots hold).
        let name = name.split(':').next().unwrap_or(name);
        let found = cluster
            .hosts
            .iter()
            .position(|h| h.name == name)
            .or_else(|| {
                // This machine by another of its names: the host it is in the run.
                is_local(name, &cluster.me)
                    .then(|| {
                        cluster.served_here.or_else(|| {
                            cluster
                                .hosts
                                .iter()
                                .position(|h| is_local(&h.name, &cluster.me))
                        })
                    })
                    .flatten()
            });
        match found {
            Some(n) => out.push(n),
            None => {
                let known = cluster.hosts.iter().map(|h| h.name.clone()).collect();
                return Err(SpawnError::NotAHost {
                    name: name.to_string(),
                    known,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(SpawnError::NoHostNamed);
    }
    Ok(out)
}

/// Reads a spawn's `ppr` directive, `N:n` or `N:node` (Open MPI's `npernode` and `pernode`
/// arrive so): N processes per host.
pub fn parse_ppr(v: &str) -> Result<u64, SpawnError> {
    let (n, obj) = v.split_once(':').unwrap_or((v, "node"));
    let n: u64 = n
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| SpawnError::PprCount { ppr: v.to_string() })?;
    match obj.trim() {
        "n" | "node" => Ok(n),
        other => Err(SpawnError::PprPer {
            ppr: v.to_string(),
            per: other.to_string(),
        }),
    }
}

/// Plans a spawned job: its ranks go round-robin over the free slots of the run's hosts (or
/// of the hosts its info keys name), oversubscribing in turn when every slot is taken. A
/// command's `map-by slot` fills each host's free slots before the next; its `ppr N:n`
/// places N of its processes on each host in order (an error when the hosts are too few).
pub fn plan_spawn(
    cluster: &mut Cluster,
    spawner: &JobPlan,
    commands: &[SpawnCommand],
    preput: Delta,
    pmix: Option<&kauri_proto::service::PmixSpawn>,
) -> Result<(JobPlan, Option<HostPlan>, Vec<HostPlan>), SpawnError> {
    let size = spawn_size(commands, cluster.spawn_max)?;
    let mut node_of: Vec<usize> = Vec::with_capacity(size);
    let mut appnum = Vec::with_capacity(size);
    let mut apps = Vec::with_capacity(commands.len());
    for (i, c) in commands.iter().enumerate() {
        let mut how = command_options(cluster, c)?;
        // A PMIx client's variables for the command (Open MPI's OMPI_PARENT_PORT, …).
        for (k, v) in pmix.and_then(|p| p.env.get(i)).into_iter().flatten() {
            how.env.retain(|(n, _)| n != k.as_str());
            how.env.push((k.into(), v.into()));
        }
        if let Some(ppn) = how.per_node {
            check_ppr_room(c.nprocs, ppn, &how.candidates)?;
        }
        for n in place_command(cluster, c.nprocs, &how)? {
            node_of.push(n);
            appnum.push(i as u32);
        }
        apps.push(AppPlan {
            // Text from the wire, as a spawning rank wrote it.
            program: c.execname.clone().into(),
            args: c.args.iter().map(OsString::from).collect(),
            env: how.env,
            wdir: how.wdir.into_os_string(),
        });
    }
    let (used, placement) = dense_placement(&node_of);
    let (name, _) = cluster.names.next_job()?;
    cluster.jobs_started += 1;
    add_flux_job_id(&mut apps, &name);
    let (local, remote) = spawned_hosts(cluster, &used, &node_of, &appnum);
    let spawned = Spawned {
        name,
        appnum,
        placement,
        apps,
        used,
        preput,
    };
    let plan = spawned_job(cluster, spawner, spawned, pmix);
    Ok((plan, local, remote))
}

/// The size of a spawned job: its commands' processes, at least one and at most
/// `spawn_max`.
pub fn spawn_size(commands: &[SpawnCommand], spawn_max: u64) -> Result<usize, SpawnError> {
    let total: u64 = commands.iter().map(|c| u64::from(c.nprocs)).sum();
    if total == 0 {
        return Err(SpawnError::NoProcesses);
    }
    if total > spawn_max {
        return Err(SpawnError::TooMany {
            total,
            max: spawn_max,
        });
    }
    Ok(total as usize)
}

/// What one spawn command's info keys ask for: where its processes may go and how, and
/// its segment's environment and working directory.
pub struct CommandOptions {
    /// The hosts (indices into the cluster's) its processes may go to, in order.
    pub candidates: Vec<usize>,
    /// Its segment's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory.
    pub wdir: PathBuf,
    /// `ppr N:n`: N processes per host.
    pub per_node: Option<u64>,
    /// `map-by slot`: fill each host's free slots before the next.
    pub by_slot: bool,
}

/// Reads one spawn command's info keys (a `hostfile` key reads the file it names).
pub fn command_options(cluster: &Cluster, c: &SpawnCommand) -> Result<CommandOptions, SpawnError> {
    let mut how = CommandOptions {
        candidates: (0..cluster.hosts.len()).collect(),
        env: cluster.env.clone(),
        wdir: cluster.cwd.clone(),
        per_node: None,
        by_slot: false,
    };
    for (k, v) in &c.info {
        match k.as_str() {
            // Open MPI's npernode/pernode/ppr (PMIX_PPR: "N:n" or "N:node").
            "ppr" => how.per_node = Some(parse_ppr(v)?),
            "map-by" | "map_by" => how.by_slot = parse_map_by(v)?,
            "host" | "hosts" => {
                let names: Vec<String> = v.split(',').map(str::to_string).collect();
                how.candidates = named_hosts(cluster, &names)?;
            }
            "hostfile" => {
                let path = cluster.cwd.join(v);
                let listed = crate::hosts::read_hostfile(&path).map_err(SpawnError::Hostfile)?;
                let names: Vec<String> = listed.into_iter().map(|h| h.name).collect();
                how.candidates = named_hosts(cluster, &names)?;
            }
            "wdir" => how.wdir = cluster.cwd.join(v),
            "path" => prepend_path(&mut how.env, v),
            other => debug!(key = other, value = %v, "spawn: info key ignored"),
        }
    }
    Ok(how)
}

/// Reads a spawn's `map-by`: whether it fills each host's slots before the next.
pub fn parse_map_by(v: &str) -> Result<bool, SpawnError> {
    // Open MPI's map_by (PMIX_MAPBY): node (the default here), or slot and its
    // spellings (fill each host's slots before the next host).
    match v.split(':').next().unwrap_or("") {
        "node" => Ok(false),
        "slot" | "core" | "hwthread" | "socket" | "package" | "numa" => Ok(true),
        other => Err(SpawnError::MapBy {
            how: other.to_string(),
        }),
    }
}

/// Puts `dir` (a spawn's `path` key) in front of `PATH` in `env`, which then ends with it.
pub fn prepend_path(env: &mut Vec<(OsString, OsString)>, dir: &str) {
    let old = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    env.retain(|(k, _)| k != "PATH");
    let mut new = OsString::from(dir);
    if !old.is_empty() {
        new.push(":");
        new.push(old);
    }
    env.push(("PATH".into(), new));
}

/// Whether `nprocs` processes at `ppn` per host fit on `candidates` (a host named twice is
/// one host).
pub fn check_ppr_room(nprocs: u32, ppn: u64, candidates: &[usize]) -> Result<(), SpawnError> {
    let mut distinct = candidates.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let room = ppn.saturating_mul(distinct.len() as u64);
    if u64::from(nprocs) > room {
        return Err(SpawnError::PprRoom {
            nprocs,
            ppn,
            hosts: distinct.len(),
        });
    }
    Ok(())
}

/// The host of each of one command's `nprocs` processes, taking their slots in the
/// cluster (and moving its cursor past each): with `ppr`, up to N per host in host order;
/// else the next free slot from the cursor (from the first host for `map-by slot`), or the
/// host at the cursor when every slot is taken.
pub fn place_command(
    cluster: &mut Cluster,
    nprocs: u32,
    how: &CommandOptions,
) -> Result<Vec<usize>, SpawnError> {
    let candidates = &how.candidates;
    // This command's processes on each host so far (for ppr).
    let mut mine = vec![0u64; cluster.hosts.len()];
    let mut placed = Vec::with_capacity(nprocs as usize);
    for _ in 0..nprocs {
        let n = if let Some(ppn) = how.per_node {
            // In host order, each up to ppn processes of this command (there is room:
            // checked above).
            match candidates.iter().find(|&&n| mine[n] < ppn) {
                Some(&n) => n,
                None => return Err(SpawnError::NoRoomLeft),
            }
        } else {
            let start = if how.by_slot { 0 } else { cluster.cursor };
            let free = (0..candidates.len())
                .map(|k| candidates[(start + k) % candidates.len()])
                .find(|&n| cluster.in_use[n] < cluster.hosts[n].slots);
            free.unwrap_or(candidates[cluster.cursor % candidates.len()])
        };
        mine[n] += 1;
        cluster.in_use[n] += 1;
        cluster.cursor = candidates.iter().position(|&h| h == n).map_or(0, |p| p + 1);
        placed.push(n);
    }
    Ok(placed)
}

/// The hosts a spawned job uses (indices into the cluster's, sorted) and its placement
/// over them: node ids are the job's own, dense from 0 (MPICH sizes its node tables by
/// them).
pub fn dense_placement(node_of: &[usize]) -> (Vec<usize>, kauri_core::plan::job::Placement) {
    let mut used: Vec<usize> = node_of.to_vec();
    used.sort_unstable();
    used.dedup();
    let placement = kauri_core::plan::job::Placement {
        node: node_of
            .iter()
            .map(|n| used.binary_search(n).unwrap_or(0))
            .collect(),
        nodes: used.len(),
    };
    (used, placement)
}

/// What [`spawned_job`] is made of: the spawned job's name, ranks and segments.
pub struct Spawned {
    /// Its kvsname.
    pub name: String,
    /// `appnum[r]` for every rank.
    pub appnum: Vec<u32>,
    /// Its placement over its own hosts.
    pub placement: kauri_core::plan::job::Placement,
    /// Its segments.
    pub apps: Vec<AppPlan>,
    /// Its hosts, as indices into the cluster's.
    pub used: Vec<usize>,
    /// The spawn's preput keys.
    pub preput: Delta,
}

/// The [`JobPlan`] of a spawned job: the run's settings, the spawner's interface, and
/// PMIx when a PMIx client spawned it.
pub fn spawned_job(
    cluster: &Cluster,
    spawner: &JobPlan,
    s: Spawned,
    pmix: Option<&kauri_proto::service::PmixSpawn>,
) -> JobPlan {
    let simulated = cluster.launch.kind.simulates_hosts();
    JobPlan {
        kvsname: s.name,
        size: s.appnum.len(),
        universe_size: cluster.universe_size,
        process_mapping: s.placement.process_mapping(),
        appnum: s.appnum,
        apps: s.apps,
        output: OutputPlan {
            pgid: cluster.jobs_started as u32,
            ..cluster.output.clone()
        },
        pmi_port: cluster.pmi_port,
        kill_grace_ms: cluster.kill_grace_ms,
        hosts: s
            .used
            .iter()
            .map(|&n| cluster.hosts[n].name.clone())
            .collect(),
        master: None,
        spawner: Some(spawner.kvsname.clone()),
        parent_rank: pmix.map(|p| p.parent),
        preput: s.preput,
        adopt: None,
        simulated_hosts: simulated,
        rank_node: s.placement.node.iter().map(|&n| n as u32).collect(),
        // Spawned by a PMI client: PMI; by a PMIx client: PMIx.
        pmix: pmix.is_some(),
        pmi_too: false,
        pmix_now: pmix.is_some(),
        // The server of this run is already started, with its library.
        pmix_library: None,
        profile: false,
        progress: false,
        binding: None,
        report_bindings: false,
        gpus: None,
        restart: None,
        iface: spawner.iface.clone(),
        port_range: cluster.port_range.clone(),
        fault_tolerant: cluster.fault_tolerant,
        // a PMI client's children run the same MPI (the file is made once per host anyway),
        // unless they go to several simulated hosts
        topology_ahead: pmix.is_none()
            && spawner.topology_ahead
            && !shares_one_machine(simulated, s.used.len()),
    }
}

/// A spawned job's hosts: the one the front end serves (when it has ranks there) and the
/// others, each with its ranks in rank order.
pub fn spawned_hosts(
    cluster: &Cluster,
    used: &[usize],
    node_of: &[usize],
    appnum: &[u32],
) -> (Option<HostPlan>, Vec<HostPlan>) {
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
    (local, remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(slots: &[usize]) -> Cluster {
        Cluster {
            me: "h0".into(),
            hosts: slots
                .iter()
                .enumerate()
                .map(|(i, &slots)| HostSpec {
                    name: format!("h{i}"),
                    slots,
                })
                .collect(),
            served_here: Some(0),
            in_use: vec![0; slots.len()],
            cursor: 0,
            launch: LaunchPlan {
                kind: kauri_launch::kind::LauncherKind::Fork,
                exec: "kauri".into(),
                extra_args: vec![],
                agent_path: "kauri".into(),
                connect_timeout_s: 1,
                max_concurrent: 1,
                heartbeat_ms: 1,
                silence_ms: 0,
            },
            width: 8,
            cost: None,
            ip: IpAddr::from([127, 0, 0, 1]),
            env: vec![("PATH".into(), "/bin".into()), ("X".into(), "1".into())],
            cwd: PathBuf::from("/tmp"),
            universe_size: -1,
            output: OutputPlan::default(),
            pmi_port: false,
            kill_grace_ms: 0,
            jobs_started: 0,
            names: JobNames::new("kauri_1_0_h0"),
            spawn_max: 10,
            port_range: None,
            fault_tolerant: false,
        }
    }

    fn command(nprocs: u32, info: &[(&str, &str)]) -> SpawnCommand {
        SpawnCommand {
            execname: "app".into(),
            nprocs,
            info: info
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// Open MPI turns a namespace into a job id, and two jobs of one id are one job to it
    /// (`proto::pmix::jobid`). Names made afresh for each spawn shared an Open MPI 5 id once
    /// in a few hundred jobs, and a run of mpi4py's spawn tests hung or crashed.
    #[test]
    fn every_spawned_job_has_its_own_open_mpi_job_id() {
        use kauri_proto::pmix::jobid::{ompi4_job_id, ompi5_job_id};
        let mut c = cluster(&[4, 4]);
        c.names = JobNames::new("kauri_31_5e2a_h0");
        let first = JobPlan {
            kvsname: "kauri_31_5e2a_h0".into(),
            ..Default::default()
        };
        let mut five = std::collections::HashSet::from([ompi5_job_id(&first.kvsname)]);
        let mut four = std::collections::HashSet::from([ompi4_job_id(&first.kvsname)]);
        for _ in 0..3000 {
            let (job, _, _) = plan_spawn(&mut c, &first, &[command(1, &[])], vec![], None).unwrap();
            assert!(five.insert(ompi5_job_id(&job.kvsname)), "{}", job.kvsname);
            assert!(four.insert(ompi4_job_id(&job.kvsname)), "{}", job.kvsname);
        }
    }

    #[test]
    fn a_spawn_starts_one_to_spawn_max_processes() {
        assert_eq!(spawn_size(&[command(3, &[]), command(4, &[])], 10), Ok(7));
        assert_eq!(
            spawn_size(&[command(0, &[])], 10),
            Err(SpawnError::NoProcesses)
        );
        assert_eq!(
            spawn_size(&[command(6, &[]), command(5, &[])], 10),
            Err(SpawnError::TooMany { total: 11, max: 10 })
        );
    }

    #[test]
    fn map_by_node_or_slot_and_its_spellings() {
        assert_eq!(parse_map_by("node"), Ok(false));
        assert_eq!(parse_map_by("slot:oversubscribe"), Ok(true));
        assert_eq!(parse_map_by("core"), Ok(true));
        assert_eq!(
            parse_map_by("board"),
            Err(SpawnError::MapBy {
                how: "board".into()
            })
        );
    }

    #[test]
    fn a_path_key_goes_in_front_of_path_and_path_moves_last() {
        let mut env = vec![("PATH".into(), "/bin".into()), ("X".into(), "1".into())];
        prepend_path(&mut env, "/opt/bin");
        assert_eq!(env[0], ("X".into(), "1".into()));
        assert_eq!(env[1], ("PATH".into(), "/opt/bin:/bin".into()));
        let mut none = vec![];
        prepend_path(&mut none, "/opt/bin");
        assert_eq!(none, vec![("PATH".into(), "/opt/bin".into())]);
    }

    #[test]
    fn ppr_room_counts_a_host_named_twice_once() {
        assert!(check_ppr_room(4, 2, &[0, 1]).is_ok());
        assert_eq!(
            check_ppr_room(4, 2, &[0, 0]),
            Err(SpawnError::PprRoom {
                nprocs: 4,
                ppn: 2,
                hosts: 1
            })
        );
    }

    #[test]
    fn spawned_node_ids_are_dense_in_host_order() {
        let (used, p) = dense_placement(&[3, 1, 3, 5]);
        assert_eq!(used, vec![1, 3, 5]);
        assert_eq!(p.node, vec![1, 0, 1, 2]);
        assert_eq!(p.nodes, 3);
    }

    #[test]
    fn info_keys_choose_hosts_wdir_path_and_mapping() {
        let c = cluster(&[1, 1, 1]);
        let how = command_options(
            &c,
            &command(
                2,
                &[
                    ("host", "h2,h1"),
                    ("wdir", "sub"),
                    ("path", "/p"),
                    ("map_by", "slot"),
                    ("ppr", "1:n"),
                ],
            ),
        )
        .unwrap();
        assert_eq!(how.candidates, vec![2, 1]);
        assert_eq!(how.wdir, PathBuf::from("/tmp/sub"));
        assert_eq!(how.env.last(), Some(&("PATH".into(), "/p:/bin".into())));
        assert!(how.by_slot);
        assert_eq!(how.per_node, Some(1));
        assert!(command_options(&c, &command(1, &[("host", "elsewhere")])).is_err());
    }

    #[test]
    fn placement_round_robins_free_slots_then_oversubscribes() {
        let mut c = cluster(&[2, 1]);
        let how = command_options(&c, &command(0, &[])).unwrap();
        // Every slot taken, the 4th goes to the host at the cursor.
        assert_eq!(place_command(&mut c, 4, &how), Ok(vec![0, 1, 0, 1]));
        assert_eq!(c.in_use, vec![2, 2]);
        assert_eq!(c.cursor, 2);
        let mut c = cluster(&[2, 1]);
        c.cursor = 1;
        // map-by slot fills from the first host, whatever the cursor.
        let slot = command_options(&c, &command(0, &[("map-by", "slot")])).unwrap();
        assert_eq!(place_command(&mut c, 3, &slot), Ok(vec![0, 0, 1]));
        let mut c = cluster(&[2, 1]);
        c.cursor = 1;
        assert_eq!(place_command(&mut c, 3, &how), Ok(vec![1, 0, 0]));
        // ppr: up to N per host in host order.
        let mut c = cluster(&[8, 8]);
        let ppr = command_options(&c, &command(0, &[("ppr", "2:n")])).unwrap();
        assert_eq!(place_command(&mut c, 4, &ppr), Ok(vec![0, 0, 1, 1]));
        assert!(place_command(&mut c, 5, &ppr).is_err());
    }

    #[test]
    fn spawned_hosts_split_here_and_elsewhere_with_local_ids() {
        let c = cluster(&[1, 1, 1]);
        let (local, remote) = spawned_hosts(&c, &[0, 2], &[2, 0, 2], &[0, 1, 1]);
        let local = local.unwrap();
        assert_eq!((local.host.as_str(), local.node), ("h0", 0));
        assert_eq!(
            local.ranks,
            vec![RankPlan {
                rank: 1,
                app: 1,
                local_id: 0
            }]
        );
        assert_eq!(remote.len(), 1);
        assert_eq!((remote[0].host.as_str(), remote[0].index), ("h2", 1));
        let ranks: Vec<(usize, usize)> = remote[0]
            .ranks
            .iter()
            .map(|r| (r.rank, r.local_id))
            .collect();
        assert_eq!(ranks, vec![(0, 0), (2, 1)]);
    }

    #[test]
    fn a_spawn_onto_several_simulated_hosts_makes_the_topology_when_asked() {
        use crate::testing::{hosts_of, launcher, pmi, run};
        let spec = JobSpec {
            hosts: hosts_of("a"),
            ..pmi(
                kauri_core::plan::job::PmiChoice::Pmi1,
                launcher("fork", run(2, "sh -c mpi4py")),
            )
        };
        let spawner = crate::build::plan(&spec, "localhost").unwrap().job;
        assert!(spawner.topology_ahead, "one simulated host makes it ahead");
        let ahead = |node_of: &[usize], pmix: Option<&kauri_proto::service::PmixSpawn>| {
            let (used, placement) = dense_placement(node_of);
            let s = Spawned {
                name: "s".into(),
                appnum: vec![0; node_of.len()],
                placement,
                apps: vec![],
                used,
                preput: Delta::default(),
            };
            spawned_job(&cluster(&[1, 1, 1]), &spawner, s, pmix).topology_ahead
        };
        assert!(ahead(&[1, 1], None), "one host, as its spawner");
        assert!(
            !ahead(&[0, 2], None),
            "two simulated hosts share this machine"
        );
        let pmix = kauri_proto::service::PmixSpawn {
            env: vec![],
            parent: 0,
        };
        assert!(!ahead(&[1], Some(&pmix)), "a PMIx client's children");
    }

    #[test]
    fn ppr_is_a_count_per_node() {
        assert_eq!(parse_ppr("2:n"), Ok(2));
        assert_eq!(parse_ppr("1:node"), Ok(1));
        assert_eq!(parse_ppr("3"), Ok(3));
        assert!(matches!(parse_ppr("0:n"), Err(SpawnError::PprCount { .. })));
        assert!(matches!(parse_ppr("x:n"), Err(SpawnError::PprCount { .. })));
        assert!(matches!(
            parse_ppr("2:socket"),
            Err(SpawnError::PprPer { per, .. }) if per == "socket"
        ));
    }

    /// Each spawn error prints the reason the rank was given when it was text.
    #[test]
    fn each_spawn_error_prints_its_line() {
        let cases = [
            (
                SpawnError::NotAHost {
                    name: "z".into(),
                    known: vec!["a".into(), "b".into()],
                },
                "spawn: host z is not one of this run's hosts (a, b)",
            ),
            (
                SpawnError::NoHostNamed,
                "spawn: the host info key names no host",
            ),
            (
                SpawnError::Hostfile(UsageError("hostfile h: gone".into())),
                "spawn: hostfile h: gone",
            ),
            (
                SpawnError::PprCount { ppr: "x:n".into() },
                "spawn: ppr x:n: not a count of processes",
            ),
            (
                SpawnError::PprPer {
                    ppr: "2:socket".into(),
                    per: "socket".into(),
                },
                "spawn: ppr 2:socket: only per node is supported, not per socket",
            ),
            (
                SpawnError::MapBy {
                    how: "board".into(),
                },
                "spawn: map-by board is not supported (node or slot)",
            ),
            (SpawnError::NoProcesses, "spawn of 0 processes"),
            (
                SpawnError::TooMany { total: 11, max: 10 },
                "spawn of 11 processes: more than the 10 one spawn may start (KAURI_SPAWN_MAX)",
            ),
            (
                SpawnError::PprRoom {
                    nprocs: 4,
                    ppn: 2,
                    hosts: 1,
                },
                "spawn of 4 processes at 2 per host needs more hosts than the 1 it may use",
            ),
            (SpawnError::NoRoomLeft, "spawn: no host has room left"),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
        assert_eq!(
            SpawnError::from(kauri_proto::pmix::jobid::JobNumbersUsed).to_string(),
            kauri_proto::pmix::jobid::JobNumbersUsed.to_string()
        );
    }
}
