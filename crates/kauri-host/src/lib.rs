//! One host's ranks: the [`node::Node`] that starts them, serves their PMI connections and
//! PMIx upcalls and reports their ends; the processes themselves ([`proc`], [`spawn`],
//! [`keeper`]), their output ([`iofwd`], [`output`]), binding ([`bind`]), the hardware
//! topology handed to them ([`topology`]), and the debugger interface ([`mpir`]);
//! what goes wrong in each ([`error`]).
//! The root and every agent run one `Node` for their host. The crate uses only the crates
//! below it (the core, `kauri-os`, `kauri-proto`, `pmi-wire`); the `kauri` crate re-exports it
//! as `kauri::host`.

#![warn(missing_docs)]

#[macro_use]
extern crate kauri_os;

pub mod bind;
pub mod error;
pub mod events;
pub mod gpu;
pub mod iofwd;
pub mod keeper;
pub mod mpir;
pub mod node;
pub mod ompi;
pub mod output;
pub mod proc;
pub mod spawn;
pub mod topology;
