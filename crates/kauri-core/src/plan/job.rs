//! What a job is: its MPMD segments, hosts and environment policy ([`JobSpec`]), where each
//! rank runs ([`Placement`]), and the `PMI_process_mapping` that tells ranks who shares a node.
//!
//! This module is pure data and arithmetic: no processes, no sockets.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

/// Which of the launcher's own environment variables a rank inherits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvPolicy {
    /// Every variable (`-genvall`, the default).
    All,
    /// None (`-genvnone`), only those set explicitly with `-genv`/`-env`.
    None,
    /// Only the listed ones (`-genvlist a,b`).
    List(Vec<String>),
}

/// One MPMD segment: the part of a command line between `:` separators.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppSpec {
    /// How many ranks run this program (`-n`); 0 until decided when `-n` was not given and no
    /// host was named (the front end then uses the allocation's slots, or 1).
    pub nprocs: usize,
    /// The program, as typed: bytes as the OS gave them, UTF-8 or not.
    pub program: OsString,
    /// Its arguments, as the OS gave them.
    pub args: Vec<OsString>,
    /// Variables set for this segment only (`-env NAME VALUE`), as given.
    pub env: Vec<(OsString, OsString)>,
    /// This segment's inheritance policy (`-envall`, `-envnone`, `-envlist`), overriding the
    /// global one.
    pub env_policy: Option<EnvPolicy>,
    /// Working directory for this segment (`-wdir` after the global options).
    pub wdir: Option<PathBuf>,
}

/// A command line Kauri cannot act on; the message is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A host and how many rank slots it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// The name as given (a host name or an address).
    pub name: String,
    /// Slots (`host:n`, `slots=n`); 1 when not given.
    pub slots: usize,
}

