//! Hosts from a resource manager's allocation, used when the command line names none:
//! Slurm (`SLURM_JOB_NODELIST` with `SLURM_TASKS_PER_NODE`), Grid Engine (`PE_HOSTFILE` in a
//! parallel environment, with `JOB_ID`), LSF (`LSB_MCPU_HOSTS`) and PBS/Torque
//! (`PBS_NODEFILE`), looked for in that order. A file or variable that does not parse is one
//! error line naming it, the line and what was expected.
//!
//! Reads the environment and the files it names; starts nothing (the launchers in `launch`
//! do).

use super::LauncherKind;
use kauri_core::plan::job::HostSpec;

/// The resource managers whose allocations [`detect`] reads, in the order it looks.
pub const MANAGERS: [&str; 4] = ["slurm", "sge", "lsf", "pbs"];

/// The allocation kauri runs in, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Slurm, Grid Engine, LSF or PBS: the launcher that starts agents in it.
    pub manager: LauncherKind,
    /// Its hosts and slots.
    pub hosts: Vec<HostSpec>,
}

/// Why a resource manager's allocation cannot be read: each prints the one line kauri gives.
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    /// A Slurm host list that does not parse.
    #[error("bad host list {list:?}")]
    HostList {
        /// The list.
        list: String,
    },
    /// A range in a Slurm host list that does not parse or runs backwards.
    #[error("bad host range {range:?} in {list:?}")]
    HostRange {
        /// The range.
        range: String,
        /// The whole list.
        list: String,
    },
    /// A `SLURM_TASKS_PER_NODE` that does not parse.
    #[error("bad SLURM_TASKS_PER_NODE {spec:?}")]
    TasksPerNode {
        /// Its value.
        spec: String,
    },
    /// A `SLURM_TASKS_PER_NODE` with another number of nodes than the host list.
    #[error("SLURM_TASKS_PER_NODE {spec:?} does not match {nodes} node(s)")]
    TasksMismatch {
        /// Its value.
        spec: String,
        /// The host list's nodes.
        nodes: usize,
    },
    /// An `LSB_MCPU_HOSTS` that is not host and count pairs.
    #[error("LSB_MCPU_HOSTS {list:?}: expected \"HOST1 N1 HOST2 N2 ...\"")]
    Lsf {
        /// Its value.
        list: String,
    },
    /// The file a variable names cannot be read.
    #[error("cannot read {var} {path}: {why}")]
    ReadFile {
        /// The variable (`PE_HOSTFILE`, `PBS_NODEFILE`).
        var: &'static str,
        /// The file.
        path: String,
        /// What the system said.
        #[source]
        why: std::io::Error,
    },
    /// The file a variable names does not parse.
    #[error("{var} {path}: {fault}")]
    File {
        /// The variable (`PE_HOSTFILE`, `PBS_NODEFILE`).
        var: &'static str,
        /// The file.
        path: String,
        /// What is wrong in it.
        #[source]
        fault: FileFault,
    },
}

/// What is wrong in a Grid Engine PE host file or a PBS node file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileFault {
    /// A line that is not what the format expects.
    #[error("line {line}: expected {expected}, got {got:?}")]
    BadLine {
        /// Its number, from 1.
        line: usize,
        /// What the format expects there.
        expected: &'static str,
        /// The line.
        got: String,
    },
    /// A file with no host in it.
    #[error("lists no host")]
    NoHost,
}

/// Reads the file `path` that variable `var` names.
fn read_named(var: &'static str, path: &str) -> Result<String, AllocationError> {
    std::fs::read_to_string(path).map_err(|why| AllocationError::ReadFile {
        var,
        path: path.to_string(),
        why,
    })
}

/// The error for the file `path` that variable `var` names, when it does not parse.
fn in_file<'a>(var: &'static str, path: &'a str) -> impl FnOnce(FileFault) -> AllocationError + 'a {
    move |fault| AllocationError::File {
        var,
        path: path.to_string(),
        fault,
    }
}

