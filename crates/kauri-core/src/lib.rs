//! Kauri's core: the state and decisions of a process manager, with no I/O. No tokio, no libc,
//! no file, socket, process, environment or clock call: data in, data out, so that every
//! decision can be tested without a process and every layer above can use it.
//!
//! ```text
//!  proto    the PMI-1 and PMI-2 engine, one job's key-value store as a host sees it, the
//!           service requests only the front end answers, the record of a rank's end, Open
//!           MPI's job ids
//!  launch   the launcher kinds and every fact kauri decides by
//!  plan     what a job is (JobSpec and its words) and the plan sent down the tree, with each
//!           rank's variables
//!  tree     the tree's messages, shape, fence gathers, startup profile, progress lines, the
//!           lines for refused connections, the policy on a rank's end and kauri's status, and
//!           each host's branch (a tree node's decisions, over the Host and Links it drives)
//! ```
//!
//! The crate of each layer re-exports its modules (`kauri-proto`, `kauri-launch`, `kauri-plan`,
//! `kauri-tree`), beside the I/O that uses them.

#![warn(missing_docs)]

pub mod launch {
    //! How an agent reaches a host, as far as it is data: the launcher kinds.
    pub mod kind;
}
pub mod plan;
pub mod proto {
    //! The protocols served to ranks, as state and decisions.
    pub mod kvs;
    pub mod pmi;
    pub mod rank;
    pub mod service;
    pub mod pmix {
        //! What the PMIx server decides without the library: Open MPI's job ids.
        pub mod jobid;

        /// PMIx's status for data that is nowhere (`PMIX_ERR_NOT_FOUND`): the answer to a
        /// direct-modex request for a rank that runs on no host.
        pub const ERR_NOT_FOUND: i32 = -46;
    }
}
pub mod tree {
    //! The tree of agents, as data: its messages, shape, gathers, profile, policy and branches.
    pub mod branch;
    pub mod gather;
    pub mod msg;
    pub mod policy;
    pub mod profile;
    pub mod progress;
    pub mod refusals;
    pub mod shape;
}