/// Everything the command line says about a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The MPMD segments, in order; a rank's `appnum` is its segment's index.
    pub apps: Vec<AppSpec>,
    /// Hosts to place ranks on; empty means this host only.
    pub hosts: Vec<HostSpec>,
    /// Ranks per host (`-ppn`), overriding slots.
    pub ppn: Option<usize>,
    /// Variables set for every rank (`-genv`), as given.
    pub genv: Vec<(OsString, OsString)>,
    /// The global inheritance policy.
    pub env_policy: EnvPolicy,
    /// Working directory for every rank (`-wdir`), unless a segment sets its own.
    pub wdir: Option<PathBuf>,
    /// Prefix every output line with `[rank] ` (`-l`).
    pub label: bool,
    /// `-prepend-pattern`, `-outfile-pattern`, `-errfile-pattern`, `-output-from`.
    pub output: crate::plan::output::OutputOptions,
    /// Serve PMI over loopback TCP (`PMI_PORT`/`PMI_ID`) instead of an inherited socket.
    pub pmi_port: bool,
    /// The launcher asked for (`-launcher`); `None` chooses by itself.
    pub launcher: Option<String>,
    /// End the whole job when one rank fails (`-disable-auto-cleanup` turns it off).
    pub auto_cleanup: bool,
    /// Fault-tolerant MPI for the job (`-with-ft ulfm`): no auto-cleanup, the MPIs' own
    /// switches on (`OMPI_MCA_mpi_ft_enable`, `MPIR_CVAR_ENABLE_FT`), a lost host's ranks
    /// reported as aborted processes, and a rank killed by a signal not counted in kauri's
    /// exit status (a fault the survivors tolerated), as PRRTE's `--with-ft ulfm` does.
    pub fault_tolerant: bool,
    /// The universe size reported to ranks (`-usize`); `None`: the slots of the hosts named
    /// (`-hosts`, `-f`, an allocation), or -1 ("unknown", as Hydra) when none was named.
    pub universe_size: Option<i64>,
    /// The name server shared with other kauri runs (`-nameserver host[:port]`); `None`: the
    /// environment's `KAURI_NAMESERVER`/`HYDRA_NAMESERVER`, else a table private to this run.
    pub nameserver: Option<String>,
    /// Kill the job after this long (`MPIEXEC_TIMEOUT`).
    pub timeout: Option<Duration>,
    /// Log verbosity (`-v`, repeatable).
    pub verbose: u8,
    /// Place ranks round-robin over hosts (`-map-by node`) instead of filling each host.
    pub map_by_node: bool,
    /// The user chose how ranks are placed (`-map-by`, `-ppn`): `-ml-env` keeps it as is
    /// instead of numbering each host's ranks consecutively ([`Placement::by_host`]).
    pub mapping_asked: bool,
    /// Bind each rank to CPUs of its host (`-bind-to`, `-map-by` a topology object).
    pub binding: Option<crate::plan::binding::Binding>,
    /// Print each rank's CPUs as it starts (`-report-bindings`).
    pub report_bindings: bool,
    /// Give each rank GPUs of its host (`-gpus-per-proc`, `-gpu-bind`).
    pub gpus: Option<crate::plan::gpus::GpuAsk>,
    /// The network interface to use (`-iface`, `HYDRA_IFACE`): agents connect back to its
    /// address and the ranks' MPI is told its name.
    pub iface: Option<String>,
    /// Width of the agent tree (`-tree-width`); `Some(0)` is flat.
    pub tree_width: Option<usize>,
    /// Shape the tree by measured launch cost instead (`-tree-width cost`).
    pub cost_tree: bool,
    /// The launcher program (`-launcher-exec`), e.g. a wrapper around ssh.
    pub launcher_exec: Option<String>,
    /// Also set the variables ML launchers use (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, …).
    pub ml_env: bool,
    /// `-timeout-stacks`: when `MPIEXEC_TIMEOUT` fires, the diagnosis has the stacks of the
    /// ranks that are stuck.
    pub timeout_stacks: bool,
    /// Serve a program that is already running, as rank 0 of a one-rank job (`-pmi_args`).
    pub singleton: Option<Singleton>,
    /// The wire-up protocol asked for (`--pmi`).
    pub pmi: PmiChoice,
    /// Print the startup profile at exit (`--profile`, `KAURI_PROFILE`).
    pub profile: Option<crate::tree::profile::ProfileFormat>,
    /// The ports every listener of the run keeps to (`MPIEXEC_PORT_RANGE`); `None`: any.
    pub port_range: Option<crate::plan::port_range::PortRange>,
    /// Print which ranks each host runs before they start (`--display-map`).
    pub display_map: bool,
    /// Print every rank's exit status at the end (`-print-all-exitcodes`).
    pub print_exit_codes: bool,
    /// Lines the command line earned that do not stop the job (`-x NAME` of a variable kauri
    /// does not have), printed before it starts.
    pub warnings: Vec<String>,
    /// Start the whole job again when it fails, at most this many times (`-max-restarts`).
    pub max_restarts: u32,
    /// This run is one attempt of a job that restarts: kauri runs each attempt as a child
    /// of its own and tells it which in its environment ([`Attempt::VAR`]).
    pub attempt: Option<Attempt>,
}

/// One attempt of a job that restarts (`-max-restarts`), as the kauri that supervises the
/// attempts describes it to the kauri that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attempt {
    /// How many restarts came before this attempt (0: the first attempt).
    pub restart: u32,
    /// How many are allowed.
    pub max_restarts: u32,
    /// The run's id, the same in every attempt (`TORCHELASTIC_RUN_ID`).
    pub run_id: String,
    /// Hosts lost in an earlier attempt, left out of this one.
    pub without: Vec<String>,
    /// Where this attempt writes how it ended, for the supervisor ([`AttemptEnd`]).
    pub report: Option<String>,
}

impl Attempt {
    /// The variable that carries an attempt to the kauri that runs it (never to its ranks):
    /// `RESTART/MAX RUN_ID HOST,...|- REPORT|-`, space-separated (the report's path last, so
    /// that it may hold spaces).
    pub const VAR: &'static str = "KAURI_ATTEMPT";

