//! The PMIx server's upcalls: each becomes a [`NodeEvent`] or a request to the front end,
//! and the front end's answers go back to the library's callbacks.

use super::{Ctx, Node, NodeEvent, PmixState, PMIX_REQUEST};
use crate::events::JobTx;
use kauri_core::plan::rank_env::{VADER_DIR_VAR, YIELD_VAR};
use kauri_core::tree::msg::PmixCollective;
use kauri_proto::pmi::Output;
use kauri_proto::pmix::{
    self, CollectiveReply, LookupReply, ModexReply, OpReply, SpawnReply, Upcall,
};
use kauri_proto::service::{Service, ServiceReply, Wait};
use pmix::ffi::{PMIX_ERR_BAD_PARAM, PMIX_ERR_NOT_SUPPORTED};
use pmix::names::{lookup_wait, publish_items};
use std::rc::{Rc, Weak};
use tracing::debug;

/// Where a PMIx spawn's directive goes among a spawn command's info keys (as a PMI spawn
/// spells them); `None`: not acted on.
fn spawn_info_key(key: &str, value: &str) -> Option<(String, String)> {
    let k = match key {
        "pmix.host" | "pmix.addhost" => "host",
        "pmix.hostfile" | "pmix.addhostfile" => "hostfile",
        "pmix.wdir" => "wdir",
        "pmix.prefix" => return Some(("path".into(), format!("{value}/bin"))),
        "pmix.ppr" => "ppr",
        "pmix.mapby" => "map-by",
        _ => return None,
    };
    Some((k.into(), value.to_string()))
}

/// Variables kauri sets for each rank from what its host is (see [`Node::start`]).
const PER_HOST_VARS: [&str; 2] = [VADER_DIR_VAR, YIELD_VAR];

/// Whether `k=v`, in a PMIx spawn's environment, is one of [`PER_HOST_VARS`] as kauri set it
/// for the parent rank: Open MPI copies every `OMPI_MCA_*` variable of the parent into its
/// spawn's environment, and a child on another host must have its own host's value (two
/// simulated hosts' children that shared one shared-memory directory shared their vader
/// segments). The user's own setting, in this process's environment too, is kept.
fn set_per_host(k: &str, v: &str) -> bool {
    PER_HOST_VARS.contains(&k) && std::env::var(k).map_or(true, |mine| mine != v)
}

/// A PMIx spawn's applications as the commands of a spawn request.
fn spawn_service(
    rank: u32,
    apps: Vec<pmix::SpawnApp>,
    job_info: &[(String, String)],
) -> kauri_proto::service::Service {
    // Job-level directives (Open MPI sends npernode and map_by so) hold for every command
    // that does not say otherwise.
    let job_wide: Vec<(String, String)> = job_info
        .iter()
        .filter_map(|(k, v)| match k.as_str() {
            "pmix.ppr" | "pmix.mapby" => spawn_info_key(k, v),
            _ => None,
        })
        .collect();
    let mut env = Vec::with_capacity(apps.len());
    let commands = apps
        .into_iter()
        .map(|a| {
            let mut info: Vec<(String, String)> = a
                .info
                .iter()
                .filter_map(|(k, v)| {
                    let mapped = spawn_info_key(k, v);
                    if mapped.is_none() {
                        tracing::info!(key = %k, value = %v, "PMIx spawn: directive not acted on");
                    }
                    mapped
                })
                .collect();
            if let Some(cwd) = a.cwd.filter(|_| !info.iter().any(|(k, _)| k == "wdir")) {
                info.push(("wdir".into(), cwd));
            }
            for (k, v) in &job_wide {
                if !info.iter().any(|(n, _)| n == k) {
                    info.push((k.clone(), v.clone()));
                }
            }
            env.push(
                a.env
                    .into_iter()
                    .filter(|(k, v)| !set_per_host(k, v))
                    .collect(),
            );
            pmi_wire::SpawnCommand {
                execname: a.cmd,
                nprocs: a.maxprocs,
                args: a.args,
                info,
            }
        })
        .collect();
    kauri_proto::service::Service::Spawn {
        commands,
        preput: Default::default(),
        pmix: Some(kauri_proto::service::PmixSpawn { env, parent: rank }),
    }
}