/// Reads the allocation from the environment.
pub fn detect() -> Result<Option<Allocation>, AllocationError> {
    if let Ok(list) =
        std::env::var("SLURM_JOB_NODELIST").or_else(|_| std::env::var("SLURM_NODELIST"))
    {
        let names = expand_hostlist(&list)?;
        let tasks = std::env::var("SLURM_TASKS_PER_NODE").unwrap_or_default();
        let slots = expand_tasks_per_node(&tasks, names.len())?;
        let hosts = names
            .into_iter()
            .zip(slots)
            .map(|(name, slots)| HostSpec { name, slots })
            .collect();
        return Ok(Some(Allocation {
            manager: LauncherKind::Slurm,
            hosts,
        }));
    }
    if let (Ok(path), Ok(_)) = (std::env::var("PE_HOSTFILE"), std::env::var("JOB_ID")) {
        let text = read_named("PE_HOSTFILE", &path)?;
        return Ok(Some(Allocation {
            manager: LauncherKind::Sge,
            hosts: parse_pe_hostfile(&text).map_err(in_file("PE_HOSTFILE", &path))?,
        }));
    }
    if let Ok(list) = std::env::var("LSB_MCPU_HOSTS") {
        return Ok(Some(Allocation {
            manager: LauncherKind::Lsf,
            hosts: parse_lsb_mcpu_hosts(&list)?,
        }));
    }
    if let Ok(path) = std::env::var("PBS_NODEFILE") {
        let text = read_named("PBS_NODEFILE", &path)?;
        return Ok(Some(Allocation {
            manager: LauncherKind::Pbs,
            hosts: parse_pbs_nodefile(&text).map_err(in_file("PBS_NODEFILE", &path))?,
        }));
    }
    Ok(None)
}

/// Variables of a Slurm job that describe srun's tasks and steps, not kauri's ranks, and that
/// ranks therefore do not inherit inside a Slurm job: Hydra's slurm bootstrap list
/// (`SLURM_JOBID`, `SLURM_NODELIST`, `SLURM_TASKS_PER_NODE`, `SLURM_PROCID`, `SLURM_LOCALID`,
/// `SLURM_NODEID`, `SLURM_NNODES`, `SLURM_NPROCS`, `SLURM_CPUS_ON_NODE`, the CPU and memory
/// binding settings, …) and every step variable (`SLURM_STEP_*`, `SLURM_STEPID`, `SLURM_NTASKS`,
/// `SLURM_GTIDS`, `SLURM_SRUN_COMM_*`, `SLURM_TASK_PID`, …). With them, Open MPI believes
/// srun started it (`SLURM_STEP_ID`, `SLURM_STEP_NUM_TASKS`) and wires up through Slurm
/// instead of its process manager, and rank-detecting libraries read srun's rank and size.
/// The job's own description (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST`, `SLURM_CONF`,
/// `SLURM_SUBMIT_DIR`, …) stays.
pub fn is_slurm_task_var(name: &str) -> bool {
    const HYDRA: [&str; 43] = [
        "SLURM_ACCOUNT",
        "SLURM_CPU_BIND",
        "SLURM_CPUS_PER_TASK",
        "SLURM_CONN_TYPE",
        "SLURM_CORE_FORMAT",
        "SLURM_DEBUG",
        "SLURMD_DEBUG",
        "SLURM_DISABLE_STATUS",
        "SLURM_DISTRIBUTION",
        "SLURM_GEOMETRY",
        "SLURM_LABELIO",
        "SLURM_MEM_BIND",
        "SLURM_NETWORK",
        "SLURM_NNODES",
        "SLURM_NO_ROTATE",
        "SLURM_NPROCS",
        "SLURM_OVERCOMMIT",
        "SLURM_PARTITION",
        "SLURM_REMOTE_CWD",
        "SLURM_SRUN_COMM_IFHN",
        "SLURM_STDERRMODE",
        "SLURM_STDINMODE",
        "SLURM_STDOUTMODE",
        "SLURM_TASK_EPILOG",
        "SLURM_TASK_PROLOG",
        "SLURM_TIMELIMIT",
        "SLURM_WAIT",
        "SLURM_CPU_BIND_VERBOSE",
        "SLURM_CPU_BIND_TYPE",
        "SLURM_CPU_BIND_LIST",
        "SLURM_CPUS_ON_NODE",
        "SLURM_JOBID",
        "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_LOCALID",
        "SLURM_MEM_BIND_VERBOSE",
        "SLURM_MEM_BIND_TYPE",
        "SLURM_MEM_BIND_LIST",
        "SLURM_NODEID",
        "SLURM_NODELIST",
        "SLURM_PROCID",
        "SLURM_TASKS_PER_NODE",
        "MAX_TASKS_PER_NODE",
        "SLURM_HOSTFILE",
    ];
    const STEP: [&str; 11] = [
        "SLURM_STEPID",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_GTIDS",
        "SLURM_TASK_PID",
        "SLURM_PRIO_PROCESS",
        "SLURM_SRUN_COMM_HOST",
        "SLURM_SRUN_COMM_PORT",
        "SLURM_MPI_TYPE",
        "SLURM_UMASK",
        "SLURMD_NODENAME",
    ];
    name.starts_with("SLURM_STEP_")
        || name.starts_with("SLURM_PMI")
        || HYDRA.contains(&name)
        || STEP.contains(&name)
}

