//! The variables kauri sets for one rank, on top of the environment its segment inherits:
//! the PMI ones (`PMI_RANK`, `PMI_SIZE`, `PMI_FD` or `PMI_PORT`/`PMI_ID`), the PMIx ones the
//! server library made, `KAURI_*`, the hints MPICH and Open MPI read (interfaces, yield,
//! shared-memory directory), the ML launchers' variables (`RANK`, `WORLD_SIZE`, …), and,
//! for a job served PMI and PMIx side by side, the choice MPICH would otherwise fail to make.
//!
//! [`rank_env`] is a pure function of plain data: no process, no socket, no file is
//! touched. The node ([`crate::host::node`]) opens the socket, asks the PMIx server for its
//! variables and reads the machine; this module only says what a rank sees.

use crate::plan::{AppPlan, JobPlan};

/// MPICH ch3's variable for the host name or address it listens and connects on.
pub const ICH3_IFACE: &str = "MPIR_CVAR_CH3_INTERFACE_HOSTNAME";

/// MPICH's variable naming the network interface its TCP transport uses (`-iface`).
pub const NEMESIS_IFACE: &str = "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE";

/// The variable that tells Open MPI where its shared-memory segments go.
pub const VADER_DIR_VAR: &str = "OMPI_MCA_btl_vader_backing_directory";

/// Open MPI's variable that makes waiting ranks yield their core.
pub const YIELD_VAR: &str = "OMPI_MCA_mpi_yield_when_idle";

/// MPICH's choice of PMI (`1`, `2`, `x` for PMIx, `auto`). MPICH 5 defaults to `auto`,
/// which fails when it finds both `PMI_SIZE` and `PMIX_NAMESPACE` ("Auto-detection of PMI
/// version failed"); MPICH 4.1 to 4.3 default to `1`; 4.0 has no such variable.
pub const MPICH_PMI_VERSION: &str = "MPIR_CVAR_PMI_VERSION";

/// Every name MPICH reads [`MPICH_PMI_VERSION`] under (its control variables are also read
/// with the `MPIR_PARAM_` and the older `MPICH_` prefix; the `MPIR_CVAR_` one wins). A user
/// who set any of them chose, and kauri adds none.
pub const MPICH_PMI_VERSION_NAMES: [&str; 3] = [
    "MPIR_CVAR_PMI_VERSION",
    "MPIR_PARAM_PMI_VERSION",
    "MPICH_PMI_VERSION",
];

/// OpenMP's thread count: `-ml-env` sets it to 1 for ranks that share a host, as torchrun
/// does when it starts more than one process per node, unless the user set it.
pub const OMP_THREADS: &str = "OMP_NUM_THREADS";

/// JAX's variable for its coordinator's `host:port`; `-ml-env` makes it `MASTER_ADDR:MASTER_PORT`.
pub const JAX_COORDINATOR: &str = "JAX_COORDINATOR_ADDRESS";

/// The variable by which JAX (its `OmpiCluster`) knows it runs under Open MPI's mpirun and
/// reads its process count and id from `OMPI_COMM_WORLD_*`. Open MPI 4.1's own library parses
/// it as its mpirun's address (a malformed value fails `MPI_Init`), so `-ml-env` sets it only
/// for jobs that are not Open MPI's.
pub const OMPI_MARKER: &str = "OMPI_MCA_orte_hnp_uri";

/// The variables that say where a rank is, for ML programs (`-ml-env`), and the one a
/// surrounding torchrun gives its own worker (`TORCHELASTIC_ERROR_FILE`). Under `-ml-env`
/// the front end keeps none of them from its own environment (an outer launcher's values
/// would shadow kauri's); one given with `-genv`, `-env` or `-envlist` wins over kauri's.
pub const ML_PLACE_VARS: [&str; 23] = [
    "RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    JAX_COORDINATOR,
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK",
    OMPI_MARKER,
];

