//! The OpenPMIx server library (4.2, or 5.0 as Open MPI 5 carries it), by hand: the
//! `#[repr(C)]` types and the functions Kauri uses (looked up in the library it loads at run
//! time: [`choose_library`]), the upcalls the library makes into Kauri, and the safe wrappers
//! around both. This is the only module of the PMIx server with `unsafe` code.
//!
//! Layouts are those of `pmix_common.h`/`pmix_server.h` 4.2 on LP64 Linux (checked by the
//! `layouts_match_the_c_headers` test, which compiles a C probe against the installed headers
//! when a C compiler and `pkg-config pmix` are there).
//!
//! Threads: the library calls the upcalls ([`Upcall`]) on its own progress thread. Each one
//! only turns its arguments into Rust values and sends them, with a [`ModexReply`] where an
//! answer is due, into the channel registered for the namespace ([`route`]); the agent's
//! event loop answers later, from its own thread (the library shifts every callback into its
//! progress thread itself, so that is allowed).
//!
//! By concern: `types` (the C side), `loader` (the library and its symbol table), `values`
//! (Rust values to and from `pmix_info_t`), `locality` (where a bound rank is), `upcall`
//! (the requests and their routing), `replies` (their answers), `trampolines` and
//! `unsupported` (the server module's upcalls), `server` (the calls into the server
//! library), `client` (the client side).

#![allow(non_camel_case_types)]

mod client;
mod loader;
mod locality;
mod replies;
mod server;
mod trampolines;
mod types;
mod unsupported;
mod upcall;
mod values;

pub use client::PmixClient;
pub use loader::{
    choose_library, error_string, library_file, library_version, loaded_library, release_of,
    LibraryError, NoLibrary, Refused, LIBRARY_VAR,
};
pub use locality::{locate, Distance, Located};
pub use replies::{
    group_results, CollectiveReply, GroupOp, GroupReply, LookupReply, ModexReply, OpReply,
    QueryReply, SpawnReply, GROUP_ASSIGN_CONTEXT_ID, GROUP_CONTEXT_ID, GROUP_ENDPT_DATA,
    GROUP_LOCAL_ONLY, GROUP_MEMBERSHIP,
};
pub use server::{
    deregister_nspace, dmodex_request, finalize, generate, init, notify_failure, register_client,
    register_nspace, running, setup_fork, GROUPS_VAR, PORT_VAR,
};
pub use types::{
    pmix_proc_t, Status, PMIX_ERROR, PMIX_ERR_BAD_PARAM, PMIX_ERR_EXISTS,
    PMIX_ERR_JOB_FAILED_TO_LAUNCH, PMIX_ERR_LOST_CONNECTION, PMIX_ERR_NOT_FOUND,
    PMIX_ERR_NOT_SUPPORTED, PMIX_ERR_NO_PERMISSIONS, PMIX_ERR_PARTIAL_SUCCESS,
    PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_PROC_TERM_WO_SYNC,
    PMIX_ERR_TIMEOUT, PMIX_ERR_TYPE_MISMATCH, PMIX_OPERATION_SUCCEEDED, PMIX_RANK_UNDEF,
    PMIX_RANK_WILDCARD, PMIX_SUCCESS,
};
pub use unsupported::unsupported_line;
pub use upcall::{route, route_if_none, unroute, Query, SpawnApp, Upcall};
pub use values::{InfoVal, Val};

#[cfg(test)]
mod tests;
