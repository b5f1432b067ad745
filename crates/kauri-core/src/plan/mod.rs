//! The job plan: what the front end decides about a job and sends down the tree, so that every
//! agent knows its part of it: the job as every host sees it ([`JobPlan`], its segments
//! [`AppPlan`], a running program to adopt [`Adopt`]), one host's ranks ([`HostPlan`],
//! [`RankPlan`]), the subtrees an agent must start ([`Subtree`]) and how to start them
//! ([`LaunchPlan`]).
//!
//! Plain data with serde derives and a few queries: no I/O, no sockets, no processes. The
//! front end builds these (`build` in the `kauri-plan` crate, the shape in `tree::shape`);
//! the link messages in `tree::msg` carry them; `node`, `launch` and `pmix` read them.

pub mod binding;
pub mod gpus;
pub mod job;
pub mod knobs;
pub mod output;
pub mod port_range;
pub mod rank_env;

use crate::proto::kvs::Delta;
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};

/// One MPMD segment as an agent needs it: what to run and in which environment.
///
/// Its strings are the bytes the OS gave kauri (a Latin-1 file name, an argument or a
/// variable that is not UTF-8): serde carries an `OsString` byte for byte over the tree's
/// links, where a `String` or a `PathBuf` could not hold them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppPlan {
    /// The program as the user typed it (resolved on the host that runs it).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The whole environment of its ranks, before the PMI variables.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub wdir: OsString,
}

impl AppPlan {
    /// Whether the segment is set up for Open MPI's PMI-1 path, its `flux` component
    /// (`FLUX_PMI_LIBRARY_PATH` in its environment, naming a PMI-1 library to dlopen).
    pub fn uses_open_mpi_flux(&self) -> bool {
        self.var("FLUX_PMI_LIBRARY_PATH").is_some()
    }

    /// The value of variable `name` in the segment's environment.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// Whether the segment's environment sets `name`.
    pub fn sets(&self, name: &str) -> bool {
        self.var(name).is_some()
    }

    /// The program as text for a message: its bytes that are not UTF-8 shown as `�`.
    pub fn program_text(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}

/// One rank as its host's agent needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPlan {
    /// Global rank.
    pub rank: usize,
    /// Index of its MPMD segment.
    pub app: usize,
    /// Its index among the ranks of its host.
    pub local_id: usize,
}

