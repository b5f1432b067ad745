//! An agent tree in one process: H virtual agents under a root, linked over loopback TCP with
//! the real link framing (`tree::encode`, kauri's frame format), the real shape
//! (`tree::build`), the real fence gather (`hub::Gather`) and the real store (`kvs::Kvs`), each
//! agent contributing the puts of R virtual ranks to every fence. No processes and no PMI: it
//! measures what the tree itself costs, for host counts one machine cannot run as processes.
//!
//! Each link has a reader task and a writer task with a queue, as `hub` has, so a fence's
//! fan-out to many children is not serialised on one writer.
//!
//! **Modelled latency.** Everything runs on one thread, so the real time of a fence is the
//! tree's total work. Beside it, each fence is replayed in virtual time, as if every agent had
//! a CPU of its own and the links were a network: every piece of an agent's work (decoding a
//! frame, merging in the gather, encoding, writing to a socket, committing to the store) is
//! timed as it really runs here (in thread CPU time) and charged to that agent's virtual CPU, which does one thing
//! at a time (a piece starts when both the CPU is free and its input has arrived); a frame
//! arrives `hop_us` plus its size at `gbps` after it was written. The modelled latency is when
//! the last agent has committed the merged delta. It is a model built from measured costs,
//! not a measurement on real hosts; it is pessimistic where this thread ran an agent's work
//! in another order than its virtual arrival order.

use kauri::hub::Gather;
use kauri::kvs::{Kvs, Packed};
use kauri::plan::{HostPlan, Subtree};
use kauri::tree::{self, Down, Up};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The shape of a simulated job.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Agents (hosts), not counting the root.
    pub hosts: usize,
    /// Tree width (0: flat).
    pub width: usize,
    /// Virtual ranks per agent.
    pub ranks: usize,
    /// Keys each rank puts per fence.
    pub keys: usize,
    /// Bytes per value.
    pub vsize: usize,
    /// Whether every agent commits the merged delta into its store (as a real agent does).
    pub commit: bool,
    /// Modelled network: one-way latency of a link, µs.
    pub hop_us: f64,
    /// Modelled network: link bandwidth, Gbit/s.
    pub gbps: f64,
}

/// A virtual CPU: the virtual time (µs from the fence's start) at which its work so far ends.
#[derive(Clone, Default)]
struct Cpu(Rc<Cell<f64>>);

impl Cpu {
    /// Charges `cost` of work that can start at `ready`; returns when it ends.
    fn work(&self, ready: f64, cost: Duration) -> f64 {
        let end = self.0.get().max(ready) + cost.as_secs_f64() * 1e6;
        self.0.set(end);
        end
    }
}

/// This thread's CPU time: what a piece of work costs, without the time the thread spent
/// descheduled (the machine is shared; a wall clock would charge a preemption to the piece).
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The cost of `f` in this thread's CPU time, and its result.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = cpu_now();
    let r = f();
    (r, cpu_now().saturating_sub(t))
}

/// The virtual arrival times of the frames in flight on one link direction, in order.
type Stamps = Rc<RefCell<VecDeque<f64>>>;

/// The modelled network.
#[derive(Clone, Copy)]
struct Net {
    hop_us: f64,
    bytes_per_us: f64,
}

impl Net {
    fn arrival(&self, sent: f64, bytes: usize) -> f64 {
        sent + self.hop_us + bytes as f64 / self.bytes_per_us
    }
}

/// A running simulated tree.
pub struct SimTree {
    go: Vec<mpsc::UnboundedSender<()>>,
    done: mpsc::UnboundedReceiver<(u32, f64)>,
    nodes: usize,
    cpus: Vec<Cpu>,
    /// How long building the tree (connecting every link) took.
    pub wireup: Duration,
    /// The modelled latency of the last fence (see the module's doc).
    pub modelled: Duration,
}

/// Parent of every agent, by walking the shape `tree::build` makes.
fn edges(hosts: usize, width: usize) -> Vec<(u32, u32)> {
    let plans = (0..hosts)
        .map(|i| HostPlan {
            host: format!("v{i}"),
            node: i,
            index: i,
            ranks: Vec::new(),
        })
        .collect();
    fn walk(parent: u32, t: &Subtree, out: &mut Vec<(u32, u32)>) {
        out.push((t.id, parent));
        for c in &t.children {
            walk(t.id, c, out);
        }
    }
    let mut out = Vec::new();
    for t in tree::build(plans, width) {
        walk(0, &t, &mut out);
    }
    out
}

/// One agent's contribution: `ranks` ranks putting `keys` keys of `vsize` bytes.
fn contribution(id: u32, s: &Shape) -> Packed {
    let v = "x".repeat(s.vsize);
    let mut d = Packed::default();
    for r in 0..s.ranks {
        for k in 0..s.keys {
            d.push(&format!("h{id}r{r}k{k}"), &v);
        }
    }
    d
}

/// A child link as its parent holds it: the writer of encoded frames (with their virtual
/// ready time), the child's id.
type Link = (mpsc::UnboundedSender<(bytes::Bytes, f64)>, u32);