/// Answers a client's queries from the run's `jobs` (namespace, size), `own` being the
/// asker's namespace: `PMIX_QUERY_NAMESPACES` (every job of the run, comma-separated),
/// `PMIX_JOB_SIZE` (of the namespace a `PMIX_NSPACE` qualifier names; the library does not
/// say who asked, so without one it is not known), and the process sets and groups kauri has none of
/// (`PMIX_QUERY_NUM_PSETS`/`PMIX_QUERY_NUM_GROUPS` 0, `PMIX_QUERY_PSET_NAMES` empty).
/// Returns the status (`PMIX_SUCCESS`, `PMIX_ERR_PARTIAL_SUCCESS` when some keys are not
/// known, `PMIX_ERR_NOT_FOUND` when none is) and the answers, each under its key.
fn answer_queries(
    queries: &[pmix::ffi::Query],
    jobs: &[(String, usize)],
) -> (i32, Vec<(String, pmix::ffi::Val)>) {
    use pmix::ffi::{InfoVal, Val};
    let (mut answers, mut missed) = (Vec::new(), 0);
    for q in queries {
        let nspace = q
            .qualifiers
            .iter()
            .find_map(|(k, v)| match (k.as_str(), v) {
                ("pmix.nspace", InfoVal::Str(s)) => Some(s.as_str()),
                _ => None,
            });
        for key in &q.keys {
            let v = match key.as_str() {
                "pmix.qry.ns" => Some(Val::Str(
                    jobs.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                )),
                "pmix.job.size" => jobs
                    .iter()
                    .find(|(n, _)| Some(n.as_str()) == nspace)
                    .map(|(_, s)| Val::U32(*s as u32)),
                "pmix.qry.psetnum" | "pmix.qry.pgrpnum" => Some(Val::Size(0)),
                "pmix.qry.psets" => Some(Val::Str(String::new())),
                _ => None,
            };
            match v {
                Some(v) => answers.push((key.clone(), v)),
                None => {
                    debug!(%key, ?nspace, "PMIx query: not known");
                    missed += 1;
                }
            }
        }
    }
    let status = match (answers.is_empty(), missed) {
        (_, 0) => pmix::ffi::PMIX_SUCCESS,
        (true, _) => pmix::ffi::PMIX_ERR_NOT_FOUND,
        (false, _) => pmix::ffi::PMIX_ERR_PARTIAL_SUCCESS,
    };
    (status, answers)
}

/// A collective's signature: its participants, sorted, as text.
fn collective_sig(procs: &[(String, u32)]) -> String {
    let mut v: Vec<String> = procs.iter().map(|(n, r)| format!("{n}:{r}")).collect();
    v.sort();
    v.join(",")
}

/// The signature of a group operation: the operation, the group's id and its members (so
/// two groups of the same processes, or a construct and a fence over them, stay apart).
fn group_sig(op: pmix::GroupOp, grpid: &str, procs: &[(String, u32)]) -> String {
    format!("group {} {grpid} {}", op.name(), collective_sig(procs))
}

/// The participants of a collective over `procs` that are clients of this process's server.
fn covered(procs: &[(String, u32)]) -> Vec<(String, u32)> {
    procs
        .iter()
        .flat_map(|(n, r)| {
            let local = pmix::local_ranks(n);
            if *r == pmix::ffi::PMIX_RANK_WILDCARD {
                local.into_iter().map(|l| (n.clone(), l)).collect()
            } else if local.contains(r) {
                vec![(n.clone(), *r)]
            } else {
                Vec::new()
            }
        })
        .collect()
}

/// A PMIx publish, lookup or unpublish: one request per name, one callback for the call.
pub(super) struct NameCall {
    batch: pmix::names::Batch,
    reply: NameReply,
}

/// The library's callback for a [`NameCall`].
enum NameReply {
    Op(OpReply),
    Lookup(LookupReply),
}

