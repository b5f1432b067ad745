//! What goes wrong on a host: starting its ranks ([`NodeError`], with a singleton's
//! `singinit` in [`SingletonError`]), reading its topology ([`TopologyError`]), making the
//! ranks' topology XML ([`HwlocError`]) and writing the output files ([`OutputError`]). Each error's line is the one kauri prints; whether a
//! failure comes of running out of file descriptors is a matter of its `io::Error`'s kind
//! ([`NodeError::out_of_fds`]), never of its text.

use kauri_os::program::ProgramError;
use kauri_proto::pmix::{PmixError, PrivateDirError};
use std::error::Error;
use std::io;
use std::path::PathBuf;

/// Why a host's ranks could not start ([`crate::node::Node::start`]).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A rank names a segment the job does not have.
    #[error("rank {rank} names a segment that does not exist")]
    NoSegment {
        /// The rank.
        rank: usize,
    },
    /// A segment's working directory does not exist on this host.
    #[error("working directory {} does not exist on {host}", wdir.display())]
    NoWorkingDir {
        /// The directory.
        wdir: PathBuf,
        /// The host.
        host: String,
    },
    /// A segment's program cannot be found or cannot be run.
    #[error("{source} (on {host})")]
    Program {
        /// The host.
        host: String,
        /// Why not.
        source: ProgramError,
    },
    /// The job could not be offered PMIx on this host.
    #[error("{source} (on {host})")]
    PmixOffer {
        /// The host.
        host: String,
        /// Why not.
        source: PmixError,
    },
    /// Open MPI's private shared-memory directory could not be had.
    #[error("{source} (on {host})")]
    ShmDir {
        /// The host.
        host: String,
        /// Why not.
        source: PrivateDirError,
    },
    /// The PMIx server library could not start (a job of Open MPI starts it at once).
    #[error(transparent)]
    PmixServer(#[from] PmixError),
    /// No loopback port to listen on for the ranks' PMI (`-pmi-port`).
    #[error("cannot listen for PMI on loopback on {host}: {source}")]
    PmiPort {
        /// The host.
        host: String,
        /// What the system said.
        source: io::Error,
    },
    /// The topology `-bind-to` places the ranks on could not be read.
    #[error("-bind-to {binding}: cannot read the topology of {host}: {source}")]
    Topology {
        /// The kind of object bound to (`core`).
        binding: &'static str,
        /// The host.
        host: String,
        /// Why not.
        source: TopologyError,
    },
    /// The job asks for GPUs and this host has none kauri can find.
    #[error(
        "-gpus-per-proc: {host} has no GPU (none under /proc/driver/nvidia, \
         /sys/class/kfd or /sys/class/drm)"
    )]
    NoGpu {
        /// The host.
        host: String,
    },
    /// `-gpu-bind map:` names a GPU this host does not have.
    #[error("-gpu-bind map: {host} has no {vendor} GPU {index} (it has {count})")]
    NoSuchGpu {
        /// The host.
        host: String,
        /// The GPUs' vendor.
        vendor: &'static str,
        /// The GPU named.
        index: usize,
        /// How many it has.
        count: usize,
    },
    /// A rank's PMI socket pair could not be made.
    #[error("cannot create a PMI socket on {host}: {source}")]
    PmiSocket {
        /// The host.
        host: String,
        /// What the system said.
        source: io::Error,
    },
    /// A rank could not be started, or watched once started.
    #[error("cannot start rank {rank} ({program}) on {host}: {source}")]
    StartRank {
        /// The rank.
        rank: usize,
        /// Its program, as typed.
        program: String,
        /// The host.
        host: String,
        /// What the system said.
        source: io::Error,
    },
    /// The singleton kauri adopts did not complete `singinit`.
    #[error(transparent)]
    Singleton(#[from] SingletonError),
    /// The singleton's connection could not be served.
    #[error("cannot serve the singleton's PMI: {0}")]
    SingletonPmi(#[source] io::Error),
}

impl NodeError {
    /// True when the failure comes of this process (`EMFILE`) or the system (`ENFILE`)
    /// running out of file descriptors: some `io::Error` among its causes says so.
    pub fn out_of_fds(&self) -> bool {
        let mut cause: Option<&(dyn Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if e.downcast_ref::<io::Error>()
                .is_some_and(crate::proc::is_out_of_fds)
            {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

/// Why the singleton kauri adopts (a program started without a launcher) did not complete
/// MPICH's `singinit` exchange.
#[derive(Debug, thiserror::Error)]
pub enum SingletonError {
    /// Its address could not be reached.
    #[error("cannot connect to the singleton (pid {pid}) at {addr}: {source}")]
    Connect {
        /// Its pid.
        pid: u32,
        /// The address it gave.
        addr: String,
        /// What the system said.
        source: io::Error,
    },
    /// Reading from or writing to it failed.
    #[error("singleton (pid {pid}): {source}")]
    Io {
        /// Its pid.
        pid: u32,
        /// What the system said.
        source: io::Error,
    },
    /// It closed the connection before its answer.
    #[error("the singleton (pid {pid}) closed the connection during singinit")]
    Closed {
        /// Its pid.
        pid: u32,
    },
    /// Its answer's line is longer than any `singinit` line.
    #[error("the singleton (pid {pid}) sent an over-long singinit line")]
    LongLine {
        /// Its pid.
        pid: u32,
    },
    /// It answered something else than `cmd=singinit` (the line).
    #[error("the singleton (pid {pid}) answered {line:?}, not cmd=singinit")]
    NotSinginit {
        /// Its pid.
        pid: u32,
        /// Its line.
        line: String,
    },
    /// It asks for an authentication kauri does not offer.
    #[error("the singleton (pid {pid}) asks for authentication {auth:?}; kauri offers none")]
    Authentication {
        /// Its pid.
        pid: u32,
        /// The authentication asked for.
        auth: String,
    },
    /// It speaks another PMI version than 1 (its line).
    #[error("the singleton (pid {pid}) speaks {line:?}; kauri serves singletons PMI-1")]
    Version {
        /// Its pid.
        pid: u32,
        /// Its line.
        line: String,
    },
    /// The exchange did not end in time.
    #[error("the singleton (pid {pid}) did not complete singinit within {secs} s")]
    Timeout {
        /// Its pid.
        pid: u32,
        /// The time it was given, in seconds.
        secs: u64,
    },
}

/// Why this host's topology could not be read from `/sys` ([`crate::bind::Topology::read`]).
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The list of online CPUs could not be read (the file).
    #[error("cannot read {}", .0.display())]
    Unreadable(PathBuf),
    /// No CPU is both online and in this process's affinity.
    #[error("no CPU is both online and allowed")]
    NoCpu,
}

/// Why this host's topology XML for the ranks could not be made ([`crate::topology`]); the
/// reason is logged, and the ranks probe the machine themselves.
#[derive(Debug, thiserror::Error)]
pub enum HwlocError {
    /// The library (its file name) cannot be loaded.
    #[error("{0} cannot be loaded")]
    NotLoaded(String),
    /// The library (its file name) lacks an entry point (its name).
    #[error("{library} has no {symbol}")]
    NoSymbol {
        /// The library's file name.
        library: String,
        /// The entry point.
        symbol: String,
    },
    /// The library is not of hwloc 2's API (the version it reports).
    #[error("hwloc API {0:#x}, not 2.x")]
    Api(u32),
    /// A call of the library failed (the call).
    #[error("{0} failed")]
    Call(&'static str),
    /// The anonymous file could not be made.
    #[error("memfd_create: {0}")]
    MemFd(#[source] io::Error),
    /// The anonymous file's descriptor could not be duplicated.
    #[error(transparent)]
    Dup(io::Error),
    /// The XML could not be written into the anonymous file.
    #[error("writing the XML: {0}")]
    Write(#[source] io::Error),
}

/// Why an output file (`-outfile-pattern`, `-errfile-pattern`) cannot be written
/// ([`crate::output::Files`]).
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file could not be created before the job started (the option that named it).
    #[error("{option}: cannot create {path}: {source}")]
    Create {
        /// The option that named it.
        option: String,
        /// The file.
        path: String,
        /// What the system said.
        source: io::Error,
    },
    /// A file could not be opened once the job ran.
    #[error("cannot create output file {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// What the system said.
        source: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write output file {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// What the system said.
        source: io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(libc::EMFILE)
    }

    /// Each error's line is the one kauri printed when errors were lines of text.
    #[test]
    fn each_error_prints_its_line() {
        let host = || "h1".to_string();
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let denied_text = denied().to_string();
        let cases: Vec<(NodeError, String)> = vec![
            (
                NodeError::NoSegment { rank: 3 },
                "rank 3 names a segment that does not exist".into(),
            ),
            (
                NodeError::NoWorkingDir {
                    wdir: "/no/such".into(),
                    host: host(),
                },
                "working directory /no/such does not exist on h1".into(),
            ),
            (
                NodeError::Program {
                    host: host(),
                    source: ProgramError::NotInPath {
                        program: "a.out".into(),
                    },
                },
                "cannot execute a.out: not found in PATH (on h1)".into(),
            ),
            (
                NodeError::PmixOffer {
                    host: host(),
                    source: PmixError::NotRunning,
                },
                "the PMIx server is not running (on h1)".into(),
            ),
            (
                NodeError::PmixServer(PmixError::NoAddress),
                "the PMIx server gave its clients no address".into(),
            ),
            (
                NodeError::PmiPort {
                    host: host(),
                    source: denied(),
                },
                format!("cannot listen for PMI on loopback on h1: {denied_text}"),
            ),
            (
                NodeError::Topology {
                    binding: "core",
                    host: host(),
                    source: TopologyError::NoCpu,
                },
                "-bind-to core: cannot read the topology of h1: no CPU is both online and allowed"
                    .into(),
            ),
            (
                NodeError::NoGpu { host: host() },
                "-gpus-per-proc: h1 has no GPU (none under /proc/driver/nvidia, \
                 /sys/class/kfd or /sys/class/drm)"
                    .into(),
            ),
            (
                NodeError::NoSuchGpu {
                    host: host(),
                    vendor: "nvidia",
                    index: 4,
                    count: 4,
                },
                "-gpu-bind map: h1 has no nvidia GPU 4 (it has 4)".into(),
            ),
            (
                NodeError::PmiSocket {
                    host: host(),
                    source: emfile(),
                },
                format!("cannot create a PMI socket on h1: {}", emfile()),
            ),
            (
                NodeError::StartRank {
                    rank: 7,
                    program: "true".into(),
                    host: host(),
                    source: emfile(),
                },
                format!("cannot start rank 7 (true) on h1: {}", emfile()),
            ),
            (
                NodeError::SingletonPmi(denied()),
                format!("cannot serve the singleton's PMI: {denied_text}"),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }

    #[test]
    fn each_singleton_error_prints_its_line() {
        let pid = 42;
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let d = denied().to_string();
        let cases = [
            (
                SingletonError::Connect {
                    pid,
                    addr: "127.0.0.1:9".into(),
                    source: denied(),
                },
                format!("cannot connect to the singleton (pid 42) at 127.0.0.1:9: {d}"),
            ),
            (
                SingletonError::Io {
                    pid,
                    source: denied(),
                },
                format!("singleton (pid 42): {d}"),
            ),
            (
                SingletonError::Closed { pid },
                "the singleton (pid 42) closed the connection during singinit".into(),
            ),
            (
                SingletonError::LongLine { pid },
                "the singleton (pid 42) sent an over-long singinit line".into(),
            ),
            (
                SingletonError::NotSinginit {
                    pid,
                    line: "cmd=x".into(),
                },
                "the singleton (pid 42) answered \"cmd=x\", not cmd=singinit".into(),
            ),
            (
                SingletonError::Authentication {
                    pid,
                    auth: "munge".into(),
                },
                "the singleton (pid 42) asks for authentication \"munge\"; kauri offers none"
                    .into(),
            ),
            (
                SingletonError::Version {
                    pid,
                    line: "cmd=singinit pmi_version=2".into(),
                },
                "the singleton (pid 42) speaks \"cmd=singinit pmi_version=2\"; \
                 kauri serves singletons PMI-1"
                    .into(),
            ),
            (
                SingletonError::Timeout { pid, secs: 60 },
                "the singleton (pid 42) did not complete singinit within 60 s".into(),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }

    #[test]
    fn each_topology_and_output_error_prints_its_line() {
        assert_eq!(
            HwlocError::NoSymbol {
                library: "libhwloc.so.15".into(),
                symbol: "hwloc_topology_load".into()
            }
            .to_string(),
            "libhwloc.so.15 has no hwloc_topology_load"
        );
        assert_eq!(
            HwlocError::NotLoaded("libhwloc.so.15".into()).to_string(),
            "libhwloc.so.15 cannot be loaded"
        );
        assert_eq!(
            HwlocError::Api(0x10b00).to_string(),
            "hwloc API 0x10b00, not 2.x"
        );
        assert_eq!(
            HwlocError::Call("hwloc_topology_init").to_string(),
            "hwloc_topology_init failed"
        );
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            HwlocError::MemFd(denied()).to_string(),
            format!("memfd_create: {}", denied())
        );
        assert_eq!(HwlocError::Dup(denied()).to_string(), denied().to_string());
        assert_eq!(
            HwlocError::Write(denied()).to_string(),
            format!("writing the XML: {}", denied())
        );
        assert_eq!(
            TopologyError::Unreadable("/sys/devices/system/cpu/online".into()).to_string(),
            "cannot read /sys/devices/system/cpu/online"
        );
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let d = denied().to_string();
        let cases = [
            (
                OutputError::Create {
                    option: "-outfile-pattern".into(),
                    path: "/x/out".into(),
                    source: denied(),
                },
                format!("-outfile-pattern: cannot create /x/out: {d}"),
            ),
            (
                OutputError::Open {
                    path: "/x/out".into(),
                    source: denied(),
                },
                format!("cannot create output file /x/out: {d}"),
            ),
            (
                OutputError::Write {
                    path: "/x/out".into(),
                    source: denied(),
                },
                format!("cannot write output file /x/out: {d}"),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }

    /// Running out of descriptors is told by the kind of the `io::Error` under the failure,
    /// however deep, whatever the failure's text.
    #[test]
    fn out_of_fds_is_the_kind_of_the_cause() {
        let host = || "h1".to_string();
        let start = |source| NodeError::StartRank {
            rank: 0,
            program: "true".into(),
            host: host(),
            source,
        };
        assert!(start(emfile()).out_of_fds());
        assert!(start(io::Error::from_raw_os_error(libc::ENFILE)).out_of_fds());
        assert!(!start(io::Error::from_raw_os_error(libc::EAGAIN)).out_of_fds());
        assert!(NodeError::PmiSocket {
            host: host(),
            source: emfile()
        }
        .out_of_fds());
        assert!(NodeError::Singleton(SingletonError::Io {
            pid: 1,
            source: emfile()
        })
        .out_of_fds());
        assert!(NodeError::PmixServer(PmixError::Door(emfile())).out_of_fds());
        assert!(!NodeError::NoSegment { rank: 0 }.out_of_fds());
        // A text that merely reads like it is not the kind.
        assert!(!NodeError::SingletonPmi(io::Error::other("out of file descriptors")).out_of_fds());
    }
}
