//! A blocking PMI client for rank programs, in either protocol.
//!
//! [`Client::from_env`] finds the server the way MPICH's clients do: an inherited socket in
//! `PMI_FD` wins, else a TCP `PMI_PORT` (`host:port`, with `PMI_ID` naming the process slot).
//! It then runs the version's handshake, so a constructed client knows its rank, size, appnum
//! and kvsname. Every call is one request and one reply (PMI-1 is strictly request/response);
//! a nonzero `rc` comes back as [`ClientError::Refused`], a missing key as `Ok(None)`.
//!
//! ```no_run
//! use pmi_wire::{client::Client, Version};
//! let mut pmi = Client::from_env(Version::V2)?;
//! pmi.put(&format!("addr-{}", pmi.rank()), "tcp://10.0.0.1:4000")?;
//! pmi.fence()?;
//! let peer = (pmi.rank() + 1) % pmi.size();
//! let addr = pmi.get(&format!("addr-{peer}"))?;
//! pmi.finalize()?;
//! # Ok::<(), pmi_wire::client::ClientError>(())
//! ```

use crate::limits::{KEY_MAX, VALUE_MAX};
use crate::v2::{Frame, Lookup};
use crate::{v1, v2, Spawn, Status, Version, WireError};
use bytes::BytesMut;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use thiserror::Error;

/// What can go wrong talking to a PMI server.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Neither `PMI_FD` nor `PMI_PORT` is set: the program was not started by a PMI server.
    #[error("no PMI server: neither PMI_FD nor PMI_PORT is set")]
    NoServer,
    /// An environment variable holds something unusable.
    #[error("environment variable {var}={value:?} is not usable")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The socket failed.
    #[error("PMI socket: {0}")]
    Io(#[from] io::Error),
    /// The server sent something that does not parse.
    #[error("PMI server sent a malformed message: {0}")]
    Wire(#[from] WireError),
    /// The server closed the connection.
    #[error("PMI server closed the connection")]
    Closed,
    /// The server answered with a message other than the reply to the request.
    #[error("expected {expected}, server sent {got}")]
    Unexpected {
        /// The reply that was expected.
        expected: &'static str,
        /// What came instead.
        got: String,
    },
    /// The server answered with a nonzero `rc`.
    #[error("{cmd} refused by the PMI server: rc={rc}{}", msg.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Refused {
        /// The request.
        cmd: &'static str,
        /// `rc`.
        rc: i32,
        /// `msg` / `errmsg`.
        msg: Option<String>,
    },
    /// A key or value holds a character the protocol cannot carry in that field (see
    /// [`check_key`], [`check_value`]); nothing was sent.
    #[error("the {what} {text:?} cannot be sent: {why}")]
    CannotCarry {
        /// `key` or `value`.
        what: &'static str,
        /// The text, cut to 64 characters.
        text: String,
        /// Which character, and why.
        why: &'static str,
    },
    /// A key or value is longer than the server accepts.
    #[error("{what} of {len} bytes exceeds the server's limit of {max}")]
    TooLong {
        /// `key` or `value`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The call does not exist in this protocol version.
    #[error("{0} is not part of PMI-1")]
    Unsupported(&'static str),
}

/// Shorthand for results of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Which way a traced message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server.
    Sent,
    /// From the server to the client.
    Received,
}

/// A hook that sees every message a [`Client`] sends or receives, as its exact wire bytes
/// (one whole PMI-1 line or one whole PMI-2 frame per call), handshake included. Set with
/// [`Client::from_env_traced`]; without one, a client does no tracing work at all.
pub type Trace = Box<dyn FnMut(Direction, &[u8]) + Send>;

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.write_all(buf),
            Conn::Tcp(s) => s.write_all(buf),
        }
    }
}

/// The limits the server advertised (PMI-1 `maxes`; PMI-2 uses the protocol's constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    /// `kvsname_max`.
    pub kvsname: usize,
    /// `keylen_max`.
    pub key: usize,
    /// `vallen_max`.
    pub value: usize,
}

/// The outcome of a successful spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    /// The new job's id, when the server names it (PMI-2).
    pub jobid: Option<String>,
    /// One error code per spawned process (empty: all succeeded).
    pub errcodes: Vec<i32>,
}

/// A connected, initialised PMI client.
pub struct Client {
    conn: Conn,
    buf: BytesMut,
    version: Version,
    rank: i64,
    size: i64,
    appnum: i64,
    spawned: bool,
    kvsname: String,
    maxes: Maxes,
    trace: Option<Trace>,
}

fn env(var: &'static str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

fn env_num(var: &'static str) -> Result<Option<i64>> {
    match env(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ClientError::BadEnv { var, value: v }),
    }
}

