//! PMIx publish, lookup and unpublish as kauri's name requests: what a client's `pmix_info_t`s
//! ask for ([`publish_items`], [`lookup_wait`]), how each name becomes one
//! [`Service`](crate::service::Service) request to the run's name table (the same table, or
//! `kauri nameserver`, that PMI-1/PMI-2 ranks use), and how the answers to one call's names
//! make its one PMIx status ([`Batch`]).
//!
//! Plain data: the host (`host::node`) sends the requests up the tree and calls the
//! library's callback; nothing here touches the library.
//!
//! What is honoured: string values and byte objects (kept as text, see [`encode_bytes`]),
//! booleans and integers of any width (kept with their type and their publisher, see
//! [`encode_scalar`]: a lookup gets back the `PMIX_UINT8` that was published, and who
//! published it); anything else is refused with `PMIX_ERR_TYPE_MISMATCH`,
//! `PMIX_WAIT` (a lookup waits until every name is published) and `PMIX_TIMEOUT` (seconds,
//! 0 = no limit). `PMIX_RANGE` and `PMIX_PERSISTENCE` are read and ignored: every name is
//! seen by the whole run (with a name server: by every run that uses it), and lives until its
//! publisher unpublishes it or the run ends.

use super::ffi::{
    InfoVal, Status, PMIX_ERROR, PMIX_ERR_BAD_PARAM, PMIX_ERR_EXISTS, PMIX_ERR_NOT_FOUND,
    PMIX_ERR_NO_PERMISSIONS, PMIX_ERR_TYPE_MISMATCH, PMIX_SUCCESS,
};
use crate::service::{Refused, ServiceReply, Wait};

/// `PMIX_WAIT`: wait until the names are published.
pub const WAIT: &str = "pmix.wait";
/// `PMIX_TIMEOUT`: how long, in seconds (0: no limit).
pub const TIMEOUT: &str = "pmix.timeout";

/// The keys of a publish's `pmix_info_t`s that are directives, not data: `PMIX_RANGE`,
/// `PMIX_PERSISTENCE`, `PMIX_TIMEOUT`, and the effective user and group ids the library adds
/// (`PMIX_USERID`, `PMIX_GRPID`).
pub const DIRECTIVES: [&str; 5] = [
    "pmix.range",
    "pmix.persist",
    TIMEOUT,
    "pmix.euid",
    "pmix.egid",
];

/// How a byte-object value is kept in the name table (which holds text): this prefix, then
/// the bytes in hex.
const BYTES_PREFIX: &str = "kauri-pmix-bytes:";

/// A byte-object value as the name table keeps it.
pub fn encode_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(BYTES_PREFIX.len() + 2 * b.len());
    s.push_str(BYTES_PREFIX);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// The bytes of a value kept by [`encode_bytes`]; `None` for any other text.
pub fn decode_bytes(s: &str) -> Option<Vec<u8>> {
    let hex = s.strip_prefix(BYTES_PREFIX)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// How a boolean or integer value is kept in the name table: this prefix, then its
/// `pmix_data_type_t`, `:`, the value, `@`, and its publisher (`namespace:rank`).
const SCALAR_PREFIX: &str = "kauri-pmix-value:";

/// A boolean or integer value as [`decode_scalar`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    /// Its `pmix_data_type_t` (`PMIX_UINT8`, `PMIX_SIZE`, `PMIX_BOOL`, …).
    pub type_: u16,
    /// Its value (a boolean: 0 or 1).
    pub value: i64,
    /// The namespace of the process that published it.
    pub nspace: String,
    /// Its rank.
    pub rank: u32,
}

/// A boolean or integer value of type `type_`, published by `by` (`namespace:rank`), as the
/// name table keeps it.
pub fn encode_scalar(type_: u16, value: i64, by: &str) -> String {
    format!("{SCALAR_PREFIX}{type_}:{value}@{by}")
}

/// The value kept by [`encode_scalar`]; `None` for any other text.
pub fn decode_scalar(s: &str) -> Option<Scalar> {
    let rest = s.strip_prefix(SCALAR_PREFIX)?;
    let (type_, rest) = rest.split_once(':')?;
    let (value, by) = rest.split_once('@')?;
    let (nspace, rank) = by.rsplit_once(':')?;
    Some(Scalar {
        type_: type_.parse().ok()?,
        value: value.parse().ok()?,
        nspace: nspace.to_string(),
        rank: rank.parse().ok()?,
    })
}