    /// The variable's value.
    pub fn to_var(&self) -> String {
        let without = if self.without.is_empty() {
            "-".to_string()
        } else {
            self.without.join(",")
        };
        format!(
            "{}/{} {} {without} {}",
            self.restart,
            self.max_restarts,
            self.run_id,
            self.report.as_deref().unwrap_or("-"),
        )
    }

    /// Reads the variable's value; `None` for one kauri did not write.
    pub fn from_var(v: &str) -> Option<Attempt> {
        let mut w = v.splitn(4, ' ');
        let (restart, max) = w.next()?.split_once('/')?;
        let run_id = w.next()?.to_string();
        let without = w
            .next()?
            .split(',')
            .filter(|h| !h.is_empty() && *h != "-")
            .map(str::to_string)
            .collect();
        let report = w.next().filter(|r| *r != "-").map(str::to_string);
        Some(Attempt {
            restart: restart.parse().ok()?,
            max_restarts: max.parse().ok()?,
            run_id,
            without,
            report,
        })
    }
}

/// How an attempt ended, as it tells its supervisor: whether a restart may help, the line
/// naming what failed, and the hosts it lost.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptEnd {
    /// The job failed (a rank's failure or abort, a lost host): a restart may help. Not
    /// when it succeeded, was interrupted, timed out or could not start.
    pub failed: bool,
    /// What failed, in one line without `kauri: `.
    pub why: String,
    /// The hosts lost.
    pub lost: Vec<String>,
}

impl AttemptEnd {
    /// As the report file holds it: `failed` or `other`, the line, then one lost host a line.
    pub fn to_text(&self) -> String {
        let mut t = format!(
            "{}\n{}\n",
            if self.failed { "failed" } else { "other" },
            self.why.replace('\n', " ")
        );
        for h in &self.lost {
            t.push_str(h);
            t.push('\n');
        }
        t
    }

    /// Reads a report file's text.
    pub fn from_text(t: &str) -> AttemptEnd {
        let mut lines = t.lines();
        AttemptEnd {
            failed: lines.next() == Some("failed"),
            why: lines.next().unwrap_or("").to_string(),
            lost: lines
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
}

impl Default for JobSpec {
    /// What a command line says with no option and no program: the defaults every option
    /// starts from (`kauri` inherits the whole environment, cleans up after itself and
    /// picks the wire-up protocol from the program).
    fn default() -> JobSpec {
        JobSpec {
            apps: Vec::new(),
            hosts: Vec::new(),
            ppn: None,
            genv: Vec::new(),
            env_policy: EnvPolicy::All,
            wdir: None,
            label: false,
            output: Default::default(),
            pmi_port: false,
            launcher: None,
            auto_cleanup: true,
            fault_tolerant: false,
            universe_size: None,
            nameserver: None,
            timeout: None,
            verbose: 0,
            map_by_node: false,
            mapping_asked: false,
            binding: None,
            report_bindings: false,
            gpus: None,
            iface: None,
            tree_width: None,
            cost_tree: false,
            launcher_exec: None,
            ml_env: false,
            timeout_stacks: false,
            singleton: None,
            pmi: PmiChoice::Auto,
            profile: None,
            port_range: None,
            display_map: false,
            print_exit_codes: false,
            warnings: Vec::new(),
            max_restarts: 0,
            attempt: None,
        }
    }
}

/// A singleton: an MPI program started without a launcher that now needs one. Its PMI-1
/// client listens on `port` and runs `mpiexec -pmi_args PORT INTERFACE KEY PID`; the
/// launcher connects back and speaks the `singinit` exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Singleton {
    /// The port the program listens on.
    pub port: u16,
    /// Where it listens: MPICH passes `default_interface`, which means this host.
    pub interface: String,
    /// The authentication key (MPICH passes `default_key`, and asks for no authentication).
    pub key: String,
    /// The program's pid: it is not kauri's child, so it is watched through a pidfd.
    pub pid: u32,
}

/// The wire-up protocol of a job (`--pmi=auto|pmi1|pmi2|pmix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PmiChoice {
    /// PMI-1/PMI-2 and PMIx side by side, whatever the programs are ([`Wiring::Both`]).
    #[default]
    Auto,
    /// PMI-1 (and PMI-2: the server tells them apart per connection).
    Pmi1,
    /// PMI-2 (and PMI-1).
    Pmi2,
    /// PMIx.
    Pmix,
}

