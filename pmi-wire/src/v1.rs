//! PMI-1: the line protocol of MPICH's "simple" PMI (version 1.1).
//!
//! A message is one line, `cmd=NAME key=value …\n`. Tokens are separated by spaces and may come
//! in any order; unknown keys are ignored; a token splits at its first `=`. Two fields run to
//! the end of the line instead of to the next space, because real values contain spaces (Open
//! MPI's modex pads with them): `value=` in `put`, and `value=` in `get_result`, which this
//! module always writes last. Every reply carries `rc` (absent means success when parsing)
//! and, on failure, `msg`.
//!
//! Spawn is the one multi-line message: one segment per command, each from a `mcmd=spawn` line
//! to an `endcmd` line, one `key=value` a line (values may contain spaces). The message ends at
//! the `endcmd` of the segment whose `spawnssofar` reaches `totspawns`.
//!
//! [`Request`] is what a client sends, [`Response`] what a server sends. `singinit` is sent by
//! both sides of the singleton handshake in the same form, so it is [`Request::Singinit`] in
//! both directions.

use crate::error::WireError;
use crate::fields::Fields;
use crate::limits::{V1_LINE_MAX, V1_SPAWN_MAX};
use crate::{Spawn, SpawnCommand, Status};
use bytes::{Buf, BufMut, BytesMut};
use nom::bytes::complete::{tag, take_till, take_till1};
use nom::character::complete::space0;
use nom::IResult;
use std::borrow::Cow;
use std::fmt::Write as _;

/// A PMI-1 message from a client to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `init`: opens the session and offers a protocol version (2.0 asks for PMI-2 framing).
    Init {
        /// `pmi_version`.
        version: u32,
        /// `pmi_subversion`.
        subversion: u32,
    },
    /// `initack`: in `PMI_PORT` + `PMI_ID` mode, names the process slot before `init`.
    InitAck {
        /// `pmiid`: the `PMI_ID` the server gave this process.
        pmiid: String,
    },
    /// `get_maxes`: asks for the kvsname, key and value length limits.
    GetMaxes,
    /// `get_appnum`: asks which MPMD command this process belongs to.
    GetAppnum,
    /// `get_my_kvsname`: asks for the job's KVS name.
    GetMyKvsname,
    /// `get_universe_size`: asks how many processes the job could hold.
    GetUniverseSize,
    /// `barrier_in`: the whole-job barrier and KVS commit point. PMI 1.2 adds a `group`.
    BarrierIn {
        /// PMI 1.2 `group=` (`WORLD:tag`, `NODE:tag`, `r1,r2:tag`); absent for a job barrier.
        group: Option<String>,
    },
    /// `put`: stores a key-value pair, visible to others after the next barrier.
    Put {
        /// `kvsname` (servers generally ignore it; empty when absent).
        kvsname: String,
        /// `key`.
        key: String,
        /// `value`: everything after ` value=` to the end of the line.
        value: String,
    },
    /// `get`: reads a key.
    Get {
        /// `kvsname` (empty when absent).
        kvsname: String,
        /// `key`.
        key: String,
    },
    /// `getbyidx`: legacy iteration over a KVS (PMI 1.0).
    GetByIdx {
        /// `kvsname` (empty when absent).
        kvsname: String,
        /// `idx`.
        idx: i64,
    },
    /// `publish_name`: publishes a service name with a port.
    PublishName {
        /// `service`.
        service: String,
        /// `port`.
        port: String,
    },
    /// `unpublish_name`: withdraws a published name.
    UnpublishName {
        /// `service`.
        service: String,
    },
    /// `lookup_name`: looks a published name up.
    LookupName {
        /// `service`.
        service: String,
    },
    /// `abort`: the process is about to exit and asks for the job to end. No reply.
    Abort {
        /// `exitcode` (Flux also accepts `exit_code`).
        exitcode: Option<i32>,
        /// `message` (Flux also accepts `error_msg`); spaces are written as `_`.
        message: Option<String>,
    },
    /// `finalize`: the process is done with PMI.
    Finalize,
    /// `singinit`: the singleton handshake, sent by both sides in this form.
    Singinit {
        /// `pmi_version`.
        pmi_version: Option<u32>,
        /// `pmi_subversion`.
        pmi_subversion: Option<u32>,
        /// `stdio` (`yes`/`no`).
        stdio: Option<String>,
        /// `authtype` (`none`).
        authtype: Option<String>,
    },
    /// `mcmd=spawn … endcmd`: start a new job.
    Spawn(Spawn),
}

