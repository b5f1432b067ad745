//! Property tests: for every message type of both protocols, encode → parse gives back the
//! same value, and feeding the encoding one byte at a time to a streaming decoder yields the
//! same messages, each exactly when its last byte arrives.
//!
//! Only values the protocol can carry are generated. PMI-1 fields other than a `put` or
//! `get_result` value are single tokens: no space, tab, carriage return or newline (`msg` and
//! `message` are written with those turned to `_`, so they are generated without them). PMI-1
//! `value`s and spawn fields may hold spaces but no line break. PMI-2 values may hold anything.

use bytes::BytesMut;
use pmi_wire::v2::{Frame, Lookup};
use pmi_wire::{v1, v2, Spawn, SpawnCommand, Status};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Strategies: PMI-1

/// A single PMI-1 token's value: no separator, possibly non-ASCII (including U+00A0).
fn token() -> impl Strategy<Value = String> {
    "[!-~\u{a0}-\u{17f}]{0,12}"
}

/// A `set` key: a non-empty token without `=`.
fn set_key() -> impl Strategy<Value = String> {
    "[!-<>-~\u{a0}-\u{17f}][!-<>-~]{0,8}"
}

/// A value that runs to the end of the line: anything but a line break.
fn line_value() -> impl Strategy<Value = String> {
    "[^\n\r]{0,40}"
}

fn v1_status() -> impl Strategy<Value = Status> {
    (any::<i32>(), option::of(token())).prop_map(|(rc, msg)| Status { rc, msg })
}

fn spawn_with(text: fn() -> BoxedStrategy<String>) -> impl Strategy<Value = Spawn> {
    let pair = move || (text(), text());
    let command = move || {
        (text(), any::<u32>(), vec(text(), 0..4), vec(pair(), 0..3)).prop_map(
            |(execname, nprocs, args, info)| SpawnCommand {
                execname,
                nprocs,
                args,
                info,
            },
        )
    };
    (vec(command(), 1..4), vec(pair(), 0..3))
        .prop_map(|(commands, preput)| Spawn { commands, preput })
}

fn v1_spawn_text() -> BoxedStrategy<String> {
    line_value().boxed()
}

fn v1_request() -> impl Strategy<Value = v1::Request> {
    use v1::Request as R;
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(version, subversion)| R::Init {
            version,
            subversion
        }),
        token().prop_map(|pmiid| R::InitAck { pmiid }),
        Just(R::GetMaxes),
        Just(R::GetAppnum),
        Just(R::GetMyKvsname),
        Just(R::GetUniverseSize),
        option::of(token()).prop_map(|group| R::BarrierIn { group }),
        (token(), token(), line_value()).prop_map(|(kvsname, key, value)| R::Put {
            kvsname,
            key,
            value
        }),
        (token(), token()).prop_map(|(kvsname, key)| R::Get { kvsname, key }),
        (token(), any::<i64>()).prop_map(|(kvsname, idx)| R::GetByIdx { kvsname, idx }),
        (token(), token()).prop_map(|(service, port)| R::PublishName { service, port }),
        token().prop_map(|service| R::UnpublishName { service }),
        token().prop_map(|service| R::LookupName { service }),
        (option::of(any::<i32>()), option::of(token()))
            .prop_map(|(exitcode, message)| R::Abort { exitcode, message }),
        Just(R::Finalize),
        (
            option::of(any::<u32>()),
            option::of(any::<u32>()),
            option::of(token()),
            option::of(token())
        )
            .prop_map(
                |(pmi_version, pmi_subversion, stdio, authtype)| R::Singinit {
                    pmi_version,
                    pmi_subversion,
                    stdio,
                    authtype
                }
            ),
        spawn_with(v1_spawn_text).prop_map(R::Spawn),
    ]
}

