//! Fuzzes the PMI session engine (`kauri::pmi::Engine`) the way an agent drives it: the input
//! picks a job of 1-4 local ranks, `PMI_FD` or `PMI_PORT` style connections, then a sequence
//! of steps: bytes fed to a connection through its own `Framing` (a well-formed request in the
//! connection's current protocol, or raw bytes), a connection closed, a rank's process ended,
//! a ready fence completed (as a one-host front end does), a service request answered, a new
//! connection opened. After every step the outputs are dispatched as `node.rs` does and these
//! invariants are checked:
//!
//! - nothing panics;
//! - no `Send` names a connection the I/O layer has already closed (one it closed earlier, on
//!   the engine's `Close` or on the socket's end). Replies the engine queues after its own
//!   `Close` in the same batch are dropped by the node, as here, and allowed;
//! - once every local rank entered the current fence (its connection sent `barrier_in` or
//!   `kvs-fence`, was bound to the rank, and the rank was not in it already), a `FenceReady`
//!   for that epoch came out, unless the job failed; and never twice, never for another
//!   epoch, never before every rank entered.
#![no_main]

use bytes::BytesMut;
use kauri::kvs::Packed;
use kauri::pmi::{ConnId, Engine, Framing, Incoming, JobInfo, Output};
use kauri::service::{ServiceReply, SpawnDone};
use libfuzzer_sys::fuzz_target;
use pmi_wire::{v1, v2};
use std::collections::{HashMap, HashSet};

/// The input, read a byte at a time; zeros once it runs out.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }

    fn done(&self) -> bool {
        self.data.is_empty()
    }
}

const KEYS: &[&str] = &[
    "a",
    "b",
    "bc-0",
    "",
    "PMI_process_mapping",
    "PMI_x",
    "universeSize",
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
];
const VALUES: &[&str] = &["1", "", "x y=z", "seg1"];
const NAMES: &[&str] = &["svc", "other", ""];
const IDS: &[&str] = &["0", "1", "2", "3", "4", "-1", "x", "99999999999999999999"];

/// A well-formed (or nearly) PMI-1 request.
fn v1_request(inp: &mut Input) -> Vec<u8> {
    let k = KEYS[inp.below(KEYS.len())];
    let v = VALUES[inp.below(VALUES.len())];
    let id = IDS[inp.below(IDS.len())];
    let kvs = ["kvs_fuzz", "kauri.publish", "other"][inp.below(3)];
    let s = match inp.below(24) {
        0 | 1 => "cmd=init pmi_version=1 pmi_subversion=1\n".to_string(),
        2 => "cmd=init pmi_version=2 pmi_subversion=0\n".into(),
        3 => "cmd=init pmi_version=3 pmi_subversion=0\n".into(),
        4 => format!("cmd=initack pmiid={id}\n"),
        5 => "cmd=get_maxes\n".into(),
        6 => "cmd=get_appnum\n".into(),
        7 => "cmd=get_my_kvsname\n".into(),
        8 => "cmd=get_universe_size\n".into(),
        9 | 10 => format!("cmd=put kvsname={kvs} key={k} value={v}\n"),
        11 => format!("cmd=get kvsname={kvs} key={k}\n"),
        12..=14 => "cmd=barrier_in\n".into(),
        15 => "cmd=barrier_in group=WORLD:1\n".into(),
        16 => format!("cmd=getbyidx kvsname={kvs} idx={id}\n"),
        17 => format!("cmd=publish_name service={} port=p\n", NAMES[inp.below(3)]),
        18 => format!("cmd=unpublish_name service={}\n", NAMES[inp.below(3)]),
        19 => format!("cmd=lookup_name service={}\n", NAMES[inp.below(3)]),
        20 => format!(
            "mcmd=spawn\nnprocs={id}\nexecname={}\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n",
            ["a.out", ""][inp.below(2)]
        ),
        21 => format!("cmd=abort exitcode={id}\n"),
        22 => "cmd=finalize\n".into(),
        _ => "cmd=singinit pmi_version=1 pmi_subversion=1 stdio=yes authtype=none\n".into(),
    };
    s.into_bytes()
}

