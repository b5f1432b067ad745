//! Multi-host kauri: the agent tree.
//!
//! Three groups, by what they need (named by prefix, so one group runs with a filter):
//!
//! * `fork_*`: nothing beyond the single-host suite. `-launcher fork` simulates every host
//!   name (`n1` … `n8`) by a local `kauri agent`, each with its own PMI server and node-local
//!   attributes; ranks run locally.
//! * `netns_*`: **root**, network namespaces and sshd (Debian `iproute2`, `openssh-server`,
//!   `openssh-client`). The binary creates 3 hosts with `netns/hosts.sh` once (first test that
//!   needs them) and removes them when it exits; `-launcher ssh -launcher-exec WRAPPER`.
//! * `slurm_*`: **root**, a one-node Slurm (Debian `slurmctld`, `slurmd`, `slurm-client`,
//!   `munge`) started with `slurm/slurm-local.sh` once and stopped when the binary exits;
//!   kauri runs inside an allocation as `salloc -Q -N1 -n4 KAURI -launcher slurm …`.
//!
//! A missing tool or package is a test failure naming the package, never a skip. Every test
//! asserts the exit status (and for failures the stderr line of the contract) and ends with
//! the leftover check. kauri runs from a link in the test's directory (`Ctx::kauri`), so its
//! agents, which default to the front end's own path, are found by the leftover check even
//! where the marker variable does not travel (ssh, srun).

use compat_tests::{
    expand_mapping, find_marked, netns_hosts, proc_argv, proc_environ, proc_exe, processes,
    signal_pid, slurm_local, wait_for_no_marked, Ctx, Job, Launcher, NetnsHosts, Outcome,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// The simulated hosts of the fork tests.
const FORK_HOSTS: [&str; 8] = ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"];

/// How long a test waits for a job to reach a state it inspects (all agents up, all ranks
/// waiting). Generous: 2 cores, other jobs.
const SETTLE: Duration = Duration::from_secs(90);

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string()
}

/// A kauri job run from the test's own link to the binary.
fn kauri_job<S: AsRef<str>>(ctx: &Ctx, args: &[S]) -> Job {
    ctx.job(Launcher::Kauri, args).program(ctx.kauri())
}

fn run(job: Job) -> Outcome {
    let o = job.run();
    eprintln!("=== {}\n{o}", o.launcher);
    o
}

/// `n1:S,n2:S,…` for the first `count` simulated hosts (`:S` left out when `slots` is 0).
fn fork_hosts(count: usize, slots: usize) -> String {
    FORK_HOSTS[..count]
        .iter()
        .map(|h| {
            if slots == 0 {
                h.to_string()
            } else {
                format!("{h}:{slots}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------------------
// Placement

/// Block placement: fill each host's slots in order, wrap around when oversubscribed.
fn block(slots: &[usize], n: usize) -> Vec<usize> {
    let total: usize = slots.iter().sum();
    (0..n)
        .map(|r| {
            let mut k = r % total;
            for (h, &s) in slots.iter().enumerate() {
                if k < s {
                    return h;
                }
                k -= s;
            }
            unreachable!()
        })
        .collect()
}

/// `-map-by node`: round-robin over the hosts.
fn cyclic(hosts: usize, n: usize) -> Vec<usize> {
    (0..n).map(|r| r % hosts).collect()
}

/// (MPI_LOCALRANKID, MPI_LOCALNRANKS) of every rank for a placement.
fn local_ranks(place: &[usize]) -> Vec<(usize, usize)> {
    let mut count: BTreeMap<usize, usize> = BTreeMap::new();
    let ids: Vec<usize> = place
        .iter()
        .map(|h| {
            let c = count.entry(*h).or_default();
            *c += 1;
            *c - 1
        })
        .collect();
    ids.iter()
        .zip(place)
        .map(|(&id, h)| (id, count[h]))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Rank programs made at run time

/// `where.sh`: one line per rank with its rank, size, local rank/count, hostname and the
/// names of its ancestors (to see what started it: an agent, sshd, slurmstepd).
const WHERE_SH: &str = r#"#!/bin/sh
# where.sh: "where: rank=R size=N local=I/L host=H anc=comm,comm,..."
anc=""
p=$PPID
while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    anc="$anc,$(cat /proc/$p/comm 2>/dev/null)"
    p=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f2)
done
echo "where: rank=$PMI_RANK size=$PMI_SIZE local=$MPI_LOCALRANKID/$MPI_LOCALNRANKS host=$(hostname) anc=${anc#,}"
"#;

/// `wait_go.sh FILE [CMD ARGS…]`: waits for FILE to exist (at most 300 s, then exits 9),
/// then runs CMD. Keeps ranks alive while a test inspects or breaks the job.
const WAIT_GO_SH: &str = r#"#!/bin/sh
f=$1
shift
i=0
while [ ! -e "$f" ]; do
    i=$((i + 1))
    [ $i -gt 3000 ] && exit 9
    sleep 0.1
done
[ $# -gt 0 ] && exec "$@"
exit 0
"#;

/// Creates the go file when dropped, so ranks waiting on it finish even if a test fails
/// half way.
struct Go(PathBuf);

impl Go {
    fn new(ctx: &Ctx) -> Go {
        Go(ctx.dir.join("go"))
    }
    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
    fn release(&self) {
        std::fs::write(&self.0, b"go").expect("write the go file");
    }
}

impl Drop for Go {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"go");
    }
}

#[derive(Debug)]
struct Where {
    rank: usize,
    local: (usize, usize),
    host: String,
    ancestors: Vec<String>,
}

/// Parses the `where:` lines: exactly one per rank 0..n-1, with size n.
fn parse_where(o: &Outcome, n: usize) -> Vec<Where> {
    let mut v: Vec<Where> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("where: "))
        .map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|t| t.strip_prefix(&format!("{k}=")))
                    .unwrap_or_else(|| panic!("no {k}= in {l:?}\n{o}"))
                    .to_string()
            };
            assert_eq!(field("size"), n.to_string(), "{l}\n{o}");
            let local = field("local");
            let (a, b) = local
                .split_once('/')
                .unwrap_or_else(|| panic!("bad local= in {l:?}\n{o}"));
            Where {
                rank: field("rank")
                    .parse()
                    .unwrap_or_else(|_| panic!("bad rank in {l:?}\n{o}")),
                local: (
                    a.parse()
                        .unwrap_or_else(|_| panic!("MPI_LOCALRANKID unset in {l:?}\n{o}")),
                    b.parse()
                        .unwrap_or_else(|_| panic!("MPI_LOCALNRANKS unset in {l:?}\n{o}")),
                ),
                host: field("host"),
                ancestors: field("anc").split(',').map(str::to_string).collect(),
            }
        })
        .collect();
    v.sort_by_key(|w| w.rank);
    assert_eq!(
        v.iter().map(|w| w.rank).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>(),
        "want one where: line per rank\n{o}"
    );
    v
}

/// Local rank ids and counts must follow the placement; with `names`, each rank's hostname
/// must be its host's name (namespace hosts have their own hostname).
fn check_where(o: &Outcome, place: &[usize], names: Option<&[String]>) -> Vec<Where> {
    let w = parse_where(o, place.len());
    let want = local_ranks(place);
    let got: Vec<(usize, usize)> = w.iter().map(|w| w.local).collect();
    assert_eq!(
        got, want,
        "MPI_LOCALRANKID/MPI_LOCALNRANKS per rank do not match the placement {place:?}\n{o}"
    );
    if let Some(names) = names {
        let got: Vec<&str> = w.iter().map(|w| w.host.as_str()).collect();
        let want: Vec<&str> = place.iter().map(|&h| names[h].as_str()).collect();
        assert_eq!(got, want, "ranks ran on the wrong hosts\n{o}");
    }
    w
}