/// Starts a link's writer task: frames encoded once (`tree::encode`), as `hub` sends them,
/// each written on `cpu`'s account and stamped with its virtual arrival.
fn writer(
    w: tokio::net::tcp::OwnedWriteHalf,
    cpu: Cpu,
    stamps: Stamps,
    net: Net,
) -> mpsc::UnboundedSender<(bytes::Bytes, f64)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(bytes::Bytes, f64)>();
    tokio::task::spawn_local(async move {
        while let Some((f, ready)) = rx.recv().await {
            // Only the write calls are charged, not the waits for the socket to drain.
            let (mut off, mut cost, mut failed) = (0, Duration::ZERO, false);
            while off < f.len() && !failed {
                if w.writable().await.is_err() {
                    failed = true;
                    break;
                }
                let (r, c) = timed(|| w.try_write(&f[off..]));
                cost += c;
                match r {
                    Ok(n) => off += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => failed = true,
                }
            }
            let sent = cpu.work(ready, cost);
            stamps.borrow_mut().push_back(net.arrival(sent, f.len()));
            if failed {
                break;
            }
        }
    });
    tx
}

/// Reads one frame as `tree::recv_frame` does, decoding on `cpu`'s account; returns the
/// message, the frame as it came (for passing on) and the virtual time it is ready.
async fn read_frame<M: for<'de> serde::Deserialize<'de>>(
    r: &mut tokio::net::tcp::OwnedReadHalf,
    cpu: &Cpu,
    stamps: &Stamps,
) -> Option<(M, bytes::Bytes, f64)> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let mut frame = vec![0u8; 4 + u32::from_be_bytes(len) as usize];
    frame[..4].copy_from_slice(&len);
    r.read_exact(&mut frame[4..]).await.ok()?;
    let (m, cost) = timed(|| bincode::deserialize::<M>(&frame[4..]));
    let m = m.ok()?;
    let arrived = stamps.borrow_mut().pop_front().unwrap_or(0.0);
    Some((m, bytes::Bytes::from(frame), cpu.work(arrived, cost)))
}

/// Encodes `m` on `cpu`'s account, ready at `ready`.
fn encode_on<M: serde::Serialize>(cpu: &Cpu, ready: f64, m: &M) -> Option<(bytes::Bytes, f64)> {
    let (f, cost) = timed(|| tree::encode(m));
    Some((f.ok()?, cpu.work(ready, cost)))
}

/// Builds the tree and starts every node; call from inside a `LocalSet`.
pub async fn start(s: Shape) -> io::Result<SimTree> {
    let t0 = Instant::now();
    let net = Net {
        hop_us: s.hop_us,
        bytes_per_us: s.gbps * 1e3 / 8.0,
    };
    let edges = edges(s.hosts, s.width);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let n = s.hosts + 1;
    let cpus: Vec<Cpu> = (0..n).map(|_| Cpu::default()).collect();
    // Per node: its parent link (writer; reader side into a channel) and its child links.
    type UpTx = mpsc::UnboundedSender<(bytes::Bytes, f64)>;
    let mut up_tx: Vec<Option<UpTx>> = (0..n).map(|_| None).collect();
    let mut down_rx: Vec<Option<mpsc::UnboundedReceiver<(Down, bytes::Bytes, f64)>>> =
        (0..n).map(|_| None).collect();
    let mut kids: Vec<Vec<Link>> = (0..n).map(|_| Vec::new()).collect();
    let mut kid_rx: Vec<mpsc::UnboundedReceiver<(u32, Up, f64)>> = Vec::new();
    let mut kid_tx: Vec<mpsc::UnboundedSender<(u32, Up, f64)>> = Vec::new();
    for _ in 0..n {
        let (tx, rx) = mpsc::unbounded_channel();
        kid_tx.push(tx);
        kid_rx.push(rx);
    }
    for &(child, parent) in &edges {
        let (c, a) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (c, (p, _)) = (c?, a?);
        c.set_nodelay(true)?;
        p.set_nodelay(true)?;
        let (mut crd, cwr) = c.into_split();
        let (mut prd, pwr) = p.into_split();
        let (up_stamps, down_stamps) = (Stamps::default(), Stamps::default());
        let (ccpu, pcpu) = (cpus[child as usize].clone(), cpus[parent as usize].clone());
        // Child side: writes Up, reads Down.
        up_tx[child as usize] = Some(writer(cwr, ccpu.clone(), up_stamps.clone(), net));
        let (dtx, drx) = mpsc::unbounded_channel();
        down_rx[child as usize] = Some(drx);
        let ds = down_stamps.clone();
        tokio::task::spawn_local(async move {
            while let Some(m) = read_frame::<Down>(&mut crd, &ccpu, &ds).await {
                if dtx.send(m).is_err() {
                    break;
                }
            }
        });
        // Parent side: writes Down, reads Up.
        kids[parent as usize].push((writer(pwr, pcpu.clone(), down_stamps, net), child));
        let to = kid_tx[parent as usize].clone();
        tokio::task::spawn_local(async move {
            while let Some((m, _, t)) = read_frame::<Up>(&mut prd, &pcpu, &up_stamps).await {
                if to.send((child, m, t)).is_err() {
                    break;
                }
            }
        });
    }
    drop(kid_tx);
    let (done_tx, done) = mpsc::unbounded_channel();
    let mut go = Vec::new();
    for (id, kid_rx) in kid_rx.into_iter().enumerate().rev() {
        let (gtx, grx) = mpsc::unbounded_channel();
        let local = (id != 0).then(|| contribution(id as u32, &s));
        if local.is_some() {
            go.push(gtx);
        }
        tokio::task::spawn_local(node(
            Node {
                id: id as u32,
                local,
                kids: std::mem::take(&mut kids[id]),
                up: up_tx[id].take(),
                cpu: cpus[id].clone(),
                commit: s.commit,
            },
            kid_rx,
            down_rx[id].take(),
            grx,
            done_tx.clone(),
        ));
    }
    Ok(SimTree {
        go,
        done,
        nodes: n,
        cpus,
        wireup: t0.elapsed(),
        modelled: Duration::ZERO,
    })
}

