//! What `kauri pmi` says when it fails: a mistake on its command line, a call of a method that
//! failed, or a check of what came back. Each error's line is the one `kauri pmi` prints.

use super::Method;
use crate::proto::pmix::PmixError;
use pmi_wire::client::ClientError;
use std::ffi::c_int;

/// A mistake on `kauri pmi`'s command line (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmiUsageError {
    /// An option kauri-pmi(1) does not list, or one given where it does not belong.
    #[error("unknown option {0}")]
    UnknownOption(String),
    /// An option without its value.
    #[error("{0} needs a value")]
    NeedsValue(String),
    /// `--size` or `--count` with something else than a number.
    #[error("{option} {value:?}: not a number")]
    NotANumber {
        /// The option.
        option: String,
        /// What it was given.
        value: String,
    },
    /// `--method` with an unknown method.
    #[error("--method {0:?}: use auto, pmi1, pmi2, libpmi2 or pmix")]
    BadMethod(String),
    /// `--count 0`.
    #[error("--count 0: put at least one key")]
    ZeroCount,
    /// `get` without its key.
    #[error("get needs a KEY")]
    NoKey,
    /// A word that is neither an option nor the subcommand.
    #[error("unexpected {0:?}")]
    Unexpected(String),
    /// No subcommand.
    #[error("name a subcommand: barrier, exchange or get KEY")]
    NoSubcommand,
}

/// A call of a session's method that failed, with the call and what the method said.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// `pmi1`, `pmi2`: the environment names no wire server.
    #[error("no PMI server: neither PMI_FD nor PMI_PORT is set (not started by a PMI launcher?)")]
    NoWireServer,
    /// A call of pmi-wire's client failed (`put KEY`, `fence`, `get KEY`, `init`).
    #[error("{call}: {source}")]
    Wire {
        /// The call.
        call: String,
        /// What the client said.
        source: ClientError,
    },
    /// The PMIx client library failed.
    #[error(transparent)]
    Pmix(#[from] PmixError),
    /// `PMIx_Init` failed, and no PMIx server started this process.
    #[error("{0} (PMIX_NAMESPACE is not set: no PMIx server started this process)")]
    PmixUnnamed(PmixError),
    /// A PMIx get failed (`get KEY of rank R`, `get KEY`).
    #[error("{call}: {source}")]
    PmixGet {
        /// The get.
        call: String,
        /// What the library said.
        source: PmixError,
    },
    /// A rank outside the method's range.
    #[error("bad rank {0}")]
    BadRank(i64),
    /// `libpmi2` without a server to talk to: the library would run alone.
    #[error(
        "libpmi2: neither PMI_FD nor PMI_PORT is set: no PMI-2 server to talk to (the library \
         would run as a singleton)"
    )]
    NoLibpmi2Server,
    /// `libpmi2`: the library does not load (the loader's message).
    #[error("cannot load {library}: {why} (Debian: apt install libpmi2-0; or --library PATH)")]
    Load {
        /// The library.
        library: String,
        /// The dynamic loader's message.
        why: String,
    },
    /// `libpmi2`: the library lacks a function of `pmi2.h`.
    #[error("{library} has no {symbol}: not a PMI-2 library")]
    MissingSymbol {
        /// The library.
        library: String,
        /// The function.
        symbol: &'static str,
    },
    /// `libpmi2`: a function's name that C cannot take.
    #[error("bad symbol name {0}")]
    BadSymbol(&'static str),
    /// `libpmi2`: an argument with a NUL byte, which C cannot take.
    #[error("{what} {value:?} holds a NUL byte")]
    Nul {
        /// What it is (`key`, `value`, `--library`).
        what: &'static str,
        /// The argument.
        value: String,
    },
    /// `PMI2_Init` returned an error code.
    #[error("PMI2_Init failed: {0} (is PMI_FD set by a PMI-2 server?)")]
    Pmi2Init(c_int),
    /// Another `pmi2.h` function returned an error code (`PMI2_KVS_Put KEY`).
    #[error("{call} failed: {rc}")]
    Pmi2 {
        /// The call.
        call: String,
        /// Its code.
        rc: c_int,
    },
    /// `PMI2_Info_GetJobAttr` failed, and so did the get tried after it.
    #[error("PMI2_Info_GetJobAttr {key} failed: {rc}; {get}")]
    Pmi2JobAttr {
        /// The key.
        key: String,
        /// `PMI2_Info_GetJobAttr`'s code.
        rc: c_int,
        /// Why the get failed.
        get: Box<SessionError>,
    },
}

