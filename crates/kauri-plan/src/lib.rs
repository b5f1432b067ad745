//! What a job is and where it runs, as the front end works it out. The plan's types and words
//! are the core's ([`kauri_core::plan`], re-exported here); this crate builds them, with the
//! front end's I/O (the environment, the programs' files, the launcher timed, the ports
//! reserved): the run's hosts as machines ([`hosts`]), the plan's construction ([`build`])
//! and a spawned job's placement ([`spawn`]). The `kauri` crate re-exports it as
//! `kauri::plan`.

#![warn(missing_docs)]

#[macro_use]
extern crate kauri_os;

pub use kauri_core::plan::*;

pub mod build;
pub mod hosts;
pub mod spawn;

#[cfg(test)]
mod testing;
