//! The command line: Hydra's `mpiexec` syntax, parsed into a [`JobSpec`].
//!
//! Hydra options are single-dash words (`-genv`, `-ppn`); the GNU spellings `--genv` and
//! `--np=4` are accepted too. Options before a segment's program apply to that segment
//! (`-n`, `-env*`) or to the whole job (`-genv*`, `-hosts`, `-f`, `-ppn`, `-l`, …); `:` starts
//! the next MPMD segment; `-configfile` reads segments one per line. Everything after a
//! segment's program, up to `:`, is the program's own arguments.

pub mod agent;
pub mod doc;
mod habits;
pub mod info;
pub mod kvs;
pub mod nameserver;
pub mod pmi;
pub mod restarts;
pub mod status;
mod words;

use crate::console::quoted;
use crate::launch::hydra_env::HydraEnv;
use crate::plan::gpus::{GpuAsk, GpuBind, PerProc};
use crate::plan::job::{
    too_many_ranks, AppSpec, EnvPolicy, HostSpec, JobSpec, PmiChoice, RANKS_MAX,
};
use crate::tree::profile::ProfileFormat;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use words::{config_words, normalize, text, text_var, Words};

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run a job.
    Run(Box<JobSpec>),
    /// Print the usage text.
    Help,
    /// Print the variables ranks get, and the Hydra variables kauri reads.
    HelpEnv,
    /// Print the version.
    Version,
    /// Print a manual page in roff (`--help-man [PAGE]`): the page's name.
    Man(&'static str),
    /// Print the completion script for a shell (`--completions SHELL`).
    Completions(String),
    /// Print what this kauri serves and was built with (`-info`); `json`: as JSON (`--json`).
    Info {
        /// `-info --json`.
        json: bool,
    },
}

pub use crate::plan::job::UsageError;

fn err<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// The text of `kauri --help-env`, rendered from [`crate::cli::doc::KAURI`].
pub fn help_env() -> String {
    crate::cli::doc::blocks(crate::cli::doc::KAURI.environment_more)
}

/// The usage text of `kauri -h`, rendered from [`crate::cli::doc::KAURI`].
pub fn help() -> String {
    crate::cli::doc::help(&crate::cli::doc::KAURI)
}

/// One segment being read: its program and options, and where it comes from.
struct Segment {
    app: AppSpec,
    /// `-n` was given.
    n_given: bool,
    /// The job's first segment: its `-wdir` is the job's.
    first: bool,
    /// It is on the command line, not in a configfile: an option given twice is an error.
    on_command_line: bool,
}

impl Segment {
    /// The segment's number of processes, given by `name` (`-n`, `-np`, `-c`): once only, as
    /// Hydra refuses a second (`-n 2 -l -n 3` is a typo, not a request for 3).
    fn set_nprocs(&mut self, name: &str, n: usize) -> Result<(), UsageError> {
        if self.n_given {
            return err(format!(
                "the number of processes is given twice ({name} {n}): give -n once per segment"
            ));
        }
        self.app.nprocs = n;
        self.n_given = true;
        Ok(())
    }
}

struct Parser {
    spec: JobSpec,
    segments: Vec<AppSpec>,
    configfile: Option<PathBuf>,
    n_given: Vec<bool>,
    profile_given: bool,
    /// `-map-by` a topology object.
    map_kind: Option<crate::plan::binding::Kind>,
    /// `-bind-to` was given (`none` included).
    bind_given: bool,
    /// `-genvall`, `-genvnone` or `-genvlist` was given (it wins over `HYDRA_ENV`).
    genv_policy_given: bool,
    /// `-auto-cleanup` was given (it cannot be combined with `-with-ft`).
    auto_cleanup_given: bool,
    /// `--timeout` was given (it wins over `MPIEXEC_TIMEOUT`).
    timeout_given: bool,
}

/// Parses `args` (without the program name): the bytes the OS gave kauri. Options are
/// text; the program, its arguments, `-wdir` and the values of `-env`/`-genv` stay the bytes
/// they are, UTF-8 or not.
pub fn parse<S: AsRef<OsStr>>(args: &[S]) -> Result<Command, UsageError> {
    let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_os_string()).collect();
    let mut p = Parser::new();
    if args.is_empty() {
        return err("no program given (try kauri -h)");
    }
    for part in args.split(|a| a == ":") {
        if let Some(cmd) = p.segment(part, true)? {
            // `-h` is the help alone: with a job around it, it is a typo (Open MPI's hosts
            // are `-H`), and printing the help would run nothing and exit 0.
            if cmd == Command::Help && args.len() > 1 {
                return err(
                    "-h shows the help and takes nothing else (hosts are -hosts or -H HOSTS)",
                );
            }
            return Ok(cmd);
        }
    }
    p.read_configfile()?;
    p.add_singleton()?;
    if p.segments.is_empty() {
        return err("no program given (try kauri -h)");
    }
    p.fault_tolerance()?;
    p.environment()?;
    p.bind_to_mapped_objects();
    p.profile_from_env()?;
    p.finish()
}

impl Parser {
    /// A parser with nothing read yet: the job's defaults.
    fn new() -> Parser {
        Parser {
            spec: JobSpec::default(),
            segments: Vec::new(),
            configfile: None,
            n_given: Vec::new(),
            profile_given: false,
            map_kind: None,
            bind_given: false,
            genv_policy_given: false,
            auto_cleanup_given: false,
            timeout_given: false,
        }
    }

    /// Reads the segments of `-configfile`, one per line (`#` starts a comment), if one was
    /// given; it cannot be combined with programs on the command line.
    fn read_configfile(&mut self) -> Result<(), UsageError> {
        let Some(file) = self.configfile.take() else {
            return Ok(());
        };
        if !self.segments.is_empty() {
            return err("-configfile cannot be combined with programs on the command line");
        }
        // Bytes, as a command line: a program or an argument need not be UTF-8.
        let bytes = std::fs::read(&file)
            .map_err(|e| UsageError(format!("cannot read configfile {}: {e}", file.display())))?;
        for line in bytes.split(|&b| b == b'\n') {
            let words = config_words(line);
            if words.is_empty() {
                continue;
            }
            for part in words.split(|a| a == ":") {
                self.segment(part, false)?;
            }
        }
        Ok(())
    }