impl Ctx {
    /// Handles one upcall of the PMIx server library: a name call becomes requests to the
    /// front end, anything else a [`NodeEvent`] (nothing when no PMIx job runs here).
    pub(super) fn upcall(self: &Rc<Self>, u: Upcall) {
        self.heard();
        match u {
            Upcall::Publish {
                rank,
                info,
                types,
                reply,
            } => self.publish(rank, &info, &types, reply),
            Upcall::Unpublish {
                rank, keys, reply, ..
            } => self.unpublish(rank, keys, reply),
            Upcall::Lookup {
                rank,
                keys,
                info,
                reply,
            } => self.lookup(rank, keys, &info, reply),
            Upcall::Spawn {
                rank,
                apps,
                job_info,
                reply,
            } => self.in_pmix(|st| Some(st.spawn(rank, apps, job_info, reply))),
            Upcall::Connect { procs, reply } => {
                self.in_pmix(|st| st.connect(procs, reply, &self.events))
            }
            Upcall::Collective { procs, data, reply } => {
                self.in_pmix(|st| Some(st.collective(procs, data, reply)))
            }
            Upcall::Group {
                op,
                grpid,
                procs,
                data,
                assign_context_id,
                reply,
            } => {
                self.in_pmix(|st| Some(st.group(op, &grpid, procs, data, assign_context_id, reply)))
            }
            Upcall::Connected { rank } => self.in_pmix(|st| Some(st.connected(rank))),
            Upcall::Finalized { rank } => self.in_pmix(|st| Some(st.finalized(rank))),
            Upcall::Query {
                rank,
                queries,
                reply,
            } => self.in_pmix(|st| Some(st.query(rank, queries, reply))),
            Upcall::Abort {
                rank,
                status,
                message,
                procs,
                reply: Some(reply),
            } => self.in_pmix(|st| Some(st.terminate(rank, status, message, procs, reply))),
            Upcall::Abort {
                rank,
                status,
                message,
                ..
            } => self.in_pmix(|_| Some(abort_event(rank, status, message))),
            Upcall::Fence { data, reply } => self.in_pmix(|st| Some(st.fence(data, reply))),
            Upcall::Dmodex {
                nspace,
                rank,
                reply,
            } => self.in_pmix(|st| Some(st.dmodex(nspace, rank, reply))),
        }
    }

    /// Runs `f` on this host's PMIx state (nothing when no PMIx job runs here) and sends the
    /// event it makes, if any.
    fn in_pmix(&self, f: impl FnOnce(&mut PmixState) -> Option<NodeEvent>) {
        let mut st = self.pmix.borrow_mut();
        let Some(st) = st.as_mut() else { return };
        if let Some(ev) = f(st) {
            let _ = self.events.send(ev);
        }
    }

    /// The name of client `rank` of this host's job (`nspace:rank`), as a name's publisher.
    fn client_name(&self, rank: u32) -> Option<String> {
        let ns = self.pmix.borrow().as_ref().map(|p| p.nspace.clone());
        Some(format!("{}:{rank}", ns.unwrap_or_default()))
    }

    /// `PMIx_Publish`: one publish request per name.
    fn publish(
        self: &Rc<Self>,
        rank: u32,
        info: &[(String, pmix::ffi::InfoVal)],
        types: &[u16],
        reply: OpReply,
    ) {
        let by = self.client_name(rank);
        let items = match publish_items(info, types, by.as_deref().unwrap_or("")) {
            Ok(items) => items,
            Err(status) => return reply.done(status),
        };
        let asks = items
            .into_iter()
            .map(|(name, port)| {
                let s = Service::Publish {
                    name: name.clone(),
                    port,
                    by: by.clone(),
                };
                (name, s)
            })
            .collect();
        self.ask_names(asks, NameReply::Op(reply), Wait::No)
    }

    /// `PMIx_Unpublish`: one unpublish request per name.
    fn unpublish(self: &Rc<Self>, rank: u32, keys: Vec<String>, reply: OpReply) {
        if keys.is_empty() {
            // "Everything this process published": the table is not kept by process.
            return reply.done(PMIX_ERR_NOT_SUPPORTED);
        }
        let by = self.client_name(rank);
        let asks = name_asks(keys, |name| Service::Unpublish {
            name,
            by: by.clone(),
        });
        self.ask_names(asks, NameReply::Op(reply), Wait::No)
    }

