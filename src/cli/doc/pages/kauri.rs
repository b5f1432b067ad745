//! `kauri(1)`: the options of `kauri` itself (also `kauri -h`), its environment and
//! `kauri --help-env`.

use super::{flag, with, MAP_BY, OBJECTS};
use crate::cli::doc::{Arg, Block, Example, Item, Opt, OptSection, Page, Values};

const LOCAL: &[Opt] = &[
    with(
        &["-n", "-np"],
        "N",
        "number of processes, at most 16777216 in all (default: the hosts' slots, 1 on this host)",
    ),
    with(
        &["-env"],
        "NAME VALUE",
        "set NAME for this segment's processes",
    ),
    flag(
        &["-envall"],
        "pass all of kauri's environment to this segment (default)",
    ),
    flag(&["-envnone"], "pass none of it"),
    with(&["-envlist"], "A,B,...", "pass only these variables"),
    Opt {
        values: Values::Dir,
        ..with(
            &["-wdir"],
            "DIR",
            "working directory (in the first segment: for every segment)",
        )
    },
];

const GLOBAL: &[Opt] = &[
    with(&["-genv"], "NAME VALUE", "set NAME for every process"),
    flag(
        &["-genvall"],
        "every process inherits all of kauri's variables (default)",
    ),
    flag(&["-genvnone"], "every process inherits none of them"),
    with(
        &["-genvlist"],
        "A,B,...",
        "every process inherits only these variables",
    ),
    Opt {
        aliases: &["-host", "-H"],
        ..with(
            &["-hosts"],
            "H1[:N],H2[:N]",
            "hosts to run on, with slot counts",
        )
    },
    Opt {
        aliases: &["-machinefile"],
        values: Values::File,
        ..with(
            &["-f", "-hostfile"],
            "FILE",
            "hosts from a file: 'host', 'host:N' or 'host slots=N' per line",
        )
    },
    with(
        &["-ppn"],
        "N",
        "processes per host name, a name given twice counting once (at most\n16777216)",
    ),
    Opt {
        aliases: &["-bootstrap"],
        values: Values::Words(&crate::launch::NAMES),
        ..with(
            &["-launcher"],
            "NAME",
            "how to reach hosts: ssh (default), rsh, slurm (srun), sge\n\
             (qrsh -inherit), lsf (blaunch), pbs (pbs_tmrsh, else ssh), fork\n\
             (every host simulated by a local agent); inside a Slurm, Grid\n\
             Engine, LSF or PBS job its hosts and its launcher are the default",
        )
    },
    Opt {
        aliases: &["-bootstrap-exec"],
        values: Values::File,
        ..with(
            &["-launcher-exec"],
            "PATH",
            "the launcher program (e.g. a wrapper around ssh)",
        )
    },
    Opt {
        values: Values::Words(MAP_BY),
        ..with(
            &["-map-by"],
            "node|slot|OBJ",
            "deal ranks round-robin over hosts (node) or fill each host (slot,\n\
             the default); OBJ (the names of -bind-to): deal each host's ranks\n\
             over its OBJs before binding; alone, it also binds to OBJ",
        )
    },
    Opt {
        aliases: &["-binding"],
        values: Values::Words(OBJECTS),
        ..with(
            &["-bind-to"],
            "OBJ[:N]",
            "bind each rank to N (default 1) of its host's OBJ: none (the\n\
             default), hwthread, core, l1cache, l2cache, l3cache, socket, numa",
        )
    },
    flag(
        &["-report-bindings"],
        "print each rank's CPUs (and GPUs) as it starts",
    ),
    with(
        &["-gpus-per-proc"],
        "N|auto",
        "give each rank N of its host's GPUs (auto: the host's GPUs divided\n\
         among its ranks; 0: hide them all) in the variable its vendor's\n\
         runtime reads: CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or\n\
         ZE_AFFINITY_MASK (never over one the environment sets); a host\n\
         without GPUs fails",
    ),
    Opt {
        values: Values::Words(&["closest", "none", "map:"]),
        ..with(
            &["-gpu-bind"],
            "closest|none|map:I,J,...",
            "which GPUs: those nearest the rank's CPUs (the default; with no\n\
             -bind-to, the rank is then bound to the CPUs next to them), in\n\
             turn (none), or local rank L gets GPU I,J,...[L] (map:, also\n\
             Slurm's map_gpu:); alone, it means -gpus-per-proc auto (1 with\n\
             a map)",
        )
    },
    with(
        &["-iface"],
        "NAME",
        "use network interface NAME (also HYDRA_IFACE): agents connect\n\
         back to its address, and MPI programs are told to use it",
    ),
    Opt {
        values: Values::Words(&["flat", "cost", "2", "4", "8", "16", "32"]),
        ..with(
            &["-tree-width"],
            "K|flat|cost",
            "agents start their own children in a K-ary tree (default 8), or\n\
             where each starts soonest by the launch cost measured at start",
        )
    },
    Opt {
        values: Values::File,
        ..with(
            &["-configfile"],
            "FILE",
            "read segments from FILE, one per line",
        )
    },
    flag(
        &["-l", "-prepend-rank"],
        "prefix every output line with [RANK]",
    ),
    with(
        &["-prepend-pattern"],
        "PAT",
        "prefix every output line with PAT, in which %r is the rank, %g\n\
         the job (0, or n for the n-th spawned job), %p the host's number\n\
         among the job's hosts, %h its name, %t the seconds since the\n\
         start, %% a %",
    ),
    Opt {
        aliases: &["-outfile"],
        ..with(
            &["-outfile-pattern"],
            "PAT",
            "write each rank's stdout to the file PAT names (same %\n\
             specifiers; relative to kauri's directory, emptied at the start)",
        )
    },
    with(
        &["-errfile-pattern"],
        "PAT",
        "write each rank's stderr to the file PAT names",
    ),
    with(
        &["-output-from"],
        "RANK",
        "show (or write to files) only this rank's output",
    ),
    flag(
        &["--no-pty"],
        "give the ranks' stdout a pipe even when kauri's is a terminal (by\n\
         default it is then a pseudo-terminal, as mpirun gives it: C stdio\n\
         and Fortran write each line as it comes)",
    ),
    flag(
        &["-ml-env"],
        "also set what torchrun sets (RANK, LOCAL_RANK, GROUP_RANK,\n\
         MASTER_ADDR, MASTER_PORT, ...) and what jax.distributed.initialize()\n\
         reads, and number each host's ranks consecutively unless -map-by or\n\
         -ppn is given (see --help-env)",
    ),
    flag(
        &["-pmi-port"],
        "serve PMI over loopback TCP (PMI_PORT/PMI_ID) instead of PMI_FD\n\
         (connections of other users are refused)",
    ),
    Opt {
        names: &["--pmi"],
        aliases: &["--mpi"],
        arg: Arg::Equals("auto|pmi1|pmi2|pmix"),
        values: Values::Words(&["auto", "pmi1", "pmi2", "pmix"]),
        help: "how processes wire up: auto (default) serves both PMI-1/PMI-2\n\
               and PMIx, each rank speaking its MPI's (MPICH, Intel MPI: PMI;\n\
               Open MPI: PMIx, its server started when a rank first uses it);\n\
               pmi1/pmi2 serve PMI-1 and PMI-2 on PMI_FD only; pmix PMIx only",
    },
    Opt {
        values: Values::Words(&["SYSTEM", "INFINITE"]),
        ..with(
            &["-usize"],
            "N|SYSTEM|INFINITE",
            "universe size reported to processes (default: the slots of the\n\
             hosts named, or unknown (-1) when none is named)",
        )
    },
    with(
        &["-nameserver"],
        "HOST[:PORT]",
        "publish/lookup names through a 'kauri nameserver' (default port\n\
         6392; also KAURI_NAMESERVER), shared with other kauri runs",
    ),
    flag(
        &["-disable-auto-cleanup"],
        "keep the job running when one process fails; the others are told\n\
         (PMI_dead_processes and SIGUSR1, as Hydra; a PMIx event)",
    ),
    Opt {
        values: Values::Words(&["ulfm", "no"]),
        ..with(
            &["-with-ft"],
            "ulfm|no",
            "fault-tolerant MPI (ULFM), as mpirun --with-ft: implies\n\
             -disable-auto-cleanup, turns on Open MPI's and MPICH's fault\n\
             tolerance, and a process killed by a signal does not fail the\n\
             exit status when the others finish",
        )
    },
    Opt {
        aliases: &["-max_restarts"],
        ..with(
            &["-max-restarts"],
            "N",
            "when the job fails (a process fails or aborts, a host is lost),\n\
             end it and start it all again, at most N times (torchrun's\n\
             --max-restarts), without the lost hosts when the others hold it;\n\
             each attempt gets a new key-value store and KAURI_RESTART_COUNT\n\
             (TORCHELASTIC_RESTART_COUNT with -ml-env)",
        )
    },
    flag(
        &["-auto-cleanup"],
        "end the job when one process fails (the default)",
    ),
    Opt {
        aliases: &["-get-stack-traces"],
        ..flag(
            &["-timeout-stacks"],
            "when MPIEXEC_TIMEOUT fires, also print the stack of every rank\n\
             that is stuck (at most 8 per host; needs eu-stack or gdb there)",
        )
    },
    flag(
        &["-v", "-verbose"],
        "log what kauri does, and say how far the job's start has come:\n\
         each phase's line once it completes, at most one line a second\n\
         in between ('kauri: agents 3/8 connected (level 1: 2/2, level 2:\n\
         1/6 with 3 launching)', 'kauri: ranks 16/16 started, 9/16 through\n\
         PMI init', 'kauri: fence 0 complete, 16/16 ranks'); repeat for\n\
         more: -v -v adds the PMI wire trace, KAURI_PMI_TRACE",
    ),
    Opt {
        names: &["--profile"],
        aliases: &[],
        arg: Arg::OptionalEquals("json|trace"),
        values: Values::Words(&["text", "json", "trace"]),
        help: "at exit, print on stderr when each phase of the job happened\n\
               (agents launched per tree level, ranks forked, PMI init, each\n\
               fence's time and bytes, finalize, teardown): a table, or JSON;\n\
               trace: write each host's timeline to kauri-PID.trace.json as\n\
               Chrome trace events (ui.perfetto.dev, chrome://tracing)",
    },
    flag(&["-h", "--help"], "this text"),
    flag(
        &["--help-env"],
        "the variables every process gets, and Hydra's that kauri reads",
    ),
    Opt {
        aliases: &["-V"],
        ..flag(&["--version"], "kauri's version, git commit and build date")
    },
    flag(
        &["-info"],
        "what this kauri serves and was built with: PMI and PMIx versions,\n\
         launchers, resource managers, binding, PMI client libraries",
    ),
    flag(&["--json"], "with -info: print it as one JSON object"),
    Opt {
        names: &["--help-man"],
        aliases: &[],
        arg: Arg::OptionalWord("PAGE"),
        values: Values::Pages,
        help: "print the manual page PAGE in roff: kauri (the default), or\n\
               kauri-SUBCOMMAND (kauri-kvs, ...; see its SEE ALSO)",
    },
    Opt {
        values: Values::Words(&["bash", "zsh", "fish"]),
        ..with(
            &["--completions"],
            "SHELL",
            "print the completion script for bash, zsh or fish",
        )
    },
];

