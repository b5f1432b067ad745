//! PMI-2 codec: every request and response frame, both directions, against literal wire
//! bytes; the lenient cases real clients need; and every error.

use bytes::BytesMut;
use pmi_wire::v2::{frame_len, Frame, Lookup, Request, Response};
use pmi_wire::{Spawn, SpawnCommand, Status, WireError};

/// A frame with a left-justified length prefix, as this crate writes it.
fn framed(body: &str) -> Vec<u8> {
    let mut v = format!("{:<6}", body.len()).into_bytes();
    v.extend_from_slice(body.as_bytes());
    v
}

fn req(wire: &[u8]) -> Frame<Request> {
    let (msg, n) = Frame::<Request>::parse(wire)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(wire)))
        .unwrap_or_else(|| panic!("{:?}: incomplete", String::from_utf8_lossy(wire)));
    assert_eq!(n, wire.len(), "frame not consumed whole");
    msg
}

fn resp(wire: &[u8]) -> Frame<Response> {
    let (msg, n) = Frame::<Response>::parse(wire)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(wire)))
        .unwrap_or_else(|| panic!("{:?}: incomplete", String::from_utf8_lossy(wire)));
    assert_eq!(n, wire.len(), "frame not consumed whole");
    msg
}

fn enc_req(m: &Frame<Request>) -> Vec<u8> {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b.to_vec()
}

fn enc_resp(m: &Frame<Response>) -> Vec<u8> {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b.to_vec()
}

/// `body` (framed) parses to `msg`, and `msg` encodes to exactly that frame.
fn both_req(body: &str, msg: Request) {
    let wire = framed(body);
    let f = Frame::new(msg);
    assert_eq!(req(&wire), f, "parse of {body:?}");
    assert_eq!(
        String::from_utf8_lossy(&enc_req(&f)),
        String::from_utf8_lossy(&wire),
        "encoding of {f:?}"
    );
}

fn both_resp(body: &str, msg: Response) {
    let wire = framed(body);
    let f = Frame::new(msg);
    assert_eq!(resp(&wire), f, "parse of {body:?}");
    assert_eq!(
        String::from_utf8_lossy(&enc_resp(&f)),
        String::from_utf8_lossy(&wire),
        "encoding of {f:?}"
    );
}

fn req_err(wire: &[u8]) -> WireError {
    match Frame::<Request>::parse(wire) {
        Err(e) => e,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(wire)),
    }
}

fn resp_err(wire: &[u8]) -> WireError {
    match Frame::<Response>::parse(wire) {
        Err(e) => e,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(wire)),
    }
}

fn s(v: &str) -> String {
    v.to_string()
}

// ---------------------------------------------------------------------------------------------
// Requests, both directions

#[test]
fn fullinit() {
    both_req(
        "cmd=fullinit;pmijobid=12.0;pmirank=3;threaded=TRUE;",
        Request::FullInit {
            pmijobid: Some(s("12.0")),
            pmirank: Some(3),
            threaded: Some(true),
        },
    );
    // New MPICH: only pmirank.
    both_req(
        "cmd=fullinit;pmirank=-1;",
        Request::FullInit {
            pmijobid: None,
            pmirank: Some(-1),
            threaded: None,
        },
    );
}

#[test]
fn fullinit_slurm_without_pmijobid() {
    // What Slurm's libpmi2 sends under Hydra (no PMI_JOBID in the environment).
    both_req(
        "cmd=fullinit;pmirank=1;threaded=FALSE;",
        Request::FullInit {
            pmijobid: None,
            pmirank: Some(1),
            threaded: Some(false),
        },
    );
    // Over PMI_PORT Slurm names itself with srcid.
    assert_eq!(
        req(&framed("cmd=fullinit;srcid=2;threaded=FALSE;")).msg,
        Request::FullInit {
            pmijobid: None,
            pmirank: Some(2),
            threaded: Some(false),
        }
    );
    assert_eq!(
        req(&framed("cmd=fullinit;")).msg,
        Request::FullInit {
            pmijobid: None,
            pmirank: None,
            threaded: None,
        }
    );
}

#[test]
fn job_requests() {
    both_req("cmd=job-getid;", Request::JobGetId);
    both_req(
        "cmd=job-connect;jobid=kvs_2;",
        Request::JobConnect { jobid: s("kvs_2") },
    );
    both_req(
        "cmd=job-disconnect;jobid=kvs_2;",
        Request::JobDisconnect { jobid: s("kvs_2") },
    );
}

