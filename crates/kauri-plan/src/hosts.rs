//! The run's hosts as machines: the entries of `-hosts`, a hostfile or an allocation made
//! into one host per machine ([`HostList`]), which host the front end serves, and where ranks
//! go over the entries' slots. Which entries name this machine is
//! [`kauri_os::machine`]'s to say; this module only merges.

use kauri_core::plan::job::{too_many_ranks, HostSpec, Placement, UsageError, RANKS_MAX};
use kauri_launch::kind::LauncherKind;
use kauri_os::console::quoted;
use kauri_os::hostname::is_local;
use kauri_os::machine::{self, Machine};
use std::collections::HashSet;
use std::path::Path;

/// The hosts of a run, each machine once, and the order in which ranks fill their slots.
///
/// Every entry that names this machine (by any name or address) is one host, and so is every
/// entry of one remote name: the host stands in the place of its first entry, with the slots
/// of all its entries, and gets one agent (none when it is this machine, which the front end
/// serves). Ranks still fill the entries' slots in the order the list gives them, as Hydra's
/// do: Hydra merges only consecutive entries of one name (`HYDU_add_to_node_list`) and starts a
/// proxy for every other entry, so `-hosts a,b,a -n 3` puts ranks 0 and 2 on `a` and rank 1 on
/// `b`, here as there, though `a` has one agent here and two proxies there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// Each machine once, in the order of its first entry, with its entries' slots summed.
    pub hosts: Vec<HostSpec>,
    /// The entries in the list's order: each one's host (an index into `hosts`) and slots.
    pub entries: Vec<(usize, usize)>,
    /// How many names each host was given (a name given twice counts once): `-ppn N` is `N`
    /// slots for each, as Hydra's is `N` for each of its nodes.
    pub names: Vec<usize>,
    /// The host that is this machine, when one is.
    pub here: Option<usize>,
}

impl HostList {
    /// Merges `entries` into machines. `here` says which names are this machine's; with
    /// `labels` (simulated hosts, `-launcher fork`) a name is a label and only entries of one
    /// label are one host, and the first whose label `here` takes is served here.
    pub fn merge(entries: &[HostSpec], here: &dyn Fn(&str) -> bool, labels: bool) -> Self {
        let mut list = HostList {
            hosts: Vec::new(),
            entries: Vec::with_capacity(entries.len()),
            names: Vec::new(),
            here: None,
        };
        let mut index: std::collections::HashMap<&str, usize> = Default::default();
        for e in entries {
            let is_here = here(&e.name);
            let found = if is_here && !labels {
                list.here
            } else {
                index.get(e.name.as_str()).copied()
            };
            let h = match found {
                Some(h) => {
                    list.hosts[h].slots = list.hosts[h].slots.saturating_add(e.slots);
                    h
                }
                None => {
                    list.hosts.push(e.clone());
                    list.names.push(0);
                    let h = list.hosts.len() - 1;
                    if is_here && list.here.is_none() {
                        list.here = Some(h);
                    }
                    h
                }
            };
            if index.insert(&e.name, h).is_none() {
                list.names[h] += 1;
            }
            list.entries.push((h, e.slots));
        }
        list
    }

    /// `size` ranks in blocks over the entries' slots, in the list's order (wrapping round
    /// when the job is bigger than the slots), each on its entry's host: Hydra's placement.
    pub fn block(&self, size: usize) -> Placement {
        let slots: Vec<usize> = self.entries.iter().map(|&(_, s)| s).collect();
        let by_entry = Placement::block(size, &slots);
        Placement {
            node: by_entry
                .node
                .iter()
                .map(|&e| self.entries.get(e).map_or(0, |&(h, _)| h))
                .collect(),
            nodes: self.hosts.len().max(1),
        }
    }
}