/// Checks `<tool>: ok rank=R size=N … mapping=M …` lines: one per rank, every mapping
/// expands to `place`, each line has the `extra` tokens.
fn check_pmi_lines(o: &Outcome, tool: &str, place: &[usize], extra: &[&str]) {
    let n = place.len();
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{tool}: ")))
        .collect();
    assert_eq!(lines.len(), n, "want {n} {tool} lines\n{o}");
    let mut ranks = Vec::new();
    for l in &lines {
        assert!(
            l.starts_with(&format!("{tool}: ok ")),
            "bad line {l:?}\n{o}"
        );
        let toks: Vec<&str> = l.split_whitespace().collect();
        let field = |k: &str| {
            toks.iter()
                .find_map(|t| t.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k}= in {l:?}\n{o}"))
        };
        ranks.push(field("rank").parse::<usize>().unwrap());
        assert_eq!(field("size"), n.to_string(), "{l}\n{o}");
        let mapping = field("mapping");
        assert_eq!(
            expand_mapping(mapping, n).as_deref(),
            Some(place),
            "PMI_process_mapping {mapping:?} does not describe the placement {place:?}\n{o}"
        );
        for e in extra {
            assert!(toks.contains(e), "{l:?} lacks {e}\n{o}");
        }
    }
    ranks.sort();
    assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "{o}");
}

fn hello_lines(hosts: &[String]) -> Vec<String> {
    let n = hosts.len();
    let mut v: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(r, h)| format!("hello rank {r} of {n} on {h}"))
        .collect();
    v.sort();
    v
}

fn assert_lines(o: &Outcome, mut want: Vec<String>) {
    let mut got: Vec<String> = o.stdout.lines().map(str::to_string).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "wrong stdout\n{o}");
}

fn assert_stderr_line(o: &Outcome, what: &str, pred: impl Fn(&str) -> bool) {
    assert!(o.stderr.lines().any(pred), "no stderr line {what}\n{o}");
}

fn assert_failed(o: &Outcome) {
    assert!(
        o.code.is_some_and(|c| c != 0),
        "the job must end with a non-zero exit status (not a signal)\n{o}"
    );
}

// ---------------------------------------------------------------------------------------
// The processes of a running job

/// kauri processes of this test: the front end and its agents (their executable is the
/// test's link to kauri), each with its parent in the tree (the nearest kauri ancestor).
/// Keepers (`ranks-keeper`, forked or `kauri --keeper`, one beside every process that starts
/// ranks) are left out.
#[derive(Debug)]
struct Tree {
    front_end: Option<u32>,
    /// agent pid -> pid of the nearest kauri ancestor (front end or agent), if any
    agents: BTreeMap<u32, Option<u32>>,
}

fn kauri_tree(ctx: &Ctx) -> Tree {
    let exe = ctx.kauri();
    let procs = processes();
    let ppid: BTreeMap<u32, u32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let ours: BTreeSet<u32> = procs
        .iter()
        .filter(|p| p.state != 'Z' && proc_exe(p.pid).as_deref() == Some(exe.as_path()))
        .map(|p| p.pid)
        .collect();
    let mut front_end = None;
    let mut agents = BTreeMap::new();
    let keepers: BTreeSet<u32> = procs
        .iter()
        .filter(|p| p.comm == "ranks-keeper")
        .map(|p| p.pid)
        .collect();
    for &pid in &ours {
        let argv = proc_argv(pid);
        if keepers.contains(&pid) || argv.get(1).map(String::as_str) == Some("--keeper") {
            // A keeper (crates/kauri-host/src/keeper.rs): neither the front end nor an agent.
            continue;
        }
        if argv.get(1).map(String::as_str) == Some("agent") {
            let mut p = ppid.get(&pid).copied();
            while let Some(q) = p {
                if q <= 1 || ours.contains(&q) {
                    break;
                }
                p = ppid.get(&q).copied();
            }
            agents.insert(pid, p.filter(|q| ours.contains(q)));
        } else {
            front_end = Some(pid);
        }
    }
    Tree { front_end, agents }
}

/// Processes of the test running the script `name` (`sh …/name …` or `…/name …`; not the
/// launcher, whose arguments name it too).
fn count_running(ctx: &Ctx, name: &str) -> usize {
    find_marked(&ctx.marker, &ctx.dir)
        .iter()
        .filter(|p| {
            p.state != 'Z'
                && proc_argv(p.pid)
                    .iter()
                    .take(2)
                    .any(|a| a.ends_with(&format!("/{name}")))
        })
        .count()
}

