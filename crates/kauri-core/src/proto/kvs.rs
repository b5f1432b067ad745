//! One job's key-value store as one agent sees it: the committed pairs every rank can read,
//! and the puts its local ranks made since the last fence.
//!
//! A fence moves pending puts into the committed store of every agent: each agent hands its
//! pending puts up ([`Kvs::take_pending`]), the root merges every agent's contribution, and
//! every agent applies the merged delta ([`Kvs::commit_checked`]). Reads only ever see committed pairs,
//! so a read never waits on the network. Later puts of a key overwrite earlier ones.
//!
//! Fence contributions and merged deltas travel as [`Packed`] pairs: one buffer that merging
//! concatenates and forwarding copies as it is, so an agent between the root and the leaves
//! never takes a delta apart; the store it lands in keeps it whole too, and takes it apart
//! only when a rank reads a key. The root checks each merged delta once, for every agent
//! ([`FenceKeys`]), so no agent walks one on commit.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Range;

/// A list of key-value pairs in put order (preput pairs, published pairs).
pub type Delta = Vec<(String, String)>;

/// Key-value pairs in put order, packed into one buffer: for each pair, the key's length as
/// a little-endian `u32`, the key, the value's length the same way, the value.
///
/// Merging is concatenation ([`Packed::append`]), and the wire form is the buffer as one byte
/// string, so merging on the way up and forwarding on the way down cost a copy, not a decode
/// and an encode of every pair. The buffer is checked where it is unpacked ([`Packed::pairs`]):
/// a truncated pair or a key that is not UTF-8 is an error there, never a panic.
///
/// The buffer is shared ([`Bytes`]): a clone costs a reference count, so the store keeps a
/// merged delta as it came ([`Kvs::commit_packed`]) instead of copying its pairs out.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Packed(Bytes);

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
        // a buffer nobody else holds becomes a `Vec` and back without a copy
        let mut v = Vec::from(std::mem::take(&mut self.0));
        for s in [key, value] {
            let len = u32::try_from(s.len()).expect("a key or value of 4 GiB");
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(s.as_bytes());
        }
        self.0 = Bytes::from(v);
    }

    /// Appends `other`'s pairs after this one's.
    pub fn append(&mut self, other: &Packed) {
        let mut v = Vec::from(std::mem::take(&mut self.0));
        v.extend_from_slice(&other.0);
        self.0 = Bytes::from(v);
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

    /// Checks the whole buffer as [`Packed::count`] does, faster: when every byte of it is
    /// ASCII (the lengths under 128 included, as for most PMI keys and values), only the
    /// lengths are walked; otherwise each string's UTF-8 is checked too.
    pub fn check(&self) -> Result<(), BadPacked> {
        self.check_keys(None).map(|_| ())
    }

    /// Checks the buffer as [`Packed::check`] does and, in the same walk, whether its keys
    /// are those of `old`, a key layout (this function made it for an earlier delta):
    /// `Ok(None)` when they are, in the same order; otherwise its own key layout.
    fn check_keys(&self, old: Option<&[u8]>) -> Result<Option<Vec<u8>>, BadPacked> {
        let bytes = &self.0[..];
        let utf8 = !bytes.is_ascii();
        let (mut same, old) = (old.is_some(), old.unwrap_or_default());
        let (mut at, mut old_at, mut keys) = (0, 0, Vec::new());
        while at < bytes.len() {
            let Some((key, value)) = pair_at(bytes, at) else {
                return Err(self.why_bad("cut short"));
            };
            if utf8
                && (std::str::from_utf8(&bytes[key.clone()]).is_err()
                    || std::str::from_utf8(&bytes[value.clone()]).is_err())
            {
                return Err(self.why_bad("not UTF-8"));
            }
            // the key with its length
            let with_len = &bytes[at..key.end];
            if same {
                let end = old_at + with_len.len();
                same = old
                    .get(old_at..end)
                    .is_some_and(|o| same_bytes(o, with_len));
                if same {
                    old_at = end;
                } else {
                    keys.extend_from_slice(&old[..old_at]);
                }
            }
            if !same {
                keys.extend_from_slice(with_len);
            }
            at = value.end;
        }
        if same && old_at == old.len() {
            return Ok(None);
        }
        if same {
            keys.extend_from_slice(&old[..old_at]);
        }
        Ok(Some(keys))
    }

    /// Why the buffer is bad, from the slow walk that names the pair (`fallback` if that
    /// walk finds nothing wrong, which a caller that found something never sees).
    fn why_bad(&self, fallback: &str) -> BadPacked {
        self.count()
            .err()
            .unwrap_or_else(|| BadPacked(fallback.into()))
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

/// The keys of the last merged fence delta a tree's root checked, each after its length as
/// in the delta, in order (a few bytes a key): the root checks each merged delta once, for
/// every agent, and tells them whether its keys are the last one's ([`Kvs::commit_checked`]).
#[derive(Debug, Default)]
pub struct FenceKeys(Vec<u8>);

impl FenceKeys {
    /// Checks `delta` whole (its lengths and UTF-8, as [`Packed::check`]) and, in the same
    /// walk, whether its keys are the last delta's, in the same order: `Ok(true)` when they
    /// are and it has any. A bad delta is an error and leaves the last delta's keys as they
    /// were.
    pub fn check(&mut self, delta: &Packed) -> Result<bool, BadPacked> {
        match delta.check_keys(Some(&self.0))? {
            None => Ok(!delta.is_empty()),
            Some(keys) => {
                self.0 = keys;
                Ok(false)
            }
        }
    }
}

/// A pair's key and value as bytes.
type RawPair<'a> = (&'a [u8], &'a [u8]);

/// The byte ranges of the key and the value of the pair that starts at `at` in `bytes`;
/// `None` when a length or a string is cut short (the fast walk of [`Packed::check`]: no
/// error is built on the way).
#[inline(always)]
fn pair_at(bytes: &[u8], at: usize) -> Option<(Range<usize>, Range<usize>)> {
    let string = |at: usize| {
        let len = bytes.get(at..at.checked_add(4)?)?;
        let start = at + 4;
        let end =
            start.checked_add(u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize)?;
        (end <= bytes.len()).then_some(start..end)
    };
    let key = string(at)?;
    let value = string(key.end)?;
    Some((key, value))
}

/// `a == b`, without a call to `memcmp` for the short strings PMI keys mostly are: two
/// overlapping words from each end (a key with its length, `h17r3k0` and 4 bytes, is two
/// 8-byte compares, not a dozen of bytes).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        0..4 => a == b,
        4..8 => a.first_chunk::<4>() == b.first_chunk() && a.last_chunk::<4>() == b.last_chunk(),
        8..=16 => a.first_chunk::<8>() == b.first_chunk() && a.last_chunk::<8>() == b.last_chunk(),
        17..=32 => {
            a.first_chunk::<16>() == b.first_chunk() && a.last_chunk::<16>() == b.last_chunk()
        }
        _ => a == b,
    }
}