/// What every host needs to know about the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    /// The KVS name (PMI-2 job id).
    pub kvsname: String,
    /// The job's size.
    pub size: usize,
    /// The universe size.
    pub universe_size: i64,
    /// `appnum[r]` for every rank.
    pub appnum: Vec<u32>,
    /// `PMI_process_mapping`.
    pub process_mapping: String,
    /// The segments.
    pub apps: Vec<AppPlan>,
    /// How the ranks' output lines are labelled, kept and routed to files.
    pub output: crate::plan::output::OutputPlan,
    /// Serve PMI over loopback TCP instead of `PMI_FD`.
    pub pmi_port: bool,
    /// Grace between SIGTERM and SIGKILL at teardown, in milliseconds.
    pub kill_grace_ms: u64,
    /// The hosts that run ranks, in node order (`KAURI_HOSTS`).
    pub hosts: Vec<String>,
    /// `MASTER_ADDR` and `MASTER_PORT` when the ML-style variables were asked for.
    pub master: Option<(String, u16)>,
    /// The kvsname of the job that spawned this one (`None` for the job the user started).
    pub spawner: Option<String>,
    /// The rank of the spawner that asked for this job, where known (a PMIx spawn:
    /// `PMIX_PARENT_ID`).
    #[serde(default)]
    pub parent_rank: Option<u32>,
    /// Pairs in the job's KVS before any rank starts (a spawn's preput keys).
    pub preput: Delta,
    /// A running program to serve as rank 0 instead of starting one (a singleton).
    pub adopt: Option<Adopt>,
    /// Every host is simulated on this machine (`-launcher fork`): host names are labels,
    /// not names to resolve.
    pub simulated_hosts: bool,
    /// `rank_node[r]`: the index in `hosts` of rank `r`'s host.
    pub rank_node: Vec<u32>,
    /// Serve the ranks PMIx (a PMIx server in every agent) instead of PMI-1/PMI-2.
    pub pmix: bool,
    /// With `pmix`: serve PMI-1/PMI-2 too, side by side (`--pmi=auto` for a program that is
    /// not linked to an MPI itself but runs one: an interpreter's MPI module, a wrapped
    /// program). Each rank speaks whichever its MPI library speaks.
    pub pmi_too: bool,
    /// With `pmix`: the job's programs are known to speak PMIx (they load Open MPI or
    /// `libpmix`, or a PMIx client spawned them): each host starts its PMIx server as soon as
    /// its ranks are forked, not when the first client knocks ([`crate::proto::pmix::door`]).
    pub pmix_now: bool,
    /// With `pmix`: the OpenPMIx library file the servers load instead of the system's (the
    /// one the ranks' programs load, or `KAURI_PMIX_LIBRARY`); see [`crate::proto::pmix::library`].
    #[serde(default)]
    pub pmix_library: Option<String>,
    /// Record the startup profile and send it up before `Done`.
    pub profile: bool,
    /// Report each step of the start up the tree as it happens, for the front end's progress
    /// lines (`-v`; `tree::progress`).
    #[serde(default)]
    pub progress: bool,
    /// Bind each rank to CPUs of its host (`-bind-to`).
    #[serde(default)]
    pub binding: Option<crate::plan::binding::Binding>,
    /// Print each rank's CPUs as it starts (`-report-bindings`).
    #[serde(default)]
    pub report_bindings: bool,
    /// Give each rank GPUs of its host (`-gpus-per-proc`, `-gpu-bind`).
    #[serde(default)]
    pub gpus: Option<crate::plan::gpus::GpuAsk>,
    /// The job restarts when it fails (`-max-restarts`): this attempt's restart count, the
    /// most allowed and the run's id, as the ranks are told.
    #[serde(default)]
    pub restart: Option<Restart>,
    /// The network interface to use (`-iface`): agents with children advertise their address
    /// of it, and the ranks' MPI is told its name.
    #[serde(default)]
    pub iface: Option<String>,
    /// The ports the agent and PMI listeners keep to (`MPIEXEC_PORT_RANGE`); `None`: any.
    pub port_range: Option<crate::plan::port_range::PortRange>,
    /// Fault-tolerant MPI (`-with-ft`): PMIx fences go on without lost hosts
    /// ([`crate::tree::branch::Branch::tolerate_failures`]).
    #[serde(default)]
    pub fault_tolerant: bool,
    /// Make each host's topology file (`PMI_hwloc_xmlfile`, [`crate::host::topology`]) in
    /// a thread of its own once the host's ranks are forked, while they load, instead of
    /// when the first asks: the job's programs use an MPI that may be MPICH's (an MPI was
    /// found and the job is served PMI-1/PMI-2 only: no PMIx server, whose library may bring
    /// an hwloc of its own, runs beside), whose `MPI_Init` asks for it. Not when several
    /// simulated hosts (`-launcher fork`) share this machine: their agents make it when asked.
    #[serde(default)]
    pub topology_ahead: bool,
}

/// Which attempt of a job that restarts this is, as its ranks are told
/// (`KAURI_RESTART_COUNT`, torchrun's `TORCHELASTIC_*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// Restarts before this attempt.
    pub count: u32,
    /// Restarts allowed.
    pub max: u32,
    /// The run's id, the same in every attempt.
    pub run_id: String,
}

impl JobPlan {
    /// Whether the ranks get a PMI-1/PMI-2 connection (`PMI_FD` or `PMI_PORT`).
    pub fn serves_pmi(&self) -> bool {
        !self.pmix || self.pmi_too
    }
}

/// A program that is already running and asked for a process manager (`-pmi_args`): the
/// host that runs rank 0 connects to it, completes the `singinit` exchange and serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adopt {
    /// Where it listens (`host:port`).
    pub addr: String,
    /// Its pid, watched through a pidfd (it is not the agent's child).
    pub pid: u32,
}

/// One host's part of the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPlan {
    /// The host's name as given by the user.
    pub host: String,
    /// Its index in the job's list of hosts (its node id in the process mapping).
    pub node: usize,
    /// Its index among the hosts that run ranks (`KAURI_NODE`).
    pub index: usize,
    /// The ranks it runs, in rank order.
    pub ranks: Vec<RankPlan>,
}

/// A host and the hosts below it in the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subtree {
    /// The agent's id (unique in the job; the front end is 0).
    pub id: u32,
    /// Its host.
    pub plan: HostPlan,
    /// Its children.
    pub children: Vec<Subtree>,
}

impl Subtree {
    /// Every rank in this subtree.
    pub fn contains_rank(&self, rank: usize) -> bool {
        self.plan.ranks.iter().any(|r| r.rank == rank)
            || self.children.iter().any(|c| c.contains_rank(rank))
    }

