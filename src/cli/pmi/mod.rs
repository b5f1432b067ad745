//! `kauri pmi …`: a PMI client for administrators, like `flux pmi`: run it as every rank of a
//! job under any launcher (kauri, `mpiexec.hydra`, `srun --mpi=pmi2|pmix`) to see whether, and
//! how fast, that launcher's PMI works, through the method a program would use.
//!
//! One `Session` per method: `pmi1` and `pmi2` speak the wire protocol themselves (pmi-wire's
//! [`Client`](pmi_wire::client::Client), whose trace hook `-v` prints), `libpmi2` loads
//! Slurm's `libpmi2.so.0` at run time (`dlopen`) and `pmix` calls the OpenPMIx client library kauri links for its server
//! ([`crate::proto::pmix::ffi::PmixClient`]). For those two the wire is inside the library, so `-v`
//! prints each library call and its result instead. Each subcommand is the same walk through a
//! session: init, its puts, the fence, its gets, finalize, each phase timed.
//!
//! It owns no state but the process's: nothing here may touch a server's internals, only what
//! a rank program sees (its environment and its PMI connection).

mod error;
mod libpmi2;
mod log;
mod pmix;
mod wire;

pub use error::{PmiError, PmiUsageError, SessionError};
use libpmi2::Libpmi2;
use log::Log;
use pmi_wire::Version;
use pmix::Pmix;
use std::time::{Duration, Instant};
use wire::Wire;

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

fn number(opt: &str, v: Option<&String>) -> Result<usize, PmiUsageError> {
    let v = v.ok_or_else(|| PmiUsageError::NeedsValue(opt.to_string()))?;
    v.parse().map_err(|_| PmiUsageError::NotANumber {
        option: opt.to_string(),
        value: v.clone(),
    })
}

/// Parses the arguments after `kauri pmi`.
pub fn parse(args: &[String]) -> Result<Parsed, PmiUsageError> {
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
            return Err(PmiUsageError::UnknownOption(name.to_string()));
        }
        let value = |it: &mut std::slice::Iter<String>| -> Result<String, PmiUsageError> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| PmiUsageError::NeedsValue(name.to_string()))
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
                    m => return Err(PmiUsageError::BadMethod(m.to_string())),
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
                        return Err(PmiUsageError::ZeroCount);
                    } else {
                        *count = n;
                    }
                }
            }
            "get" if op.is_none() => {
                let key = it.next().ok_or(PmiUsageError::NoKey)?;
                op = Some(Op::Get { key: key.clone() });
            }
            other if other.starts_with('-') => {
                return Err(PmiUsageError::UnknownOption(other.to_string()))
            }
            other => return Err(PmiUsageError::Unexpected(other.to_string())),
        }
    }
    let op = op.ok_or(PmiUsageError::NoSubcommand)?;
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
        Err(PmiError::Said) => 1,
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
/// [`PmiError::Said`]; any other failure is for the caller to say.
fn go(opts: &Options, log: &Log) -> Result<(), PmiError> {
    let method = opts
        .method
        .resolve(|v| std::env::var(v).ok())
        .ok_or(PmiError::NoServer)?;
    let mut t = Times::default();
    let mut s = timed(&mut t.init, || open(method, opts, log))?;
    log.set_rank(s.rank());
    let (rank, size) = (s.rank(), s.size());
    // Past the last fence (and in `get`, which has none), nobody waits for this rank.
    let mut fenced = matches!(opts.op, Op::Get { .. });
    let summary = match walk(s.as_mut(), &opts.op, method, &mut t, &mut fenced) {
        Ok(summary) => summary,
        Err(e) => {
            give_up(s, rank, &e, fenced);
            return Err(PmiError::Said);
        }
    };
    timed(&mut t.finalize, || s.finalize())?;
    if opts.timing {
        show!("{}", timing_line(rank, &t));
    }
    if rank == 0 {
        if let Some(line) = result_line(&opts.op, method, size, &t, summary) {
            show!("{line}");
        }
    }
    Ok(())
}

/// The subcommand's walk through session `s` between init and finalize (its puts, the
/// fence, its gets), each phase timed into `t`; `fenced` is set once the last fence is
/// passed. Returns what an exchange moved, for rank 0's line.
fn walk(
    s: &mut dyn Session,
    op: &Op,
    method: Method,
    t: &mut Times,
    fenced: &mut bool,
) -> Result<Option<String>, PmiError> {
    match op {
        Op::Barrier => {
            timed(&mut t.fence, || s.fence())?;
            *fenced = true;
            Ok(None)
        }
        Op::Exchange { size: bytes, count } => {
            check_size(*bytes, s.max_value(), method)?;
            exchange(s, *bytes, *count, t, fenced).map(Some)
        }
        Op::Get { key } => {
            let v = timed(&mut t.get, || s.lookup(key))?
                .ok_or_else(|| PmiError::NotFound(key.clone()))?;
            show!("{v}");
            Ok(None)
        }
    }
}