/// The pairs of a [`Packed`] buffer: see [`Packed::pairs`].
pub struct Pairs<'a> {
    rest: &'a [u8],
}

impl<'a> Pairs<'a> {
    /// The next string's bytes, its length checked but not its UTF-8.
    fn raw(&mut self, what: &str) -> Result<&'a [u8], BadPacked> {
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
        Ok(s)
    }

    fn string(&mut self, what: &str) -> Result<&'a str, BadPacked> {
        let s = self.raw(what)?;
        std::str::from_utf8(s).map_err(|_| BadPacked(format!("{what}: not UTF-8")))
    }

    /// The next pair's key and value as bytes, their lengths checked but not their UTF-8.
    fn next_raw(&mut self) -> Option<Result<RawPair<'a>, BadPacked>> {
        if self.rest.is_empty() {
            return None;
        }
        let pair = self
            .raw("key")
            .and_then(|k| self.raw("value").map(|v| (k, v)));
        if pair.is_err() {
            self.rest = &[];
        }
        Some(pair)
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

/// Reads a [`Packed`] as a slice of the frame being decoded ([`from_frame`]) when the
/// format lends out its bytes, as a copy otherwise.
impl<'de> Deserialize<'de> for Packed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Packed, D::Error> {
        shared_bytes::deserialize(d).map(Packed)
    }
}

