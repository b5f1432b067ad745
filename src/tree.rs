//! The overlay tree between the front end and the agents: the messages on its links, their
//! framing, the job-key handshake, and the tree's shape.
//!
//! A link is one TCP connection from a child (an agent) to its parent (an agent or the front
//! end). The parent speaks first: [`Down::Challenge`] with a random nonce; the child answers
//! [`Up::Hello`] with an HMAC-SHA256 of the nonce under the per-job key, which never appears on a
//! command line (it reaches agents in their environment or on their stdin). A connection that
//! does not answer correctly is refused and the job goes on.
//!
//! Frames are a 4-byte big-endian length and a bincode body. Messages are batched by kind:
//! one fence contribution per agent per fence (all puts of its subtree), output as runs of
//! whole lines, never one message per key.

use crate::iofwd::Stream;
use crate::kvs::{Delta, Packed};
use crate::plan::{HostPlan, JobPlan, LaunchPlan, Subtree};
use crate::profile::HostProfile;
use crate::service::{Service, ServiceReply};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame a link accepts (a fence delta of a very large job fits easily).
pub const FRAME_MAX: usize = 256 * 1024 * 1024;

/// Parent to child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Down {
    /// The first message on a link: prove you hold the job key.
    Challenge {
        /// A random nonce.
        nonce: [u8; 32],
    },
    /// The child's part of the job, and the subtrees it must start.
    Spec {
        /// The child's agent id.
        id: u32,
        /// The job.
        job: Box<JobPlan>,
        /// The child's own host.
        me: HostPlan,
        /// The subtrees below it.
        children: Vec<Subtree>,
        /// How to start them.
        launch: LaunchPlan,
    },
    /// Fence `epoch` is complete everywhere: apply the merged delta and release the ranks.
    FenceDone {
        /// The fence.
        epoch: u64,
        /// Every put of the job since the previous fence.
        delta: Packed,
    },
    /// Pairs published without a fence (`kauri kvs put`): commit them at once.
    Publish(Delta),
    /// PMIx fence `epoch` is complete everywhere: every host's blob, concatenated.
    PmixFenceDone {
        /// The fence.
        epoch: u64,
        /// The blobs.
        #[serde(with = "crate::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// Ask the PMIx server hosting `rank` for its data (direct modex), for agent `from`;
    /// routed down towards the agent that runs `rank`.
    DmodexServe {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The rank whose data is wanted.
        rank: usize,
    },
    /// The answer to a direct-modex request, routed down to agent `to`.
    DmodexData {
        /// The agent that asked.
        to: u32,
        /// Its request id.
        req: u64,
        /// The PMIx status.
        status: i32,
        /// The rank's data.
        #[serde(with = "crate::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// Bytes for rank 0's stdin (routed to the agent that hosts rank 0).
    Stdin(Vec<u8>),
    /// End of rank 0's stdin.
    StdinEof,
    /// Forward a signal to every rank.
    Signal(i32),
    /// End the job: SIGTERM, the grace period, SIGKILL.
    Teardown,
    /// Kill every rank now.
    Kill,
    /// The answer to a [`Up::Request`], routed down to agent `to`.
    Reply {
        /// The agent that asked (0: the front end's own host).
        to: u32,
        /// Its request id.
        req: u64,
        /// The answer.
        reply: ServiceReply,
    },
}

/// Something that happened below, reported up to the front end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// A rank finished the PMI handshake (sent for an agent's first one only).
    Initialized {
        /// The rank.
        rank: usize,
    },
    /// A rank ended.
    Exited {
        /// The rank.
        rank: usize,
        /// Its pid on its host.
        pid: u32,
        /// Its host.
        host: String,
        /// Exit code, when it exited.
        code: Option<i32>,
        /// Signal, when a signal killed it.
        signal: Option<i32>,
        /// It had called PMI finalize.
        finalized: bool,
        /// It had finished the PMI handshake.
        initialized: bool,
        /// Its host had already begun tearing the job down when it ended (so it is a
        /// casualty of the teardown, not a cause).
        in_teardown: bool,
    },
    /// A rank asked to end the job.
    Abort {
        /// The rank, when known.
        rank: Option<usize>,
        /// The exit code it asked for.
        code: i32,
        /// Its message.
        message: String,
    },
    /// A rank sent a malformed PMI message.
    ProtocolError {
        /// The rank, when known.
        rank: Option<usize>,
        /// What was wrong.
        error: String,
    },
    /// The job cannot go on.
    Failed {
        /// One line saying why.
        reason: String,
    },
    /// An agent started its host's ranks, or could not (`error`).
    NodeStarted {
        /// Its host.
        host: String,
        /// Why its ranks could not start.
        error: Option<String>,
    },
}

