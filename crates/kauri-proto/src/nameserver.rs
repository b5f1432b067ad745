//! The name service behind `MPI_Publish_name` / `MPI_Lookup_name`: a table in the front end
//! for one kauri run (all of its jobs, spawned ones included), or `kauri nameserver`, a small
//! server shared by separate kauri runs (like `hydra_nameserver`), found with
//! `-nameserver host[:port]` or `KAURI_NAMESERVER` (`HYDRA_NAMESERVER` is read too).
//!
//! The server's protocol is one line per request and one per reply, fields separated by one
//! space, each field percent-encoded (`%`, space, CR and LF, so any name or port fits):
//!
//! ```text
//! auth KEY                 ->  ok            | error REASON, and the connection is closed
//! publish NAME PORT [BY]   ->  ok            | error REASON
//! unpublish NAME [BY]      ->  ok            | error REASON
//! lookup NAME              ->  ok PORT       | error REASON
//! ```
//!
//! A name belongs to the connection that published it: only that connection may unpublish it
//! (another gets an error and the name stays), and it is withdrawn when that connection
//! closes: a kauri run holds one connection for its whole life, so the names of a run that
//! ended (or crashed) never point at ports nobody listens on. `BY` names the process that
//! published (a PMIx client, `nspace:rank`): such a name may be unpublished only with the same
//! `BY`. PMI ranks send none; their names belong to the run.
//!
//! A lookup that waits for its name (PMIx `PMIX_WAIT`) is answered at once by the server;
//! [`Client::ask`] asks again, at growing intervals up to [`WAIT_POLL_MAX`], until the name is
//! there or the wait is over (one connection serves a run's requests in order, so the server
//! cannot hold a request back without holding back the run's publish). The run's own table
//! answers a waiting lookup when the name is published ([`Waiting`]).
//!
//! A server started with `-key SECRET` (or `KAURI_NAMESERVER_KEY=SECRET`) wants `auth SECRET`
//! as each connection's first line: any other first line, or another secret, gets one
//! `error` reply and the connection is closed. A server without a key answers `auth` with
//! `ok` whatever it holds, so a client may always send it. [`Client`] (kauri's front end with
//! `-nameserver`) sends `KAURI_NAMESERVER_KEY` when it is set. The key travels in clear: it
//! keeps out who does not know it, not who can read the network.
//!
//! What one client can make the server hold is bounded ([`Limits`]): a request line is read
//! only up to [`LINE_MAX`] bytes (a longer one gets an error naming the limit, and the
//! connection is closed: the rest of it cannot be told from a next request); a client may
//! hold [`NAMES_PER_CLIENT_MAX`] names and the server [`NAMES_MAX`] (a publish beyond either
//! gets an error naming the limit, the connection is served on); [`CLIENTS_MAX`] clients are
//! served at once (one more gets an error and is closed). A reply is written before the next
//! request is read, so a client that does not read its replies stops being read once its
//! socket's buffers are full: no reply queue grows. The server's memory is at most about
//! `LINE_MAX × (NAMES_MAX + 2 × CLIENTS_MAX)`, 150 MiB with the defaults; one client's share
//! is at most `LINE_MAX × (NAMES_PER_CLIENT_MAX + 2)`, 8 MiB.

use crate::service::{NoPlan, Publisher, Refused, Service, ServiceReply, Wait};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

/// The port `kauri nameserver` listens on by default (Hydra's nameserver's).
pub const DEFAULT_PORT: u16 = 6392;

/// The longest request line the server reads, its newline included: a name and a port of
/// 1024 bytes each (`MPI_MAX_PORT_NAME` is 256 in MPICH, 1024 in Open MPI) fit even with
/// every byte percent-encoded.
pub const LINE_MAX: usize = 8 * 1024;

/// The most names one client (one connection: a kauri run) may hold at once; a job that
/// publishes more sets [`MAX_NAMES_PER_CLIENT_VAR`].
pub const NAMES_PER_CLIENT_MAX: usize = 1024;

/// The most names the server holds, from all its clients ([`MAX_NAMES_VAR`]).
pub const NAMES_MAX: usize = 16 * 1024;

/// The most clients served at once ([`MAX_CLIENTS_VAR`]).
pub const CLIENTS_MAX: usize = 1024;

/// The environment variable that overrides [`NAMES_MAX`].
pub const MAX_NAMES_VAR: &str = "KAURI_NAMESERVER_MAX_NAMES";

/// The environment variable that overrides [`NAMES_PER_CLIENT_MAX`].
pub const MAX_NAMES_PER_CLIENT_VAR: &str = "KAURI_NAMESERVER_MAX_NAMES_PER_CLIENT";

/// The environment variable that overrides [`CLIENTS_MAX`].
pub const MAX_CLIENTS_VAR: &str = "KAURI_NAMESERVER_MAX_CLIENTS";

/// What `kauri nameserver` holds at most: names in all, names per client, clients at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most names held ([`NAMES_MAX`]).
    pub names: usize,
    /// The most names one client holds ([`NAMES_PER_CLIENT_MAX`]).
    pub names_per_client: usize,
    /// The most clients served at once ([`CLIENTS_MAX`]).
    pub clients: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            names: NAMES_MAX,
            names_per_client: NAMES_PER_CLIENT_MAX,
            clients: CLIENTS_MAX,
        }
    }
}

/// A limit's environment variable that is not a positive number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var} must be a positive number, not {value:?}")]
pub struct BadLimit {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
}

impl Limits {
    /// The defaults, each overridden by its environment variable when set; the error names a
    /// variable that is not a positive number.
    pub fn from_env() -> Result<Limits, BadLimit> {
        let read = |var: &'static str, default: usize| match std::env::var(var) {
            Err(_) => Ok(default),
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(BadLimit { var, value: v }),
            },
        };
        Ok(Limits {
            names: read(MAX_NAMES_VAR, NAMES_MAX)?,
            names_per_client: read(MAX_NAMES_PER_CLIENT_VAR, NAMES_PER_CLIENT_MAX)?,
            clients: read(MAX_CLIENTS_VAR, CLIENTS_MAX)?,
        })
    }
}

