//! PMI-2: length-prefixed frames of `key=value;` pairs.
//!
//! A PMI-2 session opens with the PMI-1 line `cmd=init pmi_version=2 pmi_subversion=0` and its
//! PMI-1 `response_to_init` (see [`crate::v1`]). From then on every message is a frame: six
//! ASCII bytes holding the decimal length of the body (padded with spaces on the left by new
//! MPICH clients, on the right by old ones and Slurm), then the body
//! `cmd=NAME;key=value;…;`. Every pair ends with `;`; a `;` inside a value is doubled. Bytes
//! after the last complete pair, or after a NUL, are ignored, and a request that still does
//! not parse is read again without its last 6 bytes: an old MPICH client counts 6 bytes too
//! many and sends stale bytes of its buffer there, not always after a NUL
//! ([`Request::parse_body`]). A multi-threaded client tags requests with `thrid`, which the reply echoes; replies
//! are named `NAME-response` and carry `rc` and, on failure, `errmsg`.
//!
//! [`Frame`] wraps a message with its `thrid`. [`Request`] is what a client sends, [`Response`]
//! what a server sends.

use crate::error::{bad, missing, WireError};
use crate::fields::Fields;
use crate::limits::V2_LEN_WIDTH;
use crate::{Spawn, SpawnCommand, Status};
use bytes::{Buf, BufMut, BytesMut};
use std::borrow::Cow;

/// A PMI-2 message with the thread tag that a reply must echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<M> {
    /// `thrid`, when the client sent one.
    pub thrid: Option<String>,
    /// The message.
    pub msg: M,
}

impl<M> Frame<M> {
    /// A message with no thread tag.
    pub fn new(msg: M) -> Frame<M> {
        Frame { thrid: None, msg }
    }
}

/// A PMI-2 message from a client to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `fullinit`: identifies the process. Every field is optional in practice: new MPICH
    /// clients send only `pmirank`, Slurm's client all three.
    FullInit {
        /// `pmijobid` (from `PMI_JOBID`).
        pmijobid: Option<String>,
        /// `pmirank` (from `PMI_ID` or `PMI_RANK`; `-1` when unknown). Slurm's client sends
        /// `srcid` over `PMI_PORT`; it is read here too.
        pmirank: Option<i64>,
        /// `threaded`.
        threaded: Option<bool>,
    },
    /// `job-getid`: asks for the job id (the kvsname).
    JobGetId,
    /// `job-connect`: asks to connect to another job's KVS.
    JobConnect {
        /// `jobid`.
        jobid: String,
    },
    /// `job-disconnect`.
    JobDisconnect {
        /// `jobid`.
        jobid: String,
    },
    /// `kvs-put`: stores a pair, visible after the next fence.
    KvsPut {
        /// `key`.
        key: String,
        /// `value`.
        value: String,
    },
    /// `kvs-get`: reads a key.
    KvsGet {
        /// `jobid`: the job whose KVS to read (absent: the caller's).
        jobid: Option<String>,
        /// `srcid`: a hint naming the rank that put the key (`-1`: unknown).
        srcid: Option<i64>,
        /// `key`.
        key: String,
    },
    /// `kvs-fence`: the collective commit of every put before it.
    KvsFence,
    /// `info-putnodeattr`: stores a node-local pair.
    InfoPutNodeAttr {
        /// `key`.
        key: String,
        /// `value`.
        value: String,
    },
    /// `info-getnodeattr`: reads a node-local key, waiting for it when `wait` is true.
    InfoGetNodeAttr {
        /// `key`.
        key: String,
        /// `wait`.
        wait: bool,
    },
    /// `info-getjobattr`: reads a job attribute such as `PMI_process_mapping`.
    InfoGetJobAttr {
        /// `key`.
        key: String,
    },
    /// `name-publish`.
    NamePublish {
        /// `name`.
        name: String,
        /// `port`.
        port: String,
        /// `infokey<i>`/`infoval<i>` pairs (`infokeycount` of them).
        info: Vec<(String, String)>,
    },
    /// `name-unpublish`.
    NameUnpublish {
        /// `name`.
        name: String,
    },
    /// `name-lookup`.
    NameLookup {
        /// `name`.
        name: String,
    },
    /// `spawn`: start a new job.
    Spawn(Spawn),
    /// `abort`: the process is about to exit and asks for the job (or itself) to end. No reply.
    Abort {
        /// `isworld`.
        isworld: Option<bool>,
        /// `msg` (new MPICH clients: `message`).
        message: Option<String>,
        /// `exitcode` (new MPICH clients only).
        exitcode: Option<i32>,
    },
    /// `finalize`.
    Finalize,
}

