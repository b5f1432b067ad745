//! Kauri: a process manager for parallel programs, a drop-in for `mpiexec.hydra`.
//!
//! This crate is the command line: its one folder, `cli`, holds the command lines, their pages
//! and the client commands (kvs, pmi, --status), and the `kauri` binary (`main.rs`) picks the
//! role. Everything else is in crates below it, each re-exported under its layer's name and
//! listed here from the top down; each uses only those after it in this list, and cargo
//! refuses an import the other way (`docs/design.md` walks a request through them;
//! `tests/layers.rs` checks what cargo cannot: the core does no I/O, and no launcher is named
//! outside the launchers' crate):
//!
//! ```text
//!  tree      (kauri-tree) the tree of agents: messages (core), shape (core), fence gathers
//!            (core), policy (core), the Branch, links, the hub, the agent, the root, the
//!            status socket
//!  host      (kauri-host) one host's ranks: the Node (rank start-up, the PMI connection,
//!            PMIx upcalls), processes, the keeper, output, forwarding, binding, MPIR
//!  plan      (kauri-plan) what a job is and how it is placed: JobSpec and its words, the
//!            plan sent down the tree, each rank's variables (the core's), the run's hosts,
//!            the plan's construction, spawn planning
//!  proto     (kauri-proto) the PMIx server and the name service (the PMI engine, the
//!            KVS, the service requests and the rank-end record are the core's)
//!  launch    (kauri-launch) how an agent reaches a host: the launchers, allocations,
//!            Hydra's variables (the launcher kinds and their facts are the core's)
//!  os        (kauri-os) what kauri asks of its machine: names, interfaces, ports, loopback
//!            peers, programs and their libraries, clocks; and `console`, kauri's own words
//!            on stdout and stderr
//!  core      (kauri-core) every state and decision with no I/O
//!  pmi-wire  the PMI-1 and PMI-2 codecs and a blocking client
//! ```
//!
//! A rank's PMI request arrives on its socket ([`host::node`]), is decoded by
//! [`proto::pmi::Framing`] and handled by its host's [`proto::pmi::Engine`]; most requests are
//! answered on the spot from the host's copy of the KVS. A fence is gathered up the tree (each
//! agent sends one merged contribution) and the merged delta comes back down to every host's
//! engine, which releases its ranks.

#![warn(missing_docs)]

#[macro_use]
pub extern crate kauri_os as os;

pub use os::console;
pub use os::{say, show};
pub mod cli;
pub use kauri_host as host;
pub use kauri_launch as launch;
pub use kauri_plan as plan;
pub use kauri_proto as proto;
pub use kauri_tree as tree;