/// The longest pause between two lookups of a name a waiting lookup asks `kauri nameserver`
/// for again ([`Client::ask`]).
pub const WAIT_POLL_MAX: Duration = Duration::from_secs(1);

/// Percent-encodes `%`, white space and control characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a field does not decode ([`decode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A `%` not followed by two hexadecimal digits.
    #[error("bad escape in {0:?}")]
    BadEscape(String),
    /// Bytes that are not UTF-8 once the escapes are undone.
    #[error("{0:?} is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// Reverses [`encode`].
pub fn decode(s: &str) -> Result<String, DecodeError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| DecodeError::BadEscape(s.to_string()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| DecodeError::NotUtf8(s.to_string()))
}

/// A table of published names. `owner` tells who published each (a connection), and `by`
/// which process of it, if a PMIx client did. The [`Default`] table holds any number (a kauri
/// run's own, fed by its ranks, whose PMI lines are bounded); [`Table::bounded`] is the name
/// server's.
#[derive(Debug)]
pub struct Table {
    names: HashMap<String, Entry>,
    /// How many names each owner holds.
    held: HashMap<u64, usize>,
    /// The most names held, in all and per owner.
    max: usize,
    max_per_owner: usize,
}

impl Default for Table {
    fn default() -> Table {
        Table::bounded(usize::MAX, usize::MAX)
    }
}

/// One published name.
#[derive(Debug)]
struct Entry {
    port: String,
    owner: u64,
    by: Option<String>,
}

/// The refusal a server's `error REASON` reply tells: the reason [`Table`] gives for each kind
/// of [`Refused`] read back into it (the protocol carries the reason as text), anything else
/// [`Refused::Other`]. Reading back the kind's exact line, a name holding a kind's words is
/// not mistaken for them.
pub fn refused_from_reason(reason: String) -> Refused {
    let name = |suffix: &str| {
        reason
            .strip_prefix("the name ")
            .and_then(|r| r.strip_suffix(suffix))
            .map(str::to_string)
    };
    if let Some(name) = name(" is already published") {
        return Refused::Exists { name };
    }
    if let Some(name) = name(" is not published") {
        return Refused::NotPublished { name };
    }
    let not_yours = name("; only its publisher may unpublish it").and_then(|r| {
        let (name, by) = r.rsplit_once(" was published by ")?;
        let by = match by {
            "a PMI rank" => Publisher::PmiRank,
            "another client" => Publisher::AnotherClient,
            p => Publisher::Process(p.strip_prefix("process ")?.to_string()),
        };
        Some((name.to_string(), by))
    });
    match not_yours {
        Some((name, by)) => Refused::NotYours { name, by },
        None => Refused::Other(reason),
    }
}

impl Table {
    /// A table that holds at most `max` names, `max_per_owner` of them from one owner; a
    /// publish beyond either is an error reply naming the limit (and its variable, the name
    /// server's).
    pub fn bounded(max: usize, max_per_owner: usize) -> Table {
        Table {
            names: HashMap::new(),
            held: HashMap::new(),
            max,
            max_per_owner,
        }
    }

    /// Answers one request on behalf of `owner`.
    pub fn apply(&mut self, owner: u64, s: &Service) -> ServiceReply {
        match s {
            Service::Publish { name, port, by } => {
                let held = self.held.get(&owner).copied().unwrap_or(0);
                ServiceReply::Done(if self.names.contains_key(name) {
                    Err(Refused::Exists { name: name.clone() })
                } else if self.names.len() >= self.max {
                    Err(Refused::Other(format!(
                        "the name server holds {} names, the most it may ({MAX_NAMES_VAR}); \
                         none can be published until some are withdrawn",
                        self.max
                    )))
                } else if held >= self.max_per_owner {
                    Err(Refused::Other(format!(
                        "this client holds {} names, the most one client may \
                         ({MAX_NAMES_PER_CLIENT_VAR}); unpublish one first",
                        self.max_per_owner
                    )))
                } else {
                    let e = Entry {
                        port: port.clone(),
                        owner,
                        by: by.clone(),
                    };
                    self.names.insert(name.clone(), e);
                    self.held.insert(owner, held + 1);
                    Ok(())
                })
            }
            Service::Unpublish { name, by } => ServiceReply::Done(match self.names.get(name) {
                Some(e) if e.owner == owner && e.by == *by => {
                    self.names.remove(name);
                    if let Some(n) = self.held.get_mut(&owner) {
                        *n = n.saturating_sub(1);
                    }
                    Ok(())
                }
                Some(e) => Err(Refused::NotYours {
                    name: name.clone(),
                    by: match (&e.by, e.owner == owner) {
                        (Some(p), true) => Publisher::Process(p.clone()),
                        (None, true) => Publisher::PmiRank,
                        (_, false) => Publisher::AnotherClient,
                    },
                }),
                None => Err(Refused::NotPublished { name: name.clone() }),
            }),
            Service::Lookup { name, .. } => ServiceReply::Found(match self.names.get(name) {
                Some(e) => Ok(e.port.clone()),
                None => Err(Refused::NotPublished { name: name.clone() }),
            }),
            Service::Spawn { .. } => ServiceReply::Spawn(Err("not a name request".into())),
            Service::JobOf { .. } => ServiceReply::Job(Err(NoPlan::NotANameRequest)),
            Service::Terminate { .. } => {
                ServiceReply::Done(Err(Refused::Other("not a name request".into())))
            }
            Service::Jobs => ServiceReply::Jobs(Vec::new()),
        }
    }