/// The host list of `entries` for a run on the machine named `me` whose agents `kind`
/// launches. A simulated host's name is a label; the resource managers' node names are
/// their machines' own, so only the names that a launcher which resolves them reaches (ssh,
/// rsh: [`LauncherKind::resolves_host_names`]) and that nothing cheaper settles are asked of
/// the resolver ([`machine::resolve`]).
pub fn host_list(entries: &[HostSpec], me: &str, kind: LauncherKind) -> HostList {
    if kind.simulates_hosts() || entries.is_empty() {
        return HostList::merge(entries, &|n| is_local(n, me), true);
    }
    let m = Machine::this(me);
    let resolve = |names: &[&str]| machine::resolve(names, machine::RESOLVE_WITHIN);
    let asks = kind.resolves_host_names();
    let here: HashSet<&str> = m.named_among(
        entries.iter().map(|e| e.name.as_str()),
        asks.then_some(&resolve as machine::Resolver<'_>),
    );
    HostList::merge(entries, &|n| here.contains(n), false)
}

fn err<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// The longest host name kauri takes, in bytes: DNS's 253, with room to spare.
pub const HOST_NAME_MAX: usize = 255;

/// Parses `-hosts a,b:2`. A list that names no host, or has an empty entry (`a,,b`), is an
/// error.
pub fn parse_hosts(v: &str) -> Result<Vec<HostSpec>, UsageError> {
    if v.trim().is_empty() {
        return err(format!("-hosts {}: names no host", quoted(v)));
    }
    v.split(',')
        .map(|h| match h.trim() {
            "" => err(format!(
                "-hosts {}: an empty host name (before, between or after the commas)",
                quoted(v)
            )),
            h => host_entry(h, None),
        })
        .collect()
}

/// One host, `name` or `name:N` (or `name` with `slots` from a hostfile's `slots=N`). A name
/// is refused when it is empty, holds a blank or a `:` (`a:3:4`), starts with `-` (ssh would
/// read it as an option) or is longer than [`HOST_NAME_MAX`].
fn host_entry(entry: &str, slots: Option<&str>) -> Result<HostSpec, UsageError> {
    let (name, n) = match (entry.split_once(':'), slots) {
        (Some((name, n)), None) => (name, Some(n)),
        (_, s) => (entry, s),
    };
    let bad = if name.is_empty() {
        Some("an empty name")
    } else if name.contains(char::is_whitespace) {
        Some("a host name holds no blank")
    } else if name.starts_with('-') {
        Some("a host name cannot start with '-'")
    } else if name.len() > HOST_NAME_MAX {
        Some("a host name is at most 255 bytes")
    } else if name.contains(':') || n.is_some_and(|n| n.contains(':')) {
        Some("one ':' at most (write host or host:N)")
    } else {
        None
    };
    if let Some(why) = bad {
        return err(format!("bad host {}: {why}", quoted(entry)));
    }
    let slots = match n {
        None => 1,
        Some(n) => match n.trim().parse::<u128>() {
            Ok(k) if k > RANKS_MAX as u128 => {
                return err(too_many_ranks(&format!("{k} slots on host {name}")))
            }
            Ok(k) if k > 0 => k as usize,
            _ => return err(format!("bad slot count {} for host {name}", quoted(n))),
        },
    };
    Ok(HostSpec {
        name: name.to_string(),
        slots,
    })
}

/// Reads a hostfile: `host`, `host:N` (Hydra) or `host slots=N` (Open MPI) per line; `#`
/// starts a comment.
pub fn read_hostfile(path: &Path) -> Result<Vec<HostSpec>, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read hostfile {}: {e}", path.display())))?;
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        let mut slots = None;
        for w in words {
            match w.split_once('=') {
                Some(("slots", n)) | Some(("max_slots", n)) if slots.is_none() => slots = Some(n),
                Some(("slots", _)) | Some(("max_slots", _)) => {}
                _ => {
                    return err(format!(
                        "{}:{}: cannot read {} (expected 'host', 'host:N' or 'host slots=N')",
                        path.display(),
                        i + 1,
                        quoted(w)
                    ))
                }
            }
        }
        let h = host_entry(name, slots)
            .map_err(|e| UsageError(format!("{}:{}: {}", path.display(), i + 1, e.0)))?;
        hosts.push(h);
    }
    if hosts.is_empty() {
        return err(format!("hostfile {} lists no host", path.display()));
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &str) -> Vec<HostSpec> {
        crate::hosts::parse_hosts(list).unwrap()
    }

    fn hosts(l: &HostList) -> Vec<(&str, usize)> {
        l.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect()
    }

    /// `localhost`, `127.0.0.1` and `vm` are this machine.
    fn here(n: &str) -> bool {
        ["localhost", "127.0.0.1", "vm"].contains(&n)
    }

    #[test]
    fn entries_of_this_machine_are_one_host_in_the_place_of_the_first() {
        let l = HostList::merge(&entries("a,localhost:2,b,127.0.0.1:2,vm"), &here, false);
        assert_eq!(hosts(&l), vec![("a", 1), ("localhost", 5), ("b", 1)]);
        assert_eq!(l.here, Some(1));
        assert_eq!(l.entries, vec![(0, 1), (1, 2), (2, 1), (1, 2), (1, 1)]);
        assert_eq!(l.names, vec![1, 3, 1]);
    }

    #[test]
    fn a_remote_name_twice_is_one_host_with_both_slots() {
        let l = HostList::merge(&entries("a,b,a"), &here, false);
        assert_eq!(hosts(&l), vec![("a", 2), ("b", 1)]);
        assert_eq!(l.here, None);
        assert_eq!(l.names, vec![1, 1]);
        let l = HostList::merge(&entries("a:2,a:3"), &here, false);
        assert_eq!(hosts(&l), vec![("a", 5)]);
        assert_eq!(l.entries, vec![(0, 2), (0, 3)]);
    }

    #[test]
    fn labels_are_one_host_only_when_equal() {
        let l = HostList::merge(&entries("vm,localhost,a,localhost"), &here, true);
        assert_eq!(hosts(&l), vec![("vm", 1), ("localhost", 2), ("a", 1)]);
        assert_eq!(
            l.here,
            Some(0),
            "the first label that reads as this machine's"
        );
    }

    #[test]
    fn ranks_fill_the_entries_in_list_order_and_wrap() {
        let l = HostList::merge(&entries("a,b,a"), &here, false);
        assert_eq!(l.block(3).node, vec![0, 1, 0]);
        assert_eq!(l.block(5).node, vec![0, 1, 0, 0, 1]);
        assert_eq!(l.block(5).nodes, 2);
        let l = HostList::merge(&entries("a:2,b,a:2"), &here, false);
        assert_eq!(l.block(5).node, vec![0, 0, 1, 0, 0]);
    }

    #[test]
    fn fork_labels_are_never_resolved_and_loopback_names_merge_for_ssh() {
        let l = host_list(&entries("localhost,vm,localhost"), "vm", LauncherKind::Fork);
        assert_eq!(hosts(&l), vec![("localhost", 2), ("vm", 1)]);
        let l = host_list(&entries("localhost,vm,127.0.0.1"), "vm", LauncherKind::Ssh);
        assert_eq!(hosts(&l), vec![("localhost", 3)]);
        assert_eq!(l.here, Some(0));
        let l = host_list(
            &entries("localhost,203.0.113.9,localhost"),
            "vm",
            LauncherKind::Slurm,
        );
        assert_eq!(hosts(&l), vec![("localhost", 2), ("203.0.113.9", 1)]);
    }
}
