//! The TCP ports kauri listens on, kept inside a range when the site asks for one
//! (`MPIEXEC_PORT_RANGE=LOW:HIGH` and MPICH's other spellings of it, as Hydra reads them).
//!
//! This module owns the range ([`PortRange`]: its parsing and where it came from) and the one
//! way to open a listener in it ([`listen`], [`listen_async`]). Every listener kauri opens for
//! itself goes through here: the agent port of the front end and of every agent, the PMI port
//! of `-pmi-port`, the PMIx server's loopback port ([`with_free_port`]: OpenPMIx takes one
//! port, not a range, and aborts the process when that port is taken by the time it binds);
//! `MASTER_PORT` of `-ml-env` is chosen from the range too. It knows nothing of jobs or
//! trees.

use serde::{Deserialize, Serialize};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

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
    pub fn parse(var: &str, value: &str) -> Result<PortRange, String> {
        let bad =
            |why: &str| format!("{var}={value:?}: {why} (expected LOW:HIGH, e.g. 50000:50100)");
        let (low, high) = value.trim().split_once(':').ok_or_else(|| bad("no ':'"))?;
        let port = |s: &str| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad(&format!("{s:?} is not a port number (1 to 65535)")))
        };
        let (low, high) = (port(low)?, port(high)?);
        if high < low {
            return Err(bad("HIGH is below LOW"));
        }
        Ok(PortRange {
            low,
            high,
            var: var.to_string(),
        })
    }

    /// The range the environment names through `lookup` (the first of [`RANGE_VARS`] that
    /// is set and not empty), if any.
    pub fn from_env(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<PortRange>, String> {
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

/// Listens on `ip` at the lowest free port of `range` (as Hydra does), or at any port the
/// system picks when there is no range. A range whose every port is taken is an error that
/// names it. With a range, the search holds the range's [`RangeLock`].
pub fn listen(ip: IpAddr, range: Option<&PortRange>) -> io::Result<TcpListener> {
    let Some(r) = range else {
        return TcpListener::bind(SocketAddr::new(ip, 0));
    };
    let _lock = RangeLock::take(r)?;
    lowest(ip, r)
}

fn lowest(ip: IpAddr, r: &PortRange) -> io::Result<TcpListener> {
    for port in r.low..=r.high {
        match TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("port {port} of {r}: {e}"))),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every port of {r} is taken"),
    ))
}

/// Runs `bind` with the lowest port of `range` that is free on loopback, for a listener
/// kauri does not open itself (the PMIx server's): the range's [`RangeLock`] is held until
/// `bind` returns, so no other kauri process on this machine takes the port meanwhile.
pub fn with_free_port<T>(
    range: &PortRange,
    bind: impl FnOnce(u16) -> Result<T, String>,
) -> Result<T, String> {
    let lock = RangeLock::take(range).map_err(|e| format!("{range}: {e}"))?;
    let port = lowest(std::net::Ipv4Addr::LOCALHOST.into(), range)
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let out = bind(port);
    drop(lock);
    out
}

/// A lock on one port range, for every kauri process of this machine's network namespace
/// (where ports are shared): an abstract Unix socket named `kauri-ports-LOW-HIGH`, bound while
/// a kauri process looks for a free port and binds it (simulated hosts on one machine start at
/// once, and a library that binds a port it was told, OpenPMIx, must not find it taken). The
/// kernel releases it when the socket closes, even after a crash, and it leaves no file.
/// Released when dropped.
pub struct RangeLock(#[allow(dead_code)] std::os::unix::net::UnixListener);

/// How long [`RangeLock::take`] waits for another process to release the lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl RangeLock {
    /// Waits for the lock of `range` (at most a minute: another process holds a port range's
    /// lock only while it binds).
    pub fn take(range: &PortRange) -> io::Result<RangeLock> {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("kauri-ports-{}-{}", range.low, range.high);
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let start = std::time::Instant::now();
        loop {
            match std::os::unix::net::UnixListener::bind_addr(&addr) {
                Ok(l) => return Ok(RangeLock(l)),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("another process has held the lock @{name} for a minute"),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// [`listen`], for tokio.
pub fn listen_async(ip: IpAddr, range: Option<&PortRange>) -> io::Result<tokio::net::TcpListener> {
    let l = listen(ip, range)?;
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

/// A port that is free now, for a program of the job to listen on later (`MASTER_PORT`):
/// the highest free port of `range` (kauri's own listeners take the lowest), or any.
pub fn free_port(range: Option<&PortRange>) -> io::Result<u16> {
    let any = IpAddr::from([0u8, 0, 0, 0]);
    let Some(r) = range else {
        return Ok(listen(any, None)?.local_addr()?.port());
    };
    let _lock = RangeLock::take(r)?;
    for port in (r.low..=r.high).rev() {
        if TcpListener::bind(SocketAddr::new(any, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every port of {r} is taken"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_low_high() {
        let r = PortRange::parse("MPIEXEC_PORT_RANGE", "50000:50010").unwrap();
        assert_eq!((r.low, r.high), (50000, 50010));
        assert_eq!(r.to_string(), "MPIEXEC_PORT_RANGE=50000:50010");
        assert!(PortRange::parse("V", " 7:7 ").is_ok());
        for bad in [
            "", "5000", "a:b", "0:10", "10:5", "1:70000", "1:2:3", "-1:5",
        ] {
            let e = PortRange::parse("MPIEXEC_PORT_RANGE", bad).unwrap_err();
            assert!(e.starts_with("MPIEXEC_PORT_RANGE="), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn the_first_variable_set_wins() {
        let env = |k: &str| match k {
            "MPICH_PORT_RANGE" => Some("100:200".to_string()),
            "MPIEXEC_PORT_RANGE" => Some("300:400".to_string()),
            "MPIR_CVAR_CH3_PORT_RANGE" => Some(" ".to_string()),
            _ => None,
        };
        let r = PortRange::from_env(&env).unwrap().unwrap();
        assert_eq!((r.low, r.var.as_str()), (100, "MPICH_PORT_RANGE"));
        assert_eq!(PortRange::from_env(&|_| None).unwrap(), None);
    }

    #[test]
    fn listens_inside_the_range_until_it_is_full() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        // A range of two free ports, found by asking the system for one and its neighbour.
        let r = loop {
            let a = listen(lo, None).unwrap().local_addr().unwrap().port();
            if a < u16::MAX {
                break PortRange::parse("T", &format!("{a}:{}", a + 1)).unwrap();
            }
        };
        let Ok(first) = listen(lo, Some(&r)) else {
            return; // taken meanwhile by another program: nothing to learn
        };
        assert!(r.contains(first.local_addr().unwrap().port()));
        let second = listen(lo, Some(&r));
        if let Ok(s) = &second {
            assert!(r.contains(s.local_addr().unwrap().port()));
            let e = listen(lo, Some(&r)).unwrap_err();
            assert!(e.to_string().contains("every port of T="), "{e}");
        }
    }
}