/// Refuses a `--size` over the longest value `method` carries (`max`, if it has a limit).
fn check_size(bytes: usize, max: Option<usize>, method: Method) -> Result<(), PmiError> {
    match max {
        Some(max) if bytes > max => Err(PmiError::TooBig { bytes, max, method }),
        _ => Ok(()),
    }
}

/// `exchange`: puts this rank's `count` values of `bytes` bytes, fences, and reads back
/// everyone's; returns what was moved, as rank 0's line says it.
fn exchange(
    s: &mut dyn Session,
    bytes: usize,
    count: usize,
    t: &mut Times,
    fenced: &mut bool,
) -> Result<String, PmiError> {
    let (rank, size) = (s.rank(), s.size());
    timed(&mut t.put, || -> Result<(), SessionError> {
        for i in 0..count {
            s.put(&key(rank, i), &value(rank, i, bytes))?;
        }
        Ok(())
    })?;
    timed(&mut t.fence, || s.fence())?;
    *fenced = true;
    timed(&mut t.get, || read_back(s, size, bytes, count))?;
    Ok(format!(
        "{bytes} bytes x {count} key{} per rank ({} bytes in all)",
        if count == 1 { "" } else { "s" },
        bytes * count * size.max(0) as usize
    ))
}

/// Reads every rank's `count` values of `bytes` bytes and checks each is what that rank put.
fn read_back(s: &mut dyn Session, size: i64, bytes: usize, count: usize) -> Result<(), PmiError> {
    for r in 0..size {
        for i in 0..count {
            let k = key(r, i);
            check_read(&k, r, s.get(r, &k)?, &value(r, i, bytes))?;
        }
    }
    Ok(())
}

/// Checks what a get of key `k` from rank `r` returned (`got`) against what it put (`want`).
fn check_read(k: &str, r: i64, got: Option<String>, want: &str) -> Result<(), PmiError> {
    match got {
        None => Err(PmiError::GetNotFound(k.to_string())),
        Some(v) if v != want => Err(PmiError::Differs {
            key: k.to_string(),
            rank: r,
            got: v,
            want: want.to_string(),
        }),
        Some(_) => Ok(()),
    }
}

/// Says what failed, then ends the session: cleanly when nobody waits for this rank any
/// more (`fenced`), else with an abort.
fn give_up(s: Box<dyn Session>, rank: i64, e: &PmiError, fenced: bool) {
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
}

/// `--timing`'s line: this rank's time in each phase.
fn timing_line(rank: i64, t: &Times) -> String {
    format!(
        "kauri pmi: rank {rank}: init {}, put {}, fence {}, get {}, finalize {}",
        ms(t.init),
        ms(t.put),
        ms(t.fence),
        ms(t.get),
        ms(t.finalize)
    )
}

/// Rank 0's line for `barrier` and `exchange` (`summary`: what the exchange moved); `None`
/// for `get`, whose output is the value.
fn result_line(
    op: &Op,
    method: Method,
    size: i64,
    t: &Times,
    summary: Option<String>,
) -> Option<String> {
    match op {
        Op::Barrier => Some(format!(
            "kauri pmi barrier: {size} ranks, method {}, fence {}, total {}",
            method.name(),
            ms(t.fence),
            ms(t.total())
        )),
        Op::Exchange { .. } => Some(format!(
            "kauri pmi exchange: {size} ranks, method {}, {}, put {}, fence {}, get {}, total {}",
            method.name(),
            summary.unwrap_or_default(),
            ms(t.put),
            ms(t.fence),
            ms(t.get),
            ms(t.total())
        )),
        Op::Get { .. } => None,
    }
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
    fn put(&mut self, key: &str, value: &str) -> Result<(), SessionError>;
    /// The job-wide fence (a PMIx commit and fence).
    fn fence(&mut self) -> Result<(), SessionError>;
    /// Reads the pair `owner` put.
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, SessionError>;
    /// Reads a job attribute or key (`kauri pmi get`).
    fn lookup(&mut self, key: &str) -> Result<Option<String>, SessionError>;
    /// Ends the session.
    fn finalize(self: Box<Self>) -> Result<(), SessionError>;
    /// Asks the server to end the job (best effort: the caller exits 1 anyway).
    fn abort(self: Box<Self>, code: i32, msg: &str);
}