/// Whether `-ml-env` gives a rank of segment `app` on a host of `local_size` ranks
/// `OMP_NUM_THREADS=1`, as torchrun does when it starts more than one process per node:
/// the ML variables were asked for (`job.master`), the host is shared, and the segment's
/// environment does not set it.
pub fn sets_omp_threads(job: &JobPlan, app: &AppPlan, local_size: usize) -> bool {
    job.master.is_some() && local_size > 1 && !app.env.iter().any(|(k, _)| k == OMP_THREADS)
}

/// How a rank reaches its PMI-1/PMI-2 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiSocket<'a> {
    /// A socket it inherits under this descriptor number (`PMI_FD`).
    Fd(i32),
    /// A loopback address to connect to (`-pmi-port`: `PMI_PORT`, and `PMI_ID` its rank).
    Port(&'a str),
}

/// Where one rank runs: what its host's node knows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankSeat<'a> {
    /// The global rank.
    pub rank: usize,
    /// Its index among the ranks of its host.
    pub local_id: usize,
    /// How many ranks its host runs.
    pub local_size: usize,
    /// Its host's index among the hosts that run ranks (`KAURI_NODE`).
    pub node: usize,
    /// Its host's name as the user gave it.
    pub host: &'a str,
}

/// What the host adds for a rank that the plan cannot say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostFacts<'a> {
    /// The PMIx variables the server library made for this rank (empty in a PMI job).
    pub pmix: &'a [(String, String)],
    /// Open MPI's private shared-memory directory for a segment on its `flux` path.
    pub vader_dir: Option<&'a str>,
    /// The host runs more ranks than it has cores: Open MPI ranks must yield.
    pub oversubscribed: bool,
    /// The rank's PMI socket; `None` when the job serves it no PMI-1/PMI-2.
    pub socket: Option<PmiSocket<'a>>,
}

/// The variables kauri sets for the rank at `seat` of segment `app` of `job`, in the order
/// they go after the segment's own environment (`app.env`). A variable the user set in
/// `app.env` is left alone where kauri only offers a hint (interfaces, yield, the
/// shared-memory directory, MPICH's PMI choice) and for every ML variable of `-ml-env`
/// (the front end drops [`ML_PLACE_VARS`] it inherited, so those in `app.env` were given).
pub fn rank_env(
    job: &JobPlan,
    app: &AppPlan,
    seat: &RankSeat<'_>,
    host: &HostFacts<'_>,
) -> Vec<(String, String)> {
    // Open MPI may run: served PMIx (or set up for its PMI-1 path). Known to run: served
    // PMIx alone, or its programs are Open MPI's.
    let open_mpi = job.pmix || app.uses_open_mpi_flux();
    let only_open_mpi = (job.pmix && (!job.pmi_too || job.pmix_now)) || app.uses_open_mpi_flux();
    let mut env = pmi_identity_vars(job, seat);
    env.extend(offered(app, launcher_vars(job, seat)));
    env.extend(host.pmix.iter().cloned());
    env.extend(mpich_pmi_choice(job, app));
    env.extend(open_mpi_hints(app, host, open_mpi));
    env.extend(kauri_vars(job, seat));
    if job.spawner.is_some() && job.serves_pmi() {
        env.push(("PMI_SPAWNED".into(), "1".into()));
    }
    env.extend(interface_vars(job, app, seat, open_mpi, !only_open_mpi));
    if let Some((addr, port)) = &job.master {
        let ml = MlSeat {
            job,
            app,
            seat,
            addr,
            port: *port,
        };
        env.extend(offered(app, torchrun_vars(&ml)));
        env.extend(offered(app, jax_vars(&ml, only_open_mpi)));
    }
    env.extend(pmi_socket_vars(job, seat, host.socket));
    env
}

/// Whether the user set `k` in the segment's environment.
fn user_set(app: &AppPlan, k: &str) -> bool {
    app.env.iter().any(|(n, _)| n == k)
}

/// `vars` less those the user set in the segment's environment: what kauri only offers.
fn offered(app: &AppPlan, vars: Vec<(String, String)>) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(k, _)| !user_set(app, k))
        .collect()
}

