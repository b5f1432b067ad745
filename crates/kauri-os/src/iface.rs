//! Network interfaces by name (`-iface`, `HYDRA_IFACE`): the address kauri advertises to its
//! agents and tells the ranks, on each host that host's own address of the interface.

use std::net::IpAddr;

/// Every address of this host's interface `name`, IPv4 ones first (`getifaddrs`).
pub fn addresses(name: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    each_address(|n, a| {
        if n == name.as_bytes() {
            out.push(a);
        }
    });
    out.sort_by_key(|a| a.is_ipv6());
    out
}

/// Every address of every interface of this host, loopback's too (`getifaddrs`).
pub fn all_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    each_address(|_, a| {
        if !out.contains(&a) {
            out.push(a);
        }
    });
    out
}

/// Calls `f` with each interface's name and each of its IPv4 and IPv6 addresses
/// (`getifaddrs`); with none when the list cannot be read.
fn each_address(mut f: impl FnMut(&[u8], IpAddr)) {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head it allocated, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is an element of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string of the list.
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        // SAFETY: ifa_addr points to a sockaddr whose family says its layout.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            f(
                n.to_bytes(),
                IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()),
            );
        } else if family == libc::AF_INET6 {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            f(n.to_bytes(), IpAddr::from(a.sin6_addr.s6_addr));
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
}

/// Why `-iface` names no address of this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IfaceError {
    /// The interface exists and has no address.
    #[error("interface {name} has no address on {host}")]
    NoAddress {
        /// The interface.
        name: String,
        /// This host.
        host: String,
    },
    /// No interface of this host has the name.
    #[error("no interface {name} on {host} (there are: {})", there.join(", "))]
    NoInterface {
        /// The name asked for.
        name: String,
        /// This host.
        host: String,
        /// The interfaces it has, sorted.
        there: Vec<String>,
    },
}

/// The address of interface `name` on this host (the first IPv4 one, else IPv6), or an
/// error that says which interfaces there are.
pub fn address(name: &str) -> Result<IpAddr, IfaceError> {
    if let Some(a) = addresses(name).first() {
        return Ok(*a);
    }
    let mut names: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
        names = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
    }
    let host = crate::hostname::local_host();
    let name = name.to_string();
    Err(if names.contains(&name) {
        IfaceError::NoAddress { name, host }
    } else {
        IfaceError::NoInterface {
            name,
            host,
            there: names,
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_has_its_address_and_a_missing_one_is_named() {
        assert_eq!(super::address("lo"), Ok([127, 0, 0, 1].into()));
        let e = super::address("nosuch0").unwrap_err();
        assert!(
            matches!(&e, super::IfaceError::NoInterface { name, there, .. }
                if name == "nosuch0" && there.iter().any(|n| n == "lo")),
            "{e:?}"
        );
    }

    /// Each error prints the line kauri printed when errors were text.
    #[test]
    fn each_error_prints_its_line() {
        let e = super::IfaceError::NoAddress {
            name: "ib0".into(),
            host: "n1".into(),
        };
        assert_eq!(e.to_string(), "interface ib0 has no address on n1");
        let e = super::IfaceError::NoInterface {
            name: "ib0".into(),
            host: "n1".into(),
            there: vec!["eth0".into(), "lo".into()],
        };
        assert_eq!(
            e.to_string(),
            "no interface ib0 on n1 (there are: eth0, lo)"
        );
    }

    #[test]
    fn every_address_is_listed_once_loopback_among_them() {
        let all = super::all_addresses();
        assert!(all.contains(&[127, 0, 0, 1].into()), "{all:?}");
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }
}