    /// Every rank in this subtree, its root's first.
    pub fn ranks(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.plan.ranks.iter().map(|r| r.rank).collect();
        for c in &self.children {
            v.extend(c.ranks());
        }
        v
    }

    /// True when agent `id` is this subtree's root or below it.
    pub fn contains_agent(&self, id: u32) -> bool {
        self.id == id || self.children.iter().any(|c| c.contains_agent(id))
    }

    /// How many agents this subtree holds, itself included.
    pub fn agents(&self) -> usize {
        1 + self.children.iter().map(Subtree::agents).sum::<usize>()
    }

    /// The hosts of the agents below this subtree's root, at every depth, depth first.
    pub fn hosts_below(&self) -> Vec<String> {
        let mut v = Vec::new();
        for c in &self.children {
            v.push(c.plan.host.clone());
            v.extend(c.hosts_below());
        }
        v
    }
}

/// How agents reach hosts; sent down so every agent launches its children the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPlan {
    /// The launcher that starts agents.
    pub kind: crate::launch::kind::LauncherKind,
    /// The launcher program (`ssh`, a wrapper, …).
    pub exec: String,
    /// Extra arguments before the host name.
    pub extra_args: Vec<String>,
    /// The path of kauri on the remote hosts, as the OS gives it (it need not be UTF-8).
    pub agent_path: OsString,
    /// Seconds an agent has to connect back after its launch.
    pub connect_timeout_s: u64,
    /// Maximum launches in flight per agent.
    pub max_concurrent: usize,
    /// Milliseconds between heartbeats on every tree link, both ways.
    pub heartbeat_ms: u64,
    /// A link on which nothing arrived for this many milliseconds is lost (0: never).
    pub silence_ms: u64,
}

impl LaunchPlan {
    /// The heartbeat period.
    pub fn heartbeat(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.heartbeat_ms.max(1))
    }

    /// How long a link may be silent before it is lost, when it may not be for ever.
    pub fn silence(&self) -> Option<std::time::Duration> {
        (self.silence_ms > 0).then(|| std::time::Duration::from_millis(self.silence_ms))
    }
}

/// Ranks (or CPUs) as a person reads them: runs of consecutive numbers joined
/// (`0-3,8,10-11`).
pub fn rank_ranges(ranks: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// `--display-map`: which ranks each host of a job runs, one line per host in the job's
/// order of hosts (`hosts`, each rank's host index `rank_node`); hosts with no rank are left
/// out.
pub fn rank_map(hosts: &[String], rank_node: &[u32]) -> Vec<String> {
    hosts
        .iter()
        .enumerate()
        .filter_map(|(n, h)| {
            let ranks: Vec<usize> = (0..rank_node.len())
                .filter(|&r| rank_node[r] as usize == n)
                .collect();
            (!ranks.is_empty()).then(|| {
                format!(
                    "kauri: map: {h} runs {} rank{} ({})",
                    ranks.len(),
                    if ranks.len() == 1 { "" } else { "s" },
                    rank_ranges(&ranks)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod map_tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// A segment's strings that are not UTF-8 cross a tree link (bincode, as every frame)
    /// byte for byte.
    #[test]
    fn a_segment_crosses_a_link_byte_for_byte() {
        use std::os::unix::ffi::OsStringExt;
        let os = |b: &[u8]| OsString::from_vec(b.to_vec());
        let a = AppPlan {
            program: os(b"./caf\xe9.sh"),
            args: vec![os(b"caf\xe9"), os(b"")],
            env: vec![
                (os(b"K\xe9"), os(b"\xff\xfe")),
                ("PATH".into(), os(b"/b\xe9n")),
            ],
            wdir: os(b"/tmp/d\xe9"),
        };
        let back: AppPlan = bincode::deserialize(&bincode::serialize(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        assert_eq!(a.var("PATH"), Some(OsStr::from_bytes(b"/b\xe9n")));
        assert!(!a.sets("K"));
        assert_eq!(a.program_text(), "./caf\u{fffd}.sh");
    }

    #[test]
    fn ranks_read_as_runs() {
        assert_eq!(rank_ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(rank_ranges(&[5]), "5");
        assert_eq!(rank_ranges(&[]), "");
    }

    #[test]
    fn the_map_names_each_hosts_ranks() {
        let hosts = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(
            rank_map(&hosts, &[0, 1, 0, 1, 0]),
            [
                "kauri: map: a runs 3 ranks (0,2,4)",
                "kauri: map: b runs 2 ranks (1,3)"
            ]
        );
        assert_eq!(rank_map(&hosts, &[2]), ["kauri: map: c runs 1 rank (0)"]);
    }
}
