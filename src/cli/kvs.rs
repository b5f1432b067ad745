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

/// Why a `kauri kvs` call failed (exit status 1); each prints the line after `kauri kvs: `.
#[derive(Debug, thiserror::Error)]
pub enum KvsError {
    /// Neither `PMI_FD` nor `PMI_PORT` is set: not started as a rank.
    #[error("not running as a rank of a kauri job (no PMI_FD or PMI_PORT)")]
    NotARank,
    /// The PMI session failed: its connection, the operation or its finalize.
    #[error(transparent)]
    Pmi(ClientError),
    /// `get` without `--wait` found no such key.
    #[error("{0} not found (--wait waits for it)")]
    NotFound(String),
}

impl From<ClientError> for KvsError {
    fn from(e: ClientError) -> KvsError {
        match e {
            ClientError::NoServer => KvsError::NotARank,
            e => KvsError::Pmi(e),
        }
    }
}

/// Runs `kauri kvs ARGS`; returns the exit status (0, 1 on failure, 2 on bad usage). `-h`
/// and `--help` print the usage on stdout.
pub fn run(args: &[String]) -> u8 {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match words.as_slice() {
        ["put", key, value] => session(|c| c.put_in(PUBLISH_KVS, key, value).map(|_| None)),
        ["get", key] => match session(|c| c.get(key)) {
            Ok(None) => Err(KvsError::NotFound(key.to_string())),
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
) -> Result<Option<String>, KvsError> {
    fresh_pmi_fd();
    let mut c = Client::from_env(Version::V1)?;
    let out = op(&mut c).map_err(KvsError::Pmi)?;
    c.finalize().map_err(KvsError::Pmi)?;
    Ok(out)
}

/// Reads `key` until it is there, backing off from 20 ms to 1 s between tries.
fn wait_for(key: &str) -> Result<Option<String>, KvsError> {
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = session(|c| c.get(key))? {
            return Ok(Some(v));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::{ClientError, KvsError};

    /// Each failure prints the line `kauri kvs` printed when its errors were text: a PMI
    /// failure its own line, a missing server the line about ranks.
    #[test]
    fn each_kvs_error_prints_its_line() {
        let cases = [
            (
                KvsError::from(ClientError::NoServer),
                "not running as a rank of a kauri job (no PMI_FD or PMI_PORT)".to_string(),
            ),
            (
                KvsError::from(ClientError::Closed),
                "PMI server closed the connection".to_string(),
            ),
            (
                KvsError::Pmi(ClientError::NoServer),
                "no PMI server: neither PMI_FD nor PMI_PORT is set".to_string(),
            ),
            (
                KvsError::NotFound("k1".into()),
                "k1 not found (--wait waits for it)".to_string(),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line, "{e:?}");
        }
        assert!(matches!(
            KvsError::from(ClientError::NoServer),
            KvsError::NotARank
        ));
    }
}