/// A well-formed (or nearly) PMI-2 frame.
fn v2_request(inp: &mut Input) -> Vec<u8> {
    let k = KEYS[inp.below(KEYS.len())];
    let v = VALUES[inp.below(VALUES.len())];
    let id = IDS[inp.below(IDS.len())];
    let thrid = ["", "thrid=t1;"][inp.below(2)];
    let body = match inp.below(20) {
        0 | 1 => format!("cmd=fullinit;{thrid}pmirank={id};threaded=FALSE;"),
        2 => format!("cmd=fullinit;{thrid}threaded=FALSE;"),
        3 => format!("cmd=job-getid;{thrid}"),
        4 | 5 => format!("cmd=kvs-put;{thrid}key={k};value={v};"),
        6 => format!("cmd=kvs-get;{thrid}jobid=kvs_fuzz;srcid={id};key={k};"),
        7..=9 => format!("cmd=kvs-fence;{thrid}"),
        10 => format!("cmd=info-putnodeattr;{thrid}key={k};value={v};"),
        11 => format!(
            "cmd=info-getnodeattr;{thrid}key={k};wait={};",
            ["TRUE", "FALSE"][inp.below(2)]
        ),
        12 => format!("cmd=info-getjobattr;{thrid}key={k};"),
        13 => format!(
            "cmd=name-publish;{thrid}name={};port=p;",
            NAMES[inp.below(3)]
        ),
        14 => format!("cmd=name-unpublish;{thrid}name={};", NAMES[inp.below(3)]),
        15 => format!("cmd=name-lookup;{thrid}name={};", NAMES[inp.below(3)]),
        16 => format!(
            "cmd=spawn;{thrid}ncmds=1;preputcount=0;subcmd={};maxprocs={id};argc=0;infokeycount=0;",
            ["a.out", ""][inp.below(2)]
        ),
        17 => format!("cmd=abort;{thrid}isworldabort=TRUE;msg=m;exitcode={id};"),
        18 => format!("cmd=finalize;{thrid}"),
        _ => format!("cmd=job-connect;{thrid}jobid=j;"),
    };
    let mut f = format!("{:<6}", body.len()).into_bytes();
    f.extend_from_slice(body.as_bytes());
    f
}

struct Harness {
    engine: Engine,
    size: usize,
    /// Open connections: their framing and unread bytes.
    conns: HashMap<ConnId, (Framing, BytesMut)>,
    /// Connections the I/O layer has closed.
    gone: HashSet<ConnId>,
    next_conn: ConnId,
    /// The model of the current fence.
    epoch: u64,
    entered: HashSet<usize>,
    ready: Option<Packed>,
    ready_seen: bool,
    failed: bool,
    requests: Vec<u64>,
}

impl Harness {
    /// Handles what the engine wants done, as `node.rs`'s `dispatch` does.
    fn dispatch(&mut self) {
        // Closed in this batch: replies after the engine's own `Close` are dropped.
        let mut closed_now = HashSet::new();
        loop {
            let out = self.engine.drain();
            if out.is_empty() {
                break;
            }
            for o in out {
                match o {
                    Output::Send { conn, .. } => {
                        assert!(
                            !self.gone.contains(&conn) || closed_now.contains(&conn),
                            "a reply to connection {conn}, closed before"
                        );
                        assert!(
                            self.conns.contains_key(&conn) || closed_now.contains(&conn),
                            "a reply to connection {conn}, which never was"
                        );
                    }
                    Output::Close { conn } => closed_now.extend(self.forget(conn).then_some(conn)),
                    Output::FenceReady { epoch, delta } => {
                        assert_eq!(epoch, self.epoch, "FenceReady for another epoch");
                        assert!(!self.ready_seen, "FenceReady {epoch} twice");
                        assert_eq!(
                            self.entered.len(),
                            self.size,
                            "FenceReady {epoch} before every rank entered ({:?})",
                            self.entered
                        );
                        self.ready_seen = true;
                        self.ready = Some(delta);
                    }
                    Output::Failed { .. } => self.failed = true,
                    Output::Request { id, .. } => self.requests.push(id),
                    _ => {}
                }
            }
        }
        if self.entered.len() == self.size && !self.failed {
            assert!(
                self.ready_seen,
                "every rank entered fence {} and no FenceReady came",
                self.epoch
            );
        }
    }

    /// Bytes from a rank's socket, decoded as `node.rs`'s `serve_conn` does.
    fn feed(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some((framing, buf)) = self.conns.get_mut(&conn) else {
            return;
        };
        buf.extend_from_slice(bytes);
        let mut fatal = false;
        loop {
            match framing.decode(buf) {
                Ok(Some(req)) => {
                    let fence =
                        matches!(&req, Incoming::V1(v1::Request::BarrierIn { group: None }))
                            || matches!(
                                &req,
                                Incoming::V2(f) if f.msg == v2::Request::KvsFence
                            );
                    if fence {
                        if let Some(r) = self.engine.rank_of(conn) {
                            self.entered.insert(r);
                        }
                    }
                    self.engine.handle(conn, req);
                }
                Ok(None) => break,
                Err(e) => {
                    self.engine.bad_input(conn, framing.is_v2(), &e);
                    if e.is_fatal() {
                        fatal = true;
                        break;
                    }
                }
            }
        }
        self.dispatch();
        if fatal {
            self.close(conn);
        }
    }

