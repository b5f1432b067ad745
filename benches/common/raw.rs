//! The floor under [`super::sim`]'s fence: the same tree (the shape `tree::build` makes, over
//! loopback TCP, one task per link end on one thread) moving the same bytes, and nothing
//! else. Each agent's contribution is the frame its real node sends up for the same shape
//! (`tree::encode` of an `Up::Fence`, so the sizes match); a node waits for its own and its
//! children's, concatenates them and writes the result to its parent with a 4-byte length;
//! the root writes everything it gathered to every child (biggest subtree first), and each
//! agent forwards it to its own children, then counts as done. No decoding, no merge, no
//! key-value store: what any tree implementation pays for the copies and the system calls
//! of one fence here, the least a fence can cost on this machine for this shape.
//!
//! Each agent keeps what it received until the next fence's replaces it, as the agents of
//! [`super::sim`] keep theirs in their stores: a fence's result is what its ranks read after
//! it, so no implementation can let go of it (for a PMIx fence, the host's server holds it).
//! So in one process standing in for 256 hosts its receives land in 256 buffers (21 MB at 256
//! hosts, flat), as any store's do, not in one buffer kept warm in cache, which would put the
//! floor about 18 % below what a fence that keeps its result can cost (11.5 ms dropping, 13.6
//! ms keeping, 256 hosts flat; `docs/performance.md`, "Fences across simulated hosts").

use super::sim::{contribution, edges, Shape};
use kauri::tree::{self, Up};
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A running raw tree.
pub struct RawTree {
    go: Vec<mpsc::UnboundedSender<()>>,
    done: mpsc::UnboundedReceiver<()>,
    hosts: usize,
}

/// Reads one length-prefixed payload.
async fn read_payload(r: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let mut buf = Vec::new();
    tree::read_body(r, &mut buf, u32::from_be_bytes(len) as usize)
        .await
        .ok()?;
    Some(buf)
}

/// Writes one length-prefixed payload (one write call when the socket takes it).
async fn write_payload(w: &mut OwnedWriteHalf, p: &[u8]) -> io::Result<()> {
    let mut f = Vec::with_capacity(4 + p.len());
    f.extend_from_slice(&(p.len() as u32).to_be_bytes());
    f.extend_from_slice(p);
    w.write_all(&f).await
}

/// Builds the tree and starts every node; call from inside a `LocalSet`.
pub async fn start(s: Shape) -> io::Result<RawTree> {
    let edges = edges(s.hosts, s.width);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let n = s.hosts + 1;
    let mut up: Vec<Option<OwnedWriteHalf>> = (0..n).map(|_| None).collect();
    let mut down_rd: Vec<Option<OwnedReadHalf>> = (0..n).map(|_| None).collect();
    let mut kids: Vec<Vec<(u32, OwnedWriteHalf)>> = (0..n).map(|_| Vec::new()).collect();
    let mut kid_rd: Vec<Vec<OwnedReadHalf>> = (0..n).map(|_| Vec::new()).collect();
    for &(child, parent) in &edges {
        let (c, a) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (c, (p, _)) = (c?, a?);
        c.set_nodelay(true)?;
        p.set_nodelay(true)?;
        let (crd, cwr) = c.into_split();
        let (prd, pwr) = p.into_split();
        up[child as usize] = Some(cwr);
        down_rd[child as usize] = Some(crd);
        kids[parent as usize].push((child, pwr));
        kid_rd[parent as usize].push(prd);
    }
    // Subtree sizes, for the biggest-first broadcast.
    let mut size = vec![1usize; n];
    for &(child, parent) in edges.iter().rev() {
        size[parent as usize] += size[child as usize];
    }
    let (done_tx, done) = mpsc::unbounded_channel();
    let mut go = Vec::new();
    for id in 0..n {
        let mut my_kids = std::mem::take(&mut kids[id]);
        my_kids.sort_by_key(|&(c, _)| std::cmp::Reverse(size[c as usize]));
        // Children's payloads arrive through one channel, one reader task per child.
        let (ktx, mut krx) = mpsc::unbounded_channel::<Vec<u8>>();
        for mut r in std::mem::take(&mut kid_rd[id]) {
            let ktx = ktx.clone();
            tokio::task::spawn_local(async move {
                while let Some(p) = read_payload(&mut r).await {
                    if ktx.send(p).is_err() {
                        break;
                    }
                }
            });
        }
        drop(ktx);
        let mine = if id == 0 {
            None
        } else {
            let delta = contribution(id as u32, &s);
            let frame = tree::encode(&Up::Fence { epoch: 0, delta })
                .map_err(|e| io::Error::other(e.to_string()))?;
            Some(frame.to_vec())
        };
        let (gtx, mut grx) = mpsc::unbounded_channel::<()>();
        if id != 0 {
            go.push(gtx);
        }
        let mut upw = up[id].take();
        let mut downr = down_rd[id].take();
        let done_tx = done_tx.clone();
        let nkids = my_kids.len();
        tokio::task::spawn_local(async move {
            // the last fence's whole, kept (an agent's; the root runs no ranks here)
            let mut kept: Option<Vec<u8>> = None;
            loop {
                // Gather: this node's own part (agents) and one payload per child.
                let mut all = Vec::new();
                if let Some(m) = &mine {
                    if grx.recv().await.is_none() {
                        return;
                    }
                    all.extend_from_slice(m);
                }
                for _ in 0..nkids {
                    match krx.recv().await {
                        Some(p) => all.extend_from_slice(&p),
                        None => return,
                    }
                }
                // Up, then the whole from above (the root has it already).
                let whole = match (&mut upw, &mut downr) {
                    (Some(w), Some(r)) => {
                        if write_payload(w, &all).await.is_err() {
                            return;
                        }
                        match read_payload(r).await {
                            Some(p) => p,
                            None => return,
                        }
                    }
                    _ => all,
                };
                for (_, w) in &mut my_kids {
                    if write_payload(w, &whole).await.is_err() {
                        return;
                    }
                }
                if mine.is_some() {
                    // replaced only now, as a store replaces its last delta after the read
                    drop(kept.replace(whole));
                    if done_tx.send(()).is_err() {
                        return;
                    }
                }
            }
        });
    }
    Ok(RawTree {
        go,
        done,
        hosts: s.hosts,
    })
}

impl RawTree {
    /// Runs one fence: every agent's part is ready at once; returns when every agent has the
    /// whole.
    pub async fn fence(&mut self) -> Duration {
        let t = Instant::now();
        for g in &self.go {
            let _ = g.send(());
        }
        for _ in 0..self.hosts {
            if self.done.recv().await.is_none() {
                break;
            }
        }
        t.elapsed()
    }
}