impl SimTree {
    /// Runs one fence: every agent's ranks enter it at once; returns when every node has
    /// the merged delta (and committed it). Sets [`SimTree::modelled`].
    pub async fn fence(&mut self) -> Duration {
        for c in &self.cpus {
            c.0.set(0.0);
        }
        let t = Instant::now();
        for g in &self.go {
            let _ = g.send(());
        }
        let mut last = 0.0f64;
        for _ in 0..self.nodes {
            match self.done.recv().await {
                Some((_, at)) => last = last.max(at),
                None => break,
            }
        }
        let real = t.elapsed();
        self.modelled = Duration::from_secs_f64(last / 1e6);
        real
    }
}

/// One simulated agent.
struct Node {
    id: u32,
    local: Option<Packed>,
    kids: Vec<Link>,
    up: Option<mpsc::UnboundedSender<(bytes::Bytes, f64)>>,
    cpu: Cpu,
    commit: bool,
}

async fn node(
    me: Node,
    mut kid_rx: mpsc::UnboundedReceiver<(u32, Up, f64)>,
    down: Option<mpsc::UnboundedReceiver<(Down, bytes::Bytes, f64)>>,
    mut go: mpsc::UnboundedReceiver<()>,
    done: mpsc::UnboundedSender<(u32, f64)>,
) {
    let Node {
        id,
        local,
        kids,
        up,
        cpu,
        commit,
    } = me;
    let mut gather: Gather = Gather::new(local.is_some(), kids.iter().map(|k| k.1).collect());
    let mut kvs = Kvs::default();
    let mut down = down;
    // As the agent does: the root encodes the result once for all its children; an inner
    // node passes on the frame it received (`frame`) as it came.
    let release =
        |epoch: u64, delta: Packed, frame: Option<bytes::Bytes>, ready: f64, kvs: &mut Kvs| {
            let mut at = ready;
            let msg = Down::FenceDone { epoch, delta };
            if !kids.is_empty() {
                let sent = match frame {
                    Some(f) => Some((f, ready)),
                    None => encode_on(&cpu, ready, &msg),
                };
                if let Some((f, t)) = sent {
                    at = t;
                    for (tx, _) in &kids {
                        let _ = tx.send((f.clone(), t));
                    }
                }
            }
            if let (true, Down::FenceDone { delta, .. }) = (commit, &msg) {
                let (r, cost) = timed(|| kvs.commit_packed(delta));
                r.expect("the simulated delta unpacks");
                at = cpu.work(at, cost);
            }
            let _ = done.send((id, at));
        };
    let mut epoch = 0u64;
    loop {
        let (merged, ready) = tokio::select! {
            g = go.recv(), if local.is_some() => match g {
                Some(()) => {
                    let (m, cost) = timed(|| gather.local(epoch, local.clone().unwrap_or_default()));
                    (m, cpu.work(0.0, cost))
                }
                None => return,
            },
            m = kid_rx.recv(), if !kids.is_empty() => match m {
                Some((c, Up::Fence { epoch: e, delta }, ready)) => {
                    let (m, cost) = timed(|| gather.child(c, e, delta));
                    (m, cpu.work(ready, cost))
                }
                Some(_) => (None, 0.0),
                None => return,
            },
            d = async { match down.as_mut() { Some(d) => d.recv().await, None => std::future::pending().await } } => match d {
                Some((Down::FenceDone { epoch: e, delta }, frame, ready)) => {
                    release(e, delta, Some(frame), ready, &mut kvs);
                    epoch = e + 1;
                    (None, 0.0)
                }
                Some(_) => (None, 0.0),
                None => return,
            },
        };
        if let Some((e, d)) = merged {
            match &up {
                Some(up) => {
                    if let Some((f, t)) = encode_on(&cpu, ready, &Up::Fence { epoch: e, delta: d })
                    {
                        let _ = up.send((f, t));
                    }
                }
                None => {
                    release(e, d, None, ready, &mut kvs);
                    epoch = e + 1;
                }
            }
        }
    }
}