/// The names and values a publish by `by` (`namespace:rank`) carries: every `pmix_info_t`
/// that is not a directive, `types` giving each one's `pmix_data_type_t`. A string is a port;
/// a byte object (Open MPI's communicator-id exchange publishes its data so) is kept as text
/// ([`encode_bytes`]), a boolean or an integer with its type and publisher
/// ([`encode_scalar`]); any other value is refused with `PMIX_ERR_TYPE_MISMATCH` (nothing is
/// published); no data at all with `PMIX_ERR_BAD_PARAM`.
pub fn publish_items(
    info: &[(String, InfoVal)],
    types: &[u16],
    by: &str,
) -> Result<Vec<(String, String)>, Status> {
    let mut items = Vec::new();
    for (i, (k, v)) in info.iter().enumerate() {
        if DIRECTIVES.contains(&k.as_str()) {
            continue;
        }
        let type_ = types.get(i).copied();
        match (v, type_) {
            (InfoVal::Str(port), _) => items.push((k.clone(), port.clone())),
            (InfoVal::Bytes(b), _) => items.push((k.clone(), encode_bytes(b))),
            (InfoVal::Int(x), Some(t)) => items.push((k.clone(), encode_scalar(t, *x, by))),
            (InfoVal::Bool(b), Some(t)) => {
                items.push((k.clone(), encode_scalar(t, i64::from(*b), by)))
            }
            _ => return Err(PMIX_ERR_TYPE_MISMATCH),
        }
    }
    if items.is_empty() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    Ok(items)
}

/// How a lookup with directives `info` waits: `PMIX_WAIT` true (or any number: "at least N
/// names", read as all of them) waits, for `PMIX_TIMEOUT` seconds if that is given and not 0.
pub fn lookup_wait(info: &[(String, InfoVal)]) -> Wait {
    let value = |key: &str| info.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let wait = match value(WAIT) {
        Some(InfoVal::Bool(b)) => *b,
        Some(InfoVal::Int(_)) => true,
        _ => false,
    };
    if !wait {
        return Wait::No;
    }
    match value(TIMEOUT) {
        Some(InfoVal::Int(s)) if *s > 0 => Wait::For(*s as u64 * 1000),
        _ => Wait::Forever,
    }
}

/// The PMIx status of one name's answer, and the port a lookup found.
pub fn result_of(reply: &ServiceReply) -> Result<Option<String>, Status> {
    let refused = |e: &Refused| match e {
        Refused::Exists { .. } => PMIX_ERR_EXISTS,
        Refused::NotYours { .. } => PMIX_ERR_NO_PERMISSIONS,
        Refused::NotPublished { .. } | Refused::NobodyLeft { .. } => PMIX_ERR_NOT_FOUND,
        Refused::NoJob { .. } | Refused::NoRank { .. } | Refused::Other(_) => PMIX_ERROR,
    };
    match reply {
        ServiceReply::Done(Ok(())) => Ok(None),
        ServiceReply::Found(Ok(port)) => Ok(Some(port.clone())),
        ServiceReply::Done(Err(e)) | ServiceReply::Found(Err(e)) => Err(refused(e)),
        ServiceReply::Spawn(_) | ServiceReply::Job(_) | ServiceReply::Jobs(_) => Err(PMIX_ERROR),
    }
}

/// The answers to one PMIx call's names (one request per name), gathered into the call's
/// outcome once every name is answered.
#[derive(Debug)]
pub struct Batch {
    keys: Vec<String>,
    answers: Vec<Option<Result<Option<String>, Status>>>,
}

impl Batch {
    /// A call about `keys`, none answered yet.
    pub fn new(keys: Vec<String>) -> Batch {
        let answers = vec![None; keys.len()];
        Batch { keys, answers }
    }

