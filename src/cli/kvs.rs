//! `kauri kvs …`: the job's key-value store from a shell script running as a rank.
//!
//! Each call is one short PMI-1 session over the rank's own connection (`PMI_FD`, or
//! `PMI_PORT`/`PMI_ID`): init, the operation, finalize. PMI-1 because its sessions can follow
//! one another on the same socket (a PMI-2 session switches the socket's framing for good);
//! finalize because a script may end at any time after its last call: the front end ends a job
//! when a rank exits 0 *without* finalize while others still use PMI, which would fail every
//! script whose ranks end at their own pace. Calls from one rank share its one socket, so they
//! must not overlap: run them one after another.
//!
//! So a rank between calls counts as finalized. What still catches a script rank that leaves
//! too early is the fence itself: a fence needs every rank, and the PMI engine fails the job
//! when a rank has exited, finalized or not, while others wait in a fence it never entered
//! ([`crate::proto::pmi::Engine::rank_exited`]); when every rank of a host has ended, the tree
//! reports the fence that can never complete ([`crate::tree::branch::Branch`]).
//!
//! `put` publishes at once, with no fence: the pair goes up the tree to the front end, which
//! sends it to every host's copy of the KVS (a `put` under the kvsname `kauri.publish`). So
//! `get --wait` can wait for a pair another rank puts later. `fence` is the job-wide barrier.
//!
//! ```text
//! kauri kvs put KEY VALUE
//! kauri kvs fence | barrier
//! kauri kvs get KEY [--wait]
//! ```

use crate::proto::pmi::PUBLISH_KVS;
use pmi_wire::client::{Client, ClientError};
use pmi_wire::Version;
use std::time::Duration;

const USAGE: &str = "usage: kauri kvs put KEY VALUE | get KEY [--wait] | fence | barrier";

/// Runs `kauri kvs ARGS`; returns the exit status (0, 1 on failure, 2 on bad usage). `-h`
/// and `--help` print the usage on stdout.
pub fn run(args: &[String]) -> u8 {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match words.as_slice() {
        ["put", key, value] => session(|c| c.put_in(PUBLISH_KVS, key, value).map(|_| None)),
        ["get", key] => match session(|c| c.get(key)) {
            Ok(None) => Err(format!("{key} not found (--wait waits for it)")),
            other => other,
        },
        ["get", key, "--wait"] | ["get", "--wait", key] => wait_for(key),
        ["fence"] | ["barrier"] => session(|c| c.fence().map(|_| None)),
        ["-h"] | ["--help"] => {
            crate::console::out(&crate::cli::doc::help(&crate::cli::doc::KAURI_KVS));
            return 0;
        }
        _ => {
            say!("kauri kvs: {USAGE} (kauri kvs -h for help)");
            return 2;
        }
    };
    match result {
        Ok(Some(v)) => {
            show!("{v}");
            0
        }
        Ok(None) => 0,
        Err(e) => {
            say!("kauri kvs: {e}");
            1
        }
    }
}

/// The inherited `PMI_FD`, as first seen.
static INHERITED_FD: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();

/// Points `PMI_FD` at a fresh duplicate of the inherited descriptor: a client owns (and at the
/// end closes) its descriptor, and one `kauri kvs get --wait` runs many sessions.
fn fresh_pmi_fd() {
    let fd = *INHERITED_FD.get_or_init(|| {
        std::env::var("PMI_FD")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    });
    if let Some(fd) = fd {
        // SAFETY: dup has no memory-safety preconditions; a bad descriptor gives -1.
        let copy = unsafe { libc::dup(fd) };
        if copy >= 0 {
            std::env::set_var("PMI_FD", copy.to_string());
        }
    }
}

/// One PMI-1 session: connect, `op`, finalize.
fn session(
    op: impl FnOnce(&mut Client) -> Result<Option<String>, ClientError>,
) -> Result<Option<String>, String> {
    fresh_pmi_fd();
    let mut c = Client::from_env(Version::V1).map_err(|e| match e {
        ClientError::NoServer => {
            "not running as a rank of a kauri job (no PMI_FD or PMI_PORT)".to_string()
        }
        e => e.to_string(),
    })?;
    let out = op(&mut c).map_err(|e| e.to_string())?;
    c.finalize().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Reads `key` until it is there, backing off from 20 ms to 1 s between tries.
fn wait_for(key: &str) -> Result<Option<String>, String> {
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = session(|c| c.get(key))? {
            return Ok(Some(v));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
