//! `kauri agent`: the per-host process of a multi-host job (an internal role, started by its
//! parent through a launcher).
//!
//! It connects back to its parent, proves it holds the job key, receives its part of the job,
//! starts its own child agents and its host's ranks, and then relays: fence contributions up
//! (its subtree's puts merged into one message), merged deltas down, output and reports up,
//! stdin, signals and teardown down. It exits when its ranks and its children are done, or at
//! once, killing its ranks, when its parent disappears.

use crate::hub::{Children, Gather, HubEvent};
use crate::iofwd::Stream;
use crate::node::{Node, NodeEvent};
use crate::pmi::Output;
use crate::profile::{Clock, HostProfile};
use crate::tree::{self, Down, Report, Up};
use bytes::{Bytes, BytesMut};
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
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
        Ok(None) => return Err("its parent refused it".into()),
        _ => return Err("its parent did not send the job".into()),
    };
    let host = me.host.clone();
    debug!(%host, ranks = me.ranks.len(), children = children.len(), "agent starting");
    let mut prof = job.profile.then(|| HostProfile {
        ranks: me.ranks.len() as u32,
        ..HostProfile::new(my_id, &host)
    });
    // The records of the subtrees below, already on this agent's clock.
    let mut below: Vec<HostProfile> = Vec::new();

    // The uplink: control messages first, output in batches.
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel::<Up>();
    let (out_tx, out_rx) = mpsc::channel::<(Stream, Bytes)>(1024);
    let writer = tokio::task::spawn_local(uplink(wr, ctl_rx, out_rx));
    let report = |r: Report| {
        let _ = ctl_tx.send(Up::Reports(vec![r]));
    };

    let (hub_tx, mut hub_rx) = mpsc::unbounded_channel();
    let kids = Children::start(
        children,
        (*job).clone(),
        launch,
        key,
        my_ip,
        hub_tx,
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
    let (node_tx, mut node_rx) = mpsc::unbounded_channel();
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
        None => Node::start(&job, &me, node_tx, out_tx.clone()).await,
    };
    if let (Some(p), Ok(_)) = (prof.as_mut(), &node) {
        p.fork_start_us = Some(fork_start);
        p.forked_us = Some(clock.now());
    }
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
    let mut gather: Gather = Gather::new(node.is_some(), kids.ids());
    let mut pmix_gather: Gather<Vec<u8>> = Gather::new(node.is_some(), kids.ids());
    let mut stdin_tx: Option<mpsc::UnboundedSender<Option<Vec<u8>>>> = None;
    let mut node = node;
    if let Some(mut pipe) = node.as_mut().and_then(|n| n.stdin.take()) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
        stdin_tx = Some(tx);
        tokio::task::spawn_local(async move {
            while let Some(Some(chunk)) = rx.recv().await {
                if pipe.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            let _ = pipe.shutdown().await;
        });
    }
    let grace = Duration::from_millis(job.kill_grace_ms);
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86400);
    let mut kill_at: Option<Instant> = None;
    let mut told_initialized = false;
    let (mut hub_open, mut node_open) = (true, true);
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

    loop {
        let local_done = node.as_ref().is_none_or(|n| n.running() == 0);
        if local_done && kids.all_done() {
            debug!(%host, "agent done");
            break;
        }
        tokio::select! {
            ev = node_rx.recv(), if node.is_some() && node_open => {
                let Some(ev) = ev else {
                    node_open = false;
                    continue;
                };
                match ev {
                    NodeEvent::Exited { rank, pid, status, initialized, finalized } => {
                        if let Some(p) = prof.as_mut() { p.exited(clock.now()); }
                        report(Report::Exited {
                            rank, pid, host: host.clone(), code: status.code(), signal: status.signal(), finalized, initialized,
                            in_teardown: kill_at.is_some(),
                        })
                    }
                    NodeEvent::Engine(Output::FenceReady { epoch, delta }) => {
                        debug!(%host, epoch, "local fence ready");
                        if let Some(p) = prof.as_mut() { p.fence_ready(epoch, clock.now()); }
                        if let Some((e, d)) = gather.local(epoch, delta) {
                            let _ = ctl_tx.send(Up::Fence { epoch: e, delta: d });
                        }
                    }
                    NodeEvent::PmixFence { epoch, data } => {
                        if let Some((e, d)) = pmix_gather.local(epoch, data) {
                            let _ = ctl_tx.send(Up::PmixFence { epoch: e, data: d });
                        }
                    }
                    NodeEvent::PmixDmodex { id, rank } => {
                        let _ = ctl_tx.send(Up::Dmodex { from: my_id, req: id, rank });
                    }
                    NodeEvent::DmodexServed { to, req, status, data } => {
                        match &node {
                            Some(n) if to == my_id => n.pmix_dmodex_reply(req, status, data),
                            _ => { let _ = ctl_tx.send(Up::DmodexData { to, req, status, data }); }
                        }
                    }
                    NodeEvent::Engine(Output::Publish { delta }) => { let _ = ctl_tx.send(Up::Publish(delta)); }
                    NodeEvent::Engine(Output::Request { id, service }) => {
                        let _ = ctl_tx.send(Up::Request { from: my_id, req: id, service });
                    }
                    NodeEvent::Engine(Output::Finalized { .. }) => {
                        if let Some(p) = prof.as_mut() { p.finalized(clock.now()); }
                    }
                    NodeEvent::Engine(Output::Initialized { rank }) => {
                        if let Some(p) = prof.as_mut() { p.initialized(clock.now()); }
                        if !told_initialized {
                            told_initialized = true;
                            report(Report::Initialized { rank });
                        }
                    }
                    NodeEvent::Engine(Output::Abort { rank, code, message }) => report(Report::Abort { rank, code, message }),
                    NodeEvent::Engine(Output::Failed { reason }) => report(Report::Failed { reason }),
                    NodeEvent::Engine(Output::ProtocolError { rank, error }) => report(Report::ProtocolError { rank, error }),
                    NodeEvent::Engine(_) => {}
                }
            }
            ev = hub_rx.recv(), if hub_open => {
                let Some(ev) = ev else {
                    // No children (or all gone): this branch has nothing more to say.
                    hub_open = false;
                    continue;
                };
                match ev {
                    HubEvent::Up { id, msg: Up::Fence { epoch, delta } } => {
                        if let Some((e, d)) = gather.child(id, epoch, delta) {
                            let _ = ctl_tx.send(Up::Fence { epoch: e, delta: d });
                        }
                    }
                    HubEvent::Up { id, msg: Up::PmixFence { epoch, data } } => {
                        if let Some((e, d)) = pmix_gather.child(id, epoch, data) {
                            let _ = ctl_tx.send(Up::PmixFence { epoch: e, data: d });
                        }
                    }
                    HubEvent::Up { msg: m @ (Up::Dmodex { .. } | Up::DmodexData { .. }), .. } => { let _ = ctl_tx.send(m); }
                    HubEvent::Up { msg: Up::Reports(r), .. } => { let _ = ctl_tx.send(Up::Reports(r)); }
                    HubEvent::Up { msg: Up::Publish(d), .. } => { let _ = ctl_tx.send(Up::Publish(d)); }
                    HubEvent::Up { msg: m @ Up::Request { .. }, .. } => { let _ = ctl_tx.send(m); }
                    HubEvent::Up { id, msg: Up::Done } => kids.mark_done(id),
                    HubEvent::Up { id, msg: Up::Profile(mut v) } => {
                        let (l, c) = kids.timings(id);
                        crate::profile::adopt(&mut v, id, l.map(|t| clock.at(t)), c.map(|t| clock.at(t)));
                        below.extend(v);
                    }
                    HubEvent::Up { .. } => {}
                    HubEvent::Lost { id, reason } => {
                        kids.mark_done(id);
                        report(Report::Failed { reason });
                    }
                    HubEvent::Refused { addr, reason } => {
                        let _ = out_tx.send((Stream::Stderr, Bytes::from(format!("kauri: refused a connection from {addr}: {reason}\n")))).await;
                    }
                }
            }
            down = down_rx.recv() => {
                let (down, frame) = match down.flatten() {
                    Some((m, f)) => (Some(m), f),
                    None => (None, Bytes::new()),
                };
                match down {
                    None => {
                        // The parent is gone: nobody can use this part of the job any more.
                        if let Some(n) = &node { n.signal(libc::SIGKILL); }
                        return Err("its parent disappeared; killed its ranks".into());
                    }
                    Some(Down::FenceDone { epoch, delta }) => {
                        debug!(%host, epoch, "fence done");
                        if let Some(p) = prof.as_mut() { p.fence_released(epoch, clock.now()); }
                        // passed on as it came, before it is unpacked here
                        kids.broadcast_frame(&frame);
                        if let Some(n) = &node { n.fence_done(epoch, &delta); }
                    }
                    Some(Down::PmixFenceDone { epoch, data }) => {
                        debug!(%host, epoch, "PMIx fence done");
                        kids.broadcast_frame(&frame);
                        if let Some(n) = &node { n.pmix_fence_done(epoch, data); }
                    }
                    Some(Down::DmodexServe { from, req, rank }) => {
                        match (&node, kids.child_with_rank(rank)) {
                            (Some(n), _) if n.has_rank(rank) => n.pmix_dmodex_serve(rank, from, req),
                            (_, Some(id)) => kids.send(id, Down::DmodexServe { from, req, rank }),
                            _ => {
                                let status = crate::pmix::ffi::PMIX_ERR_NOT_FOUND;
                                let _ = ctl_tx.send(Up::DmodexData { to: from, req, status, data: Vec::new() });
                            }
                        }
                    }
                    Some(Down::DmodexData { to, req, status, data }) => {
                        if to == my_id {
                            if let Some(n) = &node { n.pmix_dmodex_reply(req, status, data); }
                        } else {
                            kids.route(to, Down::DmodexData { to, req, status, data });
                        }
                    }
                    Some(Down::Publish(delta)) => {
                        kids.broadcast(&Down::Publish(delta.clone()));
                        if let Some(n) = &node { n.publish(delta); }
                    }
                    Some(Down::Stdin(data)) => match &stdin_tx {
                        Some(tx) => { let _ = tx.send(Some(data)); }
                        None => if let Some(id) = kids.child_with_rank(0) { kids.send(id, Down::Stdin(data)); },
                    },
                    Some(Down::StdinEof) => match stdin_tx.take() {
                        Some(tx) => { let _ = tx.send(None); }
                        None => if let Some(id) = kids.child_with_rank(0) { kids.send(id, Down::StdinEof); },
                    },
                    Some(Down::Signal(sig)) => {
                        kids.broadcast(&Down::Signal(sig));
                        if let Some(n) = &node { n.signal(sig); }
                    }
                    Some(Down::Teardown) => {
                        kids.broadcast(&Down::Teardown);
                        if kill_at.is_none() {
                            if let Some(n) = &node { n.signal(libc::SIGTERM); }
                            kill_at = Some(Instant::now() + grace);
                        }
                    }
                    Some(Down::Kill) => {
                        kids.broadcast(&Down::Kill);
                        if let Some(n) = &node { n.signal(libc::SIGKILL); }
                    }
                    Some(Down::Reply { to, req, reply }) => {
                        if to == my_id {
                            if let Some(n) = &node { n.service_reply(req, reply); }
                        } else {
                            kids.route(to, Down::Reply { to, req, reply });
                        }
                    }
                    Some(Down::Challenge { .. }) | Some(Down::Spec { .. }) => {}
                }
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                if let Some(n) = &node { n.signal(libc::SIGKILL); }
                kill_at = Some(far);
            }
        }
    }
    if let Some(n) = node {
        n.drain().await;
    }
    debug!(%host, "agent drained");
    // Before Done: a fork-launched agent dies with its parent, which may leave right after.
    crate::pmix::shutdown();
    drop(out_tx);
    if let Some(p) = prof {
        let mut all = vec![p];
        all.append(&mut below);
        let _ = ctl_tx.send(Up::Profile(all));
    }
    let _ = ctl_tx.send(Up::Done);
    let _ = writer.await;
    debug!(%host, "agent leaving");
    Ok(())
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
