//! The PMI-1 and PMI-2 wire protocols: a streaming codec and a blocking client.
//!
//! PMI ("process management interface") is how an MPI process talks to the process manager
//! that started it: it learns its rank and size, publishes its address in a key-value store
//! (KVS), waits at a fence until every peer has done the same, reads its peers' addresses, and
//! asks for more processes (spawn) or for a name service. Two wire protocols carry it over one
//! stream socket per process, inherited as `PMI_FD` or reached over TCP as `PMI_PORT`:
//!
//! * **PMI-1** ([`v1`]): one line per message, `cmd=NAME key=value key=value\n`, with the reply
//!   named differently from the query (`get` → `get_result`). The one multi-line message is
//!   spawn: segments from `mcmd=spawn` to `endcmd`, one `key=value` a line.
//! * **PMI-2** ([`v2`]): after a PMI-1 `cmd=init pmi_version=2 pmi_subversion=0` line and its
//!   PMI-1 reply, every message is a 6-byte decimal length (padded with spaces on either side)
//!   followed by a body `cmd=NAME;key=value;…;` in which `;` ends every pair and a literal `;`
//!   is doubled. Replies are the query name plus `-response`; `thrid` is echoed.
//!
//! Both modules have typed `Request` and `Response` enums with a streaming `parse` (it answers
//! "need more bytes" with `Ok(None)` on a partial message), a `decode` that consumes from a
//! [`bytes::BytesMut`], and an `encode`. Parsing is lenient where real clients differ (token
//! order, unknown keys, white space, optional fields, both spellings of a field) and strict on
//! framing. [`limits`] names every limit; [`WireError`] names every way input can be malformed.
//!
//! [`client`] is a small blocking client for either protocol, usable from a rank program.
//! [`mapping`] reads the `PMI_process_mapping` job attribute (which ranks share a node).
//!
//! The crate knows nothing of any process manager: it has no async runtime and no server
//! state. A server feeds it bytes and acts on the typed messages.

#![warn(missing_docs)]

#[cfg(feature = "client")]
pub mod client;
mod error;
mod fields;
pub mod limits;
pub mod mapping;
pub mod v1;
pub mod v2;

pub use error::WireError;

/// One command of a spawn request: an executable, how many copies, its arguments, its info
/// keys. PMI-1 and PMI-2 carry the same content in different encodings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SpawnCommand {
    /// The executable to start (`execname` in PMI-1, `subcmd` in PMI-2).
    pub execname: String,
    /// How many processes to start for this command (`nprocs` / `maxprocs`).
    pub nprocs: u32,
    /// The arguments, without the executable itself.
    pub args: Vec<String>,
    /// Info keys (`host`, `wdir`, `path`, …) in the order given.
    pub info: Vec<(String, String)>,
}

/// A whole spawn request (`MPI_Comm_spawn` or `MPI_Comm_spawn_multiple`): every command forms
/// one new job, and the preput pairs go into that job's KVS before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spawn {
    /// The commands, in order; a process's `appnum` is the index of its command.
    pub commands: Vec<SpawnCommand>,
    /// Key-value pairs put into the new job's KVS before its processes start.
    pub preput: Vec<(String, String)>,
}

/// The outcome carried by a reply: `rc=0` is success; otherwise `msg` says why.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The return code: 0 for success.
    pub rc: i32,
    /// A short reason (PMI-1 `msg`, PMI-2 `errmsg`). PMI-1 writes its white space as `_`.
    pub msg: Option<String>,
}

impl Status {
    /// Success, with no message.
    pub fn ok() -> Status {
        Status { rc: 0, msg: None }
    }

    /// Failure with a code and a reason.
    pub fn error(rc: i32, msg: impl Into<String>) -> Status {
        Status {
            rc,
            msg: Some(msg.into()),
        }
    }

    /// True when `rc` is 0.
    pub fn is_ok(&self) -> bool {
        self.rc == 0
    }
}

/// Which wire protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// PMI-1: line-oriented.
    V1,
    /// PMI-2: length-prefixed frames.
    V2,
}

impl Version {
    /// The `pmi_version`/`pmi_subversion` pair a client offers in `init` for this protocol.
    pub fn offered(self) -> (u32, u32) {
        match self {
            Version::V1 => (1, 1),
            Version::V2 => (2, 0),
        }
    }
}