/// A PMI-1 message from the server to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `response_to_init`: the version the server will speak.
    Init {
        /// `rc` and `msg`.
        status: Status,
        /// `pmi_version`.
        version: u32,
        /// `pmi_subversion`.
        subversion: u32,
    },
    /// `initack`: answer to [`Request::InitAck`]; three [`Response::Set`] lines follow.
    InitAck,
    /// `set KEY=VALUE`: one of `size`, `rank`, `debug` after `initack`.
    Set {
        /// `size`, `rank` or `debug`.
        key: String,
        /// Its value.
        value: String,
    },
    /// `maxes`: the advertised limits.
    Maxes {
        /// `kvsname_max`.
        kvsname_max: usize,
        /// `keylen_max`.
        keylen_max: usize,
        /// `vallen_max`.
        vallen_max: usize,
    },
    /// `appnum`.
    Appnum {
        /// `appnum`: the index of the process's MPMD command.
        appnum: i32,
    },
    /// `my_kvsname`.
    MyKvsname {
        /// `kvsname`.
        kvsname: String,
    },
    /// `universe_size`.
    UniverseSize {
        /// `size` (-1 when unknown).
        size: i32,
    },
    /// `barrier_out`: every process reached the barrier.
    BarrierOut {
        /// `rc` and `msg`.
        status: Status,
        /// PMI 1.2 `tag`, echoing the group barrier's tag.
        tag: Option<String>,
    },
    /// `put_result`.
    PutResult(Status),
    /// `get_result`; `value` is written last and runs to the end of the line.
    GetResult {
        /// `rc` and `msg`; nonzero means not found.
        status: Status,
        /// `value`, when found.
        value: Option<String>,
    },
    /// `getbyidx_results`.
    GetByIdxResult {
        /// `rc` and `msg`.
        status: Status,
        /// `nextidx`.
        nextidx: Option<i64>,
        /// `key`.
        key: Option<String>,
        /// `val`.
        val: Option<String>,
    },
    /// `publish_result`.
    PublishResult(Status),
    /// `unpublish_result`.
    UnpublishResult(Status),
    /// `lookup_result`.
    LookupResult {
        /// `rc` and `msg`.
        status: Status,
        /// `port`, when found.
        port: Option<String>,
    },
    /// `finalize_ack`.
    FinalizeAck,
    /// `singinit_info`: the end of the singleton handshake.
    SinginitInfo {
        /// `versionok` (`yes`/`no`).
        versionok: String,
        /// `stdio` (`yes`/`no`).
        stdio: String,
        /// `kvsname` of the singleton's job.
        kvsname: String,
    },
    /// `spawn_result`.
    SpawnResult {
        /// `rc` and `msg`.
        status: Status,
        /// `errcodes`, one per spawned process, comma-separated on the wire (absent: all 0).
        errcodes: Vec<i32>,
    },
}

// ---------------------------------------------------------------------------------------------
// Framing

/// How long the next complete message at the start of `buf` is, newlines included.
///
/// `Ok(None)` means more bytes are needed. A line longer than [`V1_LINE_MAX`], or a spawn
/// message longer than [`V1_SPAWN_MAX`], is an error.
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let Some(nl) = find_newline(buf, V1_LINE_MAX)? else {
        return Ok(None);
    };
    if trim_ascii(&buf[..nl]).starts_with(b"mcmd=") {
        spawn_len(buf)
    } else {
        Ok(Some(nl + 1))
    }
}