impl PmiChoice {
    /// Parses the value of `--pmi`.
    pub fn parse(v: &str) -> Option<PmiChoice> {
        match v.to_ascii_lowercase().as_str() {
            "auto" => Some(PmiChoice::Auto),
            "pmi1" | "pmi" | "simple" => Some(PmiChoice::Pmi1),
            "pmi2" => Some(PmiChoice::Pmi2),
            "pmix" => Some(PmiChoice::Pmix),
            _ => None,
        }
    }
}

/// True when a program naming these libraries wires up through PMIx: Open MPI 4 and 5's
/// `libmpi.so.40`, or one of its language bindings that load it (`libmpi_mpifh.so.40`,
/// `libmpi_usempif08.so.40`, `libmpi_usempi_ignore_tkr.so.40`, `libmpi_cxx.so.40`: a
/// Fortran or C++ program names these, not `libmpi.so.40`), or `libpmix` itself.
pub fn wants_pmix(needed: &[String]) -> bool {
    needed.iter().any(|l| {
        l.starts_with("libpmix.so")
            || (l.starts_with("libmpi") && !l.starts_with("libmpich") && l.contains(".so.40"))
    })
}

/// True when a program naming these libraries wires up through PMI-1/PMI-2: MPICH and its
/// ABI (`libmpich`, `libmpi.so.12`: MPICH, MVAPICH, Intel MPI) or a PMI client library.
pub fn wants_pmi(needed: &[String]) -> bool {
    needed.iter().any(|l| {
        l.starts_with("libmpich")
            || l.starts_with("libmpi.so.12")
            || l.starts_with("libpmi.so")
            || l.starts_with("libpmi2.so")
    })
}

/// How a job is wired up: what `--pmi` asked, or `auto`'s choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wiring {
    /// PMI-1/PMI-2 only.
    Pmi,
    /// PMIx only.
    Pmix,
    /// PMIx and PMI-1/PMI-2 side by side, each rank speaking the one its MPI speaks:
    /// `--pmi=auto`, whatever the programs are.
    Both,
}

/// What reading one segment found (see [`Wiring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The program itself is linked to Open MPI 4 or to `libpmix`.
    Pmix,
    /// The program itself is linked to an MPICH-ABI MPI or to a PMI library.
    Pmi,
    /// The program is not linked to an MPI, but its arguments, or the scripts and programs
    /// they name, use one.
    Beyond,
    /// Nothing points to an MPI.
    None,
}

/// How surely a job uses an MPI, by what reading its segments' programs found
/// ([`Evidence`]): it decides what ranks that never connected to a server mean at the
/// job's end ([`crate::tree::policy::never_wired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum MpiSign {
    /// Nothing points to an MPI (`hostname`, a shell script, plain Python).
    #[default]
    None,
    /// Something names an MPI that a rank may never start: a word (an interpreter's
    /// `mpi4py`), a program an argument names (a wrapper's), or a program linked to Open
    /// MPI (whose singletons kauri sees by their traces while they run).
    Named,
    /// A segment's program is itself linked to an MPICH-ABI MPI or a PMI client library:
    /// it starts its MPI, and a singleton of it leaves no trace.
    LinkedPmi,
}

impl MpiSign {
    /// The strongest sign among the segments' evidence.
    pub fn of(found: &[Evidence]) -> MpiSign {
        found
            .iter()
            .map(|e| match e {
                Evidence::Pmi => MpiSign::LinkedPmi,
                Evidence::Pmix | Evidence::Beyond => MpiSign::Named,
                Evidence::None => MpiSign::None,
            })
            .max()
            .unwrap_or_default()
    }
}

/// Words in a script or in an argument that say an MPI is used from an interpreter:
/// Python's mpi4py, Julia's MPI.jl, R's Rmpi and pbdMPI.
pub const MPI_MARKERS: &[&str] = &["mpi4py", "using MPI", "import MPI", "Rmpi", "pbdMPI"];

