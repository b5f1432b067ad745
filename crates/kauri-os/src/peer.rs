//! Who is at the other end of a loopback TCP connection: the uid that owns the peer's socket.
//!
//! A Unix socket would tell it by `SO_PEERCRED`; loopback TCP does not, but the kernel lists
//! every TCP socket of the machine in `/proc/net/tcp` and `/proc/net/tcp6` with the uid that
//! created it. The peer's socket is the line whose `local_address` is the peer's address and
//! whose `rem_address` is ours. This module only reads and parses those tables; what to do
//! with a stranger is its caller's (the PMI listener of `-pmi-port`, in `host::node`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The uid owning the socket at `peer` connected to `local` (both as this end sees them:
/// `peer_addr()` and `local_addr()` of an accepted stream), or `None` when no live socket
/// matches: the peer is not on this machine, or has already closed its socket (a closed
/// socket's line has no inode and its uid reads 0, so it is never taken as anyone's).
pub fn uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|f| {
        let text = std::fs::read_to_string(f).ok()?;
        owner_in(&text, peer, local)
    })
}

/// The uid of the line of a `/proc/net/tcp{,6}` table whose local address is `peer` and remote
/// address `local`, if it belongs to a live socket (non-zero inode).
pub fn owner_in(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (peer, local) = (canonical(peer), canonical(local));
    table.lines().skip(1).find_map(|line| {
        // sl local_address rem_address st queues tr:tm retrnsmt uid timeout inode ...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            return None;
        }
        let matches = parse_addr(f[1]) == Some(peer) && parse_addr(f[2]) == Some(local);
        if matches && f[9] != "0" {
            f[7].parse().ok()
        } else {
            None
        }
    })
}

/// Whether every socket of the machine whose local port is `port` is a connection in
/// `TIME_WAIT` (and there is one): a port a listener may bind with `SO_REUSEADDR` without
/// sharing it with a live socket that the tables list.
pub fn only_time_wait_on(port: u16) -> bool {
    let mut seen = false;
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        match time_wait_only_in(&text, port) {
            Some(false) => return false,
            Some(true) => seen = true,
            None => {}
        }
    }
    seen
}

/// In one table: `None` when no line's local port is `port`, else whether all such lines are
/// in `TIME_WAIT` (state `06`).
fn time_wait_only_in(table: &str, port: u16) -> Option<bool> {
    let mut found = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || parse_addr(f[1]).map(|a| a.port()) != Some(port) {
            continue;
        }
        if f[3] != "06" {
            return Some(false);
        }
        found = Some(true);
    }
    found
}

/// An address as the tables print it: `0100007F:1F90` (IPv4) or 32 hex digits `:port`
/// (IPv6), each 32-bit word in the machine's byte order, the port in hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        addr.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4 (a dual-stack socket's view).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's way of writing an IPv4 address: the address's bytes as one native word.
    fn v4(a: [u8; 4], port: u16) -> String {
        format!("{:08X}:{port:04X}", u32::from_ne_bytes(a))
    }

    #[test]
    fn the_peer_line_gives_its_uid_and_a_closed_socket_gives_none() {
        let (us, them) = (v4([127, 0, 0, 1], 5000), v4([127, 0, 0, 1], 40000));
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let line = |local: &str, rem: &str, uid: u32, inode: u32| {
            format!("   0: {local} {rem} 01 00000000:00000000 00:00000000 00000000 {uid:5} 0 {inode} 1 0 20 4 30 10 -1\n")
        };
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        // Our own end of the connection (uid 0) is not the peer's.
        let table = format!(
            "{header}{}{}",
            line(&us, &them, 0, 111),
            line(&them, &us, 65534, 222)
        );
        assert_eq!(owner_in(&table, peer, local), Some(65534));
        // The same address connected elsewhere is not the peer.
        let elsewhere = format!(
            "{header}{}",
            line(&them, &v4([127, 0, 0, 1], 6000), 65534, 222)
        );
        assert_eq!(owner_in(&elsewhere, peer, local), None);
        // A closed socket (inode 0, uid shown as 0) is nobody's.
        let closed = format!("{header}{}", line(&them, &us, 0, 0));
        assert_eq!(owner_in(&closed, peer, local), None);
        // An IPv4-mapped peer seen by a dual-stack listener is the same peer.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().unwrap();
        assert_eq!(owner_in(&table, mapped, local), Some(65534));
    }

    #[test]
    fn a_port_held_only_by_connections_in_time_wait() {
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let line = |local: &str, st: &str| {
            format!("   0: {local} 0100007F:9000 {st} 00000000:00000000 00:00000000 00000000     0        0 0 1\n")
        };
        let p = 0x1F90;
        let tw = format!("{head}{}", line(&v4([127, 0, 0, 1], p), "06"));
        assert_eq!(time_wait_only_in(&tw, p), Some(true));
        let mixed = format!("{tw}{}", line(&v4([0, 0, 0, 0], p), "0A"));
        assert_eq!(time_wait_only_in(&mixed, p), Some(false));
        assert_eq!(time_wait_only_in(&tw, p + 1), None);
        assert_eq!(time_wait_only_in(head, p), None);
    }

    #[test]
    fn ipv6_addresses_parse() {
        let b = Ipv6Addr::LOCALHOST.octets();
        let mut s = String::new();
        for w in b.chunks(4) {
            s.push_str(&format!(
                "{:08X}",
                u32::from_ne_bytes([w[0], w[1], w[2], w[3]])
            ));
        }
        assert_eq!(
            parse_addr(&format!("{s}:0050")),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(parse_addr("0100007F"), None);
        assert_eq!(parse_addr("zz:0050"), None);
    }

    #[test]
    fn a_live_loopback_connection_is_ours() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(uid(peer, s.local_addr().unwrap()), Some(me));
    }
}