fn find_newline(buf: &[u8], max: usize) -> Result<Option<usize>, WireError> {
    let window = &buf[..buf.len().min(max)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some(i)),
        None if buf.len() >= max => Err(WireError::TooLong { max }),
        None => Ok(None),
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// Length of a whole `mcmd=spawn` message: up to the `endcmd` of the last segment.
fn spawn_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let mut pos = 0;
    let (mut total, mut sofar): (Option<u64>, Option<u64>) = (None, None);
    while pos < buf.len() {
        if pos > V1_SPAWN_MAX {
            return Err(WireError::TooLong { max: V1_SPAWN_MAX });
        }
        let Some(nl) = find_newline(&buf[pos..], V1_LINE_MAX)? else {
            break;
        };
        let line = trim_ascii(&buf[pos..pos + nl]);
        pos += nl + 1;
        if line == b"endcmd" {
            match (total, sofar) {
                (Some(t), Some(s)) if s < t => {}
                _ => return Ok(Some(pos)),
            }
            (total, sofar) = (None, None);
        } else if let Some(v) = line.strip_prefix(b"totspawns=") {
            total = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse().ok());
        } else if let Some(v) = line.strip_prefix(b"spawnssofar=") {
            sofar = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse().ok());
        }
    }
    if buf.len() > V1_SPAWN_MAX {
        return Err(WireError::TooLong { max: V1_SPAWN_MAX });
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// Tokens

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r'
}

fn command(input: &str) -> IResult<&str, &str> {
    let (input, _) = space0(input)?;
    let (input, _) = tag("cmd=")(input)?;
    take_till(is_space)(input)
}

fn token(input: &str) -> IResult<&str, &str> {
    let (input, _) = space0(input)?;
    take_till1(is_space)(input)
}

/// Commands whose `value=` runs to the end of the line.
fn value_runs_to_eol(cmd: &str) -> bool {
    cmd == "put" || cmd == "get_result"
}

/// Splits one line (without its newline) into the command and its fields.
fn parse_line(line: &str) -> Result<Fields<'_>, WireError> {
    let Ok((mut rest, cmd)) = command(line) else {
        return Err(WireError::NoCommand(line.chars().take(64).collect()));
    };
    if cmd.is_empty() {
        return Err(WireError::NoCommand(line.chars().take(64).collect()));
    }
    let mut fields = Fields {
        cmd,
        pairs: Vec::new(),
    };
    let eol_value = value_runs_to_eol(cmd);
    loop {
        let trimmed = rest.trim_start_matches(is_space);
        if eol_value {
            if let Some(v) = trimmed.strip_prefix("value=") {
                let v = v.trim_end_matches('\r');
                fields.pairs.push(("value", Cow::Borrowed(v)));
                break;
            }
        }
        let Ok((r, tok)) = token(rest) else { break };
        rest = r;
        let (k, v) = tok.split_once('=').unwrap_or((tok, ""));
        if k.is_empty() {
            return Err(WireError::Malformed(format!("token {tok:?} has no key")));
        }
        fields.pairs.push((k, Cow::Borrowed(v)));
    }
    Ok(fields)
}

fn status(f: &Fields) -> Result<Status, WireError> {
    Ok(Status {
        rc: f.rc()?,
        msg: f.opt_string("msg"),
    })
}

fn to_str(msg: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(msg).map_err(|_| WireError::NotUtf8)
}

fn strip_newline(msg: &str) -> &str {
    msg.strip_suffix('\n').unwrap_or(msg)
}

// ---------------------------------------------------------------------------------------------
// Requests