/// What programs type, not people: shown in the manual page, not by `-h`.
const INTERNAL: &[Opt] = &[with(
    &["-pmi_args"],
    "PORT IFACE KEY PID",
    "serve a program started without a launcher (a singleton) that\n\
     needs one: MPICH's PMI-1 client runs 'mpiexec -pmi_args ...' from\n\
     PATH (see contrib/mpiexec)",
)];

/// Open MPI's and Hydra's spellings kauri takes (`crate::cli::habits`).
const HABITS: &[Opt] = &[
    with(&["-c"], "N", "Open MPI's -np: number of processes"),
    with(
        &["-N", "--npernode"],
        "N",
        "Open MPI's processes per node: -ppn N",
    ),
    with(
        &["-x"],
        "NAME[=VALUE]",
        "Open MPI's export: -genv NAME VALUE (kauri's own value if none; a warning if kauri has none)",
    ),
    with(
        &["--mca", "--gmca"],
        "KEY VALUE",
        "Open MPI's parameter: OMPI_MCA_KEY=VALUE for every rank",
    ),
    flag(
        &["--tag-output"],
        "Open MPI's -l: prefix every line with [RANK]",
    ),
    with(
        &["--timeout", "-timeout"],
        "SECS",
        "end the job after SECS seconds, as MPIEXEC_TIMEOUT (which it\n\
         overrides)",
    ),
    flag(
        &["--merge-stderr-to-stdout"],
        "each rank's stderr is its stdout, as Open MPI gives it",
    ),
    Opt {
        aliases: &["-print-rank-map"],
        ..flag(
            &["--display-map"],
            "print which ranks each host runs, before they start",
        )
    },
    flag(
        &["-print-all-exitcodes"],
        "Hydra's: print every rank's exit status at the end",
    ),
    flag(
        &["--oversubscribe", "--allow-run-as-root"],
        "Open MPI's; what kauri always does (more ranks than slots run;\n\
         root may run jobs)",
    ),
    with(
        &["--stdin"],
        "0",
        "Open MPI's: stdin goes to rank 0, as it always does in kauri",
    ),
    with(
        &["--output-filename", "-gdb"],
        "...",
        "refused, with kauri's own spelling (-outfile-pattern; a debugger\n\
         per rank, or MPIR)",
    ),
];

