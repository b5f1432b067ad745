//! The protocols kauri serves to ranks: PMI-1 and PMI-2 (the sans-IO engine [`pmi`] over the
//! host's copy of the key-value store [`kvs`]), PMIx ([`pmix`], OpenPMIx's server library by
//! FFI), and the name service ([`nameserver`]). [`service`] is the vocabulary of requests that
//! only the front end can answer (spawn, publish, lookup), shared by PMI and PMIx. [`rank`]
//! is the record of a rank's end, from the host that saw it to the front end. The state and
//! decisions are the core's (`kauri_core::proto`, re-exported here); this crate holds the
//! servers that do I/O, and the `kauri` crate re-exports it as `kauri::proto`.

#![warn(missing_docs)]

#[macro_use]
extern crate kauri_os;

pub use kauri_core::proto::{kvs, pmi, rank, service};

pub mod nameserver;
pub mod pmix;

pub use kauri_os::trace::enabled as trace_enabled;