    /// Withdraws every name `owner` published.
    pub fn forget(&mut self, owner: u64) {
        self.names.retain(|_, e| e.owner != owner);
        self.held.remove(&owner);
    }
}

/// Lookups that wait for a name nobody published yet ([`Wait`]), each with its asker `W`: the
/// run's own table answers them when the name is published. A lookup whose wait is over is
/// dropped then (its host has answered its client with a timeout already).
#[derive(Debug)]
pub struct Waiting<W> {
    names: HashMap<String, Vec<(W, Option<Instant>)>>,
}

impl<W> Default for Waiting<W> {
    fn default() -> Self {
        Waiting {
            names: HashMap::new(),
        }
    }
}

impl<W> Waiting<W> {
    /// Parks `asker`'s lookup of `name`, which waits as `wait` says from `now` (a lookup that
    /// does not wait is not parked).
    pub fn add(&mut self, name: &str, asker: W, wait: Wait, now: Instant) {
        let until = match wait {
            Wait::No => return,
            Wait::Forever => None,
            Wait::For(ms) => Some(now + Duration::from_millis(ms)),
        };
        self.names
            .entry(name.to_string())
            .or_default()
            .push((asker, until));
    }

    /// `name` was published at `now`: the askers still waiting for it, in the order they
    /// asked.
    pub fn published(&mut self, name: &str, now: Instant) -> Vec<W> {
        self.names
            .remove(name)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, until)| until.is_none_or(|t| now <= t))
            .map(|(w, _)| w)
            .collect()
    }

    /// The askers that still wait at `now` (an asker whose wait is over has had its
    /// answer from its own host), each with the name it waits for.
    pub fn iter(&self, now: Instant) -> impl Iterator<Item = (&str, &W)> {
        self.names.iter().flat_map(move |(n, ws)| {
            ws.iter()
                .filter(move |(_, until)| until.is_none_or(|t| now <= t))
                .map(move |(w, _)| (n.as_str(), w))
        })
    }

    /// Ends every wait: each asker that still waits at `now`, with the name it waited for.
    pub fn drain(&mut self, now: Instant) -> Vec<(String, W)> {
        self.names
            .drain()
            .flat_map(|(n, ws)| {
                ws.into_iter()
                    .filter(move |(_, until)| until.is_none_or(|t| now <= t))
                    .map(move |(w, _)| (n.clone(), w))
            })
            .collect()
    }

    /// How many lookups wait.
    pub fn len(&self) -> usize {
        self.names.values().map(Vec::len).sum()
    }

    /// True when no lookup waits.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Why a request line of the server protocol does not parse: each prints the reason the
/// client is given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A field the request needs is not there.
    #[error("{verb}: missing {what}")]
    Missing {
        /// The request.
        verb: String,
        /// The field.
        what: &'static str,
    },
    /// A field does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// An empty line.
    #[error("empty request")]
    Empty,
    /// A request the server does not know.
    #[error("unknown request {verb:?}")]
    Unknown {
        /// Its first 40 characters.
        verb: String,
    },
    /// More fields than the request takes.
    #[error("{verb}: too many fields")]
    TooManyFields {
        /// The request.
        verb: String,
    },
}

/// Parses one request line of the server protocol.
pub fn parse_request(line: &str) -> Result<Service, RequestError> {
    let mut f = line.split(' ');
    let verb = f.next().unwrap_or("");
    let mut field = |what: &'static str| -> Result<String, RequestError> {
        let text = f.next().ok_or_else(|| RequestError::Missing {
            verb: verb.to_string(),
            what,
        })?;
        Ok(decode(text)?)
    };
    let s = match verb {
        "publish" => Service::Publish {
            name: field("name")?,
            port: field("port")?,
            by: f.next().map(decode).transpose()?,
        },
        "unpublish" => Service::Unpublish {
            name: field("name")?,
            by: f.next().map(decode).transpose()?,
        },
        "lookup" => Service::lookup(field("name")?),
        "" => return Err(RequestError::Empty),
        v => {
            return Err(RequestError::Unknown {
                verb: v.chars().take(40).collect(),
            })
        }
    };
    if f.next().is_some() {
        return Err(RequestError::TooManyFields {
            verb: verb.to_string(),
        });
    }
    Ok(s)
}

/// The environment variable holding the name server's key, for the server and for kauri runs.
pub const KEY_VAR: &str = "KAURI_NAMESERVER_KEY";

/// The key in the environment ([`KEY_VAR`]), if set and not empty.
pub fn key_from_env() -> Option<String> {
    std::env::var(KEY_VAR).ok().filter(|k| !k.is_empty())
}

/// Why the name server refuses a client's first line: each prints the reason the client is
/// given before the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// `auth` with another key.
    #[error("the key presented is not this name server's (see {KEY_VAR})")]
    WrongKey,
    /// Something other than `auth KEY`.
    #[error("this name server wants its key first (auth KEY; kauri sends {KEY_VAR})")]
    KeyFirst,
}

/// Checks a connection's first line against the server's key: `Ok` for `auth KEY` with the
/// right key, else the reason to give before closing the connection.
fn check_auth(line: &str, key: &str) -> Result<(), AuthError> {
    match line.strip_prefix("auth ").map(decode) {
        Some(Ok(k)) if same_secret(k.as_bytes(), key.as_bytes()) => Ok(()),
        Some(_) => Err(AuthError::WrongKey),
        None => Err(AuthError::KeyFirst),
    }
}

/// Compares two secrets in a time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn reply_line(r: &ServiceReply) -> String {
    match r {
        ServiceReply::Done(Ok(())) => "ok\n".into(),
        ServiceReply::Found(Ok(p)) => format!("ok {}\n", encode(p)),
        ServiceReply::Done(Err(e)) | ServiceReply::Found(Err(e)) => {
            format!("error {}\n", encode(&e.to_string()))
        }
        ServiceReply::Spawn(Err(e)) => format!("error {}\n", encode(e)),
        ServiceReply::Spawn(Ok(_)) | ServiceReply::Job(_) | ServiceReply::Jobs(_) => {
            "error not%20a%20name%20request\n".into()
        }
    }
}