/// A variable, as owned strings.
fn var(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

/// The PMI-1/PMI-2 identity of a rank in a job served PMI: `PMI_RANK`, `PMI_SIZE`.
fn pmi_identity_vars(job: &JobPlan, seat: &RankSeat<'_>) -> Vec<(String, String)> {
    if !job.serves_pmi() {
        return Vec::new();
    }
    vec![
        var("PMI_RANK", seat.rank.to_string()),
        var("PMI_SIZE", job.size.to_string()),
    ]
}

/// Where the rank is, in the variables each MPI's own launcher gives, whatever the job is
/// served: Hydra's `MPI_LOCALNRANKS`/`MPI_LOCALRANKID`, and Open MPI's `mpirun`'s
/// `OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}`. Packages read them
/// before any MPI starts (Debian's h5py picks its MPI build from them, JAX and others detect
/// their cluster); no MPI here is misled by the other's (each checked with its hello).
fn launcher_vars(job: &JobPlan, seat: &RankSeat<'_>) -> Vec<(String, String)> {
    vec![
        var("MPI_LOCALNRANKS", seat.local_size.to_string()),
        var("MPI_LOCALRANKID", seat.local_id.to_string()),
        var("OMPI_COMM_WORLD_SIZE", job.size.to_string()),
        var("OMPI_COMM_WORLD_RANK", seat.rank.to_string()),
        var("OMPI_COMM_WORLD_LOCAL_RANK", seat.local_id.to_string()),
        var("OMPI_COMM_WORLD_LOCAL_SIZE", seat.local_size.to_string()),
        var("OMPI_COMM_WORLD_NODE_RANK", seat.local_id.to_string()),
    ]
}

/// MPICH's PMI choice for a job served PMI and PMIx side by side, unless the user made it.
fn mpich_pmi_choice(job: &JobPlan, app: &AppPlan) -> Option<(String, String)> {
    // Served both, MPICH 5 finds PMI_SIZE and PMIX_NAMESPACE and gives up. It takes the
    // PMI-1 server, the one MPICH programs have always used under kauri; Open MPI and
    // Intel MPI do not read this variable.
    (job.pmix && job.pmi_too && !MPICH_PMI_VERSION_NAMES.iter().any(|k| user_set(app, k)))
        .then(|| var(MPICH_PMI_VERSION, "1"))
}

/// Open MPI's hints from the host: its private shared-memory directory, and (on an
/// oversubscribed host, unless the user chose) yielding when idle.
fn open_mpi_hints(app: &AppPlan, host: &HostFacts<'_>, open_mpi: bool) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some(d) = host.vader_dir {
        env.push(var(VADER_DIR_VAR, d));
    }
    if host.oversubscribed && open_mpi && !user_set(app, YIELD_VAR) {
        env.push(var(YIELD_VAR, "1"));
    }
    env
}

/// kauri's own `KAURI_*` variables: where the rank is in the job and on its host.
fn kauri_vars(job: &JobPlan, seat: &RankSeat<'_>) -> Vec<(String, String)> {
    vec![
        var("KAURI_RANK", seat.rank.to_string()),
        var("KAURI_SIZE", job.size.to_string()),
        var("KAURI_LOCAL_RANK", seat.local_id.to_string()),
        var("KAURI_LOCAL_SIZE", seat.local_size.to_string()),
        var("KAURI_NODE", seat.node.to_string()),
        var("KAURI_NODES", job.hosts.len().to_string()),
        var("KAURI_HOST", seat.host),
        var("KAURI_HOSTS", job.hosts.join(",")),
        var("KAURI_JOBID", job.kvsname.clone()),
    ]
    .into_iter()
    .chain(
        job.restart
            .as_ref()
            .map(|r| var("KAURI_RESTART_COUNT", r.count.to_string())),
    )
    .collect()
}