impl Request {
    /// Parses the first message in `buf`: `Ok(None)` if it is incomplete, else the message and
    /// the number of bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, WireError> {
        match message_len(buf)? {
            None => Ok(None),
            Some(n) => Ok(Some((Request::parse_message(&buf[..n])?, n))),
        }
    }

    /// Takes the first complete message off `buf`. A malformed but complete message is
    /// consumed and its error returned, so the caller can reply and read on; a framing error
    /// ([`WireError::is_fatal`]) consumes nothing.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Request>, WireError> {
        decode_with(buf, Request::parse_message)
    }

    /// Parses exactly one complete message (a line, or a whole spawn).
    pub fn parse_message(msg: &[u8]) -> Result<Request, WireError> {
        let text = to_str(msg)?;
        if text.trim_start().starts_with("mcmd=") {
            return parse_spawn(text).map(Request::Spawn);
        }
        let f = parse_line(strip_newline(text))?;
        let kvsname = || f.opt_string("kvsname").unwrap_or_default();
        Ok(match f.cmd {
            "init" => Request::Init {
                version: f.num("pmi_version")?,
                subversion: f.num("pmi_subversion")?,
            },
            "initack" => Request::InitAck {
                pmiid: f.string("pmiid")?,
            },
            "get_maxes" => Request::GetMaxes,
            "get_appnum" => Request::GetAppnum,
            "get_my_kvsname" => Request::GetMyKvsname,
            "get_universe_size" => Request::GetUniverseSize,
            "barrier_in" => Request::BarrierIn {
                group: f.opt_string("group"),
            },
            "put" => Request::Put {
                kvsname: kvsname(),
                key: f.string("key")?,
                value: f.string("value")?,
            },
            "get" => Request::Get {
                kvsname: kvsname(),
                key: f.string("key")?,
            },
            "getbyidx" => Request::GetByIdx {
                kvsname: kvsname(),
                idx: f.num("idx")?,
            },
            "publish_name" => Request::PublishName {
                service: f.string("service")?,
                port: f.string("port")?,
            },
            "unpublish_name" => Request::UnpublishName {
                service: f.string("service")?,
            },
            "lookup_name" => Request::LookupName {
                service: f.string("service")?,
            },
            "abort" => Request::Abort {
                exitcode: match f.opt_num("exitcode")? {
                    Some(c) => Some(c),
                    None => f.opt_num("exit_code")?,
                },
                message: f
                    .opt_string("message")
                    .or_else(|| f.opt_string("error_msg")),
            },
            "finalize" => Request::Finalize,
            "singinit" => Request::Singinit {
                pmi_version: f.opt_num("pmi_version")?,
                pmi_subversion: f.opt_num("pmi_subversion")?,
                stdio: f.opt_string("stdio"),
                authtype: f.opt_string("authtype"),
            },
            other => return Err(WireError::UnknownCommand(other.chars().take(64).collect())),
        })
    }

    /// The command name as it appears on the wire (`spawn` for `mcmd=spawn`).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Init { .. } => "init",
            Request::InitAck { .. } => "initack",
            Request::GetMaxes => "get_maxes",
            Request::GetAppnum => "get_appnum",
            Request::GetMyKvsname => "get_my_kvsname",
            Request::GetUniverseSize => "get_universe_size",
            Request::BarrierIn { .. } => "barrier_in",
            Request::Put { .. } => "put",
            Request::Get { .. } => "get",
            Request::GetByIdx { .. } => "getbyidx",
            Request::PublishName { .. } => "publish_name",
            Request::UnpublishName { .. } => "unpublish_name",
            Request::LookupName { .. } => "lookup_name",
            Request::Abort { .. } => "abort",
            Request::Finalize => "finalize",
            Request::Singinit { .. } => "singinit",
            Request::Spawn(_) => "spawn",
        }
    }

    /// Appends the message, newline included, to `dst`.
    ///
    /// Fields other than a `put` value must not contain white space; a `message` has its
    /// white space written as `_`. No field may contain a newline.
    pub fn encode(&self, dst: &mut BytesMut) {
        let mut w = Line::new(dst, self.name());
        match self {
            Request::Init {
                version,
                subversion,
            } => {
                w.num("pmi_version", *version)
                    .num("pmi_subversion", *subversion);
            }
            Request::InitAck { pmiid } => {
                w.str("pmiid", pmiid);
            }
            Request::GetMaxes
            | Request::GetAppnum
            | Request::GetMyKvsname
            | Request::GetUniverseSize
            | Request::Finalize => {}
            Request::BarrierIn { group } => {
                w.opt("group", group.as_deref());
            }
            Request::Put {
                kvsname,
                key,
                value,
            } => {
                w.str("kvsname", kvsname)
                    .str("key", key)
                    .str("value", value);
            }
            Request::Get { kvsname, key } => {
                w.str("kvsname", kvsname).str("key", key);
            }
            Request::GetByIdx { kvsname, idx } => {
                w.str("kvsname", kvsname).num("idx", *idx);
            }
            Request::PublishName { service, port } => {
                w.str("service", service).str("port", port);
            }
            Request::UnpublishName { service } | Request::LookupName { service } => {
                w.str("service", service);
            }
            Request::Abort { exitcode, message } => {
                if let Some(c) = exitcode {
                    w.num("exitcode", *c);
                }
                w.msg("message", message.as_deref());
            }
            Request::Singinit {
                pmi_version,
                pmi_subversion,
                stdio,
                authtype,
            } => {
                if let Some(v) = pmi_version {
                    w.num("pmi_version", *v);
                }
                if let Some(v) = pmi_subversion {
                    w.num("pmi_subversion", *v);
                }
                w.opt("stdio", stdio.as_deref())
                    .opt("authtype", authtype.as_deref());
            }
            Request::Spawn(spawn) => {
                w.abandon();
                encode_spawn(spawn, dst);
                return;
            }
        }
        w.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

impl Response {
    /// Parses the first message in `buf`: `Ok(None)` if it is incomplete, else the message and
    /// the number of bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Response, usize)>, WireError> {
        match message_len(buf)? {
            None => Ok(None),
            Some(n) => Ok(Some((Response::parse_message(&buf[..n])?, n))),
        }
    }

    /// Takes the first complete message off `buf`, like [`Request::decode`].
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Response>, WireError> {
        decode_with(buf, Response::parse_message)
    }

    /// Parses exactly one complete line.
    pub fn parse_message(msg: &[u8]) -> Result<Response, WireError> {
        let f = parse_line(strip_newline(to_str(msg)?))?;
        Ok(match f.cmd {
            "response_to_init" => Response::Init {
                status: status(&f)?,
                version: f.opt_num("pmi_version")?.unwrap_or(0),
                subversion: f.opt_num("pmi_subversion")?.unwrap_or(0),
            },
            "initack" => Response::InitAck,
            "set" => {
                let (k, v) = f
                    .pairs
                    .first()
                    .ok_or_else(|| crate::error::missing("set", "size|rank|debug"))?;
                Response::Set {
                    key: k.to_string(),
                    value: v.to_string(),
                }
            }
            "maxes" => Response::Maxes {
                kvsname_max: f.num("kvsname_max")?,
                keylen_max: f.num("keylen_max")?,
                vallen_max: f.num("vallen_max")?,
            },
            "appnum" => Response::Appnum {
                appnum: f.num("appnum")?,
            },
            "my_kvsname" => Response::MyKvsname {
                kvsname: f.string("kvsname")?,
            },
            "universe_size" => Response::UniverseSize {
                size: f.num("size")?,
            },
            "barrier_out" => Response::BarrierOut {
                status: status(&f)?,
                tag: f.opt_string("tag"),
            },
            "put_result" => Response::PutResult(status(&f)?),
            "get_result" => Response::GetResult {
                status: status(&f)?,
                value: f.opt_string("value"),
            },
            "getbyidx_results" => Response::GetByIdxResult {
                status: status(&f)?,
                nextidx: f.opt_num("nextidx")?,
                key: f.opt_string("key"),
                val: f.opt_string("val"),
            },
            "publish_result" => Response::PublishResult(status(&f)?),
            "unpublish_result" => Response::UnpublishResult(status(&f)?),
            "lookup_result" => Response::LookupResult {
                status: status(&f)?,
                port: f.opt_string("port"),
            },
            "finalize_ack" => Response::FinalizeAck,
            "singinit_info" => Response::SinginitInfo {
                versionok: f.opt_string("versionok").unwrap_or_default(),
                stdio: f.opt_string("stdio").unwrap_or_default(),
                kvsname: f.opt_string("kvsname").unwrap_or_default(),
            },
            "spawn_result" => Response::SpawnResult {
                status: status(&f)?,
                errcodes: match f.opt("errcodes") {
                    None | Some("") => Vec::new(),
                    Some(list) => list
                        .split(',')
                        .map(|c| {
                            c.trim()
                                .parse()
                                .map_err(|_| crate::error::bad("spawn_result", "errcodes", list))
                        })
                        .collect::<Result<_, _>>()?,
                },
            },
            other => return Err(WireError::UnknownCommand(other.chars().take(64).collect())),
        })
    }

    /// The command name as it appears on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Response::Init { .. } => "response_to_init",
            Response::InitAck => "initack",
            Response::Set { .. } => "set",
            Response::Maxes { .. } => "maxes",
            Response::Appnum { .. } => "appnum",
            Response::MyKvsname { .. } => "my_kvsname",
            Response::UniverseSize { .. } => "universe_size",
            Response::BarrierOut { .. } => "barrier_out",
            Response::PutResult(_) => "put_result",
            Response::GetResult { .. } => "get_result",
            Response::GetByIdxResult { .. } => "getbyidx_results",
            Response::PublishResult(_) => "publish_result",
            Response::UnpublishResult(_) => "unpublish_result",
            Response::LookupResult { .. } => "lookup_result",
            Response::FinalizeAck => "finalize_ack",
            Response::SinginitInfo { .. } => "singinit_info",
            Response::SpawnResult { .. } => "spawn_result",
        }
    }

    /// Appends the line, newline included, to `dst`. Every reply with a status carries `rc`;
    /// `msg` has its white space written as `_`; a `get_result` value is written last.
    pub fn encode(&self, dst: &mut BytesMut) {
        let mut w = Line::new(dst, self.name());
        match self {
            Response::Init {
                status,
                version,
                subversion,
            } => {
                w.status(status)
                    .num("pmi_version", *version)
                    .num("pmi_subversion", *subversion);
            }
            Response::InitAck | Response::FinalizeAck => {}
            Response::Set { key, value } => {
                w.str(key, value);
            }
            Response::Maxes {
                kvsname_max,
                keylen_max,
                vallen_max,
            } => {
                w.num("rc", 0)
                    .num("kvsname_max", *kvsname_max)
                    .num("keylen_max", *keylen_max)
                    .num("vallen_max", *vallen_max);
            }
            Response::Appnum { appnum } => {
                w.num("rc", 0).num("appnum", *appnum);
            }
            Response::MyKvsname { kvsname } => {
                w.num("rc", 0).str("kvsname", kvsname);
            }
            Response::UniverseSize { size } => {
                w.num("rc", 0).num("size", *size);
            }
            Response::BarrierOut { status, tag } => {
                w.status(status).opt("tag", tag.as_deref());
            }
            Response::PutResult(s) | Response::PublishResult(s) | Response::UnpublishResult(s) => {
                w.status(s);
            }
            Response::GetResult { status, value } => {
                w.status(status).opt("value", value.as_deref());
            }
            Response::GetByIdxResult {
                status,
                nextidx,
                key,
                val,
            } => {
                w.status(status);
                if let Some(n) = nextidx {
                    w.num("nextidx", *n);
                }
                w.opt("key", key.as_deref()).opt("val", val.as_deref());
            }
            Response::LookupResult { status, port } => {
                w.status(status).opt("port", port.as_deref());
            }
            Response::SinginitInfo {
                versionok,
                stdio,
                kvsname,
            } => {
                w.str("versionok", versionok)
                    .str("stdio", stdio)
                    .str("kvsname", kvsname);
            }
            Response::SpawnResult { status, errcodes } => {
                w.status(status);
                if !errcodes.is_empty() {
                    let list: Vec<String> = errcodes.iter().map(i32::to_string).collect();
                    w.str("errcodes", &list.join(","));
                }
            }
        }
        w.finish();
    }
}