    /// `PMIx_Lookup`: one lookup request per name, waiting as the call's info says.
    fn lookup(
        self: &Rc<Self>,
        rank: u32,
        keys: Vec<String>,
        info: &[(String, pmix::ffi::InfoVal)],
        reply: LookupReply,
    ) {
        if keys.is_empty() {
            return reply.done(PMIX_ERR_BAD_PARAM, &[], "");
        }
        let wait = lookup_wait(info);
        let by = self.client_name(rank);
        let asks = name_asks(keys, |name| Service::Lookup {
            name,
            wait,
            by: by.clone(),
        });
        self.ask_names(asks, NameReply::Lookup(reply), wait)
    }

    /// Sends one name request per `(name, request)` of a PMIx call up to the front end (as
    /// the PMI engine's requests go); `reply` answers the call once every name is answered,
    /// or when a lookup's wait is over.
    fn ask_names(self: &Rc<Self>, asks: Vec<(String, Service)>, reply: NameReply, wait: Wait) {
        let call = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let call = st.next_call;
            st.next_call += 1;
            let mut names = Vec::with_capacity(asks.len());
            for (i, (name, service)) in asks.into_iter().enumerate() {
                let id = PMIX_REQUEST | st.next_request;
                st.next_request += 1;
                st.requests.insert(id, (call, i));
                names.push(name);
                let _ = self
                    .events
                    .send(NodeEvent::Engine(Output::Request { id, service }));
            }
            let batch = pmix::names::Batch::new(names);
            st.calls.insert(call, NameCall { batch, reply });
            call
        };
        if let Wait::For(ms) = wait {
            let ctx: Weak<Ctx> = Rc::downgrade(self);
            tokio::task::spawn_local(async move {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                if let Some(c) = ctx.upgrade() {
                    debug!(call, ms, "a PMIx lookup's wait is over");
                    c.name_call_done(call, pmix::ffi::PMIX_ERR_TIMEOUT, Vec::new());
                }
            });
        }
    }

    /// The front end's answer to name request `id` (see [`Ctx::ask_names`]).
    pub(super) fn name_reply(&self, id: u64, reply: &ServiceReply) {
        let done = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let Some((call, i)) = st.requests.remove(&id) else {
                return; // its call ended already (a lookup's wait was over)
            };
            let Some(c) = st.calls.get_mut(&call) else {
                return;
            };
            c.batch
                .answer(i, pmix::names::result_of(reply))
                .map(|(status, found)| (call, status, found))
        };
        if let Some((call, status, found)) = done {
            self.name_call_done(call, status, found);
        }
    }

    /// Ends name call `call` (if it has not ended): its callback gets `status` and, for a
    /// lookup, the names found.
    fn name_call_done(&self, call: u64, status: i32, found: Vec<(String, String)>) {
        let (c, nspace) = {
            let mut st = self.pmix.borrow_mut();
            let Some(st) = st.as_mut() else { return };
            let Some(c) = st.calls.remove(&call) else {
                return;
            };
            st.requests.retain(|_, (k, _)| *k != call);
            (c, st.nspace.clone())
        };
        debug!(call, status, found = found.len(), "PMIx name call done");
        // Outside the borrows: the library may take its time in the callback.
        match c.reply {
            NameReply::Op(r) => r.done(status),
            // The publisher's process is not kept with the name: the answers are said to
            // come from the asker's own namespace.
            NameReply::Lookup(r) => r.done(status, &found, &nspace),
        }
    }
}

/// One name request per name of a PMIx call, each made by `service` from the name.
fn name_asks(names: Vec<String>, service: impl Fn(String) -> Service) -> Vec<(String, Service)> {
    names
        .into_iter()
        .map(|name| {
            let s = service(name.clone());
            (name, s)
        })
        .collect()
}