/// Child to parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Up {
    /// The answer to the challenge.
    Hello {
        /// The agent's id.
        id: u32,
        /// Its host as it was told.
        host: String,
        /// HMAC-SHA256(key, nonce || id).
        mac: Vec<u8>,
    },
    /// The subtree's contribution to fence `epoch`.
    Fence {
        /// The fence.
        epoch: u64,
        /// Every put of the subtree's ranks since the previous fence.
        delta: Packed,
    },
    /// Pairs to publish to the whole job at once (relayed to the front end).
    Publish(Delta),
    /// The subtree's contribution to PMIx fence `epoch`: its hosts' blobs, concatenated.
    PmixFence {
        /// The fence.
        epoch: u64,
        /// The blobs.
        #[serde(with = "crate::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// A direct-modex request for the front end to route to the host of `rank`.
    Dmodex {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The rank whose data is wanted.
        rank: usize,
    },
    /// A direct-modex answer for the front end to route down to agent `to`.
    DmodexData {
        /// The agent that asked.
        to: u32,
        /// Its request id.
        req: u64,
        /// The PMIx status.
        status: i32,
        /// The rank's data.
        #[serde(with = "crate::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// A request for the front end, relayed up unchanged.
    Request {
        /// The agent that asked.
        from: u32,
        /// Its request id.
        req: u64,
        /// The request.
        service: Service,
    },
    /// A run of whole output lines.
    Output {
        /// Which stream.
        stream: Stream,
        /// The bytes.
        #[serde(with = "crate::kvs::byte_string")]
        data: Vec<u8>,
    },
    /// Events for the front end.
    Reports(Vec<Report>),
    /// The startup profile of the subtree's hosts, on the sender's clock (sent just before
    /// `Done`, only when the job records one).
    Profile(Vec<HostProfile>),
    /// The subtree's agents are all running.
    Started,
    /// Every rank of the subtree has ended and its output is sent; the agent is leaving.
    Done,
}

/// Encodes one frame (length and body), ready to be written as is: to one link, or to every
/// child link at once without encoding the message again for each.
pub fn encode<M: Serialize>(msg: &M) -> io::Result<Bytes> {
    let bad = |e| io::Error::new(io::ErrorKind::InvalidData, e);
    let len = bincode::serialized_size(msg).map_err(bad)? as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&(len as u32).to_be_bytes());
    bincode::serialize_into(&mut frame, msg).map_err(bad)?;
    Ok(Bytes::from(frame))
}

/// Writes one frame.
pub async fn send<W: AsyncWrite + Unpin, M: Serialize>(w: &mut W, msg: &M) -> io::Result<()> {
    w.write_all(&encode(msg)?).await
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn recv<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<Option<M>> {
    Ok(recv_frame(r).await?.map(|(m, _)| m))
}

/// Reads one frame and returns it decoded and as it came (length and body), so that a
/// message for the children can be passed on without encoding it again.
pub async fn recv_frame<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<Option<(M, Bytes)>> {
    let mut len_bytes = [0u8; 4];
    match r.read_exact(&mut len_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len_bytes) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&len_bytes);
    r.read_exact(&mut frame[4..]).await?;
    let m = bincode::deserialize(&frame[4..])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((m, Bytes::from(frame))))
}

/// The job key: 32 random bytes, hex-encoded so it can travel in an environment variable or
/// on a line of stdin.
pub fn new_key() -> io::Result<String> {
    let mut b = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A random nonce.
pub fn nonce() -> io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(b)
}

/// The proof that a child holds `key`.
pub fn mac(key: &str, nonce: &[u8; 32], id: u32) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(&id.to_be_bytes());
    m.finalize().into_bytes().to_vec()
}

