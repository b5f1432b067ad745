//! `kauri agent`: the per-host process of a multi-host job (an internal role, started by its
//! parent through a launcher).
//!
//! It connects back to its parent, proves it holds the job key, receives its part of the job,
//! starts its own child agents and its host's ranks, and then relays: fence contributions up
//! (its subtree's puts merged into one message), merged deltas down, output and reports up,
//! stdin, signals and teardown down. It exits when its ranks and its children are done, or at
//! once, killing its ranks, when its parent disappears.

use crate::branch::{Branch, Out};
use crate::events::{self, JobTx};
use crate::hub::{Children, HubEvent};
use crate::iofwd::Stream;
use crate::node::{Node, NodeEvent};
use crate::profile::{Clock, HostProfile};
use crate::tree::{self, Down, Report, Up};
use bytes::{Bytes, BytesMut};
use std::io::BufRead;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

/// The command line of `kauri agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    /// `ip:port` of the parent.
    pub parent: String,
    /// The agent's id; `None` under Slurm, where the host name identifies the agent.
    pub id: Option<u32>,
    /// The host name it stands for.
    pub host: String,
}

impl AgentArgs {
    /// Parses `--parent ADDR (--id N --host NAME | --slurm)`.
    pub fn parse(args: &[String]) -> Result<AgentArgs, String> {
        let (mut parent, mut id, mut host, mut slurm) = (None, None, None, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "--parent" => parent = Some(val()?),
                "--id" => id = Some(val()?.parse::<u32>().map_err(|_| "bad --id".to_string())?),
                "--host" => host = Some(val()?),
                "--slurm" => slurm = true,
                other => return Err(format!("unknown agent argument {other}")),
            }
        }
        let parent = parent.ok_or("--parent is required")?;
        if slurm {
            let host =
                std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| crate::node::local_host());
            return Ok(AgentArgs {
                parent,
                id: None,
                host,
            });
        }
        Ok(AgentArgs {
            parent,
            id: Some(id.ok_or("--id is required")?),
            host: host.ok_or("--host is required")?,
        })
    }
}

/// The job key: from the environment (removed at once, so ranks never see it) or from the
/// first line of stdin.
fn take_key() -> Result<String, String> {
    if let Ok(k) = std::env::var(crate::launch::KEY_VAR) {
        std::env::remove_var(crate::launch::KEY_VAR);
        return Ok(k);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the job key: {e}"))?;
    let k = line.trim().to_string();
    if k.is_empty() {
        return Err("no job key on stdin or in the environment".into());
    }
    Ok(k)
}

/// Runs the agent; returns its exit status.
pub async fn run(args: AgentArgs) -> i32 {
    let key = match take_key() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("kauri agent on {}: {e}", args.host);
            return 1;
        }
    };
    match serve(args.clone(), key).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("kauri agent on {}: {e}", args.host);
            1
        }
    }
}

