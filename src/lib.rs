//! Kauri: a process manager for parallel programs, a drop-in for `mpiexec.hydra`.
//!
//! A request flows through these layers (arrows point down only):
//!
//! ```text
//!  cli        the Hydra command line -> JobSpec
//!  job        JobSpec, placement, PMI_process_mapping
//!  frontend   the job on this host: starts ranks, serves PMI, forwards stdio and signals,
//!             tears down, computes the exit status
//!   ├── proc    rank processes: program lookup, environment, PMI socket, process groups
//!   ├── iofwd   whole-line stdout/stderr forwarding, stdin to rank 0
//!   ├── pmi     the sans-IO PMI engine: requests in, effects out
//!   └── kvs     one job's key-value store: pending puts, committed pairs
//!  pmi-wire   (crate) the PMI-1 and PMI-2 codecs
//! ```
//!
//! A rank's PMI request arrives on its socket, is decoded by [`pmi::Framing`], handled by the
//! [`pmi::Engine`], and the engine's outputs are replies to write or events (fence ready,
//! abort, finalize) that the front end acts on.

pub mod cli;
pub mod frontend;
pub mod iofwd;
pub mod job;
pub mod kvs;
pub mod pmi;
pub mod proc;