const ENVIRONMENT: &[Item] = &[
    Item {
        label: "MPIEXEC_TIMEOUT=SECS",
        help: "end the job after SECS seconds (exit status 255)",
    },
    Item {
        label: "HYDRA_HOST_FILE, HYDRA_LAUNCHER, HYDRA_LAUNCHER_EXEC, HYDRA_LAUNCHER_EXTRA_ARGS,\n\
                HYDRA_ENV, MPIEXEC_PORT_RANGE, MPIEXEC_PREFIX_DEFAULT, I_MPI_HYDRA_*",
        help: "Hydra's variables, where the command line says nothing (see\n--help-env)",
    },
    Item {
        label: "KAURI_KILL_GRACE=SECS",
        help: "grace between SIGTERM and SIGKILL at teardown (default 3)",
    },
    Item {
        label: "KAURI_TEARDOWN_WAIT=SECS",
        help: "after the kill, how long to wait for silent agents (default 5)",
    },
    Item {
        label: "KAURI_HEARTBEAT=SECS",
        help: "heartbeat period on every tree link (default 5)",
    },
    Item {
        label: "KAURI_HEARTBEAT_TIMEOUT=SECS",
        help: "a tree link silent this long is lost (default 30; 0: never)",
    },
    Item {
        label: "KAURI_SYSFS_ROOT=DIR",
        help: "read each host's CPUs and GPUs below DIR instead of / (%h: the\n\
               host's name), for tests on fake /sys trees",
    },
    Item {
        label: "KAURI_PMIX_LIBRARY=FILE",
        help: "the OpenPMIx library (libpmix.so.2) the PMIx servers load;\n\
               by default the one the job's programs load when it is not\n\
               the system's (Open MPI 5 from pip), else the system's",
    },
    Item {
        label: "KAURI_PMIX_GROUPS=0|1",
        help: "serve PMIx groups (PMIx_Group_construct) or not; by default\n\
               on with OpenPMIx 5 and off with 4.2, whose reply Open MPI\n\
               5's client cannot read",
    },
    Item {
        label: "KAURI_TREE_WIDTH=K",
        help: "the tree width, like -tree-width",
    },
    Item {
        label: "KAURI_SPAWN_MAX=N",
        help: "the most processes one spawn may start (default 65536); a\n\
               spawn beyond the universe size oversubscribes the hosts",
    },
    Item {
        label: "KAURI_USIZE=N",
        help: "the universe size, like -usize (a singleton's only way to set it)",
    },
    Item {
        label: "KAURI_LAUNCH_COST=S,L",
        help: "for -tree-width cost: a launch's serial and total cost in ms\n\
               (default: measured by one launch of 'kauri --version')",
    },
    Item {
        label: "KAURI_LAUNCHER_ARGS=..",
        help: "extra arguments for the launcher (e.g. ssh options; before\n\
               HYDRA_LAUNCHER_EXTRA_ARGS)",
    },
    Item {
        label: "KAURI_AGENT_PATH=PATH",
        help: "kauri's path on the other hosts (default: this kauri's path)",
    },
    Item {
        label: "KAURI_ADDR=IP",
        help: "the address agents connect back to (default: the local address\n\
               of the route to the first remote host)",
    },
    Item {
        label: "KAURI_CONNECT_TIMEOUT=S",
        help: "how long an agent has to connect back (default 60)",
    },
    Item {
        label: "KAURI_PROFILE=1|json|trace",
        help: "like --profile, --profile=json",
    },
    Item {
        label: "KAURI_PMI_TRACE=1",
        help: "log every PMI request and reply of every rank, with the rank\n\
               and the time, on stderr (also -v -v); not PMIx's",
    },
    Item {
        label: "KAURI_NAMESERVER_KEY=S",
        help: "the secret a 'kauri nameserver -key S' wants (sent by -nameserver;\n\
               the name server reads it too, in place of -key)",
    },
];