/// Serves the name-server protocol on `listener` until the task is dropped, within
/// `limits`; with `key`, each connection must present it first (`auth KEY`).
pub async fn serve(listener: TcpListener, key: Option<String>, limits: Limits) {
    let key: Option<Rc<str>> = key.map(Into::into);
    let table = Rc::new(RefCell::new(Table::bounded(
        limits.names,
        limits.names_per_client,
    )));
    let clients = Rc::new(std::cell::Cell::new(0usize));
    let mut next = 0u64;
    loop {
        let (sock, addr) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                debug!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if clients.get() >= limits.clients {
            // One reply if the socket takes it at once (never waiting on a client), closed.
            let e = too_many_clients(limits.clients);
            let _ = sock.try_write(format!("error {}\n", encode(&e)).as_bytes());
            debug!(%addr, "refused a client: {e}");
            continue;
        }
        clients.set(clients.get() + 1);
        next += 1;
        let served = Served {
            owner: next,
            addr,
            table: table.clone(),
            key: key.clone(),
            clients: clients.clone(),
        };
        tokio::task::spawn_local(serve_client(sock, served));
    }
}

/// Why a client beyond the `most` served at once is refused.
fn too_many_clients(most: usize) -> String {
    format!(
        "the name server serves {most} clients, the most it may at once ({MAX_CLIENTS_VAR}); \
         try again later"
    )
}

/// What the server shares with the task serving one client.
struct Served {
    /// The client's number: the owner of the names it publishes.
    owner: u64,
    /// Its address, for the log.
    addr: std::net::SocketAddr,
    /// The server's table of names.
    table: Rc<RefCell<Table>>,
    /// The key it must present first, if any.
    key: Option<Rc<str>>,
    /// The count of clients served.
    clients: Rc<std::cell::Cell<usize>>,
}

/// Serves one client on `sock`, a reply per request line, until it leaves or must be dropped;
/// then withdraws its names.
async fn serve_client(sock: TcpStream, served: Served) {
    let Served {
        owner,
        addr,
        table,
        key,
        clients,
    } = served;
    // Counted out however the task ends (the server dropped included).
    let _client = Counted(clients);
    debug!(%addr, owner, "client connected");
    let mut authenticated = key.is_none();
    let (rd, mut wr) = sock.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = match (&mut rd)
            .take(LINE_MAX as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if n > LINE_MAX {
            // Too long: answer once, then drop the client (the rest of its line
            // cannot be told from a next request).
            let e = format!("a request line longer than {LINE_MAX} bytes; closing the connection");
            let _ = wr
                .write_all(format!("error {}\n", encode(&e)).as_bytes())
                .await;
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let apply = |s: &Service| table.borrow_mut().apply(owner, s);
        let reply = match answer(text, &mut authenticated, key.as_deref(), apply) {
            Ok(reply) => reply,
            Err(e) => {
                say!("kauri nameserver: refused a client at {addr}: {e}");
                let _ = wr
                    .write_all(format!("error {}\n", encode(&e.to_string())).as_bytes())
                    .await;
                break;
            }
        };
        if wr.write_all(reply.as_bytes()).await.is_err() {
            break;
        }
    }
    table.borrow_mut().forget(owner);
    debug!(%addr, owner, "client left; its names are withdrawn");
}

/// The reply line to the request line `text` of a client, `authenticated` or not yet, with
/// `apply` answering a name request; `Err` (why) when the client had to present `key` first
/// and did not: it gets one error reply and is dropped.
fn answer(
    text: &str,
    authenticated: &mut bool,
    key: Option<&str>,
    apply: impl FnOnce(&Service) -> ServiceReply,
) -> Result<String, AuthError> {
    if let (false, Some(key)) = (*authenticated, key) {
        check_auth(text, key)?;
        *authenticated = true;
        Ok("ok\n".to_string())
    } else if text == "auth" || text.starts_with("auth ") {
        Ok("ok\n".to_string())
    } else {
        Ok(match parse_request(text) {
            Ok(s) => reply_line(&apply(&s)),
            Err(e) => format!("error {}\n", encode(&e.to_string())),
        })
    }
}

/// Drops a client from the count of those served when its task ends.
struct Counted(Rc<std::cell::Cell<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// `host[:port]` with the default port filled in.
pub fn address(spec: &str) -> String {
    let s = spec.trim();
    if s.starts_with('[')
        || s.rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        s.to_string()
    } else {
        format!("{s}:{DEFAULT_PORT}")
    }
}

type Pending = (Service, oneshot::Sender<ServiceReply>);

/// Why a client got no answer from the name server: each reads after "the name server at
/// ADDR".
#[derive(Debug, thiserror::Error)]
enum ClientError {
    /// It closed the connection instead of answering `auth`.
    #[error("closed the connection when given the key")]
    ClosedAtKey,
    /// It answered `auth` with a refusal: its reason.
    #[error("refused the key ({KEY_VAR}): {0}")]
    KeyRefused(String),
    /// The connection could not be made.
    #[error("{0}")]
    Connect(#[source] std::io::Error),
    /// The connection was not made within 10 s.
    #[error("no answer within 10 s")]
    ConnectTimeout,
    /// The connection closed before the answer, twice.
    #[error("the connection closed")]
    Closed,
}

/// Presents `key` on a fresh connection; the error says why the server did not take it.
async fn authenticate(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    key: &str,
) -> Result<(), ClientError> {
    let mut got = String::new();
    let sent = w
        .write_all(format!("auth {}\n", encode(key)).as_bytes())
        .await;
    match (sent, r.read_line(&mut got).await) {
        (Ok(()), Ok(n)) if n > 0 => {}
        _ => return Err(ClientError::ClosedAtKey),
    }
    match got
        .trim_end()
        .split_once(' ')
        .unwrap_or((got.trim_end(), ""))
    {
        ("ok", _) => Ok(()),
        (_, why) => Err(ClientError::KeyRefused(
            decode(why).unwrap_or_else(|_| why.to_string()),
        )),
    }
}

/// A client's connection to the server: replies read by line, requests written.
type Conn = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

/// The request line for `req`, or (`Err`) the reply to a request that is not a name request.
fn request_line(req: &Service) -> Result<String, ServiceReply> {
    let by = |b: &Option<String>| b.as_ref().map(|b| format!(" {}", encode(b)));
    Ok(match req {
        Service::Publish { name, port, by: b } => format!(
            "publish {} {}{}\n",
            encode(name),
            encode(port),
            by(b).unwrap_or_default()
        ),
        Service::Unpublish { name, by: b } => {
            format!("unpublish {}{}\n", encode(name), by(b).unwrap_or_default())
        }
        Service::Lookup { name, .. } => format!("lookup {}\n", encode(name)),
        Service::Spawn { .. } => {
            return Err(ServiceReply::Spawn(Err("not a name request".into())));
        }
        Service::JobOf { .. } => return Err(ServiceReply::Job(Err(NoPlan::NotANameRequest))),
        Service::Terminate { .. } => {
            return Err(ServiceReply::Done(Err(Refused::Other(
                "not a name request".into(),
            ))));
        }
        Service::Jobs => return Err(ServiceReply::Jobs(Vec::new())),
    })
}

/// What [`open`] got: a connection, or the server's refusal of the key.
enum Opened {
    /// A connection, its key (if any) taken.
    Conn(Conn),
    /// The key was refused: the answer line to give the request.
    KeyRefused(String),
}

/// Opens a connection to `addr` (within 10 s), presenting `key` if any; `Err`: why it could
/// not connect.
async fn open(addr: &str, key: Option<&str>) -> Result<Opened, ClientError> {
    match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            let (r, w) = s.into_split();
            let (mut r, mut w) = (BufReader::new(r), w);
            if let Some(k) = key {
                if let Err(e) = authenticate(&mut r, &mut w, k).await {
                    say!("kauri: the name server at {addr} {e}");
                    return Ok(Opened::KeyRefused(format!(
                        "error {}",
                        encode(&e.to_string())
                    )));
                }
            }
            Ok(Opened::Conn((r, w)))
        }
        Ok(Err(e)) => Err(ClientError::Connect(e)),
        Err(_) => Err(ClientError::ConnectTimeout),
    }
}