/// A PMI-2 message from the server to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `fullinit-response`.
    FullInit {
        /// `rc` and `errmsg`.
        status: Status,
        /// `rank`.
        rank: i64,
        /// `size`.
        size: i64,
        /// `appnum`.
        appnum: i64,
        /// `spawner-jobid`: present only in spawned jobs, which is how the client knows.
        spawner_jobid: Option<String>,
        /// `debugged`.
        debugged: bool,
        /// `pmiverbose`.
        pmiverbose: bool,
    },
    /// `job-getid-response`.
    JobGetId {
        /// `rc` and `errmsg`.
        status: Status,
        /// `jobid`.
        jobid: String,
    },
    /// `job-connect-response`.
    JobConnect {
        /// `rc` and `errmsg`.
        status: Status,
        /// `kvscopy`.
        kvscopy: bool,
    },
    /// `job-disconnect-response`.
    JobDisconnect(Status),
    /// `kvs-put-response`.
    KvsPut(Status),
    /// `kvs-get-response`.
    KvsGet(Lookup),
    /// `kvs-fence-response`.
    KvsFence(Status),
    /// `info-putnodeattr-response`.
    InfoPutNodeAttr(Status),
    /// `info-getnodeattr-response`.
    InfoGetNodeAttr(Lookup),
    /// `info-getjobattr-response`.
    InfoGetJobAttr(Lookup),
    /// `name-publish-response`.
    NamePublish(Status),
    /// `name-unpublish-response`.
    NameUnpublish(Status),
    /// `name-lookup-response`; the port is written both as `port=` (Hydra, new MPICH) and as
    /// `value=` (old MPICH, Slurm).
    NameLookup(Lookup),
    /// `spawn-response`.
    Spawn {
        /// `rc` and `errmsg`.
        status: Status,
        /// `jobid`: the new job's id.
        jobid: Option<String>,
        /// `errcodes`, one per process, comma-separated on the wire (absent: all 0).
        errcodes: Vec<i32>,
    },
    /// `finalize-response`.
    Finalize(Status),
}

/// The answer to a read: found or not, and the value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lookup {
    /// `rc` and `errmsg`.
    pub status: Status,
    /// `found`.
    pub found: bool,
    /// `value` (or `port` for a name lookup).
    pub value: Option<String>,
}

impl Lookup {
    /// A successful read.
    pub fn found(value: impl Into<String>) -> Lookup {
        Lookup {
            status: Status::ok(),
            found: true,
            value: Some(value.into()),
        }
    }