/// Adds `slots` on `name`, to the host's entry when it has one (a host listed twice, as in
/// several queues of a Grid Engine job, keeps its first place).
fn add_slots(hosts: &mut Vec<HostSpec>, name: &str, slots: usize) {
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => h.slots += slots,
        None => hosts.push(HostSpec {
            name: name.to_string(),
            slots,
        }),
    }
}

/// A slot count: a positive integer.
fn slot_count(word: &str) -> Option<usize> {
    word.parse::<usize>().ok().filter(|&n| n > 0)
}

/// Parses a Grid Engine PE host file: one `HOST SLOTS QUEUE PROCESSOR-RANGE` line per queue
/// instance (only the first two words are used).
pub fn parse_pe_hostfile(text: &str) -> Result<Vec<HostSpec>, FileFault> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            [] => continue,
            [host, slots, ..] if slot_count(slots).is_some() => {
                add_slots(&mut hosts, host, slot_count(slots).unwrap_or(1))
            }
            _ => {
                return Err(FileFault::BadLine {
                    line: i + 1,
                    expected: "\"HOST SLOTS QUEUE PROCESSORS\"",
                    got: line.to_string(),
                })
            }
        }
    }
    if hosts.is_empty() {
        return Err(FileFault::NoHost);
    }
    Ok(hosts)
}

/// Parses LSF's `LSB_MCPU_HOSTS`: `HOST1 N1 HOST2 N2 ...`.
pub fn parse_lsb_mcpu_hosts(list: &str) -> Result<Vec<HostSpec>, AllocationError> {
    let words: Vec<&str> = list.split_whitespace().collect();
    let bad = || AllocationError::Lsf {
        list: list.to_string(),
    };
    if words.is_empty() || words.len() % 2 != 0 {
        return Err(bad());
    }
    let mut hosts = Vec::new();
    for pair in words.chunks(2) {
        add_slots(&mut hosts, pair[0], slot_count(pair[1]).ok_or_else(bad)?);
    }
    Ok(hosts)
}

/// Parses a PBS/Torque node file: one host name per line, one line per slot.
pub fn parse_pbs_nodefile(text: &str) -> Result<Vec<HostSpec>, FileFault> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            [] => continue,
            [name] => add_slots(&mut hosts, name, 1),
            _ => {
                return Err(FileFault::BadLine {
                    line: i + 1,
                    expected: "one host name",
                    got: line.to_string(),
                })
            }
        }
    }
    if hosts.is_empty() {
        return Err(FileFault::NoHost);
    }
    Ok(hosts)
}