/// Sends `line` and reads its answer line, on `conn` or on a connection opened to `addr`;
/// a connection that broke is reopened once. `Err`: why no answer came.
async fn exchange(
    conn: &mut Option<Conn>,
    addr: &str,
    key: Option<&str>,
    line: &str,
) -> Result<String, ClientError> {
    for _ in 0..2 {
        if conn.is_none() {
            match open(addr, key).await? {
                Opened::Conn(c) => *conn = Some(c),
                Opened::KeyRefused(answer) => return Ok(answer),
            }
        }
        let Some((r, w)) = conn.as_mut() else { break };
        let mut got = String::new();
        let ok = w.write_all(line.as_bytes()).await.is_ok()
            && matches!(r.read_line(&mut got).await, Ok(n) if n > 0);
        if ok {
            return Ok(got);
        }
        *conn = None;
    }
    Err(ClientError::Closed)
}

/// What the server at `addr` answered, `a` (a reply line): a port, nothing, or why not.
fn read_answer(addr: &str, a: &str) -> Result<Option<String>, Refused> {
    let a = a.trim_end();
    match a.split_once(' ').unwrap_or((a, "")) {
        ("ok", "") => Ok(None),
        ("ok", p) => decode(p)
            .map(Some)
            .map_err(|e| Refused::Other(e.to_string())),
        ("error", e) => Err(refused_from_reason(
            decode(e).unwrap_or_else(|_| e.to_string()),
        )),
        _ => Err(Refused::Other(format!(
            "the name server at {addr} answered {a:?}"
        ))),
    }
}

/// The reply to `req` from the server's answer `result`: a lookup wants a port.
fn service_reply(
    req: &Service,
    result: Result<Option<String>, Refused>,
    addr: &str,
) -> ServiceReply {
    match req {
        Service::Lookup { .. } => ServiceReply::Found(result.and_then(|p| {
            p.ok_or_else(|| Refused::Other(format!("the name server at {addr} sent no port")))
        })),
        _ => ServiceReply::Done(result.map(|_| ())),
    }
}

/// The client side: one connection to a `kauri nameserver`, opened at the first request,
/// reopened once if it broke; requests are answered in order.
#[derive(Clone)]
pub struct Client {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Client {
    /// A client for the server at `addr` (`host:port`), presenting the key in
    /// `KAURI_NAMESERVER_KEY` if it is set. Nothing is sent until a request.
    pub fn new(addr: String) -> Client {
        Client::with_key(addr, key_from_env())
    }

    /// A client for the server at `addr` that presents `key` (`auth KEY`) on each connection
    /// it opens. Nothing is sent until a request.
    pub fn with_key(addr: String, key: Option<String>) -> Client {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        tokio::task::spawn_local(async move {
            let mut conn: Option<Conn> = None;
            while let Some((req, reply)) = rx.recv().await {
                let line = match request_line(&req) {
                    Ok(line) => line,
                    Err(refused) => {
                        let _ = reply.send(refused);
                        continue;
                    }
                };
                let result = match exchange(&mut conn, &addr, key.as_deref(), &line).await {
                    Err(last_err) => {
                        let e = format!("the name server at {addr} is unreachable: {last_err}");
                        say!("kauri: {e}");
                        Err(Refused::Other(e))
                    }
                    Ok(a) => read_answer(&addr, &a),
                };
                let _ = reply.send(service_reply(&req, result, &addr));
            }
        });
        Client { tx }
    }

