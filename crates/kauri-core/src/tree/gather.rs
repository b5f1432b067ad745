//! The fence gather: one node's fence contributions (its own ranks' and one merged
//! contribution from each child) merged into one for its parent, one epoch at a time. Pure:
//! the hub and the branch feed it what arrives and send on what it completes.

use crate::proto::kvs::{merge, Packed};
use std::collections::{BTreeMap, HashSet};

/// A fence contribution: several merge into one on the way up the tree.
pub trait Contribution: Sized {
    /// Merges contributions in order (the node's own first, then the children's by id).
    fn merge(parts: impl Iterator<Item = Self>) -> Self;
}

impl Contribution for Packed {
    fn merge(parts: impl Iterator<Item = Self>) -> Self {
        merge(parts)
    }
}

/// PMIx fence data: opaque blobs, concatenated.
impl Contribution for bytes::Bytes {
    fn merge(parts: impl Iterator<Item = Self>) -> Self {
        crate::proto::kvs::concat(parts)
    }
}

/// Gathers one node's fence contributions: its own ranks' and one merged contribution from
/// each child, for one epoch at a time. `T` is a PMI [`Packed`] delta or a PMIx blob.
#[derive(Debug)]
pub struct Gather<T = Packed> {
    epoch: u64,
    need_local: bool,
    local: Option<T>,
    children: BTreeMap<u32, T>,
    child_ids: HashSet<u32>,
    /// Parts of the current epoch from children dropped after they gave them.
    dropped: Vec<T>,
}

impl<T: Contribution> Gather<T> {
    /// A gather over the node's own ranks (if it has any) and `child_ids`.
    pub fn new(need_local: bool, child_ids: Vec<u32>) -> Gather<T> {
        Gather {
            epoch: 0,
            need_local,
            local: None,
            children: BTreeMap::new(),
            child_ids: child_ids.into_iter().collect(),
            dropped: Vec::new(),
        }
    }

    /// The node's own contribution; returns the merged one when the epoch is complete.
    pub fn local(&mut self, epoch: u64, part: T) -> Option<(u64, T)> {
        if epoch != self.epoch {
            return None;
        }
        self.local = Some(part);
        self.complete()
    }

    /// A child's contribution.
    pub fn child(&mut self, id: u32, epoch: u64, part: T) -> Option<(u64, T)> {
        if epoch != self.epoch || !self.child_ids.contains(&id) {
            return None;
        }
        self.children.insert(id, part);
        self.complete()
    }

    /// The epoch being gathered.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Some part of the current epoch is in (this node's or a child's): a fence is under way.
    pub fn under_way(&self) -> bool {
        self.local.is_some() || !self.children.is_empty() || !self.dropped.is_empty()
    }

    /// The current epoch still waits for this node's own ranks.
    pub fn needs_local(&self) -> bool {
        self.need_local && self.local.is_none()
    }

    /// The current epoch still waits for child `id`.
    pub fn needs_child(&self, id: u32) -> bool {
        self.child_ids.contains(&id) && !self.children.contains_key(&id)
    }

    /// Child `id` will contribute no more (its host was lost, or all its ranks ended, in a
    /// job that goes on without them): this epoch and the next ones complete without it (a
    /// part it already gave this epoch is kept). Returns the merged contribution when that
    /// completes the epoch under way.
    pub fn drop_child(&mut self, id: u32) -> Option<(u64, T)> {
        if !self.child_ids.remove(&id) {
            return None;
        }
        if let Some(part) = self.children.remove(&id) {
            self.dropped.push(part);
        }
        self.complete_under_way()
    }

    /// The node's own ranks will contribute no more (all ended): as [`Gather::drop_child`].
    pub fn drop_local(&mut self) -> Option<(u64, T)> {
        if !self.need_local {
            return None;
        }
        self.need_local = false;
        if let Some(part) = self.local.take() {
            self.dropped.push(part);
        }
        self.complete_under_way()
    }

    /// Completes the epoch if a part of it is in and nothing more is needed: an epoch nobody
    /// has started is not completed by a drop.
    fn complete_under_way(&mut self) -> Option<(u64, T)> {
        if self.under_way() {
            self.complete()
        } else {
            None
        }
    }

