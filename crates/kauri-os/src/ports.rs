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
//! So such a port is held by a [`Reservation`]: a TCP socket bound to it (on every IPv4 and
//! every IPv6 address) and not listening. It is bound without `SO_REUSEADDR`, so it is taken
//! only when no socket holds the port; once bound it sets `SO_REUSEADDR`, and then Linux lets
//! exactly one kind of bind share the port: one that sets `SO_REUSEADDR` too, and listens (the
//! port's holder does not). The program the port is for binds that way (torch's `TCPStore`,
//! JAX's coordinator, OpenPMIx's listener); every other bind fails: another kauri job's
//! search (kauri's own binds never set `SO_REUSEADDR`), a program's plain bind, any user's,
//! and the kernel's choice of a port for a bind to port 0 or a connection. [`reserve`] hands
//! the reservation to its caller, which keeps it for the job's whole life (the front end keeps
//! `MASTER_PORT`'s until it exits); [`with_free_port`] holds one only until the PMIx server
//! is bound; [`listen`]'s listener holds its own port.
//!
//! - Its scope is the port's own: the network namespace, every user, every kauri job that
//!   could collide on the port, and nothing else.
//! - The kernel frees it when the socket closes, at exit and at `SIGKILL` alike: no stale
//!   reservation, no file, no name; it is close-on-exec, so no rank inherits it.
//! - It shows nowhere a name could: `/proc/net/unix` holds nothing of kauri's, and a socket
//!   that does not listen is not in `/proc/net/tcp`. (Linux 6.9 and later list such sockets
//!   through `inet_diag`, as `ss --bound-inactive` of iproute2 6.9 shows them, to every user.)
//!
//! What it does not cover, said plainly:
//! - a process that binds the port with `SO_REUSEADDR` and listens before the program does.
//!   Linux lets it, of any user, as it lets the program: a port's holder that the program can
//!   share with is one that anyone who binds the same way can. To find the port such a
//!   process must try every port's bind, or read the list above; it then takes it before
//!   rank 0, and rank 0 fails with `EADDRINUSE` (the job ends with it). torchrun has no such
//!   window because its agent listens on the store's port itself before its workers start
//!   (`TORCHELASTIC_USE_AGENT_STORE`); kauri hosts no store, and torch's `env://` start takes
//!   no listening socket from its parent.
//! - another host. When rank 0 runs on a remote host, the front end chooses `MASTER_PORT`:
//!   the reservation and the probe are on the front end's host, and hold against kauri jobs
//!   started there. On rank 0's host the agent only probes the port with a bind before it
//!   starts the ranks (and fails the job, in one line, when it is taken); it reserves nothing,
//!   so a program there, or a kauri job started from another machine, may take the port
//!   between that probe and rank 0's bind, and two front ends on two machines may choose the
//!   same port for rank 0 on a third. The agent could hold the port the same way on its host
//!   (kept until its ranks end) and, were it taken, ask the front end for another port before
//!   the ranks' environment is made; it does not today.

pub use kauri_core::plan::port_range::{PortRange, RANGE_VARS};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// How many ports a search without a range takes from the kernel before it gives up, each
/// one taken on IPv6 by another program.
const KERNEL_TRIES: usize = 64;