/// Checks a child's proof in constant time.
pub fn verify(key: &str, nonce: &[u8; 32], id: u32, proof: &[u8]) -> bool {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(&id.to_be_bytes());
    m.verify_slice(proof).is_ok()
}

/// Arranges `hosts` (in order, ids from 1) under a root as a `width`-ary tree in breadth-first
/// order: the root's children are the first `width` hosts, and so on. `width` 0 means flat:
/// every host is a child of the root.
pub fn build(hosts: Vec<HostPlan>, width: usize) -> Vec<Subtree> {
    let parents = (1..=hosts.len())
        .map(|i| (i - 1).checked_div(width).unwrap_or(0))
        .collect::<Vec<_>>();
    from_parents(hosts, &parents)
}

/// What one launch costs, for the cost-model tree ([`build_cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchCost {
    /// A parent's own time per launch: after starting one child it can start the next this
    /// much later (forking the launcher, ssh's own work), in microseconds.
    pub serial_us: u64,
    /// From the start of a launch until the child runs and can launch children of its own
    /// (the remote start, the connection, the handshake), in microseconds.
    pub latency_us: u64,
}

impl LaunchCost {
    /// Parses `SERIAL_MS,LATENCY_MS` (`KAURI_LAUNCH_COST`).
    pub fn parse(v: &str) -> Option<LaunchCost> {
        let (a, b) = v.split_once(',')?;
        let ms = |x: &str| -> Option<u64> {
            let f: f64 = x.trim().parse().ok()?;
            (f.is_finite() && f >= 0.0).then_some((f * 1000.0) as u64)
        };
        Some(LaunchCost {
            serial_us: ms(a)?,
            latency_us: ms(b)?,
        })
    }
}

/// LIBI's cost-model tree: each host, in order, goes under the node (the root, or an agent
/// once it runs) where its launch would start soonest. A node that became ready at `r` starts
/// its k-th launch at `r + k * serial` at the earliest, and with `concurrent` launches in
/// flight (the hub's bound) not before its (k - concurrent)-th child is running; a child runs
/// `serial + latency` after its launch starts. Ties go to the node that was placed first, so a
/// launch that costs nothing serially gives a flat tree, and a launch that is all serial work
/// a binomial one.
pub fn build_cost(hosts: Vec<HostPlan>, cost: LaunchCost, concurrent: usize) -> Vec<Subtree> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = hosts.len();
    let concurrent = concurrent.max(1);
    let mut parents = Vec::with_capacity(n);
    // Per node: when it may start its next launch, and when its launches' children run.
    let mut next = vec![0u64; n + 1];
    let mut running: Vec<Vec<u64>> = vec![Vec::new(); n + 1];
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((0u64, 0usize)));
    for i in 1..=n {
        let Some(Reverse((start, p))) = heap.pop() else {
            break; // the root is always in the heap, and each placed host joins it
        };
        parents.push(p);
        let ready = start + cost.serial_us + cost.latency_us;
        running[p].push(ready);
        let k = running[p].len();
        next[p] = start + cost.serial_us;
        if k >= concurrent {
            next[p] = next[p].max(running[p][k - concurrent]);
        }
        heap.push(Reverse((next[p], p)));
        next[i] = ready;
        heap.push(Reverse((ready, i)));
    }
    from_parents(hosts, &parents)
}

