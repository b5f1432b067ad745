//! An agent tree in one process: H virtual agents under a root, each of them (and the root)
//! a real [`kauri::tree::branch::Branch`], the same tree node the front end and `kauri agent` drive.
//! Each agent's [`SimHost`] stands for R virtual ranks that put `keys` keys each per fence and
//! commits the merged delta into a real [`Kvs`]; each branch's [`SimLinks`] reaches its
//! children over loopback TCP with the real framing ([`tree::encode`], [`tree::decode_frame`])
//! in the real shape ([`tree::build`]). No processes and no PMI: it measures what the tree
//! itself costs, for host counts one machine cannot run as processes.
//!
//! A fence: every agent's ranks enter it at once, as its node would say it
//! (`NodeEvent::Engine(Output::FenceReady)` into [`Branch::on_node`]); a frame from a child
//! goes into [`Branch::on_child`] as `HubEvent::Up`, one from the parent into
//! [`Branch::on_down`] with the frame as it came; what a branch hands up (`Out::Up`) is
//! encoded and written to its parent's link. At the root a complete `Up::Fence` becomes
//! [`Branch::fence_done`], as in `frontend`. The fence ends when every agent's host has
//! committed. The root runs no ranks here (the front end of a job whose ranks all run on the
//! agents), so it gathers and broadcasts but commits nothing.
//!
//! **Links: loopback TCP, not in-memory channels.** Each link has a reader task and a writer
//! task with a queue, as `hub` has, so a fence's fan-out to many children is not serialised on
//! one writer. Channels of encoded frames would be simpler, but a parent's socket writes are
//! its biggest cost in a wide tree (a flat root writes the merged delta once per host); a
//! channel would hand the same `Bytes` to every child for free and the model below would lose
//! that cost. Over TCP every frame is encoded, written, read and decoded for real, and the
//! wire-up column (connecting every link) keeps its meaning.
//!
//! **Modelled latency.** Everything runs on one thread, so the real time of a fence is the
//! tree's total work. Beside it, each fence is replayed in virtual time, as if every agent had
//! a CPU of its own and the links were a network: every piece of an agent's work (a whole
//! call into its branch, with the gather's merge, the encodings and the commit in it; decoding
//! a frame; each socket write) is timed as it really runs here, in thread CPU time, and charged
//! to that agent's virtual CPU, which does one thing at a time (a piece starts when both the
//! CPU is free and its input has arrived). A frame leaves when it is queued (its virtual time
//! inside the call that queued it) and the writes that follow are charged; it arrives `hop_us`
//! plus its size at `gbps` after it was written. Reads from a socket are not charged. The
//! modelled latency is when the last agent has committed the merged delta. It is a model built
//! from measured costs, not a measurement on real hosts; it is pessimistic where this thread
//! ran an agent's work in another order than its virtual arrival order (a writer task runs
//! after the call that queued its frame, so a parent's writes are charged after its commit,
//! as they run in a single-threaded agent too).

use bytes::Bytes;
use kauri::host::node::NodeEvent;
use kauri::plan::{HostPlan, Subtree};
use kauri::proto::kvs::{Delta, Kvs, Packed};
use kauri::proto::pmi::Output;
use kauri::proto::service::ServiceReply;
use kauri::tree::branch::{Branch, Host, Links, Out};
use kauri::tree::hub::HubEvent;
use kauri::tree::{self, Down, Up};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The `now` the simulated branches are given: they record no startup profile, which is all
/// a branch reads the time for.
const NO_PROFILE: u64 = 0;

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
    /// PMIx fences instead of PMI ones: each agent's part is an opaque blob of the size its
    /// PMI contribution would have (what a host's PMIx server hands kauri's fence upcall),
    /// concatenated on the way up and handed whole to every host's server on the way down.
    pub pmix: bool,
    /// Model each fence's latency ([`SimTree::modelled`]): every piece of work is timed in
    /// thread CPU time, two system calls each. Off, nothing is timed and the modelled latency
    /// reads 0: what `fence` then measures is the tree's work alone, as the floor's
    /// (`common::raw`) is.
    pub model: bool,
}