/// `PMIx_Abort` of the whole job by client `rank`: the engine's abort, as a PMI rank's.
fn abort_event(rank: u32, status: i32, message: String) -> NodeEvent {
    NodeEvent::Engine(Output::Abort {
        rank: Some(rank as usize),
        code: status,
        message,
    })
}

impl PmixState {
    /// The id of the next request to the front end.
    fn next_request_id(&mut self) -> u64 {
        let id = self.next_req;
        self.next_req += 1;
        id
    }

    /// `PMIx_Spawn` by client `rank`: a spawn request to the front end.
    fn spawn(
        &mut self,
        rank: u32,
        apps: Vec<pmix::SpawnApp>,
        job_info: Vec<(String, String)>,
        reply: SpawnReply,
    ) -> NodeEvent {
        for (k, v) in &job_info {
            if !matches!(k.as_str(), "pmix.ppr" | "pmix.mapby") {
                tracing::info!(key = %k, value = %v, "PMIx spawn: job directive not acted on");
            }
        }
        let id = self.next_request_id();
        self.spawns.insert(id, reply);
        NodeEvent::Engine(Output::Request {
            id,
            service: spawn_service(rank, apps, &job_info),
        })
    }

    /// `PMIx_Connect` to `procs`: done at once when every namespace is registered here;
    /// otherwise the plan of each unknown one is asked for (on `events`) and the connect
    /// waits for them.
    fn connect(
        &mut self,
        procs: Vec<(String, u32)>,
        reply: OpReply,
        events: &JobTx<NodeEvent>,
    ) -> Option<NodeEvent> {
        let mut unknown: Vec<String> = procs
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !pmix::registered(n))
            .collect();
        unknown.sort();
        unknown.dedup();
        if unknown.is_empty() {
            reply.done(pmix::ffi::PMIX_SUCCESS);
            return None;
        }
        let cid = self.next_request_id();
        self.connects.insert(cid, (reply, unknown.len(), None));
        for nspace in unknown {
            let id = self.next_request_id();
            self.plans_asked.insert(id, cid);
            let _ = events.send(NodeEvent::Engine(Output::Request {
                id,
                service: kauri_proto::service::Service::JobOf { nspace },
            }));
        }
        None
    }

    /// A collective over `procs` (a fence over part of a namespace or several, a
    /// disconnect), queued under its signature.
    fn collective(
        &mut self,
        procs: Vec<(String, u32)>,
        data: Vec<u8>,
        reply: CollectiveReply,
    ) -> NodeEvent {
        let sig = collective_sig(&procs);
        let covered = covered(&procs);
        self.collectives
            .entry(sig.clone())
            .or_default()
            .push_back(reply);
        NodeEvent::PmixCollective(PmixCollective {
            sig,
            procs,
            covered,
            data,
            context_id: false,
        })
    }

    /// A group operation over `procs`: a collective of its own.
    fn group(
        &mut self,
        op: pmix::GroupOp,
        grpid: &str,
        procs: Vec<(String, u32)>,
        data: Vec<u8>,
        assign_context_id: bool,
        reply: pmix::ffi::GroupReply,
    ) -> NodeEvent {
        // Its own signature: a fence over the same processes is another collective.
        let sig = group_sig(op, grpid, &procs);
        debug!(%sig, assign_context_id, "PMIx group operation");
        let covered = covered(&procs);
        self.collectives
            .entry(sig.clone())
            .or_default()
            .push_back(CollectiveReply::Group(reply));
        NodeEvent::PmixCollective(PmixCollective {
            sig,
            procs,
            covered,
            data,
            context_id: assign_context_id && op == pmix::GroupOp::Construct,
        })
    }

    /// Client `rank` connected: it is initialized.
    fn connected(&mut self, rank: u32) -> NodeEvent {
        self.initialized.insert(rank as usize);
        NodeEvent::Engine(Output::Initialized {
            rank: rank as usize,
        })
    }

    /// Client `rank` finalized.
    fn finalized(&mut self, rank: u32) -> NodeEvent {
        self.finalized.insert(rank as usize);
        NodeEvent::Engine(Output::Finalized {
            rank: rank as usize,
        })
    }

    /// `PMIx_Query_info` by client `rank`: the run's jobs are asked for, to answer from.
    fn query(
        &mut self,
        rank: u32,
        queries: Vec<pmix::ffi::Query>,
        reply: pmix::ffi::QueryReply,
    ) -> NodeEvent {
        debug!(rank, ?queries, "PMIx query");
        let id = self.next_request_id();
        self.queries.insert(id, (queries, reply));
        NodeEvent::Engine(Output::Request {
            id,
            service: Service::Jobs,
        })
    }

    /// `PMIx_Abort` of some processes (`procs`) by client `rank`: a request to the front end
    /// to terminate them.
    fn terminate(
        &mut self,
        rank: u32,
        status: i32,
        message: String,
        procs: Vec<(String, u32)>,
        reply: pmix::ffi::OpReply,
    ) -> NodeEvent {
        let id = self.next_request_id();
        self.terminates.insert(id, reply);
        NodeEvent::Engine(Output::Request {
            id,
            service: Service::Terminate {
                procs,
                by: format!("{}:{rank}", self.nspace),
                status,
                message,
            },
        })
    }

    /// Every local rank entered the job's next fence, with this host's blob `data`.
    fn fence(&mut self, data: Vec<u8>, reply: ModexReply) -> NodeEvent {
        let epoch = self.next_fence;
        self.next_fence += 1;
        self.fences.insert(epoch, reply);
        NodeEvent::PmixFence {
            epoch,
            data: data.into(),
        }
    }

    /// A local rank wants the data of `rank` of `nspace`, which runs on another host.
    fn dmodex(&mut self, nspace: String, rank: u32, reply: ModexReply) -> NodeEvent {
        let id = self.next_dmodex;
        self.next_dmodex += 1;
        debug!(
            rank,
            id, "PMIx direct modex: asking for a remote rank's data"
        );
        self.dmodex.insert(id, reply);
        NodeEvent::PmixDmodex {
            id,
            rank: rank as usize,
            nspace: (nspace != self.nspace).then_some(nspace),
        }
    }
}