/// A [`Bytes`] field as one byte string on the wire (`#[serde(with = "shared_bytes")]`),
/// read as a slice of the frame being decoded ([`from_frame`]) when the format lends out its
/// bytes, as a copy otherwise: a PMIx fence's blobs go from the frame that brought them to
/// the PMIx server without a copy, as a [`Packed`] delta goes to the store.
pub mod shared_bytes {
    use super::{byte_string, within, FRAME};
    use bytes::Bytes;
    use serde::{de, Deserializer, Serializer};
    use std::fmt;

    /// Writes the bytes as one byte string.
    pub fn serialize<S: Serializer>(v: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// Reads one byte string, shared with the frame being decoded where it can be.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        d.deserialize_bytes(Shared)
    }

    struct Shared;

    impl<'de> de::Visitor<'de> for Shared {
        type Value = Bytes;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }
        fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Bytes, E> {
            Ok(FRAME.with(|f| match &*f.borrow() {
                Some(frame) if within(frame, v) => frame.slice_ref(v),
                _ => Bytes::copy_from_slice(v),
            }))
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }
        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, a: A) -> Result<Bytes, A::Error> {
            de::Visitor::visit_seq(byte_string::Bytes, a).map(Bytes::from)
        }
    }
}

thread_local! {
    /// The frame [`from_frame`] is decoding on this thread, if any.
    static FRAME: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// True when `part` lies inside `whole`'s bytes.
fn within(whole: &Bytes, part: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

/// Runs `decode`, which decodes a message from `frame`'s bytes, so that the [`Packed`] it
/// reads are slices of `frame` (sharing its buffer) instead of copies: a fence's merged delta
/// goes from the frame that brought it to the store without a copy.
pub fn from_frame<T>(frame: &Bytes, decode: impl FnOnce() -> T) -> T {
    /// Puts the frame decoded before back when dropped, even if `decode` panics (the
    /// thread's slot then holds no frame, and no buffer, longer than the decode).
    struct Restore(Option<Bytes>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            FRAME.with(|f| *f.borrow_mut() = old);
        }
    }
    let _restore = Restore(FRAME.with(|f| f.replace(Some(frame.clone()))));
    decode()
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
        d.deserialize_byte_buf(Bytes)
    }

    /// The visitor of a byte string into a `Vec<u8>`.
    pub(super) struct Bytes;
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
}

/// The store.
///
/// Committed pairs are kept as the [`Packed`] segments they came in, in commit order: a
/// fence's merged delta is kept as it came, shared with the frame that carried it, and
/// nothing is decoded until a rank reads. The tree's root checked it once
/// ([`FenceKeys::check`]) for every agent, so an agent's commit does not walk it; reads stay
/// checked all the same (a pair that does not unpack reads as missing, never as a panic).
/// The first read after a commit indexes the new segments (a key to where its latest pair is, in first-put
/// order), so an agent whose ranks read few keys never takes the rest apart. Pairs committed
/// one by one ([`Kvs::preput`], [`Kvs::commit`]) go to a segment of the store's own.
#[derive(Debug, Default)]
pub struct Kvs {
    /// Committed pairs, in commit order.
    segments: Vec<Packed>,
    /// The last segment is the store's own (pairs committed one by one), so more go to it.
    own_tail: bool,
    /// The last segment is the merged delta of the last fence committed: a delta with its
    /// keys, in order, replaces it.
    last_fence: bool,
    /// The keys of the deltas [`Kvs::commit_packed`] checked itself (a store that is its
    /// own root); an agent's store, which takes the root's word, keeps none.
    keys: FenceKeys,
    /// Where each key's latest pair is, for the segments indexed so far.
    index: RefCell<Index>,
    /// Reads since the last commit that looked in the segments not indexed yet.
    scans: Cell<usize>,
    pending: Packed,
}

/// Where a pair is: its segment, and the key's and the value's byte ranges in it.
#[derive(Debug, Clone, Copy)]
struct Loc {
    seg: usize,
    key: (usize, usize),
    value: (usize, usize),
}

