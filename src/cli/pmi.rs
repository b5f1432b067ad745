//! `kauri pmi …`: a PMI client for administrators, like `flux pmi`: run it as every rank of a
//! job under any launcher (kauri, `mpiexec.hydra`, `srun --mpi=pmi2|pmix`) to see whether, and
//! how fast, that launcher's PMI works, through the method a program would use.
//!
//! One `Session` per method: `pmi1` and `pmi2` speak the wire protocol themselves (pmi-wire's
//! [`Client`], whose trace hook `-v` prints), `libpmi2` loads Slurm's `libpmi2.so.0` at run time
//! (`dlopen`) and `pmix` calls the OpenPMIx client library kauri links for its server
//! ([`crate::proto::pmix::ffi::PmixClient`]). For those two the wire is inside the library, so `-v`
//! prints each library call and its result instead. Each subcommand is the same walk through a
//! session: init, its puts, the fence, its gets, finalize, each phase timed.
//!
//! It owns no state but the process's: nothing here may touch a server's internals, only what
//! a rank program sees (its environment and its PMI connection).

use crate::proto::pmix::ffi::PmixClient;
use pmi_wire::client::{Client, ClientError, Direction, Trace};
use pmi_wire::Version;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How `kauri pmi` reaches the PMI server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Decide from the environment (see [`Method::resolve`]).
    Auto,
    /// The PMI-1 wire protocol.
    Pmi1,
    /// The PMI-2 wire protocol.
    Pmi2,
    /// Slurm's `libpmi2.so.0`, loaded at run time.
    Libpmi2,
    /// The OpenPMIx client library.
    Pmix,
}

impl Method {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Pmi1 => "pmi1",
            Method::Pmi2 => "pmi2",
            Method::Libpmi2 => "libpmi2",
            Method::Pmix => "pmix",
        }
    }

    /// The method `auto` stands for, given a lookup of environment variables: `pmix` when
    /// `PMIX_NAMESPACE` is set, else `pmi1` when `PMI_FD` or `PMI_PORT` is (every PMI wire
    /// server speaks PMI-1, not every one PMI-2); `None` when nothing names a server.
    pub fn resolve(self, env: impl Fn(&str) -> Option<String>) -> Option<Method> {
        let set = |v: &str| env(v).is_some_and(|x| !x.is_empty());
        match self {
            Method::Auto if set("PMIX_NAMESPACE") => Some(Method::Pmix),
            Method::Auto if set("PMI_FD") || set("PMI_PORT") => Some(Method::Pmi1),
            Method::Auto => None,
            m => Some(m),
        }
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One fence.
    Barrier,
    /// Put, fence, get everyone's.
    Exchange {
        /// Bytes per value.
        size: usize,
        /// Keys per rank.
        count: usize,
    },
    /// Read one key.
    Get {
        /// The key.
        key: String,
    },
}

/// The parsed command line of `kauri pmi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--method`.
    pub method: Method,
    /// `--library`.
    pub library: String,
    /// `-v`.
    pub verbose: bool,
    /// `--timing`.
    pub timing: bool,
    /// The subcommand.
    pub op: Op,
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// `-h`.
    Help,
    /// Run.
    Run(Options),
}

/// The default `--library`.
pub const LIBPMI2: &str = "libpmi2.so.0";

fn number(opt: &str, v: Option<&String>) -> Result<usize, String> {
    let v = v.ok_or(format!("{opt} needs a value"))?;
    v.parse().map_err(|_| format!("{opt} {v:?}: not a number"))
}

/// Parses the arguments after `kauri pmi`.
pub fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut method = Method::Auto;
    let mut library = LIBPMI2.to_string();
    let (mut verbose, mut timing) = (false, false);
    let mut op: Option<Op> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        // The options are kauri-pmi(1)'s (`crate::cli::doc::KAURI_PMI`): a name the page does not
        // list is unknown here too, so `-h` and the parser cannot drift apart.
        if name.starts_with('-') && crate::cli::doc::KAURI_PMI.find(name).is_none() {
            return Err(format!("unknown option {name}"));
        }
        let value = |it: &mut std::slice::Iter<String>| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or(format!("{name} needs a value"))
        };
        match name {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-v" | "--verbose" => verbose = true,
            "--timing" => timing = true,
            "-m" | "--method" => {
                method = match value(&mut it)?.as_str() {
                    "auto" => Method::Auto,
                    "pmi1" | "pmi" | "simple" => Method::Pmi1,
                    "pmi2" => Method::Pmi2,
                    "libpmi2" => Method::Libpmi2,
                    "pmix" => Method::Pmix,
                    m => {
                        return Err(format!(
                            "--method {m:?}: use auto, pmi1, pmi2, libpmi2 or pmix"
                        ))
                    }
                }
            }
            "--library" => library = value(&mut it)?,
            "barrier" if op.is_none() => op = Some(Op::Barrier),
            "exchange" if op.is_none() => op = Some(Op::Exchange { size: 64, count: 1 }),
            "--size" | "--count" if matches!(op, Some(Op::Exchange { .. })) => {
                let n = match &inline {
                    Some(v) => number(name, Some(v))?,
                    None => number(name, it.next())?,
                };
                if let Some(Op::Exchange { size, count }) = &mut op {
                    if name == "--size" {
                        *size = n;
                    } else if n == 0 {
                        return Err("--count 0: put at least one key".into());
                    } else {
                        *count = n;
                    }
                }
            }
            "get" if op.is_none() => {
                let key = it.next().ok_or("get needs a KEY")?;
                op = Some(Op::Get { key: key.clone() });
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            other => return Err(format!("unexpected {other:?}")),
        }
    }
    let op = op.ok_or("name a subcommand: barrier, exchange or get KEY")?;
    Ok(Parsed::Run(Options {
        method,
        library,
        verbose,
        timing,
        op,
    }))
}

