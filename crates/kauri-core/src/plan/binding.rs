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

/// A `-bind-to` value that is not `none`, `KIND` or `KIND:N`; each prints the line naming the
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// `KIND` is no kind of object.
    #[error(
        "-bind-to {value}: use none, hwthread, core, l1cache, l2cache, l3cache, socket or numa"
    )]
    UnknownKind {
        /// The whole value.
        value: String,
    },
    /// `N` is not a positive number.
    #[error("-bind-to {value}: {count} is not a count of objects")]
    NotACount {
        /// The whole value.
        value: String,
        /// What follows the `:`.
        count: String,
    },
}

impl Binding {
    /// Reads `-bind-to`'s value: `none` is `Ok(None)`; `KIND` or `KIND:N`.
    pub fn parse(v: &str) -> Result<Option<Binding>, BindingError> {
        if v == "none" {
            return Ok(None);
        }
        let (k, n) = match v.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (v, None),
        };
        let kind = Kind::parse(k).ok_or_else(|| BindingError::UnknownKind {
            value: v.to_string(),
        })?;
        let count = match n {
            None => 1,
            Some(n) => n.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                BindingError::NotACount {
                    value: v.to_string(),
                    count: n.to_string(),
                }
            })?,
        };
        Ok(Some(Binding {
            kind,
            count,
            map: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{Binding, BindingError};

    /// Each bad value is its variant, and prints the line kauri printed when the error was
    /// text.
    #[test]
    fn each_binding_error_prints_its_line() {
        let kinds = "use none, hwthread, core, l1cache, l2cache, l3cache, socket or numa";
        let cases = [
            (
                "board",
                BindingError::UnknownKind {
                    value: "board".into(),
                },
                format!("-bind-to board: {kinds}"),
            ),
            (
                "board:2",
                BindingError::UnknownKind {
                    value: "board:2".into(),
                },
                format!("-bind-to board:2: {kinds}"),
            ),
            (
                "core:0",
                BindingError::NotACount {
                    value: "core:0".into(),
                    count: "0".into(),
                },
                "-bind-to core:0: 0 is not a count of objects".to_string(),
            ),
            (
                "core:x",
                BindingError::NotACount {
                    value: "core:x".into(),
                    count: "x".into(),
                },
                "-bind-to core:x: x is not a count of objects".to_string(),
            ),
        ];
        for (value, error, line) in cases {
            let e = Binding::parse(value).unwrap_err();
            assert_eq!(e, error);
            assert_eq!(e.to_string(), line);
        }
    }
}
