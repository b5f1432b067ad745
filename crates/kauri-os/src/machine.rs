//! Which host entries name this machine: a loopback name or address (`localhost`,
//! `127.x.x.x`, `::1`), its host name whole or short, an address of one of its interfaces, or
//! a name that resolves to one of those. Reads the interfaces (`getifaddrs`, through
//! [`crate::iface`]) and, for the names nothing cheaper settles, asks the system's
//! resolver: all of them at once, for a bounded time ([`RESOLVE_WITHIN`]). Starts nothing.

use crate::hostname::is_local;
use std::collections::HashSet;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long the names nothing cheaper settles have to resolve, all of them together. A name
/// with no answer by then (a resolver that does not answer) is taken for another machine's,
/// and its launcher says what is wrong with it, as it did before kauri asked.
pub const RESOLVE_WITHIN: Duration = Duration::from_millis(500);

/// The most threads that ask the resolver at once.
const RESOLVERS_MAX: usize = 8;

/// This machine, as host entries may name it.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Its host name (`gethostname`).
    name: String,
    /// The addresses of its interfaces, read when an entry first needs them.
    addresses: std::cell::OnceCell<Vec<IpAddr>>,
}

/// One name's addresses, or `None` when it has none (or no answer in time).
pub type Resolved = Option<Vec<IpAddr>>;

/// What asks for names' addresses: each of the names given, in their order ([`resolve`]).
pub type Resolver<'a> = &'a dyn Fn(&[&str]) -> Vec<Resolved>;

impl Machine {
    /// This machine, named `name`; its interfaces' addresses are read when first needed (a
    /// list of names only, or of loopback addresses, never needs them).
    pub fn this(name: &str) -> Machine {
        Machine {
            name: name.to_string(),
            addresses: std::cell::OnceCell::new(),
        }
    }

    /// A machine named `name` with these addresses.
    pub fn new(name: &str, addresses: Vec<IpAddr>) -> Machine {
        Machine {
            name: name.to_string(),
            addresses: std::cell::OnceCell::from(addresses),
        }
    }

    /// Whether `ip` is this machine's: a loopback address or one of its interfaces'.
    pub fn owns(&self, ip: IpAddr) -> bool {
        ip.is_loopback()
            || self
                .addresses
                .get_or_init(crate::iface::all_addresses)
                .contains(&ip)
    }

    /// Whether `entry` names this machine, as far as its names and addresses tell without a
    /// resolver: `Some` for a loopback name, this machine's name (whole or short) or an
    /// address; `None` for another name, which only the resolver can tell.
    pub fn named_by(&self, entry: &str) -> Option<bool> {
        if is_local(entry, &self.name) {
            return Some(true);
        }
        if let Ok(ip) = entry.parse::<IpAddr>() {
            return Some(self.owns(ip));
        }
        None
    }

    /// The entries of `names` that name this machine. The names that [`Machine::named_by`]
    /// cannot settle go, each once, to `resolve` when it is given (else they are taken for
    /// other machines'): such a name names this machine when one of its addresses is this
    /// machine's.
    pub fn named_among<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        resolve: Option<Resolver<'_>>,
    ) -> HashSet<&'a str> {
        let mut here = HashSet::new();
        let mut unsettled: Vec<&str> = Vec::new();
        let mut seen = HashSet::new();
        for n in names {
            if !seen.insert(n) {
                continue;
            }
            match self.named_by(n) {
                Some(true) => {
                    here.insert(n);
                }
                Some(false) => {}
                None => unsettled.push(n),
            }
        }
        if let (Some(resolve), false) = (resolve, unsettled.is_empty()) {
            let found = resolve(&unsettled);
            for (n, addrs) in unsettled.iter().zip(found) {
                if addrs.is_some_and(|a| a.iter().any(|&ip| self.owns(ip))) {
                    here.insert(n);
                }
            }
        }
        here
    }
}

