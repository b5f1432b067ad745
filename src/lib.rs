//! Kauri: a process manager for parallel programs, a drop-in for `mpiexec.hydra`.
//!
//! A request flows through these layers (arrows point down only):
//!
//! ```text
//!  cli          the Hydra command line -> JobSpec; allocation: hosts from Slurm, Grid
//!               Engine, LSF or PBS; hydra_env: what Hydra's variables
//!               (HYDRA_HOST_FILE, ...) add to it
//!  console      kauri's own messages on stdout and stderr, with no panic on a closed pipe
//!  doc          the pages: -h, the manual pages and the shell completions, from one table
//!  info         --version and -info: the build stamp, what kauri serves and was built with
//!  job          JobSpec, placement, PMI_process_mapping
//!  frontend     the root of the tree: plans the job, prints output, decides teardown and
//!               the exit status
//!  agent        `kauri agent`, one per other host: relays between its parent, its children
//!               and its host's ranks
//!   ├── hub       a parent's links to its child agents; the fence gather
//!   ├── launch    Launcher plugins: fork, ssh/rsh, slurm, sge, lsf, pbs
//!   ├── tree      the links' vocabulary: messages (msg), framing (frame), the job-key
//!   │             handshake (auth), the tree's shape (shape)
//!   ├── node      one host's ranks: start, serve PMI, forward output, report ends
//!   │   ├── rank_env  the variables kauri sets for one rank: a pure function of the plan
//!   │   └── peer    the uid owning the other end of a loopback connection (`-pmi-port`)
//!   ├── proc      rank processes: program lookup, environment, PMI socket, process groups
//!   ├── iofwd     whole-line stdout/stderr forwarding, stdin to rank 0
//!   ├── output    the output options: Hydra's patterns, `-output-from`, the output files
//!   ├── profile   the startup profile (`--profile`): per-host records, the job's phases
//!   ├── nameserver  publish/lookup: the run's table, `kauri nameserver`, its client
//!   ├── pmi       the sans-IO PMI engine: requests in, effects out
//!   ├── pmi_cli   `kauri pmi`: a PMI client for checking a launcher's PMI (any method)
//!   ├── service   requests only the front end answers (spawn, publish, lookup), their replies
//!   ├── plan      the job plan sent down the tree: the job, each host's ranks, the subtrees
//!   ├── pmix      the PMIx server (OpenPMIx library, by FFI) for PMIx jobs
//!   ├── ports     the TCP ports kauri listens on, inside MPIEXEC_PORT_RANGE when set
//!   ├── ompi      the trace an Open MPI process that ran alone leaves (a mis-wired job)
//!   └── kvs       one job's key-value store: pending puts, committed pairs
//!  pmi-wire     (crate) the PMI-1 and PMI-2 codecs
//! ```
//!
//! A rank's PMI request arrives on its socket, is decoded by [`pmi::Framing`] and handled by
//! its host's [`pmi::Engine`]; most requests are answered on the spot from the host's copy of
//! the KVS. A fence is gathered up the tree (each agent sends one merged contribution) and the
//! merged delta comes back down to every host's engine, which releases its ranks.

#![warn(missing_docs)]

#[macro_use]
pub mod console;
pub mod agent;
pub mod allocation;
pub mod bind;
pub mod branch;
pub mod cli;
pub mod doc;
pub mod events;
pub mod frontend;
pub mod hub;
pub mod hydra_env;
pub mod iface;
pub mod info;
pub mod iofwd;
pub mod job;
pub mod keeper;
pub mod kvs;
pub mod kvs_cli;
pub mod launch;
pub mod mpir;
pub mod nameserver;
pub mod node;
pub mod ompi;
pub mod output;
pub mod peer;
pub mod plan;
pub mod pmi;
pub mod pmi_cli;
pub mod pmix;
pub mod policy;
pub mod ports;
pub mod proc;
pub mod profile;
pub mod rank_env;
pub mod service;
pub mod status;
pub mod tree;
