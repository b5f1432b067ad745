//! The process's one PMI-1 session, and every API call in Rust types.
//!
//! The session lives in a mutex: PMI-1 is one request and one reply at a time on one
//! socket, so calls from several threads are serialised. Each call returns `Ok` or the
//! `PMI_*` code the C function returns. Nothing here touches a C pointer.

use crate::codes::*;
use kauri_libpmi_common::escape::{self, LINE_MAX};
use kauri_libpmi_common::{clique, debug_enabled, lock, Backend, LocalJob};
use pmi_wire::client::{Client, ClientError};
use pmi_wire::limits::{KEY_MAX, KVSNAME_MAX, VALUE_MAX};
use pmi_wire::{Spawn, SpawnCommand, Version};
use std::os::raw::c_int;
use std::sync::Mutex;

/// A failed call: the `PMI_*` code to return.
pub type Code = c_int;

/// The job attribute that tells which ranks share a node.
const MAPPING_KEY: &str = "PMI_process_mapping";

/// What a session knows once initialised.
pub struct Session {
    backend: Backend,
    rank: i64,
    size: i64,
    appnum: i64,
    spawned: bool,
    kvsname: String,
    kvsname_max: usize,
    key_max: usize,
    value_max: usize,
    clique: Option<Vec<usize>>,
    debug: bool,
}

/// The library's state: the session while initialised.
static STATE: Mutex<Option<Session>> = Mutex::new(None);

fn trace(debug: bool, what: &str, e: &ClientError) {
    if debug {
        eprintln!("libpmi: {what}: {e}");
    }
}

/// The code for a client error.
fn code(e: &ClientError) -> Code {
    match e {
        ClientError::TooLong { what: "key", .. } => PMI_ERR_INVALID_KEY_LENGTH,
        ClientError::TooLong { .. } => PMI_ERR_INVALID_VAL_LENGTH,
        _ => PMI_FAIL,
    }
}

/// A key as PMI-1 can carry it: not empty, no white space, no backslash (a key is one token
/// and is never encoded).
fn check_key(key: &str, max: usize) -> Result<(), Code> {
    if key.is_empty() || key.contains([' ', '\t', '\n', '\r', '\\']) {
        return Err(PMI_ERR_INVALID_KEY);
    }
    if key.len() >= max {
        return Err(PMI_ERR_INVALID_KEY_LENGTH);
    }
    Ok(())
}

/// A kvsname or service name as one token.
fn check_token(s: &str) -> Result<(), Code> {
    if s.contains([' ', '\t', '\n', '\r']) {
        return Err(PMI_ERR_INVALID_ARG);
    }
    Ok(())
}

impl Session {
    fn connect() -> Result<Session, Code> {
        let debug = debug_enabled("PMI_DEBUG");
        let backend = Backend::from_env(Version::V1).map_err(|e| {
            trace(true, "PMI_Init", &e);
            PMI_FAIL
        })?;
        Ok(Session::new(backend, debug))
    }

    /// A session over `backend` (public for tests that bring their own server).
    pub fn new(backend: Backend, debug: bool) -> Session {
        match backend {
            Backend::Server(c) => {
                let maxes = c.maxes();
                let kvsname = c.kvsname().to_string();
                let key_max = maxes.key;
                Session {
                    rank: c.rank(),
                    size: c.size(),
                    appnum: c.appnum(),
                    spawned: c.spawned(),
                    kvsname_max: maxes.kvsname.max(kvsname.len() + 1),
                    key_max,
                    value_max: escape::value_length_max(maxes.value, kvsname.len(), key_max),
                    kvsname,
                    clique: None,
                    debug,
                    backend: Backend::Server(c),
                }
            }
            Backend::Local(job) => Session {
                rank: 0,
                size: 1,
                appnum: 0,
                spawned: false,
                kvsname: job.kvsname.clone(),
                kvsname_max: KVSNAME_MAX,
                key_max: KEY_MAX,
                value_max: VALUE_MAX,
                clique: Some(vec![0]),
                debug,
                backend: Backend::Local(job),
            },
        }
    }

