//! What Kauri's two C PMI client libraries share.
//!
//! `libpmi.so` (crate `kauri-pmi1`) and `libpmi2.so` (crate `kauri-pmi2`) are thin C-ABI
//! shells over [`pmi_wire::client::Client`]. Each keeps one session per process behind a
//! mutex; this crate holds the parts both need:
//!
//! * [`Backend`]: a session talks either to a PMI server found through the environment
//!   (`PMI_FD`, or `PMI_PORT` with `PMI_ID`), or, when there is none, to a [`LocalJob`]: the
//!   singleton mode of MPICH's clients (size 1, rank 0, a KVS inside the process) without
//!   starting a process manager.
//! * [`escape`]: the reversible encoding that lets PMI-1 values carry spaces, and the value
//!   length that keeps every `put` line within what servers read.
//! * [`clique`]: the ranks sharing the caller's node, from `PMI_process_mapping`.
//! * [`ffi`]: the only `unsafe` code of this crate, reading and writing C arguments.
//! * [`guard`]: runs an API call so that a panic becomes an error code, never an unwind
//!   across the C boundary.

#![warn(missing_docs)]

pub mod escape;
pub mod ffi;

use pmi_wire::client::{Client, ClientError};
use pmi_wire::mapping::ProcessMapping;
use pmi_wire::Version;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::{Mutex, MutexGuard};

/// Where a session's requests go.
pub enum Backend {
    /// A PMI server reached through the environment.
    Server(Client),
    /// No server: a job of one process whose stores live in this process.
    Local(LocalJob),
}

impl Backend {
    /// Connects to the server named by `PMI_FD` / `PMI_PORT` and runs `version`'s handshake;
    /// with neither variable set, a singleton [`LocalJob`]. A variable that is set but
    /// unusable, or a server that refuses, is an error (never silently a singleton).
    pub fn from_env(version: Version) -> Result<Backend, ClientError> {
        match Client::from_env(version) {
            Ok(c) => Ok(Backend::Server(c)),
            Err(ClientError::NoServer) => Ok(Backend::Local(LocalJob::new())),
            Err(e) => Err(e),
        }
    }
}

/// The stores of a singleton: the job's KVS, the node attributes and the published names,
/// all private to this process.
#[derive(Debug, Default)]
pub struct LocalJob {
    /// The KVS name: `singinit_kvs_<pid>_0`, the name MPICH's singleton client uses.
    pub kvsname: String,
    /// The key-value store (puts are visible at once: there is nobody to fence with).
    pub kvs: HashMap<String, String>,
    /// Node attributes (PMI-2).
    pub node_attrs: HashMap<String, String>,
    /// Published service names and their ports.
    pub names: HashMap<String, String>,
}

impl LocalJob {
    /// An empty singleton job.
    pub fn new() -> LocalJob {
        LocalJob {
            kvsname: format!("singinit_kvs_{}_0", std::process::id()),
            ..Default::default()
        }
    }

    /// Publishes `name`; false when it is already published.
    pub fn publish(&mut self, name: &str, port: &str) -> bool {
        if self.names.contains_key(name) {
            return false;
        }
        self.names.insert(name.to_string(), port.to_string());
        true
    }
}

/// The ranks on the same node as `rank` in a job of `size`, ascending, from the value of
/// `PMI_process_mapping`. When the mapping is absent, empty or unreadable, the clique is
/// `rank` alone (the caller then treats every peer as remote, which is always safe).
pub fn clique(mapping: Option<&str>, rank: usize, size: usize) -> Vec<usize> {
    let ranks = mapping
        .and_then(|m| ProcessMapping::parse(m).ok())
        .map(|m| m.clique(rank, size))
        .unwrap_or_default();
    if ranks.is_empty() {
        vec![rank]
    } else {
        ranks
    }
}

/// Runs one API call: its result, or `on_panic` if it panicked (a bug; the panic message has
/// been printed by the default hook). Nothing unwinds into C.
pub fn guard(on_panic: c_int, call: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or(on_panic)
}

/// Locks a library's session mutex; a mutex poisoned by an earlier panic is still used (the
/// state inside stays consistent: every call either completes or leaves it unchanged).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `PMI_DEBUG` (PMI-1) or `PMI2_DEBUG` (PMI-2) asks for a trace of failures on stderr.
pub fn debug_enabled(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clique_from_mapping_or_alone() {
        assert_eq!(clique(Some("(vector,(0,2,2))"), 3, 4), [2, 3]);
        assert_eq!(clique(Some("(vector,(0,1,1))"), 1, 3), [0, 1, 2]);
        assert_eq!(clique(Some(""), 1, 3), [1]);
        assert_eq!(clique(Some("garbage"), 2, 3), [2]);
        assert_eq!(clique(None, 0, 1), [0]);
    }

    #[test]
    fn guard_turns_a_panic_into_the_code() {
        assert_eq!(guard(-1, || 5), 5);
        assert_eq!(guard(-1, || panic!("bug")), -1);
    }

    #[test]
    fn singleton_names() {
        let mut j = LocalJob::new();
        assert!(j.kvsname.starts_with("singinit_kvs_"));
        assert!(j.publish("a", "p"));
        assert!(!j.publish("a", "q"));
        assert_eq!(j.names["a"], "p");
    }

    #[test]
    fn no_server_means_singleton() {
        // The test process was not started by a PMI server (the harness scrubs PMI_FD).
        if std::env::var_os("PMI_FD").is_none() && std::env::var_os("PMI_PORT").is_none() {
            assert!(matches!(
                Backend::from_env(Version::V1),
                Ok(Backend::Local(_))
            ));
        }
    }
}