    /// With `-pmi_args`, the one segment: the program already running, as one rank.
    fn add_singleton(&mut self) -> Result<(), UsageError> {
        let Some(s) = &self.spec.singleton else {
            return Ok(());
        };
        if !self.segments.is_empty() {
            return err("-pmi_args serves a program that is already running: give no program");
        }
        self.segments.push(AppSpec {
            nprocs: 1,
            program: format!("singleton {}", s.pid).into(),
            args: Vec::new(),
            env: Vec::new(),
            env_policy: None,
            wdir: None,
        });
        self.n_given.push(true);
        Ok(())
    }

    /// A fault-tolerant job (`-with-ft`) goes on when a process fails: no auto-cleanup.
    fn fault_tolerance(&mut self) -> Result<(), UsageError> {
        if self.spec.fault_tolerant {
            if self.auto_cleanup_given {
                return err(
                    "-auto-cleanup cannot be combined with -with-ft: a fault-tolerant job \
                        goes on when a process fails",
                );
            }
            self.spec.auto_cleanup = false;
        }
        Ok(())
    }

    /// Fills in what the command line left to the environment: Hydra's variables,
    /// `KAURI_USIZE`, `MPIEXEC_TIMEOUT`, `HYDRA_IFACE`; checks kauri's own numbers.
    fn environment(&mut self) -> Result<(), UsageError> {
        // The variables read here are text: one set to bytes that are not UTF-8 is an error,
        // not taken for unset.
        let bad = std::cell::RefCell::new(None);
        let var = |k: &str| text_var(k, &bad);
        for k in [
            "KAURI_USIZE",
            "MPIEXEC_TIMEOUT",
            "HYDRA_IFACE",
            "KAURI_PROFILE",
        ] {
            var(k);
        }
        let hydra = HydraEnv::read(&var);
        let knobs = check_env_knobs(&var);
        if let Some(e) = bad.take() {
            return err(e);
        }
        let hydra = hydra.map_err(|e| UsageError(e.to_string()))?;
        apply_hydra_env(&mut self.spec, self.genv_policy_given, hydra)?;
        if self.spec.universe_size.is_none() {
            if let Ok(v) = std::env::var("KAURI_USIZE") {
                if !v.trim().is_empty() {
                    self.spec.universe_size = Some(universe_size(v.trim(), "KAURI_USIZE")?);
                }
            }
        }
        let from_env = habits::timeout_from_env()?;
        if !self.timeout_given {
            self.spec.timeout = from_env;
        }
        knobs?;
        if self.spec.iface.is_none() {
            self.spec.iface = std::env::var("HYDRA_IFACE")
                .ok()
                .filter(|v| !v.trim().is_empty());
        }
        // One attempt of a job that restarts, run by the kauri that supervises them.
        if let Ok(v) = std::env::var(crate::plan::job::Attempt::VAR) {
            let attempt = crate::plan::job::Attempt::from_var(&v).ok_or_else(|| {
                UsageError(format!(
                    "{}={}: not an attempt kauri described",
                    crate::plan::job::Attempt::VAR,
                    quoted(&v)
                ))
            })?;
            self.spec.attempt = Some(attempt);
        }
        Ok(())
    }

    /// `-map-by OBJECT`: the ranks are bound, to those objects unless `-bind-to` says otherwise.
    fn bind_to_mapped_objects(&mut self) {
        if let Some(kind) = self.map_kind {
            match (&mut self.spec.binding, self.bind_given) {
                (Some(b), _) => b.map = Some(kind),
                // -map-by OBJECT alone binds to the objects it maps to; -bind-to none does not.
                (None, false) => {
                    self.spec.binding = Some(crate::plan::binding::Binding {
                        kind,
                        count: 1,
                        map: None,
                    })
                }
                (None, true) => {}
            }
        }
    }

    /// `KAURI_PROFILE`, unless `--profile` was given.
    fn profile_from_env(&mut self) -> Result<(), UsageError> {
        if !self.profile_given {
            if let Ok(v) = std::env::var("KAURI_PROFILE") {
                self.spec.profile = ProfileFormat::parse(&v)
                    .map_err(|e| UsageError(format!("KAURI_PROFILE: {e}")))?;
            }
        }
        Ok(())
    }

    /// The job: each segment without `-n` gets [`default_nprocs`]; at most [`RANKS_MAX`]
    /// processes in all.
    fn finish(mut self) -> Result<Command, UsageError> {
        let default_n = default_nprocs(self.spec.ppn, &self.spec.hosts);
        for (app, given) in self.segments.iter_mut().zip(&self.n_given) {
            if !given {
                app.nprocs = default_n;
            }
        }
        self.spec.apps = self.segments;
        if self.spec.size() > RANKS_MAX {
            return err(too_many_ranks(&format!(
                "{} processes in all",
                self.spec.size()
            )));
        }
        Ok(Command::Run(Box::new(self.spec)))
    }
}

/// The processes of a segment without `-n`: the hosts' slots (`ppn` for each name, if given:
/// a name given twice is one host).
fn default_nprocs(ppn: Option<usize>, hosts: &[HostSpec]) -> usize {
    // A segment without -n gets the hosts' slots; with no host named, that is decided later,
    // once an allocation's hosts are known (0 stands for "not given").
    let names = || {
        let names: std::collections::HashSet<&str> =
            hosts.iter().map(|h| h.name.as_str()).collect();
        names.len()
    };
    match (ppn, hosts.len()) {
        (Some(ppn), 0) => ppn,
        (Some(ppn), _) => ppn.saturating_mul(names()),
        (None, 0) => 0,
        (None, _) => hosts
            .iter()
            .fold(0usize, |n, h| n.saturating_add(h.slots))
            .max(1),
    }
}