fn decode_with<T>(
    buf: &mut BytesMut,
    parse: impl FnOnce(&[u8]) -> Result<T, WireError>,
) -> Result<Option<T>, WireError> {
    let Some(n) = message_len(buf)? else {
        return Ok(None);
    };
    // Parsed in place, then consumed: no split (which would make the buffer shared and count
    // references on every message).
    let parsed = parse(&buf[..n]);
    buf.advance(n);
    parsed.map(Some)
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Builds one `cmd=NAME k=v …\n` line.
struct Line<'a> {
    dst: &'a mut BytesMut,
}

impl<'a> Line<'a> {
    fn new(dst: &'a mut BytesMut, cmd: &str) -> Line<'a> {
        dst.reserve(64);
        dst.put_slice(b"cmd=");
        dst.put_slice(cmd.as_bytes());
        Line { dst }
    }

    /// Drops what `new` wrote: for the spawn message, which has no `cmd=` line.
    fn abandon(&mut self) {
        let n = self.dst.len() - "cmd=spawn".len();
        self.dst.truncate(n);
    }

    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        self.dst.reserve(k.len() + v.len() + 2);
        self.dst.put_u8(b' ');
        self.dst.put_slice(k.as_bytes());
        self.dst.put_u8(b'=');
        self.dst.put_slice(v.as_bytes());
        self
    }

