//! One job's key-value store as one agent sees it: the committed pairs every rank can read,
//! and the puts its local ranks made since the last fence.
//!
//! A fence moves pending puts into the committed store of every agent: each agent hands its
//! pending puts up ([`Kvs::take_pending`]), the root merges every agent's contribution, and
//! every agent applies the merged delta ([`Kvs::commit`]). Reads only ever see committed pairs,
//! so a read never waits on the network. Later puts of a key overwrite earlier ones.
//!
//! Fence contributions and merged deltas travel as [`Packed`] pairs: one buffer that merging
//! concatenates and forwarding copies as it is, so an agent between the root and the leaves
//! never takes a delta apart; only the store it lands in does.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A list of key-value pairs in put order (preput pairs, published pairs).
pub type Delta = Vec<(String, String)>;

/// Key-value pairs in put order, packed into one buffer: for each pair, the key's length as
/// a little-endian `u32`, the key, the value's length the same way, the value.
///
/// Merging is concatenation ([`Packed::append`]), and the wire form is the buffer as one byte
/// string, so merging on the way up and forwarding on the way down cost a copy, not a decode
/// and an encode of every pair. The buffer is checked where it is unpacked ([`Packed::pairs`]):
/// a truncated pair or a key that is not UTF-8 is an error there, never a panic.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Packed(Vec<u8>);

/// Why a [`Packed`] buffer could not be unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPacked(String);

impl fmt::Display for BadPacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed key-value data: {}", self.0)
    }
}

impl std::error::Error for BadPacked {}

impl Packed {
    /// Packs `pairs` in order.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Packed {
        let mut p = Packed::default();
        for (k, v) in pairs {
            p.push(k, v);
        }
        p
    }

    /// Appends one pair.
    ///
    /// # Panics
    /// If the key or the value is 4 GiB or longer (PMI limits them to a few KiB).
    pub fn push(&mut self, key: &str, value: &str) {
        for s in [key, value] {
            let len = u32::try_from(s.len()).expect("a key or value of 4 GiB");
            self.0.extend_from_slice(&len.to_le_bytes());
            self.0.extend_from_slice(s.as_bytes());
        }
    }

    /// Appends `other`'s pairs after this one's.
    pub fn append(&mut self, other: &Packed) {
        self.0.extend_from_slice(&other.0);
    }

    /// The packed size in bytes.
    pub fn byte_len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no pair.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs in order, each checked; the first bad one ends the walk with an error.
    pub fn pairs(&self) -> Pairs<'_> {
        Pairs { rest: &self.0 }
    }

    /// How many pairs there are, or why the buffer is bad.
    pub fn count(&self) -> Result<usize, BadPacked> {
        self.pairs().try_fold(0, |n, p| p.map(|_| n + 1))
    }

    /// The pairs, owned.
    pub fn to_delta(&self) -> Result<Delta, BadPacked> {
        self.pairs()
            .map(|p| p.map(|(k, v)| (k.to_string(), v.to_string())))
            .collect()
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for p in self.pairs() {
            match p {
                Ok(kv) => l.entry(&kv),
                Err(e) => l.entry(&e),
            };
        }
        l.finish()
    }
}

impl From<&Delta> for Packed {
    fn from(d: &Delta) -> Packed {
        Packed::from_pairs(d.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// The pairs of a [`Packed`] buffer: see [`Packed::pairs`].
pub struct Pairs<'a> {
    rest: &'a [u8],
}

impl<'a> Pairs<'a> {
    fn string(&mut self, what: &str) -> Result<&'a str, BadPacked> {
        let bad = |why: &str| BadPacked(format!("{what}: {why}"));
        let (len, rest) = self
            .rest
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("length cut short"))?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad(&format!("{len} bytes announced, {} left", rest.len())));
        }
        let (s, rest) = rest.split_at(len);
        self.rest = rest;
        std::str::from_utf8(s).map_err(|_| bad("not UTF-8"))
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<(&'a str, &'a str), BadPacked>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let pair = self
            .string("key")
            .and_then(|k| self.string("value").map(|v| (k, v)));
        if pair.is_err() {
            self.rest = &[];
        }
        Some(pair)
    }
}

impl Serialize for Packed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Packed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Packed, D::Error> {
        byte_string::deserialize(d).map(Packed)
    }
}

/// A `Vec<u8>` field as one byte string on the wire (`#[serde(with = "byte_string")]`):
/// serde's default writes and reads a `Vec<u8>` one byte at a time.
pub mod byte_string {
    use serde::{de, Deserializer, Serializer};
    use std::fmt;

    /// Writes the bytes as one byte string.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// Reads a byte string (or, from self-describing formats, a sequence of bytes).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<u8>, A::Error> {
                let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = a.next_element()? {
                    v.push(b);
                }
                Ok(v)
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}