/// Runs `kauri pmi ARGS`; returns the exit status (0, 1 on failure, 2 on bad usage).
pub fn run(args: &[String]) -> u8 {
    let opts = match parse(args) {
        Ok(Parsed::Help) => {
            crate::console::out(&crate::cli::doc::help(&crate::cli::doc::KAURI_PMI));
            return 0;
        }
        Ok(Parsed::Run(o)) => o,
        Err(e) => {
            say!("kauri pmi: {e} (kauri pmi -h for help)");
            return 2;
        }
    };
    let log = Log::new(opts.verbose);
    match go(&opts, &log) {
        Ok(()) => 0,
        // Already said (a failure inside the session).
        Err(e) if e.is_empty() => 1,
        Err(e) => {
            say!("kauri pmi: {}{e}", log.who());
            1
        }
    }
}

/// The per-phase times of one rank.
#[derive(Debug, Default, Clone, Copy)]
struct Times {
    init: Duration,
    put: Duration,
    fence: Duration,
    get: Duration,
    finalize: Duration,
}

impl Times {
    fn total(&self) -> Duration {
        self.init + self.put + self.fence + self.get + self.finalize
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Times `f`, adding its duration to `slot`.
fn timed<T>(slot: &mut Duration, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    *slot += t.elapsed();
    out
}

/// Runs the subcommand. A failure inside the session is written at once and comes back as
/// an empty error; any other failure is the error's text.
fn go(opts: &Options, log: &Log) -> Result<(), String> {
    let method = opts
        .method
        .resolve(|v| std::env::var(v).ok())
        .ok_or("no PMI server in the environment (none of PMIX_NAMESPACE, PMI_FD, PMI_PORT): run under a launcher (kauri, mpiexec.hydra, srun --mpi=pmi2|pmix), or name a --method")?;
    let mut t = Times::default();
    let mut s = timed(&mut t.init, || open(method, opts, log))?;
    log.set_rank(s.rank());
    let (rank, size) = (s.rank(), s.size());
    let mut summary = None;
    // Past the last fence (and in `get`, which has none), nobody waits for this rank.
    let mut fenced = matches!(opts.op, Op::Get { .. });
    let result = (|| -> Result<(), String> {
        match &opts.op {
            Op::Barrier => {
                timed(&mut t.fence, || s.fence())?;
                fenced = true;
            }
            Op::Exchange { size: bytes, count } => {
                if let Some(max) = s.max_value() {
                    if *bytes > max {
                        return Err(format!(
                            "--size {bytes}: more than the {max} bytes a value may have with {}",
                            method.name()
                        ));
                    }
                }
                timed(&mut t.put, || -> Result<(), String> {
                    for i in 0..*count {
                        s.put(&key(rank, i), &value(rank, i, *bytes))?;
                    }
                    Ok(())
                })?;
                timed(&mut t.fence, || s.fence())?;
                fenced = true;
                timed(&mut t.get, || -> Result<(), String> {
                    for r in 0..size {
                        for i in 0..*count {
                            let k = key(r, i);
                            let want = value(r, i, *bytes);
                            match s.get(r, &k)? {
                                None => return Err(format!("get {k}: not found")),
                                Some(v) if v != want => {
                                    return Err(format!(
                                        "get {k}: the value differs from what rank {r} put: {} bytes {:?}, expected {} bytes {:?}",
                                        v.len(),
                                        clip(&v),
                                        want.len(),
                                        clip(&want)
                                    ))
                                }
                                Some(_) => {}
                            }
                        }
                    }
                    Ok(())
                })?;
                summary = Some(format!(
                    "{bytes} bytes x {count} key{} per rank ({} bytes in all)",
                    if *count == 1 { "" } else { "s" },
                    bytes * count * size.max(0) as usize
                ));
            }
            Op::Get { key } => {
                let v = timed(&mut t.get, || s.lookup(key))?.ok_or(format!("{key}: not found"))?;
                show!("{v}");
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Say what failed first: the abort may end this process.
        let line = format!("kauri pmi: rank {rank}: {e}");
        say!("{line}");
        if fenced {
            // Nobody waits for this rank: end cleanly and let the exit status say it (an
            // abort would have the launcher kill everyone, and some drop the line above).
            let _ = s.finalize();
        } else {
            // The others would wait in a fence this rank never enters.
            s.abort(1, &line);
        }
        return Err(String::new());
    }
    timed(&mut t.finalize, || s.finalize())?;
    if opts.timing {
        show!(
            "kauri pmi: rank {rank}: init {}, put {}, fence {}, get {}, finalize {}",
            ms(t.init),
            ms(t.put),
            ms(t.fence),
            ms(t.get),
            ms(t.finalize)
        );
    }
    if rank == 0 {
        match &opts.op {
            Op::Barrier => show!(
                "kauri pmi barrier: {size} ranks, method {}, fence {}, total {}",
                method.name(),
                ms(t.fence),
                ms(t.total())
            ),
            Op::Exchange { .. } => show!(
                "kauri pmi exchange: {size} ranks, method {}, {}, put {}, fence {}, get {}, total {}",
                method.name(),
                summary.unwrap_or_default(),
                ms(t.put),
                ms(t.fence),
                ms(t.get),
                ms(t.total())
            ),
            Op::Get { .. } => {}
        }
    }
    Ok(())
}

/// The key of `rank`'s `i`th value.
fn key(rank: i64, i: usize) -> String {
    format!("kauri.pmi.{rank}.{i}")
}

/// The value `rank` puts as its `i`th: `RANK.I.` then letters and digits in a pattern that
/// depends on both, cut to `bytes` (only characters every PMI wire format carries).
fn value(rank: i64, i: usize, bytes: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut v = format!("{rank}.{i}.");
    let seed = (rank.unsigned_abs() as usize)
        .wrapping_mul(131)
        .wrapping_add(i.wrapping_mul(17));
    let mut j = 0usize;
    while v.len() < bytes {
        v.push(ALPHABET[seed.wrapping_add(j.wrapping_mul(7)) % ALPHABET.len()] as char);
        j += 1;
    }
    v.truncate(bytes);
    v
}

/// At most 40 characters of `s`, for an error line.
fn clip(s: &str) -> String {
    let mut c: String = s.chars().take(40).collect();
    if c.len() < s.len() {
        c.push_str("...");
    }
    c
}

// ---------------------------------------------------------------------------------------------
// The trace of -v

/// Where `-v` lines go: stderr, with the UTC time of day and the rank.
#[derive(Clone)]
struct Log {
    on: bool,
    rank: Arc<AtomicI64>,
}

impl Log {
    fn new(on: bool) -> Log {
        // Before init, the rank the launcher put in the environment, if any.
        let rank = ["PMI_RANK", "PMIX_RANK", "PMI_ID", "SLURM_PROCID"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
            .unwrap_or(-1);
        Log {
            on,
            rank: Arc::new(AtomicI64::new(rank)),
        }
    }

    fn set_rank(&self, r: i64) {
        self.rank.store(r, Ordering::Relaxed);
    }

    /// `rank R: `, or nothing when the rank is unknown.
    fn who(&self) -> String {
        match self.rank.load(Ordering::Relaxed) {
            r if r >= 0 => format!("rank {r}: "),
            _ => String::new(),
        }
    }

    fn line(&self, arrow: &str, text: &str) {
        if !self.on {
            return;
        }
        let r = self.rank.load(Ordering::Relaxed);
        let rank = if r >= 0 { r.to_string() } else { "?".into() };
        say!("{} rank {rank} {arrow} {text}", utc_now());
    }

    /// A library call and its result (libpmi2, pmix).
    fn call(&self, call: &str, result: &str) {
        self.line("call", &format!("{call} = {result}"));
    }

    /// The hook for pmi-wire's client, or `None` when `-v` is off.
    fn wire_trace(&self) -> Option<Trace> {
        if !self.on {
            return None;
        }
        let log = self.clone();
        Some(Box::new(move |d: Direction, bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let arrow = match d {
                Direction::Sent => "->",
                Direction::Received => "<-",
            };
            log.line(arrow, text.trim_end_matches('\n'));
        }))
    }
}

/// The time of day, UTC, to the microsecond: `HH:MM:SS.ffffff`.
fn utc_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_micros()
    )
}

// ---------------------------------------------------------------------------------------------
// Sessions

/// One rank's PMI session through one method.
trait Session {
    /// This process's rank.
    fn rank(&self) -> i64;
    /// The job's size.
    fn size(&self) -> i64;
    /// The longest value a put may carry, if the method has a limit.
    fn max_value(&self) -> Option<usize>;
    /// Puts a pair for the next fence.
    fn put(&mut self, key: &str, value: &str) -> Result<(), String>;
    /// The job-wide fence (a PMIx commit and fence).
    fn fence(&mut self) -> Result<(), String>;
    /// Reads the pair `owner` put.
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, String>;
    /// Reads a job attribute or key (`kauri pmi get`).
    fn lookup(&mut self, key: &str) -> Result<Option<String>, String>;
    /// Ends the session.
    fn finalize(self: Box<Self>) -> Result<(), String>;
    /// Asks the server to end the job (best effort: the caller exits 1 anyway).
    fn abort(self: Box<Self>, code: i32, msg: &str);
}

fn open(method: Method, opts: &Options, log: &Log) -> Result<Box<dyn Session>, String> {
    Ok(match method {
        Method::Pmi1 | Method::Auto => Box::new(Wire::open(Version::V1, log)?),
        Method::Pmi2 => Box::new(Wire::open(Version::V2, log)?),
        Method::Libpmi2 => Box::new(Libpmi2::open(&opts.library, log)?),
        Method::Pmix => Box::new(Pmix::open(log)?),
    })
}

/// `pmi1`, `pmi2`: pmi-wire's client.
struct Wire(Client);

impl Wire {
    fn open(v: Version, log: &Log) -> Result<Wire, String> {
        Client::from_env_traced(v, log.wire_trace())
            .map(Wire)
            .map_err(|e| match e {
                ClientError::NoServer => {
                    "no PMI server: neither PMI_FD nor PMI_PORT is set (not started by a PMI launcher?)".to_string()
                }
                e => format!("init: {e}"),
            })
    }
}

impl Session for Wire {
    fn rank(&self) -> i64 {
        self.0.rank()
    }
    fn size(&self) -> i64 {
        self.0.size()
    }
    fn max_value(&self) -> Option<usize> {
        Some(self.0.maxes().value)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.0
            .put(key, value)
            .map_err(|e| format!("put {key}: {e}"))
    }
    fn fence(&mut self) -> Result<(), String> {
        self.0.fence().map_err(|e| format!("fence: {e}"))
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, String> {
        let r = match self.0.version() {
            Version::V1 => self.0.get(key),
            Version::V2 => self.0.get_from(None, Some(owner), key),
        };
        r.map_err(|e| format!("get {key}: {e}"))
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, String> {
        let r = match self.0.job_attr(key) {
            Ok(None) if self.0.version() == Version::V2 => self.0.get(key),
            other => other,
        };
        r.map_err(|e| format!("get {key}: {e}"))
    }
    fn finalize(self: Box<Self>) -> Result<(), String> {
        self.0.finalize().map_err(|e| format!("finalize: {e}"))
    }
    fn abort(self: Box<Self>, code: i32, msg: &str) {
        let _ = self.0.abort(code, msg);
    }
}

/// `pmix`: the OpenPMIx client library.
struct Pmix {
    c: PmixClient,
    size: i64,
    log: Log,
}

impl Pmix {
    fn open(log: &Log) -> Result<Pmix, String> {
        let c = PmixClient::init();
        match &c {
            Ok(c) => log.call(
                "PMIx_Init",
                &format!("PMIX_SUCCESS, namespace {} rank {}", c.nspace(), c.rank()),
            ),
            Err(e) => log.call("PMIx_Init", e),
        }
        let mut c = c.map_err(|e| {
            if std::env::var_os("PMIX_NAMESPACE").is_none() {
                format!("{e} (PMIX_NAMESPACE is not set: no PMIx server started this process)")
            } else {
                e
            }
        })?;
        log.set_rank(c.rank().into());
        let size = c.size();
        log.call(
            "PMIx_Get(WILDCARD, pmix.job.size)",
            &match &size {
                Ok(n) => n.to_string(),
                Err(e) => e.clone(),
            },
        );
        Ok(Pmix {
            c,
            size: size?.into(),
            log: log.clone(),
        })
    }

    fn logged<T: std::fmt::Debug>(&self, call: String, r: Result<T, String>) -> Result<T, String> {
        match &r {
            Ok(v) => self.log.call(&call, &format!("PMIX_SUCCESS {v:?}")),
            Err(e) => self.log.call(&call, e),
        }
        r
    }
}

impl Session for Pmix {
    fn rank(&self) -> i64 {
        self.c.rank().into()
    }
    fn size(&self) -> i64 {
        self.size
    }
    fn max_value(&self) -> Option<usize> {
        None
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let r = self.c.put(key, value);
        self.logged(format!("PMIx_Put(GLOBAL, {key}, {value:?})"), r)
    }
    fn fence(&mut self) -> Result<(), String> {
        let r = self.c.commit();
        self.logged("PMIx_Commit()".into(), r)?;
        let r = self.c.fence(true);
        self.logged("PMIx_Fence(WILDCARD, COLLECT_DATA)".into(), r)
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, String> {
        let rank = u32::try_from(owner).map_err(|_| format!("bad rank {owner}"))?;
        let r = self.c.get(Some(rank), key);
        self.logged(format!("PMIx_Get(rank {rank}, {key})"), r)
            .map_err(|e| format!("get {key} of rank {rank}: {e}"))
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, String> {
        let r = self.c.get(None, key);
        self.logged(format!("PMIx_Get(WILDCARD, {key})"), r)
            .map_err(|e| format!("get {key}: {e}"))
    }
    fn finalize(self: Box<Self>) -> Result<(), String> {
        let log = self.log.clone();
        let r = self.c.finalize();
        log.call(
            "PMIx_Finalize()",
            r.as_ref().map_or_else(|e| e.as_str(), |_| "PMIX_SUCCESS"),
        );
        r
    }
    fn abort(self: Box<Self>, code: i32, msg: &str) {
        let log = self.log.clone();
        let r = self.c.abort(code, msg);
        log.call(
            &format!("PMIx_Abort({code}, {msg:?})"),
            r.as_ref().map_or_else(|e| e.as_str(), |_| "PMIX_SUCCESS"),
        );
    }
}

/// `libpmi2`: Slurm's PMI-2 client library, loaded with `dlopen`.
struct Libpmi2 {
    f: Pmi2Fns,
    rank: i64,
    size: i64,
    jobid: CString,
    log: Log,
    // The library stays loaded for the life of the process: its functions are in `f`, and
    // it may have threads or atexit handlers; unloading buys nothing.
    _handle: *mut c_void,
}

/// `PMI2_MAX_VALLEN` of `pmi2.h`.
const PMI2_MAX_VALLEN: usize = 1024;
/// `PMI2_MAX_KEYLEN` … the job id buffer uses `PMI2_MAX_VALLEN` too.
const PMI2_JOBID_LEN: usize = 1024;

type Pmi2Init = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
type Pmi2Void = unsafe extern "C" fn() -> c_int;
type Pmi2Abort = unsafe extern "C" fn(c_int, *const c_char) -> c_int;
type Pmi2JobGetId = unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
type Pmi2Put = unsafe extern "C" fn(*const c_char, *const c_char) -> c_int;
type Pmi2Get = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *const c_char,
    *mut c_char,
    c_int,
    *mut c_int,
) -> c_int;
type Pmi2GetJobAttr = unsafe extern "C" fn(*const c_char, *mut c_char, c_int, *mut c_int) -> c_int;

/// The functions of `pmi2.h` that `kauri pmi` calls.
struct Pmi2Fns {
    init: Pmi2Init,
    finalize: Pmi2Void,
    abort: Pmi2Abort,
    job_getid: Pmi2JobGetId,
    kvs_put: Pmi2Put,
    kvs_fence: Pmi2Void,
    kvs_get: Pmi2Get,
    getjobattr: Pmi2GetJobAttr,
}

/// `dlsym(handle, name)`, or an error naming what is missing.
fn symbol(handle: *mut c_void, library: &str, name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
    // SAFETY: handle is a live dlopen handle and c a NUL-terminated string.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        Err(format!("{library} has no {name}: not a PMI-2 library"))
    } else {
        Ok(p)
    }
}

/// The text of the last `dlerror`.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A C string from a buffer the library filled (up to its first NUL).
fn from_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn c_arg(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} holds a NUL byte"))
}

impl Libpmi2 {
    fn open(library: &str, log: &Log) -> Result<Libpmi2, String> {
        if ["PMI_FD", "PMI_PORT"]
            .iter()
            .all(|v| std::env::var(v).map_or(true, |x| x.is_empty()))
        {
            // Without them, the library runs as a singleton and "succeeds" alone.
            return Err("libpmi2: neither PMI_FD nor PMI_PORT is set: no PMI-2 server to talk to (the library would run as a singleton)".into());
        }
        let (handle, f) = Libpmi2::load(library, log)?;
        let (mut spawned, mut size, mut rank, mut appnum) = (0, 0, 0, 0);
        // SAFETY: four valid int pointers for the library to fill.
        let rc = unsafe { (f.init)(&mut spawned, &mut size, &mut rank, &mut appnum) };
        log.set_rank(rank.into());
        log.call(
            "PMI2_Init()",
            &format!("{rc} (spawned {spawned}, size {size}, rank {rank}, appnum {appnum})"),
        );
        if rc != 0 {
            return Err(format!(
                "PMI2_Init failed: {rc} (is PMI_FD set by a PMI-2 server?)"
            ));
        }
        let mut buf = vec![0 as c_char; PMI2_JOBID_LEN];
        // SAFETY: buf holds PMI2_JOBID_LEN chars, the length passed.
        let rc = unsafe { (f.job_getid)(buf.as_mut_ptr(), PMI2_JOBID_LEN as c_int) };
        let jobid = from_buf(&buf);
        log.call("PMI2_Job_GetId()", &format!("{rc} ({jobid:?})"));
        if rc != 0 {
            return Err(format!("PMI2_Job_GetId failed: {rc}"));
        }
        Ok(Libpmi2 {
            f,
            rank: rank.into(),
            size: size.into(),
            jobid: c_arg("job id", &jobid)?,
            log: log.clone(),
            _handle: handle,
        })
    }

    /// `dlopen`s `library` and finds the functions of `pmi2.h` in it.
    fn load(library: &str, log: &Log) -> Result<(*mut c_void, Pmi2Fns), String> {
        let path = c_arg("--library", library)?;
        // SAFETY: path is NUL-terminated; loading runs the library's constructors, which is
        // what a program linked to it does too.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            let e = dl_error();
            log.call(&format!("dlopen({library})"), &e);
            return Err(format!(
                "cannot load {library}: {e} (Debian: apt install libpmi2-0; or --library PATH)"
            ));
        }
        log.call(&format!("dlopen({library})"), "ok");
        // SAFETY: each symbol is the pmi2.h function of that name, whose C signature the
        // type it is cast to repeats (Slurm's contribs/pmi2/pmi2.h).
        let f = unsafe {
            Pmi2Fns {
                init: std::mem::transmute::<*mut c_void, Pmi2Init>(symbol(
                    handle,
                    library,
                    "PMI2_Init",
                )?),
                finalize: std::mem::transmute::<*mut c_void, Pmi2Void>(symbol(
                    handle,
                    library,
                    "PMI2_Finalize",
                )?),
                abort: std::mem::transmute::<*mut c_void, Pmi2Abort>(symbol(
                    handle,
                    library,
                    "PMI2_Abort",
                )?),
                job_getid: std::mem::transmute::<*mut c_void, Pmi2JobGetId>(symbol(
                    handle,
                    library,
                    "PMI2_Job_GetId",
                )?),
                kvs_put: std::mem::transmute::<*mut c_void, Pmi2Put>(symbol(
                    handle,
                    library,
                    "PMI2_KVS_Put",
                )?),
                kvs_fence: std::mem::transmute::<*mut c_void, Pmi2Void>(symbol(
                    handle,
                    library,
                    "PMI2_KVS_Fence",
                )?),
                kvs_get: std::mem::transmute::<*mut c_void, Pmi2Get>(symbol(
                    handle,
                    library,
                    "PMI2_KVS_Get",
                )?),
                getjobattr: std::mem::transmute::<*mut c_void, Pmi2GetJobAttr>(symbol(
                    handle,
                    library,
                    "PMI2_Info_GetJobAttr",
                )?),
            }
        };
        Ok((handle, f))
    }
}

impl Session for Libpmi2 {
    fn rank(&self) -> i64 {
        self.rank
    }
    fn size(&self) -> i64 {
        self.size
    }
    fn max_value(&self) -> Option<usize> {
        // The buffer's size includes the NUL.
        Some(PMI2_MAX_VALLEN - 1)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (k, v) = (c_arg("key", key)?, c_arg("value", value)?);
        // SAFETY: two NUL-terminated strings that outlive the call.
        let rc = unsafe { (self.f.kvs_put)(k.as_ptr(), v.as_ptr()) };
        self.log
            .call(&format!("PMI2_KVS_Put({key}, {value:?})"), &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(format!("PMI2_KVS_Put {key} failed: {rc}")),
        }
    }
    fn fence(&mut self) -> Result<(), String> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.f.kvs_fence)() };
        self.log.call("PMI2_KVS_Fence()", &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(format!("PMI2_KVS_Fence failed: {rc}")),
        }
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, String> {
        let k = c_arg("key", key)?;
        let src = c_int::try_from(owner).map_err(|_| format!("bad rank {owner}"))?;
        let mut buf = vec![0 as c_char; PMI2_MAX_VALLEN + 1];
        let mut len: c_int = 0;
        // SAFETY: NUL-terminated job id and key; buf holds PMI2_MAX_VALLEN + 1 chars and the
        // library is told PMI2_MAX_VALLEN, so it always leaves a NUL.
        let rc = unsafe {
            (self.f.kvs_get)(
                self.jobid.as_ptr(),
                src,
                k.as_ptr(),
                buf.as_mut_ptr(),
                PMI2_MAX_VALLEN as c_int,
                &mut len,
            )
        };
        let v = from_buf(&buf);
        self.log.call(
            &format!("PMI2_KVS_Get({:?}, {src}, {key})", self.jobid),
            &format!("{rc} ({len} bytes {v:?})"),
        );
        match rc {
            0 => Ok(Some(v)),
            // Slurm's library returns an error for a key nobody put.
            rc => Err(format!("PMI2_KVS_Get {key} from rank {owner} failed: {rc}")),
        }
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, String> {
        let k = c_arg("key", key)?;
        let mut buf = vec![0 as c_char; PMI2_MAX_VALLEN + 1];
        let mut found: c_int = 0;
        // SAFETY: NUL-terminated name; buf holds one more char than the length passed.
        let rc = unsafe {
            (self.f.getjobattr)(
                k.as_ptr(),
                buf.as_mut_ptr(),
                PMI2_MAX_VALLEN as c_int,
                &mut found,
            )
        };
        let v = from_buf(&buf);
        self.log.call(
            &format!("PMI2_Info_GetJobAttr({key})"),
            &format!("{rc} (found {found}, {v:?})"),
        );
        if rc == 0 && found != 0 {
            return Ok(Some(v));
        }
        match self.get(-1, key) {
            Ok(v) => Ok(v.filter(|v| !v.is_empty())),
            Err(_) if rc == 0 => Ok(None),
            Err(e) => Err(format!("PMI2_Info_GetJobAttr {key} failed: {rc}; {e}")),
        }
    }
    fn finalize(self: Box<Self>) -> Result<(), String> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.f.finalize)() };
        self.log.call("PMI2_Finalize()", &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(format!("PMI2_Finalize failed: {rc}")),
        }
    }
    fn abort(self: Box<Self>, _code: i32, msg: &str) {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: NUL-terminated message; flag 1: the whole job.
        let rc = unsafe { (self.f.abort)(1, m.as_ptr()) };
        self.log
            .call(&format!("PMI2_Abort(1, {msg:?})"), &rc.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Every option of kauri-pmi(1) is one the parser takes (the parser refuses the rest).
    #[test]
    fn every_page_option_is_parsed() {
        for o in crate::cli::doc::KAURI_PMI.opts() {
            for name in o.all_names().filter(|n| n.starts_with('-')) {
                let value = match name {
                    "-m" | "--method" => "pmi2",
                    "--size" | "--count" => "2",
                    "--library" => "/x/libpmi2.so",
                    _ => "",
                };
                let mut args = words(&format!("exchange {name} {value}"));
                if name == "-h" || name == "--help" {
                    args = vec![name.to_string()];
                }
                match parse(&args) {
                    Ok(_) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            }
        }
        assert!(parse(&words("exchange --sizes 2")).is_err());
    }

    #[test]
    fn command_lines() {
        let run = |s: &str| match parse(&words(s)) {
            Ok(Parsed::Run(o)) => o,
            other => panic!("{s}: {other:?}"),
        };
        let o = run("exchange");
        assert_eq!(o.method, Method::Auto);
        assert_eq!(o.op, Op::Exchange { size: 64, count: 1 });
        assert_eq!(o.library, LIBPMI2);
        let o = run("--method pmi2 -v --timing exchange --size 300 --count=3");
        assert_eq!(o.method, Method::Pmi2);
        assert!(o.verbose && o.timing);
        assert_eq!(
            o.op,
            Op::Exchange {
                size: 300,
                count: 3
            }
        );
        let o = run("--method=libpmi2 --library /x/libpmi2.so barrier");
        assert_eq!(
            (o.method, o.library.as_str()),
            (Method::Libpmi2, "/x/libpmi2.so")
        );
        assert_eq!(
            run("-m pmix get pmix.job.size").op,
            Op::Get {
                key: "pmix.job.size".into()
            }
        );
        assert_eq!(parse(&words("-h")), Ok(Parsed::Help));
        for bad in [
            "",
            "--method pmi3 barrier",
            "barrier exchange",
            "get",
            "exchange --size x",
            "exchange --count 0",
            "barrier --size 3",
            "--method",
            "frobnicate",
            "-x barrier",
        ] {
            assert!(parse(&words(bad)).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn auto_picks_by_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                vars.iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            }
        };
        let auto = Method::Auto;
        assert_eq!(
            auto.resolve(env(&[("PMIX_NAMESPACE", "ns"), ("PMI_FD", "3")])),
            Some(Method::Pmix)
        );
        assert_eq!(auto.resolve(env(&[("PMI_FD", "3")])), Some(Method::Pmi1));
        assert_eq!(
            auto.resolve(env(&[("PMI_PORT", "h:1")])),
            Some(Method::Pmi1)
        );
        assert_eq!(auto.resolve(env(&[("PMI_FD", "")])), None);
        assert_eq!(auto.resolve(env(&[])), None);
        assert_eq!(Method::Pmi2.resolve(env(&[])), Some(Method::Pmi2));
    }

    #[test]
    fn values_are_sized_and_distinct() {
        for bytes in [0, 1, 5, 64, 1000] {
            assert_eq!(value(3, 0, bytes).len(), bytes);
        }
        let v = value(7, 2, 200);
        assert!(v.starts_with("7.2."), "{v}");
        assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
        // Every rank's value differs from every other's, at any size that holds the prefix.
        let vals: std::collections::HashSet<String> = (0..500).map(|r| value(r, 0, 16)).collect();
        assert_eq!(vals.len(), 500);
        assert_ne!(value(0, 0, 64), value(0, 1, 64));
        assert_eq!(key(12, 3), "kauri.pmi.12.3");
    }

    /// A one-connection PMI-1 server on a socket pair: stores puts, answers gets from them
    /// (with `corrupt`, every value read back is wrong). Returns the client's descriptor.
    fn fake_pmi1(corrupt: bool) -> i32 {
        use std::io::{BufRead, BufReader, Write};
        use std::os::fd::IntoRawFd;
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut kvs = std::collections::HashMap::new();
            let mut out = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines() {
                let Ok(line) = line else { return };
                let field = |k: &str| {
                    line.split(' ')
                        .find_map(|w| w.strip_prefix(&format!("{k}=")).map(str::to_string))
                        .unwrap_or_default()
                };
                let reply = match field("cmd").as_str() {
                    "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1".into(),
                    "get_maxes" => {
                        "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024".into()
                    }
                    "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=k".into(),
                    "get_appnum" => "cmd=appnum rc=0 appnum=0".into(),
                    "put" => {
                        kvs.insert(field("key"), field("value"));
                        "cmd=put_result rc=0".into()
                    }
                    "barrier_in" => "cmd=barrier_out rc=0".into(),
                    "get" => match kvs.get(&field("key")) {
                        Some(v) if corrupt => format!("cmd=get_result rc=0 value={v}X"),
                        Some(v) => format!("cmd=get_result rc=0 value={v}"),
                        None => "cmd=get_result rc=-1 msg=not_found".into(),
                    },
                    "finalize" => "cmd=finalize_ack rc=0".into(),
                    _ => return,
                };
                if writeln!(out, "{reply}").is_err() {
                    return;
                }
            }
        });
        mine.into_raw_fd()
    }

    /// Through a real session: no server is one line; an exchange whose values come back
    /// right succeeds, one whose values come back wrong fails. (One test: they set the
    /// process's environment.)
    #[test]
    fn exchange_checks_what_it_reads_back() {
        let opts = |method| Options {
            method,
            library: LIBPMI2.into(),
            verbose: false,
            timing: false,
            op: Op::Exchange { size: 32, count: 3 },
        };
        for v in ["PMI_FD", "PMI_PORT", "PMIX_NAMESPACE", "PMI_ID"] {
            std::env::remove_var(v);
        }
        let e = go(&opts(Method::Auto), &Log::new(false)).unwrap_err();
        assert!(e.starts_with("no PMI server"), "{e}");
        assert!(!e.contains('\n'));
        let e = go(&opts(Method::Libpmi2), &Log::new(false)).unwrap_err();
        assert!(e.contains("neither PMI_FD nor PMI_PORT"), "{e}");
        std::env::set_var("PMI_RANK", "0");
        std::env::set_var("PMI_SIZE", "1");
        std::env::set_var("PMI_FD", fake_pmi1(false).to_string());
        go(&opts(Method::Auto), &Log::new(false)).expect("a good exchange failed");
        std::env::set_var("PMI_FD", fake_pmi1(true).to_string());
        // The failure was written (and the abort sent) inside: an empty error.
        assert_eq!(
            go(&opts(Method::Pmi1), &Log::new(false)),
            Err(String::new())
        );
        std::env::set_var("PMI_FD", fake_pmi1(false).to_string());
        let get = Options {
            op: Op::Get {
                key: "missing".into(),
            },
            ..opts(Method::Pmi1)
        };
        assert_eq!(go(&get, &Log::new(false)), Err(String::new()));
        for v in ["PMI_FD", "PMI_RANK", "PMI_SIZE"] {
            std::env::remove_var(v);
        }
    }

    #[test]
    fn a_missing_library_is_one_line() {
        let e = Libpmi2::load("/nonexistent/libpmi2.so.0", &Log::new(false))
            .err()
            .expect("loaded a library that does not exist");
        assert!(
            e.starts_with("cannot load /nonexistent/libpmi2.so.0"),
            "{e}"
        );
        let e = Libpmi2::load("libc.so.6", &Log::new(false))
            .err()
            .expect("libc is not a PMI-2 library");
        assert!(e.contains("has no PMI2_Init"), "{e}");
    }
}