#[test]
fn kvs_requests() {
    both_req(
        "cmd=kvs-put;key=card-0;value=addr=host0:4000;",
        Request::KvsPut {
            key: s("card-0"),
            value: s("addr=host0:4000"),
        },
    );
    both_req(
        "cmd=kvs-get;jobid=kvs_1;srcid=0;key=card-0;",
        Request::KvsGet {
            jobid: Some(s("kvs_1")),
            srcid: Some(0),
            key: s("card-0"),
        },
    );
    both_req(
        "cmd=kvs-get;key=-NONEXIST-KEY;",
        Request::KvsGet {
            jobid: None,
            srcid: None,
            key: s("-NONEXIST-KEY"),
        },
    );
    both_req("cmd=kvs-fence;", Request::KvsFence);
}

#[test]
fn info_requests() {
    both_req(
        "cmd=info-putnodeattr;key=node-key;value=node value;",
        Request::InfoPutNodeAttr {
            key: s("node-key"),
            value: s("node value"),
        },
    );
    both_req(
        "cmd=info-getnodeattr;key=node-key;wait=TRUE;",
        Request::InfoGetNodeAttr {
            key: s("node-key"),
            wait: true,
        },
    );
    both_req(
        "cmd=info-getnodeattr;key=node-key;wait=FALSE;",
        Request::InfoGetNodeAttr {
            key: s("node-key"),
            wait: false,
        },
    );
    both_req(
        "cmd=info-getjobattr;key=PMI_process_mapping;",
        Request::InfoGetJobAttr {
            key: s("PMI_process_mapping"),
        },
    );
}

#[test]
fn name_requests() {
    both_req(
        "cmd=name-publish;name=svc;port=tag#0$;infokeycount=0;",
        Request::NamePublish {
            name: s("svc"),
            port: s("tag#0$"),
            info: vec![],
        },
    );
    both_req(
        "cmd=name-publish;name=svc;port=p;infokeycount=1;infokey0=k;infoval0=v;",
        Request::NamePublish {
            name: s("svc"),
            port: s("p"),
            info: vec![(s("k"), s("v"))],
        },
    );
    // The new client sends no infokeycount.
    assert_eq!(
        req(&framed("cmd=name-publish;name=svc;port=p;")).msg,
        Request::NamePublish {
            name: s("svc"),
            port: s("p"),
            info: vec![],
        }
    );
    both_req(
        "cmd=name-unpublish;name=svc;",
        Request::NameUnpublish { name: s("svc") },
    );
    both_req(
        "cmd=name-lookup;name=svc;",
        Request::NameLookup { name: s("svc") },
    );
}

fn spawn_value() -> Spawn {
    Spawn {
        commands: vec![
            SpawnCommand {
                execname: s("/bin/child"),
                nprocs: 2,
                args: vec![s("x y"), s("a;b")],
                info: vec![(s("wdir"), s("/tmp"))],
            },
            SpawnCommand {
                execname: s("other"),
                nprocs: 1,
                args: vec![],
                info: vec![],
            },
        ],
        preput: vec![(s("PARENT_ROOT_PORT_NAME"), s("tag#0$"))],
    }
}

#[test]
fn spawn() {
    both_req(
        "cmd=spawn;ncmds=2;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$;\
         subcmd=/bin/child;maxprocs=2;argc=2;argv0=x y;argv1=a;;b;infokeycount=1;\
         infokey0=wdir;infoval0=/tmp;subcmd=other;maxprocs=1;argc=0;infokeycount=0;",
        Request::Spawn(spawn_value()),
    );
}

#[test]
fn spawn_without_counts() {
    // argc and infokeycount absent: arguments are read while argvN exists.
    assert_eq!(
        req(&framed("cmd=spawn;subcmd=a;maxprocs=3;argv0=p;argv1=q;")).msg,
        Request::Spawn(Spawn {
            commands: vec![SpawnCommand {
                execname: s("a"),
                nprocs: 3,
                args: vec![s("p"), s("q")],
                info: vec![],
            }],
            preput: vec![],
        })
    );
}

