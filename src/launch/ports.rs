//! The TCP ports kauri listens on or hands to a program, kept inside a range when the site
//! asks for one (`MPIEXEC_PORT_RANGE=LOW:HIGH` and MPICH's other spellings of it, as Hydra
//! reads them), and reserved against every other kauri process of the machine.
//!
//! This module owns the range ([`PortRange`]: its parsing and where it came from), the one way
//! to open a listener ([`listen`], [`listen_async`]), the one way to choose a port for a
//! listener kauri does not open itself ([`with_free_port`]: the PMIx server's; OpenPMIx takes
//! one port, not a range, and aborts the process when that port is taken by the time it
//! binds), and the one way to choose a port a program of the job binds later ([`reserve`]:
//! `MASTER_PORT` of `-ml-env`). Every listener kauri opens for itself goes through here: the
//! agent port of the front end and of every agent, the PMI port of `-pmi-port`, the PMIx
//! server's loopback port. It knows nothing of jobs or trees.
//!
//! # Reservations
//!
//! A port kauri hands to a program is free when kauri chooses it and bound by the program
//! later (torch's `TCPStore` on rank 0 binds `MASTER_PORT` seconds after the start). Probing
//! with a bind and letting go is not enough: two jobs started together found the same port
//! free, and one of them failed with `EADDRINUSE`, or a rank of one joined the other's store.
//! So every port is chosen under a [`Reservation`]: a lock named after the port, taken (never
//! waited for) *before* the port is probed, and skipped when another kauri process holds it.
//! [`reserve`] hands the reservation to its caller, which keeps it for the job's whole life
//! (the front end keeps `MASTER_PORT`'s until it exits); [`listen`] and [`with_free_port`]
//! hold it only until the port is bound, from then on the listener itself keeps the port.
//! Without a range the kernel chooses (a bind to port 0) and the number it gave is locked in
//! the same way, a number another job holds being asked for again.
//!
//! The lock is an abstract Unix socket, `@kauri-port-PORT`, bound while the port is held:
//! - its scope is the scope of a port: both belong to the network namespace, so the lock holds
//!   against every kauri job that could collide on the port, of any user, and only those
//!   (a lock file in a per-user directory would leave two users' jobs free to collide, and
//!   two containers sharing the host's network but not its `/tmp` too);
//! - the kernel frees the name when the socket closes, at exit and at `SIGKILL` alike: no
//!   stale reservation, no file left, and no directory to create and check in a shared place;
//! - the socket is close-on-exec, so no rank inherits it and outlives kauri holding it.
//!
//! What it costs: any local process can bind a name and so make kauri skip that port, which
//! it could as well do by binding the port itself.
//!
//! What it does not cover, said plainly:
//! - other programs. A port reserved and not yet bound by its program can still be bound by
//!   anything else on the machine; without a range, the kernel may give it to any program's
//!   bind to port 0 (or the PMIx server's, which OpenPMIx binds itself when no range is set).
//!   A range outside the kernel's ephemeral ports (`net.ipv4.ip_local_port_range`) leaves
//!   only programs that name the port themselves.
//! - another host. When rank 0 runs on a remote host, the front end chooses `MASTER_PORT`:
//!   the reservation and the probe are on the front end's host, and hold against kauri jobs
//!   started there. On rank 0's host the agent only probes the port with a bind before it
//!   starts the ranks (and fails the job, in one line, when it is taken); it reserves nothing,
//!   so a program there, or a kauri job started from another machine, may take the port
//!   between that probe and rank 0's bind, and two front ends on two machines may choose the
//!   same port for rank 0 on a third. The agent could take the same lock on its host (kept
//!   until its ranks end) and, were it held, ask the front end for another port before the
//!   ranks' environment is made; it does not today (with simulated hosts the front end holds
//!   that lock on the same machine, which the agent would have to tell apart).

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

/// How many ports a search without a range takes from the kernel before it gives up, each
/// one's reservation held by another kauri process.
const KERNEL_TRIES: usize = 64;

/// Listens on `ip` at the lowest free port of `range` (as Hydra does), or at any port the
/// system picks when there is no range; a port another kauri process has reserved is skipped
/// either way. A range whose every port is taken or reserved is an error that names it.
pub fn listen(ip: IpAddr, range: Option<&PortRange>) -> io::Result<TcpListener> {
    let (listener, _held) = match range {
        Some(r) => lowest(ip, r)?,
        None => from_kernel(ip)?,
    };
    Ok(listener)
}

/// The lowest port of `r` that is neither reserved nor bound, bound on `ip`, and its
/// reservation.
fn lowest(ip: IpAddr, r: &PortRange) -> io::Result<(TcpListener, Reservation)> {
    for port in r.low..=r.high {
        let Some(held) = Reservation::try_take(port)? else {
            continue;
        };
        match TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(l) => return Ok((l, held)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("port {port} of {r}: {e}"))),
        }
    }
    Err(full(r))
}

/// A port the kernel picks, bound on `ip`, and its reservation. A port another kauri process
/// reserved (free for the kernel: its program has not bound it yet) stays bound here until the
/// search ends, so the kernel does not give it again.
fn from_kernel(ip: IpAddr) -> io::Result<(TcpListener, Reservation)> {
    let mut reserved_elsewhere = Vec::new();
    for _ in 0..KERNEL_TRIES {
        let l = TcpListener::bind(SocketAddr::new(ip, 0))?;
        match Reservation::try_take(l.local_addr()?.port())? {
            Some(held) => return Ok((l, held)),
            None => reserved_elsewhere.push(l),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("the kernel gave {KERNEL_TRIES} ports in a row that other kauri jobs reserved"),
    ))
}