    /// A read of an absent key: `found=FALSE` with a nonzero `rc`, which every client reads as
    /// "not there".
    pub fn not_found(msg: impl Into<String>) -> Lookup {
        Lookup {
            status: Status::error(1, msg),
            found: false,
            value: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Framing

/// How long the next complete frame at the start of `buf` is, prefix included; `Ok(None)`
/// when more bytes are needed. A prefix that is not a decimal number is an error.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    if buf.len() < V2_LEN_WIDTH {
        return Ok(None);
    }
    let prefix = &buf[..V2_LEN_WIDTH];
    let digits = String::from_utf8_lossy(prefix);
    let len: usize = digits
        .trim_matches(|c: char| c == ' ' || c == '\0')
        .parse()
        .map_err(|_| WireError::BadLength(digits.to_string()))?;
    let total = V2_LEN_WIDTH + len;
    Ok((buf.len() >= total).then_some(total))
}

/// Splits a body into its pairs, undoing `;;`. The first pair must be `cmd`.
fn parse_body(body: &[u8]) -> Result<Fields<'_>, WireError> {
    // C clients write a string: whatever follows its NUL is stale buffer contents (MPICH
    // 4.0's pmi2/simple client pads its frames with them, `;` included).
    let body = &body[..body.iter().position(|&b| b == 0).unwrap_or(body.len())];
    let mut pairs: Vec<(&str, Cow<str>)> = Vec::new();
    let mut i = 0;
    'pairs: while i < body.len() {
        let rest = &body[i..];
        let Some(eq) = rest.iter().position(|&b| b == b'=' || b == b';') else {
            break; // an unterminated tail: ignored
        };
        if rest[eq] == b';' {
            if pairs.is_empty() || !rest[..eq].iter().all(|b| b.is_ascii_whitespace()) {
                return Err(WireError::Malformed(format!(
                    "pair {:?} has no '='",
                    String::from_utf8_lossy(&rest[..eq.min(64)])
                )));
            }
            i += eq + 1;
            continue;
        }
        let key = std::str::from_utf8(&rest[..eq]).map_err(|_| WireError::NotUtf8)?;
        let key = key.trim();
        if key.is_empty() {
            return Err(WireError::Malformed("a pair has an empty key".into()));
        }
        let mut j = eq + 1;
        let mut escaped = false;
        loop {
            match rest.get(j) {
                None => break 'pairs, // an unterminated tail: ignored
                Some(b';') if rest.get(j + 1) == Some(&b';') => {
                    escaped = true;
                    j += 2;
                }
                Some(b';') => break,
                Some(_) => j += 1,
            }
        }
        let raw = std::str::from_utf8(&rest[eq + 1..j]).map_err(|_| WireError::NotUtf8)?;
        let value = if escaped {
            Cow::Owned(raw.replace(";;", ";"))
        } else {
            Cow::Borrowed(raw)
        };
        pairs.push((key, value));
        i += j + 1;
    }
    if pairs.is_empty() {
        // `cmd=NAME` with no terminator at all: accept it when it is the whole body.
        let text = std::str::from_utf8(body).map_err(|_| WireError::NotUtf8)?;
        let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
        if let Some(cmd) = text.strip_prefix("cmd=") {
            if !cmd.is_empty() && !cmd.contains(['=', ';']) {
                return Ok(Fields {
                    cmd,
                    pairs: Vec::new(),
                });
            }
        }
        return Err(WireError::NoCommand(text.chars().take(64).collect()));
    }
    let (k, cmd) = pairs.remove(0);
    if k != "cmd" {
        return Err(WireError::NoCommand(format!("{k}={cmd}")));
    }
    let Cow::Borrowed(cmd) = cmd else {
        return Err(WireError::Malformed("command name holds ';'".into()));
    };
    Ok(Fields { cmd, pairs })
}

fn thrid(f: &Fields) -> Option<String> {
    f.opt_string("thrid")
}

fn status(f: &Fields) -> Result<Status, WireError> {
    Ok(Status {
        rc: f.rc()?,
        msg: f.opt_string("errmsg").or_else(|| f.opt_string("msg")),
    })
}

fn flag(f: &Fields, key: &str) -> Result<bool, WireError> {
    Ok(f.opt_bool(key)?.unwrap_or(false))
}

fn lookup(f: &Fields, value_key: &str) -> Result<Lookup, WireError> {
    let value = f.opt_string(value_key).or_else(|| f.opt_string("value"));
    let found = match f.opt_bool("found")? {
        Some(b) => b,
        None => value.is_some(),
    };
    Ok(Lookup {
        status: status(f)?,
        found,
        value,
    })
}