/// True when `text` (a script, an argument such as `python3 -c CODE`'s) names one of the
/// [`MPI_MARKERS`].
pub fn mentions_mpi(text: &[u8]) -> bool {
    MPI_MARKERS
        .iter()
        .any(|m| text.windows(m.len()).any(|w| w == m.as_bytes()))
}

/// The most words of the arguments that [`arg_words`] returns.
pub const ARG_WORDS_MAX: usize = 64;

/// The words of a segment's arguments that may name a file: each argument split at
/// white space and shell punctuation (`bash -c "./app x"`, `env A=1 ./app`), without
/// options (`-x`), at most [`ARG_WORDS_MAX`]. Arguments are bytes (a file name need not be
/// UTF-8): they are split at ASCII white space and punctuation.
pub fn arg_words<S: AsRef<OsStr>>(args: &[S]) -> Vec<&OsStr> {
    use std::os::unix::ffi::OsStrExt;
    args.iter()
        .flat_map(|a| {
            a.as_ref()
                .as_bytes()
                .split(|c| c.is_ascii_whitespace() || b";&|()<>'\"`=".contains(c))
        })
        .filter(|w| !w.is_empty() && !w.starts_with(b"-"))
        .take(ARG_WORDS_MAX)
        .map(OsStr::from_bytes)
        .collect()
}

/// The most ranks one job may have in all: 2^24 (16,777,216). Ranks travel as `u32` on the
/// tree's wire and every rank costs the front end a few hundred bytes of plan and state before
/// anything starts, so a bound far below `u32::MAX` keeps a mistyped `-n` from asking for
/// gigabytes; the largest machines run about 10^7 cores, under it. `-n`, `-ppn`, slot counts
/// and their products are checked against it.
pub const RANKS_MAX: usize = 1 << 24;

/// The one line for a count of processes over [`RANKS_MAX`]; `what` names where it came
/// from (`-n 99999999999`).
pub fn too_many_ranks(what: &str) -> String {
    format!("{what}: more than the {RANKS_MAX} processes a job may have")
}

impl JobSpec {
    /// The total number of ranks (saturating: see [`RANKS_MAX`]).
    pub fn size(&self) -> usize {
        self.apps
            .iter()
            .fold(0usize, |n, a| n.saturating_add(a.nprocs))
    }
}

/// Where each rank runs, as node indices into the job's host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `node[r]` is the index of rank `r`'s host.
    pub node: Vec<usize>,
    /// The number of hosts.
    pub nodes: usize,
}

impl Placement {
    /// Every rank on one host.
    pub fn single(size: usize) -> Placement {
        Placement {
            node: vec![0; size],
            nodes: 1,
        }
    }

