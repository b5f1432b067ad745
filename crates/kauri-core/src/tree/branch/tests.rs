//! The branch's decisions, over a fake host and fake links.

use super::*;
use crate::proto::rank::RankEnd;
use crate::tree::msg::{Launching, RankStatus};
use std::cell::RefCell;
use std::rc::Rc;

/// `msg` framed as a parent sends it: its length, big-endian, then its bincode body.
fn encode(msg: &Down) -> Bytes {
    let body = bincode::serialize(msg).expect("encodes");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend(body);
    frame.into()
}

/// What the fakes were asked to do, in order.
type Log = Rc<RefCell<Vec<String>>>;

struct FakeHost(Log);

impl Host for FakeHost {
    fn ranks(&self) -> usize {
        1
    }
    fn running(&self) -> usize {
        1
    }
    fn has_rank(&self, rank: usize) -> bool {
        rank == 0
    }
    fn fence_done(&self, epoch: u64, delta: &Packed, same_keys: bool) {
        self.0
            .borrow_mut()
            .push(format!("fence {epoch} {delta:?} {same_keys}"));
    }
    fn pmix_fence_done(&self, _: u64, _: Bytes) {}
    fn pmix_collective_done(&self, _sig: &str, _status: i32, _data: Vec<u8>, _id: Option<u64>) {}
    fn pmix_failure(&self, status: i32, ranks: &[usize], exit_code: Option<i32>) {
        self.0
            .borrow_mut()
            .push(format!("notify {status} {ranks:?} {exit_code:?}"));
    }
    fn dead_processes(&self, ranks: &[usize]) {
        self.0.borrow_mut().push(format!("dead {ranks:?}"));
    }
    fn pmix_dmodex_serve(&self, _: usize, _: u32, _: u64) {}
    fn pmix_dmodex_reply(&self, _: u64, _: i32, _: Vec<u8>) {}
    fn publish(&self, _: Delta) {}
    fn service_reply(&self, _: u64, _: ServiceReply) {}
    fn signal(&self, sig: i32) {
        self.0.borrow_mut().push(format!("signal {sig}"));
    }
    fn signal_ranks(&self, sig: i32, ranks: &[usize]) {
        self.0.borrow_mut().push(format!("signal {sig} {ranks:?}"));
    }
    fn status(&self) -> (Vec<RankStatus>, Option<u64>) {
        (Vec::new(), None)
    }
    type Stdin = ();
    fn take_stdin(&mut self) -> Option<()> {
        None
    }
    fn write_stdin(&mut self, data: Option<Vec<u8>>) {
        self.0.borrow_mut().push(format!("stdin {data:?}"));
    }
    async fn drain(self) {}
}

/// One child, id 1, whose subtree runs ranks 1 and 2.
struct FakeLinks(Log);

impl Links for FakeLinks {
    fn ids(&self) -> Vec<u32> {
        vec![1]
    }
    fn send(&self, id: u32, msg: Down) {
        self.0.borrow_mut().push(format!("send {id} {msg:?}"));
    }
    fn broadcast(&self, msg: &Down) {
        self.0.borrow_mut().push(format!("broadcast {msg:?}"));
    }
    fn broadcast_frame(&self, frame: &Bytes) {
        let msg: Down = bincode::deserialize(&frame[4..]).expect("a frame");
        self.0.borrow_mut().push(format!("frame {msg:?}"));
    }
    fn route(&self, _: u32, _: Down) -> bool {
        true
    }
    fn child_with_rank(&self, rank: usize) -> Option<u32> {
        (1..=2).contains(&rank).then_some(1)
    }
    fn ranks_below(&self, id: u32) -> Vec<usize> {
        if id == 1 {
            vec![1, 2]
        } else {
            Vec::new()
        }
    }
    fn mark_done(&self, _: u32) {}
    fn all_done(&self) -> bool {
        false
    }
    fn close(&self) {}
    fn host(&self, id: u32) -> String {
        format!("h{id}")
    }
    fn unfinished(&self) -> Vec<String> {
        Vec::new()
    }
    fn agents(&self) -> usize {
        1
    }
    fn refusal_summary(&self) -> Option<String> {
        None
    }
    fn timings(&self, _: u32) -> (Option<Instant>, Option<Instant>) {
        (None, None)
    }
    fn launching(&self) -> Vec<(u32, Launching)> {
        Vec::new()
    }
}