    /// Sends one request and waits for its answer. A lookup that waits ([`Wait`]) is asked
    /// again while its name is not published and its wait is not over: after 50 ms, then at
    /// intervals doubling up to [`WAIT_POLL_MAX`].
    pub async fn ask(&self, s: Service) -> ServiceReply {
        let wait = match &s {
            Service::Lookup { wait, .. } => *wait,
            _ => Wait::No,
        };
        let until = match wait {
            Wait::For(ms) => Some(Instant::now() + Duration::from_millis(ms)),
            _ => None,
        };
        let mut pause = Duration::from_millis(50);
        loop {
            let r = self.ask_once(s.clone()).await;
            let unpublished = matches!(&r, ServiceReply::Found(Err(e)) if e.not_published());
            if !unpublished || wait == Wait::No || until.is_some_and(|t| Instant::now() >= t) {
                return r;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(WAIT_POLL_MAX);
        }
    }

    async fn ask_once(&self, s: Service) -> ServiceReply {
        let (tx, rx) = oneshot::channel();
        let lookup = matches!(s, Service::Lookup { .. });
        if self.tx.send((s, tx)).is_ok() {
            if let Ok(r) = rx.await {
                return r;
            }
        }
        let e = Refused::Other("the name-server client has stopped".to_string());
        if lookup {
            ServiceReply::Found(Err(e))
        } else {
            ServiceReply::Done(Err(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's failures read as the text they were before they had a type.
    #[test]
    fn client_errors_read_as_before() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let line = |e: ClientError| format!("the name server at h:1 is unreachable: {e}");
        assert_eq!(
            line(ClientError::Connect(refused)),
            "the name server at h:1 is unreachable: connection refused"
        );
        for (e, text) in [
            (
                ClientError::ClosedAtKey,
                "closed the connection when given the key",
            ),
            (
                ClientError::KeyRefused("wrong key".into()),
                "refused the key (KAURI_NAMESERVER_KEY): wrong key",
            ),
            (ClientError::ConnectTimeout, "no answer within 10 s"),
            (ClientError::Closed, "the connection closed"),
        ] {
            assert_eq!(e.to_string(), text);
        }
    }

    /// A server with a key wants it first and refuses anything else; once in (or with no
    /// key), `auth` lines are taken and requests go to the table.
    #[test]
    fn a_client_presents_the_key_then_asks() {
        let mut table = Table::default();
        let mut authed = false;
        let no_request = |_: &Service| -> ServiceReply { panic!("not a request") };
        assert!(answer("lookup a", &mut authed, Some("s3"), no_request).is_err());
        assert!(!authed);
        assert!(answer("auth other", &mut authed, Some("s3"), no_request).is_err());
        assert_eq!(
            answer("auth s3", &mut authed, Some("s3"), no_request),
            Ok("ok\n".into())
        );
        assert!(authed);
        assert_eq!(
            answer("auth again", &mut authed, Some("s3"), no_request),
            Ok("ok\n".into())
        );
        let mut apply = |s: &Service| table.apply(1, s);
        assert_eq!(
            answer("publish a p%201", &mut authed, Some("s3"), &mut apply),
            Ok("ok\n".into())
        );
        assert_eq!(
            answer("lookup a", &mut authed, Some("s3"), &mut apply),
            Ok("ok p%201\n".into())
        );
        let mut open = false;
        let bad = answer("frobnicate", &mut open, None, &mut apply).unwrap();
        assert!(bad.starts_with("error "), "{bad}");
    }

    /// The client writes name requests as lines, answers the others itself, and reads the
    /// server's answers: a port, nothing, an error, or garbage.
    #[test]
    fn the_client_writes_requests_and_reads_answers() {
        let publish = Service::Publish {
            name: "a b".into(),
            port: "p".into(),
            by: Some("ns:0".into()),
        };
        assert_eq!(request_line(&publish), Ok("publish a%20b p ns:0\n".into()));
        assert_eq!(
            request_line(&Service::lookup("x".into())),
            Ok("lookup x\n".into())
        );
        assert_eq!(
            request_line(&Service::Jobs),
            Err(ServiceReply::Jobs(Vec::new()))
        );
        assert_eq!(read_answer("h:1", "ok\n"), Ok(None));
        assert_eq!(read_answer("h:1", "ok p%201\n"), Ok(Some("p 1".into())));
        assert_eq!(
            read_answer("h:1", "error no%20such\n"),
            Err(Refused::Other("no such".into()))
        );
        assert_eq!(
            read_answer("h:1", "error the%20name%20a%20b%20is%20not%20published\n"),
            Err(Refused::NotPublished { name: "a b".into() })
        );
        assert_eq!(
            read_answer("h:1", "what"),
            Err(Refused::Other(
                "the name server at h:1 answered \"what\"".into()
            ))
        );
        let lookup = Service::lookup("x".into());
        assert_eq!(
            service_reply(&lookup, Ok(None), "h:1"),
            ServiceReply::Found(Err(Refused::Other(
                "the name server at h:1 sent no port".into()
            )))
        );
        assert_eq!(
            service_reply(&publish, Ok(Some("p".into())), "h:1"),
            ServiceReply::Done(Ok(()))
        );
    }

    #[test]
    fn encoding_round_trips_anything() {
        for s in ["", "plain", "a b", "100%", "tag#0$port#1$\n\r\t", "ü ü"] {
            let e = encode(s);
            assert!(!e.contains([' ', '\n', '\r']));
            assert_eq!(decode(&e).unwrap(), s);
        }
        assert_eq!(decode("%4"), Err(DecodeError::BadEscape("%4".into())));
        assert_eq!(decode("%zz"), Err(DecodeError::BadEscape("%zz".into())));
        assert_eq!(decode("%FF"), Err(DecodeError::NotUtf8("%FF".into())));
    }

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_request("publish a%20b p").unwrap(),
            Service::publish("a b".into(), "p".into())
        );
        assert_eq!(
            parse_request("publish a p ns%3A0").unwrap(),
            Service::Publish {
                name: "a".into(),
                port: "p".into(),
                by: Some("ns:0".into())
            }
        );
        assert_eq!(
            parse_request("unpublish a ns%3A0").unwrap(),
            Service::Unpublish {
                name: "a".into(),
                by: Some("ns:0".into())
            }
        );
        assert_eq!(
            parse_request("lookup x").unwrap(),
            Service::lookup("x".into())
        );
        let too_many = |verb: &str| {
            Err(RequestError::TooManyFields {
                verb: verb.to_string(),
            })
        };
        assert_eq!(parse_request("publish a p by extra"), too_many("publish"));
        assert_eq!(
            parse_request("publish onlyname"),
            Err(RequestError::Missing {
                verb: "publish".into(),
                what: "port"
            })
        );
        assert_eq!(parse_request("lookup a b"), too_many("lookup"));
        assert_eq!(
            parse_request("frobnicate x"),
            Err(RequestError::Unknown {
                verb: "frobnicate".into()
            })
        );
        assert_eq!(parse_request(""), Err(RequestError::Empty));
        assert_eq!(
            parse_request("lookup %zz"),
            Err(RequestError::Decode(DecodeError::BadEscape("%zz".into())))
        );
    }

    /// The name server's typed errors print the lines it gave when they were text.
    #[test]
    fn each_name_server_error_prints_its_line() {
        let cases: [(Box<dyn std::error::Error>, &str); 11] = [
            (
                Box::new(BadLimit {
                    var: MAX_CLIENTS_VAR,
                    value: "x".into(),
                }),
                "KAURI_NAMESERVER_MAX_CLIENTS must be a positive number, not \"x\"",
            ),
            (
                Box::new(DecodeError::BadEscape("%4".into())),
                "bad escape in \"%4\"",
            ),
            (
                Box::new(DecodeError::NotUtf8("%FF".into())),
                "\"%FF\" is not UTF-8 once decoded",
            ),
            (
                Box::new(RequestError::Missing {
                    verb: "publish".into(),
                    what: "port",
                }),
                "publish: missing port",
            ),
            (
                Box::new(RequestError::Decode(DecodeError::BadEscape("%4".into()))),
                "bad escape in \"%4\"",
            ),
            (Box::new(RequestError::Empty), "empty request"),
            (
                Box::new(RequestError::Unknown {
                    verb: "frob".into(),
                }),
                "unknown request \"frob\"",
            ),
            (
                Box::new(RequestError::TooManyFields {
                    verb: "lookup".into(),
                }),
                "lookup: too many fields",
            ),
            (
                Box::new(AuthError::WrongKey),
                "the key presented is not this name server's (see KAURI_NAMESERVER_KEY)",
            ),
            (
                Box::new(AuthError::KeyFirst),
                "this name server wants its key first (auth KEY; kauri sends KAURI_NAMESERVER_KEY)",
            ),
            (
                Box::new(RequestError::Unknown {
                    verb: "x".repeat(40),
                }),
                &format!("unknown request {:?}", "x".repeat(40)),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
        assert!(matches!(
            parse_request(&"y".repeat(100)),
            Err(RequestError::Unknown { verb }) if verb.len() == 40
        ));
    }

    #[test]
    fn table_refuses_duplicates_and_strangers_and_forgets_an_owner() {
        let mut t = Table::default();
        let p = |n: &str| Service::publish(n.into(), format!("port-{n}"));
        assert_eq!(t.apply(1, &p("a")), ServiceReply::Done(Ok(())));
        assert!(matches!(
            t.apply(2, &p("a")),
            ServiceReply::Done(Err(Refused::Exists { name })) if name == "a"
        ));
        assert_eq!(t.apply(2, &p("b")), ServiceReply::Done(Ok(())));
        assert_eq!(
            t.apply(3, &Service::lookup("a".into())),
            ServiceReply::Found(Ok("port-a".into()))
        );
        t.forget(1);
        assert!(matches!(
            t.apply(3, &Service::lookup("a".into())),
            ServiceReply::Found(Err(_))
        ));
        assert!(matches!(
            t.apply(3, &Service::unpublish("zz".into())),
            ServiceReply::Done(Err(_))
        ));
        // A name is its publisher's: another owner's unpublish is refused, the name stays.
        assert!(matches!(
            t.apply(3, &Service::unpublish("b".into())),
            ServiceReply::Done(Err(Refused::NotYours {
                by: Publisher::AnotherClient,
                ..
            }))
        ));
        assert_eq!(
            t.apply(3, &Service::lookup("b".into())),
            ServiceReply::Found(Ok("port-b".into()))
        );
        assert_eq!(
            t.apply(2, &Service::unpublish("b".into())),
            ServiceReply::Done(Ok(()))
        );
    }

    /// A PMIx publisher's name is its own: neither another process of the run nor a PMI rank
    /// of it may unpublish it, and a PMIx process may not unpublish a PMI rank's name. Every
    /// refusal reads back as itself from the text the protocol carries.
    #[test]
    fn a_pmix_name_belongs_to_its_process() {
        let mut t = Table::default();
        let by = |r: u32| Some(format!("ns:{r}"));
        let publish = |n: &str, b| Service::Publish {
            name: n.into(),
            port: format!("port-{n}"),
            by: b,
        };
        let unpublish = |n: &str, b| Service::Unpublish {
            name: n.into(),
            by: b,
        };
        let refusal = |r: ServiceReply| match r {
            ServiceReply::Done(Err(e)) | ServiceReply::Found(Err(e)) => {
                assert_eq!(refused_from_reason(e.to_string()), e);
                e
            }
            other => panic!("not a refusal: {other:?}"),
        };
        let x = || "x".to_string();
        let not_yours = |by| Refused::NotYours { name: x(), by };
        assert_eq!(t.apply(0, &publish("x", by(0))), ServiceReply::Done(Ok(())));
        assert_eq!(
            t.apply(0, &publish("pmi", None)),
            ServiceReply::Done(Ok(()))
        );
        assert_eq!(
            refusal(t.apply(0, &publish("x", by(1)))),
            Refused::Exists { name: x() }
        );
        let process = || Publisher::Process("ns:0".into());
        assert_eq!(
            refusal(t.apply(0, &unpublish("x", by(1)))),
            not_yours(process())
        );
        assert_eq!(
            refusal(t.apply(0, &unpublish("x", None))),
            not_yours(process())
        );
        assert_eq!(
            refusal(t.apply(0, &unpublish("pmi", by(0)))),
            Refused::NotYours {
                name: "pmi".into(),
                by: Publisher::PmiRank
            }
        );
        assert_eq!(
            refusal(t.apply(1, &unpublish("x", by(0)))),
            not_yours(Publisher::AnotherClient)
        );
        assert_eq!(
            t.apply(0, &Service::lookup("x".into())),
            ServiceReply::Found(Ok("port-x".into()))
        );
        assert_eq!(
            t.apply(0, &unpublish("x", by(0))),
            ServiceReply::Done(Ok(()))
        );
        assert_eq!(
            refusal(t.apply(0, &Service::lookup("x".into()))),
            Refused::NotPublished { name: x() }
        );
        assert_eq!(
            refusal(t.apply(0, &unpublish("x", by(0)))),
            Refused::NotPublished { name: x() }
        );
        let other = "the name server at h:1 is unreachable";
        assert_eq!(
            refused_from_reason(other.into()),
            Refused::Other(other.into())
        );
        // A name made of a refusal's words does not change the refusal.
        let odd = "x is already published";
        assert_eq!(
            refusal(t.apply(0, &Service::lookup(odd.into()))),
            Refused::NotPublished { name: odd.into() }
        );
    }

    /// Waiting lookups are answered when their name is published, in the order they came;
    /// one whose wait is over is dropped; one that does not wait is never parked.
    #[test]
    fn waiting_lookups_are_released_by_the_publish() {
        let t0 = Instant::now();
        let mut w = Waiting::default();
        w.add("a", 1, Wait::Forever, t0);
        w.add("a", 2, Wait::For(1_000), t0);
        w.add("a", 3, Wait::For(10), t0);
        w.add("a", 4, Wait::No, t0);
        w.add("b", 5, Wait::Forever, t0);
        assert_eq!(w.len(), 4);
        assert_eq!(
            w.published("a", t0 + Duration::from_millis(500)),
            vec![1, 2]
        );
        assert_eq!(w.published("a", t0), Vec::<i32>::new());
        assert_eq!(w.len(), 1);
        assert_eq!(w.published("b", t0 + Duration::from_secs(3600)), vec![5]);
        assert!(w.is_empty());
    }

    /// Every waiting lookup can be seen and ended at once (a wait nobody can end); one
    /// whose wait is over is neither.
    #[test]
    fn waiting_lookups_can_all_be_ended() {
        let t0 = Instant::now();
        let mut w = Waiting::default();
        w.add("a", 1, Wait::Forever, t0);
        w.add("b", 2, Wait::For(10), t0);
        w.add("b", 3, Wait::For(10_000), t0);
        let later = t0 + Duration::from_secs(1);
        let mut seen: Vec<(&str, i32)> = w.iter(later).map(|(n, k)| (n, *k)).collect();
        seen.sort();
        assert_eq!(seen, vec![("a", 1), ("b", 3)]);
        let mut ended = w.drain(later);
        ended.sort();
        assert_eq!(ended, vec![("a".to_string(), 1), ("b".to_string(), 3)]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_bounded_table_refuses_past_its_limits_and_frees_places() {
        let mut t = Table::bounded(3, 2);
        let p = |n: &str| Service::Publish {
            name: n.into(),
            port: "p".into(),
            by: None,
        };
        let refused = |r: ServiceReply, var: &str| matches!(r, ServiceReply::Done(Err(e)) if e.to_string().contains(&format!("({var})")));
        assert_eq!(t.apply(1, &p("a")), ServiceReply::Done(Ok(())));
        assert_eq!(t.apply(1, &p("b")), ServiceReply::Done(Ok(())));
        assert!(refused(t.apply(1, &p("c")), MAX_NAMES_PER_CLIENT_VAR));
        assert_eq!(t.apply(2, &p("c")), ServiceReply::Done(Ok(())));
        assert!(refused(t.apply(3, &p("d")), MAX_NAMES_VAR));
        // An unpublish frees a place for its owner; an owner gone frees all of its.
        assert_eq!(
            t.apply(1, &Service::unpublish("a".into())),
            ServiceReply::Done(Ok(()))
        );
        assert_eq!(t.apply(1, &p("a2")), ServiceReply::Done(Ok(())));
        t.forget(1);
        assert_eq!(t.apply(3, &p("d")), ServiceReply::Done(Ok(())));
        assert_eq!(t.apply(3, &p("e")), ServiceReply::Done(Ok(())));
    }

    #[test]
    fn addresses_get_the_default_port() {
        assert_eq!(address("h"), "h:6392");
        assert_eq!(address("h:7000"), "h:7000");
        assert_eq!(address("10.0.0.1"), "10.0.0.1:6392");
        assert_eq!(address("[::1]:5"), "[::1]:5");
    }
}
