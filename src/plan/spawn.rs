//! Spawn planning: the run's hosts and the slots its jobs use ([`Cluster`]), and where a spawned
//! job's ranks go ([`plan_spawn`]): round-robin over free slots, the hosts its info keys name,
//! `map-by slot`, `ppr N:n`.

use crate::plan::build::{add_flux_job_id, advertise, kvsname, segment_env, Plan};

use crate::host::node::is_local;
use crate::host::output::OutputPlan;
use crate::plan::job::{HostSpec, JobSpec};
use crate::plan::{AppPlan, HostPlan, JobPlan, LaunchPlan, RankPlan};
use crate::proto::kvs::Delta;
use crate::tree::LaunchCost;
use pmi_wire::SpawnCommand;
use std::net::IpAddr;
use std::path::PathBuf;
use tracing::debug;

pub use crate::tree::policy::STATUS_LAUNCHER;

/// What every job of the run shares: the hosts, how to reach them, and the slots in use.
pub(crate) struct Cluster {
    pub(crate) me: String,
    pub(crate) hosts: Vec<HostSpec>,
    pub(crate) served_here: Option<usize>,
    /// Ranks of running jobs on each host.
    pub(crate) in_use: Vec<usize>,
    /// Where the next spawned rank's search for a free slot starts.
    pub(crate) cursor: usize,
    pub(crate) launch: LaunchPlan,
    pub(crate) width: usize,
    /// The launch cost the cost-model tree is shaped by, when it was asked for.
    pub(crate) cost: Option<LaunchCost>,
    pub(crate) ip: IpAddr,
    /// The environment of spawned ranks (the launcher's, by the global policy, and `-genv`).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: PathBuf,
    pub(crate) universe_size: i64,
    /// The run's output options, and when it started (`%t`).
    pub(crate) output: OutputPlan,
    pub(crate) pmi_port: bool,
    pub(crate) kill_grace_ms: u64,
    pub(crate) jobs_started: usize,
    /// The most processes one spawn may start (`KAURI_SPAWN_MAX`).
    pub(crate) spawn_max: u64,
    /// The ports listeners keep to (`MPIEXEC_PORT_RANGE`).
    pub(crate) port_range: Option<crate::launch::ports::PortRange>,
    /// `-with-ft`: spawned jobs are fault tolerant too.
    pub(crate) fault_tolerant: bool,
}

/// The most processes one spawn may start unless `KAURI_SPAWN_MAX` says otherwise. A spawn
/// beyond the universe oversubscribes the run's hosts, as Hydra's does; this bound only
/// keeps a mistaken or hostile `nprocs` from planning millions of ranks.
pub const SPAWN_MAX: u64 = 65536;

/// `KAURI_SPAWN_MAX`, or [`SPAWN_MAX`].
pub(crate) fn spawn_max() -> u64 {
    std::env::var("KAURI_SPAWN_MAX")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(SPAWN_MAX)
}

impl Cluster {
    /// The run's hosts and how to reach them, from the plan of the job the user started;
    /// `cost`: the launch cost, when the tree is shaped by it.
    pub(crate) fn new(spec: &JobSpec, p: &Plan, me: &str, cost: Option<LaunchCost>) -> Cluster {
        let mut in_use = vec![0; p.hosts.len()];
        for hp in p.local.iter().chain(&p.remote) {
            in_use[hp.node] += hp.ranks.len();
        }
        // Spawned ranks' environment: the launcher's, by the global policy, and -genv.
        let global = JobSpec {
            apps: vec![crate::plan::job::AppSpec::default()],
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

/// The hosts an info key names, as indices into the cluster's hosts.
pub(crate) fn named_hosts(cluster: &Cluster, names: &[String]) -> Result<Vec<usize>, String> {
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
pub(crate) fn parse_ppr(v: &str) -> Result<u64, String> {
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
pub(crate) fn plan_spawn(
    cluster: &mut Cluster,
    spawner: &JobPlan,
    commands: &[SpawnCommand],
    preput: Delta,
    pmix: Option<&crate::proto::service::PmixSpawn>,
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
    let placement = crate::plan::job::Placement {
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