/// Where the rank's MPI listens and connects, unless the user said: Hydra's compatibility
/// variables.
fn interface_vars(
    job: &JobPlan,
    app: &AppPlan,
    seat: &RankSeat<'_>,
    open_mpi: bool,
    mpich: bool,
) -> Vec<(String, String)> {
    // As Hydra does: MPICH's ch3 then listens and connects on the address of the host as
    // named (on loopback for simulated hosts) instead of picking an interface. -iface, as
    // Hydra: MPICH's TCP transport is given the interface by name (each rank finds its own
    // host's address of it) instead of a host name; Open MPI's the same way; a job that may
    // be either (served both) gets both.
    if let Some(i) = &job.iface {
        let mut by_name: Vec<&str> = Vec::new();
        if open_mpi {
            by_name.extend(["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"]);
        }
        if mpich {
            by_name.push(NEMESIS_IFACE);
        }
        offered(app, by_name.iter().map(|k| var(k, i.clone())).collect())
    } else if !user_set(app, ICH3_IFACE) {
        let iface = if job.simulated_hosts {
            "127.0.0.1"
        } else {
            seat.host
        };
        vec![var(ICH3_IFACE, iface)]
    } else {
        Vec::new()
    }
}

/// A rank under `-ml-env`: its job, segment and seat, and the job's `MASTER_ADDR` and
/// `MASTER_PORT`.
struct MlSeat<'a> {
    job: &'a JobPlan,
    app: &'a AppPlan,
    seat: &'a RankSeat<'a>,
    addr: &'a str,
    port: u16,
}