/// Listens on `ip` at the lowest free port of `range` (as Hydra does), or at any port the
/// system picks when there is no range; a port held by anything, another kauri job's
/// [`Reservation`] included, is skipped either way. A range whose every port is taken or
/// reserved is an error that names it.
pub fn listen(ip: IpAddr, range: Option<&PortRange>) -> io::Result<TcpListener> {
    let Some(r) = range else {
        return listener(SocketAddr::new(ip, 0));
    };
    for port in r.low..=r.high {
        match listener(SocketAddr::new(ip, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(why) => {
                let kind = why.kind();
                let range = r.clone();
                return Err(io::Error::new(kind, PortError::Port { port, range, why }));
            }
        }
    }
    Err(full(r))
}

/// A listener on `addr`, bound without `SO_REUSEADDR`: the bind fails on a port any socket
/// holds, a [`Reservation`] (which lets binds with `SO_REUSEADDR` share it) included. A port
/// whose only sockets in `/proc/net/tcp{,6}` are connections in `TIME_WAIT` (a listener's of
/// a job that ended, for a minute after) is bound with `SO_REUSEADDR`: a reservation is never
/// listed there, so one made on such a port would be shared (a `MASTER_PORT` whose rank 0
/// closed its connections first, and then its listener, while its job still runs).
fn listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let fd = match bound(addr, false) {
        Err(e)
            if e.kind() == io::ErrorKind::AddrInUse
                && addr.port() != 0
                && crate::peer::only_time_wait_on(addr.port()) =>
        {
            bound_with(addr, false, true)?
        }
        r => r?,
    };
    // Set once bound: a listening socket is never shared whatever it sets, and the
    // connections it accepts carry the flag into `TIME_WAIT`, where it lets the next
    // listener's bind above share the port with them.
    open_to_reuse(&fd)?;
    // SAFETY: fd is an open socket of ours.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}

/// A TCP socket bound to `addr` and not listening, close-on-exec, without `SO_REUSEADDR` or
/// `SO_REUSEPORT`: its bind fails when any socket holds the port, and, while it lives, every
/// other bind of the port fails, of any user, until [`open_to_reuse`] lets binds with
/// `SO_REUSEADDR` share it. `v6only`: an IPv6 socket that holds the port for IPv6 alone.
fn bound(addr: SocketAddr, v6only: bool) -> io::Result<OwnedFd> {
    bound_with(addr, v6only, false)
}

/// [`bound`], with `SO_REUSEADDR` set before the bind when `reuse`.
fn bound_with(addr: SocketAddr, v6only: bool, reuse: bool) -> io::Result<OwnedFd> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket has no memory-safety preconditions.
    let raw = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a socket just opened, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if v6only {
        set_option(&fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)?;
    }
    if reuse {
        open_to_reuse(&fd)?;
    }
    let (storage, len) = sockaddr_of(addr);
    // SAFETY: storage holds a sockaddr of len bytes for the socket's family.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&raw const storage).cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Sets the integer socket option `name` of `level` on `fd` to 1.
fn set_option(fd: &OwnedFd, level: i32, name: i32) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: the value is a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lets a bind with `SO_REUSEADDR` share the port `fd` holds (the program's: torch's
/// `TCPStore`, OpenPMIx's listener), while a bind without it (another kauri job's search, a
/// program's plain bind, the kernel's choice of a port) still fails: Linux lets two sockets
/// share a port when both set `SO_REUSEADDR` and the one bound first does not listen.
fn open_to_reuse(fd: &OwnedFd) -> io::Result<()> {
    set_option(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR)
}

/// `addr` as a `sockaddr_storage` and its length.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, all zeros a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Why no port of a range could be had. [`listen`] and [`reserve`] return it inside their
/// `io::Error` (`get_ref` and `downcast_ref` give it back), of kind `AddrInUse` for a full
/// range.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// Trying one port of the range failed otherwise than by its being taken.
    #[error("port {port} of {range}: {why}")]
    Port {
        /// The port tried.
        port: u16,
        /// The range.
        range: PortRange,
        /// What the system said.
        #[source]
        why: io::Error,
    },
    /// Every port of the range is taken or reserved.
    #[error("every port of {range} is taken or reserved by another kauri job")]
    RangeFull {
        /// The range.
        range: PortRange,
    },
}

/// The error of a range with no port left.
fn full(r: &PortRange) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        PortError::RangeFull { range: r.clone() },
    )
}

/// Runs `bind` with the lowest port of `range` that is free on loopback, for a listener
/// kauri does not open itself (the PMIx server's): the port is held ([`Reservation`], on
/// `127.0.0.1`) until `bind` returns, open to `bind`'s own `SO_REUSEADDR` (OpenPMIx sets it),
/// so nothing else takes the port meanwhile. The outer error: no port could be held; the
/// inner result is `bind`'s.
pub fn with_free_port<T, E>(
    range: &PortRange,
    bind: impl FnOnce(u16) -> Result<T, E>,
) -> Result<Result<T, E>, PortError> {
    let lo = IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    for port in range.low..=range.high {
        let held = match Reservation::hold(port, &[lo]) {
            Ok(Some(h)) => h,
            Ok(None) => continue,
            Err(why) => {
                let range = range.clone();
                return Err(PortError::Port { port, range, why });
            }
        };
        let out = bind(held.port());
        drop(held);
        return Ok(out);
    }
    Err(PortError::RangeFull {
        range: range.clone(),
    })
}