    fn opt(&mut self, k: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.str(k, v);
        }
        self
    }

    fn num(&mut self, k: &str, v: impl std::fmt::Display) -> &mut Self {
        let mut s = String::new();
        let _ = write!(s, "{v}");
        self.str(k, &s)
    }

    fn msg(&mut self, k: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.str(k, &sanitize(v));
        }
        self
    }

    fn status(&mut self, s: &Status) -> &mut Self {
        self.num("rc", s.rc).msg("msg", s.msg.as_deref())
    }

    fn finish(self) {
        self.dst.put_u8(b'\n');
    }
}

/// Appends a failure reply to a request the server could not read or does not know:
/// `cmd=CMD_result rc=RC msg=…` (PMI-1 has no generic error reply; a client waiting for
/// another reply reports this one as unexpected, with its message). `cmd` is the request's
/// name as sent, or `error` when even that was unreadable.
pub fn encode_error(cmd: &str, status: &Status, dst: &mut BytesMut) {
    let name = sanitize(&format!("{cmd}_result"));
    let mut w = Line::new(dst, &name);
    w.status(status);
    w.finish();
}

/// Writes free text as one token: the characters that end a token or a line (space, tab,
/// carriage return, newline) become `_`. Other characters, other white space included, pass
/// unchanged, so that what a parser reads from a token re-encodes to the same token.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| if is_space(c) || c == '\n' { '_' } else { c })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Spawn