async fn serve(args: AgentArgs, key: String) -> Result<(), String> {
    let host = args.host.clone();
    let sock = TcpStream::connect(&args.parent)
        .await
        .map_err(|e| format!("cannot connect to its parent {}: {e}", args.parent))?;
    let _ = sock.set_nodelay(true);
    let my_ip = sock.local_addr().map_err(|e| e.to_string())?.ip();
    let (mut rd, mut wr) = sock.into_split();
    let id = args.id.unwrap_or(u32::MAX);
    let nonce = match tree::recv_limited::<_, Down>(&mut rd, tree::HANDSHAKE_FRAME_MAX).await {
        Ok(Some(Down::Challenge { nonce })) => nonce,
        _ => return Err("its parent did not send the handshake".into()),
    };
    // The agent's clock starts at its handshake: its parent moves the profile onto its own
    // clock by the moment the handshake arrived.
    let clock = Clock::start();
    tree::send(
        &mut wr,
        &Up::Hello {
            id,
            host: host.clone(),
            mac: tree::mac(&key, &nonce, id),
        },
    )
    .await
    .map_err(|e| format!("handshake: {e}"))?;
    let (my_id, job, me, children, launch) = match tree::recv::<_, Down>(&mut rd).await {
        Ok(Some(Down::Spec {
            id,
            job,
            me,
            children,
            launch,
        })) => (id, job, me, children, launch),
        // The job ended before this agent connected: nothing to start.
        Ok(Some(Down::Teardown | Down::Kill)) => return Ok(()),
        Ok(None) => return Err("its parent refused it".into()),
        _ => return Err("its parent did not send the job".into()),
    };
    let host = me.host.clone();
    debug!(%host, ranks = me.ranks.len(), children = children.len(), "agent starting");
    let prof = job.profile.then(|| HostProfile {
        ranks: me.ranks.len() as u32,
        ..HostProfile::new(my_id, &host)
    });

    // The uplink: control messages first, output in batches.
    let (up_tx, up_rx) = mpsc::unbounded_channel::<Up>();
    let (out_tx, out_rx) = mpsc::channel::<(Stream, Bytes)>(1024);
    let writer = tokio::task::spawn_local(uplink(wr, up_rx, out_rx));
    let report = |r: Report| {
        let _ = up_tx.send(Up::Reports(vec![r]));
    };

    // Both senders are kept here for the agent's life, so neither channel ever reads as
    // closed in the loop below (a closed channel is ready at once, every time).
    let (hub_tx, mut hub_rx) = events::channel();
    let kids = Children::start(
        children,
        (*job).clone(),
        launch,
        key,
        my_ip,
        JobTx::new(0, hub_tx.clone()),
        out_tx.clone(),
    )
    .await;
    let kids = match kids {
        Ok(k) => k,
        Err(e) => {
            report(Report::Failed {
                reason: format!("agent on {host}: {e}"),
            });
            Children::none()
        }
    };
    let (node_tx, mut node_rx) = events::channel();
    // MASTER_PORT was free where the front end runs; check it where rank 0 runs.
    let port_taken = match &job.master {
        Some((_, port)) if me.ranks.iter().any(|r| r.rank == 0) => {
            std::net::TcpListener::bind(("0.0.0.0", *port))
                .err()
                .map(|e| format!("MASTER_PORT {port} is not free on {host}: {e}"))
        }
        _ => None,
    };
    let fork_start = clock.now();
    let node = match port_taken {
        Some(e) => Err(e),
        None => Node::start(&job, &me, JobTx::new(0, node_tx.clone()), out_tx.clone()).await,
    };
    let forked = clock.now();
    let node = match node {
        Ok(n) => {
            report(Report::NodeStarted {
                host: host.clone(),
                error: None,
            });
            Some(n)
        }
        Err(e) => {
            report(Report::NodeStarted {
                host: host.clone(),
                error: Some(e),
            });
            None
        }
    };
    let started = node.is_some();
    let mut agent = Agent {
        branch: Branch::new(my_id, host.clone(), node, kids, true, clock, prof),
        up: up_tx.clone(),
        kill_at: None,
        grace: Duration::from_millis(job.kill_grace_ms),
    };
    if started {
        agent.branch.profile_fork(fork_start, forked);
    }
    let (down_tx, mut down_rx) = mpsc::unbounded_channel::<Option<(Down, Bytes)>>();
    tokio::task::spawn_local(async move {
        loop {
            match tree::recv_frame::<_, Down>(&mut rd).await {
                Ok(Some(m)) => {
                    if down_tx.send(Some(m)).is_err() {
                        break;
                    }
                }
                _ => {
                    let _ = down_tx.send(None);
                    break;
                }
            }
        }
    });

    while !agent.branch.done() {
        tokio::select! {
            Some((_, ev)) = node_rx.recv() => agent.on_node(ev),
            Some((_, ev)) = hub_rx.recv() => agent.on_child(ev),
            down = down_rx.recv() => agent.on_down(down.flatten())?,
            _ = tokio::time::sleep_until(agent.kill_at.unwrap_or_else(Instant::now)), if agent.kill_at.is_some() => agent.on_kill_timer(),
        }
    }
    drop((node_tx, hub_tx));
    debug!(%host, "agent done");
    agent.branch.drain().await;
    debug!(%host, "agent drained");
    // Before Done: a fork-launched agent dies with its parent, which may leave right after.
    crate::pmix::shutdown();
    drop(out_tx);
    if let Some((p, mut below)) = agent.branch.take_profile() {
        let mut all = vec![p];
        all.append(&mut below);
        let _ = up_tx.send(Up::Profile(all));
    }
    let _ = up_tx.send(Up::Done);
    drop(agent);
    let _ = writer.await;
    debug!(%host, "agent leaving");
    Ok(())
}