fn branch(log: &Log) -> Branch<FakeHost, FakeLinks> {
    Branch::new(
        2,
        "h2".into(),
        Some(FakeHost(log.clone())),
        FakeLinks(log.clone()),
        true,
        Instant::now(),
        None,
    )
}

/// A failure event from the parent goes on to the children as it came, then to this
/// host's clients; the teardown after it reaches the children after it, and this host's
/// ranks are signalled after their server told them.
#[test]
fn a_failure_event_goes_down_before_the_teardown() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let msg = Down::PmixFailure {
        status: -402,
        ranks: vec![3],
        exit_code: Some(137),
    };
    let frame = encode(&msg);
    assert_eq!(b.on_down(msg.clone(), frame, 0), None);
    assert!(b.teardown());
    assert_eq!(
        *log.borrow(),
        [
            format!("frame {msg:?}"),
            "notify -402 [3] Some(137)".to_string(),
            format!("broadcast {:?}", Down::Teardown),
            format!("signal {}", SIGTERM),
        ]
    );
}

/// The dead ranks go down as they came, then to this host (which sets the key before it
/// signals its ranks); from the root, encoded once for every child.
#[test]
fn dead_processes_go_down_then_to_this_host() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let msg = Down::DeadProcesses { ranks: vec![3, 1] };
    let frame = encode(&msg);
    assert_eq!(b.on_down(msg.clone(), frame, 0), None);
    b.dead_processes(vec![3, 1, 2], None);
    assert_eq!(
        *log.borrow(),
        [
            format!("frame {msg:?}"),
            "dead [3, 1]".to_string(),
            format!(
                "broadcast {:?}",
                Down::DeadProcesses {
                    ranks: vec![3, 1, 2]
                }
            ),
            "dead [3, 1, 2]".to_string(),
        ]
    );
}

/// What rank 0's agent says it wrote of rank 0's stdin goes up as it came, from any
/// depth: the front end's window of stdin in flight closes without it.
#[test]
fn stdin_taken_by_a_child_goes_up() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let ev = HubEvent::Up {
        id: 1,
        msg: Up::StdinTaken(65536),
    };
    assert_eq!(b.on_child(ev), Some(Out::Up(Up::StdinTaken(65536))));
}

/// The engine's events reach `on_engine`: an agent (init_once) reports the first
/// initialized rank only, a publish goes up as it came, and what is only for the
/// profile makes nothing.
#[test]
fn an_agent_reports_its_first_initialized_rank_only() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let init = |rank| NodeEvent::Engine(Output::Initialized { rank });
    assert_eq!(
        b.on_node(init(3), 0),
        Some(Out::Up(Up::Reports(vec![Report::Initialized { rank: 3 }])))
    );
    assert_eq!(b.on_node(init(4), 0), None);
    let delta: Delta = vec![("k".into(), "v".into())];
    assert_eq!(
        b.on_node(
            NodeEvent::Engine(Output::Publish {
                delta: delta.clone()
            }),
            0
        ),
        Some(Out::Up(Up::Publish(delta)))
    );
    assert_eq!(
        b.on_node(NodeEvent::Engine(Output::Finalized { rank: 3 }), 0),
        None
    );
}