/// One port held on this machine for a program that binds it later (see the module's doc): a
/// TCP socket bound to the port on every IPv4 address and one bound on every IPv6 address
/// (when the machine has IPv6), not listening, open to [`open_to_reuse`]. Released when
/// dropped, and by the kernel when kauri ends, however it ends; close-on-exec, so no rank
/// holds it.
#[derive(Debug)]
pub struct Reservation {
    port: u16,
    _held: Vec<OwnedFd>,
}

impl Reservation {
    /// Holds `port` on each of `ips`, or `None` when something holds it on one of them already
    /// (an IPv6 address where the machine has no IPv6 is passed over). Never waits.
    fn hold(port: u16, ips: &[IpAddr]) -> io::Result<Option<Reservation>> {
        let mut held = Vec::new();
        for &ip in ips {
            let fd = match bound(SocketAddr::new(ip, port), ip.is_ipv6()) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Ok(None),
                Err(e)
                    if ip.is_ipv6()
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
                        ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            open_to_reuse(&fd)?;
            held.push(fd);
        }
        Ok(Some(Reservation { port, _held: held }))
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

/// The addresses a [`reserve`]d port is held on: every IPv4 and every IPv6 address.
const EVERY_ADDRESS: [IpAddr; 2] = [
    IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
];

/// A port for a program of the job to listen on later (`MASTER_PORT`), free on every address
/// of this machine now and held for as long as the [`Reservation`] lives: the highest such
/// port of `range` (kauri's own listeners take the lowest), or one the kernel picks. A range
/// whose every port is taken or reserved is an error that names it.
pub fn reserve(range: Option<&PortRange>) -> io::Result<Reservation> {
    let Some(r) = range else {
        // The kernel picks a port free on IPv4, which may be taken on IPv6: such a port stays
        // held until the search ends, so the kernel does not give it again.
        let mut taken_on_v6 = Vec::new();
        for _ in 0..KERNEL_TRIES {
            let v4 = bound(SocketAddr::new(EVERY_ADDRESS[0], 0), false)?;
            let port = local_port(&v4)?;
            if let Some(mut held) = Reservation::hold(port, &EVERY_ADDRESS[1..])? {
                open_to_reuse(&v4)?;
                held._held.push(v4);
                return Ok(held);
            }
            taken_on_v6.push(v4);
        }
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("the kernel gave {KERNEL_TRIES} ports in a row that were taken on IPv6"),
        ));
    };
    for port in (r.low..=r.high).rev() {
        if let Some(held) = Reservation::hold(port, &EVERY_ADDRESS)? {
            return Ok(held);
        }
    }
    Err(full(r))
}