/// Fills in what the command line left to Hydra's environment (see [`crate::launch::hydra_env`]):
/// the hosts (not for a singleton, which runs here), the launcher and its program, the
/// inheritance policy (`genv_given`: `-genvall`, `-genvnone` or `-genvlist` was given), the
/// output prefix and the port range.
fn apply_hydra_env(spec: &mut JobSpec, genv_given: bool, env: HydraEnv) -> Result<(), UsageError> {
    if spec.hosts.is_empty() && spec.singleton.is_none() {
        if let Some((var, file)) = &env.host_file {
            spec.hosts = read_hostfile(Path::new(file))
                .map_err(|e| UsageError(format!("{var}: {}", e.0)))?;
        }
    }
    if spec.launcher.is_none() {
        spec.launcher = env.launcher;
    }
    if spec.launcher_exec.is_none() {
        spec.launcher_exec = env.launcher_exec;
    }
    if !genv_given {
        if let Some(policy) = env.env_policy {
            spec.env_policy = policy;
        }
    }
    spec.label |= env.label;
    spec.port_range = env.port_range;
    Ok(())
}

pub use crate::plan::knobs::{parse_secs, SECONDS_VARS, SECS_MAX};

/// Checks the numbers in kauri's own variables (`var(name)` reads one): each time of
/// [`SECONDS_VARS`], `KAURI_SPAWN_MAX` and `KAURI_TREE_WIDTH`; one line naming the variable
/// and its range for the first that is wrong.
pub fn check_env_knobs(var: &dyn Fn(&str) -> Option<String>) -> Result<(), UsageError> {
    for &name in SECONDS_VARS {
        if let Some(v) = var(name).filter(|v| !v.trim().is_empty()) {
            if parse_secs(&v).is_none() {
                return err(format!(
                    "{name}={}: not a time from 0 to {SECS_MAX} seconds",
                    quoted(&v)
                ));
            }
        }
    }
    if let Some(v) = var("KAURI_SPAWN_MAX").filter(|v| !v.trim().is_empty()) {
        match v.trim().parse::<u64>() {
            Ok(n) if n > 0 && n <= RANKS_MAX as u64 => {}
            _ => {
                return err(format!(
                    "KAURI_SPAWN_MAX={}: not a number of processes from 1 to {RANKS_MAX}",
                    quoted(&v)
                ))
            }
        }
    }
    if let Some(v) = var("KAURI_TREE_WIDTH").filter(|v| !v.trim().is_empty()) {
        let v = v.trim();
        if !(v == "flat" || v == "cost" || v.parse::<u32>().is_ok()) {
            return err(format!(
                "KAURI_TREE_WIDTH={}: a number (0 to {}), flat or cost",
                quoted(v),
                u32::MAX
            ));
        }
    }
    Ok(())
}

impl Parser {
    /// Parses one segment. Returns `Some` for `-h`/`--version`, which end parsing.
    fn segment(
        &mut self,
        words: &[OsString],
        allow_config: bool,
    ) -> Result<Option<Command>, UsageError> {
        let mut seg = Segment {
            app: AppSpec::default(),
            n_given: false,
            first: self.segments.is_empty(),
            on_command_line: allow_config,
        };
        let mut w = Words {
            it: words.iter(),
            inline: None,
        };
        while let Some(word) = w.it.next() {
            if !word.as_bytes().starts_with(b"-") || word == "-" {
                seg.app.program = word.clone();
                seg.app.args = w.it.by_ref().cloned().collect();
                break;
            }
            let (name, inline) = normalize(word);
            // The option table is the one list of names: what it lacks is unknown.
            if crate::cli::doc::KAURI.find(&name).is_none() {
                return err(format!(
                    "unknown option {} (try kauri -h)",
                    crate::console::clip(&word.to_string_lossy())
                ));
            }
            w.inline = inline;
            self.genv_policy_given |=
                matches!(name.as_str(), "-genvall" | "-genvnone" | "-genvlist");
            if let Some(cmd) = command_option(&name, &mut w)? {
                return Ok(Some(cmd));
            }
            let known = self.segment_option(&name, &mut w, &mut seg)?
                || self.genv_option(&name, &mut w)?
                || self.host_option(&name, &mut w)?
                || self.binding_option(&name, &mut w)?
                || self.output_option(&name, &mut w, &seg)?
                || self.pmi_option(&name, &mut w)?
                || self.run_option(&name, &mut w, &seg)?
                || self.habit_option(&name, &mut w, &mut seg)?;
            if !known {
                return err(format!(
                    "unknown option {} (try kauri -h)",
                    crate::console::clip(&word.to_string_lossy())
                ));
            }
        }
        self.end_segment(seg, words)
    }

    /// Keeps a segment read to its end, which must have named a program (but for a
    /// command line that only names a configfile, or serves a singleton).
    fn end_segment(
        &mut self,
        seg: Segment,
        words: &[OsString],
    ) -> Result<Option<Command>, UsageError> {
        if seg.app.program.is_empty() {
            if (self.configfile.is_some() && seg.on_command_line) || self.spec.singleton.is_some() {
                return Ok(None);
            }
            return err(match words.last() {
                Some(w) => format!("no program after {}", w.to_string_lossy()),
                None => "empty segment between ':'".into(),
            });
        }
        self.segments.push(seg.app);
        self.n_given.push(seg.n_given);
        Ok(None)
    }