    /// The I/O layer forgets `conn` and tells the engine; false if it was not open.
    fn forget(&mut self, conn: ConnId) -> bool {
        let open = self.conns.remove(&conn).is_some();
        if open {
            self.gone.insert(conn);
            self.engine.disconnect(conn);
        }
        open
    }

    /// The socket ended (or the node gave up on it).
    fn close(&mut self, conn: ConnId) {
        if self.forget(conn) {
            self.dispatch();
        }
    }

    /// The tree answers a ready fence (one host: its own delta is the merged one).
    fn complete_fence(&mut self) {
        if let Some(delta) = self.ready.take() {
            let failed = self.failed;
            self.engine.fence_done(self.epoch, &delta);
            if !failed {
                self.epoch += 1;
                self.entered.clear();
                self.ready_seen = false;
            }
            self.dispatch();
        }
    }

    fn pick_conn(&self, inp: &mut Input) -> Option<ConnId> {
        let mut open: Vec<ConnId> = self.conns.keys().copied().collect();
        open.sort_unstable();
        (!open.is_empty()).then(|| open[inp.below(open.len())])
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input { data };
    let size = 1 + inp.below(4);
    let flags = inp.byte();
    let port_mode = flags & 1 != 0;
    let mut engine = Engine::new(JobInfo {
        kvsname: "kvs_fuzz".into(),
        size,
        universe_size: size as i64,
        appnum: vec![0; size],
        process_mapping: format!("(vector,(0,1,{size}))"),
        local_ranks: (0..size).collect(),
        spawner_jobid: (flags & 2 != 0).then(|| "kvs_parent".into()),
        puts_visible_at_once: flags & 4 != 0,
    });
    let mut conns = HashMap::new();
    for r in 0..size {
        engine.connect(r as ConnId, (!port_mode).then_some(r));
        conns.insert(r as ConnId, (Framing::default(), BytesMut::new()));
    }
    let mut h = Harness {
        engine,
        size,
        conns,
        gone: HashSet::new(),
        next_conn: size as ConnId,
        epoch: 0,
        entered: HashSet::new(),
        ready: None,
        ready_seen: false,
        failed: false,
        requests: Vec::new(),
    };
    let mut steps = 0;
    while !inp.done() && steps < 256 {
        steps += 1;
        match inp.below(16) {
            0..=6 => {
                let Some(c) = h.pick_conn(&mut inp) else {
                    continue;
                };
                let v2 = h.conns[&c].0.is_v2();
                let mut msg = if v2 {
                    v2_request(&mut inp)
                } else {
                    v1_request(&mut inp)
                };
                // Now and then only part of it: the rest comes with a later feed.
                if inp.below(8) == 0 {
                    msg.truncate(inp.below(msg.len() + 1));
                }
                h.feed(c, &msg);
            }
            7 | 8 => {
                let Some(c) = h.pick_conn(&mut inp) else {
                    continue;
                };
                let n = inp.below(96);
                let raw = inp.take(n).to_vec();
                h.feed(c, &raw);
            }
            9 => {
                if let Some(c) = h.pick_conn(&mut inp) {
                    h.close(c);
                }
            }
            10 => {
                h.engine.rank_exited(inp.below(size + 1));
                h.dispatch();
            }
            11 | 12 => h.complete_fence(),
            13 => {
                if !h.requests.is_empty() {
                    let id = h.requests.remove(inp.below(h.requests.len()));
                    let reply = match inp.below(6) {
                        0 => ServiceReply::Spawn(Ok(SpawnDone {
                            jobid: "kvs_child".into(),
                            size: 2,
                        })),
                        1 => ServiceReply::Spawn(Err("no".into())),
                        2 => ServiceReply::Done(Ok(())),
                        3 => ServiceReply::Done(Err("no".into())),
                        4 => ServiceReply::Found(Ok("port".into())),
                        _ => ServiceReply::Found(Err("not found".into())),
                    };
                    h.engine.service_reply(id, reply);
                    h.dispatch();
                }
            }
            14 if port_mode => {
                let c = h.next_conn;
                h.next_conn += 1;
                h.engine.connect(c, None);
                h.conns.insert(c, (Framing::default(), BytesMut::new()));
            }
            _ => {
                let _ = h.engine.status();
            }
        }
    }
    // The run's end: every ready fence completes.
    h.complete_fence();
});