fn body_of(buf: &[u8]) -> &[u8] {
    &buf[V2_LEN_WIDTH..]
}

fn decode_with<T>(
    buf: &mut BytesMut,
    parse: impl FnOnce(&[u8]) -> Result<T, WireError>,
) -> Result<Option<T>, WireError> {
    let Some(n) = frame_len(buf)? else {
        return Ok(None);
    };
    // Parsed in place, then consumed (see `v1::decode_with`).
    let parsed = parse(body_of(&buf[..n]));
    buf.advance(n);
    parsed.map(Some)
}

// ---------------------------------------------------------------------------------------------
// Requests

impl Frame<Request> {
    /// Parses the first frame in `buf`: `Ok(None)` if it is incomplete, else the message and
    /// the number of bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Frame<Request>, usize)>, WireError> {
        match frame_len(buf)? {
            None => Ok(None),
            Some(n) => Ok(Some((Self::parse_body(body_of(&buf[..n]))?, n))),
        }
    }

    /// Takes the first complete frame off `buf`. A malformed but complete frame is consumed
    /// and its error returned; a bad length prefix ([`WireError::is_fatal`]) consumes nothing.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame<Request>>, WireError> {
        decode_with(buf, Self::parse_body)
    }

    /// Parses one frame body (without its length prefix).
    ///
    /// The old MPICH PMI-2 client (`simple2pmi.c`, MPICH ≤ 4.0) declares [`V2_LEN_WIDTH`]
    /// bytes more than its body and sends that many stale bytes of its buffer after the last
    /// pair. Usually they start with a NUL, which ends the body; but after a longer command
    /// they are that command's text, such as `=b;arg`, which does not parse. A body that does
    /// not parse is therefore read again without its last [`V2_LEN_WIDTH`] bytes when what
    /// remains ends a pair; the first error is reported if that fails too.
    pub fn parse_body(body: &[u8]) -> Result<Frame<Request>, WireError> {
        Self::parse_pairs(body).or_else(|e| match body.len().checked_sub(V2_LEN_WIDTH) {
            Some(n) if n > 0 && body[n - 1] == b';' => Self::parse_pairs(&body[..n]).map_err(|_| e),
            _ => Err(e),
        })
    }

    fn parse_pairs(body: &[u8]) -> Result<Frame<Request>, WireError> {
        let f = parse_body(body)?;
        let msg = match f.cmd {
            "fullinit" => Request::FullInit {
                pmijobid: f.opt_string("pmijobid"),
                pmirank: match f.opt_num("pmirank")? {
                    Some(r) => Some(r),
                    None => f.opt_num("srcid")?,
                },
                threaded: f.opt_bool("threaded")?,
            },
            "job-getid" => Request::JobGetId,
            "job-connect" => Request::JobConnect {
                jobid: f.string("jobid")?,
            },
            "job-disconnect" => Request::JobDisconnect {
                jobid: f.string("jobid")?,
            },
            "kvs-put" => Request::KvsPut {
                key: f.string("key")?,
                value: f.string("value")?,
            },
            "kvs-get" => Request::KvsGet {
                jobid: f.opt_string("jobid"),
                srcid: f.opt_num("srcid")?,
                key: f.string("key")?,
            },
            "kvs-fence" => Request::KvsFence,
            "info-putnodeattr" => Request::InfoPutNodeAttr {
                key: f.string("key")?,
                value: f.string("value")?,
            },
            "info-getnodeattr" => Request::InfoGetNodeAttr {
                key: f.string("key")?,
                wait: flag(&f, "wait")?,
            },
            "info-getjobattr" => Request::InfoGetJobAttr {
                key: f.string("key")?,
            },
            "name-publish" => Request::NamePublish {
                name: f.string("name")?,
                port: f.string("port")?,
                info: counted_pairs(&f, "infokeycount", "infokey", "infoval")?,
            },
            "name-unpublish" => Request::NameUnpublish {
                name: f.string("name")?,
            },
            "name-lookup" => Request::NameLookup {
                name: f.string("name")?,
            },
            "spawn" => Request::Spawn(parse_spawn(&f)?),
            "abort" => Request::Abort {
                isworld: f.opt_bool("isworld")?,
                message: f.opt_string("msg").or_else(|| f.opt_string("message")),
                exitcode: f.opt_num("exitcode")?,
            },
            "finalize" => Request::Finalize,
            other => return Err(WireError::UnknownCommand(other.chars().take(64).collect())),
        };
        Ok(Frame {
            thrid: thrid(&f),
            msg,
        })
    }

    /// Appends the frame, length prefix included, to `dst`.
    pub fn encode(&self, dst: &mut BytesMut) {
        let mut w = Body::new(dst, self.msg.name(), self.thrid.as_deref());
        match &self.msg {
            Request::FullInit {
                pmijobid,
                pmirank,
                threaded,
            } => {
                w.opt("pmijobid", pmijobid.as_deref());
                if let Some(r) = pmirank {
                    w.num("pmirank", r);
                }
                if let Some(t) = threaded {
                    w.bool("threaded", *t);
                }
            }
            Request::JobGetId | Request::KvsFence | Request::Finalize => {}
            Request::JobConnect { jobid } | Request::JobDisconnect { jobid } => {
                w.str("jobid", jobid);
            }
            Request::KvsPut { key, value } | Request::InfoPutNodeAttr { key, value } => {
                w.str("key", key).str("value", value);
            }
            Request::KvsGet { jobid, srcid, key } => {
                w.opt("jobid", jobid.as_deref());
                if let Some(s) = srcid {
                    w.num("srcid", s);
                }
                w.str("key", key);
            }
            Request::InfoGetNodeAttr { key, wait } => {
                w.str("key", key).bool("wait", *wait);
            }
            Request::InfoGetJobAttr { key } => {
                w.str("key", key);
            }
            Request::NamePublish { name, port, info } => {
                w.str("name", name).str("port", port);
                w.num("infokeycount", info.len());
                for (i, (k, v)) in info.iter().enumerate() {
                    w.str(&format!("infokey{i}"), k)
                        .str(&format!("infoval{i}"), v);
                }
            }
            Request::NameUnpublish { name } | Request::NameLookup { name } => {
                w.str("name", name);
            }
            Request::Spawn(spawn) => encode_spawn(&mut w, spawn),
            Request::Abort {
                isworld,
                message,
                exitcode,
            } => {
                if let Some(b) = isworld {
                    w.bool("isworld", *b);
                }
                w.opt("msg", message.as_deref());
                if let Some(c) = exitcode {
                    w.num("exitcode", c);
                }
            }
        }
        w.finish();
    }
}

