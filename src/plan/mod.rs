//! What a job is and where it runs. The plan's types and words are the core's
//! ([`kauri_core::plan`], re-exported here); this folder builds them: the run's hosts as
//! machines ([`hosts`]), the plan's construction ([`build`]) and a spawned job's placement
//! ([`spawn`]).

pub use kauri_core::plan::*;

pub mod build;
pub mod hosts;
pub mod spawn;
