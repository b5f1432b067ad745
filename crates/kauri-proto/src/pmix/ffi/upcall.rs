//! What the library asks of Kauri ([`Upcall`]), and the routing of each request to the
//! channel of its namespace.

use super::replies::*;
use super::types::{Status, PMIX_ERR_NOT_FOUND, PMIX_SUCCESS};
use super::values::InfoVal;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tokio::sync::mpsc;

/// What the library asks of its host, delivered to the namespace's channel.
#[derive(Debug)]
pub enum Upcall {
    /// A local client connected (`PMIx_Init`).
    Connected {
        /// Its rank.
        rank: u32,
    },
    /// A local client called `PMIx_Finalize`.
    Finalized {
        /// Its rank.
        rank: u32,
    },
    /// A local client called `PMIx_Abort`.
    Abort {
        /// Its rank.
        rank: u32,
        /// The status it asked for.
        status: i32,
        /// Its message.
        message: String,
        /// The processes to terminate (rank [`PMIX_RANK_WILDCARD`](super::PMIX_RANK_WILDCARD): a whole namespace);
        /// empty: the caller's whole job.
        procs: Vec<(String, u32)>,
        /// Where the answer goes (the library waits for it before it releases the caller).
        reply: Option<OpReply>,
    },
    /// Every local client entered a fence over the whole namespace: `data` is this host's
    /// contribution; answer with every host's contributions, concatenated.
    Fence {
        /// This host's blob.
        data: Vec<u8>,
        /// Where the answer goes.
        reply: ModexReply,
    },
    /// A local client wants the data of rank `rank` of namespace `nspace` (this job's, or
    /// one it connected to), which runs on another host.
    Dmodex {
        /// The namespace of the rank.
        nspace: String,
        /// The rank whose data is wanted.
        rank: u32,
        /// Where the answer goes.
        reply: ModexReply,
    },
    /// A local client asks for a new job (`PMIx_Spawn`: `MPI_Comm_spawn`).
    Spawn {
        /// The rank that asked.
        rank: u32,
        /// The applications, in order.
        apps: Vec<SpawnApp>,
        /// The job-level directives (key, value as text where it is text).
        job_info: Vec<(String, String)>,
        /// Where the new namespace goes.
        reply: SpawnReply,
    },
    /// Local clients connect to the processes `procs` (`PMIx_Connect`): every namespace named
    /// must be known to this server before the answer.
    Connect {
        /// The processes (rank [`PMIX_RANK_WILDCARD`](super::PMIX_RANK_WILDCARD): the whole namespace).
        procs: Vec<(String, u32)>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// Every local participant entered a collective over `procs` that is not a fence over one
    /// whole namespace: a fence over part of a namespace or over several (Open MPI's
    /// `MPI_Comm_disconnect`), or `PMIx_Disconnect`. `data`: this server's contribution.
    Collective {
        /// The participants (rank [`PMIX_RANK_WILDCARD`](super::PMIX_RANK_WILDCARD): the whole namespace).
        procs: Vec<(String, u32)>,
        /// This server's blob.
        data: Vec<u8>,
        /// Where the answer goes.
        reply: CollectiveReply,
    },
    /// Every local member entered `PMIx_Group_construct` or `PMIx_Group_destruct` of group
    /// `grpid` over `procs`: a collective like [`Upcall::Collective`], answered with the
    /// group's results (a context id when asked, every server's contribution).
    Group {
        /// Construct or destruct.
        op: GroupOp,
        /// The group's id (the name the members gave it).
        grpid: String,
        /// The members (rank [`PMIX_RANK_WILDCARD`](super::PMIX_RANK_WILDCARD): the whole namespace).
        procs: Vec<(String, u32)>,
        /// This server's contribution (`PMIX_GROUP_ENDPT_DATA`: its members' endpoint data
        /// and the `PMIX_GROUP_INFO` they gave), opaque; empty for a destruct.
        data: Vec<u8>,
        /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`: the members want a context id unique in the run.
        assign_context_id: bool,
        /// Where the answer goes.
        reply: GroupReply,
    },
    /// A local client publishes: `info` holds its data (key: the name, value: the port) and
    /// its directives (`pmix.range`, `pmix.persist`, and `pmix.euid` added by the library).
    Publish {
        /// Its rank.
        rank: u32,
        /// Data and directives, as passed.
        info: Vec<(String, InfoVal)>,
        /// The `pmix_data_type_t` of each entry of `info` (a published `PMIX_UINT8` goes back
        /// to the lookup as a `PMIX_UINT8`).
        types: Vec<u16>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// A local client withdraws names it published.
    Unpublish {
        /// Its rank.
        rank: u32,
        /// The names.
        keys: Vec<String>,
        /// Its directives.
        info: Vec<(String, InfoVal)>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// A local client asks what the library could not answer itself (`PMIx_Query_info`).
    /// The library does not say which client: the upcall goes to one job of the server.
    Query {
        /// The rank the library named (its own).
        rank: u32,
        /// The queries.
        queries: Vec<Query>,
        /// Where the answers go.
        reply: QueryReply,
    },
    /// A local client looks names up.
    Lookup {
        /// Its rank.
        rank: u32,
        /// The names.
        keys: Vec<String>,
        /// Its directives (`pmix.wait`, `pmix.timeout`, `pmix.range`, …).
        info: Vec<(String, InfoVal)>,
        /// Where the answer goes.
        reply: LookupReply,
    },
}

/// One query of a `PMIx_Query_info`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    /// The keys asked for (`PMIX_QUERY_NAMESPACES`, `PMIX_JOB_SIZE`, …).
    pub keys: Vec<String>,
    /// Its qualifiers (`PMIX_NSPACE`, …).
    pub qualifiers: Vec<(String, InfoVal)>,
}

/// One application of a spawn, as the library passed it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnApp {
    /// The executable.
    pub cmd: String,
    /// Its arguments, without `argv[0]`.
    pub args: Vec<String>,
    /// Variables for its environment (`NAME=VALUE` split).
    pub env: Vec<(String, String)>,
    /// Its working directory, if given.
    pub cwd: Option<String>,
    /// How many processes.
    pub maxprocs: u32,
    /// Its directives (key, value as text where it is text).
    pub info: Vec<(String, String)>,
}

type Routes = Mutex<HashMap<String, mpsc::UnboundedSender<Upcall>>>;

fn routes() -> &'static Routes {
    static R: OnceLock<Routes> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Sends the upcalls of namespace `nspace` to `tx`, unless some channel takes them already;
/// true when this one does now.
pub fn route_if_none(nspace: &str, tx: mpsc::UnboundedSender<Upcall>) -> bool {
    match routes().lock() {
        Ok(mut r) if !r.contains_key(nspace) => {
            r.insert(nspace.to_string(), tx);
            true
        }
        _ => false,
    }
}

/// Sends the upcalls of namespace `nspace` to `tx` (replacing an earlier route).
pub fn route(nspace: &str, tx: mpsc::UnboundedSender<Upcall>) {
    if let Ok(mut r) = routes().lock() {
        r.insert(nspace.to_string(), tx);
    }
}

/// Stops routing namespace `nspace`.
pub fn unroute(nspace: &str) {
    if let Ok(mut r) = routes().lock() {
        r.remove(nspace);
    }
}

pub(super) fn deliver(nspace: &str, up: Upcall) -> bool {
    match routes().lock() {
        Ok(r) => r.get(nspace).is_some_and(|tx| tx.send(up).is_ok()),
        Err(_) => false,
    }
}

/// An upcall's immediate status: accepted when its job took it, `PMIX_ERR_NOT_FOUND` when no
/// job of this server serves the namespace (or its channel is closed).
pub(super) fn delivered(ok: bool) -> Status {
    if ok {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

/// Delivers `up` to the first of `procs`' namespaces this process routes.
pub(super) fn deliver_any(procs: &[(String, u32)], up: Upcall) -> bool {
    let Ok(r) = routes().lock() else { return false };
    procs
        .iter()
        .find_map(|(ns, _)| r.get(ns))
        .is_some_and(|tx| tx.send(up).is_ok())
}

/// Delivers `up` to the job that registered first of those this server serves (the
/// upcalls that do not name a client: the library passes them its own name).
pub(super) fn deliver_first(up: Upcall) -> bool {
    let Ok(r) = routes().lock() else { return false };
    r.iter()
        .min_by(|a, b| a.0.cmp(b.0))
        .is_some_and(|(_, tx)| tx.send(up).is_ok())
}
