//! An agent tree in one process: H virtual agents under a root, linked over loopback TCP with
//! the real link framing (`tree::send`/`tree::recv`), the real shape (`tree::build`), the real
//! fence gather (`hub::Gather`) and the real store (`kvs::Kvs`), each agent contributing the
//! puts of R virtual ranks to every fence. No processes and no PMI: it measures what the tree
//! itself costs, for host counts one machine cannot run as processes.
//!
//! Each link has a reader task and a writer task with a queue, as `hub` has, so a fence's
//! fan-out to many children is not serialised on one writer.

use kauri::hub::Gather;
use kauri::kvs::{Delta, Kvs};
use kauri::tree::{self, Down, HostPlan, Subtree, Up};
use std::io;
use std::time::{Duration, Instant};
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
}

/// A running simulated tree.
pub struct SimTree {
    go: Vec<mpsc::UnboundedSender<()>>,
    done: mpsc::UnboundedReceiver<u32>,
    nodes: usize,
    /// How long building the tree (connecting every link) took.
    pub wireup: Duration,
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
fn contribution(id: u32, s: &Shape) -> Delta {
    let v = "x".repeat(s.vsize);
    let mut d = Vec::with_capacity(s.ranks * s.keys);
    for r in 0..s.ranks {
        for k in 0..s.keys {
            d.push((format!("h{id}r{r}k{k}"), v.clone()));
        }
    }
    d
}

/// A child link as its parent holds it: the writer of encoded frames, the child's id.
type Link = (mpsc::UnboundedSender<bytes::Bytes>, u32);

/// Starts a link's writer task.
fn writer<M: serde::Serialize + 'static>(
    mut w: tokio::net::tcp::OwnedWriteHalf,
) -> mpsc::UnboundedSender<M> {
    let (tx, mut rx) = mpsc::unbounded_channel::<M>();
    tokio::task::spawn_local(async move {
        while let Some(m) = rx.recv().await {
            if tree::send(&mut w, &m).await.is_err() {
                break;
            }
        }
    });
    tx
}

/// Starts a link's writer task for frames encoded once (`tree::encode`), as `hub` does.
fn raw_writer(mut w: tokio::net::tcp::OwnedWriteHalf) -> mpsc::UnboundedSender<bytes::Bytes> {
    use tokio::io::AsyncWriteExt;
    let (tx, mut rx) = mpsc::unbounded_channel::<bytes::Bytes>();
    tokio::task::spawn_local(async move {
        while let Some(f) = rx.recv().await {
            if w.write_all(&f).await.is_err() {
                break;
            }
        }
    });
    tx
}

/// Builds the tree and starts every node; call from inside a `LocalSet`.
pub async fn start(s: Shape) -> io::Result<SimTree> {
    let t0 = Instant::now();
    let edges = edges(s.hosts, s.width);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Per node: its parent link (reader side into a channel, writer) and its child links.
    let n = s.hosts + 1;
    let mut up_tx: Vec<Option<mpsc::UnboundedSender<Up>>> = (0..n).map(|_| None).collect();
    let mut down_rx: Vec<Option<mpsc::UnboundedReceiver<Down>>> = (0..n).map(|_| None).collect();
    let mut kids: Vec<Vec<Link>> = (0..n).map(|_| Vec::new()).collect();
    let mut kid_rx: Vec<mpsc::UnboundedReceiver<(u32, Up)>> = Vec::new();
    let mut kid_tx: Vec<mpsc::UnboundedSender<(u32, Up)>> = Vec::new();
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
        let (crd, cwr) = c.into_split();
        let (mut prd, pwr) = p.into_split();
        // Child side: writes Up, reads Down.
        up_tx[child as usize] = Some(writer::<Up>(cwr));
        let (dtx, drx) = mpsc::unbounded_channel();
        down_rx[child as usize] = Some(drx);
        let mut crd = crd;
        tokio::task::spawn_local(async move {
            while let Ok(Some(m)) = tree::recv::<_, Down>(&mut crd).await {
                if dtx.send(m).is_err() {
                    break;
                }
            }
        });
        // Parent side: writes Down, reads Up.
        kids[parent as usize].push((raw_writer(pwr), child));
        let to = kid_tx[parent as usize].clone();
        tokio::task::spawn_local(async move {
            while let Ok(Some(m)) = tree::recv::<_, Up>(&mut prd).await {
                if to.send((child, m)).is_err() {
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
            id as u32,
            local,
            std::mem::take(&mut kids[id]),
            kid_rx,
            up_tx[id].take(),
            down_rx[id].take(),
            grx,
            done_tx.clone(),
            s.commit,
        ));
    }
    Ok(SimTree {
        go,
        done,
        nodes: n,
        wireup: t0.elapsed(),
    })
}

impl SimTree {
    /// Runs one fence: every agent's ranks enter it at once; returns when every node has
    /// the merged delta (and committed it).
    pub async fn fence(&mut self) -> Duration {
        let t = Instant::now();
        for g in &self.go {
            let _ = g.send(());
        }
        for _ in 0..self.nodes {
            if self.done.recv().await.is_none() {
                break;
            }
        }
        t.elapsed()
    }
}

#[allow(clippy::too_many_arguments)]
async fn node(
    id: u32,
    local: Option<Delta>,
    kids: Vec<Link>,
    mut kid_rx: mpsc::UnboundedReceiver<(u32, Up)>,
    up: Option<mpsc::UnboundedSender<Up>>,
    down: Option<mpsc::UnboundedReceiver<Down>>,
    mut go: mpsc::UnboundedReceiver<()>,
    done: mpsc::UnboundedSender<u32>,
    commit: bool,
) {
    let mut gather: Gather = Gather::new(local.is_some(), kids.iter().map(|k| k.1).collect());
    let mut kvs = Kvs::default();
    let mut down = down;
    let release = |epoch: u64, delta: Delta, kvs: &mut Kvs| {
        if !kids.is_empty() {
            if let Ok(f) = tree::encode(&Down::FenceDone {
                epoch,
                delta: delta.clone(),
            }) {
                for (tx, _) in &kids {
                    let _ = tx.send(f.clone());
                }
            }
        }
        if commit {
            kvs.commit(delta);
        }
        let _ = done.send(id);
    };
    let mut epoch = 0u64;
    loop {
        let merged = tokio::select! {
            g = go.recv(), if local.is_some() => match g {
                Some(()) => gather.local(epoch, local.clone().unwrap_or_default()),
                None => return,
            },
            m = kid_rx.recv(), if !kids.is_empty() => match m {
                Some((c, Up::Fence { epoch: e, delta })) => gather.child(c, e, delta),
                Some(_) => None,
                None => return,
            },
            d = async { match down.as_mut() { Some(d) => d.recv().await, None => std::future::pending().await } } => match d {
                Some(Down::FenceDone { epoch: e, delta }) => {
                    release(e, delta, &mut kvs);
                    epoch = e + 1;
                    None
                }
                Some(_) => None,
                None => return,
            },
        };
        if let Some((e, d)) = merged {
            match &up {
                Some(up) => {
                    let _ = up.send(Up::Fence { epoch: e, delta: d });
                }
                None => {
                    release(e, d, &mut kvs);
                    epoch = e + 1;
                }
            }
        }
    }
}
