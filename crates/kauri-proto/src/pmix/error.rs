//! What goes wrong with PMIx on a host: the library, its calls, the server's start, and the
//! private directories its files live in. Each error's line is the one kauri prints.

use super::ffi::{NoLibrary, Status};
use std::path::PathBuf;
use std::sync::Arc;

/// A failure of the PMIx server or client of this process.
#[derive(Debug, thiserror::Error)]
pub enum PmixError {
    /// No OpenPMIx library could be loaded (the same for every later use).
    #[error(transparent)]
    NoLibrary(Arc<NoLibrary>),
    /// Another library than the one asked for is loaded already (the one named).
    #[error("the PMIx library {0} is already loaded")]
    AlreadyLoaded(String),
    /// A call of the library returned a failure status.
    #[error("{call}: {name} ({status})")]
    Call {
        /// The C function (`PMIx_server_init`).
        call: &'static str,
        /// The status it returned.
        status: Status,
        /// The library's name for it (`PMIX_ERR_BAD_PARAM`).
        name: String,
    },
    /// A call of the client side (`kauri pmi`) returned a failure status.
    #[error("{call} failed: {name} ({status})")]
    ClientCall {
        /// The C function (`PMIx_Init`).
        call: &'static str,
        /// The status it returned.
        status: Status,
        /// The library's name for it.
        name: String,
    },
    /// A non-blocking call whose completion never came.
    #[error("{0}: the library never completed")]
    NeverCompleted(&'static str),
    /// `PMIx_Get` reported success without a value.
    #[error("PMIx_Get succeeded without a value")]
    NoValue,
    /// The job's size is not among its keys.
    #[error("PMIx_Get pmix.job.size: not found")]
    NoJobSize,
    /// The job's size is not a number (the value given).
    #[error("PMIx_Get pmix.job.size: not a number: {0}")]
    BadJobSize(String),
    /// A thread panicked holding the PMIx state's lock.
    #[error("PMIx state poisoned")]
    Poisoned,
    /// The server library was finalized; it cannot start again in this process.
    #[error("the PMIx server was already finalized")]
    Finalized,
    /// The server library is not running.
    #[error("the PMIx server is not running")]
    NotRunning,
    /// The server was asked to start before any job was offered PMIx.
    #[error("no job was offered PMIx here")]
    NotOffered,
    /// The server library started without an address for its clients.
    #[error("the PMIx server gave its clients no address")]
    NoAddress,
    /// A private directory could not be had.
    #[error(transparent)]
    PrivateDir(#[from] PrivateDirError),
    /// The door ([`super::door`]) cannot listen on loopback.
    #[error("cannot listen for PMIx clients on loopback: {0}")]
    Door(#[source] std::io::Error),
    /// No loopback port of the range (`MPIEXEC_PORT_RANGE`) for the server library.
    #[error(transparent)]
    Port(#[from] kauri_os::ports::PortError),
    /// The job's own directory in the server's could not be made.
    #[error("cannot make the job's PMIx directory: {0}")]
    JobDir(#[source] PrivateDirError),
    /// The job could not be registered with the running library.
    #[error("cannot register the job with the PMIx server: {0}")]
    Register(#[source] Box<PmixError>),
    /// The server library could not start on a host.
    #[error("cannot start the PMIx server on {host}: {source}")]
    Start {
        /// The host.
        host: String,
        /// Why not.
        source: Box<PmixError>,
    },
    /// A job waiting for the server library could not be registered on a host.
    #[error("{source} on {host}")]
    RegisterOn {
        /// The host.
        host: String,
        /// Why not.
        source: Box<PmixError>,
    },
    /// The running library's answer for a waiting job's client failed on a host.
    #[error("PMIx server on {host}: {source}")]
    On {
        /// The host.
        host: String,
        /// Why not.
        source: Box<PmixError>,
    },
}

/// Why a directory kauri makes at a predictable path cannot be used
/// ([`super::create_private_dir`]).
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// `mkdir` failed otherwise than by the path's being taken.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// What is at the path cannot be examined (`lstat`).
    #[error("cannot inspect {}: {source}", path.display())]
    Inspect {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Something is at the path that is not this user's private directory.
    #[error(
        "{} exists and is not a private directory of this user ({why}); refusing to use it",
        path.display()
    )]
    NotPrivate {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        why: NotPrivate,
    },
}

/// What makes a path not a private directory of this user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotPrivate {
    /// A symbolic link (never followed).
    #[error("it is a symbolic link")]
    Symlink,
    /// Not a directory.
    #[error("it is not a directory")]
    NotDirectory,
    /// Owned by another user (this uid).
    #[error("it is owned by uid {0}")]
    Owner(u32),
    /// A mode other than 0700 (this one).
    #[error("its mode is {0:o}, not 700")]
    Mode(u32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmix::ffi::{LibraryError, Refused};
    use crate::pmix::library::{Part, Untrusted};

    fn io() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::EACCES)
    }

    /// Every error's line is the one kauri printed when it was built as text.
    #[test]
    fn every_line_is_the_old_one() {
        let boxed = |e| Box::new(e);
        let denied = "Permission denied (os error 13)";
        let dir = || PrivateDirError::NotPrivate {
            path: "/dev/shm/x".into(),
            why: NotPrivate::Mode(0o777),
        };
        let no_library = NoLibrary(vec![
            Refused::Untrusted {
                path: "/w/libpmix.so.2".into(),
                why: Untrusted::OthersWrite { what: Part::File },
            },
            Refused::Unusable(LibraryError::Loader("libpmix.so.2: no such file".into())),
            Refused::Unusable(LibraryError::MissingSymbol {
                path: "/l/libpmix.so".into(),
                symbol: "PMIx_Init",
            }),
        ]);
        let call = || PmixError::Call {
            call: "PMIx_server_init",
            status: -27,
            name: "PMIX_ERR_INIT".into(),
        };
        let cases: Vec<(PmixError, String)> = vec![
            (
                PmixError::NoLibrary(Arc::new(no_library)),
                "no OpenPMIx library could be loaded (not loading /w/libpmix.so.2: it is \
                 writable by others; cannot use the PMIx library libpmix.so.2: no such file; \
                 cannot use the PMIx library /l/libpmix.so: it has no PMIx_Init); install \
                 libpmix2 or set KAURI_PMIX_LIBRARY"
                    .into(),
            ),
            (
                PmixError::AlreadyLoaded("/a/libpmix.so.2".into()),
                "the PMIx library /a/libpmix.so.2 is already loaded".into(),
            ),
            (call(), "PMIx_server_init: PMIX_ERR_INIT (-27)".into()),
            (
                PmixError::ClientCall {
                    call: "PMIx_Init",
                    status: -1,
                    name: "PMIX_ERROR".into(),
                },
                "PMIx_Init failed: PMIX_ERROR (-1)".into(),
            ),
            (
                PmixError::NeverCompleted("PMIx_server_register_nspace"),
                "PMIx_server_register_nspace: the library never completed".into(),
            ),
            (
                PmixError::NoValue,
                "PMIx_Get succeeded without a value".into(),
            ),
            (
                PmixError::NoJobSize,
                "PMIx_Get pmix.job.size: not found".into(),
            ),
            (
                PmixError::BadJobSize("x".into()),
                "PMIx_Get pmix.job.size: not a number: x".into(),
            ),
            (PmixError::Poisoned, "PMIx state poisoned".into()),
            (
                PmixError::Finalized,
                "the PMIx server was already finalized".into(),
            ),
            (
                PmixError::NotRunning,
                "the PMIx server is not running".into(),
            ),
            (PmixError::NotOffered, "no job was offered PMIx here".into()),
            (
                PmixError::NoAddress,
                "the PMIx server gave its clients no address".into(),
            ),
            (
                PmixError::PrivateDir(dir()),
                "/dev/shm/x exists and is not a private directory of this user (its mode is \
                 777, not 700); refusing to use it"
                    .into(),
            ),
            (
                PmixError::Door(io()),
                format!("cannot listen for PMIx clients on loopback: {denied}"),
            ),
            (
                PmixError::Port(kauri_os::ports::PortError::RangeFull {
                    range: kauri_core::plan::port_range::PortRange::parse(
                        "MPIEXEC_PORT_RANGE",
                        "5000:5001",
                    )
                    .unwrap(),
                }),
                "every port of MPIEXEC_PORT_RANGE=5000:5001 is taken or reserved by another kauri job".into(),
            ),
            (
                PmixError::JobDir(PrivateDirError::Create {
                    path: "/t/ns-1".into(),
                    source: io(),
                }),
                format!("cannot make the job's PMIx directory: cannot create /t/ns-1: {denied}"),
            ),
            (
                PmixError::Register(boxed(call())),
                "cannot register the job with the PMIx server: PMIx_server_init: \
                 PMIX_ERR_INIT (-27)"
                    .into(),
            ),
            (
                PmixError::Start {
                    host: "b".into(),
                    source: boxed(PmixError::PrivateDir(PrivateDirError::Inspect {
                        path: "/t".into(),
                        source: io(),
                    })),
                },
                format!("cannot start the PMIx server on b: cannot inspect /t: {denied}"),
            ),
            (
                PmixError::RegisterOn {
                    host: "b".into(),
                    source: boxed(PmixError::NotRunning),
                },
                "the PMIx server is not running on b".into(),
            ),
            (
                PmixError::On {
                    host: "b".into(),
                    source: boxed(call()),
                },
                "PMIx server on b: PMIx_server_init: PMIX_ERR_INIT (-27)".into(),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line, "{e:?}");
        }
        for (why, line) in [
            (NotPrivate::Symlink, "it is a symbolic link"),
            (NotPrivate::NotDirectory, "it is not a directory"),
            (NotPrivate::Owner(7), "it is owned by uid 7"),
            (NotPrivate::Mode(0o755), "its mode is 755, not 700"),
        ] {
            assert_eq!(why.to_string(), line);
        }
        assert_eq!(
            LibraryError::NulInName("a\0b".into()).to_string(),
            "\"a\\0b\": a NUL in the name"
        );
        assert_eq!(
            LibraryError::CannotLoad("x.so".into()).to_string(),
            "x.so: cannot be loaded"
        );
    }

    /// Why a library is not loaded: every reason's line.
    #[test]
    fn every_untrusted_line_is_the_old_one() {
        let d = || Part::Directory("/opt/lib".into());
        for (e, line) in [
            (
                Untrusted::Resolve(std::io::Error::from_raw_os_error(libc::ENOENT)),
                "cannot resolve it: No such file or directory (os error 2)",
            ),
            (
                Untrusted::Read {
                    path: "/opt".into(),
                    source: std::io::Error::from_raw_os_error(libc::EACCES),
                },
                "cannot read /opt: Permission denied (os error 13)",
            ),
            (
                Untrusted::Owner {
                    what: d(),
                    uid: 5,
                    me: 1000,
                },
                "its directory /opt/lib is owned by uid 5, not by root or uid 1000 who runs kauri",
            ),
            (
                Untrusted::OthersWrite { what: Part::File },
                "it is writable by others",
            ),
            (
                Untrusted::GroupWrite { what: d(), gid: 9 },
                "its directory /opt/lib is writable by its group (gid 9)",
            ),
        ] {
            assert_eq!(e.to_string(), line);
        }
    }
}