#[test]
fn abort() {
    both_req(
        "cmd=abort;isworld=TRUE;msg=it broke;",
        Request::Abort {
            isworld: Some(true),
            message: Some(s("it broke")),
            exitcode: None,
        },
    );
    both_req(
        "cmd=abort;isworld=FALSE;msg=m;exitcode=4;",
        Request::Abort {
            isworld: Some(false),
            message: Some(s("m")),
            exitcode: Some(4),
        },
    );
}

#[test]
fn abort_new_client_spelling() {
    assert_eq!(
        req(&framed("cmd=abort;exitcode=5;message=gone;")).msg,
        Request::Abort {
            isworld: None,
            message: Some(s("gone")),
            exitcode: Some(5),
        }
    );
}

#[test]
fn finalize() {
    both_req("cmd=finalize;", Request::Finalize);
}

#[test]
fn thrid_is_carried() {
    let wire = framed("cmd=kvs-get;thrid=0x7f00;key=k;");
    let f = req(&wire);
    assert_eq!(
        f,
        Frame {
            thrid: Some(s("0x7f00")),
            msg: Request::KvsGet {
                jobid: None,
                srcid: None,
                key: s("k")
            }
        }
    );
    assert_eq!(enc_req(&f), wire);
    let reply = Frame {
        thrid: Some(s("0x7f00")),
        msg: Response::KvsGet(Lookup::found("v")),
    };
    let wire = framed("cmd=kvs-get-response;thrid=0x7f00;rc=0;found=TRUE;value=v;");
    assert_eq!(enc_resp(&reply), wire);
    assert_eq!(resp(&wire), reply);
}

// ---------------------------------------------------------------------------------------------
// Responses, both directions

#[test]
fn fullinit_response() {
    both_resp(
        "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=4;appnum=0;\
         debugged=FALSE;pmiverbose=FALSE;",
        Response::FullInit {
            status: Status::ok(),
            rank: 1,
            size: 4,
            appnum: 0,
            spawner_jobid: None,
            debugged: false,
            pmiverbose: false,
        },
    );
    both_resp(
        "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=1;\
         spawner-jobid=kvs_1;debugged=TRUE;pmiverbose=TRUE;",
        Response::FullInit {
            status: Status::ok(),
            rank: 0,
            size: 2,
            appnum: 1,
            spawner_jobid: Some(s("kvs_1")),
            debugged: true,
            pmiverbose: true,
        },
    );
}

#[test]
fn job_responses() {
    both_resp(
        "cmd=job-getid-response;rc=0;jobid=kvs_1;",
        Response::JobGetId {
            status: Status::ok(),
            jobid: s("kvs_1"),
        },
    );
    both_resp(
        "cmd=job-connect-response;rc=0;kvscopy=TRUE;",
        Response::JobConnect {
            status: Status::ok(),
            kvscopy: true,
        },
    );
    both_resp(
        "cmd=job-disconnect-response;rc=1;errmsg=not supported;",
        Response::JobDisconnect(Status::error(1, "not supported")),
    );
}

type StatusReply = fn(Status) -> Response;
type LookupReply = fn(Lookup) -> Response;

#[test]
fn status_responses() {
    let cases: [(&str, StatusReply); 7] = [
        ("kvs-put", Response::KvsPut),
        ("kvs-fence", Response::KvsFence),
        ("info-putnodeattr", Response::InfoPutNodeAttr),
        ("name-publish", Response::NamePublish),
        ("name-unpublish", Response::NameUnpublish),
        ("finalize", Response::Finalize),
        ("job-disconnect", Response::JobDisconnect),
    ];
    for (name, make) in cases {
        both_resp(&format!("cmd={name}-response;rc=0;"), make(Status::ok()));
        both_resp(
            &format!("cmd={name}-response;rc=2;errmsg=no;; really;"),
            make(Status::error(2, "no; really")),
        );
    }
}

#[test]
fn lookup_responses() {
    let cases: [(&str, LookupReply); 3] = [
        ("kvs-get", Response::KvsGet),
        ("info-getnodeattr", Response::InfoGetNodeAttr),
        ("info-getjobattr", Response::InfoGetJobAttr),
    ];
    for (name, make) in cases {
        both_resp(
            &format!("cmd={name}-response;rc=0;found=TRUE;value=(vector,(0,1,4));"),
            make(Lookup::found("(vector,(0,1,4))")),
        );
        both_resp(
            &format!("cmd={name}-response;rc=1;errmsg=not found;found=FALSE;"),
            make(Lookup::not_found("not found")),
        );
    }
}