/// Waits until the job has `agents` agents and `ranks` processes running `wait_go.sh`;
/// returns the tree. Fails the test (releasing the job) if that does not happen within
/// [`SETTLE`] of the front end's start (jobs run one at a time: the front end itself may
/// wait for another test's job).
fn settle(ctx: &Ctx, agents: usize, ranks: usize) -> Tree {
    let mut started: Option<Instant> = None;
    let begin = Instant::now();
    loop {
        let t = kauri_tree(ctx);
        let r = count_running(ctx, "wait_go.sh");
        if t.front_end.is_some() && t.agents.len() == agents && r == ranks {
            return t;
        }
        if t.front_end.is_some() && started.is_none() {
            started = Some(Instant::now());
        }
        let late = match started {
            Some(s) => s.elapsed() > SETTLE,
            None => begin.elapsed() > Duration::from_secs(400),
        };
        if late {
            panic!(
                "the job did not reach {agents} agents and {ranks} waiting ranks within \
                 {SETTLE:?} of its start: {} agents, {r} ranks; tree {t:?}",
                t.agents.len()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `job` on a thread (so the test can act on it while it runs).
fn spawn(job: Job) -> thread::JoinHandle<Outcome> {
    thread::spawn(move || job.run())
}

fn join(h: thread::JoinHandle<Outcome>) -> Outcome {
    let o = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
    eprintln!("=== {}\n{o}", o.launcher);
    o
}

/// The host named by an agent's command line, if exactly one of `hosts` is one of its
/// arguments.
fn agent_host(pid: u32, hosts: &[String]) -> Option<String> {
    let argv = proc_argv(pid);
    let named: Vec<&String> = hosts.iter().filter(|h| argv.contains(h)).collect();
    (named.len() == 1).then(|| named[0].clone())
}

/// Asserts the stderr line `kauri: agent on HOST died` for one of `hosts` (`want` if known).
fn assert_agent_died(o: &Outcome, hosts: &[String], want: Option<&str>) {
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("kauri: agent on ") && l.contains(" died"))
        .unwrap_or_else(|| panic!("no stderr line `kauri: agent on HOST died`\n{o}"));
    match want {
        Some(h) => assert!(
            o.stderr
                .lines()
                .any(|l| l.starts_with(&format!("kauri: agent on {h} died"))),
            "no stderr line `kauri: agent on {h} died`\n{o}"
        ),
        None => assert!(
            hosts
                .iter()
                .any(|h| line.starts_with(&format!("kauri: agent on {h} died"))),
            "{line:?} names none of the hosts {hosts:?}\n{o}"
        ),
    }
}

// =======================================================================================
// (a) 8 simulated hosts: -launcher fork

fn fork_args(
    hosts: &str,
    map_by_node: bool,
    extra: &[&str],
    n: usize,
    prog: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-launcher".into(),
        "fork".into(),
        "-hosts".into(),
        hosts.into(),
    ];
    if map_by_node {
        a.extend(["-map-by".into(), "node".into()]);
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend(["-n".into(), n.to_string()]);
    a.extend(prog.iter().map(|s| s.to_string()));
    a
}

/// 16 ranks on n1:2 … n8:2: block puts ranks 2h, 2h+1 on host h; `-map-by node` puts rank
/// r on host r % 8.
fn fork_place(map_by_node: bool) -> Vec<usize> {
    if map_by_node {
        cyclic(8, 16)
    } else {
        block(&[2; 8], 16)
    }
}

/// hello on 16 ranks and where.sh on 16 ranks: output, status, local ranks per host.
fn fork_hello(name: &str, map_by_node: bool) {
    let ctx = Ctx::new(name);
    let hosts = fork_hosts(8, 2);
    let place = fork_place(map_by_node);
    let o = run(kauri_job(
        &ctx,
        &fork_args(&hosts, map_by_node, &[], 16, &[&ctx.prog("hello")]),
    ));
    o.assert_success();
    assert_lines(&o, hello_lines(&vec![hostname(); 16]));
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(
        &ctx,
        &fork_args(&hosts, map_by_node, &[], 16, &[&w]),
    ));
    o.assert_success();
    let w = check_where(&o, &place, None);
    // Each rank was started by a kauri process (an agent).
    for r in &w {
        assert!(
            r.ancestors.iter().any(|a| a == "kauri"),
            "rank {} was not started by kauri: {:?}",
            r.rank,
            r.ancestors
        );
    }
    ctx.assert_no_leftovers();
}

#[test]
fn fork_hello_block() {
    fork_hello("fork_hello_block", false);
}

#[test]
fn fork_hello_map_by_node() {
    fork_hello("fork_hello_map_by_node", true);
}

fn fork_ring(name: &str, map_by_node: bool) {
    let ctx = Ctx::new(name);
    let o = run(kauri_job(
        &ctx,
        &fork_args(
            &fork_hosts(8, 2),
            map_by_node,
            &[],
            16,
            &[&ctx.prog("ring")],
        ),
    ));
    o.assert_success();
    // 10 rounds, each adds 1 + 2 + … + 16 = 136.
    assert_lines(&o, vec!["ring: ok size=16 rounds=10 token=1360".into()]);
    ctx.assert_no_leftovers();
}

#[test]
fn fork_ring_block() {
    fork_ring("fork_ring_block", false);
}

#[test]
fn fork_ring_map_by_node() {
    fork_ring("fork_ring_map_by_node", true);
}

fn fork_collectives(name: &str, map_by_node: bool) {
    let ctx = Ctx::new(name);
    let o = run(kauri_job(
        &ctx,
        &fork_args(
            &fork_hosts(8, 2),
            map_by_node,
            &[],
            16,
            &[&ctx.prog("collectives")],
        ),
    ));
    o.assert_success();
    // sum of (r+1)^2 for r < 16 = 1496, max = 256
    assert_lines(
        &o,
        (0..16)
            .map(|r| format!("collectives: ok rank={r} size=16 sum=1496 max=256 alltoall=ok"))
            .collect(),
    );
    ctx.assert_no_leftovers();
}

#[test]
fn fork_collectives_block() {
    fork_collectives("fork_collectives_block", false);
}

#[test]
fn fork_collectives_map_by_node() {
    fork_collectives("fork_collectives_map_by_node", true);
}

/// Slurm's libpmi2: put/fence/get across hosts, `PMI_process_mapping`, and node attributes
/// (local rank 0 of each host puts, the others of that host read with wait).
fn fork_libpmi2(name: &str, map_by_node: bool) {
    let ctx = Ctx::new(name);
    let o = run(kauri_job(
        &ctx,
        &fork_args(
            &fork_hosts(8, 2),
            map_by_node,
            &[],
            16,
            &[&ctx.prog("libpmi2_check")],
        ),
    ));
    o.assert_success();
    check_pmi_lines(
        &o,
        "libpmi2_check",
        &fork_place(map_by_node),
        &["appnum=0", "peers=16", "nodeattr=ok"],
    );
    ctx.assert_no_leftovers();
}

#[test]
fn fork_libpmi2_block() {
    fork_libpmi2("fork_libpmi2_block", false);
}

#[test]
fn fork_libpmi2_map_by_node() {
    fork_libpmi2("fork_libpmi2_map_by_node", true);
}

fn fork_pmi_load(name: &str, version: &str, map_by_node: bool) {
    let ctx = Ctx::new(name);
    let o = run(kauri_job(
        &ctx,
        &fork_args(
            &fork_hosts(8, 2),
            map_by_node,
            &[],
            16,
            &[&ctx.pmi_load(), "--pmi", version],
        ),
    ));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &fork_place(map_by_node), &["checked=15"]);
    ctx.assert_no_leftovers();
}

#[test]
fn fork_pmi_load_v1_block() {
    fork_pmi_load("fork_pmi_load_v1_block", "1", false);
}

#[test]
fn fork_pmi_load_v1_map_by_node() {
    fork_pmi_load("fork_pmi_load_v1_map_by_node", "1", true);
}

#[test]
fn fork_pmi_load_v2_block() {
    fork_pmi_load("fork_pmi_load_v2_block", "2", false);
}

#[test]
fn fork_pmi_load_v2_map_by_node() {
    fork_pmi_load("fork_pmi_load_v2_map_by_node", "2", true);
}

/// Uneven slots, oversubscribed: `n1:3,n2:1,n3:2` with 8 ranks fills 0,0,0,1,2,2 then wraps
/// to n1 (0,0). PMI-1 mapping and local ranks must say so.
#[test]
fn fork_block_uneven_wraps() {
    let ctx = Ctx::new("fork_block_uneven");
    let place = block(&[3, 1, 2], 8);
    assert_eq!(place, [0, 0, 0, 1, 2, 2, 0, 0]);
    let hosts = "n1:3,n2:1,n3:2";
    let o = run(kauri_job(
        &ctx,
        &fork_args(hosts, false, &[], 8, &[&ctx.pmi_load(), "--pmi", "1"]),
    ));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &place, &["checked=7"]);
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(&ctx, &fork_args(hosts, false, &[], 8, &[&w])));
    o.assert_success();
    check_where(&o, &place, None);
    ctx.assert_no_leftovers();
}

/// `-ppn 2` on 8 hosts without slot counts: 2 consecutive ranks per host.
#[test]
fn fork_ppn2() {
    let ctx = Ctx::new("fork_ppn2");
    let place = block(&[2; 8], 16);
    let args = fork_args(
        &fork_hosts(8, 0),
        false,
        &["-ppn", "2"],
        16,
        &[&ctx.pmi_load(), "--pmi", "2"],
    );
    let o = run(kauri_job(&ctx, &args));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &place, &["checked=15"]);
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(
        &ctx,
        &fork_args(&fork_hosts(8, 0), false, &["-ppn", "2"], 16, &[&w]),
    ));
    o.assert_success();
    check_where(&o, &place, None);
    ctx.assert_no_leftovers();
}