/// The store.
#[derive(Debug, Default)]
pub struct Kvs {
    /// In first-put order: a later put of a key replaces its value in place.
    committed: IndexMap<String, String>,
    pending: Packed,
}

impl Kvs {
    /// Records a put by a local rank; it becomes visible at the next fence.
    pub fn put(&mut self, key: &str, value: &str) {
        self.pending.push(key, value);
    }

    /// Adds pairs that are visible at once (preput pairs of a spawn, job attributes).
    pub fn preput(&mut self, key: String, value: String) {
        self.commit(vec![(key, value)]);
    }

    /// Takes the puts made since the last fence: this agent's contribution.
    pub fn take_pending(&mut self) -> Packed {
        std::mem::take(&mut self.pending)
    }

    /// Applies pairs in order.
    pub fn commit(&mut self, delta: Delta) {
        self.committed.extend(delta);
    }

    /// Applies a merged fence delta. It is checked whole first, so a bad one changes nothing.
    pub fn commit_packed(&mut self, delta: &Packed) -> Result<(), BadPacked> {
        let n = delta.count()?;
        self.committed.reserve(n);
        for (k, v) in delta.pairs().flatten() {
            match self.committed.get_mut(k) {
                Some(old) => {
                    old.clear();
                    old.push_str(v);
                }
                None => {
                    self.committed.insert(k.to_string(), v.to_string());
                }
            }
        }
        Ok(())
    }

    /// Reads a committed key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.committed.get(key).map(String::as_str)
    }

    /// The `idx`-th committed pair in first-put order (legacy `getbyidx`).
    pub fn get_by_idx(&self, idx: usize) -> Option<(&str, &str)> {
        let (k, v) = self.committed.get_index(idx)?;
        Some((k.as_str(), v.as_str()))
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
pub fn merge(parts: impl IntoIterator<Item = Packed>) -> Packed {
    Packed(concat(parts.into_iter().map(|p| p.0)))
}

/// Byte buffers one after another, in one allocation; a single buffer is returned as it is
/// (a node with one child passes its contribution on without a copy).
pub fn concat(parts: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut parts: Vec<Vec<u8>> = parts.into_iter().collect();
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    parts.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(pairs: &[(&str, &str)]) -> Packed {
        Packed::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn puts_are_invisible_until_commit() {
        let mut k = Kvs::default();
        k.put("a", "1");
        assert_eq!(k.get("a"), None);
        let d = k.take_pending();
        k.commit_packed(&d).unwrap();
        assert_eq!(k.get("a"), Some("1"));
        assert!(k.take_pending().is_empty());
    }

    #[test]
    fn later_puts_win_and_order_is_first_put() {
        let mut k = Kvs::default();
        k.commit_packed(&merge([
            packed(&[("a", "1"), ("b", "2")]),
            packed(&[("a", "3")]),
        ]))
        .unwrap();
        assert_eq!(k.get("a"), Some("3"));
        assert_eq!(k.get_by_idx(0), Some(("a", "3")));
        assert_eq!(k.get_by_idx(1), Some(("b", "2")));
        assert_eq!(k.get_by_idx(2), None);
        assert_eq!(k.len(), 2);
    }

    #[test]
    fn packed_pairs_round_trip_through_the_wire_form() {
        let p = packed(&[("key", "a value with spaces"), ("", ""), ("k2", "é=ü")]);
        let bytes = bincode::serialize(&p).unwrap();
        // one length and the buffer: no per-byte encoding
        assert_eq!(bytes.len(), 8 + p.byte_len());
        let back: Packed = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.count(), Ok(3));
        assert_eq!(
            back.to_delta().unwrap(),
            vec![
                ("key".to_string(), "a value with spaces".to_string()),
                (String::new(), String::new()),
                ("k2".to_string(), "é=ü".to_string())
            ]
        );
        let from_json: Packed = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(from_json, p);
    }

    #[test]
    fn bad_packed_data_is_an_error_and_commits_nothing() {
        let good = packed(&[("a", "1"), ("b", "2")]);
        let mut cut = good.0.clone();
        cut.truncate(cut.len() - 1);
        let mut not_utf8 = good.0.clone();
        not_utf8[4] = 0xff;
        let mut huge = good.0.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        for bad in [cut, not_utf8, huge, vec![1, 0]] {
            let bad = Packed(bad);
            let mut k = Kvs::default();
            let e = k.commit_packed(&bad).unwrap_err();
            assert!(
                e.to_string().starts_with("malformed key-value data: "),
                "{e}"
            );
            assert!(k.is_empty(), "{bad:?} committed something");
            assert_eq!(bad.pairs().filter(|p| p.is_err()).count(), 1);
        }
    }
}