impl Request {
    /// The command name as it appears on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Request::FullInit { .. } => "fullinit",
            Request::JobGetId => "job-getid",
            Request::JobConnect { .. } => "job-connect",
            Request::JobDisconnect { .. } => "job-disconnect",
            Request::KvsPut { .. } => "kvs-put",
            Request::KvsGet { .. } => "kvs-get",
            Request::KvsFence => "kvs-fence",
            Request::InfoPutNodeAttr { .. } => "info-putnodeattr",
            Request::InfoGetNodeAttr { .. } => "info-getnodeattr",
            Request::InfoGetJobAttr { .. } => "info-getjobattr",
            Request::NamePublish { .. } => "name-publish",
            Request::NameUnpublish { .. } => "name-unpublish",
            Request::NameLookup { .. } => "name-lookup",
            Request::Spawn(_) => "spawn",
            Request::Abort { .. } => "abort",
            Request::Finalize => "finalize",
        }
    }
}

fn counted_pairs(
    f: &Fields,
    count: &str,
    kp: &str,
    vp: &str,
) -> Result<Vec<(String, String)>, WireError> {
    let n: usize = f.opt_num(count)?.unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..n {
        out.push((
            f.string(&format!("{kp}{i}"))?,
            f.string(&format!("{vp}{i}"))?,
        ));
    }
    Ok(out)
}

