//! The codec against what real clients and Hydra put on the wire.
//!
//! `tests/fixtures/<recording>/rank<N>.c2s` and `.s2c` are the raw bytes one rank wrote to and
//! read from its PMI socket under `mpiexec.hydra` (MPICH 4.0.2 over PMI-1, Slurm 22.05's
//! libpmi2 over PMI-2); see `tests/fixtures/README.md` and `record.sh`. Every stream must
//! parse whole (PMI-1 lines until an `init` with `pmi_version=2`, then PMI-2 frames) into the
//! messages the programs are known to exchange, and every message must re-encode to bytes that
//! parse back to it. Client messages re-encode byte for byte.

use bytes::BytesMut;
use pmi_wire::v2::{Frame, Lookup};
use pmi_wire::{v1, v2, Status, WireError};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// One recording: every rank's two streams.
struct Recording {
    name: &'static str,
    ranks: Vec<(Vec<u8>, Vec<u8>)>,
}

fn load(name: &'static str) -> Recording {
    let dir = fixtures().join(name);
    let mut ranks = Vec::new();
    for r in 0.. {
        let c2s = dir.join(format!("rank{r}.c2s"));
        if !c2s.exists() {
            break;
        }
        let s2c = dir.join(format!("rank{r}.s2c"));
        ranks.push((
            std::fs::read(&c2s).unwrap(),
            std::fs::read(&s2c).unwrap_or_else(|e| panic!("{}: {e}", s2c.display())),
        ));
    }
    assert!(!ranks.is_empty(), "no streams in {}", dir.display());
    Recording { name, ranks }
}

const MPICH_FD: [(&str, usize); 4] = [
    ("mpich-hello-n2", 2),
    ("mpich-hello-n4", 4),
    ("mpich-split-n2", 2),
    ("mpich-split-n4", 4),
];
const MPICH_PORT: [(&str, usize); 1] = [("mpich-hello-port-n2", 2)];
const SLURM: [(&str, usize); 2] = [("slurm-pmi2-n2", 2), ("slurm-pmi2-n4", 4)];