    /// The options of one segment: `-n`, `-env*`, `-wdir` (the job's, in the first segment).
    /// `false` for another name.
    fn segment_option(
        &mut self,
        name: &str,
        w: &mut Words,
        seg: &mut Segment,
    ) -> Result<bool, UsageError> {
        match name {
            "-n" | "-np" => seg.set_nprocs(name, nprocs(name, &w.value(name)?)?)?,
            "-env" => {
                let k = w.value_os("-env")?;
                let v = w
                    .next_word()
                    .ok_or_else(|| UsageError("-env needs NAME VALUE".into()))?;
                seg.app.env.push((k, v));
            }
            "-envall" => seg.app.env_policy = Some(EnvPolicy::All),
            "-envnone" => seg.app.env_policy = Some(EnvPolicy::None),
            "-envlist" => seg.app.env_policy = Some(EnvPolicy::List(list(&w.value(name)?))),
            "-wdir" => {
                let d = PathBuf::from(w.value_os(name)?);
                if seg.first {
                    self.spec.wdir = Some(d);
                } else {
                    seg.app.wdir = Some(d);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The environment of every rank: `-genv`, `-genvall`, `-genvnone`, `-genvlist`.
    fn genv_option(&mut self, name: &str, w: &mut Words) -> Result<bool, UsageError> {
        match name {
            "-genv" => {
                let k = w.value_os("-genv")?;
                let v = w
                    .next_word()
                    .ok_or_else(|| UsageError("-genv needs NAME VALUE".into()))?;
                self.spec.genv.push((k, v));
            }
            "-genvall" => self.spec.env_policy = EnvPolicy::All,
            "-genvnone" => self.spec.env_policy = EnvPolicy::None,
            "-genvlist" => self.spec.env_policy = EnvPolicy::List(list(&w.value(name)?)),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The hosts and how they are reached: `-hosts`, `-f`, `-ppn`, `-launcher`,
    /// `-launcher-exec`, `-iface`, `-tree-width`.
    fn host_option(&mut self, name: &str, w: &mut Words) -> Result<bool, UsageError> {
        match name {
            "-hosts" | "-host" | "-H" => self.spec.hosts.extend(parse_hosts(&w.value(name)?)?),
            "-f" | "-hostfile" | "-machinefile" => {
                let f = w.value_os(name)?;
                self.spec.hosts.extend(read_hostfile(Path::new(&f))?);
            }
            "-ppn" => {
                self.spec.mapping_asked = true;
                self.spec.ppn = Some(ppn(&w.value(name)?)?);
            }
            "-launcher" | "-bootstrap" => self.spec.launcher = Some(w.value(name)?),
            "-launcher-exec" | "-bootstrap-exec" => self.spec.launcher_exec = Some(w.value(name)?),
            "-iface" => self.spec.iface = Some(w.value(name)?),
            "-tree-width" => {
                let v = w.value(name)?;
                self.spec.cost_tree = v == "cost";
                self.spec.tree_width = Some(tree_width(&v)?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The job's GPU options, made when the first is read: each rank's share of its host's
    /// GPUs (`auto` unless `-gpus-per-proc` says) and which (`closest` unless `-gpu-bind`
    /// says).
    fn gpu_ask(&mut self) -> &mut GpuAsk {
        self.spec.gpus.get_or_insert(GpuAsk {
            per: PerProc::Auto,
            bind: GpuBind::Closest,
        })
    }

    /// Where ranks go and what they and their GPUs are bound to: `-map-by`, `-bind-to`,
    /// `-report-bindings`, `-gpus-per-proc`, `-gpu-bind`.
    fn binding_option(&mut self, name: &str, w: &mut Words) -> Result<bool, UsageError> {
        match name {
            "-map-by" => {
                self.spec.mapping_asked = true;
                let v = w.value(name)?;
                if self.map_by_ppr(&v)?.is_some() {
                    return Ok(true);
                }
                match v.as_str() {
                    "node" | "host" => self.spec.map_by_node = true,
                    "slot" => self.spec.map_by_node = false,
                    k => match crate::plan::binding::Kind::parse(k) {
                        // Ranks dealt over the host's objects of this kind: binds them
                        // (to those objects unless -bind-to says otherwise).
                        Some(kind) => self.map_kind = Some(kind),
                        None => {
                            return err(format!(
                                "-map-by {v:?}: use node or slot (hosts), or hwthread, \
                                 core, l1cache, l2cache, l3cache, socket or numa"
                            ))
                        }
                    },
                }
            }
            "-bind-to" | "-binding" => {
                let v = w.value(name)?;
                self.bind_given = true;
                self.spec.binding = crate::plan::binding::Binding::parse(&v)
                    .map_err(|e| UsageError(e.to_string()))?;
            }
            "-report-bindings" => self.spec.report_bindings = true,
            "-gpus-per-proc" => {
                let per = PerProc::parse(&w.value(name)?).map_err(|e| UsageError(e.to_string()))?;
                self.gpu_ask().per = per;
            }
            "-gpu-bind" => {
                let bind =
                    GpuBind::parse(&w.value(name)?).map_err(|e| UsageError(e.to_string()))?;
                self.gpu_ask().bind = bind;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The ranks' output: `-l`, `-prepend-pattern`, `-outfile-pattern`, `-errfile-pattern`,
    /// `-output-from`, `--no-pty`. On the command line each may be given once (and one line prefix); in a
    /// configfile, what the command line set wins.
    fn output_option(
        &mut self,
        name: &str,
        w: &mut Words,
        seg: &Segment,
    ) -> Result<bool, UsageError> {
        let on_command_line = seg.on_command_line;
        let out = &mut self.spec.output;
        match name {
            "-l" | "-prepend-rank" => {
                if out.prepend.is_some() {
                    if on_command_line {
                        return err(PREFIX_TWICE);
                    }
                } else {
                    self.spec.label = true
                }
            }
            "-prepend-pattern" => {
                let p = pattern(name, &w.value(name)?)?;
                if self.spec.label || out.prepend.is_some() {
                    if on_command_line {
                        return err(PREFIX_TWICE);
                    }
                } else {
                    out.prepend = Some(p);
                }
            }
            "-no-pty" => out.no_pty = true,
            "-outfile-pattern" | "-outfile" => {
                let p = pattern(name, &w.value(name)?)?;
                once(&mut out.outfile, p, name, on_command_line)?;
            }
            "-errfile-pattern" => {
                let p = pattern(name, &w.value(name)?)?;
                once(&mut out.errfile, p, name, on_command_line)?;
            }
            "-output-from" => {
                let v = w.value(name)?;
                let r = v
                    .parse::<usize>()
                    .map_err(|_| UsageError(format!("-output-from {v:?}: not a rank")))?;
                once(&mut out.output_from, r, name, on_command_line)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What the ranks' PMI is: `-pmi-port`, `-pmi`, `-usize`, `-pmi_args`, `-nameserver`.
    fn pmi_option(&mut self, name: &str, w: &mut Words) -> Result<bool, UsageError> {
        match name {
            "-pmi-port" => self.spec.pmi_port = true,
            "-pmi" | "-mpi" => {
                let v = w.value(name)?;
                self.spec.pmi = PmiChoice::parse(&v).ok_or_else(|| {
                    UsageError(format!("--pmi {v:?}: use auto, pmi1, pmi2 or pmix"))
                })?;
            }
            "-usize" => {
                let v = w.value(name)?;
                self.spec.universe_size = Some(universe_size(&v, "-usize")?);
            }
            "-pmi_args" => {
                let mut four = Vec::new();
                for _ in 0..4 {
                    four.push(w.value("-pmi_args PORT INTERFACE KEY PID")?);
                }
                self.spec.singleton = Some(singleton(&four)?);
            }
            "-nameserver" => self.spec.nameserver = Some(w.value(name)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// How the job runs and reports: `-configfile`, `--profile`, `-ml-env`, `-timeout-stacks`,
    /// `-auto-cleanup`, `-disable-auto-cleanup`, `-with-ft`, `-v`.
    fn run_option(&mut self, name: &str, w: &mut Words, seg: &Segment) -> Result<bool, UsageError> {
        match name {
            "-configfile" => {
                if !seg.on_command_line {
                    return err("-configfile inside a configfile");
                }
                self.configfile = Some(PathBuf::from(w.value_os(name)?));
            }
            "-profile" => {
                // Only an inline value (`--profile=json`): a separate word would be the
                // program.
                let v = text(name, w.inline.take().unwrap_or_else(|| "text".into()))?;
                self.spec.profile =
                    ProfileFormat::parse(&v).map_err(|e| UsageError(format!("--profile: {e}")))?;
                self.profile_given = true;
            }
            "-ml-env" => self.spec.ml_env = true,
            "-max-restarts" | "-max_restarts" => {
                let v = w.value(name)?;
                self.spec.max_restarts = v.trim().parse().map_err(|_| {
                    UsageError(format!("{name} {}: not a count of restarts", quoted(&v)))
                })?;
            }
            "-timeout-stacks" | "-get-stack-traces" => self.spec.timeout_stacks = true,
            "-disable-auto-cleanup" => self.spec.auto_cleanup = false,
            "-auto-cleanup" => {
                self.spec.auto_cleanup = true;
                self.auto_cleanup_given = true;
            }
            "-with-ft" => self.spec.fault_tolerant = with_ft(&w.value(name)?)?,
            "-v" | "-verbose" => self.spec.verbose += 1,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The options that are a command of their own rather than part of a job (`-h`, `--version`,
/// `--help-env`, `--help-man`, `-info`, `--completions`); `None` for another name.
fn command_option(name: &str, w: &mut Words) -> Result<Option<Command>, UsageError> {
    Ok(Some(match name {
        "-h" | "-help" => Command::Help,
        "-version" | "-V" => Command::Version,
        "-help-env" => Command::HelpEnv,
        "-help-man" => {
            let page = match w.inline.take() {
                Some(v) => v,
                None => w.next_word().unwrap_or_else(|| "kauri".into()),
            };
            man_page(&text(name, page)?)?
        }
        "-info" => {
            let rest: Vec<String> = w.it.by_ref().map(|w| normalize(w).0).collect();
            match rest.as_slice() {
                [] => Command::Info { json: false },
                [j] if j == "-json" => Command::Info { json: true },
                _ => return err("-info takes only --json"),
            }
        }
        "-json" => return err("--json goes with -info: kauri -info --json"),
        "-completions" => {
            let shell = w.value(name)?;
            if !crate::cli::doc::complete::SHELLS.contains(&shell.as_str()) {
                return err(format!("--completions {shell:?}: use bash, zsh or fish"));
            }
            Command::Completions(shell)
        }
        _ => return Ok(None),
    }))
}

/// `--help-man NAME`: the page of that name (`kvs` for `kauri-kvs`).
fn man_page(name: &str) -> Result<Command, UsageError> {
    match crate::cli::doc::page(name) {
        Some(page) => Ok(Command::Man(page.name)),
        None => {
            let names: Vec<&str> = crate::cli::doc::pages().iter().map(|p| p.name).collect();
            err(format!(
                "--help-man {name:?}: no such page (pages: {})",
                names.join(", ")
            ))
        }
    }
}

/// The value `v` of `-n` (or `-np`, `name`): from 1 to [`RANKS_MAX`] processes.
fn nprocs(name: &str, v: &str) -> Result<usize, UsageError> {
    match v.parse::<u128>() {
        Ok(0) => err(format!("{name} 0: a job needs at least one process")),
        Ok(n) if n > RANKS_MAX as u128 => err(too_many_ranks(&format!("{name} {v}"))),
        Ok(n) => Ok(n as usize),
        Err(_) => err(format!("{name} {v:?}: not a number of processes")),
    }
}

/// The value of `-ppn`: from 1 to [`RANKS_MAX`] processes per host.
fn ppn(v: &str) -> Result<usize, UsageError> {
    match v.parse::<u128>() {
        Ok(n) if n > RANKS_MAX as u128 => err(too_many_ranks(&format!("-ppn {v}"))),
        Ok(n) if n > 0 => Ok(n as usize),
        _ => err(format!("-ppn {v:?}: not a positive number")),
    }
}

/// The value of `-tree-width`: a number, or `flat` or `cost` (0: the tree is built otherwise).
fn tree_width(v: &str) -> Result<usize, UsageError> {
    if v == "flat" || v == "cost" {
        return Ok(0);
    }
    v.parse()
        .map_err(|_| UsageError(format!("-tree-width {v:?}: a number, flat or cost")))
}

/// The four words of `-pmi_args PORT INTERFACE KEY PID`: the program already running that
/// kauri serves as a singleton (a port from 1, a pid above 1).
fn singleton(four: &[String]) -> Result<crate::plan::job::Singleton, UsageError> {
    let port = four[0].parse::<u16>().ok().filter(|&p| p > 0);
    let pid = four[3].parse::<u32>().ok().filter(|&p| p > 1);
    match (port, pid) {
        (Some(port), Some(pid)) => Ok(crate::plan::job::Singleton {
            port,
            interface: four[1].clone(),
            key: four[2].clone(),
            pid,
        }),
        _ => err(format!(
            "-pmi_args {}: expected PORT INTERFACE KEY PID",
            four.join(" ")
        )),
    }
}

/// The error for a line prefix given twice.
const PREFIX_TWICE: &str =
    "-prepend-pattern and -l (-prepend-rank) both set the line prefix: give one of them";

/// Parses the pattern of option `name`.
fn pattern(name: &str, v: &str) -> Result<crate::plan::output::Pattern, UsageError> {
    crate::plan::output::Pattern::parse(v).map_err(|e| UsageError(format!("{name}: {e}")))
}

/// Sets an option that may be given once: twice on the command line is an error (as in
/// Hydra); in a configfile (`on_command_line` false), a value already set wins.
fn once<T>(
    slot: &mut Option<T>,
    v: T,
    name: &str,
    on_command_line: bool,
) -> Result<(), UsageError> {
    match slot {
        Some(_) if on_command_line => err(format!("{name} given twice")),
        Some(_) => Ok(()),
        None => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// Parses a universe size: a positive number, `SYSTEM` (this machine's cores) or `INFINITE`.
/// `-with-ft VALUE`, with the values PRRTE's `--with-ft` takes: `ulfm`, `mpi`, `yes`, `true`
/// or `1` turn fault tolerance on; `no`, `false` or `0` leave it off (case ignored).
fn with_ft(v: &str) -> Result<bool, UsageError> {
    match v.to_ascii_lowercase().as_str() {
        "ulfm" | "mpi" | "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => err(format!(
            "-with-ft {}: expected ulfm (or mpi, yes, true, 1) or no (false, 0)",
            crate::console::clip(v)
        )),
    }
}

fn universe_size(v: &str, what: &str) -> Result<i64, UsageError> {
    match v {
        "INFINITE" | "infinite" => Ok(-1),
        "SYSTEM" | "system" => {
            Ok(std::thread::available_parallelism().map_or(1, |n| n.get() as i64))
        }
        _ => v
            .parse()
            .ok()
            .filter(|n: &i64| *n >= 1 || *n == -1)
            .ok_or_else(|| {
                UsageError(format!(
                    "{what} {v:?}: a positive number, SYSTEM or INFINITE"
                ))
            }),
    }
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub use crate::plan::hosts::{parse_hosts, read_hostfile, HOST_NAME_MAX};

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &str) -> JobSpec {
        let a: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        match parse(&a).unwrap() {
            Command::Run(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn protocol_choice() {
        assert_eq!(run("-n 2 a").pmi, PmiChoice::Auto);
        assert_eq!(run("--pmi=pmix -n 2 a").pmi, PmiChoice::Pmix);
        assert_eq!(run("-pmi pmi2 -n 2 a").pmi, PmiChoice::Pmi2);
        assert_eq!(run("--mpi=pmi1 -n 2 a").pmi, PmiChoice::Pmi1);
        let bad: Vec<String> = ["--pmi=pmi3", "a"].iter().map(|s| s.to_string()).collect();
        assert!(parse(&bad)
            .unwrap_err()
            .0
            .contains("auto, pmi1, pmi2 or pmix"));
    }

    fn fails(args: &str) -> String {
        let a: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        parse(&a).unwrap_err().0
    }

    #[test]
    fn with_ft_takes_prrtes_values_and_implies_no_auto_cleanup() {
        for v in ["ulfm", "ULFM", "mpi", "yes", "true", "1"] {
            let s = run(&format!("-with-ft {v} -n 2 a"));
            assert!(s.fault_tolerant, "{v}");
            assert!(!s.auto_cleanup, "{v}");
        }
        let s = run("--with-ft=ulfm -n 2 a");
        assert!(s.fault_tolerant && !s.auto_cleanup);
        for v in ["no", "false", "0"] {
            let s = run(&format!("-with-ft {v} -n 2 a"));
            assert!(!s.fault_tolerant && s.auto_cleanup, "{v}");
        }
        let s = run("-with-ft ulfm -with-ft no -n 2 a");
        assert!(!s.fault_tolerant && s.auto_cleanup, "the last one counts");
        assert!(fails("-with-ft maybe -n 2 a").contains("-with-ft maybe: expected ulfm"));
        assert!(fails("-with-ft ulfm -auto-cleanup -n 2 a").contains("cannot be combined"));
        assert!(run("-with-ft ulfm -disable-auto-cleanup -n 2 a").fault_tolerant);
    }

    #[test]
    fn process_counts_are_bounded() {
        let limit = "more than the 16777216 processes a job may have";
        for args in [
            "-n 18446744073709551616 a",
            "-n 16777217 a",
            "-n 16777216 a : -n 1 b",
            "-ppn 16777217 a",
            "-ppn 16777216 -hosts a,b x",
            "-hosts a:16777217 x",
            "-hosts a:16777216,b:1 x",
        ] {
            assert!(fails(args).ends_with(limit), "{args}: {}", fails(args));
        }
        assert_eq!(run("-n 16777216 a").size(), RANKS_MAX);
    }

    #[test]
    fn segments_without_n_get_the_hosts_slots() {
        let host = |name: &str, slots| HostSpec {
            name: name.into(),
            slots,
        };
        let hosts = [host("a", 2), host("b", 3)];
        assert_eq!(default_nprocs(None, &hosts), 5);
        assert_eq!(default_nprocs(Some(4), &hosts), 8);
        assert_eq!(default_nprocs(Some(4), &[]), 4);
        assert_eq!(
            default_nprocs(None, &[]),
            0,
            "decided once the allocation is known"
        );
        assert_eq!(default_nprocs(Some(usize::MAX), &hosts), usize::MAX);
        // a name given twice is one host: -ppn counts it once, its slots count twice
        let twice = [host("a", 2), host("b", 3), host("a", 1)];
        assert_eq!(default_nprocs(Some(4), &twice), 8);
        assert_eq!(default_nprocs(None, &twice), 6);
    }

    #[test]
    fn option_values() {
        assert_eq!(nprocs("-np", "7"), Ok(7));
        assert!(nprocs("-n", "0")
            .unwrap_err()
            .0
            .contains("at least one process"));
        assert!(nprocs("-n", "-1")
            .unwrap_err()
            .0
            .contains("not a number of processes"));
        assert_eq!(ppn("2"), Ok(2));
        assert!(ppn("0").unwrap_err().0.contains("not a positive number"));
        assert_eq!(tree_width("flat"), Ok(0));
        assert_eq!(tree_width("cost"), Ok(0));
        assert_eq!(tree_width("16"), Ok(16));
        assert!(tree_width("wide")
            .unwrap_err()
            .0
            .contains("a number, flat or cost"));
        let four = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(singleton(&four("1 i k 2")).unwrap().pid, 2);
        assert!(singleton(&four("1 i k 1")).is_err(), "pid 1 is init");
        assert!(singleton(&four("70000 i k 9")).is_err());
    }

    #[test]
    fn basic_job() {
        let s = run("-n 4 ./a.out x -y");
        assert_eq!(s.apps.len(), 1);
        assert_eq!(s.apps[0].nprocs, 4);
        assert_eq!(s.apps[0].program, "./a.out");
        assert_eq!(s.apps[0].args, vec!["x", "-y"]);
        assert_eq!(s.size(), 4);
    }

    #[test]
    fn gnu_forms_and_mpmd() {
        let s = run("--np=2 -l -genv A 1 --env B 2 ./a : -np 3 -envnone ./b q");
        assert_eq!(s.apps[0].nprocs, 2);
        assert_eq!(s.apps[1].nprocs, 3);
        assert_eq!(s.apps[0].env, vec![("B".into(), "2".into())]);
        assert_eq!(s.apps[1].env_policy, Some(EnvPolicy::None));
        assert_eq!(s.apps[1].args, vec!["q"]);
        assert_eq!(s.genv, vec![("A".into(), "1".into())]);
        assert!(s.label);
    }

    #[test]
    fn hydra_spellings() {
        let s = run("---genv A 1 -NP=3 --L -GENVNONE --Env=B 2 a");
        assert_eq!(s.apps[0].nprocs, 3);
        assert_eq!(s.genv, vec![("A".into(), "1".into())]);
        assert_eq!(s.apps[0].env, vec![("B".into(), "2".into())]);
        assert_eq!(s.env_policy, EnvPolicy::None);
        assert!(s.label);
        assert_eq!(parse(&["-V"]).unwrap(), Command::Version);
    }

    #[test]
    fn hydra_env_fills_only_what_the_command_line_left() {
        let env = HydraEnv {
            launcher: Some("ssh".into()),
            launcher_exec: Some("/x/ssh".into()),
            env_policy: Some(EnvPolicy::None),
            label: true,
            ..HydraEnv::default()
        };
        let mut s = run("-launcher fork -genvall -n 1 a");
        apply_hydra_env(&mut s, true, env.clone()).unwrap();
        assert_eq!(s.launcher.as_deref(), Some("fork"));
        assert_eq!(s.launcher_exec.as_deref(), Some("/x/ssh"));
        assert_eq!(s.env_policy, EnvPolicy::All);
        assert!(s.label);
        let mut s = run("-launcher-exec /y -n 1 a");
        apply_hydra_env(&mut s, false, env).unwrap();
        assert_eq!(s.launcher.as_deref(), Some("ssh"));
        assert_eq!(s.launcher_exec.as_deref(), Some("/y"));
        assert_eq!(s.env_policy, EnvPolicy::None);
        let mut s = run("-hosts h -n 1 a");
        let bad = HydraEnv {
            host_file: Some(("HYDRA_HOST_FILE", "/nonexistent/h".into())),
            ..HydraEnv::default()
        };
        apply_hydra_env(&mut s, false, bad.clone()).unwrap();
        assert_eq!(s.hosts[0].name, "h");
        let mut s = run("-n 1 a");
        let e = apply_hydra_env(&mut s, false, bad).unwrap_err().0;
        assert!(
            e.starts_with("HYDRA_HOST_FILE: cannot read hostfile"),
            "{e}"
        );
    }

    #[test]
    fn profile_flag() {
        use crate::tree::profile::ProfileFormat;
        assert_eq!(run("--profile -n 1 a").profile, Some(ProfileFormat::Text));
        assert_eq!(
            run("-profile=json -n 1 a").profile,
            Some(ProfileFormat::Json)
        );
        // A separate word after --profile is the program, not the format.
        let s = run("--profile json");
        assert_eq!(
            (s.profile, s.apps[0].program.to_str()),
            (Some(ProfileFormat::Text), Some("json"))
        );
        assert!(fails("--profile=xml -n 1 a").contains("text, json or trace"));
    }

    #[test]
    fn env_policies() {
        assert_eq!(run("-genvnone -n 1 a").env_policy, EnvPolicy::None);
        assert_eq!(
            run("-genvlist A,B -n 1 a").env_policy,
            EnvPolicy::List(vec!["A".into(), "B".into()])
        );
    }

    #[test]
    fn hosts_and_ppn() {
        let s = run("-hosts a,b:2 -ppn 3 ./x");
        assert_eq!(s.hosts.len(), 2);
        assert_eq!(s.hosts[1].slots, 2);
        assert_eq!(s.apps[0].nprocs, 6);
        let s = run("-hosts a,b:2 ./x");
        assert_eq!(s.apps[0].nprocs, 3);
        // No host named: decided once the allocation (if any) is known.
        assert_eq!(run("./x").apps[0].nprocs, 0);
    }

    #[test]
    fn errors_are_one_line() {
        assert!(fails("-n 0 ./a").contains("at least one"));
        assert!(fails("-bogus ./a").contains("unknown option -bogus"));
        assert!(fails("-n 2").contains("no program"));
        assert!(fails("-n x ./a").contains("not a number"));
        assert!(fails("-n 1 a : -n 1").contains("no program"));
        assert!(fails("-hosts a:0 ./x").contains("bad slot count"));
    }

    #[test]
    fn output_options() {
        use crate::plan::output::Pattern;
        let s = run(
            "-prepend-pattern [%r@%h] -outfile-pattern o.%r -errfile-pattern e.%r -output-from 1 a",
        );
        assert_eq!(s.output.prepend, Some(Pattern::parse("[%r@%h]").unwrap()));
        assert_eq!(s.output.outfile, Some(Pattern::parse("o.%r").unwrap()));
        assert_eq!(s.output.errfile, Some(Pattern::parse("e.%r").unwrap()));
        assert_eq!(s.output.output_from, Some(1));
        assert!(!s.label);
        assert!(fails("-l -prepend-pattern x a").contains("give one"));
        assert!(fails("-prepend-pattern x -prepend-rank a").contains("give one"));
        assert!(fails("-outfile-pattern o.%x a").contains("-outfile-pattern: unknown specifier %x"));
        assert!(fails("-errfile-pattern e.% a").contains("lone %"));
        assert!(fails("-output-from x a").contains("not a rank"));
        assert!(fails("-output-from 1 -output-from 2 a").contains("given twice"));
        assert!(fails("-outfile-pattern a -outfile b a").contains("given twice"));
    }

    #[test]
    fn configfile_keeps_the_command_lines_output_options() {
        let dir = std::env::temp_dir().join(format!("kauri-cfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("cfg");
        std::fs::write(&f, "-l -output-from 2 -outfile-pattern c.%r -n 1 ./a\n").unwrap();
        let s = run(&format!(
            "-prepend-pattern P -output-from 1 -configfile {}",
            f.display()
        ));
        assert_eq!(s.output.output_from, Some(1));
        assert!(!s.label, "-l in the configfile yields to -prepend-pattern");
        assert_eq!(
            s.output.outfile,
            Some(crate::plan::output::Pattern::parse("c.%r").unwrap())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse(&["-h"]).unwrap(), Command::Help);
        assert_eq!(parse(&["--help"]).unwrap(), Command::Help);
        assert_eq!(parse(&["--version"]).unwrap(), Command::Version);
    }

    #[test]
    fn hostfile_forms() {
        let dir = std::env::temp_dir().join(format!("kauri-hf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("hosts");
        std::fs::write(&f, "# c\nn1\nn2:4\nn3 slots=2 # x\n\n").unwrap();
        let h = read_hostfile(&f).unwrap();
        assert_eq!(
            h.iter()
                .map(|h| (h.name.as_str(), h.slots))
                .collect::<Vec<_>>(),
            vec![("n1", 1), ("n2", 4), ("n3", 2)]
        );
        std::fs::write(&f, "n1\nn2 slots=x\n").unwrap();
        assert!(read_hostfile(&f).unwrap_err().0.contains(":2:"));
        std::fs::write(&f, "n1 foo\n").unwrap();
        assert!(read_hostfile(&f).unwrap_err().0.contains(":1:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn configfile_segments() {
        let dir = std::env::temp_dir().join(format!("kauri-cf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("cfg");
        std::fs::write(&f, "-n 1 ./a # first\n-n 2 ./b x\n").unwrap();
        let s = run(&format!("-l -configfile {}", f.display()));
        assert_eq!(s.apps.len(), 2);
        assert_eq!(s.apps[1].args, vec!["x"]);
        assert!(s.label);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The option table and the parser agree: every name in the table (shown or alias) is
    /// known to the parser, and a name outside the table is unknown even where the parser
    /// has a branch for it (the table gates every name).
    #[test]
    fn every_table_option_is_parsed() {
        for o in crate::cli::doc::KAURI.opts() {
            for name in o.all_names() {
                let mut a = vec![name.to_string()];
                a.extend((0..o.arg.words()).map(|_| "1".to_string()));
                a.push("true".into());
                if let Err(e) = parse(&a) {
                    assert!(!e.0.contains("unknown option"), "{a:?}: {}", e.0);
                }
            }
        }
        assert!(fails("-not-in-the-table 1 true").contains("unknown option"));
    }

    /// `-h` shows every option a person types, with every spelling the parser takes (Hydra's
    /// older names, Open MPI's), and not the ones only programs type (`-pmi_args`).
    #[test]
    fn help_lists_every_shown_option() {
        let text = help();
        for s in crate::cli::doc::KAURI.options {
            for o in s.opts {
                let shown = text.contains(&format!("  {}", o.label_with_aliases()));
                assert_eq!(shown, s.in_help, "{}", o.label_with_aliases());
            }
        }
        assert!(!text.contains("-pmi_args"));
        assert_eq!(text.matches("  -map-by").count(), 1);
        assert!(text.contains("\nExamples:\n"));
    }

    #[test]
    fn manual_pages_and_completions() {
        let cmd = |a: &[&str]| parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(cmd(&["--help-man"]).unwrap(), Command::Man("kauri"));
        assert_eq!(
            cmd(&["--help-man", "kvs"]).unwrap(),
            Command::Man("kauri-kvs")
        );
        assert_eq!(
            cmd(&["--help-man=kauri-agent"]).unwrap(),
            Command::Man("kauri-agent")
        );
        assert!(cmd(&["--help-man", "x"])
            .unwrap_err()
            .0
            .contains("no such page"));
        assert_eq!(
            cmd(&["--completions", "zsh"]).unwrap(),
            Command::Completions("zsh".into())
        );
        assert!(cmd(&["--completions", "csh"])
            .unwrap_err()
            .0
            .contains("bash"));
        assert!(cmd(&["--completions"])
            .unwrap_err()
            .0
            .contains("needs a value"));
    }

    #[test]
    fn pmi_args_serves_a_singleton() {
        let s = run("-pmi_args 4711 default_interface default_key 1234");
        assert_eq!(
            s.singleton,
            Some(crate::plan::job::Singleton {
                port: 4711,
                interface: "default_interface".into(),
                key: "default_key".into(),
                pid: 1234,
            })
        );
        assert_eq!(s.size(), 1);
        assert!(fails("-pmi_args 4711 x y").contains("-pmi_args"));
        assert!(fails("-pmi_args 0 x y 1234").contains("PORT INTERFACE KEY PID"));
        assert!(fails("-pmi_args 4711 x y pid").contains("PORT INTERFACE KEY PID"));
        assert!(fails("-pmi_args 4711 x y 1234 ./a.out").contains("give no program"));
    }
}