/// An agent with its part of the job: its [`Branch`], its uplink, its kill timer. Each event
/// is one method; what the branch hands up goes to the parent.
struct Agent {
    branch: Branch,
    /// Control messages for the parent (the uplink writes them before queued output).
    up: mpsc::UnboundedSender<Up>,
    /// When the ranks get SIGKILL, once the teardown began.
    kill_at: Option<Instant>,
    /// Between the teardown's SIGTERM and SIGKILL.
    grace: Duration,
}

impl Agent {
    fn send(&self, out: Option<Out>) {
        match out {
            Some(Out::Up(m)) => {
                let _ = self.up.send(m);
            }
            Some(Out::Refused { addr, reason }) => {
                let line = format!("kauri: refused a connection from {addr}: {reason}\n");
                let _ = self.up.send(Up::Output {
                    stream: Stream::Stderr,
                    data: line.into_bytes(),
                });
            }
            None => {}
        }
    }

    fn on_node(&mut self, ev: NodeEvent) {
        let out = self.branch.on_node(ev);
        self.send(out);
    }

    fn on_child(&mut self, ev: HubEvent) {
        let out = self.branch.on_child(ev);
        self.send(out);
    }

    /// A message from the parent; `None` when the parent is gone, which ends the agent.
    fn on_down(&mut self, down: Option<(Down, Bytes)>) -> Result<(), String> {
        let Some((msg, frame)) = down else {
            // Nobody can use this part of the job any more.
            self.branch.kill();
            return Err("its parent disappeared; killed its ranks".into());
        };
        if msg == Down::Teardown {
            if self.branch.teardown() {
                self.kill_at = Some(Instant::now() + self.grace);
            }
            return Ok(());
        }
        let out = self.branch.on_down(msg, frame);
        self.send(out);
        Ok(())
    }

    fn on_kill_timer(&mut self) {
        self.kill_at = None;
        if let Some(n) = self.branch.node() {
            n.signal(libc::SIGKILL);
        }
    }
}

/// Writes the uplink: control messages before output, output in runs of up to 64 KiB per
/// stream. `Done` goes last, after every line of output still queued.
async fn uplink(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut ctl: mpsc::UnboundedReceiver<Up>,
    mut out: mpsc::Receiver<(Stream, Bytes)>,
) {
    let mut held: Option<(Stream, Bytes)> = None;
    let mut out_open = true;
    loop {
        let msg = if let Some(first) = held.take() {
            batch(first, &mut out, &mut held)
        } else {
            tokio::select! {
                biased;
                m = ctl.recv() => match m {
                    Some(Up::Done) | None => {
                        // Flush what is queued, then leave.
                        while let Ok(first) = out.try_recv() {
                            let m = batch(first, &mut out, &mut held);
                            if tree::send(&mut wr, &m).await.is_err() {
                                return;
                            }
                            if let Some(h) = held.take() {
                                let m = batch(h, &mut out, &mut held);
                                if tree::send(&mut wr, &m).await.is_err() {
                                    return;
                                }
                            }
                        }
                        let _ = tree::send(&mut wr, &Up::Done).await;
                        let _ = wr.shutdown().await;
                        return;
                    }
                    Some(m) => m,
                },
                o = out.recv(), if out_open => match o {
                    Some(first) => batch(first, &mut out, &mut held),
                    None => {
                        out_open = false;
                        continue;
                    }
                },
            }
        };
        if tree::send(&mut wr, &msg).await.is_err() {
            return;
        }
    }
}

/// One `Output` message: `first` and whatever lines of the same stream are already queued.
fn batch(
    first: (Stream, Bytes),
    out: &mut mpsc::Receiver<(Stream, Bytes)>,
    held: &mut Option<(Stream, Bytes)>,
) -> Up {
    let (stream, bytes) = first;
    let mut data = BytesMut::from(&bytes[..]);
    while data.len() < 64 * 1024 {
        match out.try_recv() {
            Ok((s, more)) if s == stream => data.extend_from_slice(&more),
            Ok(other) => {
                *held = Some(other);
                break;
            }
            Err(_) => break,
        }
    }
    Up::Output {
        stream,
        data: data.to_vec(),
    }
}
