//! The run's hosts as machines: the entries of `-hosts`, a hostfile or an allocation made
//! into one host per machine ([`HostList`]), which host the front end serves, and where ranks
//! go over the entries' slots. Which entries name this machine is
//! [`crate::launch::machine`]'s to say; this module only merges.

use crate::host::node::is_local;
use crate::launch::machine::{self, Machine};
use crate::plan::job::{HostSpec, Placement};
use std::collections::HashSet;

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
pub(crate) struct HostList {
    /// Each machine once, in the order of its first entry, with its entries' slots summed.
    pub(crate) hosts: Vec<HostSpec>,
    /// The entries in the list's order: each one's host (an index into `hosts`) and slots.
    pub(crate) entries: Vec<(usize, usize)>,
    /// How many names each host was given (a name given twice counts once): `-ppn N` is `N`
    /// slots for each, as Hydra's is `N` for each of its nodes.
    pub(crate) names: Vec<usize>,
    /// The host that is this machine, when one is.
    pub(crate) here: Option<usize>,
}

impl HostList {
    /// Merges `entries` into machines. `here` says which names are this machine's; with
    /// `labels` (simulated hosts, `-launcher fork`) a name is a label and only entries of one
    /// label are one host, and the first whose label `here` takes is served here.
    pub(crate) fn merge(entries: &[HostSpec], here: &dyn Fn(&str) -> bool, labels: bool) -> Self {
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
    pub(crate) fn block(&self, size: usize) -> Placement {
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
/// launches. A simulated host's name (`fork`) is a label; the resource managers' node names
/// are their machines' own, so only the names `ssh` and `rsh` reach that nothing cheaper
/// settles are asked of the resolver ([`machine::resolve`]).
pub(crate) fn host_list(entries: &[HostSpec], me: &str, kind: &str) -> HostList {
    if kind == "fork" || entries.is_empty() {
        return HostList::merge(entries, &|n| is_local(n, me), true);
    }
    let m = Machine::this(me);
    let resolve = |names: &[&str]| machine::resolve(names, machine::RESOLVE_WITHIN);
    let asks = matches!(kind, "ssh" | "rsh");
    let here: HashSet<&str> = m.named_among(
        entries.iter().map(|e| e.name.as_str()),
        asks.then_some(&resolve as machine::Resolver<'_>),
    );
    HostList::merge(entries, &|n| here.contains(n), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &str) -> Vec<HostSpec> {
        crate::cli::parse_hosts(list).unwrap()
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
        let l = host_list(&entries("localhost,vm,localhost"), "vm", "fork");
        assert_eq!(hosts(&l), vec![("localhost", 2), ("vm", 1)]);
        let l = host_list(&entries("localhost,vm,127.0.0.1"), "vm", "ssh");
        assert_eq!(hosts(&l), vec![("localhost", 3)]);
        assert_eq!(l.here, Some(0));
        let l = host_list(&entries("localhost,203.0.113.9,localhost"), "vm", "slurm");
        assert_eq!(hosts(&l), vec![("localhost", 2), ("203.0.113.9", 1)]);
    }
}
