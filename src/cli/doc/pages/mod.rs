//! The pages: `kauri(1)`, `kauri-agent(1)`, `kauri-nameserver(1)`, `kauri-kvs(1)`.
//!
//! `kauri -h` is rendered from [`KAURI`]; its `help` strings carry the line breaks `-h` has
//! always had. `kauri --help-env` is [`KAURI`]'s `environment_more`.

use super::{Arg, Opt, Values};

mod agent;
mod kauri;
mod kvs;
mod nameserver;
mod pmi;

pub use agent::KAURI_AGENT;
pub use kauri::KAURI;
pub use kvs::KAURI_KVS;
pub use nameserver::KAURI_NAMESERVER;
pub use pmi::KAURI_PMI;

/// The topology objects `-bind-to` takes.
pub const OBJECTS: &[&str] = &[
    "none", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa",
];

/// What `-map-by` takes: hosts or slots, or the topology objects.
pub const MAP_BY: &[&str] = &[
    "node", "slot", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa",
];

/// An option without a value.
const fn flag(names: &'static [&'static str], help: &'static str) -> Opt {
    Opt {
        names,
        aliases: &[],
        arg: Arg::None,
        values: Values::Any,
        help,
    }
}

/// An option followed by its value, `meta` (one or more words).
const fn with(names: &'static [&'static str], meta: &'static str, help: &'static str) -> Opt {
    Opt {
        names,
        aliases: &[],
        arg: Arg::Words(meta),
        values: Values::Any,
        help,
    }
}