/// Spawn: the preputs first, then one group of pairs per command, each opened by `subcmd`.
/// `argv` is 0-based here (the spec says 1; every implementation uses 0).
fn parse_spawn(f: &Fields) -> Result<Spawn, WireError> {
    let starts: Vec<usize> = f
        .pairs
        .iter()
        .enumerate()
        .filter(|(_, (k, _))| *k == "subcmd")
        .map(|(i, _)| i)
        .collect();
    if starts.is_empty() {
        return Err(missing("spawn", "subcmd"));
    }
    let head = Fields {
        cmd: "spawn",
        pairs: f.pairs[..starts[0]].to_vec(),
    };
    let mut spawn = Spawn {
        preput: counted_pairs(&head, "preputcount", "ppkey", "ppval")?,
        commands: Vec::new(),
    };
    for (n, &s) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(f.pairs.len());
        let g = Fields {
            cmd: "spawn",
            pairs: f.pairs[s..end].to_vec(),
        };
        let mut cmd = SpawnCommand {
            execname: g.string("subcmd")?,
            nprocs: g.num("maxprocs")?,
            ..Default::default()
        };
        match g.opt_num::<usize>("argc")? {
            Some(argc) => {
                for i in 0..argc {
                    cmd.args.push(g.string(&format!("argv{i}"))?);
                }
            }
            None => {
                while let Some(a) = g.opt(&format!("argv{}", cmd.args.len())) {
                    cmd.args.push(a.to_string());
                }
            }
        }
        cmd.info = counted_pairs(&g, "infokeycount", "infokey", "infoval")?;
        spawn.commands.push(cmd);
    }
    if let Some(n) = f.opt_num::<usize>("ncmds")? {
        if n != spawn.commands.len() {
            return Err(bad("spawn", "ncmds", &n.to_string()));
        }
    }
    Ok(spawn)
}