/// torchrun's variables, in the order its agent sets them, with a job of one role
/// ("default") served by no elastic agent: never restarted, no agent store; and
/// `OMP_NUM_THREADS=1` on a shared host ([`sets_omp_threads`]).
fn torchrun_vars(ml: &MlSeat<'_>) -> Vec<(String, String)> {
    let (job, seat) = (ml.job, ml.seat);
    let (hosts, world) = (job.hosts.len().to_string(), job.size.to_string());
    // torchrun's run id stays the same across restarts, and so does kauri's.
    let (restarts, run_id) = match &job.restart {
        Some(r) => ((r.count, r.max), r.run_id.clone()),
        None => ((0, 0), job.kvsname.clone()),
    };
    let mut env = vec![
        var("RANK", seat.rank.to_string()),
        var("GROUP_RANK", seat.node.to_string()),
        var("ROLE_RANK", seat.rank.to_string()),
        var("ROLE_NAME", "default"),
        var("LOCAL_RANK", seat.local_id.to_string()),
        var("LOCAL_WORLD_SIZE", seat.local_size.to_string()),
        var("WORLD_SIZE", world.clone()),
        var("GROUP_WORLD_SIZE", hosts),
        var("ROLE_WORLD_SIZE", world),
        var("MASTER_ADDR", ml.addr),
        var("MASTER_PORT", ml.port.to_string()),
        var("TORCHELASTIC_RESTART_COUNT", restarts.0.to_string()),
        var("TORCHELASTIC_MAX_RESTARTS", restarts.1.to_string()),
        var("TORCHELASTIC_RUN_ID", run_id),
        var("TORCHELASTIC_USE_AGENT_STORE", "False"),
        var("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ];
    if sets_omp_threads(job, ml.app, seat.local_size) {
        env.push(var(OMP_THREADS, "1"));
    }
    env
}

/// JAX's variables: its coordinator, and (unless the job is known to be Open MPI's: served
/// PMIx alone, or its programs linked to Open MPI) Open MPI's mpirun's variables, from which
/// it reads its process count and id.
fn jax_vars(ml: &MlSeat<'_>, open_mpi: bool) -> Vec<(String, String)> {
    // JAX's own variable for its coordinator; its process count and id it reads only
    // from a cluster it detects: Open MPI's mpirun's variables, unless the job is known to
    // be Open MPI's, whose variables they are. (A job served both may be an interpreter's
    // Open MPI 4.1 through mpi4py: it starts through PMIx with the marker set too.)
    let (addr, port) = (ml.addr, ml.port);
    let mut env = vec![var(JAX_COORDINATOR, format!("{addr}:{port}"))];
    if !open_mpi {
        // The `OMPI_COMM_WORLD_*` it then reads, every rank has ([`launcher_vars`]).
        env.push(var(OMPI_MARKER, format!("0.0;tcp://{addr}:{port}")));
    }
    env
}

/// How the rank reaches its PMI-1/PMI-2 server (`PMI_PORT` and `PMI_ID`, or `PMI_FD`), in a
/// job served PMI.
fn pmi_socket_vars(
    job: &JobPlan,
    seat: &RankSeat<'_>,
    socket: Option<PmiSocket<'_>>,
) -> Vec<(String, String)> {
    match socket {
        _ if !job.serves_pmi() => Vec::new(),
        Some(PmiSocket::Port(addr)) => {
            vec![var("PMI_PORT", addr), var("PMI_ID", seat.rank.to_string())]
        }
        Some(PmiSocket::Fd(fd)) => vec![var("PMI_FD", fd.to_string())],
        None => Vec::new(),
    }
}

/// Variables a surrounding launcher may have set that must not reach our ranks: another
/// launcher's PMI wiring, its PMIx variables (they would point a rank at its server), and
/// `mpirun`'s `OMPI_COMM_WORLD_*` (kauri gives its own).
pub fn is_foreign_wiring(name: &str) -> bool {
    matches!(
        name,
        "PMI_FD"
            | "PMI_PORT"
            | "PMI_ID"
            | "PMI_RANK"
            | "PMI_SIZE"
            | "PMI_SPAWNED"
            | "PMI_JOBID"
            | "PMI_KVSNAME"
            | "MPI_LOCALNRANKS"
            | "MPI_LOCALRANKID"
    ) || name.starts_with("PMIX_")
        || name.starts_with("OMPI_COMM_WORLD_")
        || name.starts_with("PRTE_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(env: &[(&str, &str)]) -> AppPlan {
        AppPlan {
            program: "python3".into(),
            args: vec!["app.py".into()],
            env: env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            wdir: "/".into(),
        }
    }

    fn job(pmix: bool, pmi_too: bool) -> JobPlan {
        JobPlan {
            kvsname: "kauri_7_ab_vm".into(),
            size: 4,
            universe_size: -1,
            appnum: vec![0; 4],
            process_mapping: "(vector,(0,2,2))".into(),
            apps: vec![app(&[])],
            output: Default::default(),
            pmi_port: false,
            kill_grace_ms: 0,
            hosts: vec!["a".into(), "b".into()],
            master: None,
            spawner: None,
            parent_rank: None,
            preput: vec![],
            adopt: None,
            pmix_library: None,
            simulated_hosts: true,
            rank_node: vec![0, 0, 1, 1],
            pmix,
            pmi_too,
            pmix_now: false,
            profile: false,
            progress: false,
            binding: None,
            gpus: None,
            restart: None,
            report_bindings: false,
            iface: None,
            port_range: None,
            fault_tolerant: false,
            topology_ahead: false,
        }
    }

    /// Rank 3, the second of host `b`'s two ranks.
    const SEAT: RankSeat<'static> = RankSeat {
        rank: 3,
        local_id: 1,
        local_size: 2,
        node: 1,
        host: "b",
    };

    fn pmix_vars() -> Vec<(String, String)> {
        [
            ("PMIX_NAMESPACE", "kauri_7_ab_vm"),
            ("PMIX_RANK", "3"),
            ("PMIX_SERVER_URI41", "pmix-server.1;tcp4://127.0.0.1:4000"),
            ("FLUX_JOB_ID", "12345"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const KAURI_VARS: [(&str, &str); 9] = [
        ("KAURI_RANK", "3"),
        ("KAURI_SIZE", "4"),
        ("KAURI_LOCAL_RANK", "1"),
        ("KAURI_LOCAL_SIZE", "2"),
        ("KAURI_NODE", "1"),
        ("KAURI_NODES", "2"),
        ("KAURI_HOST", "b"),
        ("KAURI_HOSTS", "a,b"),
        ("KAURI_JOBID", "kauri_7_ab_vm"),
    ];

    fn want(head: &[(&str, &str)], tail: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut w = pairs(head);
        w.extend(pairs(&KAURI_VARS));
        w.push((ICH3_IFACE.into(), "127.0.0.1".into()));
        w.extend(pairs(tail));
        w
    }

    /// What every rank gets, as its MPI's launcher would give it (rank 3 of 4, the second
    /// of two on its host).
    const LAUNCHER_VARS: [(&str, &str); 7] = [
        ("MPI_LOCALNRANKS", "2"),
        ("MPI_LOCALRANKID", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("OMPI_COMM_WORLD_NODE_RANK", "1"),
    ];

    const PMI_HEAD: [(&str, &str); 9] = [
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        LAUNCHER_VARS[0],
        LAUNCHER_VARS[1],
        LAUNCHER_VARS[2],
        LAUNCHER_VARS[3],
        LAUNCHER_VARS[4],
        LAUNCHER_VARS[5],
        LAUNCHER_VARS[6],
    ];

    #[test]
    fn a_pmi_rank_gets_its_socket_and_no_pmix_variable() {
        let host = HostFacts {
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let env = rank_env(&job(false, false), &app(&[]), &SEAT, &host);
        assert_eq!(env, want(&PMI_HEAD, &[("PMI_FD", "9")]));
        let port = HostFacts {
            socket: Some(PmiSocket::Port("127.0.0.1:5000")),
            ..Default::default()
        };
        let env = rank_env(&job(false, false), &app(&[]), &SEAT, &port);
        assert_eq!(
            env,
            want(
                &PMI_HEAD,
                &[("PMI_PORT", "127.0.0.1:5000"), ("PMI_ID", "3")]
            )
        );
    }

    #[test]
    fn a_pmix_rank_gets_the_librarys_variables_and_no_pmi_one() {
        let pmix = pmix_vars();
        let host = HostFacts {
            pmix: &pmix,
            // Ignored: a PMIx job serves no PMI.
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let env = rank_env(&job(true, false), &app(&[]), &SEAT, &host);
        let mut head = LAUNCHER_VARS.to_vec();
        head.extend(pmix.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(env, want(&head, &[]));
    }

    #[test]
    fn a_rank_served_both_gets_both_and_mpich_is_told_to_take_pmi_1() {
        let pmix = pmix_vars();
        let host = HostFacts {
            pmix: &pmix,
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let env = rank_env(&job(true, true), &app(&[]), &SEAT, &host);
        let mut head = PMI_HEAD.to_vec();
        head.extend(pmix.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        head.push(("MPIR_CVAR_PMI_VERSION", "1"));
        assert_eq!(env, want(&head, &[("PMI_FD", "9")]));
    }

    #[test]
    fn a_users_mpich_pmi_choice_under_any_of_its_names_is_kept() {
        let pmix = pmix_vars();
        let host = HostFacts {
            pmix: &pmix,
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let mut head = PMI_HEAD.to_vec();
        head.extend(pmix.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for name in MPICH_PMI_VERSION_NAMES {
            let a = app(&[(name, "x")]);
            let env = rank_env(&job(true, true), &a, &SEAT, &host);
            assert_eq!(env, want(&head, &[("PMI_FD", "9")]), "{name}");
        }
    }

    #[test]
    fn hints_the_user_set_are_left_alone() {
        let mut j = job(true, false);
        j.iface = Some("eth1".into());
        j.master = Some(("a".into(), 29500));
        let host = HostFacts {
            oversubscribed: true,
            ..Default::default()
        };
        let a = app(&[(YIELD_VAR, "0"), ("OMPI_MCA_oob_tcp_if_include", "lo")]);
        let env = rank_env(&j, &a, &SEAT, &host);
        let mut w = pairs(&LAUNCHER_VARS);
        w.extend(pairs(&KAURI_VARS));
        w.push(("OMPI_MCA_btl_tcp_if_include".into(), "eth1".into()));
        // An Open MPI job (served PMIx alone): no mpirun marker is made up for JAX.
        w.extend(pairs(&TORCHRUN_VARS));
        w.push((JAX_COORDINATOR.into(), "a:29500".into()));
        assert_eq!(env, w);
        let env = rank_env(&j, &app(&[]), &SEAT, &host);
        assert!(env.contains(&(YIELD_VAR.to_string(), "1".to_string())));
    }

    /// What torchrun sets for rank 3 of 4, the second of two on the second host, with
    /// `MASTER_ADDR:MASTER_PORT` `a:29500`.
    const TORCHRUN_VARS: [(&str, &str); 17] = [
        ("RANK", "3"),
        ("GROUP_RANK", "1"),
        ("ROLE_RANK", "3"),
        ("ROLE_NAME", "default"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("WORLD_SIZE", "4"),
        ("GROUP_WORLD_SIZE", "2"),
        ("ROLE_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "a"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RESTART_COUNT", "0"),
        ("TORCHELASTIC_MAX_RESTARTS", "0"),
        ("TORCHELASTIC_RUN_ID", "kauri_7_ab_vm"),
        ("TORCHELASTIC_USE_AGENT_STORE", "False"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        ("OMP_NUM_THREADS", "1"),
    ];

    /// JAX's coordinator and the marker by which its `OmpiCluster` reads the
    /// `OMPI_COMM_WORLD_*` every rank has.
    const JAX_VARS: [(&str, &str); 2] = [
        ("JAX_COORDINATOR_ADDRESS", "a:29500"),
        ("OMPI_MCA_orte_hnp_uri", "0.0;tcp://a:29500"),
    ];

    #[test]
    fn ml_env_gives_torchruns_variables_and_what_jax_finds_its_peers_by() {
        let mut j = job(false, false);
        j.master = Some(("a".into(), 29500));
        let host = HostFacts {
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let env = rank_env(&j, &app(&[]), &SEAT, &host);
        let mut tail = TORCHRUN_VARS.to_vec();
        tail.extend(JAX_VARS);
        tail.push(("PMI_FD", "9"));
        assert_eq!(env, want(&PMI_HEAD, &tail));
        // Alone on its host, a rank keeps OpenMP's own thread count.
        let alone = RankSeat {
            local_id: 0,
            local_size: 1,
            ..SEAT
        };
        let env = rank_env(&j, &app(&[]), &alone, &host);
        assert!(!env.iter().any(|(k, _)| k == OMP_THREADS), "{env:?}");
        assert!(env.contains(&("LOCAL_WORLD_SIZE".into(), "1".into())));
        // Without -ml-env, none of them (but Open MPI's own, which every rank has).
        j.master = None;
        let env = rank_env(&j, &app(&[]), &SEAT, &host);
        let ml_only = ML_PLACE_VARS
            .iter()
            .filter(|k| !k.starts_with("OMPI_COMM_WORLD_"));
        for k in ml_only.chain([&OMP_THREADS]) {
            assert!(!env.iter().any(|(n, _)| n == k), "{k}: {env:?}");
        }
    }

    #[test]
    fn ml_variables_the_user_set_win() {
        let mut j = job(false, false);
        j.master = Some(("a".into(), 29500));
        let given = [
            ("OMP_NUM_THREADS", "8"),
            ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"),
            ("RANK", "7"),
            ("JAX_COORDINATOR_ADDRESS", "c:1234"),
            ("OMPI_MCA_orte_hnp_uri", "1.0;tcp://c:1"),
        ];
        let env = rank_env(&j, &app(&given), &SEAT, &HostFacts::default());
        for (k, _) in given {
            assert!(!env.iter().any(|(n, _)| n == k), "{k}: {env:?}");
        }
        assert!(env.contains(&("LOCAL_RANK".into(), "1".into())));
    }

    #[test]
    fn a_spawned_pmi_job_says_so_and_a_flux_segment_gets_its_directory() {
        let mut j = job(false, false);
        j.spawner = Some("kauri_6_ab_vm".into());
        j.simulated_hosts = false;
        let host = HostFacts {
            vader_dir: Some("/dev/shm/kauri-x-n1-1"),
            oversubscribed: true,
            socket: Some(PmiSocket::Fd(9)),
            ..Default::default()
        };
        let a = app(&[("FLUX_PMI_LIBRARY_PATH", "/usr/lib/libpmi.so")]);
        let env = rank_env(&j, &a, &SEAT, &host);
        let mut w = pairs(&PMI_HEAD);
        w.push((VADER_DIR_VAR.into(), "/dev/shm/kauri-x-n1-1".into()));
        w.push((YIELD_VAR.into(), "1".into()));
        w.extend(pairs(&KAURI_VARS));
        w.extend(pairs(&[
            ("PMI_SPAWNED", "1"),
            (ICH3_IFACE, "b"),
            ("PMI_FD", "9"),
        ]));
        assert_eq!(env, w);
    }
    #[test]
    fn the_interface_is_the_hosts_name_or_iface_by_name_per_mpi() {
        let mut j = job(false, false);
        j.simulated_hosts = false;
        assert_eq!(
            interface_vars(&j, &app(&[]), &SEAT, false, true),
            pairs(&[(ICH3_IFACE, "b")])
        );
        assert!(interface_vars(&j, &app(&[(ICH3_IFACE, "x")]), &SEAT, false, true).is_empty());
        j.iface = Some("eth1".into());
        assert_eq!(
            interface_vars(&j, &app(&[]), &SEAT, false, true),
            pairs(&[(NEMESIS_IFACE, "eth1")])
        );
        let user = app(&[("OMPI_MCA_btl_tcp_if_include", "ib0")]);
        assert_eq!(
            interface_vars(&j, &user, &SEAT, true, false),
            pairs(&[("OMPI_MCA_oob_tcp_if_include", "eth1")])
        );
        // A job that may be either: both MPIs' names.
        assert_eq!(
            interface_vars(&j, &app(&[]), &SEAT, true, true),
            pairs(&[
                ("OMPI_MCA_btl_tcp_if_include", "eth1"),
                ("OMPI_MCA_oob_tcp_if_include", "eth1"),
                (NEMESIS_IFACE, "eth1")
            ])
        );
    }

    #[test]
    fn jax_finds_open_mpis_variables_only_outside_open_mpi() {
        let j = job(false, false);
        let a = app(&[]);
        let ml = MlSeat {
            job: &j,
            app: &a,
            seat: &SEAT,
            addr: "h0",
            port: 29500,
        };
        assert_eq!(jax_vars(&ml, true), pairs(&[(JAX_COORDINATOR, "h0:29500")]));
        let outside = jax_vars(&ml, false);
        assert_eq!(outside.len(), 2);
        assert!(outside.contains(&(OMPI_MARKER.into(), "0.0;tcp://h0:29500".into())));
    }

    #[test]
    fn the_pmi_socket_is_given_only_in_a_job_served_pmi() {
        let port = Some(PmiSocket::Port("127.0.0.1:5000"));
        assert_eq!(
            pmi_socket_vars(&job(false, false), &SEAT, port),
            pairs(&[("PMI_PORT", "127.0.0.1:5000"), ("PMI_ID", "3")])
        );
        assert_eq!(
            pmi_socket_vars(&job(true, true), &SEAT, Some(PmiSocket::Fd(9))),
            pairs(&[("PMI_FD", "9")])
        );
        assert!(pmi_socket_vars(&job(true, false), &SEAT, Some(PmiSocket::Fd(9))).is_empty());
        assert!(pmi_socket_vars(&job(false, false), &SEAT, None).is_empty());
    }
}