#[test]
fn every_recording_is_here_and_nothing_else() {
    let mut want: Vec<&str> = MPICH_FD
        .iter()
        .chain(&MPICH_PORT)
        .chain(&SLURM)
        .map(|(n, _)| *n)
        .collect();
    want.sort();
    let mut have: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("rank0.c2s").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    have.sort();
    assert_eq!(have, want);
    for (name, n) in MPICH_FD.iter().chain(&MPICH_PORT).chain(&SLURM) {
        assert_eq!(load(name).ranks.len(), *n, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Splitting a stream into messages

/// A message of either protocol, with the bytes it was parsed from.
#[derive(Debug, PartialEq)]
enum Msg<A, B> {
    V1(A),
    V2(B),
}

type ClientMsg = Msg<v1::Request, Frame<v2::Request>>;
type ServerMsg = Msg<v1::Response, Frame<v2::Response>>;

/// Parses a whole stream: PMI-1 until `switch` says a message opened PMI-2, then frames.
/// Panics (naming the offset) unless every byte belongs to a message that parses.
#[allow(clippy::type_complexity)]
fn split<A, B: std::fmt::Debug>(
    what: &str,
    bytes: &[u8],
    v1: fn(&[u8]) -> Result<Option<(A, usize)>, WireError>,
    v2: fn(&[u8]) -> Result<Option<(B, usize)>, WireError>,
    switch: fn(&A) -> bool,
) -> Vec<(Msg<A, B>, Vec<u8>)> {
    let mut out = Vec::new();
    let (mut pos, mut framed) = (0, false);
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let show = || String::from_utf8_lossy(&rest[..rest.len().min(80)]).into_owned();
        let (msg, n) = if framed {
            match v2(rest) {
                Ok(Some((m, n))) => (Msg::V2(m), n),
                other => panic!("{what} @{pos}: {other:?} for frame {:?}", show()),
            }
        } else {
            match v1(rest) {
                Ok(Some((m, n))) => {
                    framed = switch(&m);
                    (Msg::V1(m), n)
                }
                other => panic!("{what} @{pos}: {:?} for line {:?}", other.err(), show()),
            }
        };
        out.push((msg, rest[..n].to_vec()));
        pos += n;
    }
    out
}

fn client_stream(what: &str, bytes: &[u8]) -> Vec<(ClientMsg, Vec<u8>)> {
    split(
        what,
        bytes,
        v1::Request::parse,
        Frame::<v2::Request>::parse,
        |m| matches!(m, v1::Request::Init { version: 2, .. }),
    )
}

fn server_stream(what: &str, bytes: &[u8]) -> Vec<(ServerMsg, Vec<u8>)> {
    split(
        what,
        bytes,
        v1::Response::parse,
        Frame::<v2::Response>::parse,
        |m| matches!(m, v1::Response::Init { version: 2, .. }),
    )
}

fn encode_client(m: &ClientMsg) -> Vec<u8> {
    let mut b = BytesMut::new();
    match m {
        Msg::V1(m) => m.encode(&mut b),
        Msg::V2(m) => m.encode(&mut b),
    }
    b.to_vec()
}

fn encode_server(m: &ServerMsg) -> Vec<u8> {
    let mut b = BytesMut::new();
    match m {
        Msg::V1(m) => m.encode(&mut b),
        Msg::V2(m) => m.encode(&mut b),
    }
    b.to_vec()
}

fn reparse_client(bytes: &[u8], v2: bool) -> ClientMsg {
    if v2 {
        let (m, n) = Frame::<v2::Request>::parse(bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        Msg::V2(m)
    } else {
        let (m, n) = v1::Request::parse(bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        Msg::V1(m)
    }
}

fn reparse_server(bytes: &[u8], v2: bool) -> ServerMsg {
    if v2 {
        let (m, n) = Frame::<v2::Response>::parse(bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        Msg::V2(m)
    } else {
        let (m, n) = v1::Response::parse(bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        Msg::V1(m)
    }
}

// ---------------------------------------------------------------------------------------------
// Re-encoding

#[test]
fn every_message_re_encodes_and_parses_back() {
    let mut exact = (0, 0);
    for (name, _) in MPICH_FD.iter().chain(&MPICH_PORT).chain(&SLURM) {
        let rec = load(name);
        for (r, (c2s, s2c)) in rec.ranks.iter().enumerate() {
            let what = format!("{}/rank{r}", rec.name);
            for (m, raw) in client_stream(&what, c2s) {
                let enc = encode_client(&m);
                assert_eq!(reparse_client(&enc, matches!(m, Msg::V2(_))), m, "{what}");
                // Our encoding of every client message is the client's own, byte for byte.
                assert_eq!(
                    String::from_utf8_lossy(&enc),
                    String::from_utf8_lossy(&raw),
                    "{what}: re-encoding differs"
                );
                exact.0 += 1;
            }
            for (m, raw) in server_stream(&what, s2c) {
                let enc = encode_server(&m);
                assert_eq!(reparse_server(&enc, matches!(m, Msg::V2(_))), m, "{what}");
                exact.1 += usize::from(enc == raw);
            }
        }
    }
    // Sanity: the recordings are not empty, and some Hydra replies match our encoding too
    // (`cmd=put_result rc=0`-style ones do not: Hydra adds `msg=success`).
    assert!(exact.0 > 200, "{exact:?}");
    assert!(exact.1 > 0, "{exact:?}");
}

#[test]
fn streams_parse_when_fed_in_small_pieces() {
    // The same streams, fed three bytes at a time to the decoders, give the same messages.
    for (name, _) in MPICH_FD.iter().chain(&MPICH_PORT).chain(&SLURM) {
        let rec = load(name);
        for (r, (c2s, _)) in rec.ranks.iter().enumerate() {
            let what = format!("{}/rank{r}", rec.name);
            let want: Vec<ClientMsg> = client_stream(&what, c2s).into_iter().map(|m| m.0).collect();
            let mut got = Vec::new();
            let mut buf = BytesMut::new();
            let mut framed = false;
            for chunk in c2s.chunks(3) {
                buf.extend_from_slice(chunk);
                loop {
                    let m = if framed {
                        Frame::<v2::Request>::decode(&mut buf).unwrap().map(Msg::V2)
                    } else {
                        v1::Request::decode(&mut buf).unwrap().map(Msg::V1)
                    };
                    let Some(m) = m else { break };
                    framed |= matches!(m, Msg::V1(v1::Request::Init { version: 2, .. }));
                    got.push(m);
                }
            }
            assert!(buf.is_empty(), "{what}");
            assert_eq!(got, want, "{what}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What MPICH 4.0.2 (PMI-1) exchanges with Hydra

fn is_hex(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks one MPICH rank's two streams against the known start-up sequence of MPICH 4.0.2's
/// ch4 device on one node. `port` is true under `-pmi-port` (the `initack` handshake first).
fn check_mpich_rank(what: &str, c2s: &[u8], s2c: &[u8], rank: usize, size: usize, port: bool) {
    use v1::Request as Q;
    use v1::Response as A;
    let q: Vec<Q> = client_stream(what, c2s)
        .into_iter()
        .map(|(m, _)| match m {
            Msg::V1(m) => m,
            Msg::V2(m) => panic!("{what}: MPICH 4.0.2 spoke PMI-2: {m:?}"),
        })
        .collect();
    let a: Vec<A> = server_stream(what, s2c)
        .into_iter()
        .map(|(m, _)| match m {
            Msg::V1(m) => m,
            Msg::V2(m) => panic!("{what}: Hydra answered with a frame: {m:?}"),
        })
        .collect();

    let kvs = a
        .iter()
        .find_map(|m| match m {
            A::MyKvsname { kvsname } => Some(kvsname.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{what}: no my_kvsname reply"));
    assert!(kvs.starts_with("kvs_"), "{what}: kvsname {kvs}");

    let get = |key: &str| Q::Get {
        kvsname: kvs.clone(),
        key: key.to_string(),
    };
    let success = || Status {
        rc: 0,
        msg: Some("success".into()),
    };
    let barrier_out = || A::BarrierOut {
        status: Status::ok(),
        tag: None,
    };
    let mut want_q = Vec::new();
    let mut want_a = Vec::new();
    if port {
        want_q.push(Q::InitAck {
            pmiid: rank.to_string(),
        });
        want_a.push(A::InitAck);
        for (k, v) in [("size", size), ("rank", rank), ("debug", 0)] {
            want_a.push(A::Set {
                key: k.into(),
                value: v.to_string(),
            });
        }
    }
    want_q.extend([
        Q::Init {
            version: 1,
            subversion: 1,
        },
        Q::GetMaxes,
        Q::GetAppnum,
        Q::GetMyKvsname,
        get("PMI_process_mapping"),
        Q::BarrierIn { group: None },
    ]);
    want_a.extend([
        A::Init {
            status: Status::ok(),
            version: 1,
            subversion: 1,
        },
        A::Maxes {
            kvsname_max: 256,
            keylen_max: 64,
            vallen_max: 1024,
        },
        A::Appnum { appnum: 0 },
        A::MyKvsname {
            kvsname: kvs.clone(),
        },
        A::GetResult {
            status: success(),
            value: Some("(vector,(0,1,1))".into()),
        },
        barrier_out(),
    ]);
    // Values are hex blobs that differ per run: the expected message takes the recorded one
    // after checking it is hex.
    let put = |i: usize, key: String| {
        let Q::Put { value, .. } = &q[i] else {
            panic!("{what}: message {i} is {:?}, not a put", q[i]);
        };
        assert!(is_hex(value), "{what}: {key} = {value:?}");
        Q::Put {
            kvsname: kvs.clone(),
            key,
            value: value.clone(),
        }
    };
    let shm = format!("-allgather-shm-1-{rank}");
    if rank == 0 {
        // Rank 0 broadcasts a shared-memory file name; every rank then publishes its own part.
        want_q.push(put(want_q.len(), "-bcast-1-0".into()));
        want_q.push(Q::BarrierIn { group: None });
        want_a.push(A::PutResult(success()));
        want_a.push(barrier_out());
    } else {
        want_q.push(Q::BarrierIn { group: None });
        want_q.push(get("-bcast-1-0"));
        want_a.push(barrier_out());
        let A::GetResult { value: Some(v), .. } = &a[want_a.len()] else {
            panic!("{what}: no value for -bcast-1-0: {:?}", a[want_a.len()]);
        };
        assert!(is_hex(v), "{what}: -bcast-1-0 = {v:?}");
        want_a.push(A::GetResult {
            status: success(),
            value: Some(v.clone()),
        });
    }
    let shm_put = put(want_q.len(), shm.clone());
    let Q::Put {
        value: shm_value, ..
    } = &shm_put
    else {
        unreachable!()
    };
    let shm_value = shm_value.clone();
    want_q.push(shm_put);
    want_q.extend([
        Q::BarrierIn { group: None },
        get(&shm),
        Q::BarrierIn { group: None },
        Q::Finalize,
    ]);
    want_a.extend([
        A::PutResult(success()),
        barrier_out(),
        // The get of the key this rank put returns what it put.
        A::GetResult {
            status: success(),
            value: Some(shm_value),
        },
        barrier_out(),
        A::FinalizeAck,
    ]);
    assert_eq!(q, want_q, "{what}: client messages");
    assert_eq!(a, want_a, "{what}: server messages");
}

/// The value rank 0 broadcast is the value every other rank got.
fn check_bcast_agrees(rec: &Recording) {
    let value_of = |msgs: Vec<(ClientMsg, Vec<u8>)>| {
        msgs.into_iter().find_map(|(m, _)| match m {
            Msg::V1(v1::Request::Put { key, value, .. }) if key == "-bcast-1-0" => Some(value),
            _ => None,
        })
    };
    let sent = value_of(client_stream(rec.name, &rec.ranks[0].0)).expect("rank 0 broadcasts");
    for (r, (_, s2c)) in rec.ranks.iter().enumerate().skip(1) {
        let got = server_stream(rec.name, s2c)
            .into_iter()
            .find_map(|(m, _)| match m {
                Msg::V1(v1::Response::GetResult { value: Some(v), .. }) if is_hex(&v) => Some(v),
                _ => None,
            });
        assert_eq!(got.as_ref(), Some(&sent), "{}/rank{r}", rec.name);
    }
}

#[test]
fn mpich_pmi_fd() {
    for (name, size) in MPICH_FD {
        let rec = load(name);
        for (r, (c2s, s2c)) in rec.ranks.iter().enumerate() {
            check_mpich_rank(&format!("{name}/rank{r}"), c2s, s2c, r, size, false);
        }
        check_bcast_agrees(&rec);
    }
}

#[test]
fn mpich_pmi_port() {
    for (name, size) in MPICH_PORT {
        let rec = load(name);
        for (r, (c2s, s2c)) in rec.ranks.iter().enumerate() {
            check_mpich_rank(&format!("{name}/rank{r}"), c2s, s2c, r, size, true);
        }
        check_bcast_agrees(&rec);
    }
}

#[test]
fn hydra_pmi1_reply_quirks() {
    // Hydra 4.0.2 puts `rc` last in response_to_init, omits it on maxes/my_kvsname/barrier_out,
    // and adds msg=success to put_result and get_result.
    let (_, s2c) = &load("mpich-hello-n2").ranks[0];
    let text = String::from_utf8_lossy(s2c);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"
    );
    assert_eq!(
        lines[1],
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"
    );
    assert!(lines.contains(&"cmd=barrier_out"));
    assert!(lines.contains(&"cmd=put_result rc=0 msg=success"));
}

// ---------------------------------------------------------------------------------------------
// What Slurm 22.05's libpmi2 (PMI-2) exchanges with Hydra

#[test]
fn slurm_libpmi2() {
    use v2::Request as Q;
    use v2::Response as A;
    for (name, size) in SLURM {
        let rec = load(name);
        for (r, (c2s, s2c)) in rec.ranks.iter().enumerate() {
            let what = format!("{name}/rank{r}");
            let q = client_stream(&what, c2s);
            let a = server_stream(&what, s2c);
            assert_eq!(
                q[0].0,
                Msg::V1(v1::Request::Init {
                    version: 2,
                    subversion: 0
                })
            );
            assert_eq!(
                a[0].0,
                Msg::V1(v1::Response::Init {
                    status: Status::ok(),
                    version: 2,
                    subversion: 0
                })
            );
            let frames = |v: &[(ClientMsg, Vec<u8>)]| -> Vec<Frame<Q>> {
                v[1..]
                    .iter()
                    .map(|(m, _)| match m {
                        Msg::V2(f) => f.clone(),
                        Msg::V1(m) => panic!("{what}: a PMI-1 line after the switch: {m:?}"),
                    })
                    .collect()
            };
            let q = frames(&q);
            let a: Vec<Frame<A>> = a[1..]
                .iter()
                .map(|(m, _)| match m {
                    Msg::V2(f) => f.clone(),
                    Msg::V1(m) => panic!("{what}: a PMI-1 reply after the switch: {m:?}"),
                })
                .collect();
            assert!(
                q.iter().all(|f| f.thrid.is_none()),
                "{what}: thrid from a client"
            );
            assert!(
                a.iter().all(|f| f.thrid.is_none()),
                "{what}: thrid from Hydra"
            );
            let jobid = match &a[1].msg {
                A::JobGetId { jobid, .. } => jobid.clone(),
                other => panic!("{what}: {other:?}"),
            };
            let card = |i: usize| format!("addr=host{i}:port{}", 4000 + i);
            // Slurm's libpmi2 under Hydra: no pmijobid (PMI_JOBID is unset), threaded=FALSE.
            let mut want_q = vec![
                Q::FullInit {
                    pmijobid: None,
                    pmirank: Some(r as i64),
                    threaded: Some(false),
                },
                Q::JobGetId,
                Q::KvsPut {
                    key: format!("card-{r}"),
                    value: card(r),
                },
                Q::KvsFence,
            ];
            let mut want_a = vec![
                A::FullInit {
                    status: Status::ok(),
                    rank: r as i64,
                    size: size as i64,
                    appnum: 0,
                    spawner_jobid: None,
                    debugged: false,
                    pmiverbose: false,
                },
                A::JobGetId {
                    status: Status::ok(),
                    jobid: jobid.clone(),
                },
                A::KvsPut(Status::ok()),
                A::KvsFence(Status::ok()),
            ];
            for i in 0..size {
                want_q.push(Q::KvsGet {
                    jobid: Some(jobid.clone()),
                    srcid: Some(i as i64),
                    key: format!("card-{i}"),
                });
                want_a.push(A::KvsGet(Lookup::found(card(i))));
            }
            want_q.push(Q::InfoGetJobAttr {
                key: "PMI_process_mapping".into(),
            });
            want_a.push(A::InfoGetJobAttr(Lookup::found("(vector,(0,1,1))")));
            if r == 0 {
                want_q.push(Q::InfoPutNodeAttr {
                    key: "node-key".into(),
                    value: "node-value".into(),
                });
                want_a.push(A::InfoPutNodeAttr(Status::ok()));
            }
            want_q.extend([
                Q::InfoGetNodeAttr {
                    key: "node-key".into(),
                    wait: true,
                },
                Q::Finalize,
            ]);
            want_a.extend([
                A::InfoGetNodeAttr(Lookup::found("node-value")),
                A::Finalize(Status::ok()),
            ]);
            let q: Vec<Q> = q.into_iter().map(|f| f.msg).collect();
            let a: Vec<A> = a.into_iter().map(|f| f.msg).collect();
            assert_eq!(q, want_q, "{what}: client frames");
            assert_eq!(a, want_a, "{what}: server frames");
        }
    }
}

#[test]
fn slurm_pads_left_hydra_pads_right() {
    // Slurm's libpmi2 writes its length prefix left-justified ("38    "); Hydra 4.0.2 answers
    // right-justified ("   113"). Neither writes anything after the final `;`.
    for (name, _) in SLURM {
        let rec = load(name);
        for (r, (c2s, s2c)) in rec.ranks.iter().enumerate() {
            let what = format!("{name}/rank{r}");
            for (m, raw) in client_stream(&what, c2s) {
                if let Msg::V2(_) = m {
                    let p = std::str::from_utf8(&raw[..6]).unwrap();
                    assert!(p.starts_with(|c: char| c.is_ascii_digit()), "{what}: {p:?}");
                    assert_eq!(p.trim_end().len(), p.trim().len(), "{what}: {p:?}");
                    assert_eq!(raw.last(), Some(&b';'), "{what}");
                }
            }
            for (m, raw) in server_stream(&what, s2c) {
                if let Msg::V2(_) = m {
                    let p = std::str::from_utf8(&raw[..6]).unwrap();
                    assert!(p.ends_with(|c: char| c.is_ascii_digit()), "{what}: {p:?}");
                    assert_eq!(raw.last(), Some(&b';'), "{what}");
                }
            }
        }
    }
}