fn encode_spawn(w: &mut Body, spawn: &Spawn) {
    w.num("ncmds", spawn.commands.len())
        .num("preputcount", spawn.preput.len());
    for (i, (k, v)) in spawn.preput.iter().enumerate() {
        w.str(&format!("ppkey{i}"), k).str(&format!("ppval{i}"), v);
    }
    for c in &spawn.commands {
        w.str("subcmd", &c.execname)
            .num("maxprocs", c.nprocs)
            .num("argc", c.args.len());
        for (i, a) in c.args.iter().enumerate() {
            w.str(&format!("argv{i}"), a);
        }
        w.num("infokeycount", c.info.len());
        for (i, (k, v)) in c.info.iter().enumerate() {
            w.str(&format!("infokey{i}"), k)
                .str(&format!("infoval{i}"), v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

impl Frame<Response> {
    /// Parses the first frame in `buf`: `Ok(None)` if it is incomplete, else the message and
    /// the number of bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Frame<Response>, usize)>, WireError> {
        match frame_len(buf)? {
            None => Ok(None),
            Some(n) => Ok(Some((Self::parse_body(body_of(&buf[..n]))?, n))),
        }
    }

    /// Takes the first complete frame off `buf`, like [`Frame::<Request>::decode`].
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame<Response>>, WireError> {
        decode_with(buf, Self::parse_body)
    }

    /// Parses one frame body (without its length prefix).
    pub fn parse_body(body: &[u8]) -> Result<Frame<Response>, WireError> {
        let f = parse_body(body)?;
        let name = f
            .cmd
            .strip_suffix("-response")
            .ok_or_else(|| WireError::UnknownCommand(f.cmd.chars().take(64).collect()))?;
        let msg = match name {
            "fullinit" => Response::FullInit {
                status: status(&f)?,
                rank: f.opt_num("rank")?.unwrap_or(-1),
                size: f.opt_num("size")?.unwrap_or(-1),
                appnum: f.opt_num("appnum")?.unwrap_or(0),
                spawner_jobid: f.opt_string("spawner-jobid"),
                debugged: flag(&f, "debugged")?,
                pmiverbose: flag(&f, "pmiverbose")?,
            },
            "job-getid" => Response::JobGetId {
                status: status(&f)?,
                jobid: f.opt_string("jobid").unwrap_or_default(),
            },
            "job-connect" => Response::JobConnect {
                status: status(&f)?,
                kvscopy: flag(&f, "kvscopy")?,
            },
            "job-disconnect" => Response::JobDisconnect(status(&f)?),
            "kvs-put" => Response::KvsPut(status(&f)?),
            "kvs-get" => Response::KvsGet(lookup(&f, "value")?),
            "kvs-fence" => Response::KvsFence(status(&f)?),
            "info-putnodeattr" => Response::InfoPutNodeAttr(status(&f)?),
            "info-getnodeattr" => Response::InfoGetNodeAttr(lookup(&f, "value")?),
            "info-getjobattr" => Response::InfoGetJobAttr(lookup(&f, "value")?),
            "name-publish" => Response::NamePublish(status(&f)?),
            "name-unpublish" => Response::NameUnpublish(status(&f)?),
            "name-lookup" => Response::NameLookup(lookup(&f, "port")?),
            "spawn" => Response::Spawn {
                status: status(&f)?,
                jobid: f.opt_string("jobid"),
                errcodes: match f.opt("errcodes") {
                    None | Some("") => Vec::new(),
                    Some(list) => list
                        .split(',')
                        .map(|c| c.trim().parse().map_err(|_| bad("spawn", "errcodes", list)))
                        .collect::<Result<_, _>>()?,
                },
            },
            "finalize" => Response::Finalize(status(&f)?),
            _ => return Err(WireError::UnknownCommand(f.cmd.chars().take(64).collect())),
        };
        Ok(Frame {
            thrid: thrid(&f),
            msg,
        })
    }

    /// Appends the frame, length prefix included, to `dst`.
    pub fn encode(&self, dst: &mut BytesMut) {
        let mut w = Body::new(dst, self.msg.name(), self.thrid.as_deref());
        match &self.msg {
            Response::FullInit {
                status,
                rank,
                size,
                appnum,
                spawner_jobid,
                debugged,
                pmiverbose,
            } => {
                w.status(status)
                    .num("pmi-version", 2)
                    .num("pmi-subversion", 0)
                    .num("rank", rank)
                    .num("size", size)
                    .num("appnum", appnum)
                    .opt("spawner-jobid", spawner_jobid.as_deref())
                    .bool("debugged", *debugged)
                    .bool("pmiverbose", *pmiverbose);
            }
            Response::JobGetId { status, jobid } => {
                w.status(status).str("jobid", jobid);
            }
            Response::JobConnect { status, kvscopy } => {
                w.status(status).bool("kvscopy", *kvscopy);
            }
            Response::JobDisconnect(s)
            | Response::KvsPut(s)
            | Response::KvsFence(s)
            | Response::InfoPutNodeAttr(s)
            | Response::NamePublish(s)
            | Response::NameUnpublish(s)
            | Response::Finalize(s) => {
                w.status(s);
            }
            Response::KvsGet(l) | Response::InfoGetNodeAttr(l) | Response::InfoGetJobAttr(l) => {
                w.status(&l.status)
                    .bool("found", l.found)
                    .opt("value", l.value.as_deref());
            }
            Response::NameLookup(l) => {
                w.status(&l.status)
                    .bool("found", l.found)
                    .opt("port", l.value.as_deref())
                    .opt("value", l.value.as_deref());
            }
            Response::Spawn {
                status,
                jobid,
                errcodes,
            } => {
                w.status(status).opt("jobid", jobid.as_deref());
                if !errcodes.is_empty() {
                    let list: Vec<String> = errcodes.iter().map(i32::to_string).collect();
                    w.num("nerrs", errcodes.len())
                        .str("errcodes", &list.join(","));
                }
            }
        }
        w.finish();
    }
}

impl Response {
    /// The command name as it appears on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Response::FullInit { .. } => "fullinit-response",
            Response::JobGetId { .. } => "job-getid-response",
            Response::JobConnect { .. } => "job-connect-response",
            Response::JobDisconnect(_) => "job-disconnect-response",
            Response::KvsPut(_) => "kvs-put-response",
            Response::KvsGet(_) => "kvs-get-response",
            Response::KvsFence(_) => "kvs-fence-response",
            Response::InfoPutNodeAttr(_) => "info-putnodeattr-response",
            Response::InfoGetNodeAttr(_) => "info-getnodeattr-response",
            Response::InfoGetJobAttr(_) => "info-getjobattr-response",
            Response::NamePublish(_) => "name-publish-response",
            Response::NameUnpublish(_) => "name-unpublish-response",
            Response::NameLookup(_) => "name-lookup-response",
            Response::Spawn { .. } => "spawn-response",
            Response::Finalize(_) => "finalize-response",
        }
    }
}

/// Appends a failure reply to a request the server could not read or does not know, as the
/// frame `cmd=CMD-response;[thrid=…;]rc=RC;errmsg=…;`. `cmd` is the request's name as sent, or
/// `error` when even that was unreadable.
pub fn encode_error(cmd: &str, thrid: Option<&str>, status: &Status, dst: &mut BytesMut) {
    let name = format!("{cmd}-response");
    let mut w = Body::new(dst, &name, thrid);
    w.status(status);
    w.finish();
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Builds one frame in place: reserves the prefix, writes the pairs, then fills the prefix in.
struct Body<'a> {
    dst: &'a mut BytesMut,
    start: usize,
}

impl<'a> Body<'a> {
    fn new(dst: &'a mut BytesMut, cmd: &str, thrid: Option<&str>) -> Body<'a> {
        let start = dst.len();
        dst.reserve(V2_LEN_WIDTH + 64);
        dst.put_slice(&[b' '; V2_LEN_WIDTH]);
        let mut b = Body { dst, start };
        b.str("cmd", cmd).opt("thrid", thrid);
        b
    }

    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        self.dst.reserve(k.len() + v.len() + 2);
        self.dst.put_slice(k.as_bytes());
        self.dst.put_u8(b'=');
        for part in v.split_inclusive(';') {
            self.dst.put_slice(part.as_bytes());
            if part.ends_with(';') {
                self.dst.put_u8(b';');
            }
        }
        self.dst.put_u8(b';');
        self
    }

    fn opt(&mut self, k: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.str(k, v);
        }
        self
    }

    fn num(&mut self, k: &str, v: impl std::fmt::Display) -> &mut Self {
        self.str(k, &v.to_string())
    }

    fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.str(k, if v { "TRUE" } else { "FALSE" })
    }

    fn status(&mut self, s: &Status) -> &mut Self {
        self.num("rc", s.rc).opt("errmsg", s.msg.as_deref())
    }

    /// Writes the body length into the prefix, left-justified (old MPICH and Slurm read it
    /// with `atoi`, new MPICH trims both sides).
    fn finish(self) {
        let len = self.dst.len() - self.start - V2_LEN_WIDTH;
        let digits = format!("{len:<width$}", width = V2_LEN_WIDTH);
        debug_assert!(digits.len() == V2_LEN_WIDTH, "frame body too long");
        self.dst[self.start..self.start + V2_LEN_WIDTH]
            .copy_from_slice(&digits.as_bytes()[..V2_LEN_WIDTH]);
    }
}