/// Opens a session through `method` (`auto` already resolved; as PMI-1 if not).
fn open(method: Method, opts: &Options, log: &Log) -> Result<Box<dyn Session>, SessionError> {
    Ok(match method {
        Method::Pmi1 | Method::Auto => Box::new(Wire::open(Version::V1, log)?),
        Method::Pmi2 => Box::new(Wire::open(Version::V2, log)?),
        Method::Libpmi2 => Box::new(Libpmi2::open(&opts.library, log)?),
        Method::Pmix => Box::new(Pmix::open(log)?),
    })
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
    fn reads_back_are_checked_and_sizes_bounded() {
        assert!(check_read("k", 2, Some("abc".into()), "abc").is_ok());
        let e = check_read("k", 2, None, "abc").unwrap_err();
        assert!(matches!(&e, PmiError::GetNotFound(k) if k == "k"), "{e:?}");
        assert_eq!(e.to_string(), "get k: not found");
        let e = check_read("k", 2, Some("abd".into()), "abc").unwrap_err();
        assert!(matches!(&e, PmiError::Differs { rank: 2, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "get k: the value differs from what rank 2 put: 3 bytes \"abd\", expected 3 bytes \"abc\""
        );
        let long = "x".repeat(50);
        let e = check_read("k", 1, Some(long.clone() + "y"), &long).unwrap_err();
        assert!(
            e.to_string().ends_with(&format!(
                "51 bytes \"{x}...\", expected 50 bytes \"{x}...\"",
                x = "x".repeat(40)
            )),
            "{e}"
        );
        assert!(check_size(1023, Some(1023), Method::Pmi2).is_ok());
        assert!(check_size(1 << 20, None, Method::Pmix).is_ok());
        let e = check_size(1024, Some(1023), Method::Libpmi2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--size 1024: more than the 1023 bytes a value may have with libpmi2"
        );
    }

    #[test]
    fn rank_zero_says_what_was_timed() {
        let t = Times {
            init: Duration::from_millis(1),
            put: Duration::from_millis(2),
            fence: Duration::from_millis(3),
            get: Duration::from_millis(4),
            finalize: Duration::from_millis(5),
        };
        assert_eq!(
            result_line(&Op::Barrier, Method::Pmi1, 4, &t, None).as_deref(),
            Some("kauri pmi barrier: 4 ranks, method pmi1, fence 3.000 ms, total 15.000 ms")
        );
        let ex = Op::Exchange { size: 8, count: 2 };
        let line = result_line(&ex, Method::Pmix, 2, &t, Some("S".into())).unwrap();
        assert_eq!(
            line,
            "kauri pmi exchange: 2 ranks, method pmix, S, put 2.000 ms, fence 3.000 ms, \
             get 4.000 ms, total 15.000 ms"
        );
        let get = Op::Get { key: "k".into() };
        assert_eq!(result_line(&get, Method::Pmi1, 2, &t, None), None);
        assert!(timing_line(3, &t).starts_with("kauri pmi: rank 3: init 1.000 ms, put 2.000 ms"));
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
        assert!(matches!(e, PmiError::NoServer), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with("no PMI server"), "{e}");
        assert!(!e.contains('\n'));
        let e = go(&opts(Method::Libpmi2), &Log::new(false)).unwrap_err();
        assert!(
            matches!(e, PmiError::Session(SessionError::NoLibpmi2Server)),
            "{e:?}"
        );
        assert!(e.to_string().contains("neither PMI_FD nor PMI_PORT"), "{e}");
        std::env::set_var("PMI_RANK", "0");
        std::env::set_var("PMI_SIZE", "1");
        std::env::set_var("PMI_FD", fake_pmi1(false).to_string());
        go(&opts(Method::Auto), &Log::new(false)).expect("a good exchange failed");
        std::env::set_var("PMI_FD", fake_pmi1(true).to_string());
        // The failure was written (and the abort sent) inside: said already.
        assert!(matches!(
            go(&opts(Method::Pmi1), &Log::new(false)),
            Err(PmiError::Said)
        ));
        std::env::set_var("PMI_FD", fake_pmi1(false).to_string());
        let get = Options {
            op: Op::Get {
                key: "missing".into(),
            },
            ..opts(Method::Pmi1)
        };
        assert!(matches!(go(&get, &Log::new(false)), Err(PmiError::Said)));
        for v in ["PMI_FD", "PMI_RANK", "PMI_SIZE"] {
            std::env::remove_var(v);
        }
    }
}
