//! The tree's shape: which agent is whose parent. A `width`-ary tree in breadth-first order
//! ([`build`]), or LIBI's cost-model tree placed by what a launch costs ([`build_cost`],
//! [`LaunchCost`]).
//!
//! Pure functions from the hosts' plans to [`Subtree`]s; launching them is `hub`'s.

use crate::plan::{HostPlan, Subtree};
use serde::{Deserialize, Serialize};

/// Arranges `hosts` (in order, ids from 1) under a root as a `width`-ary tree in breadth-first
/// order: the root's children are the first `width` hosts, and so on. `width` 0 means flat:
/// every host is a child of the root.
pub fn build(hosts: Vec<HostPlan>, width: usize) -> Vec<Subtree> {
    let parents = (1..=hosts.len())
        .map(|i| (i - 1).checked_div(width).unwrap_or(0))
        .collect::<Vec<_>>();
    from_parents(hosts, &parents)
}

/// What one launch costs, for the cost-model tree ([`build_cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchCost {
    /// A parent's own time per launch: after starting one child it can start the next this
    /// much later (forking the launcher, ssh's own work), in microseconds.
    pub serial_us: u64,
    /// From the start of a launch until the child runs and can launch children of its own
    /// (the remote start, the connection, the handshake), in microseconds.
    pub latency_us: u64,
}

impl LaunchCost {
    /// Parses `SERIAL_MS,LATENCY_MS` (`KAURI_LAUNCH_COST`).
    pub fn parse(v: &str) -> Option<LaunchCost> {
        let (a, b) = v.split_once(',')?;
        let ms = |x: &str| -> Option<u64> {
            let f: f64 = x.trim().parse().ok()?;
            (f.is_finite() && f >= 0.0).then_some((f * 1000.0) as u64)
        };
        Some(LaunchCost {
            serial_us: ms(a)?,
            latency_us: ms(b)?,
        })
    }
}

/// LIBI's cost-model tree: each host, in order, goes under the node (the root, or an agent
/// once it runs) where its launch would start soonest. A node that became ready at `r` starts
/// its k-th launch at `r + k * serial` at the earliest, and with `concurrent` launches in
/// flight (the hub's bound) not before its (k - concurrent)-th child is running; a child runs
/// `serial + latency` after its launch starts. Ties go to the node that was placed first, so a
/// launch that costs nothing serially gives a flat tree, and a launch that is all serial work
/// a binomial one.
pub fn build_cost(hosts: Vec<HostPlan>, cost: LaunchCost, concurrent: usize) -> Vec<Subtree> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = hosts.len();
    let concurrent = concurrent.max(1);
    let mut parents = Vec::with_capacity(n);
    // Per node: when it may start its next launch, and when its launches' children run.
    let mut next = vec![0u64; n + 1];
    let mut running: Vec<Vec<u64>> = vec![Vec::new(); n + 1];
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((0u64, 0usize)));
    for i in 1..=n {
        let Some(Reverse((start, p))) = heap.pop() else {
            break; // the root is always in the heap, and each placed host joins it
        };
        parents.push(p);
        let ready = start + cost.serial_us + cost.latency_us;
        running[p].push(ready);
        let k = running[p].len();
        next[p] = start + cost.serial_us;
        if k >= concurrent {
            next[p] = next[p].max(running[p][k - concurrent]);
        }
        heap.push(Reverse((next[p], p)));
        next[i] = ready;
        heap.push(Reverse((ready, i)));
    }
    from_parents(hosts, &parents)
}

/// Builds the subtrees from `parents[i - 1]`, the parent of host `i` (0: the root); a parent
/// always comes before its children.
fn from_parents(hosts: Vec<HostPlan>, parents: &[usize]) -> Vec<Subtree> {
    let n = hosts.len();
    let mut nodes: Vec<Option<Subtree>> = hosts
        .into_iter()
        .enumerate()
        .map(|(i, plan)| {
            Some(Subtree {
                id: i as u32 + 1,
                plan,
                children: Vec::new(),
            })
        })
        .collect();
    // Attach from the last node up, so every child is complete before it moves into its
    // parent.
    for i in (1..=n).rev() {
        let parent = parents[i - 1];
        if parent == 0 {
            continue;
        }
        let child = nodes[i - 1].take().expect("each node moves once");
        nodes[parent - 1]
            .as_mut()
            .expect("a parent moves after its children")
            .children
            .insert(0, child);
    }
    nodes.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RankPlan;

    fn hosts(n: usize) -> Vec<HostPlan> {
        (0..n)
            .map(|i| HostPlan {
                host: format!("h{i}"),
                node: i,
                index: i,
                ranks: vec![RankPlan {
                    rank: i,
                    app: 0,
                    local_id: 0,
                }],
            })
            .collect()
    }

    fn shape(t: &Subtree) -> String {
        if t.children.is_empty() {
            t.id.to_string()
        } else {
            let c: Vec<String> = t.children.iter().map(shape).collect();
            format!("{}({})", t.id, c.join(","))
        }
    }

    #[test]
    fn kary_trees() {
        let s: Vec<String> = build(hosts(7), 2).iter().map(shape).collect();
        assert_eq!(s, vec!["1(3(7),4)", "2(5,6)"]);
        let s: Vec<String> = build(hosts(4), 1).iter().map(shape).collect();
        assert_eq!(s, vec!["1(2(3(4)))"]);
        let flat = build(hosts(5), 0);
        assert_eq!(flat.len(), 5);
        assert!(flat.iter().all(|t| t.children.is_empty()));
        let t = build(hosts(10), 3);
        assert_eq!(t.iter().map(Subtree::agents).sum::<usize>(), 10);
        assert!(t[0].contains_rank(3) && !t[0].contains_rank(1));
    }

    #[test]
    fn cost_model_trees() {
        let c = |serial_us, latency_us| LaunchCost {
            serial_us,
            latency_us,
        };
        // No serial cost: the root launches everything at once.
        let s: Vec<String> = build_cost(hosts(5), c(0, 20), 32)
            .iter()
            .map(shape)
            .collect();
        assert_eq!(s, vec!["1", "2", "3", "4", "5"]);
        // All serial work: a binomial tree (each running node launches one per step).
        let s: Vec<String> = build_cost(hosts(7), c(10, 0), 32)
            .iter()
            .map(shape)
            .collect();
        assert_eq!(s, vec!["1(3(7),5)", "2(6)", "4"]);
        // Latency 3x the serial cost: the root launches 4 before its first child runs, then
        // shares the work with the children as they come up.
        let t = build_cost(hosts(20), c(5, 15), 32);
        assert_eq!(t.len(), 9);
        assert_eq!(t.iter().map(Subtree::agents).sum::<usize>(), 20);
        assert_eq!(shape(&t[0]), "1(6,8,11,15,20)");
        // A bound on launches in flight holds the root back until a child runs.
        assert_eq!(build_cost(hosts(20), c(1, 100), 32).len(), 20);
        assert_eq!(build_cost(hosts(20), c(1, 100), 4).len(), 8);
        assert_eq!(LaunchCost::parse("2,20.5"), Some(c(2000, 20500)));
        assert_eq!(LaunchCost::parse("x"), None);
    }
}