fn refused(cmd: &'static str, s: Status) -> ClientError {
    ClientError::Refused {
        cmd,
        rc: s.rc,
        msg: s.msg,
    }
}

fn check(cmd: &'static str, s: Status) -> Result<()> {
    if s.is_ok() {
        Ok(())
    } else {
        Err(refused(cmd, s))
    }
}

fn unexpected(expected: &'static str, got: impl std::fmt::Debug) -> ClientError {
    let mut got = format!("{got:?}");
    got.truncate(200);
    ClientError::Unexpected { expected, got }
}

impl Client {
    /// Connects to the server named by the environment and runs the handshake of `version`.
    pub fn from_env(version: Version) -> Result<Client> {
        Client::from_env_traced(version, None)
    }

    /// Like [`Client::from_env`], handing every message of the session, from the first, to
    /// `trace` (`None`: no tracing).
    pub fn from_env_traced(version: Version, trace: Option<Trace>) -> Result<Client> {
        if let Some(fd) = env_num("PMI_FD")? {
            let fd = RawFd::try_from(fd).map_err(|_| ClientError::BadEnv {
                var: "PMI_FD",
                value: fd.to_string(),
            })?;
            if fd < 0 || !fd_is_open(fd) {
                return Err(ClientError::BadEnv {
                    var: "PMI_FD",
                    value: fd.to_string(),
                });
            }
            // SAFETY: the process manager handed this descriptor to us for this purpose, it is
            // open (checked above), and nothing else in the process claims it.
            let sock = unsafe { UnixStream::from_raw_fd(fd) };
            return Client::handshake(Conn::Unix(sock), version, None, trace);
        }
        if let Some(port) = env("PMI_PORT") {
            let sock = TcpStream::connect(port.as_str())?;
            sock.set_nodelay(true)?;
            return Client::handshake(Conn::Tcp(sock), version, env("PMI_ID"), trace);
        }
        Err(ClientError::NoServer)
    }

    /// Runs the handshake over an already connected socket (`PMI_FD` mode: rank and size come
    /// from `PMI_RANK`/`PMI_SIZE` in PMI-1).
    pub fn over_socket(sock: UnixStream, version: Version) -> Result<Client> {
        Client::handshake(Conn::Unix(sock), version, None, None)
    }

    /// Like [`Client::over_socket`], handing every message of the session to `trace`.
    pub fn over_socket_traced(
        sock: UnixStream,
        version: Version,
        trace: Option<Trace>,
    ) -> Result<Client> {
        Client::handshake(Conn::Unix(sock), version, None, trace)
    }

    fn handshake(
        conn: Conn,
        version: Version,
        pmiid: Option<String>,
        trace: Option<Trace>,
    ) -> Result<Client> {
        let mut c = Client {
            conn,
            buf: BytesMut::with_capacity(4096),
            version,
            rank: env_num("PMI_RANK")?.unwrap_or(0),
            size: env_num("PMI_SIZE")?.unwrap_or(1),
            appnum: 0,
            spawned: env_num("PMI_SPAWNED")?.unwrap_or(0) != 0,
            kvsname: String::new(),
            maxes: Maxes {
                kvsname: crate::limits::KVSNAME_MAX,
                key: KEY_MAX,
                value: VALUE_MAX,
            },
            trace,
        };
        if version == Version::V1 {
            if let Some(id) = &pmiid {
                c.send_v1(&v1::Request::InitAck { pmiid: id.clone() })?;
                match c.recv_v1()? {
                    v1::Response::InitAck => {}
                    other => return Err(unexpected("initack", other)),
                }
                for _ in 0..3 {
                    match c.recv_v1()? {
                        v1::Response::Set { key, value } => {
                            let n = value.parse().unwrap_or(0);
                            match key.as_str() {
                                "size" => c.size = n,
                                "rank" => c.rank = n,
                                _ => {}
                            }
                        }
                        other => return Err(unexpected("set", other)),
                    }
                }
            }
        }
        let (v, s) = version.offered();
        c.send_v1(&v1::Request::Init {
            version: v,
            subversion: s,
        })?;
        match c.recv_v1()? {
            v1::Response::Init {
                status, version, ..
            } => {
                check("init", status)?;
                if version != v {
                    return Err(ClientError::Refused {
                        cmd: "init",
                        rc: -1,
                        msg: Some(format!("server answered pmi_version={version}")),
                    });
                }
            }
            other => return Err(unexpected("response_to_init", other)),
        }
        match version {
            Version::V1 => c.init_v1()?,
            Version::V2 => c.init_v2(pmiid)?,
        }
        Ok(c)
    }