/// Expands a Slurm host list: `node[01-03,07],login1` -> node01 node02 node03 node07 login1.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, AllocationError> {
    let bad_range = |range: &str| AllocationError::HostRange {
        range: range.to_string(),
        list: list.to_string(),
    };
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for p in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        match (p.find('['), p.rfind(']')) {
            (Some(o), Some(c)) if c > o => {
                let (prefix, suffix) = (&p[..o], &p[c + 1..]);
                for range in p[o + 1..c].split(',') {
                    match range.split_once('-') {
                        Some((a, b)) => {
                            let width = a.len();
                            let (x, y): (u64, u64) = (
                                a.parse().map_err(|_| bad_range(range))?,
                                b.parse().map_err(|_| bad_range(range))?,
                            );
                            if y < x || y - x > 1_000_000 {
                                return Err(bad_range(range));
                            }
                            for n in x..=y {
                                out.push(format!("{prefix}{n:0width$}{suffix}"));
                            }
                        }
                        None => out.push(format!("{prefix}{range}{suffix}")),
                    }
                }
            }
            (None, None) => out.push(p.to_string()),
            _ => {
                return Err(AllocationError::HostList {
                    list: list.to_string(),
                })
            }
        }
    }
    Ok(out)
}

/// Expands `SLURM_TASKS_PER_NODE` (`2(x3),1`) to one count per node; empty means 1 each.
pub fn expand_tasks_per_node(spec: &str, nodes: usize) -> Result<Vec<usize>, AllocationError> {
    let bad = || AllocationError::TasksPerNode {
        spec: spec.to_string(),
    };
    if spec.trim().is_empty() {
        return Ok(vec![1; nodes]);
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (n, rep) = match part.split_once("(x") {
            Some((n, r)) => (n, r.trim_end_matches(')')),
            None => (part, "1"),
        };
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        let rep: usize = rep.trim().parse().map_err(|_| bad())?;
        out.extend(std::iter::repeat_n(n.max(1), rep.min(1_000_000)));
    }
    if out.len() != nodes {
        return Err(AllocationError::TasksMismatch {
            spec: spec.to_string(),
            nodes,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists() {
        assert_eq!(expand_hostlist("localhost").unwrap(), vec!["localhost"]);
        assert_eq!(
            expand_hostlist("n[01-03,07],login1").unwrap(),
            vec!["n01", "n02", "n03", "n07", "login1"]
        );
        assert_eq!(expand_hostlist("a[9-10]b").unwrap(), vec!["a9b", "a10b"]);
        assert!(matches!(
            expand_hostlist("n[3-1]"),
            Err(AllocationError::HostRange { range, .. }) if range == "3-1"
        ));
        assert!(matches!(
            expand_hostlist("n[1-"),
            Err(AllocationError::HostList { .. })
        ));
    }

    fn h(name: &str, slots: usize) -> HostSpec {
        HostSpec {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn slurm_task_variables() {
        for gone in [
            "SLURM_JOBID",
            "SLURM_PROCID",
            "SLURM_STEP_ID",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_NTASKS",
            "SLURM_PMIXP_ABORT_AGENT_PORT",
        ] {
            assert!(is_slurm_task_var(gone), "{gone}");
        }
        for kept in [
            "SLURM_JOB_ID",
            "SLURM_JOB_NODELIST",
            "SLURM_CONF",
            "SLURM_SUBMIT_DIR",
            "PATH",
        ] {
            assert!(!is_slurm_task_var(kept), "{kept}");
        }
    }

    #[test]
    fn pe_hostfiles() {
        let text = "n1 2 all.q@n1 UNDEFINED\nn2 1 all.q@n2 <NULL>\n\nn1 1 big.q@n1 0,1\n";
        assert_eq!(
            parse_pe_hostfile(text).unwrap(),
            vec![h("n1", 3), h("n2", 1)]
        );
        assert_eq!(parse_pe_hostfile("n1 4").unwrap(), vec![h("n1", 4)]);
        let e = parse_pe_hostfile("n1 2 q UNDEFINED\nn2 two q UNDEFINED\n").unwrap_err();
        assert!(matches!(e, FileFault::BadLine { line: 2, .. }), "{e}");
        assert!(parse_pe_hostfile("n1\n").is_err());
        assert!(parse_pe_hostfile("n1 0 q x\n").is_err());
        assert_eq!(parse_pe_hostfile("\n"), Err(FileFault::NoHost));
    }

    #[test]
    fn lsb_mcpu_hosts() {
        assert_eq!(
            parse_lsb_mcpu_hosts("a 2 b 1 a 1").unwrap(),
            vec![h("a", 3), h("b", 1)]
        );
        assert!(parse_lsb_mcpu_hosts("a 2 b").is_err());
        assert!(parse_lsb_mcpu_hosts("a b").is_err());
        assert!(parse_lsb_mcpu_hosts(" ").is_err());
    }

    #[test]
    fn pbs_nodefiles() {
        assert_eq!(
            parse_pbs_nodefile("p1\np1\n\np2\n").unwrap(),
            vec![h("p1", 2), h("p2", 1)]
        );
        assert!(matches!(
            parse_pbs_nodefile("p1 np=2\n"),
            Err(FileFault::BadLine { line: 1, .. })
        ));
        assert_eq!(parse_pbs_nodefile(""), Err(FileFault::NoHost));
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(
            expand_tasks_per_node("2(x3),1", 4).unwrap(),
            vec![2, 2, 2, 1]
        );
        assert_eq!(expand_tasks_per_node("", 2).unwrap(), vec![1, 1]);
        assert!(matches!(
            expand_tasks_per_node("2(x3)", 2),
            Err(AllocationError::TasksMismatch { nodes: 2, .. })
        ));
        assert!(matches!(
            expand_tasks_per_node("x", 1),
            Err(AllocationError::TasksPerNode { .. })
        ));
    }

    /// Each allocation error prints the line kauri gave when it was text.
    #[test]
    fn each_allocation_error_prints_its_line() {
        let io = || std::io::Error::from_raw_os_error(2);
        let cases = [
            (
                AllocationError::HostList { list: "n[1-".into() },
                "bad host list \"n[1-\"",
            ),
            (
                AllocationError::HostRange {
                    range: "3-1".into(),
                    list: "n[3-1]".into(),
                },
                "bad host range \"3-1\" in \"n[3-1]\"",
            ),
            (
                AllocationError::TasksPerNode { spec: "x".into() },
                "bad SLURM_TASKS_PER_NODE \"x\"",
            ),
            (
                AllocationError::TasksMismatch {
                    spec: "2(x3)".into(),
                    nodes: 2,
                },
                "SLURM_TASKS_PER_NODE \"2(x3)\" does not match 2 node(s)",
            ),
            (
                AllocationError::Lsf { list: "a b".into() },
                "LSB_MCPU_HOSTS \"a b\": expected \"HOST1 N1 HOST2 N2 ...\"",
            ),
            (
                AllocationError::ReadFile {
                    var: "PE_HOSTFILE",
                    path: "/x".into(),
                    why: io(),
                },
                "cannot read PE_HOSTFILE /x: No such file or directory (os error 2)",
            ),
            (
                AllocationError::File {
                    var: "PE_HOSTFILE",
                    path: "/x".into(),
                    fault: parse_pe_hostfile("n1 2 q u\nn2 two q u\n").unwrap_err(),
                },
                "PE_HOSTFILE /x: line 2: expected \"HOST SLOTS QUEUE PROCESSORS\", got \"n2 two q u\"",
            ),
            (
                AllocationError::File {
                    var: "PBS_NODEFILE",
                    path: "/y".into(),
                    fault: parse_pbs_nodefile("p1 np=2\n").unwrap_err(),
                },
                "PBS_NODEFILE /y: line 1: expected one host name, got \"p1 np=2\"",
            ),
            (
                AllocationError::File {
                    var: "PBS_NODEFILE",
                    path: "/y".into(),
                    fault: FileFault::NoHost,
                },
                "PBS_NODEFILE /y: lists no host",
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }
}