fn encode_spawn(spawn: &Spawn, dst: &mut BytesMut) {
    let total = spawn.commands.len();
    let mut s = String::new();
    for (i, c) in spawn.commands.iter().enumerate() {
        let _ = writeln!(s, "mcmd=spawn");
        let _ = writeln!(s, "nprocs={}", c.nprocs);
        let _ = writeln!(s, "execname={}", c.execname);
        let _ = writeln!(s, "totspawns={total}");
        let _ = writeln!(s, "spawnssofar={}", i + 1);
        let _ = writeln!(s, "argcnt={}", c.args.len());
        for (j, a) in c.args.iter().enumerate() {
            let _ = writeln!(s, "arg{}={a}", j + 1);
        }
        // Written in every segment, as the classic client does: newer servers read the first,
        // older ones read each.
        let _ = writeln!(s, "preput_num={}", spawn.preput.len());
        for (j, (k, v)) in spawn.preput.iter().enumerate() {
            let _ = writeln!(s, "preput_key_{j}={k}");
            let _ = writeln!(s, "preput_val_{j}={v}");
        }
        let _ = writeln!(s, "info_num={}", c.info.len());
        for (j, (k, v)) in c.info.iter().enumerate() {
            let _ = writeln!(s, "info_key_{j}={k}");
            let _ = writeln!(s, "info_val_{j}={v}");
        }
        let _ = writeln!(s, "endcmd");
    }
    dst.put_slice(s.as_bytes());
}