    fn init_v1(&mut self) -> Result<()> {
        match self.call_v1(v1::Request::GetMaxes)? {
            v1::Response::Maxes {
                kvsname_max,
                keylen_max,
                vallen_max,
            } => {
                self.maxes = Maxes {
                    kvsname: kvsname_max,
                    key: keylen_max,
                    value: vallen_max,
                }
            }
            other => return Err(unexpected("maxes", other)),
        }
        match self.call_v1(v1::Request::GetMyKvsname)? {
            v1::Response::MyKvsname { kvsname } => self.kvsname = kvsname,
            other => return Err(unexpected("my_kvsname", other)),
        }
        match self.call_v1(v1::Request::GetAppnum)? {
            v1::Response::Appnum { appnum } => self.appnum = appnum.into(),
            other => return Err(unexpected("appnum", other)),
        }
        Ok(())
    }

    fn init_v2(&mut self, pmiid: Option<String>) -> Result<()> {
        let pmirank = match pmiid {
            Some(id) => Some(id.trim().parse().map_err(|_| ClientError::BadEnv {
                var: "PMI_ID",
                value: id.clone(),
            })?),
            None => env_num("PMI_RANK")?,
        };
        let req = v2::Request::FullInit {
            pmijobid: env("PMI_JOBID"),
            pmirank,
            threaded: Some(false),
        };
        match self.call_v2(req)? {
            v2::Response::FullInit {
                status,
                rank,
                size,
                appnum,
                spawner_jobid,
                ..
            } => {
                check("fullinit", status)?;
                self.rank = rank;
                self.size = size;
                self.appnum = appnum;
                self.spawned = spawner_jobid.is_some();
            }
            other => return Err(unexpected("fullinit-response", other)),
        }
        match self.call_v2(v2::Request::JobGetId)? {
            v2::Response::JobGetId { status, jobid } => {
                check("job-getid", status)?;
                self.kvsname = jobid;
            }
            other => return Err(unexpected("job-getid-response", other)),
        }
        Ok(())
    }