/// `-f FILE` with the three line forms: `n1`, `n2:2`, `n3 slots=3`.
#[test]
fn fork_hostfile() {
    let ctx = Ctx::new("fork_hostfile");
    let file = ctx.dir.join("hosts.txt");
    std::fs::write(&file, "n1\nn2:2\nn3 slots=3\n").unwrap();
    let file = file.to_string_lossy().into_owned();
    let place = block(&[1, 2, 3], 6);
    assert_eq!(place, [0, 1, 1, 2, 2, 2]);
    let o = run(kauri_job(
        &ctx,
        &[
            "-launcher",
            "fork",
            "-f",
            &file,
            "-n",
            "6",
            &ctx.prog("libpmi2_check"),
        ],
    ));
    o.assert_success();
    check_pmi_lines(
        &o,
        "libpmi2_check",
        &place,
        &["appnum=0", "peers=6", "nodeattr=ok"],
    );
    ctx.assert_no_leftovers();
}

/// A rank that exits with code 3 on simulated host n3: the report names n3.
#[test]
fn fork_rank_exit_names_host() {
    let ctx = Ctx::new("fork_rank_exit");
    let s = ctx.script(
        "exit3.sh",
        "#!/bin/sh\n[ \"$PMI_RANK\" = 2 ] && exit 3\nsleep 2\n",
    );
    let o = run(kauri_job(
        &ctx,
        &fork_args(&fork_hosts(3, 0), false, &[], 3, &[&s]),
    ));
    // mpiexec.hydra 4.0.2 ends this job with status 3 (measured on one host).
    o.assert_code(3);
    assert_stderr_line(&o, "`rank 2 (pid P) on n3 exited with code 3`", |l| {
        l.contains("rank 2 (pid ") && l.contains(") on n3 exited with code 3")
    });
    ctx.assert_no_leftovers();
}

// ---------------------------------------------------------------------------------------
// Tree widths

#[derive(Clone, Copy, Debug)]
enum Width {
    /// `--tree-width K`
    Arg(usize),
    /// `--tree-width flat`
    FlatWord,
    /// `KAURI_TREE_WIDTH=K`
    Env(usize),
}

impl Width {
    fn k(self) -> usize {
        match self {
            Width::Arg(k) | Width::Env(k) => k,
            Width::FlatWord => 0,
        }
    }
}

/// 8 hosts, 8 ranks held in wait_go.sh while the agent tree is inspected: 8 agents; flat:
/// all children of the front end; K >= 1: nobody has more than K agent children (K = 1: a
/// chain 8 deep). Then the ranks run where.sh (placement), and hello and pmi-load v2 run
/// with the same width.
fn fork_tree(name: &str, width: Width) {
    let ctx = Ctx::new(name);
    let hosts = fork_hosts(8, 0);
    let (extra, env): (Vec<String>, Option<String>) = match width {
        Width::Arg(k) => (vec!["--tree-width".into(), k.to_string()], None),
        Width::FlatWord => (vec!["--tree-width".into(), "flat".into()], None),
        Width::Env(k) => (vec![], Some(k.to_string())),
    };
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let with_env = |j: Job| match &env {
        Some(k) => j.env("KAURI_TREE_WIDTH", k),
        None => j,
    };

    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let w = ctx.script("where.sh", WHERE_SH);
    let job = with_env(kauri_job(
        &ctx,
        &fork_args(&hosts, false, &extra, 8, &[&wait, &go.path(), &w]),
    ));
    let h = spawn(job);
    let tree = settle(&ctx, 8, 8);
    let fe = tree.front_end.unwrap();
    let mut children: BTreeMap<u32, usize> = BTreeMap::new();
    for (a, p) in &tree.agents {
        let p = p.unwrap_or_else(|| panic!("agent {a} has no kauri ancestor: {tree:?}"));
        *children.entry(p).or_default() += 1;
    }
    let depth = |mut a: u32| {
        let mut d = 0;
        while a != fe {
            d += 1;
            a = tree.agents[&a].unwrap();
            assert!(d <= 8, "cycle in {tree:?}");
        }
        d
    };
    let max_depth = tree.agents.keys().map(|&a| depth(a)).max().unwrap();
    go.release();
    let o = join(h);
    eprintln!("tree {tree:?}: children {children:?}, depth {max_depth}");
    match width.k() {
        0 => assert!(
            tree.agents.values().all(|p| *p == Some(fe)),
            "flat: every agent must be a child of the front end: {tree:?}"
        ),
        k => {
            assert!(
                children.values().all(|&c| c <= k),
                "width {k}: someone has more than {k} agent children: {children:?} {tree:?}"
            );
            if k == 1 {
                assert_eq!(max_depth, 8, "width 1 must be a chain: {tree:?}");
            }
        }
    }
    o.assert_success();
    check_where(&o, &block(&[1; 8], 8), None);

    let o = run(with_env(kauri_job(
        &ctx,
        &fork_args(&hosts, false, &extra, 8, &[&ctx.prog("hello")]),
    )));
    o.assert_success();
    assert_lines(&o, hello_lines(&vec![hostname(); 8]));
    let o = run(with_env(kauri_job(
        &ctx,
        &fork_args(&hosts, true, &extra, 16, &[&ctx.pmi_load(), "--pmi", "2"]),
    )));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &cyclic(8, 16), &["checked=15"]);
    ctx.assert_no_leftovers();
}

#[test]
fn fork_tree_width_1_chain() {
    fork_tree("fork_tree_w1", Width::Arg(1));
}

#[test]
fn fork_tree_width_2() {
    fork_tree("fork_tree_w2", Width::Arg(2));
}

#[test]
fn fork_tree_width_0_flat() {
    fork_tree("fork_tree_w0", Width::Arg(0));
}

#[test]
fn fork_tree_width_flat_word() {
    fork_tree("fork_tree_flat", Width::FlatWord);
}

#[test]
fn fork_tree_width_env_2() {
    fork_tree("fork_tree_env2", Width::Env(2));
}

// ---------------------------------------------------------------------------------------
// (d) failures on simulated hosts

fn fork_names(count: usize) -> Vec<String> {
    FORK_HOSTS[..count].iter().map(|s| s.to_string()).collect()
}

/// SIGKILL one agent while its ranks run: the job ends non-zero with `kauri: agent on HOST
/// died`, every rank on every host is gone.
#[test]
fn fork_agent_killed() {
    let ctx = Ctx::new("fork_agent_killed");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let h = spawn(kauri_job(
        &ctx,
        &fork_args(&fork_hosts(4, 0), false, &[], 4, &[&wait, &go.path()]),
    ));
    let tree = settle(&ctx, 4, 4);
    // A leaf: its death affects only itself (whatever the default tree width).
    let parents: BTreeSet<u32> = tree.agents.values().flatten().copied().collect();
    let victim = *tree
        .agents
        .keys()
        .rev()
        .find(|a| !parents.contains(a))
        .unwrap();
    let host = agent_host(victim, &fork_names(4));
    eprintln!("killing agent {victim} ({host:?}) of {tree:?}");
    assert!(signal_pid(victim, "KILL"));
    let o = join(h);
    drop(go);
    assert_failed(&o);
    assert_agent_died(&o, &fork_names(4), host.as_deref());
    ctx.assert_no_leftovers();
}