/// The index over a [`Kvs`]'s segments: each key's latest [`Loc`] in first-put order, and
/// how far it has read (segment, byte offset in it).
#[derive(Debug, Default)]
struct Index {
    keys: IndexMap<Box<str>, Loc>,
    seg: usize,
    off: usize,
}

/// Segments not yet indexed after which a commit indexes them (and compacts the store when
/// overwritten pairs take most of it), so a job whose ranks never read keeps no more than
/// this many deltas beside its live pairs.
const INDEX_EVERY: usize = 16;

/// Reads after a commit that walk the new segments before a read indexes them: a walk costs
/// a few nanoseconds a pair, indexing a pair a hash and, for a new key, an allocation.
const SCANS: usize = 8;

/// The byte range of `part` in `whole` (`part` is a slice of it).
fn span(whole: &[u8], part: &str) -> (usize, usize) {
    (part.as_ptr() as usize - whole.as_ptr() as usize, part.len())
}

impl Index {
    /// Indexes what `segments` holds past where this index stopped.
    fn catch_up(&mut self, segments: &[Packed]) {
        while let Some(p) = segments.get(self.seg) {
            let bytes = &p.0[..];
            let mut rest = Pairs {
                rest: bytes.get(self.off..).unwrap_or_default(),
            };
            // The root checked every delta; one that is bad all the same (never sent) is read
            // as `Kvs::get` walks it: a pair that is not UTF-8 is skipped, a cut one ends it.
            for (k, v) in std::iter::from_fn(|| rest.next_raw()).map_while(Result::ok) {
                let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) else {
                    continue;
                };
                let loc = Loc {
                    seg: self.seg,
                    key: span(bytes, k),
                    value: span(bytes, v),
                };
                match self.keys.get_mut(k) {
                    Some(old) => *old = loc,
                    None => {
                        self.keys.insert(k.into(), loc);
                    }
                }
            }
            if self.seg + 1 == segments.len() {
                self.off = bytes.len();
                return;
            }
            self.seg += 1;
            self.off = 0;
        }
    }
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
        if !self.own_tail {
            self.segments.push(Packed::default());
            self.own_tail = true;
            self.last_fence = false;
        }
        let Some(tail) = self.segments.last_mut() else {
            return;
        };
        for (k, v) in &delta {
            tail.push(k, v);
        }
    }

    /// Checks a merged fence delta whole, as the root of a tree does ([`FenceKeys::check`]),
    /// then commits it ([`Kvs::commit_checked`]): a bad one changes nothing. For a store that
    /// is its own root; an agent takes the root's word.
    pub fn commit_packed(&mut self, delta: &Packed) -> Result<(), BadPacked> {
        let same_keys = self.keys.check(delta)?;
        self.commit_checked(delta, same_keys);
        Ok(())
    }

    /// Applies the merged delta of a fence, which the root checked ([`FenceKeys::check`]),
    /// without walking it: it is kept as it came, its pairs decoded only when a rank reads.
    /// `same_keys` is the root's word that its keys are the last fence's, in the same order:
    /// then it replaces that fence's delta where the store still holds it last and no read
    /// has indexed it (a job that puts the same keys every fence keeps one delta, not one
    /// per fence, and the keys keep their first-put order). A delta that was not checked
    /// cannot make a read panic: a pair that does not unpack reads as missing.
    pub fn commit_checked(&mut self, delta: &Packed, same_keys: bool) {
        if delta.is_empty() {
            self.last_fence = false;
            return;
        }
        self.scans.set(0);
        if same_keys && self.last_fence && self.last_unindexed() {
            if let Some(last) = self.segments.last_mut() {
                *last = delta.clone();
                return;
            }
        }
        self.segments.push(delta.clone());
        self.own_tail = false;
        self.last_fence = true;
        if self.segments.len() - self.index.get_mut().seg > INDEX_EVERY {
            self.compact();
        }
    }

    /// True when the index has read nothing of the last segment (and so holds no place in it).
    fn last_unindexed(&mut self) -> bool {
        let index = self.index.get_mut();
        let last = self.segments.len().saturating_sub(1);
        index.seg < last || (index.seg == last && index.off == 0)
    }

    /// Indexes every segment, then, when overwritten pairs take most of the store, packs
    /// the live pairs into one segment of the store's own.
    fn compact(&mut self) {
        let index = self.index.get_mut();
        index.catch_up(&self.segments);
        let live: usize = index.keys.values().map(|l| 8 + l.key.1 + l.value.1).sum();
        let held: usize = self.segments.iter().map(Packed::byte_len).sum();
        if held <= 2 * live {
            return;
        }
        let mut all = Packed::default();
        for loc in index.keys.values() {
            let (k, v) = pair(&self.segments, *loc);
            all.push(k, v);
        }
        self.segments = vec![all];
        self.own_tail = true;
        self.last_fence = false;
        *index = Index::default();
        index.catch_up(&self.segments);
    }

    /// Reads a committed key. The first few reads after a commit look for it in the
    /// segments not indexed yet, newest first (a walk over lengths that allocates nothing);
    /// after them the new segments are indexed.
    pub fn get(&self, key: &str) -> Option<&str> {
        if self.scans.get() < SCANS {
            self.scans.set(self.scans.get() + 1);
            let (seg, off) = {
                let index = self.index.borrow();
                (index.seg, index.off)
            };
            for (i, p) in self.segments.iter().enumerate().skip(seg).rev() {
                let from = if i == seg { off } else { 0 };
                let mut rest = Pairs {
                    rest: p.0.get(from..).unwrap_or_default(),
                };
                let found = std::iter::from_fn(|| rest.next_raw())
                    .map_while(Result::ok)
                    .filter(|&(k, _)| k == key.as_bytes())
                    .filter_map(|(_, v)| std::str::from_utf8(v).ok())
                    .last();
                if found.is_some() {
                    return found;
                }
            }
            let index = self.index.borrow();
            let loc = *index.keys.get(key)?;
            drop(index);
            return Some(pair(&self.segments, loc).1);
        }
        let loc = {
            let mut index = self.index.borrow_mut();
            index.catch_up(&self.segments);
            *index.keys.get(key)?
        };
        Some(pair(&self.segments, loc).1)
    }

    /// The `idx`-th committed pair in first-put order (legacy `getbyidx`).
    pub fn get_by_idx(&self, idx: usize) -> Option<(&str, &str)> {
        let loc = {
            let mut index = self.index.borrow_mut();
            index.catch_up(&self.segments);
            *index.keys.get_index(idx)?.1
        };
        Some(pair(&self.segments, loc))
    }

    /// How many pairs are committed (distinct keys).
    pub fn len(&self) -> usize {
        let mut index = self.index.borrow_mut();
        index.catch_up(&self.segments);
        index.keys.len()
    }

    /// True when nothing is committed.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(Packed::is_empty)
    }
}