    /// The protocol this client speaks.
    pub fn version(&self) -> Version {
        self.version
    }
    /// This process's rank in its job.
    pub fn rank(&self) -> i64 {
        self.rank
    }
    /// The number of processes in the job.
    pub fn size(&self) -> i64 {
        self.size
    }
    /// The index of this process's MPMD command.
    pub fn appnum(&self) -> i64 {
        self.appnum
    }
    /// True when this process was started by a spawn.
    pub fn spawned(&self) -> bool {
        self.spawned
    }
    /// The job's KVS name (PMI-2: its job id).
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }
    /// The server's limits.
    pub fn maxes(&self) -> Maxes {
        self.maxes
    }

    /// Stores a pair; others see it after the next [`Client::fence`].
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_len(key, value)?;
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Put {
                kvsname: self.kvsname.clone(),
                key: key.into(),
                value: value.into(),
            })? {
                v1::Response::PutResult(s) => check("put", s),
                other => Err(unexpected("put_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::KvsPut {
                key: key.into(),
                value: value.into(),
            })? {
                v2::Response::KvsPut(s) => check("kvs-put", s),
                other => Err(unexpected("kvs-put-response", other)),
            },
        }
    }

    /// Stores a pair naming the KVS explicitly (PMI-1 `put` carries a kvsname; servers
    /// usually ignore it, Kauri reads the name `kauri.publish` as "visible at once, no fence").
    /// In PMI-2, which has no kvsname in `kvs-put`, this is [`Client::put`].
    pub fn put_in(&mut self, kvsname: &str, key: &str, value: &str) -> Result<()> {
        self.check_len(key, value)?;
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Put {
                kvsname: kvsname.into(),
                key: key.into(),
                value: value.into(),
            })? {
                v1::Response::PutResult(s) => check("put", s),
                other => Err(unexpected("put_result", other)),
            },
            Version::V2 => self.put(key, value),
        }
    }

    /// Reads a key of this job's KVS: `Ok(None)` when it is not there.
    pub fn get(&mut self, key: &str) -> Result<Option<String>> {
        check_key(self.version, key)?;
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Get {
                kvsname: self.kvsname.clone(),
                key: key.into(),
            })? {
                v1::Response::GetResult { status, value } => {
                    Ok(if status.is_ok() { value } else { None })
                }
                other => Err(unexpected("get_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::KvsGet {
                jobid: None,
                srcid: None,
                key: key.into(),
            })? {
                v2::Response::KvsGet(l) => Ok(found(l)),
                other => Err(unexpected("kvs-get-response", other)),
            },
        }
    }

    /// Reads a key naming the KVS explicitly: PMI-1 `get` with `kvsname` (default: this job's),
    /// PMI-2 `kvs-get` with `jobid` (another job's KVS, e.g. after a spawn; default: none, the
    /// caller's) and the `srcid` hint (the rank that put the key, if known; PMI-2 only).
    /// `Ok(None)` when it is not there.
    pub fn get_from(
        &mut self,
        kvsname: Option<&str>,
        srcid: Option<i64>,
        key: &str,
    ) -> Result<Option<String>> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Get {
                kvsname: kvsname.unwrap_or(&self.kvsname).into(),
                key: key.into(),
            })? {
                v1::Response::GetResult { status, value } => {
                    Ok(if status.is_ok() { value } else { None })
                }
                other => Err(unexpected("get_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::KvsGet {
                jobid: kvsname.map(str::to_string),
                srcid,
                key: key.into(),
            })? {
                v2::Response::KvsGet(l) => Ok(found(l)),
                other => Err(unexpected("kvs-get-response", other)),
            },
        }
    }

    /// The collective commit: returns when every process has entered it, after which every
    /// put before it is visible. PMI-1 `barrier_in`, PMI-2 `kvs-fence`.
    pub fn fence(&mut self) -> Result<()> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::BarrierIn { group: None })? {
                v1::Response::BarrierOut { status, .. } => check("barrier_in", status),
                other => Err(unexpected("barrier_out", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::KvsFence)? {
                v2::Response::KvsFence(s) => check("kvs-fence", s),
                other => Err(unexpected("kvs-fence-response", other)),
            },
        }
    }

    /// Reads a job attribute (`PMI_process_mapping`, `universeSize`, …). PMI-1 reads it from
    /// the KVS, where servers keep it; PMI-2 asks with `info-getjobattr`.
    pub fn job_attr(&mut self, key: &str) -> Result<Option<String>> {
        match self.version {
            Version::V1 => self.get(key),
            Version::V2 => match self.call_v2(v2::Request::InfoGetJobAttr { key: key.into() })? {
                v2::Response::InfoGetJobAttr(l) => Ok(found(l)),
                other => Err(unexpected("info-getjobattr-response", other)),
            },
        }
    }

    /// The universe size: how many processes the job may grow to (-1 when unknown).
    pub fn universe_size(&mut self) -> Result<i64> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::GetUniverseSize)? {
                v1::Response::UniverseSize { size } => Ok(size.into()),
                other => Err(unexpected("universe_size", other)),
            },
            Version::V2 => Ok(self
                .job_attr("universeSize")?
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(-1)),
        }
    }

    /// Stores a node-local pair (PMI-2 only).
    pub fn put_node_attr(&mut self, key: &str, value: &str) -> Result<()> {
        self.require_v2("info-putnodeattr")?;
        self.check_len(key, value)?;
        match self.call_v2(v2::Request::InfoPutNodeAttr {
            key: key.into(),
            value: value.into(),
        })? {
            v2::Response::InfoPutNodeAttr(s) => check("info-putnodeattr", s),
            other => Err(unexpected("info-putnodeattr-response", other)),
        }
    }

    /// Reads a node-local key (PMI-2 only); with `wait`, the server holds the reply until a
    /// process on this node puts it.
    pub fn get_node_attr(&mut self, key: &str, wait: bool) -> Result<Option<String>> {
        self.require_v2("info-getnodeattr")?;
        match self.call_v2(v2::Request::InfoGetNodeAttr {
            key: key.into(),
            wait,
        })? {
            v2::Response::InfoGetNodeAttr(l) => Ok(found(l)),
            other => Err(unexpected("info-getnodeattr-response", other)),
        }
    }

    /// Asks to connect to another job's KVS (PMI-2 only): `Ok(true)` when the server says the
    /// job's KVS must be copied through the connection (`kvscopy`).
    pub fn job_connect(&mut self, jobid: &str) -> Result<bool> {
        self.require_v2("job-connect")?;
        match self.call_v2(v2::Request::JobConnect {
            jobid: jobid.into(),
        })? {
            v2::Response::JobConnect { status, kvscopy } => {
                check("job-connect", status)?;
                Ok(kvscopy)
            }
            other => Err(unexpected("job-connect-response", other)),
        }
    }

    /// Ends a connection made by [`Client::job_connect`] (PMI-2 only).
    pub fn job_disconnect(&mut self, jobid: &str) -> Result<()> {
        self.require_v2("job-disconnect")?;
        match self.call_v2(v2::Request::JobDisconnect {
            jobid: jobid.into(),
        })? {
            v2::Response::JobDisconnect(s) => check("job-disconnect", s),
            other => Err(unexpected("job-disconnect-response", other)),
        }
    }

    /// Publishes `name` with `port` in the name service.
    pub fn publish(&mut self, name: &str, port: &str) -> Result<()> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::PublishName {
                service: name.into(),
                port: port.into(),
            })? {
                v1::Response::PublishResult(s) => check("publish_name", s),
                other => Err(unexpected("publish_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::NamePublish {
                name: name.into(),
                port: port.into(),
                info: Vec::new(),
            })? {
                v2::Response::NamePublish(s) => check("name-publish", s),
                other => Err(unexpected("name-publish-response", other)),
            },
        }
    }

    /// Withdraws a published name.
    pub fn unpublish(&mut self, name: &str) -> Result<()> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::UnpublishName {
                service: name.into(),
            })? {
                v1::Response::UnpublishResult(s) => check("unpublish_name", s),
                other => Err(unexpected("unpublish_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::NameUnpublish { name: name.into() })? {
                v2::Response::NameUnpublish(s) => check("name-unpublish", s),
                other => Err(unexpected("name-unpublish-response", other)),
            },
        }
    }

    /// Looks a published name up: `Ok(None)` when nobody published it.
    pub fn lookup(&mut self, name: &str) -> Result<Option<String>> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::LookupName {
                service: name.into(),
            })? {
                v1::Response::LookupResult { status, port } => {
                    Ok(if status.is_ok() { port } else { None })
                }
                other => Err(unexpected("lookup_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::NameLookup { name: name.into() })? {
                v2::Response::NameLookup(l) => Ok(found(l)),
                other => Err(unexpected("name-lookup-response", other)),
            },
        }
    }

    /// Starts a new job; returns once the server has launched it.
    pub fn spawn(&mut self, spawn: &Spawn) -> Result<Spawned> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Spawn(spawn.clone()))? {
                v1::Response::SpawnResult { status, errcodes } => {
                    check("spawn", status)?;
                    Ok(Spawned {
                        jobid: None,
                        errcodes,
                    })
                }
                other => Err(unexpected("spawn_result", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::Spawn(spawn.clone()))? {
                v2::Response::Spawn {
                    status,
                    jobid,
                    errcodes,
                } => {
                    check("spawn", status)?;
                    Ok(Spawned { jobid, errcodes })
                }
                other => Err(unexpected("spawn-response", other)),
            },
        }
    }

    /// Asks the server to end the job with `code`; there is no reply. The caller should exit
    /// right after.
    pub fn abort(self, code: i32, message: &str) -> Result<()> {
        self.abort_with(true, code, message)
    }

    /// Like [`Client::abort`], saying whether the whole job ends (`isworld`) or only this
    /// process (PMI-2 `isworld=FALSE`); PMI-1 has no such choice and always asks for the job.
    pub fn abort_with(mut self, isworld: bool, code: i32, message: &str) -> Result<()> {
        match self.version {
            Version::V1 => self.send_v1(&v1::Request::Abort {
                exitcode: Some(code),
                message: Some(message.into()),
            }),
            Version::V2 => self.send_v2(v2::Request::Abort {
                isworld: Some(isworld),
                message: Some(message.into()),
                exitcode: Some(code),
            }),
        }
    }

    /// Ends the session cleanly; the socket is closed afterwards.
    pub fn finalize(mut self) -> Result<()> {
        match self.version {
            Version::V1 => match self.call_v1(v1::Request::Finalize)? {
                v1::Response::FinalizeAck => Ok(()),
                other => Err(unexpected("finalize_ack", other)),
            },
            Version::V2 => match self.call_v2(v2::Request::Finalize)? {
                v2::Response::Finalize(s) => check("finalize", s),
                other => Err(unexpected("finalize-response", other)),
            },
        }
    }

    fn require_v2(&self, what: &'static str) -> Result<()> {
        match self.version {
            Version::V1 => Err(ClientError::Unsupported(what)),
            Version::V2 => Ok(()),
        }
    }

    fn check_len(&self, key: &str, value: &str) -> Result<()> {
        check_key(self.version, key)?;
        check_value(self.version, value)?;
        if key.len() > self.maxes.key {
            return Err(ClientError::TooLong {
                what: "key",
                len: key.len(),
                max: self.maxes.key,
            });
        }
        if value.len() > self.maxes.value {
            return Err(ClientError::TooLong {
                what: "value",
                len: value.len(),
                max: self.maxes.value,
            });
        }
        Ok(())
    }

    fn send_v1(&mut self, req: &v1::Request) -> Result<()> {
        let mut out = BytesMut::new();
        req.encode(&mut out);
        self.write(&out)
    }

    /// Writes one encoded request, showing it to the trace hook first.
    fn write(&mut self, out: &[u8]) -> Result<()> {
        if let Some(t) = &mut self.trace {
            t(Direction::Sent, out);
        }
        self.conn.write_all(out)?;
        Ok(())
    }

    /// Takes one message off the read buffer with `decode`, showing its bytes to the trace
    /// hook (which costs a copy of the buffer, so only when there is a hook).
    fn take<T>(
        &mut self,
        decode: impl Fn(&mut BytesMut) -> std::result::Result<Option<T>, WireError>,
    ) -> Result<Option<T>> {
        let Some(t) = &mut self.trace else {
            return Ok(decode(&mut self.buf)?);
        };
        let before = self.buf.clone();
        let r = decode(&mut self.buf);
        let used = before.len().saturating_sub(self.buf.len());
        if used > 0 {
            t(Direction::Received, &before[..used]);
        }
        Ok(r?)
    }

    fn recv_v1(&mut self) -> Result<v1::Response> {
        loop {
            if let Some(r) = self.take(v1::Response::decode)? {
                return Ok(r);
            }
            self.fill()?;
        }
    }

    fn call_v1(&mut self, req: v1::Request) -> Result<v1::Response> {
        self.send_v1(&req)?;
        self.recv_v1()
    }

    fn send_v2(&mut self, req: v2::Request) -> Result<()> {
        let mut out = BytesMut::new();
        Frame::new(req).encode(&mut out);
        self.write(&out)
    }

    fn call_v2(&mut self, req: v2::Request) -> Result<v2::Response> {
        self.send_v2(req)?;
        loop {
            if let Some(r) = self.take(Frame::<v2::Response>::decode)? {
                return Ok(r.msg);
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> Result<()> {
        let mut chunk = [0u8; 4096];
        let n = loop {
            match self.conn.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(ClientError::Closed);
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn found(l: Lookup) -> Option<String> {
    if l.status.is_ok() && l.found {
        l.value
    } else {
        None
    }
}

/// True when `fd` is an open descriptor of this process.
fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags; any integer is a valid argument.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// A one-connection server: answers the handshake of `version`, then hands every further
    /// request to `reply` and sends what it returns. Returns the requests it saw.
    fn serve_v1(
        mut sock: UnixStream,
        reply: impl Fn(&v1::Request) -> Option<v1::Response> + Send + 'static,
    ) -> thread::JoinHandle<Vec<v1::Request>> {
        thread::spawn(move || {
            let mut buf = BytesMut::new();
            let mut seen = Vec::new();
            loop {
                let req = loop {
                    if let Some(r) = v1::Request::decode(&mut buf).unwrap() {
                        break r;
                    }
                    let mut chunk = [0u8; 4096];
                    let n = sock.read(&mut chunk).unwrap();
                    if n == 0 {
                        return seen;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                };
                let resp = match &req {
                    v1::Request::Init { .. } => Some(v1::Response::Init {
                        status: Status::ok(),
                        version: 1,
                        subversion: 1,
                    }),
                    v1::Request::GetMaxes => Some(v1::Response::Maxes {
                        kvsname_max: 256,
                        keylen_max: 64,
                        vallen_max: 1024,
                    }),
                    v1::Request::GetMyKvsname => Some(v1::Response::MyKvsname {
                        kvsname: "kvs_0".into(),
                    }),
                    v1::Request::GetAppnum => Some(v1::Response::Appnum { appnum: 0 }),
                    other => reply(other),
                };
                seen.push(req);
                if let Some(r) = resp {
                    let mut out = BytesMut::new();
                    r.encode(&mut out);
                    sock.write_all(&out).unwrap();
                }
            }
        })
    }

    fn serve_v2(
        mut sock: UnixStream,
        reply: impl Fn(&v2::Request) -> v2::Response + Send + 'static,
    ) -> thread::JoinHandle<Vec<v2::Request>> {
        thread::spawn(move || {
            let mut buf = BytesMut::new();
            let mut seen = Vec::new();
            let mut framed = false;
            loop {
                let mut chunk = [0u8; 4096];
                if !framed {
                    if let Some(v1::Request::Init { .. }) = v1::Request::decode(&mut buf).unwrap() {
                        let mut out = BytesMut::new();
                        v1::Response::Init {
                            status: Status::ok(),
                            version: 2,
                            subversion: 0,
                        }
                        .encode(&mut out);
                        sock.write_all(&out).unwrap();
                        framed = true;
                        continue;
                    }
                } else if let Some(f) = Frame::<v2::Request>::decode(&mut buf).unwrap() {
                    let resp = match &f.msg {
                        v2::Request::FullInit { .. } => v2::Response::FullInit {
                            status: Status::ok(),
                            rank: 0,
                            size: 1,
                            appnum: 0,
                            spawner_jobid: None,
                            debugged: false,
                            pmiverbose: false,
                        },
                        v2::Request::JobGetId => v2::Response::JobGetId {
                            status: Status::ok(),
                            jobid: "job-1".into(),
                        },
                        other => reply(other),
                    };
                    seen.push(f.msg);
                    let mut out = BytesMut::new();
                    Frame::new(resp).encode(&mut out);
                    // The client may be gone already (after an abort, which has no reply).
                    let _ = sock.write_all(&out);
                    continue;
                }
                let n = sock.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    return seen;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        })
    }

    #[test]
    fn get_from_names_the_kvs_in_pmi1() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = serve_v1(b, |req| match req {
            v1::Request::Get { kvsname, key } => Some(v1::Response::GetResult {
                status: Status::ok(),
                value: Some(format!("{kvsname}/{key} with space")),
            }),
            _ => None,
        });
        let mut c = Client::over_socket(a, Version::V1).unwrap();
        assert_eq!(
            c.get_from(Some("other"), Some(3), "k").unwrap().as_deref(),
            Some("other/k with space")
        );
        drop(c);
        let seen = server.join().unwrap();
        assert!(seen.contains(&v1::Request::Get {
            kvsname: "other".into(),
            key: "k".into()
        }));
    }

    /// The trace hook sees every message both ways, whole and in order, handshake included.
    #[test]
    fn trace_sees_every_message_both_ways() {
        use std::sync::{Arc, Mutex};
        for version in [Version::V1, Version::V2] {
            let (a, b) = UnixStream::pair().unwrap();
            let server = match version {
                Version::V1 => {
                    let s = serve_v1(b, |req| match req {
                        v1::Request::Put { .. } => Some(v1::Response::PutResult(Status::ok())),
                        _ => None,
                    });
                    thread::spawn(move || drop(s.join()))
                }
                Version::V2 => {
                    let s = serve_v2(b, |req| match req {
                        v2::Request::FullInit { .. } => v2::Response::FullInit {
                            status: Status::ok(),
                            rank: 0,
                            size: 1,
                            appnum: 0,
                            spawner_jobid: None,
                            debugged: false,
                            pmiverbose: false,
                        },
                        v2::Request::JobGetId => v2::Response::JobGetId {
                            status: Status::ok(),
                            jobid: "job".into(),
                        },
                        _ => v2::Response::KvsPut(Status::ok()),
                    });
                    thread::spawn(move || drop(s.join()))
                }
            };
            let log: Arc<Mutex<Vec<(Direction, String)>>> = Arc::default();
            let sink = log.clone();
            let trace: Trace = Box::new(move |d, bytes| {
                let text = String::from_utf8_lossy(bytes).into_owned();
                sink.lock().unwrap().push((d, text));
            });
            let mut c = Client::over_socket_traced(a, version, Some(trace)).unwrap();
            c.put("k", "v").unwrap();
            drop(c);
            server.join().unwrap();
            let log = log.lock().unwrap();
            let first = &log[0];
            assert_eq!(first.0, Direction::Sent, "{log:?}");
            assert!(first.1.starts_with("cmd=init "), "{log:?}");
            assert_eq!(log[1].0, Direction::Received, "{log:?}");
            let put = match version {
                Version::V1 => "cmd=put ",
                Version::V2 => "cmd=kvs-put;",
            };
            let at = log
                .iter()
                .position(|(d, t)| *d == Direction::Sent && t.contains(put))
                .unwrap_or_else(|| panic!("no {put} in {log:?}"));
            assert_eq!(log.len(), at + 2, "{log:?}");
            assert_eq!(log[at + 1].0, Direction::Received, "{log:?}");
            let sent = log.iter().filter(|(d, _)| *d == Direction::Sent).count();
            assert_eq!(sent * 2, log.len(), "one reply per request: {log:?}");
        }
    }

    #[test]
    fn get_from_and_job_connect_in_pmi2() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = serve_v2(b, |req| match req {
            v2::Request::KvsGet { jobid, srcid, key } => {
                if jobid.as_deref() == Some("other") && *srcid == Some(2) {
                    v2::Response::KvsGet(Lookup::found(format!("v-{key}")))
                } else {
                    v2::Response::KvsGet(Lookup::not_found("no"))
                }
            }
            v2::Request::JobConnect { .. } => v2::Response::JobConnect {
                status: Status::ok(),
                kvscopy: true,
            },
            v2::Request::JobDisconnect { jobid } if jobid == "other" => {
                v2::Response::JobDisconnect(Status::ok())
            }
            _ => v2::Response::JobDisconnect(Status::error(1, "refused")),
        });
        let mut c = Client::over_socket(a, Version::V2).unwrap();
        assert_eq!(c.kvsname(), "job-1");
        assert_eq!(
            c.get_from(Some("other"), Some(2), "k").unwrap().as_deref(),
            Some("v-k")
        );
        assert_eq!(c.get_from(Some("other"), None, "k").unwrap(), None);
        assert_eq!(c.get_from(None, Some(2), "k").unwrap(), None);
        assert!(c.job_connect("other").unwrap());
        c.job_disconnect("other").unwrap();
        assert!(matches!(
            c.job_disconnect("else"),
            Err(ClientError::Refused { rc: 1, .. })
        ));
        drop(c);
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 8, "{seen:?}");
    }

    #[test]
    fn abort_says_whether_the_job_ends() {
        for isworld in [true, false] {
            let (a, b) = UnixStream::pair().unwrap();
            let server = serve_v2(b, |_| v2::Response::Finalize(Status::ok()));
            let c = Client::over_socket(a, Version::V2).unwrap();
            c.abort_with(isworld, 3, "bye").unwrap();
            let seen = server.join().unwrap();
            assert_eq!(
                seen.last(),
                Some(&v2::Request::Abort {
                    isworld: Some(isworld),
                    message: Some("bye".into()),
                    exitcode: Some(3),
                })
            );
        }
    }

    #[test]
    fn job_connect_is_not_pmi1() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = serve_v1(b, |_| None);
        let mut c = Client::over_socket(a, Version::V1).unwrap();
        assert!(matches!(
            c.job_connect("x"),
            Err(ClientError::Unsupported("job-connect"))
        ));
        assert!(matches!(
            c.job_disconnect("x"),
            Err(ClientError::Unsupported("job-disconnect"))
        ));
        drop(c);
        server.join().unwrap();
    }
}

/// Checks that `key` can travel as a key in `version`'s messages and read back the same: not
/// empty, no newline (it ends a PMI-1 message), no `=` (it ends a key in both protocols), and
/// in PMI-1 no space or tab (they end a field) nor `;` in PMI-2 (it ends a pair; only values
/// have the `;;` escape). Neither protocol has an encoding for these, so they are refused.
pub fn check_key(version: Version, key: &str) -> Result<()> {
    let why = if key.is_empty() {
        Some("a key may not be empty")
    } else if key.contains('\n') {
        Some("a newline ends a PMI message")
    } else if key.contains('=') {
        Some("`=` ends a key on the PMI wire")
    } else if version == Version::V1 && key.contains([' ', '\t', '\r']) {
        Some("white space ends a field in PMI-1")
    } else if version == Version::V2 && key.contains(';') {
        Some("`;` ends a pair in PMI-2")
    } else {
        None
    };
    cannot_carry("key", key, why)
}

/// Checks that `value` can travel as a `put` value in `version`'s messages and read back the
/// same: in PMI-1, no newline (it ends the message) and no carriage return (a parser takes
/// it for the line's end). A PMI-2 value may hold anything: its frame has a length and its
/// `;` is escaped.
pub fn check_value(version: Version, value: &str) -> Result<()> {
    let why = (version == Version::V1 && value.contains(['\n', '\r']))
        .then_some("a line break ends a PMI-1 message");
    cannot_carry("value", value, why)
}

fn cannot_carry(what: &'static str, text: &str, why: Option<&'static str>) -> Result<()> {
    match why {
        None => Ok(()),
        Some(why) => Err(ClientError::CannotCarry {
            what,
            text: text.chars().take(64).collect(),
            why,
        }),
    }
}

#[cfg(test)]
mod field_checks {
    use super::*;

    #[test]
    fn keys_and_values_the_wire_cannot_carry_are_refused() {
        use Version::{V1, V2};
        for (v, key) in [
            (V1, ""),
            (V1, "a\nb"),
            (V1, "a=b"),
            (V1, "a b"),
            (V1, "a\tb"),
            (V2, "a=b"),
            (V2, "a;b"),
            (V2, "a\nb"),
        ] {
            assert!(check_key(v, key).is_err(), "{v:?} key {key:?}");
        }
        for (v, key) in [(V1, "a;b"), (V2, "a b"), (V1, "PMI_process_mapping")] {
            assert!(check_key(v, key).is_ok(), "{v:?} key {key:?}");
        }
        assert!(check_value(V1, "v\ncmd=abort exitcode=7").is_err());
        assert!(check_value(V1, "v\r").is_err());
        assert!(check_value(V1, "one two=three;").is_ok());
        assert!(check_value(V2, "v\n;x=y").is_ok());
        let e = check_value(V1, "v\nx").unwrap_err().to_string();
        assert_eq!(
            e,
            "the value \"v\\nx\" cannot be sent: a line break ends a PMI-1 message"
        );
    }
}