    /// The answer for the name at `index`; the call's outcome once every name has one: the
    /// first failure in the call's order, else success with each name and the port found
    /// (lookups) or nothing (publish, unpublish).
    pub fn answer(
        &mut self,
        index: usize,
        result: Result<Option<String>, Status>,
    ) -> Option<(Status, Vec<(String, String)>)> {
        if let Some(a) = self.answers.get_mut(index) {
            a.get_or_insert(result);
        }
        if self.answers.iter().any(Option::is_none) {
            return None;
        }
        let mut found = Vec::new();
        for (k, a) in self.keys.iter().zip(&self.answers) {
            match a {
                Some(Err(st)) => return Some((*st, Vec::new())),
                Some(Ok(Some(port))) => found.push((k.clone(), port.clone())),
                _ => {}
            }
        }
        Some((PMIX_SUCCESS, found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(items: &[(&str, InfoVal)]) -> Vec<(String, InfoVal)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    /// Open MPI's `MPI_Publish_name`: the service name with its port as a string, perhaps a
    /// range and a persistence, and the user id the library adds.
    #[test]
    fn a_publish_carries_its_data_not_its_directives() {
        let i = info(&[
            ("pmix.range", InfoVal::Int(2)),
            ("svc", InfoVal::Str("port-0".into())),
            ("pmix.persist", InfoVal::Int(4)),
            ("pmix.euid", InfoVal::Int(1000)),
        ]);
        assert_eq!(
            publish_items(&i, &[33, 3, 30, 14], "ns:0"),
            Ok(vec![("svc".into(), "port-0".into())])
        );
        let bad = info(&[("svc", InfoVal::Str("p".into())), ("n", InfoVal::Other(21))]);
        assert_eq!(
            publish_items(&bad, &[3, 21], "ns:0"),
            Err(PMIX_ERR_TYPE_MISMATCH)
        );
        assert_eq!(
            publish_items(&info(&[("pmix.euid", InfoVal::Int(0))]), &[14], "ns:0"),
            Err(PMIX_ERR_BAD_PARAM)
        );
    }

    /// OpenPMIx's `pub` example: a `PMIX_UINT8` and a `PMIX_SIZE`, which its lookups want
    /// back with their types and rank 0 as the publisher.
    #[test]
    fn a_published_integer_keeps_its_type_and_publisher() {
        let i = info(&[("FOOBAR", InfoVal::Int(1)), ("PANDA", InfoVal::Int(123456))]);
        let items = publish_items(&i, &[12, 4], "kauri_1_vm:0").unwrap();
        assert_eq!(items[0].0, "FOOBAR");
        assert_eq!(
            decode_scalar(&items[1].1),
            Some(Scalar {
                type_: 4,
                value: 123456,
                nspace: "kauri_1_vm".into(),
                rank: 0
            })
        );
        assert_eq!(decode_scalar("port-0"), None);
        assert_eq!(decode_scalar(&encode_bytes(b"x")), None);
    }

    /// `PMIX_WAIT` as a bool (Open MPI's `OPAL_PMIX_EXCHANGE`) or an int (OpenPMIx's
    /// examples), with or without `PMIX_TIMEOUT`.
    #[test]
    fn a_lookup_waits_when_told() {
        assert_eq!(lookup_wait(&[]), Wait::No);
        assert_eq!(
            lookup_wait(&info(&[(WAIT, InfoVal::Bool(false))])),
            Wait::No
        );
        assert_eq!(
            lookup_wait(&info(&[(WAIT, InfoVal::Bool(true))])),
            Wait::Forever
        );
        assert_eq!(
            lookup_wait(&info(&[
                (WAIT, InfoVal::Int(0)),
                (TIMEOUT, InfoVal::Int(600))
            ])),
            Wait::For(600_000)
        );
        assert_eq!(
            lookup_wait(&info(&[
                (TIMEOUT, InfoVal::Int(0)),
                (WAIT, InfoVal::Bool(true))
            ])),
            Wait::Forever
        );
        // A timeout alone does not make a lookup wait.
        assert_eq!(lookup_wait(&info(&[(TIMEOUT, InfoVal::Int(5))])), Wait::No);
    }

    #[test]
    fn refusals_become_pmix_statuses() {
        let err = |e: Refused| ServiceReply::Done(Err(e));
        let a = || "a".to_string();
        assert_eq!(result_of(&ServiceReply::Done(Ok(()))), Ok(None));
        assert_eq!(
            result_of(&ServiceReply::Found(Ok("p".into()))),
            Ok(Some("p".into()))
        );
        assert_eq!(
            result_of(&err(Refused::Exists { name: a() })),
            Err(PMIX_ERR_EXISTS)
        );
        let by = crate::service::Publisher::Process("x:0".into());
        assert_eq!(
            result_of(&err(Refused::NotYours { name: a(), by })),
            Err(PMIX_ERR_NO_PERMISSIONS)
        );
        for e in [
            Refused::NotPublished { name: a() },
            Refused::NobodyLeft { name: a() },
        ] {
            assert_eq!(
                result_of(&ServiceReply::Found(Err(e))),
                Err(PMIX_ERR_NOT_FOUND)
            );
        }
        // The kind decides, not the words: a reason that reads like a refusal is an error.
        assert_eq!(
            result_of(&err(Refused::Other(
                "the name a is already published".into()
            ))),
            Err(PMIX_ERROR)
        );
    }

    #[test]
    fn a_batch_ends_with_its_last_answer() {
        let mut b = Batch::new(vec!["a".into(), "b".into()]);
        assert_eq!(b.answer(1, Ok(Some("pb".into()))), None);
        assert_eq!(
            b.answer(0, Ok(Some("pa".into()))),
            Some((
                PMIX_SUCCESS,
                vec![("a".into(), "pa".into()), ("b".into(), "pb".into())]
            ))
        );
        let mut b = Batch::new(vec!["a".into(), "b".into()]);
        assert_eq!(b.answer(0, Ok(None)), None);
        assert_eq!(
            b.answer(1, Err(PMIX_ERR_EXISTS)),
            Some((PMIX_ERR_EXISTS, vec![]))
        );
        // An index out of range or a second answer changes nothing.
        let mut b = Batch::new(vec!["a".into()]);
        assert_eq!(b.answer(5, Ok(None)), None);
        assert_eq!(
            b.answer(0, Err(PMIX_ERR_NOT_FOUND)),
            Some((PMIX_ERR_NOT_FOUND, vec![]))
        );
        assert_eq!(b.answer(0, Ok(None)), Some((PMIX_ERR_NOT_FOUND, vec![])));
    }
}