/// `kauri --help-env`: the variables ranks get, and Hydra's that kauri reads.
const HELP_ENV: &[Block] = &[
    Block::Para("Every process kauri starts gets these variables:"),
    Block::List(
        26,
        &[
            Item {
                label: "PMI_RANK, PMI_SIZE",
                help: "its rank and the job's size (also for PMI clients)",
            },
            Item {
                label: "PMI_FD",
                help: "its PMI socket (or PMI_PORT and PMI_ID with -pmi-port)",
            },
            Item {
                label: "MPI_LOCALNRANKS",
                help: "how many ranks run on its host (as Hydra sets it)",
            },
            Item {
                label: "MPI_LOCALRANKID",
                help: "its index among them",
            },
        ],
    ),
    Block::Note(
        "(a PMIx job (--pmi=pmix) gets none of the five above but PMIX_NAMESPACE, PMIX_RANK,\n\
         PMIX_SERVER_URI*, ... from its host's PMIx server instead)",
    ),
    Block::List(
        26,
        &[
            Item {
                label: "KAURI_RANK",
                help: "its rank, 0 to KAURI_SIZE-1",
            },
            Item {
                label: "KAURI_SIZE",
                help: "the number of ranks",
            },
            Item {
                label: "KAURI_LOCAL_RANK",
                help: "its index among the ranks on its host",
            },
            Item {
                label: "KAURI_LOCAL_SIZE",
                help: "the number of ranks on its host",
            },
            Item {
                label: "KAURI_NODE",
                help: "the index of its host among the job's hosts, 0 to KAURI_NODES-1",
            },
            Item {
                label: "KAURI_NODES",
                help: "the number of hosts that run ranks",
            },
            Item {
                label: "KAURI_HOST",
                help: "its host's name, as given to kauri",
            },
            Item {
                label: "KAURI_HOSTS",
                help: "every host's name, comma-separated, in KAURI_NODE order",
            },
            Item {
                label: "KAURI_JOBID",
                help: "the job's id (also its PMI kvsname)",
            },
            Item {
                label: "KAURI_RESTART_COUNT",
                help: "with -max-restarts: restarts before this attempt (0 in the first)",
            },
            Item {
                label: "KAURI_KEEPER",
                help: "a mark of the kauri (or agent) that started it: if that process dies\n\
                       without its teardown, even by SIGKILL, its keeper ends every process\n\
                       of this user whose environment holds the mark",
            },
            Item {
                label: "MPIR_CVAR_CH3_INTERFACE_HOSTNAME",
                help: "its host's name as given (127.0.0.1 for simulated hosts), as\n\
                       Hydra sets it: MPICH's ch3 listens and connects there (not set over\n\
                       a value the job's environment already has)",
            },
        ],
    ),
    Block::Para(
        "With -ml-env, also what torchrun sets for each worker (its meaning in\n\
         torchrun, then kauri's), and what jax.distributed.initialize() reads. Each\n\
         host's ranks are numbered consecutively (Hydra's count per host, host by\n\
         host: -hosts a,b -n 4 is a: 0,1 and b: 2,3) unless -map-by or -ppn is\n\
         given, so that RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK. A variable\n\
         given with -genv, -env or -envlist wins; one inherited from an outer\n\
         launcher (RANK, ..., TORCHELASTIC_ERROR_FILE, OMPI_*) is dropped.",
    ),
    Block::List(
        26,
        &[
            Item {
                label: "RANK, WORLD_SIZE",
                help: "global rank, job size: KAURI_RANK, KAURI_SIZE",
            },
            Item {
                label: "LOCAL_RANK",
                help: "its rank on its node: KAURI_LOCAL_RANK",
            },
            Item {
                label: "LOCAL_WORLD_SIZE",
                help: "workers on its node (nproc_per_node): KAURI_LOCAL_SIZE",
            },
            Item {
                label: "GROUP_RANK",
                help: "its node's index (node_rank): its host's index among the\n\
                       job's hosts that run ranks, KAURI_NODE",
            },
            Item {
                label: "GROUP_WORLD_SIZE",
                help: "the number of nodes: of hosts with ranks, KAURI_NODES",
            },
            Item {
                label: "ROLE_RANK",
                help: "its rank among workers of its role: = RANK (one role)",
            },
            Item {
                label: "ROLE_NAME",
                help: "the workers' role: default",
            },
            Item {
                label: "ROLE_WORLD_SIZE",
                help: "workers of its role: = WORLD_SIZE",
            },
            Item {
                label: "MASTER_ADDR",
                help: "where rank 0's TCPStore listens: rank 0's host, 127.0.0.1 when it is\n\
                       this machine (or a simulated host), else its name as given",
            },
            Item {
                label: "MASTER_PORT",
                help: "a TCP port that was free when the job started, reserved until the\n\
                       job ends against every other kauri job started on this machine;\n\
                       the agent of rank 0's host checks it there and fails the job if it\n\
                       is taken",
            },
            Item {
                label: "TORCHELASTIC_RUN_ID",
                help: "the rendezvous' run id: the job's id, KAURI_JOBID (with\n\
                       -max-restarts, one id for every attempt)",
            },
            Item {
                label: "TORCHELASTIC_RESTART_COUNT",
                help: "restarts so far: 0, then 1, 2, ... with -max-restarts (each\n\
                       restart starts every rank again)",
            },
            Item {
                label: "TORCHELASTIC_MAX_RESTARTS",
                help: "restarts allowed: -max-restarts's N (0 without it)",
            },
            Item {
                label: "TORCHELASTIC_USE_AGENT_STORE",
                help: "whether the agent hosts the TCPStore: False, kauri hosts none,\n\
                       so rank 0 creates it at MASTER_ADDR:MASTER_PORT (env://)",
            },
            Item {
                label: "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                help: "NCCL aborts on a failed collective: 1, unless the environment\n\
                       sets it",
            },
            Item {
                label: "OMP_NUM_THREADS",
                help: "1 for ranks that share their host with another rank of the job,\n\
                       unless the environment sets it (and -v says which hosts), as\n\
                       torchrun does when it starts more than one worker per node",
            },
            Item {
                label: "JAX_COORDINATOR_ADDRESS",
                help: "JAX's coordinator: MASTER_ADDR:MASTER_PORT (a program that\n\
                       starts both torch.distributed and jax.distributed must move one)",
            },
            Item {
                label: "OMPI_COMM_WORLD_SIZE",
                help: "with _RANK, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK and the marker\n\
                       OMPI_MCA_orte_hnp_uri (0.0;tcp://MASTER_ADDR:MASTER_PORT): what\n\
                       JAX's Open MPI cluster reads its process count, id and local\n\
                       device from, as under mpirun. Not in a job kauri serves PMIx or\n\
                       Flux's PMI (Open MPI's): Open MPI 4.1 parses the marker as its\n\
                       mpirun's address",
            },
        ],
    ),
    Block::Note(
        "TORCHELASTIC_ERROR_FILE is not set: with it, torch's @record writes a\n\
         failing worker's traceback to that file for an agent to read, and kauri\n\
         reads none; the traceback goes to the rank's stderr instead.",
    ),
    Block::Para(
        "With -with-ft ulfm, also the MPIs' fault-tolerance switches, each unless\n\
         the environment sets it:",
    ),
    Block::List(
        26,
        &[
            Item {
                label: "OMPI_MCA_mpi_ft_enable",
                help: "1: Open MPI 5's ULFM (mpirun --with-ft ulfm gives the same)",
            },
            Item {
                label: "MPIR_CVAR_ENABLE_FT",
                help: "1: MPICH's fault tolerance (MPICH's own ft tests set it)",
            },
        ],
    ),
    Block::Para(
        "With -gpus-per-proc or -gpu-bind, each rank's GPUs, unless its environment\n\
         chooses them itself (sets one of these or HIP_VISIBLE_DEVICES):",
    ),
    Block::List(
        26,
        &[
            Item {
                label: "CUDA_VISIBLE_DEVICES",
                help: "its NVIDIA GPUs, with CUDA_DEVICE_ORDER=PCI_BUS_ID (under\n\
                       -ml-env: every GPU, its own at position LOCAL_RANK)",
            },
            Item {
                label: "ROCR_VISIBLE_DEVICES",
                help: "its AMD GPUs (HIP_VISIBLE_DEVICES is left alone)",
            },
            Item {
                label: "ZE_AFFINITY_MASK",
                help: "its Intel GPUs",
            },
        ],
    ),
    Block::Para(
        "From a shell script running as a rank, `kauri kvs` reaches the job's key-value store over the\n\
         rank's own PMI connection:",
    ),
    Block::List(30, KVS_COMMANDS),
    Block::Para(
        "Calls from one rank share its PMI socket: run them one after another, not in parallel. A\n\
         program that starts `kauri kvs` must pass PMI_FD on (Python: subprocess's close_fds=False, or\n\
         pass_fds=[int(os.environ[\"PMI_FD\"])]). A rank may exit after any call, but a rank that\n\
         exits while others wait in a fence it never entered ends the job.",
    ),
    Block::Para(
        "Kauri itself reads Hydra's variables, as mpiexec.hydra 4 does: the command line first, then\n\
         the variable (of several names, the first set wins):",
    ),
    Block::List(
        26,
        &[
            Item {
                label: "HYDRA_HOST_FILE, I_MPI_HYDRA_HOST_FILE",
                help: "the hosts, from a file as with -f (not with -f or -hosts; before\n\
                       a Slurm or PBS allocation)",
            },
            Item {
                label: "HYDRA_LAUNCHER, HYDRA_BOOTSTRAP, I_MPI_HYDRA_BOOTSTRAP",
                help: "the launcher, as -launcher",
            },
            Item {
                label: "HYDRA_LAUNCHER_EXEC, HYDRA_BOOTSTRAP_EXEC, I_MPI_HYDRA_BOOTSTRAP_EXEC",
                help: "the launcher's program, as -launcher-exec",
            },
            Item {
                label: "KAURI_LAUNCHER_ARGS, HYDRA_LAUNCHER_EXTRA_ARGS, I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                help: "extra arguments for the launcher command (ssh options, say);\n\
                       Hydra's names are split on spaces",
            },
            Item {
                label: "HYDRA_ENV=all|none",
                help: "which of kauri's variables ranks inherit, as -genvall/-genvnone\n\
                       (not with -genvall, -genvnone, -genvlist, or a segment's -env*)",
            },
            Item {
                label: "MPIEXEC_PORT_RANGE=LOW:HIGH",
                help: "every TCP port kauri listens on (agent ports, -pmi-port's PMI\n\
                       ports, PMIx servers; -ml-env's MASTER_PORT) is taken from this\n\
                       range (a port handed to a program, MASTER_PORT, stays reserved\n\
                       against other kauri jobs until the job ends, as it is without a\n\
                       range; a range with no port left fails the job); Hydra's other\n\
                       names are read first: MPIR_CVAR_CH3_PORT_RANGE,\n\
                       MPIR_PARAM_CH3_PORT_RANGE, MPICH_CH3_PORT_RANGE, MPIR_CVAR_PORTRANGE,\n\
                       MPIR_CVAR_PORT_RANGE, MPIR_PARAM_PORTRANGE, MPIR_PARAM_PORT_RANGE,\n\
                       MPICH_PORTRANGE, MPICH_PORT_RANGE, MPIEXEC_PORTRANGE",
            },
            Item {
                label: "MPIEXEC_PREFIX_DEFAULT",
                help: "when set, output lines get the [rank] prefix, as with -l",
            },
            Item {
                label: "MPIEXEC_TIMEOUT=SECS",
                help: "end the job after SECS seconds",
            },
            Item {
                label: "KAURI_NAMESERVER, HYDRA_NAMESERVER",
                help: "the name server, as -nameserver",
            },
        ],
    ),
    Block::Tail("(kauri -h lists kauri's own KAURI_* variables.)"),
];