fn v1_response() -> impl Strategy<Value = v1::Response> {
    use v1::Response as R;
    prop_oneof![
        (v1_status(), any::<u32>(), any::<u32>()).prop_map(|(status, version, subversion)| {
            R::Init {
                status,
                version,
                subversion,
            }
        }),
        Just(R::InitAck),
        (set_key(), token()).prop_map(|(key, value)| R::Set { key, value }),
        (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(a, b, c)| R::Maxes {
            kvsname_max: a,
            keylen_max: b,
            vallen_max: c
        }),
        any::<i32>().prop_map(|appnum| R::Appnum { appnum }),
        token().prop_map(|kvsname| R::MyKvsname { kvsname }),
        any::<i32>().prop_map(|size| R::UniverseSize { size }),
        (v1_status(), option::of(token())).prop_map(|(status, tag)| R::BarrierOut { status, tag }),
        v1_status().prop_map(R::PutResult),
        (v1_status(), option::of(line_value()))
            .prop_map(|(status, value)| R::GetResult { status, value }),
        (
            v1_status(),
            option::of(any::<i64>()),
            option::of(token()),
            option::of(token())
        )
            .prop_map(|(status, nextidx, key, val)| R::GetByIdxResult {
                status,
                nextidx,
                key,
                val
            }),
        v1_status().prop_map(R::PublishResult),
        v1_status().prop_map(R::UnpublishResult),
        (v1_status(), option::of(token()))
            .prop_map(|(status, port)| R::LookupResult { status, port }),
        Just(R::FinalizeAck),
        (token(), token(), token()).prop_map(|(versionok, stdio, kvsname)| R::SinginitInfo {
            versionok,
            stdio,
            kvsname
        }),
        (v1_status(), vec(any::<i32>(), 0..5))
            .prop_map(|(status, errcodes)| R::SpawnResult { status, errcodes }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Strategies: PMI-2

/// A PMI-2 value: anything but NUL (`;` is escaped, `=` and line breaks are plain bytes). A
/// NUL ends a body: C clients write strings, and MPICH 4.0's client pads its frames with stale
/// bytes after the NUL.
fn any_text() -> BoxedStrategy<String> {
    prop_oneof![
        "(?s:[^\0]{0,16})",
        "[a-z;= \n]{0,16}", // dense in the characters that matter to the framing
    ]
    .boxed()
}

fn v2_status() -> impl Strategy<Value = Status> {
    (any::<i32>(), option::of(any_text())).prop_map(|(rc, msg)| Status { rc, msg })
}

fn v2_lookup() -> impl Strategy<Value = Lookup> {
    (v2_status(), any::<bool>(), option::of(any_text())).prop_map(|(status, found, value)| Lookup {
        status,
        found,
        value,
    })
}

fn v2_request() -> impl Strategy<Value = Frame<v2::Request>> {
    use v2::Request as R;
    let msg = prop_oneof![
        (
            option::of(any_text()),
            option::of(any::<i64>()),
            option::of(any::<bool>())
        )
            .prop_map(|(pmijobid, pmirank, threaded)| R::FullInit {
                pmijobid,
                pmirank,
                threaded
            }),
        Just(R::JobGetId),
        any_text().prop_map(|jobid| R::JobConnect { jobid }),
        any_text().prop_map(|jobid| R::JobDisconnect { jobid }),
        (any_text(), any_text()).prop_map(|(key, value)| R::KvsPut { key, value }),
        (option::of(any_text()), option::of(any::<i64>()), any_text())
            .prop_map(|(jobid, srcid, key)| R::KvsGet { jobid, srcid, key }),
        Just(R::KvsFence),
        (any_text(), any_text()).prop_map(|(key, value)| R::InfoPutNodeAttr { key, value }),
        (any_text(), any::<bool>()).prop_map(|(key, wait)| R::InfoGetNodeAttr { key, wait }),
        any_text().prop_map(|key| R::InfoGetJobAttr { key }),
        (any_text(), any_text(), vec((any_text(), any_text()), 0..3))
            .prop_map(|(name, port, info)| R::NamePublish { name, port, info }),
        any_text().prop_map(|name| R::NameUnpublish { name }),
        any_text().prop_map(|name| R::NameLookup { name }),
        spawn_with(any_text).prop_map(R::Spawn),
        (
            option::of(any::<bool>()),
            option::of(any_text()),
            option::of(any::<i32>())
        )
            .prop_map(|(isworld, message, exitcode)| R::Abort {
                isworld,
                message,
                exitcode
            }),
        Just(R::Finalize),
    ];
    (option::of(any_text()), msg).prop_map(|(thrid, msg)| Frame { thrid, msg })
}

fn v2_response() -> impl Strategy<Value = Frame<v2::Response>> {
    use v2::Response as R;
    let msg = prop_oneof![
        (
            v2_status(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            option::of(any_text()),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(status, rank, size, appnum, spawner_jobid, debugged, pmiverbose)| {
                    R::FullInit {
                        status,
                        rank,
                        size,
                        appnum,
                        spawner_jobid,
                        debugged,
                        pmiverbose,
                    }
                }
            ),
        (v2_status(), any_text()).prop_map(|(status, jobid)| R::JobGetId { status, jobid }),
        (v2_status(), any::<bool>())
            .prop_map(|(status, kvscopy)| R::JobConnect { status, kvscopy }),
        v2_status().prop_map(R::JobDisconnect),
        v2_status().prop_map(R::KvsPut),
        v2_lookup().prop_map(R::KvsGet),
        v2_status().prop_map(R::KvsFence),
        v2_status().prop_map(R::InfoPutNodeAttr),
        v2_lookup().prop_map(R::InfoGetNodeAttr),
        v2_lookup().prop_map(R::InfoGetJobAttr),
        v2_status().prop_map(R::NamePublish),
        v2_status().prop_map(R::NameUnpublish),
        v2_lookup().prop_map(R::NameLookup),
        (v2_status(), option::of(any_text()), vec(any::<i32>(), 0..5)).prop_map(
            |(status, jobid, errcodes)| R::Spawn {
                status,
                jobid,
                errcodes
            }
        ),
        v2_status().prop_map(R::Finalize),
    ];
    (option::of(any_text()), msg).prop_map(|(thrid, msg)| Frame { thrid, msg })
}

// ---------------------------------------------------------------------------------------------
// The properties, shared by all four message types

/// What every message type offers: encode, parse from a slice, decode from a stream.
trait Codec: Sized + PartialEq + std::fmt::Debug {
    fn enc(&self, dst: &mut BytesMut);
    #[allow(clippy::type_complexity)]
    fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, pmi_wire::WireError>;
    fn decode(buf: &mut BytesMut) -> Result<Option<Self>, pmi_wire::WireError>;
}

macro_rules! codec {
    ($t:ty) => {
        impl Codec for $t {
            fn enc(&self, dst: &mut BytesMut) {
                self.encode(dst)
            }
            fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, pmi_wire::WireError> {
                <$t>::parse(buf)
            }
            fn decode(buf: &mut BytesMut) -> Result<Option<Self>, pmi_wire::WireError> {
                <$t>::decode(buf)
            }
        }
    };
}
codec!(v1::Request);
codec!(v1::Response);
codec!(Frame<v2::Request>);
codec!(Frame<v2::Response>);

/// encode → parse is the identity and consumes exactly the encoding.
fn round_trip_eq<M: Codec>(m: &M) -> Result<(), TestCaseError> {
    let mut buf = BytesMut::new();
    m.enc(&mut buf);
    match M::parse(&buf) {
        Ok(Some((got, n))) => {
            prop_assert_eq!(&got, m, "encoded as {:?}", buf);
            prop_assert_eq!(n, buf.len(), "encoded as {:?}", buf);
        }
        other => prop_assert!(false, "{:?} encoded as {:?} parses to {:?}", m, buf, other),
    }
    Ok(())
}

/// The encodings of `msgs`, back to back, fed one byte at a time: each message comes out of
/// `decode` exactly when its last byte arrives, and `parse` on every proper prefix of a single
/// encoding answers "incomplete".
fn streaming<M: Codec>(msgs: &[M]) -> Result<(), TestCaseError> {
    let mut wire = BytesMut::new();
    let mut ends = Vec::new();
    for m in msgs {
        m.enc(&mut wire);
        ends.push(wire.len());
    }
    let first_end = ends[0];
    for cut in 0..first_end {
        prop_assert_eq!(M::parse(&wire[..cut]), Ok(None), "prefix of {} bytes", cut);
    }
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for (i, b) in wire.iter().enumerate() {
        buf.extend_from_slice(&[*b]);
        match M::decode(&mut buf) {
            Ok(Some(m)) => {
                prop_assert_eq!(Some(&(i + 1)), ends.get(got.len()), "message ended early");
                got.push(m);
            }
            Ok(None) => {}
            Err(e) => prop_assert!(false, "decode failed at byte {}: {}", i, e),
        }
    }
    prop_assert!(buf.is_empty());
    prop_assert_eq!(got.len(), msgs.len());
    for (g, m) in got.iter().zip(msgs) {
        prop_assert_eq!(g, m);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn v1_request_round_trips(m in v1_request()) {
        round_trip_eq(&m)?;
    }

    #[test]
    fn v1_response_round_trips(m in v1_response()) {
        round_trip_eq(&m)?;
    }

    #[test]
    fn v2_request_round_trips(m in v2_request()) {
        round_trip_eq(&m)?;
    }

    #[test]
    fn v2_response_round_trips(m in v2_response()) {
        round_trip_eq(&m)?;
    }

    #[test]
    fn v1_request_streams(ms in vec(v1_request(), 1..4)) {
        streaming(&ms)?;
    }

    #[test]
    fn v1_response_streams(ms in vec(v1_response(), 1..4)) {
        streaming(&ms)?;
    }

    #[test]
    fn v2_request_streams(ms in vec(v2_request(), 1..4)) {
        streaming(&ms)?;
    }

    #[test]
    fn v2_response_streams(ms in vec(v2_response(), 1..4)) {
        streaming(&ms)?;
    }
}