/// Builds the subtrees from `parents[i - 1]`, the parent of host `i` (0: the root); a parent
/// always comes before its children.
fn from_parents(hosts: Vec<HostPlan>, parents: &[usize]) -> Vec<Subtree> {
    let n = hosts.len();
    let mut nodes: Vec<Option<Subtree>> = hosts
        .into_iter()
        .enumerate()
        .map(|(i, plan)| {
            Some(Subtree {
                id: i as u32 + 1,
                plan,
                children: Vec::new(),
            })
        })
        .collect();
    // Attach from the last node up, so every child is complete before it moves into its
    // parent.
    for i in (1..=n).rev() {
        let parent = parents[i - 1];
        if parent == 0 {
            continue;
        }
        let child = nodes[i - 1].take().expect("each node moves once");
        nodes[parent - 1]
            .as_mut()
            .expect("a parent moves after its children")
            .children
            .insert(0, child);
    }
    nodes.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RankPlan;

    fn hosts(n: usize) -> Vec<HostPlan> {
        (0..n)
            .map(|i| HostPlan {
                host: format!("h{i}"),
                node: i,
                index: i,
                ranks: vec![RankPlan {
                    rank: i,
                    app: 0,
                    local_id: 0,
                }],
            })
            .collect()
    }

    fn shape(t: &Subtree) -> String {
        if t.children.is_empty() {
            t.id.to_string()
        } else {
            let c: Vec<String> = t.children.iter().map(shape).collect();
            format!("{}({})", t.id, c.join(","))
        }
    }

    #[test]
    fn kary_trees() {
        let s: Vec<String> = build(hosts(7), 2).iter().map(shape).collect();
        assert_eq!(s, vec!["1(3(7),4)", "2(5,6)"]);
        let s: Vec<String> = build(hosts(4), 1).iter().map(shape).collect();
        assert_eq!(s, vec!["1(2(3(4)))"]);
        let flat = build(hosts(5), 0);
        assert_eq!(flat.len(), 5);
        assert!(flat.iter().all(|t| t.children.is_empty()));
        let t = build(hosts(10), 3);
        assert_eq!(t.iter().map(Subtree::agents).sum::<usize>(), 10);
        assert!(t[0].contains_rank(3) && !t[0].contains_rank(1));
    }

    #[test]
    fn cost_model_trees() {
        let c = |serial_us, latency_us| LaunchCost {
            serial_us,
            latency_us,
        };
        // No serial cost: the root launches everything at once.
        let s: Vec<String> = build_cost(hosts(5), c(0, 20), 32)
            .iter()
            .map(shape)
            .collect();
        assert_eq!(s, vec!["1", "2", "3", "4", "5"]);
        // All serial work: a binomial tree (each running node launches one per step).
        let s: Vec<String> = build_cost(hosts(7), c(10, 0), 32)
            .iter()
            .map(shape)
            .collect();
        assert_eq!(s, vec!["1(3(7),5)", "2(6)", "4"]);
        // Latency 3x the serial cost: the root launches 4 before its first child runs, then
        // shares the work with the children as they come up.
        let t = build_cost(hosts(20), c(5, 15), 32);
        assert_eq!(t.len(), 9);
        assert_eq!(t.iter().map(Subtree::agents).sum::<usize>(), 20);
        assert_eq!(shape(&t[0]), "1(6,8,11,15,20)");
        // A bound on launches in flight holds the root back until a child runs.
        assert_eq!(build_cost(hosts(20), c(1, 100), 32).len(), 20);
        assert_eq!(build_cost(hosts(20), c(1, 100), 4).len(), 8);
        assert_eq!(LaunchCost::parse("2,20.5"), Some(c(2000, 20500)));
        assert_eq!(LaunchCost::parse("x"), None);
    }

    #[test]
    fn frames_round_trip_and_bad_frames_are_refused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let msg = Up::Fence {
                epoch: 3,
                delta: crate::kvs::Packed::from_pairs([("k", "v")]),
            };
            let mut buf = Vec::new();
            send(&mut buf, &msg).await.unwrap();
            let got: Up = recv(&mut &buf[..]).await.unwrap().unwrap();
            assert_eq!(got, msg);
            // the frame as it came is the frame that was sent: it can be passed on as is
            let (got, frame): (Up, Bytes) = recv_frame(&mut &buf[..]).await.unwrap().unwrap();
            assert_eq!((got, &frame[..]), (msg.clone(), &encode(&msg).unwrap()[..]));
            let none: Option<Up> = recv(&mut &b""[..]).await.unwrap();
            assert!(none.is_none());
            let huge = [0xffu8, 0xff, 0xff, 0xff];
            assert!(recv::<_, Up>(&mut &huge[..]).await.is_err());
            let garbage = [0u8, 0, 0, 3, 200, 201, 202];
            assert!(recv::<_, Up>(&mut &garbage[..]).await.is_err());
        });
    }

    #[test]
    fn only_the_key_holder_passes() {
        let n = nonce().unwrap();
        let k = new_key().unwrap();
        assert_eq!(k.len(), 64);
        assert!(verify(&k, &n, 4, &mac(&k, &n, 4)));
        assert!(!verify(&k, &n, 5, &mac(&k, &n, 4)));
        assert!(!verify("other", &n, 4, &mac(&k, &n, 4)));
    }
}