/// `--tree-width 1` (a chain n1 → n2 → n3 → n4): SIGKILL the agent of depth 2. The agents
/// below it lose their parent: they must kill their ranks and exit by themselves (the front
/// end cannot reach them). The job ends non-zero naming the dead agent's host.
#[test]
fn fork_chain_parent_killed() {
    let ctx = Ctx::new("fork_chain_parent_killed");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let h = spawn(kauri_job(
        &ctx,
        &fork_args(
            &fork_hosts(4, 0),
            false,
            &["--tree-width", "1"],
            4,
            &[&wait, &go.path()],
        ),
    ));
    let tree = settle(&ctx, 4, 4);
    let fe = tree.front_end.unwrap();
    let first = *tree
        .agents
        .iter()
        .find(|(_, p)| **p == Some(fe))
        .unwrap_or_else(|| panic!("no agent under the front end: {tree:?}"))
        .0;
    let second = *tree
        .agents
        .iter()
        .find(|(_, p)| **p == Some(first))
        .unwrap_or_else(|| panic!("no agent under agent {first}: {tree:?}"))
        .0;
    let below: Vec<u32> = tree
        .agents
        .keys()
        .copied()
        .filter(|&a| a != first && a != second)
        .collect();
    let host = agent_host(second, &fork_names(4));
    eprintln!("killing agent {second} ({host:?}), parent of {below:?}, in {tree:?}");
    assert!(signal_pid(second, "KILL"));
    let o = join(h);
    drop(go);
    assert_failed(&o);
    assert_agent_died(&o, &fork_names(4), host.as_deref());
    wait_for_no_marked(&ctx.marker, &ctx.dir, Duration::from_secs(30));
    ctx.assert_no_leftovers();
}

/// SIGKILL the front end itself: every agent loses its parent and must kill its ranks and
/// exit (nobody else is left to clean up).
#[test]
fn fork_front_end_killed() {
    let ctx = Ctx::new("fork_front_end_killed");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let h = spawn(kauri_job(
        &ctx,
        &fork_args(&fork_hosts(4, 0), false, &[], 4, &[&wait, &go.path()]),
    ));
    let tree = settle(&ctx, 4, 4);
    let fe = tree.front_end.unwrap();
    assert!(signal_pid(fe, "KILL"));
    let o = join(h);
    assert_eq!(o.signal, Some(9), "{o}");
    wait_for_no_marked(&ctx.marker, &ctx.dir, Duration::from_secs(30));
    drop(go);
    ctx.assert_no_leftovers();
}

/// Runs `cmd` in the network namespace of `pid` (the namespace hosts' agents live in
/// their own); stdout.
fn in_netns_of(pid: u32, cmd: &[&str]) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("run nsenter (Debian package util-linux): {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Listening TCP sockets of `pid` (from `ss -ltnp`, run in its network namespace), as
/// addresses to connect to from here: a wildcard address becomes 127.0.0.1 in our own
/// namespace, the host's global IPv4 address in another.
fn listening(pid: u32) -> Vec<SocketAddr> {
    let ours = std::fs::read_link("/proc/self/ns/net").ok();
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let wildcard = if theirs.is_none() || theirs == ours {
        "127.0.0.1".to_string()
    } else {
        in_netns_of(pid, &["ip", "-4", "-o", "addr", "show", "scope", "global"])
            .split_whitespace()
            .skip_while(|t| *t != "inet")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .unwrap_or("127.0.0.1")
            .to_string()
    };
    let tag = format!("pid={pid},");
    in_netns_of(pid, &["ss", "-H", "-ltnp"])
        .lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| {
            let local = l.split_whitespace().nth(3)?;
            let (ip, port) = local.rsplit_once(':')?;
            let ip = match ip {
                "0.0.0.0" | "*" | "[::]" | "[::ffff:0.0.0.0]" => wildcard.as_str(),
                ip => ip.trim_start_matches('[').trim_end_matches(']'),
            };
            let ip = ip.split('%').next()?;
            format!("{ip}:{port}")
                .parse()
                .ok()
                .or_else(|| format!("[{ip}]:{port}").parse().ok())
        })
        .collect()
}

/// Connects to `addr`, sends garbage, waits (bounded) for the peer to close; returns the
/// local address of the connection (what kauri should name).
/// The resident set of process `pid`, in kB (`VmRSS`).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no VmRSS for pid {pid}"))
}

fn poke(addr: SocketAddr) -> SocketAddr {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let me = s.local_addr().unwrap();
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\nnot-the-job-key \x00\x01\x02\xff\n");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    me
}

/// Connects without the job key to every listening port of the front end and of every
/// agent while ranks wait; each connection is refused with `kauri: refused a connection
/// from ADDR: …` and the job then finishes correctly (hello after the pokes). The jobs are
/// PMI jobs (`--pmi=pmi1`): `auto` serves a wrapped MPICH program PMIx as well, and the PMIx
/// server's own listening port is not one kauri answers for.
fn unauthenticated(ctx: &Ctx, args_before_prog: &[String], ranks: usize, agents: usize) {
    let go = Go::new(ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let mut args = args_before_prog.to_vec();
    args.extend([wait.clone(), go.path(), ctx.prog("hello")]);
    let h = spawn(kauri_job(ctx, &args));
    let tree = settle(ctx, agents, ranks);
    let fe = tree.front_end.unwrap();
    let mut ports: Vec<SocketAddr> = listening(fe);
    assert!(
        !ports.is_empty(),
        "the front end (pid {fe}) listens on no TCP port (ss -ltnp)"
    );
    for a in tree.agents.keys() {
        ports.extend(listening(*a));
    }
    let poked: Vec<SocketAddr> = ports.iter().map(|&a| poke(a)).collect();
    eprintln!("poked {ports:?} from {poked:?}");
    go.release();
    let o = join(h);
    o.assert_success();
    let hello: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("hello "))
        .collect();
    assert_eq!(hello.len(), ranks, "{o}");
    for me in poked {
        assert_stderr_line(
            &o,
            &format!("`kauri: refused a connection from {me}: …`"),
            |l| {
                l.starts_with("kauri: refused a connection from ")
                    && (l.contains(&format!("{me}:")) || l.contains(&format!("{me} ")))
            },
        );
    }
}

#[test]
fn fork_unauthenticated_connection_refused() {
    let ctx = Ctx::new("fork_unauth");
    let extra = ["--tree-width", "2", "--pmi=pmi1"];
    let args = fork_args(&fork_hosts(4, 0), false, &extra, 4, &[]);
    unauthenticated(&ctx, &args, 4, 4);
    ctx.assert_no_leftovers();
}

