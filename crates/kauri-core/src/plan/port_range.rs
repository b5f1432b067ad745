//! The range of TCP ports a site allows (`MPIEXEC_PORT_RANGE=LOW:HIGH` and MPICH's other
//! spellings of it, as Hydra reads them): its parsing and the variable it came from. Plain
//! data; listening and reserving within it are `os::ports`'s.

use serde::{Deserialize, Serialize};

/// The variables that name the range, in the order Hydra 4 reads them (the first one set
/// wins; `ui/mpich/mpiexec.c`): MPICH's own port-range parameters first, `MPIEXEC_PORT_RANGE`
/// last.
pub const RANGE_VARS: &[&str] = &[
    "MPIR_CVAR_CH3_PORT_RANGE",
    "MPIR_PARAM_CH3_PORT_RANGE",
    "MPICH_CH3_PORT_RANGE",
    "MPIR_CVAR_PORTRANGE",
    "MPIR_CVAR_PORT_RANGE",
    "MPIR_PARAM_PORTRANGE",
    "MPIR_PARAM_PORT_RANGE",
    "MPICH_PORTRANGE",
    "MPICH_PORT_RANGE",
    "MPIEXEC_PORTRANGE",
    "MPIEXEC_PORT_RANGE",
];

/// Why a variable's value is not a port range: one line naming the variable and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {fault} (expected LOW:HIGH, e.g. 50000:50100)")]
pub struct PortRangeError {
    /// The variable.
    pub var: String,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub fault: PortRangeFault,
}

/// What is wrong with a port range's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeFault {
    /// No `:` between the ports.
    #[error("no ':'")]
    NoColon,
    /// One side is not a port number.
    #[error("{0:?} is not a port number (1 to 65535)")]
    NotAPort(String),
    /// `HIGH` is below `LOW`.
    #[error("HIGH is below LOW")]
    HighBelowLow,
}

/// An inclusive range of TCP ports, and the variable that named it (for messages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRange {
    /// The lowest port.
    pub low: u16,
    /// The highest port (at least `low`).
    pub high: u16,
    /// The variable it came from, e.g. `MPIEXEC_PORT_RANGE`.
    pub var: String,
}

impl PortRange {
    /// Parses `LOW:HIGH` (two port numbers, 1 to 65535, `LOW <= HIGH`) read from `var`. The
    /// error is one line naming the variable and its value.
    pub fn parse(var: &str, value: &str) -> Result<PortRange, PortRangeError> {
        let bad = |fault| PortRangeError {
            var: var.to_string(),
            value: value.to_string(),
            fault,
        };
        let (low, high) = value
            .trim()
            .split_once(':')
            .ok_or_else(|| bad(PortRangeFault::NoColon))?;
        let port = |s: &str| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad(PortRangeFault::NotAPort(s.to_string())))
        };
        let (low, high) = (port(low)?, port(high)?);
        if high < low {
            return Err(bad(PortRangeFault::HighBelowLow));
        }
        Ok(PortRange {
            low,
            high,
            var: var.to_string(),
        })
    }

    /// The range the environment names through `lookup` (the first of [`RANGE_VARS`] that
    /// is set and not empty), if any.
    pub fn from_env(
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<PortRange>, PortRangeError> {
        for var in RANGE_VARS {
            if let Some(v) = lookup(var).filter(|v| !v.trim().is_empty()) {
                return PortRange::parse(var, &v).map(Some);
            }
        }
        Ok(None)
    }

    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}:{}", self.var, self.low, self.high)
    }
}

#[cfg(test)]
mod tests {
    use super::{PortRange, PortRangeFault};

    /// Each bad value is its fault, and prints the line kauri printed when errors were text.
    #[test]
    fn each_fault_prints_its_line() {
        let v = "MPIEXEC_PORT_RANGE";
        let cases = [
            ("5000", PortRangeFault::NoColon, "no ':'"),
            (
                "a:9",
                PortRangeFault::NotAPort("a".into()),
                "\"a\" is not a port number (1 to 65535)",
            ),
            ("10:5", PortRangeFault::HighBelowLow, "HIGH is below LOW"),
        ];
        for (value, fault, why) in cases {
            let e = PortRange::parse(v, value).unwrap_err();
            assert_eq!(e.fault, fault);
            assert_eq!(
                e.to_string(),
                format!("{v}={value:?}: {why} (expected LOW:HIGH, e.g. 50000:50100)")
            );
        }
    }
}