    fn complete(&mut self) -> Option<(u64, T)> {
        if self.need_local && self.local.is_none() {
            return None;
        }
        // Every key is a known child (checked on insert), so counting is enough: checking
        // each id on every arrival made a gather over N children O(N²).
        if self.children.len() < self.child_ids.len() {
            return None;
        }
        let parts = self
            .local
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.children).into_values())
            .chain(std::mem::take(&mut self.dropped));
        let merged = T::merge(parts);
        let e = self.epoch;
        self.epoch += 1;
        Some((e, merged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn one(k: &str, v: &str) -> Packed {
        Packed::from_pairs([(k, v)])
    }

    fn none() -> Packed {
        Packed::default()
    }

    #[test]
    fn gather_waits_for_everyone_then_merges_in_order() {
        let mut g: Gather = Gather::new(true, vec![2, 5]);
        assert!(g.child(5, 0, one("c", "5")).is_none());
        assert!(g.local(0, one("a", "0")).is_none());
        assert!(
            g.child(5, 1, none()).is_none(),
            "a later epoch is not mixed in"
        );
        let (e, d) = g.child(2, 0, one("b", "2")).unwrap();
        assert_eq!(e, 0);
        let keys: Vec<&str> = d.pairs().map(|p| p.unwrap().0).collect();
        assert_eq!(keys, vec!["a", "b", "c"]);
        // The next epoch starts empty.
        assert!(g.local(1, none()).is_none());
    }

    #[test]
    fn a_gather_says_what_it_still_waits_for() {
        let mut g: Gather = Gather::new(true, vec![2, 5]);
        assert!(!g.under_way() && g.needs_local() && g.needs_child(2));
        assert!(g.child(5, 0, none()).is_none());
        assert!(g.under_way() && g.needs_local() && g.needs_child(2) && !g.needs_child(5));
        assert!(!g.needs_child(7), "not a child");
        assert!(g.local(0, none()).is_none());
        assert!(g.child(2, 0, none()).is_some());
        assert_eq!(g.epoch(), 1);
        assert!(
            !g.under_way() && g.needs_child(5),
            "the next epoch waits for everyone"
        );
    }

    #[test]
    fn an_unknown_child_is_ignored() {
        let mut g: Gather = Gather::new(false, vec![1]);
        assert!(g.child(9, 0, none()).is_none());
        assert_eq!(g.child(1, 0, none()), Some((0, none())));
    }

    #[test]
    fn a_root_without_ranks_needs_only_its_children() {
        let mut g: Gather = Gather::new(false, vec![1]);
        assert_eq!(g.child(1, 0, none()), Some((0, none())));
    }

    #[test]
    fn blobs_are_concatenated() {
        let b = Bytes::from_static;
        let mut g: Gather<Bytes> = Gather::new(true, vec![3, 1]);
        assert!(g.child(3, 0, b(b"cc")).is_none());
        assert!(g.local(0, b(b"a")).is_none());
        assert_eq!(g.child(1, 0, b(b"b")), Some((0, b(b"abcc"))));
        assert_eq!(g.local(1, Bytes::new()), None);
    }

    /// A child dropped while a fence waits for it completes the fence without it, keeps what
    /// it gave before, and is not waited for in the next epochs; a drop with nothing under
    /// way completes nothing.
    #[test]
    fn a_dropped_child_or_local_part_is_not_waited_for() {
        let b = Bytes::from_static;
        let mut g: Gather<Bytes> = Gather::new(true, vec![1, 2, 3]);
        assert_eq!(g.drop_child(3), None, "nothing under way");
        assert!(g.child(2, 0, b(b"b")).is_none());
        assert!(g.local(0, b(b"a")).is_none());
        assert!(g.needs_child(1));
        assert_eq!(g.drop_child(1), Some((0, b(b"ab"))));
        assert!(!g.needs_child(1));
        assert_eq!(g.drop_child(1), None, "dropped once");
        assert!(g.local(1, b(b"a")).is_none());
        assert_eq!(g.child(2, 1, b(b"b")), Some((1, b(b"ab"))));
        // A child that gave its part, then is dropped: the part stays in.
        assert!(g.child(2, 2, b(b"b")).is_none());
        assert_eq!(g.drop_child(2), None, "still waits for the local part");
        assert_eq!(g.local(2, b(b"a")), Some((2, b(b"ab"))));
        // The local part dropped: a fence of the children alone.
        let mut g: Gather<Bytes> = Gather::new(true, vec![1]);
        assert!(g.child(1, 0, b(b"c")).is_none());
        assert_eq!(g.drop_local(), Some((0, b(b"c"))));
        assert!(!g.needs_local());
        assert_eq!(g.child(1, 1, b(b"c")), Some((1, b(b"c"))));
    }
}