/// A virtual CPU. `free`: the virtual time (µs from the fence's start) at which its work so
/// far ends; `run`: the call running on it now (its virtual start, this thread's CPU time then);
/// `model`: whether work is timed at all ([`Shape::model`]).
#[derive(Default)]
struct CpuState {
    free: Cell<f64>,
    run: Cell<Option<(f64, Duration)>>,
    model: bool,
}

/// One agent's virtual CPU, shared by its node task, its links and its host.
#[derive(Clone, Default)]
struct Cpu(Rc<CpuState>);

impl Cpu {
    /// Charges `cost` of work that can start at `ready`; returns when it ends.
    fn work(&self, ready: f64, cost: Duration) -> f64 {
        let end = self.0.free.get().max(ready) + cost.as_secs_f64() * 1e6;
        self.0.free.set(end);
        end
    }

    /// A call whose input is ready at `ready` begins; everything until [`Cpu::end`] is charged.
    fn begin(&self, ready: f64) {
        let start = self.0.free.get().max(ready);
        self.0.run.set(Some((start, self.clock())));
    }

    /// The virtual time now: inside a call, its start plus the CPU time spent in it so far.
    fn now(&self) -> f64 {
        match self.0.run.get() {
            Some((start, t0)) => start + self.clock().saturating_sub(t0).as_secs_f64() * 1e6,
            None => self.0.free.get(),
        }
    }

    /// The call ends; the CPU is busy until now.
    fn end(&self) {
        let t = self.now();
        self.0.free.set(t);
        self.0.run.set(None);
    }

    /// A new fence starts at virtual time 0.
    fn reset(&self) {
        self.0.free.set(0.0);
        self.0.run.set(None);
    }

    /// This thread's CPU time when work is modelled; zero (and no system call) otherwise.
    fn clock(&self) -> Duration {
        match self.0.model {
            true => cpu_now(),
            false => Duration::ZERO,
        }
    }