/// The commands of `kauri kvs`.
const KVS_COMMANDS: &[Item] = &[
    Item {
        label: "kauri kvs put KEY VALUE",
        help: "publish a pair to every rank at once (no fence needed)",
    },
    Item {
        label: "kauri kvs get KEY [--wait]",
        help: "print a value; --wait waits until some rank has put it",
    },
    Item {
        label: "kauri kvs fence",
        help: "wait until every rank has called fence (a job-wide barrier)",
    },
    Item {
        label: "kauri kvs barrier",
        help: "the same",
    },
];

/// `kauri(1)`.
pub static KAURI: Page = Page {
    name: "kauri",
    section: 1,
    summary: "launch parallel programs and serve them PMI-1, PMI-2 or PMIx (a drop-in for mpiexec.hydra)",
    synopsis: &[
        Item {
            label: "kauri [global options] [local options] PROGRAM [ARGS...] [: [local options] PROGRAM [ARGS...]]...",
            help: "",
        },
        Item {
            label: "kauri nameserver [-port P] [-bind ADDR] [-key SECRET]",
            help: "serve MPI names to several kauri runs",
        },
        Item {
            label: "kauri kvs put|get|fence|barrier ...",
            help: "a rank's key-value store from a shell",
        },
        Item {
            label: "kauri pmi [--method M] [-v] [--timing] barrier|exchange|get KEY",
            help: "check a launcher's PMI as every rank of a\njob (any launcher; kauri pmi -h)",
        },
        Item {
            label: "kauri --status [--stacks] [PID]",
            help: "where the ranks of your running jobs are\n(and their stacks), from another shell",
        },
        Item {
            label: "kauri -info [--json]",
            help: "what this kauri serves and was built with",
        },
        Item {
            label: "kauri --help-man [PAGE] | --completions bash|zsh|fish",
            help: "its manual pages, its shell completions",
        },
    ],
    description: &[
        "Kauri launches parallel programs and serves them PMI-1, PMI-2 and PMIx side by side,\n\
         each rank speaking its MPI's: MPICH, Intel MPI and MVAPICH as under mpiexec.hydra,\n\
         Open MPI 4 and 5 as under mpirun. Hydra's options are kauri's, and most of\n\
         mpirun's are taken too.",
    ],
    details: &[
        "The command line is Hydra's: options are single-dash words (-genv, -ppn); the GNU \
         spellings --genv and --np=4 are accepted too, and names are matched without regard \
         to case. Options before a segment's program apply to that segment (-n, -env*) or to \
         the whole job (-genv*, -hosts, -f, -ppn, -l, ...); a lone : starts the next MPMD \
         segment; -configfile reads segments one per line. Everything after a segment's \
         program, up to :, is the program's own arguments.",
        "On several hosts, kauri starts one agent per host (kauri-agent(1)) through the \
         launcher, in a tree; the agents start the ranks and serve them PMI. Inside a Slurm, \
         Grid Engine, LSF or PBS job, the allocation's hosts and launcher are the default.",
        "A host named more than once is one host with the slots of all its entries: a remote \
         name given twice, and every entry that is this machine by any of its names or \
         addresses (localhost, 127.0.0.1, its host name, an address of one of its \
         interfaces, a name that resolves to one), which kauri serves itself, never through \
         the launcher. Ranks fill the entries' slots in the list's order, as Hydra's do: \
         -hosts a,b,a -n 3 puts ranks 0 and 2 on a. Under -launcher fork host names are \
         labels: two labels are two simulated hosts.",
        "kauri --status asks the kauri jobs of this user on this host (or the one with that \
         pid) where their ranks are: in which fence, which have ended; which hosts' agents the \
         launcher is still starting, and for how long (host b: agent being launched for 3.2 s \
         (ssh)), apart from the hosts whose agent is up but did not answer; --stacks adds each \
         stuck rank's stack. kauri nameserver (kauri-nameserver(1)) and kauri kvs \
         (kauri-kvs(1)) have pages of their own.",
    ],
    options: &[
        OptSection {
            title: "Local options (per MPMD segment)",
            in_help: true,
            opts: LOCAL,
        },
        OptSection {
            title: "Global options",
            in_help: true,
            opts: GLOBAL,
        },
        OptSection {
            title: "Open MPI's and Hydra's other spellings",
            in_help: true,
            opts: HABITS,
        },
        OptSection {
            title: "Used by programs, not typed",
            in_help: false,
            opts: INTERNAL,
        },
    ],
    environment: ENVIRONMENT,
    environment_more: HELP_ENV,
    exit_status: &[
        Item {
            label: "0",
            help: "every rank exited 0",
        },
        Item {
            label: "N",
            help: "a rank failed: N is the highest exit status among the ranks, a rank killed by a \
                   signal counting as its number (as Hydra reports a segfault as 11); after an abort \
                   (PMI_Abort, MPI_Abort), the abort code modulo 256",
        },
        Item {
            label: "128+N",
            help: "kauri itself got signal N (130 for SIGINT, 143 for SIGTERM); 141 when its \
                   standard output closed",
        },
        Item {
            label: "255",
            help: "kauri's own error: a bad command line, MPIEXEC_TIMEOUT ran out, a launch \
                   failed, a host was lost or a fence can never complete (when no rank's \
                   status says more)",
        },
        Item {
            label: "--status",
            help: "kauri --status exits 0 when a job answered, 1 when none did, 255 on bad \
                   arguments",
        },
    ],
    examples: &[
        Example {
            command: "kauri -n 4 ./a.out",
            what: "Four ranks on this host.",
        },
        Example {
            command: "kauri -hosts n1:4,n2:4 -l ./a.out",
            what: "Eight ranks over two hosts reached by ssh, each output line prefixed with \
                   its rank.",
        },
        Example {
            command: "kauri -f hosts -ppn 2 -bind-to core ./a.out",
            what: "Two ranks on each host of the file hosts, each bound to a core.",
        },
        Example {
            command: "kauri -n 1 ./server : -n 3 ./client",
            what: "An MPMD job: rank 0 runs ./server, ranks 1 to 3 ./client.",
        },
        Example {
            command: "kauri -n 4 python3 prog.py",
            what: "An mpi4py program, whichever MPI it loads (MPICH, Open MPI, Intel MPI): \
                   nothing to choose.",
        },
        Example {
            command: "kauri -H n1:4,n2:4 -x OMP_NUM_THREADS=2 --tag-output ./a.out",
            what: "The same job typed as for Open MPI's mpirun.",
        },
        Example {
            command: "MPIEXEC_TIMEOUT=60 kauri -timeout-stacks -n 8 ./a.out",
            what: "End the job after a minute, printing the stacks of the ranks that hang.",
        },
        Example {
            command: "kauri --status --stacks",
            what: "From another shell: where the ranks of the running jobs are.",
        },
    ],
    see_also: &[
        "kauri-agent(1)",
        "kauri-nameserver(1)",
        "kauri-kvs(1)",
        "kauri-pmi(1)",
        "mpiexec(1)",
        "srun(1)",
        "ssh(1)",
    ],
    words: &["nameserver", "kvs", "pmi", "--status"],
};