/// Showing progress, an agent also reports every later rank's PMI init, and its host's
/// entry into a fence before the contribution it may complete; its children's launches
/// and connections go up as they came. Without, none of these.
#[test]
fn showing_progress_an_agent_reports_each_init_and_fence_entry() {
    let log: Log = Rc::default();
    let init = |rank| NodeEvent::Engine(Output::Initialized { rank });
    let ready = |epoch| {
        NodeEvent::Engine(Output::FenceReady {
            epoch,
            delta: Packed::default(),
        })
    };
    let progress = |s| Some(Out::Up(Up::Reports(vec![Report::Progress(s)])));
    let mut quiet = branch(&log);
    quiet.on_node(init(3), 0);
    assert_eq!(quiet.on_node(init(4), 0), None);
    assert_eq!(quiet.on_node(ready(0), 0), None, "waits for its child");
    assert_eq!(quiet.take_deferred(), None);

    let mut b = branch(&log);
    b.show_progress();
    b.on_node(init(3), 0);
    assert_eq!(b.on_node(init(4), 0), progress(Step::Initialized(4)));
    let entered = Step::FenceEntered { epoch: 0, ranks: 1 };
    assert_eq!(b.on_node(ready(0), 0), progress(entered.clone()));
    assert_eq!(b.take_deferred(), None, "the fence waits for its child");
    let fence = |epoch| Up::Fence {
        epoch,
        delta: Packed::default(),
    };
    let child = |epoch| HubEvent::Up {
        id: 1,
        msg: fence(epoch),
    };
    assert_eq!(b.on_child(child(0)), Some(Out::Up(fence(0))));
    // The child first this time: this host's entry completes the fence.
    assert_eq!(b.on_child(child(1)), None);
    let entered = Step::FenceEntered { epoch: 1, ranks: 1 };
    assert_eq!(b.on_node(ready(1), 0), progress(entered));
    assert_eq!(
        b.take_deferred(),
        Some(Out::Up(fence(1))),
        "the contribution after it"
    );
    assert_eq!(b.take_deferred(), None);
    let launched = Step::Launched(vec![5, 6]);
    assert_eq!(
        b.on_child(HubEvent::Progress(launched.clone())),
        progress(launched)
    );
}

/// At the root, each merged delta is checked once for every agent: it goes down (and to
/// this host) with whether its keys are the last fence's, in order; one that does not
/// unpack goes nowhere and fails the job with the reason; the next good one is compared
/// with the last good one.
#[test]
fn the_root_checks_each_merged_delta_and_says_when_its_keys_repeat() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let d = |pairs: &[(&str, &str)]| Packed::from_pairs(pairs.iter().copied());
    let fences = [
        d(&[("a", "1"), ("b", "2")]),
        d(&[("a", "3"), ("b", "4")]),
        d(&[("b", "5"), ("a", "6")]),
        Packed::default(),
        d(&[("b", "7"), ("a", "8")]),
    ];
    for (epoch, delta) in fences.iter().enumerate() {
        assert_eq!(b.fence_done(epoch as u64, delta.clone(), 0), None);
    }
    let went: Vec<(bool, bool)> = fences
        .iter()
        .enumerate()
        .map(|(epoch, delta)| {
            let down = |same_keys| Down::FenceDone {
                epoch: epoch as u64,
                delta: delta.clone(),
                same_keys,
            };
            let log = log.borrow();
            let at = |line: String| log.iter().position(|l| *l == line);
            let same = at(format!("broadcast {:?}", down(true)));
            let host = at(format!("fence {epoch} {delta:?} true"));
            let other = at(format!("broadcast {:?}", down(false)));
            assert_eq!(log.len(), 2 * fences.len(), "{log:?}");
            (same.is_some() && host.is_some(), other.is_some())
        })
        .collect();
    assert_eq!(
        went,
        [
            (false, true),
            (true, false),
            (false, true),
            (false, true),
            (false, true)
        ]
    );
    log.borrow_mut().clear();
    let cut = {
        let mut v = bincode::serialize(&d(&[("a", "9"), ("b", "10")])).unwrap();
        v.truncate(v.len() - 1);
        let len = v.len() as u64 - 8;
        v[..8].copy_from_slice(&len.to_le_bytes());
        bincode::deserialize::<Packed>(&v).unwrap()
    };
    let out = b.fence_done(5, cut, 0);
    assert!(
        matches!(&out, Some(Out::Up(Up::Reports(r))) if matches!(&r[..],
            [Report::Failed { reason }] if reason.starts_with("fence 5: malformed key-value data"))),
        "{out:?}"
    );
    assert!(log.borrow().is_empty(), "{:?}", log.borrow());
    b.fence_done(6, d(&[("b", "11"), ("a", "12")]), 0);
    assert!(
        log.borrow()[0].ends_with("same_keys: true }"),
        "{:?}",
        log.borrow()
    );
}