    fn server(&mut self) -> Option<&mut Client> {
        match &mut self.backend {
            Backend::Server(c) => Some(c),
            Backend::Local(_) => None,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> i64 {
        self.rank
    }
    /// The job's size.
    pub fn size(&self) -> i64 {
        self.size
    }
    /// The MPMD command index.
    pub fn appnum(&self) -> i64 {
        self.appnum
    }
    /// True when started by a spawn (`PMI_SPAWNED`).
    pub fn spawned(&self) -> bool {
        self.spawned
    }
    /// The KVS name.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }
    /// `PMI_KVS_Get_name_length_max`.
    pub fn kvsname_max(&self) -> usize {
        self.kvsname_max
    }
    /// `PMI_KVS_Get_key_length_max`: a key's buffer, NUL included.
    pub fn key_max(&self) -> usize {
        self.key_max
    }
    /// `PMI_KVS_Get_value_length_max`: a value's buffer, NUL included; small enough that any
    /// value that fits, encoded, keeps the `put` line within 1024 bytes.
    pub fn value_max(&self) -> usize {
        self.value_max
    }

    /// The universe size; a server that does not know it (-1, as Hydra 4.0.2 answers) gives
    /// the job size.
    pub fn universe_size(&mut self) -> Result<i64, Code> {
        let size = self.size;
        let debug = self.debug;
        match self.server() {
            None => Ok(1),
            Some(c) => match c.universe_size() {
                Ok(u) if u > 0 => Ok(u),
                Ok(_) => Ok(size),
                Err(e) => {
                    trace(debug, "PMI_Get_universe_size", &e);
                    Err(code(&e))
                }
            },
        }
    }

    /// The ranks on this node, ascending, from `PMI_process_mapping` (read once).
    pub fn clique(&mut self) -> Result<&[usize], Code> {
        if self.clique.is_none() {
            let (rank, size, debug) = (self.rank as usize, self.size as usize, self.debug);
            let mapping = match self.server() {
                Some(c) => c.get(MAPPING_KEY).map_err(|e| {
                    trace(debug, "PMI_Get_clique_size", &e);
                    code(&e)
                })?,
                None => None,
            };
            self.clique = Some(clique(mapping.as_deref(), rank, size));
        }
        Ok(self.clique.as_deref().unwrap_or(&[]))
    }

    /// `PMI_KVS_Put`: the value is encoded when it must be, and the line checked against 1024
    /// bytes.
    pub fn put(&mut self, kvsname: &str, key: &str, value: &str) -> Result<(), Code> {
        check_token(kvsname)?;
        check_key(key, self.key_max)?;
        if value.len() >= self.value_max {
            return Err(PMI_ERR_INVALID_VAL_LENGTH);
        }
        let debug = self.debug;
        match &mut self.backend {
            Backend::Local(job) => {
                job.kvs.insert(key.to_string(), value.to_string());
                Ok(())
            }
            Backend::Server(c) => {
                let wire = escape::encode(value);
                if escape::put_line_len(kvsname, key, &wire) > LINE_MAX {
                    return Err(PMI_ERR_INVALID_VAL_LENGTH);
                }
                c.put_in(kvsname, key, &wire).map_err(|e| {
                    trace(debug, "PMI_KVS_Put", &e);
                    code(&e)
                })
            }
        }
    }

    /// `PMI_KVS_Get`: `Err(PMI_FAIL)` when the key is not there.
    pub fn get(&mut self, kvsname: &str, key: &str) -> Result<String, Code> {
        check_token(kvsname)?;
        check_key(key, usize::MAX)?;
        let debug = self.debug;
        match &mut self.backend {
            Backend::Local(job) => job.kvs.get(key).cloned().ok_or(PMI_FAIL),
            Backend::Server(c) => match c.get_from(Some(kvsname), None, key) {
                Ok(Some(v)) => Ok(escape::decode(&v).into_owned()),
                Ok(None) => Err(PMI_FAIL),
                Err(e) => {
                    trace(debug, "PMI_KVS_Get", &e);
                    Err(code(&e))
                }
            },
        }
    }

    /// `PMI_Barrier`: the job-wide barrier and KVS commit.
    pub fn barrier(&mut self) -> Result<(), Code> {
        let debug = self.debug;
        match self.server() {
            None => Ok(()),
            Some(c) => c.fence().map_err(|e| {
                trace(debug, "PMI_Barrier", &e);
                code(&e)
            }),
        }
    }

    /// `PMI_Publish_name` (the port is encoded like a value).
    pub fn publish(&mut self, service: &str, port: &str) -> Result<(), Code> {
        let service = escape::encode(service);
        let port = escape::encode(port);
        let debug = self.debug;
        match &mut self.backend {
            Backend::Local(job) => job.publish(&service, &port).then_some(()).ok_or(PMI_FAIL),
            Backend::Server(c) => c.publish(&service, &port).map_err(|e| {
                trace(debug, "PMI_Publish_name", &e);
                code(&e)
            }),
        }
    }

    /// `PMI_Unpublish_name`.
    pub fn unpublish(&mut self, service: &str) -> Result<(), Code> {
        let service = escape::encode(service);
        let debug = self.debug;
        match &mut self.backend {
            Backend::Local(job) => job
                .names
                .remove(service.as_ref())
                .map(|_| ())
                .ok_or(PMI_FAIL),
            Backend::Server(c) => c.unpublish(&service).map_err(|e| {
                trace(debug, "PMI_Unpublish_name", &e);
                code(&e)
            }),
        }
    }

    /// `PMI_Lookup_name`: `Err(PMI_FAIL)` when nobody published it.
    pub fn lookup(&mut self, service: &str) -> Result<String, Code> {
        let service = escape::encode(service);
        let debug = self.debug;
        let port = match &mut self.backend {
            Backend::Local(job) => job.names.get(service.as_ref()).cloned(),
            Backend::Server(c) => c.lookup(&service).map_err(|e| {
                trace(debug, "PMI_Lookup_name", &e);
                code(&e)
            })?,
        };
        port.map(|p| escape::decode(&p).into_owned())
            .ok_or(PMI_FAIL)
    }

    /// `PMI_Spawn_multiple`: one error code per spawned process (all 0 when the server sends
    /// none). Preput values are encoded like puts (the children read them with
    /// `PMI_KVS_Get`, which decodes). A singleton cannot spawn (no process manager):
    /// `PMI_FAIL`.
    pub fn spawn(&mut self, spawn: &Spawn) -> Result<Vec<i32>, Code> {
        let debug = self.debug;
        let Some(c) = self.server() else {
            return Err(PMI_FAIL);
        };
        let mut spawn = spawn.clone();
        for (_, v) in &mut spawn.preput {
            *v = escape::encode(v).into_owned();
        }
        c.spawn(&spawn).map(|s| s.errcodes).map_err(|e| {
            trace(debug, "PMI_Spawn_multiple", &e);
            code(&e)
        })
    }

    /// `PMI_Finalize`.
    fn finalize(self) -> Result<(), Code> {
        let debug = self.debug;
        match self.backend {
            Backend::Local(_) => Ok(()),
            Backend::Server(c) => c.finalize().map_err(|e| {
                trace(debug, "PMI_Finalize", &e);
                code(&e)
            }),
        }
    }
}

/// One command of a `PMI_Spawn_multiple` call, in Rust types.
pub fn spawn_command(
    execname: &str,
    nprocs: i32,
    args: Vec<String>,
    info: Vec<(String, String)>,
) -> Result<SpawnCommand, Code> {
    Ok(SpawnCommand {
        execname: execname.to_string(),
        nprocs: u32::try_from(nprocs).map_err(|_| PMI_ERR_INVALID_ARG)?,
        args,
        info,
    })
}

/// `PMI_Init`: connects (or becomes a singleton); returns whether the process was spawned.
/// Calling it again while initialised is harmless.
pub fn init() -> Result<bool, Code> {
    let mut st = lock(&STATE);
    if let Some(s) = &*st {
        return Ok(s.spawned);
    }
    let s = Session::connect()?;
    let spawned = s.spawned;
    *st = Some(s);
    Ok(spawned)
}

/// `PMI_Initialized`.
pub fn initialized() -> bool {
    lock(&STATE).is_some()
}

/// Runs `f` on the active session; `PMI_ERR_INIT` when there is none.
pub fn with<T>(f: impl FnOnce(&mut Session) -> Result<T, Code>) -> Result<T, Code> {
    match &mut *lock(&STATE) {
        Some(s) => f(s),
        None => Err(PMI_ERR_INIT),
    }
}

/// `PMI_Finalize`: ends the session (the library may be initialised again afterwards).
pub fn finalize() -> Result<(), Code> {
    match lock(&STATE).take() {
        Some(s) => s.finalize(),
        None => Err(PMI_ERR_INIT),
    }
}

/// `PMI_Abort`: tells the server to end the job with `code` (a singleton prints the message),
/// then exits the process with `code`. Does not return.
pub fn abort(code: i32, message: &str) -> ! {
    let mut st = lock(&STATE);
    match st.take() {
        Some(Session {
            backend: Backend::Server(c),
            debug,
            ..
        }) => {
            if let Err(e) = c.abort(code, message) {
                trace(debug, "PMI_Abort", &e);
            }
        }
        _ => eprintln!("aborting job:\n{message}"),
    }
    drop(st);
    std::process::exit(code)
}

/// A fresh singleton backend, for tests.
pub fn singleton() -> Backend {
    Backend::Local(LocalJob::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::thread;

    /// A PMI-1 server that tokenises like Hydra 4.0.2 (a value ends at the first space) and,
    /// like Slurm, refuses lines over 1024 bytes. Returns the longest line it read.
    fn hydra_like(mut sock: UnixStream, kvsname: &'static str) -> thread::JoinHandle<usize> {
        thread::spawn(move || {
            let mut kvs: HashMap<String, String> = HashMap::new();
            let mut names: HashMap<String, String> = HashMap::new();
            kvs.insert(MAPPING_KEY.into(), "(vector,(0,2,2))".into());
            let mut buf = Vec::new();
            let mut longest = 0;
            loop {
                let line = loop {
                    if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                        let l: Vec<u8> = buf.drain(..=i).collect();
                        break String::from_utf8(l).unwrap();
                    }
                    let mut chunk = [0u8; 4096];
                    let n = sock.read(&mut chunk).unwrap();
                    if n == 0 {
                        return longest;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                };
                longest = longest.max(line.len());
                assert!(line.len() <= 1024, "line of {} bytes", line.len());
                let tok: HashMap<&str, &str> = line
                    .trim_end()
                    .split(' ')
                    .filter_map(|t| t.split_once('='))
                    .collect();
                let reply = match tok["cmd"] {
                    "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1".into(),
                    "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024".into(),
                    "get_my_kvsname" => format!("cmd=my_kvsname kvsname={kvsname}"),
                    "get_appnum" => "cmd=appnum appnum=0".into(),
                    "get_universe_size" => "cmd=universe_size size=-1".into(),
                    "put" => {
                        kvs.insert(tok["key"].into(), tok["value"].into());
                        "cmd=put_result rc=0".into()
                    }
                    "get" => match kvs.get(tok["key"]) {
                        Some(v) => format!("cmd=get_result rc=0 msg=success value={v}"),
                        None => "cmd=get_result rc=-1 msg=not_found value=unknown".into(),
                    },
                    "publish_name" => {
                        names.insert(tok["service"].into(), tok["port"].into());
                        "cmd=publish_result rc=0".into()
                    }
                    "lookup_name" => match names.get(tok["service"]) {
                        Some(p) => format!("cmd=lookup_result rc=0 port={p}"),
                        None => "cmd=lookup_result rc=1 msg=service_not_found".into(),
                    },
                    "barrier_in" => "cmd=barrier_out".into(),
                    "finalize" => "cmd=finalize_ack".into(),
                    other => panic!("unexpected {other}"),
                };
                sock.write_all(format!("{reply}\n").as_bytes()).unwrap();
            }
        })
    }

    fn session(kvsname: &'static str) -> (Session, thread::JoinHandle<usize>) {
        let (a, b) = UnixStream::pair().unwrap();
        let server = hydra_like(b, kvsname);
        let c = Client::over_socket(a, Version::V1).unwrap();
        (Session::new(Backend::Server(c), true), server)
    }

    #[test]
    fn values_with_spaces_survive_a_tokenising_server() {
        let (mut s, server) = session("kvs_4242_0_1234567_host");
        let kvs = s.kvsname().to_string();
        for v in [
            "plain",
            "with spaces  ",
            " ",
            "",
            "~tilde",
            "back\\slash",
            "AQID -",
        ] {
            s.put(&kvs, "k", v).unwrap();
            assert_eq!(s.get(&kvs, "k").unwrap(), v);
        }
        assert_eq!(s.get(&kvs, "absent"), Err(PMI_FAIL));
        s.publish("svc", "port with space").unwrap();
        assert_eq!(s.lookup("svc").unwrap(), "port with space");
        assert_eq!(s.lookup("nobody"), Err(PMI_FAIL));
        s.finalize().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn the_longest_values_fit_1024_byte_lines() {
        let (mut s, server) = session("kvs_4242_0_1234567_a_rather_long_host_name_here");
        let kvs = s.kvsname().to_string();
        let vmax = s.value_max();
        assert!(vmax > 256 && vmax < 1024, "{vmax}");
        let key = "k".repeat(s.key_max() - 1);
        for fill in [' ', 'a', '~', '\\'] {
            let v: String = std::iter::repeat_n(fill, vmax - 1).collect();
            s.put(&kvs, &key, &v).unwrap();
            assert_eq!(s.get(&kvs, &key).unwrap(), v);
        }
        let too_long = "a".repeat(vmax);
        assert_eq!(
            s.put(&kvs, &key, &too_long),
            Err(PMI_ERR_INVALID_VAL_LENGTH)
        );
        assert_eq!(
            s.put(&kvs, &"k".repeat(64), "v"),
            Err(PMI_ERR_INVALID_KEY_LENGTH)
        );
        assert_eq!(s.put(&kvs, "a key", "v"), Err(PMI_ERR_INVALID_KEY));
        s.finalize().unwrap();
        assert!(server.join().unwrap() <= 1024);
    }

    #[test]
    fn clique_and_universe_from_the_server() {
        let (mut s, server) = session("kvs_1");
        // PMI_RANK/PMI_SIZE are unset: rank 0 of 1, so the clique is rank 0 alone.
        assert_eq!(s.clique().unwrap(), [0]);
        s.size = 4;
        s.rank = 3;
        s.clique = None;
        assert_eq!(s.clique().unwrap(), [2, 3]);
        // Hydra 4.0.2 answers -1: the job size instead.
        assert_eq!(s.universe_size().unwrap(), 4);
        s.barrier().unwrap();
        s.finalize().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn singleton_is_a_job_of_one() {
        let mut s = Session::new(singleton(), false);
        assert_eq!((s.rank(), s.size(), s.appnum()), (0, 1, 0));
        let kvs = s.kvsname().to_string();
        s.put(&kvs, "k", "v w").unwrap();
        s.barrier().unwrap();
        assert_eq!(s.get(&kvs, "k").unwrap(), "v w");
        assert_eq!(s.clique().unwrap(), [0]);
        assert_eq!(s.universe_size().unwrap(), 1);
        s.publish("a", "b").unwrap();
        assert_eq!(s.publish("a", "c"), Err(PMI_FAIL));
        assert_eq!(s.lookup("a").unwrap(), "b");
        s.unpublish("a").unwrap();
        assert_eq!(s.unpublish("a"), Err(PMI_FAIL));
        assert_eq!(s.spawn(&Spawn::default()), Err(PMI_FAIL));
        s.finalize().unwrap();
    }
}