/// The pair at `loc`. The index holds only pairs whose strings are UTF-8; a `Loc` that
/// does not fit (never made) reads as empty strings rather than panicking.
fn pair(segments: &[Packed], loc: Loc) -> (&str, &str) {
    let bytes = segments.get(loc.seg).map_or(&[][..], |p| &p.0[..]);
    let s = |(at, len): (usize, usize)| {
        bytes
            .get(at..at.saturating_add(len))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    };
    (s(loc.key), s(loc.value))
}

/// Merges fence contributions (from this agent and its children) into one delta, in order.
pub fn merge(parts: impl IntoIterator<Item = Packed>) -> Packed {
    let mut parts: Vec<Bytes> = parts.into_iter().map(|p| p.0).collect();
    if parts.len() == 1 {
        return Packed(parts.pop().unwrap_or_default());
    }
    Packed(Bytes::from(parts.concat()))
}

/// Byte buffers one after another, in one allocation; a single buffer is returned as it is
/// (a node with one child passes its contribution on without a copy).
pub fn concat(parts: impl IntoIterator<Item = Bytes>) -> Bytes {
    let mut parts: Vec<Bytes> = parts.into_iter().collect();
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    Bytes::from(parts.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_sees_every_byte_at_every_length() {
        for n in 0..48usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same_bytes(&a, &b), "{n} bytes, differing at {at}");
            }
            assert!(!same_bytes(&a, &a[..n.saturating_sub(1)]) || n == 0);
        }
    }

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
        let mut cut = good.0.to_vec();
        cut.truncate(cut.len() - 1);
        let mut not_utf8 = good.0.to_vec();
        not_utf8[4] = 0xff;
        let mut huge = good.0.to_vec();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        for bad in [cut, not_utf8, huge, vec![1, 0]] {
            let bad = Packed(bad.into());
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
    #[test]
    fn later_segments_and_preputs_override_in_commit_order() {
        let mut k = Kvs::default();
        k.preput("a".into(), "pre".into());
        k.preput("z".into(), "0".into());
        k.commit_packed(&packed(&[("b", "1"), ("a", "2")])).unwrap();
        assert_eq!(k.get("a"), Some("2"));
        // a get indexed the store; what comes after must still win
        k.preput("b".into(), "3".into());
        k.commit_packed(&packed(&[("c", "4")])).unwrap();
        k.put("c", "local");
        assert_eq!(k.get("c"), Some("4"), "a put waits for the fence");
        let d = k.take_pending();
        k.commit_packed(&d).unwrap();
        assert_eq!(k.get("b"), Some("3"));
        assert_eq!(k.get("c"), Some("local"));
        assert_eq!(k.get("nowhere"), None);
        let order: Vec<_> = (0..k.len()).map(|i| k.get_by_idx(i).unwrap()).collect();
        assert_eq!(
            order,
            [("a", "2"), ("z", "0"), ("b", "3"), ("c", "local")],
            "first-put order, latest values"
        );
        assert_eq!(k.get_by_idx(4), None);
    }

    #[test]
    fn a_bad_segment_after_good_ones_changes_nothing() {
        let mut k = Kvs::default();
        k.commit_packed(&packed(&[("a", "1")])).unwrap();
        let mut cut = packed(&[("a", "2"), ("b", "3")]).0.to_vec();
        cut.pop();
        assert!(k.commit_packed(&Packed(cut.into())).is_err());
        assert_eq!(k.get("a"), Some("1"));
        assert_eq!(k.get("b"), None);
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn an_empty_store_and_empty_deltas() {
        let mut k = Kvs::default();
        assert!(k.is_empty());
        assert_eq!(k.len(), 0);
        assert_eq!(k.get(""), None);
        assert_eq!(k.get_by_idx(0), None);
        k.commit_packed(&Packed::default()).unwrap();
        assert!(k.is_empty());
        k.commit_packed(&packed(&[("", "")])).unwrap();
        assert!(!k.is_empty());
        assert_eq!(k.get(""), Some(""));
    }

    #[test]
    fn a_committed_delta_is_shared_not_copied() {
        let d = packed(&[("a", "1")]);
        let mut k = Kvs::default();
        k.commit_packed(&d).unwrap();
        assert_eq!(k.get("a").unwrap().as_ptr(), d.0[9..].as_ptr());
    }

    #[test]
    fn many_fences_overwriting_keys_are_compacted() {
        let mut k = Kvs::default();
        for i in 0..100 {
            let v = i.to_string();
            // the keys in another order each time: no delta replaces the one before
            let d = if i % 2 == 0 {
                packed(&[("a", &v), ("b", "same")])
            } else {
                packed(&[("b", "same"), ("a", &v)])
            };
            k.commit_packed(&d).unwrap();
        }
        assert!(k.segments.len() <= INDEX_EVERY + 1, "{}", k.segments.len());
        assert_eq!(k.get("a"), Some("99"));
        assert_eq!(k.get_by_idx(1), Some(("b", "same")));
        assert_eq!(k.len(), 2);
    }

    #[test]
    fn a_delta_with_the_same_keys_replaces_the_last_in_place() {
        let mut k = Kvs::default();
        k.commit_packed(&packed(&[("z", "0")])).unwrap();
        for i in 0..5 {
            let v = i.to_string();
            k.commit_packed(&packed(&[("b", &v), ("z", &v), ("a", &v)]))
                .unwrap();
        }
        assert_eq!(k.segments.len(), 2);
        let all: Vec<_> = (0..k.len()).map(|i| k.get_by_idx(i).unwrap()).collect();
        assert_eq!(all, [("z", "4"), ("b", "4"), ("a", "4")]);
        // indexed now: the next delta is kept beside it, and still wins
        k.commit_packed(&packed(&[("b", "x"), ("z", "x"), ("a", "x")]))
            .unwrap();
        assert_eq!(k.segments.len(), 3);
        assert_eq!(k.get_by_idx(0), Some(("z", "x")));
        // preputs are not a fence's delta
        k.preput("b".into(), "p".into());
        k.commit_packed(&packed(&[("b", "y")])).unwrap();
        assert_eq!(k.get("b"), Some("y"));
    }

    /// An agent takes the root's word that a delta's keys are the last fence's, but replaces
    /// only what is that fence's delta, last, and not indexed yet: not pairs committed one by
    /// one after it, nor a delta before an empty one.
    #[test]
    fn the_roots_word_replaces_only_the_last_fences_delta() {
        let mut k = Kvs::default();
        let ab = |v: &str| packed(&[("a", v), ("b", v)]);
        k.commit_checked(&ab("1"), false);
        k.commit_checked(&ab("2"), true);
        assert_eq!(k.segments.len(), 1);
        k.preput("c".into(), "p".into());
        k.commit_checked(&ab("3"), true);
        assert_eq!(k.segments.len(), 3);
        k.commit_checked(&Packed::default(), false);
        k.commit_checked(&ab("4"), true);
        assert_eq!(k.segments.len(), 4);
        assert_eq!(k.get("c"), Some("p"));
        assert_eq!(k.len(), 3);
        k.commit_checked(&ab("5"), true);
        assert_eq!(k.segments.len(), 5);
        let all: Vec<_> = (0..k.len()).map(|i| k.get_by_idx(i).unwrap()).collect();
        assert_eq!(all, [("a", "5"), ("b", "5"), ("c", "p")]);
    }

    /// A delta committed on the root's word that does not unpack (the root checks every one,
    /// so only a defect could send it) reads as missing from its bad pair on, through every
    /// read and the compaction; it never panics and never hides a later delta.
    #[test]
    fn an_unchecked_bad_delta_reads_as_missing_from_its_bad_pair_on() {
        let mut k = Kvs::default();
        let mut bytes = packed(&[("a", "1")]).0.to_vec();
        bytes.extend_from_slice(&[1, 0, 0, 0, b'b', 9, 0, 0, 0, b'x']);
        let cut = Packed(bytes.into());
        let mut bad_utf8 = packed(&[("c", "1")]).0.to_vec();
        bad_utf8.extend_from_slice(&[1, 0, 0, 0, 0xff, 1, 0, 0, 0, b'y']);
        bad_utf8.extend_from_slice(&[1, 0, 0, 0, b'c', 1, 0, 0, 0, 0xfe]);
        bad_utf8.extend_from_slice(&packed(&[("d", "2")]).0);
        let bad_utf8 = Packed(bad_utf8.into());
        for round in 0..2 * INDEX_EVERY {
            for d in [&cut, &bad_utf8] {
                k.commit_checked(d, false);
                let seen = round > 0 || d == &bad_utf8;
                // the first reads walk the new delta, the later ones the index: the same
                for _ in 0..=SCANS {
                    assert_eq!(k.get("a"), Some("1"), "{round}");
                    assert_eq!(k.get("b"), None);
                    assert_eq!(k.get("c"), seen.then_some("1"));
                    assert_eq!(k.get("d"), seen.then_some("2"));
                    assert_eq!(k.get("\u{fffd}"), None);
                }
            }
        }
        k.commit_checked(&packed(&[("b", "2")]), false);
        assert_eq!(k.get("b"), Some("2"));
        assert_eq!(k.len(), 4);
        let all: Vec<_> = (0..k.len()).map(|i| k.get_by_idx(i).unwrap()).collect();
        assert_eq!(all, [("a", "1"), ("c", "1"), ("d", "2"), ("b", "2")]);
    }

    #[test]
    fn one_walk_checks_a_delta_and_compares_its_keys() {
        let layout = |pairs: &[(&str, &str)]| packed(pairs).check_keys(None).unwrap().unwrap();
        let old = layout(&[("a", "1"), ("bb", "22")]);
        assert_eq!(old, b"\x01\0\0\0a\x02\0\0\0bb");
        let same = |pairs: &[(&str, &str)]| packed(pairs).check_keys(Some(&old)).unwrap();
        assert_eq!(same(&[("a", "long value"), ("bb", "")]), None);
        // otherwise the delta's own layout, whichever pair differs
        for pairs in [
            &[("bb", "1"), ("a", "22")][..],
            &[("a", "1")],
            &[("a", "1"), ("bb", "2"), ("c", "3")],
            &[("a", "1"), ("b", "22")],
            &[("a", "1"), ("bbb", "22")],
            &[],
        ] {
            assert_eq!(same(pairs), Some(layout(pairs)), "{pairs:?}");
        }
        // a bad delta is an error with the slow walk's reason, whatever it is compared with
        let good = packed(&[("a", "1"), ("bb", "22")]);
        let cut = Packed(good.0.slice(..good.0.len() - 1));
        assert_eq!(cut.check_keys(Some(&old)), Err(cut.count().unwrap_err()));
        let mut bad = good.0.to_vec();
        bad[4] = 0xff;
        let bad = Packed(bad.into());
        assert!(bad.count().unwrap_err().to_string().contains("UTF-8"));
        assert_eq!(bad.check_keys(Some(&old)), Err(bad.count().unwrap_err()));
    }

    /// Random deltas (few keys, so layouts repeat often, and repeat the last one more
    /// often still), preputs and reads against a plain map of the same puts.
    #[test]
    fn the_store_reads_as_a_map_of_every_put() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut k = Kvs::default();
        let mut model: IndexMap<String, String> = IndexMap::new();
        let mut last: Vec<String> = Vec::new();
        for round in 0..2000 {
            let keys: Vec<String> = match next(3) {
                0 if !last.is_empty() => last.clone(),
                _ => (0..next(4)).map(|_| format!("k{}", next(5))).collect(),
            };
            if next(10) == 0 {
                let v = format!("p{round}");
                model.insert("k0".into(), v.clone());
                k.preput("k0".into(), v);
            }
            let pairs: Vec<(String, String)> = keys
                .iter()
                .map(|key| {
                    (
                        key.clone(),
                        "v".repeat(next(3) as usize) + &round.to_string(),
                    )
                })
                .collect();
            for (key, v) in &pairs {
                model.insert(key.clone(), v.clone());
            }
            k.commit_packed(&Packed::from(&pairs)).unwrap();
            last = keys;
            for i in 0..5 {
                let key = format!("k{i}");
                assert_eq!(
                    k.get(&key),
                    model.get(&key).map(|s| s.as_str()),
                    "{key} at {round}"
                );
            }
            if next(7) == 0 {
                assert_eq!(k.len(), model.len());
                for (i, (key, v)) in model.iter().enumerate() {
                    assert_eq!(k.get_by_idx(i), Some((key.as_str(), v.as_str())));
                }
            }
        }
    }

    #[test]
    fn reads_before_and_after_indexing_agree() {
        let mut k = Kvs::default();
        k.commit_packed(&packed(&[("a", "1"), ("b", "1")])).unwrap();
        assert_eq!(k.len(), 2); // indexes
        k.commit_packed(&packed(&[("b", "2"), ("c", "2"), ("b", "3")]))
            .unwrap();
        k.preput("c".into(), "p".into());
        let want = [
            ("a", Some("1")),
            ("b", Some("3")),
            ("c", Some("p")),
            ("d", None),
        ];
        for round in 0..2 * SCANS {
            for (key, v) in want {
                assert_eq!(k.get(key), v, "{key} in round {round}");
            }
        }
    }

    #[test]
    fn the_check_takes_the_long_way_for_bytes_past_ascii() {
        let long = "é".repeat(100);
        let mut k = Kvs::default();
        k.commit_packed(&packed(&[("k", &long), ("a", "1")]))
            .unwrap();
        assert_eq!(k.get("k"), Some(long.as_str()));
        let mut bad = packed(&[("a", "1"), ("k", &long)]).0.to_vec();
        let at = bad.len() - 1;
        bad[at] = 0xff;
        assert!(Packed(bad.into()).check().is_err());
    }
}