/// The addresses of each of `names` (in their order), asked of the system's resolver by at
/// most [`RESOLVERS_MAX`] threads at once; a name with no answer within `within` is `None`.
/// A thread still waiting on the resolver then is left to end on its own.
pub fn resolve(names: &[&str], within: Duration) -> Vec<Resolved> {
    let mut out: Vec<Resolved> = vec![None; names.len()];
    let deadline = Instant::now() + within;
    let names: Arc<Vec<String>> = Arc::new(names.iter().map(|n| n.to_string()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<(usize, Resolved)>();
    for _ in 0..names.len().min(RESOLVERS_MAX) {
        let (names, next, tx) = (names.clone(), next.clone(), tx.clone());
        let asker = move || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(name) = names.get(i) else {
                return;
            };
            let addrs = (name.as_str(), 0)
                .to_socket_addrs()
                .ok()
                .map(|a| a.map(|s| s.ip()).collect());
            if tx.send((i, addrs)).is_err() {
                return;
            }
        };
        // A thread that cannot start leaves its names to the others (or unanswered).
        let _ = std::thread::Builder::new()
            .name("kauri-resolve".into())
            .spawn(asker);
    }
    drop(tx);
    for _ in 0..names.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, addrs)) => out[i] = addrs,
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> Machine {
        Machine::new(
            "vm.example.org",
            vec![[192, 0, 2, 2].into(), [127, 0, 0, 1].into()],
        )
    }

    #[test]
    fn loopback_names_its_own_names_and_its_addresses_name_this_machine() {
        let m = vm();
        for n in [
            "localhost",
            "127.0.0.1",
            "127.0.1.1",
            "::1",
            "vm",
            "vm.example.org",
        ] {
            assert_eq!(m.named_by(n), Some(true), "{n}");
        }
        assert_eq!(m.named_by("192.0.2.2"), Some(true));
        assert_eq!(m.named_by("192.0.2.3"), Some(false));
        assert_eq!(m.named_by("fd00::3"), Some(false));
        assert_eq!(m.named_by("node7"), None, "only the resolver can tell");
    }

    #[test]
    fn a_name_that_resolves_to_an_address_of_this_machine_names_it() {
        let m = vm();
        let asked = std::cell::RefCell::new(Vec::new());
        let resolver = |names: &[&str]| -> Vec<Resolved> {
            asked
                .borrow_mut()
                .extend(names.iter().map(|n| n.to_string()));
            names
                .iter()
                .map(|&n| match n {
                    "alias" => Some(vec![[192, 0, 2, 2].into()]),
                    "debian" => Some(vec![[127, 0, 1, 1].into()]),
                    "node7" => Some(vec![[192, 0, 2, 7].into()]),
                    _ => None,
                })
                .collect()
        };
        let names = [
            "localhost",
            "alias",
            "node7",
            "alias",
            "nosuch",
            "debian",
            "10.0.0.1",
        ];
        let here = m.named_among(names, Some(&resolver));
        let mut here: Vec<&str> = here.into_iter().collect();
        here.sort();
        assert_eq!(here, vec!["alias", "debian", "localhost"]);
        // each unsettled name asked once, nothing the names and addresses settle
        assert_eq!(*asked.borrow(), vec!["alias", "node7", "nosuch", "debian"]);
        // without a resolver, the unsettled names are others'
        let here = m.named_among(names, None);
        assert_eq!(here.into_iter().collect::<Vec<_>>(), vec!["localhost"]);
    }

    #[test]
    fn the_resolver_answers_localhost_and_gives_up_on_nothing_asked() {
        let found = resolve(&["localhost"], Duration::from_secs(30));
        assert!(
            found[0]
                .as_ref()
                .is_some_and(|a| a.iter().any(|ip| ip.is_loopback())),
            "{found:?}"
        );
        assert!(resolve(&[], Duration::ZERO).is_empty());
    }
}