impl Node {
    /// The front end's answer to one of the PMIx server's requests.
    pub(super) fn pmix_service_reply(&self, id: u64, reply: kauri_proto::service::ServiceReply) {
        use kauri_proto::service::ServiceReply;
        let mut st = self.ctx.pmix.borrow_mut();
        let Some(p) = st.as_mut() else { return };
        if let Some((queries, r)) = p.queries.remove(&id) {
            drop(st);
            let jobs = match reply {
                ServiceReply::Jobs(j) => j,
                other => {
                    debug!(?other, "PMIx query answered with something else");
                    Vec::new()
                }
            };
            let (status, answers) = answer_queries(&queries, &jobs);
            return r.done(status, &answers);
        }
        if let Some(r) = p.terminates.remove(&id) {
            drop(st);
            let status = match reply {
                ServiceReply::Done(Ok(())) => pmix::ffi::PMIX_SUCCESS,
                other => {
                    debug!(?other, "PMIx abort of processes refused");
                    pmix::ffi::PMIX_ERROR
                }
            };
            return r.done(status);
        }
        if let Some(r) = p.spawns.remove(&id) {
            drop(st);
            match reply {
                ServiceReply::Spawn(Ok(done)) => r.reply(pmix::ffi::PMIX_SUCCESS, &done.jobid),
                ServiceReply::Spawn(Err(e)) => {
                    say!("kauri: a PMIx spawn failed: {e}");
                    r.reply(pmix::ffi::PMIX_ERR_JOB_FAILED_TO_LAUNCH, "")
                }
                other => {
                    debug!(?other, "PMIx spawn answered with something else");
                    r.reply(pmix::ffi::PMIX_ERROR, "")
                }
            }
            return;
        }
        let Some(cid) = p.plans_asked.remove(&id) else {
            return;
        };
        let registered = match reply {
            ServiceReply::Job(Ok(plan)) => pmix::register_foreign(&plan, p.upcall_tx.clone())
                .map(|mine| {
                    if mine {
                        p.foreign.push(plan.kvsname.clone());
                    }
                })
                .map_err(|e| e.to_string()),
            ServiceReply::Job(Err(e)) => Err(e.to_string()),
            other => Err(format!("answered with {other:?}")),
        };
        let Some(c) = p.connects.get_mut(&cid) else {
            return;
        };
        c.1 -= 1;
        if let Err(e) = registered {
            c.2.get_or_insert(e);
        }
        if c.1 > 0 {
            return;
        }
        let (reply, _, err) = p.connects.remove(&cid).expect("the connect is there");
        drop(st);
        match err {
            None => reply.done(pmix::ffi::PMIX_SUCCESS),
            Some(e) => {
                say!("kauri: a PMIx connect failed: {e}");
                reply.done(pmix::ffi::PMIX_ERR_NOT_FOUND)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::PMIX_REQUESTS;
    use super::*;
    use pmix::ffi::{InfoVal, Query, Val};

    #[test]
    fn queries_are_answered_from_the_runs_jobs() {
        let jobs = vec![("j1".to_string(), 4), ("j1_s1".to_string(), 2)];
        let q = |keys: &[&str], ns: Option<&str>| Query {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            qualifiers: ns
                .map(|n| vec![("pmix.nspace".to_string(), InfoVal::Str(n.into()))])
                .unwrap_or_default(),
        };
        let (status, a) = answer_queries(&[q(&["pmix.qry.ns", "pmix.qry.psetnum"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_SUCCESS);
        assert_eq!(
            a,
            vec![
                ("pmix.qry.ns".into(), Val::Str("j1,j1_s1".into())),
                ("pmix.qry.psetnum".into(), Val::Size(0)),
            ]
        );
        let (status, a) = answer_queries(&[q(&["pmix.job.size"], Some("j1_s1"))], &jobs);
        assert_eq!(
            (status, a),
            (
                pmix::ffi::PMIX_SUCCESS,
                vec![("pmix.job.size".into(), Val::U32(2))]
            )
        );
        // Unqualified, the size is not known (the library does not say who asks).
        let (status, _) = answer_queries(&[q(&["pmix.job.size"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_ERR_NOT_FOUND);
        let (status, a) = answer_queries(&[q(&["pmix.qry.nsinfo", "pmix.qry.psets"], None)], &jobs);
        assert_eq!(status, pmix::ffi::PMIX_ERR_PARTIAL_SUCCESS);
        assert_eq!(a, vec![("pmix.qry.psets".into(), Val::Str(String::new()))]);
    }

    #[test]
    fn name_requests_go_one_per_name_in_order() {
        let asks = name_asks(vec!["a".into(), "b".into()], |name| Service::Unpublish {
            name,
            by: Some("j1:0".into()),
        });
        let names: Vec<&str> = asks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        match &asks[1].1 {
            Service::Unpublish { name, by } => {
                assert_eq!((name.as_str(), by.as_deref()), ("b", Some("j1:0")))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_client_s_connect_and_finalize_are_kept_and_reported() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut st = PmixState::new("j1".into(), tx);
        assert!(matches!(
            st.connected(3),
            NodeEvent::Engine(Output::Initialized { rank: 3 })
        ));
        assert!(matches!(
            st.finalized(3),
            NodeEvent::Engine(Output::Finalized { rank: 3 })
        ));
        assert!(st.initialized.contains(&3) && st.finalized.contains(&3));
        assert!(!st.initialized.contains(&0));
        assert_eq!(st.next_request_id(), PMIX_REQUESTS);
        assert_eq!(st.next_request_id(), PMIX_REQUESTS + 1);
    }

    #[test]
    fn a_spawn_drops_only_the_per_host_variables_kauri_set() {
        // Not in this process's environment: kauri set it for the parent.
        assert!(set_per_host(VADER_DIR_VAR, "/dev/shm/kauri-x-n0-1"));
        assert!(set_per_host(YIELD_VAR, "1"));
        // Anything else is the program's.
        assert!(!set_per_host("OMPI_MCA_btl", "self,tcp"));
        assert!(!set_per_host("OMPI_PARENT_PORT", "x"));
    }
}