/// 900 connections without the job key to the front end's agent port, then 100 more held
/// open at once without a word, while the ranks wait: only the first 3 refusals are named
/// (`kauri: refused a connection from …`), the rest come as summary lines (`kauri: refused N
/// more connections (…)`) that count all 997; at most 64 handshakes are in progress at once,
/// so of the 100 silent connections the excess is closed at once, counted as refused for
/// that. (Every refusal used to print its own line.) The 1,000 connections leave the front
/// end's memory where it was (under 8 MiB of growth in its resident set). The job goes on and
/// succeeds; a summary not yet due when it ends is printed at its end.
#[test]
fn fork_refused_connections_are_summarised() {
    let ctx = Ctx::new("fork_refused_summary");
    let (ranks, agents) = (2, 2);
    let args = fork_args(&fork_hosts(2, 0), false, &[], ranks, &[]);
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let mut args = args.to_vec();
    args.extend([wait.clone(), go.path(), ctx.prog("hello")]);
    let h = spawn(kauri_job(&ctx, &args));
    let tree = settle(&ctx, agents, ranks);
    let fe = tree.front_end.unwrap();
    let port = *listening(fe)
        .first()
        .unwrap_or_else(|| panic!("the front end (pid {fe}) listens on no TCP port"));
    let rss_before = rss_kb(fe);
    for _ in 0..900 {
        poke(port);
    }
    // 100 silent connections at once; each is closed by kauri, at once or after the 10 s
    // handshake limit.
    let silent: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect_timeout(&port, Duration::from_secs(10)).unwrap())
        .collect();
    for mut s in silent {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    }
    let rss_after = rss_kb(fe);
    // No pause: a summary still held when the job ends is printed at its end.
    go.release();
    let o = join(h);
    o.assert_success();
    eprintln!("front end's resident set: {rss_before} kB before the 1,000 connections, {rss_after} kB after");
    assert!(
        rss_after < rss_before + 8 * 1024,
        "1,000 unauthenticated connections grew the front end from {rss_before} kB to {rss_after} kB\n{o}"
    );
    let named = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("kauri: refused a connection from "))
        .count();
    assert_eq!(named, 3, "only the first 3 refusals are named\n{o}");
    let summaries: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("kauri: refused ") && l.contains(" more connection"))
        .collect();
    let counted: usize = summaries
        .iter()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<usize>().ok())
        .sum();
    assert_eq!(counted, 997, "the summaries count every other refusal\n{o}");
    assert!(
        summaries
            .iter()
            .any(|l| l.contains("over the handshake limit (64 at once)")),
        "connections beyond 64 handshakes at once are refused at once\n{o}"
    );
    ctx.assert_no_leftovers();
}

/// No command line of any process on the machine contains `KAURI_JOB_KEY` or the value of
/// the job key while a job runs (values are taken from the environment of the test's
/// processes, where a launcher may legitimately pass it). Returns how many key values were
/// seen.
fn key_not_on_command_lines(
    ctx: &Ctx,
    args_before_prog: &[String],
    ranks: usize,
    agents: usize,
) -> usize {
    let go = Go::new(ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let mut args = args_before_prog.to_vec();
    args.extend([wait.clone(), go.path()]);
    let h = spawn(kauri_job(ctx, &args));
    let tree = settle(ctx, agents, ranks);
    let mut pids: Vec<u32> = tree.agents.keys().copied().collect();
    pids.extend(tree.front_end);
    pids.extend(find_marked(&ctx.marker, &ctx.dir).iter().map(|p| p.pid));
    let keys: BTreeSet<String> = pids
        .iter()
        .flat_map(|&p| proc_environ(p))
        .filter_map(|e| e.strip_prefix("KAURI_JOB_KEY=").map(str::to_string))
        .filter(|v| v.len() >= 8)
        .collect();
    // The variable's name on the command line of any process of the job (the test's own,
    // the agents, ssh clients and remote shells: their command lines name the test's
    // directory); a key value on any command line at all.
    let job: BTreeSet<u32> = pids.iter().copied().collect();
    let mut bad = Vec::new();
    for p in processes() {
        if (job.contains(&p.pid) && p.cmdline.contains("KAURI_JOB_KEY"))
            || keys.iter().any(|k| p.cmdline.contains(k))
        {
            bad.push(format!("pid {} {:?}", p.pid, p.cmdline));
        }
    }
    go.release();
    let o = join(h);
    o.assert_success();
    assert!(
        bad.is_empty(),
        "the job key is on a command line:\n{}",
        bad.join("\n")
    );
    keys.len()
}

#[test]
fn fork_key_not_on_command_lines() {
    let ctx = Ctx::new("fork_key");
    let args = fork_args(&fork_hosts(4, 0), false, &["--tree-width", "2"], 4, &[]);
    let n = key_not_on_command_lines(&ctx, &args, 4, 4);
    eprintln!("{n} job key value(s) seen in environments");
    ctx.assert_no_leftovers();
}

// =======================================================================================
// (b) 3 namespace hosts through -launcher ssh (root)

fn ssh_args(
    hosts: &NetnsHosts,
    host_list: &str,
    extra: &[&str],
    n: usize,
    prog: &[&str],
) -> Vec<String> {
    let mut a = hosts.ssh_launch(host_list);
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend(["-n".into(), n.to_string()]);
    a.extend(prog.iter().map(|s| s.to_string()));
    a
}

/// The set-up is usable by a launcher: MPICH's own mpiexec.hydra runs hello across the 3
/// hosts over the same ssh wrapper (it needs `-iface BRIDGE`: by default it tells its
/// proxies to connect back to this machine's hostname, which resolves to 127.0.0.1).
#[test]
fn netns_hydra_sanity() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_hydra");
    let o = run(ctx.job(
        Launcher::Hydra,
        &[
            "-iface",
            &hosts.bridge,
            "-launcher",
            "ssh",
            "-launcher-exec",
            &hosts.ssh.to_string_lossy(),
            "-hosts",
            &hosts.addrs.join(","),
            "-n",
            "3",
            &ctx.prog("hello"),
        ],
    ));
    o.assert_success();
    assert_lines(&o, hello_lines(&hosts.names));
    ctx.assert_no_leftovers();
}

/// An MPICH ring across the 3 hosts, then hello placed one rank per host.
#[test]
fn netns_ring() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_ring");
    let list = hosts.addrs.join(",");
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &list, &[], 3, &[&ctx.prog("ring")]),
    ));
    o.assert_success();
    assert_lines(&o, vec!["ring: ok size=3 rounds=10 token=60".into()]);
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &list, &[], 3, &[&ctx.prog("hello")]),
    ));
    o.assert_success();
    assert_lines(&o, hello_lines(&hosts.names));
    ctx.assert_no_leftovers();
}

/// `-launcher rsh` takes the same path as ssh (here with the ssh wrapper as the program).
#[test]
fn netns_rsh_launcher() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_rsh");
    let mut args = ssh_args(
        &hosts,
        &hosts.addrs.join(","),
        &[],
        3,
        &[&ctx.prog("hello")],
    );
    args[1] = "rsh".into();
    let o = run(kauri_job(&ctx, &args));
    o.assert_success();
    assert_lines(&o, hello_lines(&hosts.names));
    ctx.assert_no_leftovers();
}

/// `-ppn 2`: 6 ranks, 2 per host; local ranks and hostnames per rank checked with where.sh.
#[test]
fn netns_hello_ppn2() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_ppn2");
    let list = hosts.addrs.join(",");
    let place = block(&[2, 2, 2], 6);
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &list, &["-ppn", "2"], 6, &[&ctx.prog("hello")]),
    ));
    o.assert_success();
    let names: Vec<String> = place.iter().map(|&h| hosts.names[h].clone()).collect();
    assert_lines(&o, hello_lines(&names));
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &list, &["-ppn", "2"], 6, &[&w]),
    ));
    o.assert_success();
    check_where(&o, &place, Some(&hosts.names));
    ctx.assert_no_leftovers();
}