/// Parses a whole `mcmd=spawn … endcmd` message, segment by segment, by key rather than by
/// position (clients order the keys differently). Preputs come from the first segment.
fn parse_spawn(text: &str) -> Result<Spawn, WireError> {
    let mut segments: Vec<Fields> = Vec::new();
    let mut current: Option<Fields> = None;
    for raw in text.lines() {
        let line = raw.trim_matches(|c: char| c == '\r' || c == ' ' || c == '\t');
        if line.is_empty() {
            continue;
        }
        if line == "endcmd" {
            let seg = current
                .take()
                .ok_or_else(|| WireError::Malformed("endcmd outside a spawn segment".into()))?;
            segments.push(seg);
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| WireError::Malformed(format!("spawn line {line:?} has no '='")))?;
        let (k, v) = (k.trim(), raw.split_once('=').map_or(v, |(_, v)| v));
        let v = v.trim_end_matches('\r');
        if k == "mcmd" {
            if current.is_some() {
                return Err(WireError::Malformed("mcmd=spawn inside a segment".into()));
            }
            if v.trim() != "spawn" {
                return Err(WireError::UnknownCommand(format!("mcmd={}", v.trim())));
            }
            current = Some(Fields {
                cmd: "spawn",
                pairs: Vec::new(),
            });
            continue;
        }
        let seg = current.as_mut().ok_or_else(|| {
            WireError::Malformed(format!("spawn line {line:?} before mcmd=spawn"))
        })?;
        seg.pairs.push((k, Cow::Borrowed(v)));
    }
    if current.is_some() || segments.is_empty() {
        return Err(crate::error::missing("spawn", "endcmd"));
    }
    let mut spawn = Spawn::default();
    for (i, f) in segments.iter().enumerate() {
        let mut cmd = SpawnCommand {
            execname: f.string("execname")?,
            nprocs: f.num("nprocs")?,
            ..Default::default()
        };
        match f.opt_num::<usize>("argcnt")? {
            Some(n) => {
                for j in 1..=n {
                    cmd.args.push(f.string(&format!("arg{j}"))?);
                }
            }
            None => {
                while let Some(a) = f.opt(&format!("arg{}", cmd.args.len() + 1)) {
                    cmd.args.push(a.to_string());
                }
            }
        }
        let info_num = match f.opt_num::<usize>("info_num")? {
            Some(n) => n,
            None => f.opt_num::<usize>("infonum")?.unwrap_or(0),
        };
        cmd.info = pairs(f, info_num, "info_key_", "info_val_")?;
        if i == 0 {
            let n = f.opt_num::<usize>("preput_num")?.unwrap_or(0);
            spawn.preput = pairs(f, n, "preput_key_", "preput_val_")?;
        }
        spawn.commands.push(cmd);
    }
    Ok(spawn)
}

fn pairs(f: &Fields, n: usize, kp: &str, vp: &str) -> Result<Vec<(String, String)>, WireError> {
    let mut out = Vec::new();
    for j in 0..n {
        out.push((
            f.string(&format!("{kp}{j}"))?,
            f.string(&format!("{vp}{j}"))?,
        ));
    }
    Ok(out)
}
