//! How a job's ranks are bound, as `-bind-to` and `-map-by` say it and the plan carries it:
//! the kinds of topology object ([`Kind`]) and a job's [`Binding`]. Plain data and parsing;
//! reading a host's topology and binding its ranks are `host::bind`'s.

use serde::{Deserialize, Serialize};

/// A kind of topology object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// A hardware thread (a CPU as Linux numbers them).
    HwThread,
    /// A core: the hardware threads that share one.
    Core,
    /// The CPUs sharing one level-1 cache.
    L1,
    /// The CPUs sharing one level-2 cache.
    L2,
    /// The CPUs sharing one level-3 cache.
    L3,
    /// A NUMA node.
    Numa,
    /// A socket (package).
    Socket,
}

impl Kind {
    /// Reads a kind as Hydra spells it (`hwthread`, `core`, `l1cache` … `l3cache`, `socket`,
    /// `numa`; `package` for a socket).
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "hwthread" | "thread" => Kind::HwThread,
            "core" => Kind::Core,
            "l1cache" => Kind::L1,
            "l2cache" => Kind::L2,
            "l3cache" => Kind::L3,
            "socket" | "package" => Kind::Socket,
            "numa" => Kind::Numa,
            _ => return None,
        })
    }

    /// The name as `-bind-to` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::HwThread => "hwthread",
            Kind::Core => "core",
            Kind::L1 => "l1cache",
            Kind::L2 => "l2cache",
            Kind::L3 => "l3cache",
            Kind::Numa => "numa",
            Kind::Socket => "socket",
        }
    }
}

/// How a job's ranks are bound (`-bind-to KIND[:N]`, `-map-by KIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The objects a rank is bound to.
    pub kind: Kind,
    /// How many of them each rank gets.
    pub count: usize,
    /// The objects ranks are dealt over; `None`: `kind`.
    pub map: Option<Kind>,
}

impl Binding {
    /// Reads `-bind-to`'s value: `none` is `Ok(None)`; `KIND` or `KIND:N`.
    pub fn parse(v: &str) -> Result<Option<Binding>, String> {
        if v == "none" {
            return Ok(None);
        }
        let (k, n) = match v.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (v, None),
        };
        let kind = Kind::parse(k).ok_or_else(|| {
            format!(
                "-bind-to {v}: use none, hwthread, core, l1cache, l2cache, l3cache, socket or numa"
            )
        })?;
        let count = match n {
            None => 1,
            Some(n) => n
                .parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .ok_or_else(|| format!("-bind-to {v}: {n} is not a count of objects"))?,
        };
        Ok(Some(Binding {
            kind,
            count,
            map: None,
        }))
    }
}