/// A lost child's report names the ranks of its subtree, for the root to tell the others.
#[test]
fn a_lost_child_is_reported_with_its_ranks() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let out = b.on_child(HubEvent::Lost {
        id: 1,
        reason: "agent on h1 died".into(),
    });
    assert_eq!(
        out,
        Some(Out::Up(Up::Reports(vec![Report::Lost {
            host: "h1".into(),
            reason: "agent on h1 died".into(),
            ranks: vec![1, 2],
        }])))
    );
}

/// A PMIx fence this host entered while its child's host was lost: it can never complete
/// and the job is told so; under `-with-ft` (tolerate_failures) it completes without the
/// child, after the loss's report, and the next fences do not wait for it.
#[test]
fn a_lost_child_stops_a_pmix_fence_unless_failures_are_tolerated() {
    let lost = || HubEvent::Lost {
        id: 1,
        reason: "agent on h1 died".into(),
    };
    let log: Log = Rc::default();
    let mut b = branch(&log);
    let fence = |epoch| NodeEvent::PmixFence {
        epoch,
        data: Bytes::from_static(b"a"),
    };
    assert_eq!(b.on_node(fence(0), 0), None);
    let Some(Out::Up(Up::Reports(r))) = b.on_child(lost()) else {
        panic!("no report")
    };
    assert!(
        matches!(&r[1], Report::Failed { reason } if reason.contains("can never complete")),
        "{r:?}"
    );
    assert_eq!(b.take_deferred(), None);

    let mut b = branch(&log);
    b.tolerate_failures();
    assert_eq!(b.on_node(fence(0), 0), None);
    let Some(Out::Up(Up::Reports(r))) = b.on_child(lost()) else {
        panic!("no report")
    };
    assert_eq!(r.len(), 1, "only the loss: {r:?}");
    assert_eq!(
        b.take_deferred(),
        Some(Out::Up(Up::PmixFence {
            epoch: 0,
            data: Bytes::from_static(b"a")
        }))
    );
    assert_eq!(b.take_deferred(), None);
    assert_eq!(
        b.on_node(fence(1), 0),
        Some(Out::Up(Up::PmixFence {
            epoch: 1,
            data: Bytes::from_static(b"a")
        })),
        "the next fence is this host's alone"
    );
}

/// Under `-with-ft`, a PMIx fence the child entered while this host's only rank was
/// killed completes with the child's part when the rank's end comes in.
#[test]
fn a_host_whose_ranks_all_ended_is_not_waited_for_when_failures_are_tolerated() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    b.tolerate_failures();
    let child = HubEvent::Up {
        id: 1,
        msg: Up::PmixFence {
            epoch: 0,
            data: Bytes::from_static(b"c"),
        },
    };
    assert_eq!(b.on_child(child), None);
    let end = RankEnd {
        rank: 0,
        pid: 7,
        code: None,
        signal: Some(SIGKILL),
        initialized: true,
        finalized: false,
        ran_alone: false,
    };
    let Some(Out::Up(Up::Reports(r))) = b.on_node(NodeEvent::Exited(end), 0) else {
        panic!("no report")
    };
    // Only the rank's end, its record as the node made it.
    let exited = Report::Exited {
        host: "h2".into(),
        in_teardown: false,
        end,
    };
    assert_eq!(r, [exited]);
    assert_eq!(
        b.take_deferred(),
        Some(Out::Up(Up::PmixFence {
            epoch: 0,
            data: Bytes::from_static(b"c")
        }))
    );
}

/// Input for rank 0 is the host's to write when rank 0 runs here, its end included; the
/// children get none of it.
#[test]
fn stdin_for_a_local_rank_0_is_written_here() {
    let log: Log = Rc::default();
    let mut b = branch(&log);
    b.stdin(Some(b"x".to_vec()));
    b.stdin(None);
    assert_eq!(
        *log.borrow(),
        ["stdin Some([120])", "stdin None"],
        "written in order, nothing sent down"
    );
}
