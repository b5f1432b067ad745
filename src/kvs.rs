//! One job's key-value store as one agent sees it: the committed pairs every rank can read,
//! and the puts its local ranks made since the last fence.
//!
//! A fence moves pending puts into the committed store of every agent: each agent hands its
//! pending puts up ([`Kvs::take_pending`]), the root merges every agent's contribution, and
//! every agent applies the merged delta ([`Kvs::commit`]). Reads only ever see committed pairs,
//! so a read never waits on the network. Later puts of a key overwrite earlier ones.

use std::collections::HashMap;

/// A list of key-value pairs in put order: a fence contribution or a merged delta.
pub type Delta = Vec<(String, String)>;

/// The store.
#[derive(Debug, Default)]
pub struct Kvs {
    committed: HashMap<String, String>,
    order: Vec<String>,
    pending: Delta,
}

impl Kvs {
    /// Records a put by a local rank; it becomes visible at the next fence.
    pub fn put(&mut self, key: String, value: String) {
        self.pending.push((key, value));
    }

    /// Adds pairs that are visible at once (preput pairs of a spawn, job attributes).
    pub fn preput(&mut self, key: String, value: String) {
        self.commit(vec![(key, value)]);
    }

    /// Takes the puts made since the last fence: this agent's contribution.
    pub fn take_pending(&mut self) -> Delta {
        std::mem::take(&mut self.pending)
    }

    /// Applies a merged delta.
    pub fn commit(&mut self, delta: Delta) {
        for (k, v) in delta {
            if !self.committed.contains_key(&k) {
                self.order.push(k.clone());
            }
            self.committed.insert(k, v);
        }
    }

    /// Reads a committed key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.committed.get(key).map(String::as_str)
    }

    /// The `idx`-th committed pair in first-put order (legacy `getbyidx`).
    pub fn get_by_idx(&self, idx: usize) -> Option<(&str, &str)> {
        let k = self.order.get(idx)?;
        Some((k.as_str(), self.committed[k].as_str()))
    }

    /// How many pairs are committed.
    pub fn len(&self) -> usize {
        self.committed.len()
    }

    /// True when nothing is committed.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty()
    }
}

/// Merges fence contributions (from this agent and its children) into one delta, in order.
pub fn merge(parts: impl IntoIterator<Item = Delta>) -> Delta {
    parts.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_are_invisible_until_commit() {
        let mut k = Kvs::default();
        k.put("a".into(), "1".into());
        assert_eq!(k.get("a"), None);
        let d = k.take_pending();
        k.commit(d);
        assert_eq!(k.get("a"), Some("1"));
        assert!(k.take_pending().is_empty());
    }

    #[test]
    fn later_puts_win_and_order_is_first_put() {
        let mut k = Kvs::default();
        k.commit(merge([
            vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            vec![("a".into(), "3".into())],
        ]));
        assert_eq!(k.get("a"), Some("3"));
        assert_eq!(k.get_by_idx(0), Some(("a", "3")));
        assert_eq!(k.get_by_idx(1), Some(("b", "2")));
        assert_eq!(k.get_by_idx(2), None);
        assert_eq!(k.len(), 2);
    }
}