/// Why a `kauri pmi` run failed (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum PmiError {
    /// `--method auto` and no server in the environment.
    #[error(
        "no PMI server in the environment (none of PMIX_NAMESPACE, PMI_FD, PMI_PORT): run under \
         a launcher (kauri, mpiexec.hydra, srun --mpi=pmi2|pmix), or name a --method"
    )]
    NoServer,
    /// A call of the session failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// `get`: the key is not there.
    #[error("{0}: not found")]
    NotFound(String),
    /// `exchange`: a rank's key is not there.
    #[error("get {0}: not found")]
    GetNotFound(String),
    /// `exchange`: a rank's value is not the one it put.
    #[error(
        "get {key}: the value differs from what rank {rank} put: {} bytes {:?}, expected {} \
         bytes {:?}",
        got.len(),
        super::clip(got),
        want.len(),
        super::clip(want)
    )]
    Differs {
        /// The key.
        key: String,
        /// The rank that put it.
        rank: i64,
        /// What the get returned.
        got: String,
        /// What the rank put.
        want: String,
    },
    /// `--size` over what the method carries.
    #[error(
        "--size {bytes}: more than the {max} bytes a value may have with {}",
        method.name()
    )]
    TooBig {
        /// The size asked for.
        bytes: usize,
        /// The method's limit.
        max: usize,
        /// The method.
        method: Method,
    },
    /// A failure inside the session, said already (the session ended with it).
    #[error("the session failed")]
    Said,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error's line is the one `kauri pmi` printed when it was built as text.
    #[test]
    fn every_line_is_the_old_one() {
        let s = |x: &str| x.to_string();
        for (e, line) in [
            (PmiUsageError::UnknownOption(s("--x")), "unknown option --x"),
            (
                PmiUsageError::NeedsValue(s("--size")),
                "--size needs a value",
            ),
            (
                PmiUsageError::NotANumber {
                    option: s("--size"),
                    value: s("x"),
                },
                "--size \"x\": not a number",
            ),
            (
                PmiUsageError::BadMethod(s("y")),
                "--method \"y\": use auto, pmi1, pmi2, libpmi2 or pmix",
            ),
            (PmiUsageError::ZeroCount, "--count 0: put at least one key"),
            (PmiUsageError::NoKey, "get needs a KEY"),
            (PmiUsageError::Unexpected(s("z")), "unexpected \"z\""),
            (
                PmiUsageError::NoSubcommand,
                "name a subcommand: barrier, exchange or get KEY",
            ),
        ] {
            assert_eq!(e.to_string(), line);
        }
        let pmix = || PmixError::ClientCall {
            call: "PMIx_Init",
            status: -1,
            name: s("PMIX_ERROR"),
        };
        for (e, line) in [
            (
                SessionError::NoWireServer,
                s(
                    "no PMI server: neither PMI_FD nor PMI_PORT is set (not started by a PMI \
                   launcher?)",
                ),
            ),
            (
                SessionError::Wire {
                    call: s("put k"),
                    source: ClientError::NoServer,
                },
                format!("put k: {}", ClientError::NoServer),
            ),
            (
                SessionError::Pmix(pmix()),
                s("PMIx_Init failed: PMIX_ERROR (-1)"),
            ),
            (
                SessionError::PmixUnnamed(pmix()),
                s(
                    "PMIx_Init failed: PMIX_ERROR (-1) (PMIX_NAMESPACE is not set: no PMIx \
                   server started this process)",
                ),
            ),
            (
                SessionError::PmixGet {
                    call: s("get k of rank 1"),
                    source: PmixError::NoValue,
                },
                s("get k of rank 1: PMIx_Get succeeded without a value"),
            ),
            (SessionError::BadRank(-2), s("bad rank -2")),
            (
                SessionError::NoLibpmi2Server,
                s(
                    "libpmi2: neither PMI_FD nor PMI_PORT is set: no PMI-2 server to talk to \
                   (the library would run as a singleton)",
                ),
            ),
            (
                SessionError::Load {
                    library: s("l.so"),
                    why: s("no file"),
                },
                s(
                    "cannot load l.so: no file (Debian: apt install libpmi2-0; or --library \
                   PATH)",
                ),
            ),
            (
                SessionError::MissingSymbol {
                    library: s("l.so"),
                    symbol: "PMI2_Init",
                },
                s("l.so has no PMI2_Init: not a PMI-2 library"),
            ),
            (SessionError::BadSymbol("a"), s("bad symbol name a")),
            (
                SessionError::Nul {
                    what: "key",
                    value: s("a\0"),
                },
                s("key \"a\\0\" holds a NUL byte"),
            ),
            (
                SessionError::Pmi2Init(14),
                s("PMI2_Init failed: 14 (is PMI_FD set by a PMI-2 server?)"),
            ),
            (
                SessionError::Pmi2 {
                    call: s("PMI2_KVS_Fence"),
                    rc: 3,
                },
                s("PMI2_KVS_Fence failed: 3"),
            ),
            (
                SessionError::Pmi2JobAttr {
                    key: s("k"),
                    rc: 1,
                    get: Box::new(SessionError::BadRank(-1)),
                },
                s("PMI2_Info_GetJobAttr k failed: 1; bad rank -1"),
            ),
        ] {
            assert_eq!(e.to_string(), line);
        }
        for (e, line) in [
            (
                PmiError::NoServer,
                "no PMI server in the environment (none of PMIX_NAMESPACE, PMI_FD, PMI_PORT): \
                 run under a launcher (kauri, mpiexec.hydra, srun --mpi=pmi2|pmix), or name a \
                 --method",
            ),
            (PmiError::Session(SessionError::BadRank(-3)), "bad rank -3"),
            (PmiError::NotFound(s("k")), "k: not found"),
            (PmiError::GetNotFound(s("k")), "get k: not found"),
        ] {
            assert_eq!(e.to_string(), line);
        }
    }
}