    /// Fills hosts in order, `slots[i]` ranks on host `i`, wrapping around (oversubscribing)
    /// when the job is bigger than the slots: Hydra's default block placement.
    pub fn block(size: usize, slots: &[usize]) -> Placement {
        let total: usize = slots.iter().sum();
        let mut node = Vec::with_capacity(size);
        if total == 0 {
            return Placement::single(size);
        }
        'outer: loop {
            for (h, &n) in slots.iter().enumerate() {
                for _ in 0..n {
                    if node.len() == size {
                        break 'outer;
                    }
                    node.push(h);
                }
            }
            if node.len() == size {
                break;
            }
        }
        Placement {
            node,
            nodes: slots.len(),
        }
    }

    /// Deals ranks to hosts in turn, one at a time (`-map-by node`).
    pub fn cyclic(size: usize, nodes: usize) -> Placement {
        let nodes = nodes.max(1);
        Placement {
            node: (0..size).map(|r| r % nodes).collect(),
            nodes,
        }
    }

    /// As many ranks on each host as here, numbered host by host: host 0 gets the first
    /// ranks, host 1 the next, and so on, so that each host's ranks are consecutive as
    /// torchrun's `RANK = GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK` expects (`-ml-env`).
    /// Hydra's placement of `-hosts a,b -n 4` is a: 0,2 and b: 1,3; this makes it a: 0,1
    /// and b: 2,3.
    pub fn by_host(&self) -> Placement {
        let mut count = vec![0usize; self.nodes];
        for &n in &self.node {
            count[n] += 1;
        }
        Placement {
            node: count
                .iter()
                .enumerate()
                .flat_map(|(n, &c)| std::iter::repeat_n(n, c))
                .collect(),
            nodes: self.nodes,
        }
    }

    /// The ranks on host `n`, in rank order.
    pub fn ranks_on(&self, n: usize) -> Vec<usize> {
        (0..self.node.len())
            .filter(|&r| self.node[r] == n)
            .collect()
    }

    /// `PMI_process_mapping` for this placement: `(vector,(start,count,ppn),…)`, every block
    /// of the placement written out, as Intel MPI's Hydra writes it: Intel MPI's parser does
    /// not repeat a shorter list, and MPICH's reads both forms. When the full list is longer
    /// than a value may be, the shortest list of blocks which, applied cyclically as MPICH's
    /// parser does, gives every rank's node; the empty string ("unknown") when even that is too
    /// long.
    pub fn process_mapping(&self) -> String {
        let blocks = self.blocks();
        let full = vector(&blocks);
        if full.len() <= pmi_wire::limits::VALUE_MAX {
            return full;
        }
        // The shortest prefix of blocks that reproduces the whole mapping when repeated.
        let shortest = (1..=blocks.len())
            .find(|&k| expand(&blocks[..k], self.node.len()) == self.node)
            .unwrap_or(blocks.len());
        let s = vector(&blocks[..shortest]);
        if s.len() > pmi_wire::limits::VALUE_MAX {
            String::new()
        } else {
            s
        }
    }

    /// The placement as `(start node, node count, ranks per node)` blocks, in rank order: runs
    /// of consecutive ranks on one node, merged into blocks of consecutive nodes with equal
    /// run lengths.
    fn blocks(&self) -> Vec<(usize, usize, usize)> {
        let mut blocks: Vec<(usize, usize, usize)> = Vec::new();
        let mut r = 0;
        while r < self.node.len() {
            let n = self.node[r];
            let run = self.node[r..].iter().take_while(|&&x| x == n).count();
            match blocks.last_mut() {
                Some((start, count, ppn)) if *ppn == run && *start + *count == n => *count += 1,
                _ => blocks.push((n, 1, run)),
            }
            r += run;
        }
        blocks
    }
}

/// `(vector,(start,count,ppn),…)` of `blocks`.
fn vector(blocks: &[(usize, usize, usize)]) -> String {
    let mut s = String::from("(vector");
    for (start, count, ppn) in blocks {
        s.push_str(&format!(",({start},{count},{ppn})"));
    }
    s.push(')');
    s
}

/// Applies blocks cyclically to `size` ranks, as MPICH's rank-map parser does.
fn expand(blocks: &[(usize, usize, usize)], size: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(size);
    if blocks.iter().all(|&(_, c, p)| c == 0 || p == 0) {
        return out;
    }
    while out.len() < size {
        for &(start, count, ppn) in blocks {
            for node in start..start + count {
                for _ in 0..ppn {
                    if out.len() == size {
                        return out;
                    }
                    out.push(node);
                }
            }
        }
    }
    out
}