    /// The cost of `f` in this thread's CPU time (zero when not modelling), and its result.
    fn timed<T>(&self, f: impl FnOnce() -> T) -> (T, Duration) {
        let t = self.clock();
        let r = f();
        (r, self.clock().saturating_sub(t))
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

/// A link's writer queue: encoded frames and the virtual time each was queued.
type Writer = mpsc::UnboundedSender<(Bytes, f64)>;

/// Starts a link's writer task: each frame written on `cpu`'s account (only the write calls,
/// not the waits for the socket to drain) and stamped with its virtual arrival.
fn writer(w: tokio::net::tcp::OwnedWriteHalf, cpu: Cpu, stamps: Stamps, net: Net) -> Writer {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Bytes, f64)>();
    tokio::task::spawn_local(async move {
        while let Some((f, ready)) = rx.recv().await {
            let (mut off, mut cost, mut failed) = (0, Duration::ZERO, false);
            while off < f.len() && !failed {
                if w.writable().await.is_err() {
                    failed = true;
                    break;
                }
                let (r, c) = cpu.timed(|| w.try_write(&f[off..]));
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

/// Reads one frame with the link's reader, as a real link does ([`tree::FrameReader`]: the
/// reading is not charged), and decodes it with kauri's own decoder, [`tree::decode_frame`],
/// on `cpu`'s account; returns the message, the frame as it came (for passing on) and the
/// virtual time it is ready.
async fn read_frame<M: for<'de> serde::Deserialize<'de>>(
    r: &mut tokio::net::tcp::OwnedReadHalf,
    frames: &mut tree::FrameReader,
    cpu: &Cpu,
    stamps: &Stamps,
) -> Option<(M, Bytes, f64)> {
    let buf = frames.next_raw(r, tree::FRAME_MAX).await.ok()??;
    let (m, cost) = cpu.timed(|| tree::decode_frame::<M>(buf).ok());
    let (m, frame) = m?;
    let arrived = stamps.borrow_mut().pop_front().unwrap_or(0.0);
    Some((m, frame, cpu.work(arrived, cost)))
}

/// An agent's R virtual ranks, as its branch sees them. Only a fence's end does work here
/// (the commit into a real store, as `Node::fence_done` commits into its engine's); the sim
/// runs no processes and no PMIx server, so what would signal, serve or answer a rank has
/// nobody to act on and does nothing.
struct SimHost {
    id: u32,
    /// Its ranks are `first..first + ranks`.
    first: usize,
    ranks: usize,
    /// Commit the merged delta (`Shape::commit`).
    commit: bool,
    kvs: RefCell<Kvs>,
    cpu: Cpu,
    /// Told (agent, virtual time) when this host has committed a fence.
    done: mpsc::UnboundedSender<(u32, f64)>,
}

impl Host for SimHost {
    fn ranks(&self) -> usize {
        self.ranks
    }
    /// Virtual ranks never end.
    fn running(&self) -> usize {
        self.ranks
    }
    fn has_rank(&self, rank: usize) -> bool {
        (self.first..self.first + self.ranks).contains(&rank)
    }
    fn fence_done(&self, _epoch: u64, delta: &Packed, same_keys: bool) {
        if self.commit {
            self.kvs.borrow_mut().commit_checked(delta, same_keys);
        }
        let _ = self.done.send((self.id, self.cpu.now()));
    }
    /// A PMIx fence is complete: every host's blob, handed to the (absent) PMIx server.
    fn pmix_fence_done(&self, _epoch: u64, _data: Bytes) {
        let _ = self.done.send((self.id, self.cpu.now()));
    }
    fn pmix_collective_done(&self, _sig: &str, _status: i32, _data: Vec<u8>, _id: Option<u64>) {}
    /// No PMIx server to tell.
    fn pmix_failure(&self, _status: i32, _ranks: &[usize], _exit_code: Option<i32>) {}
    /// Virtual ranks never die.
    fn dead_processes(&self, _ranks: &[usize]) {}
    /// No PMIx server to serve from.
    fn pmix_dmodex_serve(&self, _rank: usize, _to: u32, _req: u64) {}
    /// No PMIx client waits for it.
    fn pmix_dmodex_reply(&self, _req: u64, _status: i32, _data: Vec<u8>) {}
    fn publish(&self, delta: Delta) {
        self.kvs.borrow_mut().commit(delta);
    }
    /// No rank asks the root anything.
    fn service_reply(&self, _req: u64, _reply: ServiceReply) {}
    /// No process to signal.
    fn signal(&self, _sig: i32) {}
    fn signal_ranks(&self, _sig: i32, _ranks: &[usize]) {}
    /// Virtual ranks have no PMI state to report.
    fn status(&self) -> (Vec<kauri::tree::RankStatus>, Option<u64>) {
        (Vec::new(), None)
    }
    type Stdin = ();
    /// No rank 0 process, no stdin.
    fn take_stdin(&mut self) -> Option<()> {
        None
    }
    fn write_stdin(&mut self, _data: Option<Vec<u8>>) {}
    /// No output to forward, nothing left behind.
    async fn drain(self) {}
}

/// A branch's links to its children: each child's writer queue (frames encoded once, as `hub`
/// encodes them, the encoding charged to this agent's CPU by the call it runs in) and which
/// child's subtree holds each agent below, for routing.
struct SimLinks {
    cpu: Cpu,
    ids: Vec<u32>,
    /// Writers of the children that are not done.
    links: RefCell<HashMap<u32, Writer>>,
    /// The children, biggest subtree first: the order `Children` queues a broadcast in.
    order: Vec<u32>,
    /// Agent below → the direct child whose subtree holds it.
    below: HashMap<u32, u32>,
    /// Virtual ranks per agent (agent `a` runs ranks `(a - 1) * ranks..a * ranks`).
    ranks: usize,
}

impl SimLinks {
    /// Queues `f` for every child that is not done. The frames are stamped once: reading
    /// this thread's CPU clock is a system call, and once per child it would charge a wide
    /// parent for the measurement (the writes cannot start before the call ends anyway).
    fn queue_all(&self, f: &Bytes) {
        let t = self.cpu.now();
        let links = self.links.borrow();
        for w in self.order.iter().filter_map(|id| links.get(id)) {
            let _ = w.send((f.clone(), t));
        }
    }
}

impl Links for SimLinks {
    fn ids(&self) -> Vec<u32> {
        self.ids.clone()
    }
    fn send(&self, id: u32, msg: Down) {
        if let (Some(w), Ok(f)) = (self.links.borrow().get(&id), tree::encode(&msg)) {
            let _ = w.send((f, self.cpu.now()));
        }
    }
    fn broadcast(&self, msg: &Down) {
        if self.links.borrow().is_empty() {
            return;
        }
        if let Ok(f) = tree::encode(msg) {
            self.queue_all(&f);
        }
    }
    fn broadcast_frame(&self, frame: &Bytes) {
        if !self.links.borrow().is_empty() {
            self.queue_all(frame);
        }
    }
    fn route(&self, to: u32, msg: Down) -> bool {
        match self.below.get(&to) {
            Some(&c) => {
                self.send(c, msg);
                true
            }
            None => false,
        }
    }
    fn child_with_rank(&self, rank: usize) -> Option<u32> {
        let agent = (rank / self.ranks.max(1) + 1) as u32;
        self.below.get(&agent).copied()
    }
    fn ranks_below(&self, id: u32) -> Vec<usize> {
        let n = self.ranks.max(1);
        let mut agents: Vec<u32> = self
            .below
            .iter()
            .filter(|&(_, &c)| c == id)
            .map(|(&a, _)| a)
            .collect();
        agents.sort_unstable();
        agents
            .into_iter()
            .flat_map(|a| (a as usize - 1) * n..a as usize * n)
            .collect()
    }
    fn mark_done(&self, id: u32) {
        self.links.borrow_mut().remove(&id);
    }
    fn all_done(&self) -> bool {
        self.links.borrow().is_empty()
    }
    /// Every link exists from the start; nobody connects late.
    fn close(&self) {}
    fn host(&self, id: u32) -> String {
        format!("v{id}")
    }
    fn unfinished(&self) -> Vec<String> {
        self.links
            .borrow()
            .keys()
            .map(|&id| self.host(id))
            .collect()
    }
    fn agents(&self) -> usize {
        self.below.len()
    }
    /// Nobody connects without the key here.
    fn refusal_summary(&self) -> Option<String> {
        None
    }
    /// No launches to time.
    fn timings(&self, _id: u32) -> (Option<Instant>, Option<Instant>) {
        (None, None)
    }
    /// Every simulated child is up from the start.
    fn launching(&self) -> Vec<(u32, tree::Launching)> {
        Vec::new()
    }
}

/// A running simulated tree.
pub struct SimTree {
    /// Each agent's "your ranks entered fence `epoch`".
    go: Vec<mpsc::UnboundedSender<u64>>,
    done: mpsc::UnboundedReceiver<(u32, f64)>,
    hosts: usize,
    epoch: u64,
    cpus: Vec<Cpu>,
    /// How long building the tree (connecting every link) took.
    pub wireup: Duration,
    /// The modelled latency of the last fence (see the module's doc).
    pub modelled: Duration,
}

/// Parent of every agent, by walking the shape `tree::build` makes.
pub fn edges(hosts: usize, width: usize) -> Vec<(u32, u32)> {
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

/// For every node, which direct child's subtree holds each agent below it.
fn routes(n: usize, edges: &[(u32, u32)]) -> Vec<HashMap<u32, u32>> {
    let mut parent = vec![None; n];
    for &(c, p) in edges {
        parent[c as usize] = Some(p);
    }
    let mut below = vec![HashMap::new(); n];
    for &(agent, _) in edges {
        let mut c = agent;
        while let Some(p) = parent[c as usize] {
            below[p as usize].insert(agent, c);
            c = p;
        }
    }
    below
}

/// One agent's contribution: `ranks` ranks putting `keys` keys of `vsize` bytes.
pub fn contribution(id: u32, s: &Shape) -> Packed {
    let v = "x".repeat(s.vsize);
    let mut d = Packed::default();
    for r in 0..s.ranks {
        for k in 0..s.keys {
            d.push(&format!("h{id}r{r}k{k}"), &v);
        }
    }
    d
}

/// A child's decoded frames as its parent reads them: (child, message, ready time).
type FromKids = mpsc::UnboundedReceiver<(u32, Up, f64)>;
/// The parent's decoded frames as a child reads them: (message, frame as it came, ready time).
type FromParent = mpsc::UnboundedReceiver<(Down, Bytes, f64)>;

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
    let cpus: Vec<Cpu> = (0..n)
        .map(|_| {
            Cpu(Rc::new(CpuState {
                model: s.model,
                ..CpuState::default()
            }))
        })
        .collect();
    // Per node: its parent link (writer; reader side into a channel) and its child links.
    let mut up_tx: Vec<Option<Writer>> = (0..n).map(|_| None).collect();
    let mut down_rx: Vec<Option<FromParent>> = (0..n).map(|_| None).collect();
    let mut kids: Vec<Vec<(u32, Writer)>> = (0..n).map(|_| Vec::new()).collect();
    let mut kid_rx: Vec<FromKids> = Vec::new();
    let mut kid_tx = Vec::new();
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
            let mut frames = tree::FrameReader::default();
            while let Some(m) = read_frame::<Down>(&mut crd, &mut frames, &ccpu, &ds).await {
                if dtx.send(m).is_err() {
                    break;
                }
            }
        });
        // Parent side: writes Down, reads Up.
        kids[parent as usize].push((child, writer(pwr, pcpu.clone(), down_stamps, net)));
        let to = kid_tx[parent as usize].clone();
        tokio::task::spawn_local(async move {
            // a parent's links read each frame into memory of its own, as `hub` reads them
            // (`tree::recv`): a wide parent keeps no buffers per child
            while let Some((m, _, t)) = read_frame::<Up>(
                &mut prd,
                &mut tree::FrameReader::default(),
                &pcpu,
                &up_stamps,
            )
            .await
            {
                if to.send((child, m, t)).is_err() {
                    break;
                }
            }
        });
    }
    drop(kid_tx);
    let mut below = routes(n, &edges);
    let (done_tx, done) = mpsc::unbounded_channel();
    let mut go = Vec::new();
    for (id, kid_rx) in kid_rx.into_iter().enumerate().rev() {
        let cpu = cpus[id].clone();
        let ids: Vec<u32> = kids[id].iter().map(|k| k.0).collect();
        let below = std::mem::take(&mut below[id]);
        // Biggest subtree first, as `Children` orders a broadcast.
        let mut order: Vec<(usize, u32)> = ids
            .iter()
            .map(|&c| (below.values().filter(|&&v| v == c).count(), c))
            .collect();
        order.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
        let links = SimLinks {
            cpu: cpu.clone(),
            ids,
            links: RefCell::new(std::mem::take(&mut kids[id]).into_iter().collect()),
            order: order.into_iter().map(|(_, c)| c).collect(),
            below,
            ranks: s.ranks,
        };
        let id = id as u32;
        // The root runs no ranks; every agent runs R.
        let (host, local, grx) = if id == 0 {
            (None, None, None)
        } else {
            let host = SimHost {
                id,
                first: (id as usize - 1) * s.ranks,
                ranks: s.ranks,
                commit: s.commit,
                kvs: RefCell::new(Kvs::default()),
                cpu: cpu.clone(),
                done: done_tx.clone(),
            };
            let (gtx, grx) = mpsc::unbounded_channel();
            go.push(gtx);
            (Some(host), Some(contribution(id, &s)), Some(grx))
        };
        let branch = Branch::new(
            id,
            format!("v{id}"),
            host,
            links,
            true,
            Instant::now(),
            None,
        );
        let up = up_tx[id as usize].take();
        // A PMIx host's blob: as many bytes as its ranks' keys and values.
        let blob = s
            .pmix
            .then(|| vec![b'x'; s.ranks * s.keys * (s.vsize + 16)]);
        let node = SimNode {
            branch,
            up,
            cpu,
            local,
            blob,
        };
        tokio::task::spawn_local(node.run(kid_rx, down_rx[id as usize].take(), grx));
    }
    Ok(SimTree {
        go,
        done,
        hosts: s.hosts,
        epoch: 0,
        cpus,
        wireup: t0.elapsed(),
        modelled: Duration::ZERO,
    })
}

impl SimTree {
    /// Runs one fence: every agent's ranks enter it at once; returns when every agent has
    /// the merged delta (and committed it). Sets [`SimTree::modelled`].
    pub async fn fence(&mut self) -> Duration {
        for c in &self.cpus {
            c.reset();
        }
        let t = Instant::now();
        for g in &self.go {
            let _ = g.send(self.epoch);
        }
        self.epoch += 1;
        let mut last = 0.0f64;
        for _ in 0..self.hosts {
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

/// The next item of `rx`; never, when there is no `rx`.
async fn recv<T>(rx: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// One simulated node (the root or an agent): its branch, its uplink (none at the root), its
/// virtual CPU and, for an agent, its ranks' contribution to every fence.
struct SimNode {
    branch: Branch<SimHost, SimLinks>,
    up: Option<Writer>,
    cpu: Cpu,
    local: Option<Packed>,
    /// For PMIx fences ([`Shape::pmix`]): this host's blob.
    blob: Option<Vec<u8>>,
}

impl SimNode {
    /// Feeds the branch one event at a time, as `Agent` and `Root` do.
    async fn run(
        mut self,
        mut kids: FromKids,
        mut down: Option<FromParent>,
        mut go: Option<mpsc::UnboundedReceiver<u64>>,
    ) {
        let has_kids = !self.branch.kids().ids.is_empty();
        loop {
            tokio::select! {
                g = recv(&mut go) => match g {
                    Some(epoch) => {
                        let event = match &self.blob {
                            Some(data) => NodeEvent::PmixFence {
                                // a copy, as the node copies the server's blob
                                epoch,
                                data: data.clone().into(),
                            },
                            None => {
                                let delta = self.local.clone().unwrap_or_default();
                                NodeEvent::Engine(Output::FenceReady { epoch, delta })
                            }
                        };
                        self.cpu.begin(0.0);
                        let out = self.branch.on_node(event, NO_PROFILE);
                        self.on_out(out);
                        self.cpu.end();
                    }
                    None => return,
                },
                m = kids.recv(), if has_kids => match m {
                    Some((id, msg, ready)) => {
                        self.cpu.begin(ready);
                        let out = self.branch.on_child(HubEvent::Up { id, msg });
                        self.on_out(out);
                        self.cpu.end();
                    }
                    None => return,
                },
                d = recv(&mut down) => match d {
                    Some((msg, frame, ready)) => {
                        self.cpu.begin(ready);
                        let out = self.branch.on_down(msg, frame, NO_PROFILE);
                        self.on_out(out);
                        self.cpu.end();
                    }
                    None => return,
                },
            }
        }
    }

    /// What the branch handed up: an agent encodes it for its parent (as its uplink does);
    /// at the root a complete fence is released, as `Root::on_up` does.
    fn on_out(&mut self, out: Option<Out>) {
        let Some(Out::Up(msg)) = out else { return };
        match (&self.up, msg) {
            (Some(up), msg) => {
                if let Ok(f) = tree::encode(&msg) {
                    let _ = up.send((f, self.cpu.now()));
                }
            }
            (None, Up::Fence { epoch, delta }) => {
                let failed = self.branch.fence_done(epoch, delta, NO_PROFILE);
                assert!(failed.is_none(), "the simulated delta unpacks: {failed:?}");
            }
            (None, Up::PmixFence { epoch, data }) => self.branch.pmix_fence_done(epoch, data, None),
            (None, _) => {}
        }
    }
}