/// `-iface BRIDGE`: the agents on the namespace hosts connect back to this machine's
/// address on that interface, even with `KAURI_ADDR` pointing where they cannot reach
/// (loopback; without `-iface` the agents are refused there): the interface decides. Each
/// rank is told the interface by name (`MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE`, as Hydra
/// does) and no host address.
#[test]
fn netns_iface_decides_where_agents_connect() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_iface");
    let list = hosts.addrs.join(",");
    let w = ctx.script(
        "iface.sh",
        "#!/bin/sh\necho \"$KAURI_RANK ${MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE:-none} \
         ${MPIR_CVAR_CH3_INTERFACE_HOSTNAME:-none}\"\n",
    );
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &list, &["-iface", &hosts.bridge], 3, &[&w]),
    )
    .env("KAURI_ADDR", "127.0.0.1"));
    o.assert_success();
    let mut got: Vec<String> = o.stdout.lines().map(str::to_string).collect();
    got.sort();
    let want: Vec<String> = (0..3)
        .map(|r| format!("{r} {} none", hosts.bridge))
        .collect();
    assert_eq!(got, want, "{o}");
    ctx.assert_no_leftovers();
}

/// `-f FILE` (`A1 slots=2`, `A2:1`, `A3`), `-map-by node`, `KAURI_ADDR` set to the bridge
/// address; pmi-load v2 and libpmi2 (node attributes per real host), hostnames per rank.
#[test]
fn netns_hostfile_map_by_node_kauri_addr() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_hostfile");
    let file = ctx.dir.join("hosts.txt");
    std::fs::write(
        &file,
        format!(
            "{} slots=2\n{}:1\n{}\n",
            hosts.addrs[0], hosts.addrs[1], hosts.addrs[2]
        ),
    )
    .unwrap();
    let file = file.to_string_lossy().into_owned();
    let place = cyclic(3, 5);
    let ssh = hosts.ssh.to_string_lossy().into_owned();
    let args = |prog: &[&str]| {
        let mut a: Vec<String> = [
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-f",
            &file,
            "-map-by",
            "node",
            "-n",
            "5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(prog.iter().map(|s| s.to_string()));
        a
    };
    let o = run(kauri_job(&ctx, &args(&[&ctx.pmi_load(), "--pmi", "2"]))
        .env("KAURI_ADDR", &hosts.bridge_ip));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &place, &["checked=4"]);
    let o =
        run(kauri_job(&ctx, &args(&[&ctx.prog("libpmi2_check")]))
            .env("KAURI_ADDR", &hosts.bridge_ip));
    o.assert_success();
    check_pmi_lines(
        &o,
        "libpmi2_check",
        &place,
        &["appnum=0", "peers=5", "nodeattr=ok"],
    );
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(&ctx, &args(&[&w])).env("KAURI_ADDR", &hosts.bridge_ip));
    o.assert_success();
    check_where(&o, &place, Some(&hosts.names));
    ctx.assert_no_leftovers();
}

/// An ssh wrapper in the test's directory that logs each call's arguments, then runs the
/// real wrapper.
fn logging_ssh(ctx: &Ctx, hosts: &NetnsHosts) -> (String, PathBuf) {
    let log = ctx.dir.join("ssh.log");
    let s = ctx.script(
        "ssh-logged",
        &format!(
            "#!/bin/sh\necho \"$*\" >>'{}'\nexec '{}' \"$@\"\n",
            log.display(),
            hosts.ssh.display()
        ),
    );
    (s, log)
}

/// `localhost` and this machine's hostname are served by the front end itself: no ssh for
/// them. The other two ranks run on namespace hosts, through ssh, in a chain
/// (`--tree-width 1`).
#[test]
fn netns_local_hosts_without_ssh_chain() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_local");
    let (ssh, log) = logging_ssh(&ctx, &hosts);
    let me = hostname();
    let list = format!("localhost,{},{}", hosts.addrs[0], hosts.addrs[1]);
    let o = run(kauri_job(
        &ctx,
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "--tree-width",
            "1",
            "-hosts",
            &list,
            "-n",
            "3",
            &ctx.prog("hello"),
        ],
    ));
    o.assert_success();
    assert_lines(
        &o,
        hello_lines(&[me.clone(), hosts.names[0].clone(), hosts.names[1].clone()]),
    );
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!("ssh calls:\n{calls}");
    for l in calls.lines() {
        let args: Vec<&str> = l.split_whitespace().collect();
        assert!(
            !args
                .iter()
                .any(|a| *a == "localhost" || *a == me || a.starts_with("127.")),
            "ssh was used for a local host: {l}"
        );
    }
    // One call per remote host (more only if kauri retried a refused ssh).
    let called: BTreeSet<&str> = calls
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|a| hosts.addrs.iter().any(|h| h == a))
        })
        .collect();
    assert_eq!(
        called,
        BTreeSet::from([hosts.addrs[0].as_str(), hosts.addrs[1].as_str()]),
        "want ssh calls for exactly the two remote hosts:\n{calls}"
    );
    let o = run(kauri_job(
        &ctx,
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &hosts.ssh.to_string_lossy(),
            "-hosts",
            &format!("{me},{}", hosts.addrs[2]),
            "-n",
            "2",
            &ctx.prog("hello"),
        ],
    ));
    o.assert_success();
    assert_lines(&o, hello_lines(&[me, hosts.names[2].clone()]));
    ctx.assert_no_leftovers();
}

/// A rank killed by SIGSEGV on the third host (a script: with MPICH's segv program the
/// other ranks, on other hosts, can still be in MPI_Init when the victim dies and abort
/// first, which makes the report race): the report names that host as given in the host
/// list (its address); the job fails. (mpiexec.hydra 4.0.2 ends such a job with 255 when the
/// ranks are on several hosts, 11 on one host: only a non-zero status is required.)
#[test]
fn netns_segv_names_host() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_segv");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let s = ctx.script(
        "segv2.sh",
        &format!(
            "#!/bin/sh\n[ \"$PMI_RANK\" = 2 ] && kill -SEGV $$\nexec '{wait}' '{}'\n",
            go.path()
        ),
    );
    let o = run(kauri_job(
        &ctx,
        &ssh_args(&hosts, &hosts.addrs.join(","), &[], 3, &[&s]),
    ));
    drop(go);
    assert_failed(&o);
    let host = &hosts.addrs[2];
    assert_stderr_line(
        &o,
        &format!("`rank 2 (pid P) on {host} killed by signal 11`"),
        |l| l.contains("rank 2 (pid ") && l.contains(&format!(") on {host} killed by signal 11")),
    );
    ctx.assert_no_leftovers();
}

// ---------------------------------------------------------------------------------------
// (d) failures through ssh

/// One of three hosts cannot be reached (nobody has 10.77.0.99 on the bridge; ssh gives up
/// after `ConnectTimeout=5` passed in `KAURI_LAUNCHER_ARGS`): one stderr line
/// `kauri: cannot start an agent on HOST…` carrying ssh's own message; the job ends
/// non-zero; nothing is left on the reachable hosts.
#[test]
fn netns_unreachable_host() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_unreachable");
    let ghost = format!("{}.99", hosts.net);
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let list = format!("{},{ghost},{}", hosts.addrs[0], hosts.addrs[1]);
    let o = run(
        kauri_job(&ctx, &ssh_args(&hosts, &list, &[], 3, &[&wait, &go.path()]))
            .env("KAURI_LAUNCHER_ARGS", "-o ConnectTimeout=5"),
    );
    drop(go);
    assert_failed(&o);
    let prefix = format!("kauri: cannot start an agent on {ghost}");
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "want exactly one line starting `{prefix}`\n{o}"
    );
    assert!(
        lines[0].contains(&format!("ssh: connect to host {ghost} port 22")),
        "the line does not carry ssh's own message: {:?}\n{o}",
        lines[0]
    );
    ctx.assert_no_leftovers();
}