#[test]
fn name_lookup_response_writes_port_and_value() {
    both_resp(
        "cmd=name-lookup-response;rc=0;found=TRUE;port=tag#0$;value=tag#0$;",
        Response::NameLookup(Lookup::found("tag#0$")),
    );
    both_resp(
        "cmd=name-lookup-response;rc=1;errmsg=service not found;found=FALSE;",
        Response::NameLookup(Lookup::not_found("service not found")),
    );
}

#[test]
fn name_lookup_response_either_spelling() {
    let want = Response::NameLookup(Lookup::found("p1"));
    for body in [
        "cmd=name-lookup-response;rc=0;found=TRUE;port=p1;value=p1;",
        "cmd=name-lookup-response;rc=0;found=TRUE;port=p1;",
        "cmd=name-lookup-response;rc=0;found=TRUE;value=p1;",
        // No found: a value means found.
        "cmd=name-lookup-response;rc=0;value=p1;",
    ] {
        assert_eq!(resp(&framed(body)).msg, want, "{body}");
    }
}

#[test]
fn spawn_response() {
    both_resp(
        "cmd=spawn-response;rc=0;jobid=kvs_2;",
        Response::Spawn {
            status: Status::ok(),
            jobid: Some(s("kvs_2")),
            errcodes: vec![],
        },
    );
    both_resp(
        "cmd=spawn-response;rc=0;jobid=kvs_2;nerrs=2;errcodes=0,-3;",
        Response::Spawn {
            status: Status::ok(),
            jobid: Some(s("kvs_2")),
            errcodes: vec![0, -3],
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Lenient parsing

#[test]
fn left_and_right_justified_prefixes() {
    let body = "cmd=kvs-fence;";
    for prefix in ["14    ", "    14", "  14  ", "000014", "14\0\0\0\0"] {
        let wire = [prefix.as_bytes(), body.as_bytes()].concat();
        assert_eq!(req(&wire).msg, Request::KvsFence, "prefix {prefix:?}");
        assert_eq!(frame_len(&wire), Ok(Some(20)));
    }
    // Hydra 4.0.2 writes its replies right-justified.
    assert_eq!(
        resp(b"    26cmd=kvs-put-response;rc=0;").msg,
        Response::KvsPut(Status::ok())
    );
}

#[test]
fn trailing_garbage_after_last_pair_is_ignored() {
    // The old MPICH client writes stale bytes (often NULs) after the final `;`.
    // MPICH 4.0.2's pmi2/simple client pads to the frame length with whatever its buffer
    // held, pairs and `;` included, after the string's NUL.
    for tail in [
        "\0\0\0\0\0\0",
        "xyzzy",
        "k=unterminated",
        "  \0 ",
        "\0;",
        "\0pmirank=0;threaded=FALSE;",
        "\0\0=;;x;",
    ] {
        let body = format!("cmd=kvs-get;key=k;{tail}");
        assert_eq!(
            req(&framed(&body)).msg,
            Request::KvsGet {
                jobid: None,
                srcid: None,
                key: s("k")
            },
            "tail {tail:?}"
        );
    }
    // A body that is only `cmd=NAME` without its terminator.
    assert_eq!(req(&framed("cmd=finalize")).msg, Request::Finalize);
}

#[test]
fn stale_bytes_without_a_nul_are_dropped() {
    // MPICH 4.0.2's pmi2/simple client counts 6 bytes too many and sends what its buffer held
    // there. After a longer command (a spawn, say) that is the older command's text, with no
    // NUL in front: `=b;arg` out of `argv1=b;argv2=c`.
    let spawn = "cmd=spawn;ncmds=1;subcmd=./a;maxprocs=5;argc=3;argv0=a;argv1=b;argv2=c;";
    let fence = format!("{:<6}cmd=kvs-fence;{}", 20, &spawn[60..66]);
    assert_eq!(&fence[20..], "=b;arg");
    assert_eq!(frame_len(fence.as_bytes()), Ok(Some(26)));
    assert_eq!(req(fence.as_bytes()).msg, Request::KvsFence);
    for tail in ["ab;cd;", "x;\0\0\0\0", ";=;=;="] {
        let body = format!("cmd=kvs-get;key=k;{tail}");
        assert_eq!(
            req(&framed(&body)).msg,
            Request::KvsGet {
                jobid: None,
                srcid: None,
                key: s("k")
            },
            "tail {tail:?}"
        );
    }
    // Only the last 6 bytes, and only when a pair ends right before them.
    assert!(matches!(
        req_err(&framed("cmd=kvs-put;key;value=a-long-value;")),
        WireError::Malformed(_)
    ));
    assert!(matches!(
        req_err(&framed("cmd=kvs-fence;xab;cd;")),
        WireError::Malformed(_)
    ));
}

#[test]
fn semicolon_escaping() {
    let wire = framed("cmd=kvs-put;key=k;value=a;;b;;;;c;;;");
    let f = req(&wire);
    assert_eq!(
        f.msg,
        Request::KvsPut {
            key: s("k"),
            value: s("a;b;;c;")
        }
    );
    assert_eq!(enc_req(&f), wire);
}

#[test]
fn booleans_in_any_case() {
    for (text, want) in [
        ("TRUE", true),
        ("true", true),
        ("True", true),
        ("FALSE", false),
        ("false", false),
    ] {
        assert_eq!(
            req(&framed(&format!("cmd=info-getnodeattr;key=k;wait={text};"))).msg,
            Request::InfoGetNodeAttr {
                key: s("k"),
                wait: want
            }
        );
    }
    assert_eq!(
        resp(&framed("cmd=kvs-get-response;rc=0;found=true;value=v;")).msg,
        Response::KvsGet(Lookup::found("v"))
    );
}

#[test]
fn pairs_in_any_order_and_unknown_keys_ignored() {
    // Hydra 4.0.2's reply order: found, value, rc last.
    assert_eq!(
        resp(&framed(
            "cmd=kvs-get-response;found=TRUE;value=addr=host0:port4000;rc=0;"
        ))
        .msg,
        Response::KvsGet(Lookup::found("addr=host0:port4000"))
    );
    assert_eq!(
        req(&framed("cmd=kvs-get;color=blue;key=k;srcid=3;jobid=j;")).msg,
        Request::KvsGet {
            jobid: Some(s("j")),
            srcid: Some(3),
            key: s("k")
        }
    );
    // Extra white space around keys.
    assert_eq!(
        req(&framed("cmd=kvs-put; key=k;\tvalue=v;")).msg,
        Request::KvsPut {
            key: s("k"),
            value: s("v")
        }
    );
}

#[test]
fn slurm_not_found_reply() {
    assert_eq!(
        resp(&framed("cmd=kvs-get-response;rc=0;found=FALSE;")).msg,
        Response::KvsGet(Lookup {
            status: Status::ok(),
            found: false,
            value: None
        })
    );
}

#[test]
fn partial_frames_are_incomplete() {
    let wire = framed("cmd=kvs-get;jobid=kvs_1;srcid=0;key=card-0;");
    for cut in 0..wire.len() {
        assert_eq!(Frame::<Request>::parse(&wire[..cut]), Ok(None), "cut {cut}");
    }
    let mut buf = BytesMut::new();
    for (i, b) in wire.iter().enumerate() {
        buf.extend_from_slice(&[*b]);
        let got = Frame::<Request>::decode(&mut buf).unwrap();
        assert_eq!(got.is_some(), i + 1 == wire.len());
    }
    assert!(buf.is_empty());
}

#[test]
fn frames_back_to_back() {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&framed("cmd=kvs-fence;"));
    buf.extend_from_slice(&framed("cmd=finalize;"));
    buf.extend_from_slice(b"13  ");
    assert_eq!(
        Frame::<Request>::decode(&mut buf),
        Ok(Some(Frame::new(Request::KvsFence)))
    );
    assert_eq!(
        Frame::<Request>::decode(&mut buf),
        Ok(Some(Frame::new(Request::Finalize)))
    );
    assert_eq!(Frame::<Request>::decode(&mut buf), Ok(None));
    assert_eq!(buf.len(), 4);
}

// ---------------------------------------------------------------------------------------------
// Errors

#[test]
fn error_bad_length_prefix() {
    for prefix in ["abcdef", "-5    ", "1 4   ", "      ", "\u{ff}\u{ff}\u{ff}"] {
        let wire = [prefix.as_bytes(), b"cmd=kvs-fence;"].concat();
        let e = req_err(&wire);
        assert!(matches!(e, WireError::BadLength(_)), "{prefix:?}: {e:?}");
        assert!(e.is_fatal());
        let mut buf = BytesMut::from(&wire[..]);
        assert!(Frame::<Request>::decode(&mut buf).is_err());
        assert_eq!(buf.len(), wire.len(), "a framing error consumes nothing");
    }
    assert!(matches!(resp_err(b"xx    "), WireError::BadLength(_)));
}

#[test]
fn error_unknown_command() {
    assert_eq!(
        req_err(&framed("cmd=frobnicate;")),
        WireError::UnknownCommand(s("frobnicate"))
    );
    // A reply must end in -response, and name a known query.
    assert_eq!(
        resp_err(&framed("cmd=kvs-put;rc=0;")),
        WireError::UnknownCommand(s("kvs-put"))
    );
    assert_eq!(
        resp_err(&framed("cmd=frob-response;rc=0;")),
        WireError::UnknownCommand(s("frob-response"))
    );
}

#[test]
fn error_missing_field() {
    assert_eq!(
        req_err(&framed("cmd=kvs-put;key=k;")),
        WireError::MissingField {
            cmd: s("kvs-put"),
            field: s("value")
        }
    );
    assert_eq!(
        req_err(&framed("cmd=spawn;ncmds=1;")),
        WireError::MissingField {
            cmd: s("spawn"),
            field: s("subcmd")
        }
    );
    assert_eq!(
        req_err(&framed("cmd=spawn;subcmd=a;maxprocs=1;argc=2;argv0=x;")),
        WireError::MissingField {
            cmd: s("spawn"),
            field: s("argv1")
        }
    );
}

#[test]
fn error_bad_value() {
    assert_eq!(
        req_err(&framed("cmd=kvs-get;srcid=zero;key=k;")),
        WireError::BadValue {
            cmd: s("kvs-get"),
            field: s("srcid"),
            value: s("zero")
        }
    );
    assert!(matches!(
        req_err(&framed("cmd=info-getnodeattr;key=k;wait=maybe;")),
        WireError::BadValue { .. }
    ));
    assert!(matches!(
        resp_err(&framed("cmd=kvs-fence-response;rc=x;")),
        WireError::BadValue { .. }
    ));
    assert!(matches!(
        req_err(&framed("cmd=spawn;ncmds=2;subcmd=a;maxprocs=1;")),
        WireError::BadValue { .. }
    ));
}

#[test]
fn error_not_utf8() {
    let frame = |body: &[u8]| [format!("{:<6}", body.len()).as_bytes(), body].concat();
    assert_eq!(
        req_err(&frame(b"cmd=kvs-put;key=\xff;")),
        WireError::NotUtf8
    );
    assert_eq!(req_err(&frame(b"cmd=\xfe\xff;")), WireError::NotUtf8);
    assert_eq!(req_err(&frame(b"cmd=kvs-put;\xff=v;")), WireError::NotUtf8);
    assert_eq!(resp_err(&frame(b"\xff")), WireError::NotUtf8);
}

#[test]
fn error_malformed_and_no_command() {
    assert!(matches!(
        req_err(&framed("cmd=kvs-put;key;value=v;")),
        WireError::Malformed(_)
    ));
    assert!(matches!(
        req_err(&framed("cmd=kvs-put;=v;")),
        WireError::Malformed(_)
    ));
    assert!(matches!(
        req_err(&framed("key=v;cmd=kvs-fence;")),
        WireError::NoCommand(_)
    ));
    assert!(matches!(req_err(&framed("")), WireError::NoCommand(_)));
    assert!(matches!(
        req_err(&framed("cmd=kvs;;put;")),
        WireError::Malformed(_)
    ));
}

#[test]
fn decode_consumes_a_bad_frame_and_reads_on() {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&framed("cmd=bogus;"));
    buf.extend_from_slice(&framed("cmd=finalize;"));
    assert_eq!(
        Frame::<Request>::decode(&mut buf),
        Err(WireError::UnknownCommand(s("bogus")))
    );
    assert_eq!(
        Frame::<Request>::decode(&mut buf),
        Ok(Some(Frame::new(Request::Finalize)))
    );
}

#[test]
fn error_replies_name_the_request_and_echo_thrid() {
    let mut b = BytesMut::new();
    pmi_wire::v2::encode_error("frob", Some("7"), &Status::error(-1, "no; such"), &mut b);
    let body = "cmd=frob-response;thrid=7;rc=-1;errmsg=no;; such;";
    assert_eq!(&b[..], format!("{:<6}{body}", body.len()).as_bytes());
}