/// The port `fd` is bound to.
fn local_port(fd: &OwnedFd) -> io::Result<u16> {
    // SAFETY: sockaddr_storage is plain data, all zeros a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage has len bytes of room.
    let rc = unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut storage).cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the socket is AF_INET: getsockname wrote a sockaddr_in.
    let sin: libc::sockaddr_in = unsafe { std::ptr::read((&raw const storage).cast()) };
    Ok(u16::from_be(sin.sin_port))
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
            let e = PortRange::parse("MPIEXEC_PORT_RANGE", bad)
                .unwrap_err()
                .to_string();
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
            assert!(is_full(&e), "{e:?}");
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
        let Some(other_job) = Reservation::hold(r.high, &EVERY_ADDRESS).unwrap() else {
            return; // another process took it meanwhile: nothing to learn
        };
        assert!(Reservation::hold(r.high, &EVERY_ADDRESS).unwrap().is_none());
        // The highest port is held by "another job": the search takes the lowest.
        let Ok(mine) = reserve(Some(&r)) else {
            return; // the lowest port was taken meanwhile by another program
        };
        assert_eq!(mine.port(), r.low);
        // Both held: the range is full, though neither port is listened on.
        let e = reserve(Some(&r)).unwrap_err();
        assert!(is_full(&e), "{e:?}");
        assert!(listen(IpAddr::from([127, 0, 0, 1]), Some(&r)).is_err());
        // Dropped, a reservation frees its port.
        drop(other_job);
        match reserve(Some(&r)) {
            Ok(again) => assert_eq!(again.port(), r.high),
            // Only if another program took the high port meanwhile.
            Err(e) => assert!(
                TcpListener::bind(SocketAddr::new(IpAddr::from([0u8, 0, 0, 0]), r.high)).is_err(),
                "nothing reserved though port {} is free again: {e}",
                r.high
            ),
        }
        drop(mine);
        assert!(Reservation::hold(r.low, &EVERY_ADDRESS).unwrap().is_some());
    }

    #[test]
    fn a_listener_skips_a_reserved_port() {
        let r = two_free_ports();
        let Some(_held) = Reservation::hold(r.low, &EVERY_ADDRESS).unwrap() else {
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

    /// A port whose last listener closed its connection first (left in `TIME_WAIT` for a
    /// minute) is listened on again: a range is not used up by the jobs that just ended.
    #[test]
    fn a_port_left_in_time_wait_is_listened_on_again() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let r = two_free_ports();
        let r = PortRange::parse("T", &format!("{}:{}", r.low, r.low)).unwrap();
        let Ok(first) = listen(lo, Some(&r)) else {
            return; // taken meanwhile by another program: nothing to learn
        };
        let client = std::net::TcpStream::connect(first.local_addr().unwrap()).unwrap();
        let (served, _) = first.accept().unwrap();
        drop(served); // this end closes first: its socket waits in TIME_WAIT
        let mut b = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &client, &mut b).unwrap(), 0);
        drop(client);
        drop(first);
        assert!(crate::peer::only_time_wait_on(r.low));
        let again = listen(lo, Some(&r));
        assert!(again.is_ok(), "{again:?}");
    }

    /// A reserved port is refused to a plain bind (another kauri job's, a program's, the
    /// kernel's choice), on IPv4 and IPv6, and shared with a bind that sets `SO_REUSEADDR`
    /// and listens: the program the port was reserved for (torch's `TCPStore` sets it).
    #[test]
    fn a_reserved_port_is_the_programs_that_asks_to_share_it() {
        let mine = reserve(None).unwrap();
        let port = mine.port();
        assert!(Reservation::hold(port, &EVERY_ADDRESS).unwrap().is_none());
        for ip in ["127.0.0.1", "0.0.0.0"] {
            let a = SocketAddr::new(ip.parse().unwrap(), port);
            let e = bound(a, false).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{a}");
        }
        let v6 = SocketAddr::new(IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED), port);
        let has_v6 = bound(SocketAddr::new(v6.ip(), 0), true).is_ok();
        if has_v6 {
            let e = bound(v6, true).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{v6}");
        }
        // std's bind sets SO_REUSEADDR, as torch does.
        let program = TcpListener::bind(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port));
        assert!(program.is_ok(), "{program:?}");
        drop(program);
        drop(mine);
        assert!(Reservation::hold(port, &EVERY_ADDRESS).unwrap().is_some());
    }

    /// True when `e` says its range is full.
    fn is_full(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::AddrInUse
            && matches!(
                e.get_ref().and_then(|i| i.downcast_ref::<PortError>()),
                Some(PortError::RangeFull { .. })
            )
    }

    /// Each error prints the line kauri printed when errors were text, inside its
    /// `io::Error` too.
    #[test]
    fn each_error_prints_its_line() {
        let range = PortRange::parse("MPIEXEC_PORT_RANGE", "9000:9001").unwrap();
        let e = PortError::Port {
            port: 9000,
            range: range.clone(),
            why: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(
            e.to_string(),
            "port 9000 of MPIEXEC_PORT_RANGE=9000:9001: Permission denied (os error 13)"
        );
        let line = "every port of MPIEXEC_PORT_RANGE=9000:9001 is taken or reserved by another \
                    kauri job";
        assert_eq!(
            PortError::RangeFull {
                range: range.clone()
            }
            .to_string(),
            line
        );
        assert_eq!(full(&range).to_string(), line);
        assert!(is_full(&full(&range)));
    }
}