/// A `FLUX_JOB_ID` for a job, from its kvsname (unique per concurrent launch on a host):
/// Open MPI 4.1's `flux` component names its shared-memory segments and keys by it. Open MPI
/// reads the high 16 bits as the job family and the low 16 bits as the local job id, where 0
/// is its daemons' job and 0x8000 and up come out different on the peers, so the low half
/// stays in 1..=0x7fff and the high half below 0x8000. Two jobs collide with a chance of
/// about one in 2^30.
pub fn flux_job_id(kvsname: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in kvsname.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let family = (h >> 16) & 0x7fff;
    let local = (h & 0x7fff).max(1);
    (family << 16) | local
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt reaches the kauri that runs it as it left its supervisor, a report path
    /// with spaces included; a value kauri did not write is refused.
    #[test]
    fn an_attempt_crosses_its_variable_whole() {
        let a = Attempt {
            restart: 1,
            max_restarts: 3,
            run_id: "kauri-42".into(),
            without: vec!["b".into(), "c".into()],
            report: Some("/tmp/my dir/kauri-attempt-42-1".into()),
        };
        assert_eq!(Attempt::from_var(&a.to_var()), Some(a.clone()));
        let first = Attempt {
            without: Vec::new(),
            report: None,
            ..a
        };
        assert_eq!(first.to_var(), "1/3 kauri-42 - -");
        assert_eq!(Attempt::from_var(&first.to_var()), Some(first));
        for bad in ["", "1", "x/3 r - -", "1/3"] {
            assert_eq!(Attempt::from_var(bad), None, "{bad:?}");
        }
    }

    /// An attempt's end crosses its file whole; an empty file (an attempt that never got to
    /// write it) is no failure to restart.
    #[test]
    fn an_attempts_end_crosses_its_file_whole() {
        let end = AttemptEnd {
            failed: true,
            why: "rank 1 on a exited with code 3".into(),
            lost: vec!["b".into()],
        };
        assert_eq!(AttemptEnd::from_text(&end.to_text()), end);
        assert_eq!(AttemptEnd::from_text(""), AttemptEnd::default());
        assert!(!AttemptEnd::from_text("other\nx\n").failed);
    }

    fn cyclic(size: usize, nodes: usize) -> Placement {
        Placement {
            node: (0..size).map(|r| r % nodes).collect(),
            nodes,
        }
    }

    #[test]
    fn single_host_mapping() {
        assert_eq!(Placement::single(4).process_mapping(), "(vector,(0,1,4))");
        assert_eq!(Placement::single(1).process_mapping(), "(vector,(0,1,1))");
    }

    #[test]
    fn block_mapping_uniform_and_mixed() {
        assert_eq!(
            Placement::block(8, &[4, 4]).process_mapping(),
            "(vector,(0,2,4))"
        );
        assert_eq!(
            Placement::block(6, &[2, 4]).process_mapping(),
            "(vector,(0,1,2),(1,1,4))"
        );
    }

    #[test]
    fn by_host_keeps_each_hosts_count_and_numbers_them_in_blocks() {
        // -hosts a,b -n 4: Hydra's a: 0,2 and b: 1,3 become a: 0,1 and b: 2,3.
        let p = Placement::block(4, &[1, 1]).by_host();
        assert_eq!(p.node, vec![0, 0, 1, 1]);
        assert_eq!(p.nodes, 2);
        // Uneven counts stay as Hydra gave them: a:2,b:1 wrapping over 5 ranks is a: 4, b: 1.
        let hydra = Placement::block(5, &[2, 1]);
        let p = hydra.by_host();
        assert_eq!(p.node, vec![0, 0, 0, 0, 1]);
        for n in 0..2 {
            assert_eq!(p.ranks_on(n).len(), hydra.ranks_on(n).len());
        }
        // A host without ranks keeps none; a placement already in blocks is unchanged.
        let p = Placement::block(2, &[1, 1, 1]).by_host();
        assert_eq!((p.node, p.nodes), (vec![0, 1], 3));
        let b = Placement::block(8, &[4, 4]);
        assert_eq!(b.by_host(), b);
        assert_eq!(
            Placement::cyclic(6, 3).by_host().node,
            vec![0, 0, 1, 1, 2, 2]
        );
        assert!(Placement::single(0).by_host().node.is_empty());
    }

    #[test]
    fn block_oversubscribes_by_wrapping() {
        let p = Placement::block(5, &[2, 1]);
        assert_eq!(p.node, vec![0, 0, 1, 0, 0]);
        assert_eq!(expand(&[(0, 1, 2), (1, 1, 1)], 5), p.node);
        assert_eq!(p.process_mapping(), "(vector,(0,1,2),(1,1,1),(0,1,2))");
    }

    #[test]
    fn cyclic_mapping_writes_every_block() {
        // Intel MPI's Hydra writes this form, and Intel MPI's parser needs it: given only
        // `(vector,(0,2,1))` for 4 ranks on 2 hosts its ranks die of SIGSEGV.
        assert_eq!(cyclic(4, 2).process_mapping(), "(vector,(0,2,1),(0,2,1))");
        assert_eq!(
            cyclic(7, 3).process_mapping(),
            "(vector,(0,3,1),(0,3,1),(0,1,1))"
        );
    }

    #[test]
    fn too_long_a_list_falls_back_to_the_cyclic_form() {
        // 512 blocks of `(0,2,1)` are 4 KiB: more than a value may be.
        assert_eq!(cyclic(1024, 2).process_mapping(), "(vector,(0,2,1))");
        // 600 ranks scattered over 97 hosts with no repeat: neither form fits.
        let mut x: u64 = 1;
        let irregular = Placement {
            node: (0..600)
                .map(|_| {
                    x = (x * 1_103_515_245 + 12_345) % (1 << 31);
                    (x >> 16) as usize % 97
                })
                .collect(),
            nodes: 97,
        };
        assert_eq!(irregular.process_mapping(), "");
    }

    #[test]
    fn a_full_list_places_every_rank_once() {
        // What a parser that does not repeat the list reads: the blocks' ranks add up to the
        // job's size.
        for size in 1..40 {
            for nodes in 1..6 {
                for p in [cyclic(size, nodes), Placement::block(size, &vec![3; nodes])] {
                    let placed: usize = p.blocks().iter().map(|&(_, c, ppn)| c * ppn).sum();
                    assert_eq!(placed, size);
                    assert_eq!(p.process_mapping(), vector(&p.blocks()));
                }
            }
        }
    }

    #[test]
    fn every_mapping_expands_back() {
        for size in 1..40 {
            for nodes in 1..6 {
                for p in [cyclic(size, nodes), Placement::block(size, &vec![3; nodes])] {
                    let m = p.process_mapping();
                    let blocks: Vec<(usize, usize, usize)> = m
                        .trim_start_matches("(vector,")
                        .trim_end_matches(')')
                        .split("),(")
                        .map(|b| {
                            let v: Vec<usize> = b
                                .trim_matches(|c| c == '(' || c == ')')
                                .split(',')
                                .map(|x| x.parse().unwrap())
                                .collect();
                            (v[0], v[1], v[2])
                        })
                        .collect();
                    assert_eq!(expand(&blocks, size), p.node, "{m}");
                }
            }
        }
    }

    #[test]
    fn ranks_on_node() {
        assert_eq!(cyclic(6, 2).ranks_on(1), vec![1, 3, 5]);
    }

    #[test]
    fn markers_and_argument_words() {
        assert!(mentions_mpi(b"from mpi4py import MPI\n"));
        assert!(mentions_mpi(b"using MPI\nMPI.Init()"));
        assert!(mentions_mpi(b"library(Rmpi)"));
        assert!(!mentions_mpi(b"import os; print(os.environ['KAURI_RANK'])"));
        assert!(!mentions_mpi(b"mpi"));
        let args: Vec<String> = ["-u", "prog.py", "--in=data.txt", "./a b;./c|d", "X=1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            arg_words(&args),
            ["prog.py", "data.txt", "./a", "b", "./c", "d", "X", "1"]
        );
        let many = vec!["w ".repeat(100)];
        assert_eq!(arg_words(&many).len(), ARG_WORDS_MAX);
    }

    #[test]
    fn pmi_choices() {
        assert_eq!(PmiChoice::parse("PMIx"), Some(PmiChoice::Pmix));
        assert_eq!(PmiChoice::parse("pmi2"), Some(PmiChoice::Pmi2));
        assert_eq!(PmiChoice::parse("auto"), Some(PmiChoice::Auto));
        assert_eq!(PmiChoice::parse("bogus"), None);
    }
}
