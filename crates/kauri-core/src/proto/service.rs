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
    /// A publish's, unpublish's or terminate's outcome.
    Done(Result<(), Refused>),
    /// A lookup's outcome: the port.
    Found(Result<String, Refused>),
    /// The plan of a job ([`Service::JobOf`]).
    Job(Result<Box<crate::plan::JobPlan>, NoPlan>),
    /// The jobs of the run ([`Service::Jobs`]): namespace and size, in the order they started.
    Jobs(Vec<(String, usize)>),
}

/// Why a job's plan was not given ([`Service::JobOf`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum NoPlan {
    /// No job of the run that is still running has that namespace.
    #[error("no running job of this run is named {nspace}")]
    NoJob {
        /// The namespace asked for.
        nspace: String,
    },
    /// The name server was asked: it serves names, not jobs.
    #[error("not a name request")]
    NotANameRequest,
}

/// Why the front end (or the name server) refused a publish, an unpublish, a lookup or a
/// terminate. Each prints the reason a PMI rank is given; PMIx statuses and a waiting lookup
/// are decided by the variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refused {
    /// The name is published already.
    #[error("the name {name} is already published")]
    Exists {
        /// The name.
        name: String,
    },
    /// Someone else published the name: only they may unpublish it.
    #[error("the name {name} was published by {by}; only its publisher may unpublish it")]
    NotYours {
        /// The name.
        name: String,
        /// Who published it.
        by: Publisher,
    },
    /// Nobody published the name.
    #[error("the name {name} is not published")]
    NotPublished {
        /// The name.
        name: String,
    },
    /// Nobody published the name, and no process of the run is left that could (every one
    /// still running waits in a lookup).
    #[error("nobody is left to publish the name {name}: it is not published")]
    NobodyLeft {
        /// The name.
        name: String,
    },
    /// A terminate named a namespace that is no job of the run.
    #[error("no job of this run is named {ns}")]
    NoJob {
        /// The namespace.
        ns: String,
    },
    /// A terminate named a rank its job does not have.
    #[error("{ns} has no rank {rank}")]
    NoRank {
        /// The namespace.
        ns: String,
        /// The rank.
        rank: u32,
    },
    /// Anything else (a full table, an unreachable name server, a refused key, …): the
    /// reason as given.
    #[error("{0}")]
    Other(String),
}

impl Refused {
    /// True when the name asked for is not published (a lookup that waits keeps waiting).
    pub fn not_published(&self) -> bool {
        matches!(
            self,
            Refused::NotPublished { .. } | Refused::NobodyLeft { .. }
        )
    }
}

/// Who published a name, as [`Refused::NotYours`] tells it to another asker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Publisher {
    /// A PMIx process of the same client (the asker is another of its processes).
    Process(String),
    /// A PMI rank of the same client (which cannot name itself).
    PmiRank,
    /// Another client of the name server.
    AnotherClient,
}

impl std::fmt::Display for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Publisher::Process(p) => write!(f, "process {p}"),
            Publisher::PmiRank => f.write_str("a PMI rank"),
            Publisher::AnotherClient => f.write_str("another client"),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::{NoPlan, Publisher, Refused};

    /// Each reason a plan was not given prints the line kauri gave when it was text.
    #[test]
    fn each_missing_plan_prints_its_line() {
        let nspace = "kvs_2".to_string();
        assert_eq!(
            NoPlan::NoJob { nspace }.to_string(),
            "no running job of this run is named kvs_2"
        );
        assert_eq!(NoPlan::NotANameRequest.to_string(), "not a name request");
    }

    /// Each refusal prints the reason kauri gave when refusals were text.
    #[test]
    fn each_refusal_prints_its_line() {
        let name = || "a".to_string();
        let cases = [
            (
                Refused::Exists { name: name() },
                "the name a is already published",
            ),
            (
                Refused::NotYours {
                    name: name(),
                    by: Publisher::Process("x:0".into()),
                },
                "the name a was published by process x:0; only its publisher may unpublish it",
            ),
            (
                Refused::NotYours {
                    name: name(),
                    by: Publisher::PmiRank,
                },
                "the name a was published by a PMI rank; only its publisher may unpublish it",
            ),
            (
                Refused::NotYours {
                    name: name(),
                    by: Publisher::AnotherClient,
                },
                "the name a was published by another client; only its publisher may unpublish it",
            ),
            (
                Refused::NotPublished { name: name() },
                "the name a is not published",
            ),
            (
                Refused::NoJob { ns: "kvs_1".into() },
                "no job of this run is named kvs_1",
            ),
            (
                Refused::NoRank {
                    ns: "kvs_1".into(),
                    rank: 9,
                },
                "kvs_1 has no rank 9",
            ),
            (
                Refused::NobodyLeft { name: name() },
                "nobody is left to publish the name a: it is not published",
            ),
            (Refused::Other("no".into()), "no"),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }

    #[test]
    fn only_an_unpublished_name_is_not_published() {
        let name = || "is not published".to_string();
        assert!(Refused::NotPublished { name: name() }.not_published());
        assert!(Refused::NobodyLeft { name: name() }.not_published());
        assert!(!Refused::Exists { name: name() }.not_published());
        assert!(!Refused::Other("the name a is not published".into()).not_published());
    }
}
