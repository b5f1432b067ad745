//! The service vocabulary: requests that only the front end can answer ([`Service`]: spawn,
//! publish, unpublish, lookup), sent up the tree by the host whose rank asked, and their
//! answers ([`ServiceReply`]), sent back down to it.
//!
//! PMI-1/PMI-2 ranks and PMIx ranks share the name requests: a PMIx publisher names itself
//! ([`Service::Publish::by`]: only it may unpublish the name), and a PMIx lookup may wait for a
//! name nobody published yet ([`Wait`]).
//!
//! Plain data with serde derives. The sans-IO PMI engine (`pmi`), the PMIx glue and the name
//! server (`nameserver`) speak it without knowing about links, framing or sockets: this module
//! may not import `tree` (the link messages in `tree::msg` carry these types, not the other way
//! round). A spawn's commands are `pmi-wire`'s [`SpawnCommand`], as the ranks sent them.

use crate::proto::kvs::Delta;
use pmi_wire::SpawnCommand;
use serde::{Deserialize, Serialize};

/// A request that only the front end can answer, sent up the tree by the host that got it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Service {
    /// Start a new job (`MPI_Comm_spawn`, `MPI_Comm_spawn_multiple`).
    Spawn {
        /// Its commands; all form one job.
        commands: Vec<SpawnCommand>,
        /// Pairs for the new job's KVS.
        preput: Delta,
        /// A PMIx client's spawn: the new job is a PMIx job.
        pmix: Option<PmixSpawn>,
    },
    /// The plan of the job whose namespace (kvsname) is `nspace`: a PMIx server registers a
    /// job its clients connect to (`PMIx_Connect`).
    JobOf {
        /// The job's namespace.
        nspace: String,
    },
    /// The jobs of the run: each one's namespace (kvsname) and size (a PMIx query).
    Jobs,
    /// Terminate processes (`PMIx_Abort` with a list of processes): `SIGKILL` to each,
    /// after a line that says who asked and why. Answered with `Done` once they have been
    /// signalled.
    Terminate {
        /// The processes, as namespace (kvsname) and rank (`PMIX_RANK_WILDCARD`: every rank
        /// of it).
        procs: Vec<(String, u32)>,
        /// Who asked: `namespace:rank`.
        by: String,
        /// The status it gave.
        status: i32,
        /// Its message.
        message: String,
    },
    /// Publish a service name.
    Publish {
        /// The name.
        name: String,
        /// Its port.
        port: String,
        /// The process that publishes it (`nspace:rank`, a PMIx client), or `None` for a PMI
        /// rank, whose names belong to the run (or, through `kauri nameserver`, to the run's
        /// connection). Only the same publisher may unpublish the name.
        by: Option<String>,
    },
    /// Withdraw a service name.
    Unpublish {
        /// The name.
        name: String,
        /// Who asks (see [`Service::Publish::by`]).
        by: Option<String>,
    },
    /// Look a service name up.
    Lookup {
        /// The name.
        name: String,
        /// Whether to wait for a name that is not published yet.
        wait: Wait,
        /// The asking process (`namespace:rank`), for a PMIx lookup: a lookup that waits
        /// ends when every process of the run still running waits in one.
        by: Option<String>,
    },
}

/// Whether a lookup waits for its name to be published (PMIx's `PMIX_WAIT`, with
/// `PMIX_TIMEOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wait {
    /// A name nobody published is an error at once (PMI, and PMIx without `PMIX_WAIT`).
    No,
    /// The answer comes when the name is published.
    Forever,
    /// As `Forever`, for at most this many milliseconds; the asking host answers its client
    /// with a timeout when they are over.
    For(u64),
}

impl Service {
    /// A PMI rank's publish: the name belongs to the run.
    pub fn publish(name: String, port: String) -> Service {
        Service::Publish {
            name,
            port,
            by: None,
        }
    }

    /// A PMI rank's unpublish.
    pub fn unpublish(name: String) -> Service {
        Service::Unpublish { name, by: None }
    }

    /// A PMI rank's lookup: it does not wait.
    pub fn lookup(name: String) -> Service {
        Service::Lookup {
            name,
            wait: Wait::No,
            by: None,
        }
    }
}

/// The front end's answer to a [`Service`] request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceReply {
    /// A spawn's outcome: the new job's kvsname, or why it failed.
    Spawn(Result<SpawnDone, String>),
    /// A publish's or unpublish's outcome.
    Done(Result<(), String>),
    /// A lookup's outcome: the port.
    Found(Result<String, String>),
    /// The plan of a job ([`Service::JobOf`]).
    Job(Result<Box<crate::plan::JobPlan>, String>),
    /// The jobs of the run ([`Service::Jobs`]): namespace and size, in the order they started.
    Jobs(Vec<(String, usize)>),
}

/// What a PMIx spawn adds to its commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmixSpawn {
    /// Each command's variables for its processes' environment (Open MPI passes
    /// `OMPI_PARENT_PORT` and its `OMPI_MCA_*` settings this way).
    pub env: Vec<Vec<(String, String)>>,
    /// The rank that asked (`PMIX_PARENT_ID`).
    pub parent: u32,
}

/// A spawn that started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnDone {
    /// The new job's kvsname (its PMI-2 job id).
    pub jobid: String,
    /// How many processes it has.
    pub size: usize,
}