/// The launcher command never starts an agent (it sleeps): with `KAURI_CONNECT_TIMEOUT=3`
/// kauri gives up with `kauri: agent on HOST did not connect back within 3 s`, kills the
/// launcher command, ends non-zero.
#[test]
fn netns_agent_never_connects() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_never_connects");
    let sleepy = ctx.script(
        "sleepy-ssh",
        "#!/bin/sh\n# an ssh that never runs anything\nwhile :; do sleep 1; done\n",
    );
    let host = &hosts.addrs[1];
    let o = run(kauri_job(
        &ctx,
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &sleepy,
            "-hosts",
            host,
            "-n",
            "1",
            "true",
        ],
    )
    .env("KAURI_CONNECT_TIMEOUT", "3"));
    assert_failed(&o);
    let want = format!("kauri: agent on {host} did not connect back within 3 s");
    assert_stderr_line(&o, &format!("`{want}`"), |l| l.starts_with(&want));
    wait_for_no_marked(&ctx.marker, &ctx.dir, Duration::from_secs(5));
    ctx.assert_no_leftovers();
}

/// SIGKILL the agent on the second namespace host while ranks run everywhere.
#[test]
fn netns_agent_killed() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_agent_killed");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let h = spawn(kauri_job(
        &ctx,
        &ssh_args(
            &hosts,
            &hosts.addrs.join(","),
            &["--tree-width", "0"],
            3,
            &[&wait, &go.path()],
        ),
    ));
    let tree = settle(&ctx, 3, 3);
    let victim = *tree
        .agents
        .keys()
        .find(|&&a| agent_host(a, &hosts.addrs).as_deref() == Some(hosts.addrs[1].as_str()))
        .or_else(|| tree.agents.keys().next())
        .unwrap();
    let host = agent_host(victim, &hosts.addrs);
    eprintln!("killing agent {victim} ({host:?}) of {tree:?}");
    assert!(signal_pid(victim, "KILL"));
    let o = join(h);
    drop(go);
    assert_failed(&o);
    assert_agent_died(&o, &hosts.addrs, host.as_deref());
    ctx.assert_no_leftovers();
}

/// SIGKILL the front end while agents run on the namespace hosts: each agent loses its
/// parent and must kill its ranks and exit.
#[test]
fn netns_front_end_killed() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_front_end_killed");
    let go = Go::new(&ctx);
    let wait = ctx.script("wait_go.sh", WAIT_GO_SH);
    let h = spawn(kauri_job(
        &ctx,
        &ssh_args(&hosts, &hosts.addrs.join(","), &[], 3, &[&wait, &go.path()]),
    ));
    let tree = settle(&ctx, 3, 3);
    assert!(signal_pid(tree.front_end.unwrap(), "KILL"));
    let o = join(h);
    assert_eq!(o.signal, Some(9), "{o}");
    wait_for_no_marked(&ctx.marker, &ctx.dir, Duration::from_secs(30));
    drop(go);
    ctx.assert_no_leftovers();
}

#[test]
fn netns_unauthenticated_connection_refused() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_unauth");
    let args = ssh_args(
        &hosts,
        &hosts.addrs.join(","),
        &["--tree-width", "1", "--pmi=pmi1"],
        3,
        &[],
    );
    unauthenticated(&ctx, &args, 3, 3);
    ctx.assert_no_leftovers();
}

/// Through ssh the key must reach the remote agents without being on the remote command
/// line (visible in /proc of the remote shell) nor on ssh's.
#[test]
fn netns_key_not_on_command_lines() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netns_key");
    let (ssh, log) = logging_ssh(&ctx, &hosts);
    let mut args = ssh_args(
        &hosts,
        &hosts.addrs.join(","),
        &["--tree-width", "1"],
        3,
        &[],
    );
    args[3] = ssh;
    let n = key_not_on_command_lines(&ctx, &args, 3, 3);
    eprintln!("{n} job key value(s) seen in environments");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!calls.contains("KAURI_JOB_KEY"), "{calls}");
    ctx.assert_no_leftovers();
}

// =======================================================================================
// (c) one-node Slurm (root)

/// `salloc -Q -N1 -n4 KAURI ARGS…`: kauri runs inside the allocation (SLURM_JOB_ID,
/// SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE set) and can call srun itself.
fn in_allocation(ctx: &Ctx, args: &[&str]) -> Job {
    let slurm = slurm_local();
    kauri_job(ctx, args)
        .wrapped(&["salloc", "-Q", "-N1", "-n4"])
        .env("SLURM_CONF", &slurm.conf.to_string_lossy())
}

/// hello through `-launcher slurm`, hosts from the allocation; where.sh shows each rank
/// descends from slurmstepd (the agent was started by srun) and its local rank.
#[test]
fn slurm_hello() {
    let slurm = slurm_local();
    let ctx = Ctx::new("slurm_hello");
    let o = run(in_allocation(
        &ctx,
        &["-launcher", "slurm", "-n", "4", &ctx.prog("hello")],
    ));
    o.assert_success();
    assert_lines(&o, hello_lines(&vec![hostname(); 4]));
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(in_allocation(&ctx, &["-launcher", "slurm", "-n", "4", &w]));
    o.assert_success();
    let w = check_where(&o, &[0, 0, 0, 0], None);
    for r in &w {
        assert!(
            r.ancestors.iter().any(|a| a == "slurmstepd"),
            "rank {} was not started under srun (no slurmstepd among {:?}); node {}",
            r.rank,
            r.ancestors,
            slurm.node
        );
    }
    ctx.assert_no_leftovers();
}

/// Without `-n` (and without `-hosts`/`-f`) the job fills the allocation's slots:
/// `SLURM_TASKS_PER_NODE=4` on `SLURM_JOB_NODELIST=kslurm1` gives 4 ranks.
#[test]
fn slurm_hosts_and_slots_from_allocation() {
    let ctx = Ctx::new("slurm_default_n");
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(in_allocation(&ctx, &["-launcher", "slurm", &w]));
    o.assert_success();
    check_where(&o, &[0, 0, 0, 0], None);
    ctx.assert_no_leftovers();
}

fn slurm_pmi_load(name: &str, version: &str) {
    let ctx = Ctx::new(name);
    let o = run(in_allocation(
        &ctx,
        &[
            "-launcher",
            "slurm",
            "-n",
            "4",
            &ctx.pmi_load(),
            "--pmi",
            version,
        ],
    ));
    o.assert_success();
    check_pmi_lines(&o, "pmi-load", &[0, 0, 0, 0], &["checked=3"]);
    ctx.assert_no_leftovers();
}

#[test]
fn slurm_pmi_load_v1() {
    slurm_pmi_load("slurm_pmi_load_v1", "1");
}

#[test]
fn slurm_pmi_load_v2() {
    slurm_pmi_load("slurm_pmi_load_v2", "2");
}

/// The placement helpers themselves.
#[test]
fn placement_helpers() {
    assert_eq!(block(&[2, 2], 4), [0, 0, 1, 1]);
    assert_eq!(block(&[1, 1, 1], 5), [0, 1, 2, 0, 1]);
    assert_eq!(cyclic(3, 5), [0, 1, 2, 0, 1]);
    assert_eq!(local_ranks(&[0, 0, 1, 0]), [(0, 3), (1, 3), (0, 1), (2, 3)]);
}