/// The error of a range with no port left.
fn full(r: &PortRange) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every port of {r} is taken or reserved by another kauri job"),
    )
}

/// Runs `bind` with the lowest port of `range` that is free on loopback, for a listener
/// kauri does not open itself (the PMIx server's): the port's [`Reservation`] is held until
/// `bind` returns, so no other kauri process on this machine takes the port meanwhile.
pub fn with_free_port<T>(
    range: &PortRange,
    bind: impl FnOnce(u16) -> Result<T, String>,
) -> Result<T, String> {
    let (probe, held) =
        lowest(std::net::Ipv4Addr::LOCALHOST.into(), range).map_err(|e| e.to_string())?;
    drop(probe);
    let out = bind(held.port());
    drop(held);
    out
}

/// One port held against every other kauri process of this machine's network namespace (see
/// the module's doc): an abstract Unix socket named `kauri-port-PORT`, bound while the
/// reservation lives. The kernel releases it when the socket closes, even after a crash, and
/// it leaves no file. Released when dropped.
#[derive(Debug)]
pub struct Reservation {
    port: u16,
    _name: std::os::unix::net::UnixDatagram,
}

impl Reservation {
    /// Reserves `port`, or `None` when another process holds its reservation. Never waits.
    pub fn try_take(port: u16) -> io::Result<Option<Reservation>> {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("kauri-port-{port}");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        match std::os::unix::net::UnixDatagram::bind_addr(&addr) {
            Ok(s) => Ok(Some(Reservation { port, _name: s })),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("lock @{name}: {e}"))),
        }
    }

    /// The port reserved.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// [`listen`], for tokio.
pub fn listen_async(ip: IpAddr, range: Option<&PortRange>) -> io::Result<tokio::net::TcpListener> {
    let l = listen(ip, range)?;
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

/// A port for a program of the job to listen on later (`MASTER_PORT`), free on every address
/// of this machine now and reserved for as long as the [`Reservation`] lives: the highest
/// such port of `range` (kauri's own listeners take the lowest), or one the kernel picks. A
/// range whose every port is taken or reserved is an error that names it.
pub fn reserve(range: Option<&PortRange>) -> io::Result<Reservation> {
    let any = IpAddr::from([0u8, 0, 0, 0]);
    let Some(r) = range else {
        return Ok(from_kernel(any)?.1);
    };
    for port in (r.low..=r.high).rev() {
        let Some(held) = Reservation::try_take(port)? else {
            continue;
        };
        if TcpListener::bind(SocketAddr::new(any, port)).is_ok() {
            return Ok(held);
        }
    }
    Err(full(r))
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

    /// A range of two ports free now (the system's choice and its neighbour), neither
    /// reserved.
    fn two_free_ports() -> PortRange {
        let lo = IpAddr::from([127, 0, 0, 1]);
        loop {
            let a = listen(lo, None).unwrap().local_addr().unwrap().port();
            if a < u16::MAX && TcpListener::bind(SocketAddr::new(lo, a + 1)).is_ok() {
                return PortRange::parse("T", &format!("{a}:{}", a + 1)).unwrap();
            }
        }
    }

    #[test]
    fn a_reserved_port_is_skipped_until_its_reservation_is_dropped() {
        let r = two_free_ports();
        let Some(other_job) = Reservation::try_take(r.high).unwrap() else {
            return; // another process reserved it meanwhile: nothing to learn
        };
        assert!(Reservation::try_take(r.high).unwrap().is_none());
        // The highest port is held by "another job": the search takes the lowest.
        let Ok(mine) = reserve(Some(&r)) else {
            return; // the lowest port was taken meanwhile by another program
        };
        assert_eq!(mine.port(), r.low);
        // Both held: the range is full, though neither port is bound.
        let e = reserve(Some(&r)).unwrap_err();
        assert!(e.to_string().contains("every port of T="), "{e}");
        assert!(listen(IpAddr::from([127, 0, 0, 1]), Some(&r)).is_err());
        // Dropped, a reservation frees its port: at once, unless another thread of this
        // test process forked meanwhile (a child holds a copy of the socket until it execs,
        // a moment): so within a second.
        drop(other_job);
        let mut again = reserve(Some(&r));
        for _ in 0..100 {
            if again.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            again = reserve(Some(&r));
        }
        match again {
            Ok(again) => assert_eq!(again.port(), r.high),
            // Only if another program took the high port meanwhile.
            Err(e) => assert!(
                TcpListener::bind(SocketAddr::new(IpAddr::from([0u8, 0, 0, 0]), r.high)).is_err(),
                "nothing reserved though port {} is free again: {e}",
                r.high
            ),
        }
        drop(mine);
        assert!(Reservation::try_take(r.low).unwrap().is_some());
    }

    #[test]
    fn a_listener_skips_a_reserved_port() {
        let r = two_free_ports();
        let Some(_held) = Reservation::try_take(r.low).unwrap() else {
            return;
        };
        let lo = IpAddr::from([127, 0, 0, 1]);
        match listen(lo, Some(&r)) {
            Ok(l) => assert_eq!(l.local_addr().unwrap().port(), r.high),
            // Only if another program took the high port meanwhile.
            Err(e) => assert!(
                TcpListener::bind(SocketAddr::new(lo, r.high)).is_err(),
                "no listener though port {} is free: {e}",
                r.high
            ),
        }
    }

    #[test]
    fn without_a_range_the_kernels_port_is_reserved() {
        let mine = reserve(None).unwrap();
        assert!(Reservation::try_take(mine.port()).unwrap().is_none());
        let port = mine.port();
        drop(mine);
        assert!(Reservation::try_take(port).unwrap().is_some());
    }
}
