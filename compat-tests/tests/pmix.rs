//! Open MPI 4.1 programs (built with `mpicc.openmpi`) through kauri's PMIx server, each
//! compared in the same test with `mpirun.openmpi --allow-run-as-root --oversubscribe` for
//! output (sorted lines) and exit status.
//!
//! * `one_host_*`: kauri on this host (the front end is the PMIx server).
//! * `two_hosts_*`, `three_hosts_*`: simulated hosts (`-launcher fork`): one agent, and so
//!   one PMIx server, per host; fences are tree allgathers of the servers' blobs. Open MPI
//!   sees 2 or 3 nodes, so `ompi_hello`'s `local=` differs from mpirun's (all on one node)
//!   and is checked against the placement instead.
//! * `direct_modex_*`: Open MPI's asynchronous modex (no data in the fence), so every peer's
//!   data is fetched on demand through the tree.
//! * `choice_*`: `--pmi` and `auto`: which variables reach a rank.
//! * `netns_*`: **root**, the 3 network-namespace hosts of `tree.rs` (`netns/hosts.sh`, an
//!   sshd in each): `-launcher ssh`, so each host's agent and PMIx server run in a network
//!   of their own and Open MPI's TCP traffic between hosts crosses the bridge. sshd passes
//!   no `TMPDIR` on, so these agents use `/tmp` and `/dev/shm`, and the test checks that no
//!   `kauri-<tag>` entry is left there.
//!
//! * `*_failure_event_*`: a rank dies (a signal, an exit code, an exit 0 without finalize,
//!   its host's agent lost) and the others are told by a PMIx event (`ompi_failure`, which
//!   registers a PMIx handler next to MPI), under kauri with and without
//!   `-disable-auto-cleanup`, and under mpirun.openmpi with and without `--enable-recovery`.
//!
//! Every kauri job runs with `TMPDIR` and `KAURI_PMIX_SHM_DIR` in the test's directory (and
//! `XDG_RUNTIME_DIR`, where its status socket goes: kauri keeps that directory), and
//! the test checks both are empty afterwards: kauri removes its PMIx server's files and Open
//! MPI's shared-memory segments (`vader_segment.*`), even after an abort or a crash (mpirun
//! does the same for its jobs). Exit statuses: MPI_Abort(comm, 7) gives 7 under both; a rank
//! killed by SIGSEGV gives 139 (128 + 11) under mpirun and 11 under kauri (its convention, as
//! Hydra's).

use compat_tests::libpmi::{mpirun_openmpi, ompi_hello_lines as hello_lines};
use compat_tests::{
    kauri_system_entries, kauri_system_leftovers, netns_hosts, netns_turn, Ctx, Job, Launcher,
    NetnsHosts, Outcome,
};
use std::path::{Path, PathBuf};

/// The directories a kauri job of this test may use, checked empty afterwards, and the
/// runtime directory its status socket goes to (kauri keeps that directory, so it is not
/// in `TMPDIR`).
struct Scratch {
    tmp: PathBuf,
    shm: PathBuf,
    run: PathBuf,
}

impl Scratch {
    fn new(ctx: &Ctx) -> Scratch {
        let s = Scratch {
            tmp: ctx.dir.join("tmp"),
            shm: ctx.dir.join("shm"),
            run: ctx.dir.join("run"),
        };
        std::fs::create_dir_all(&s.tmp).unwrap();
        std::fs::create_dir_all(&s.shm).unwrap();
        std::fs::create_dir_all(&s.run).unwrap();
        s
    }

    /// `job` with these directories in its environment.
    fn apply(&self, job: Job) -> Job {
        job.env("TMPDIR", &self.tmp.to_string_lossy())
            .env("KAURI_PMIX_SHM_DIR", &self.shm.to_string_lossy())
            .env("XDG_RUNTIME_DIR", &self.run.to_string_lossy())
    }

    /// Removes what the server of node `node` left: its agent was killed (SIGKILL), so it
    /// could not (a known limit, docs/pmix.md). Everything else must still be gone.
    fn forget_killed_agent(&self, node: usize) {
        let mine = |name: &str, d: &Path| {
            name.starts_with(&format!("n{node}-"))
                || (d == self.shm && name.contains(&format!("-n{node}-")))
        };
        for d in [&self.tmp, &self.shm] {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if mine(&name, d) {
                    let _ = std::fs::remove_dir_all(e.path());
                } else if d == &self.tmp && e.path().is_dir() {
                    for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                        if mine(&f.file_name().to_string_lossy(), d) {
                            let _ = std::fs::remove_dir_all(f.path());
                        }
                    }
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }

    fn assert_empty(&self, o: &Outcome) {
        for d in [&self.tmp, &self.shm] {
            let left: Vec<String> = walk(d);
            assert!(
                left.is_empty(),
                "kauri left files behind in {}: {left:?}\n{o}",
                d.display()
            );
        }
    }
}

fn walk(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        out.push(e.path().display().to_string());
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

fn run(what: &str, job: Job) -> Outcome {
    let o = job.run();
    eprintln!("=== {what}\n{o}");
    o
}

fn mpirun(ctx: &Ctx, n: usize, prog: &str, env: &[(&str, &str)]) -> Outcome {
    let job = ctx
        .job(
            Launcher::Hydra,
            &[
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                &n.to_string(),
                prog,
            ],
        )
        .program(mpirun_openmpi());
    run(
        "mpirun.openmpi",
        env.iter().fold(job, |j, (k, v)| j.env(k, v)),
    )
}

/// kauri with `args` (then `-n N PROG`), its scratch directories checked afterwards. With
/// `-launcher ssh` (the `netns_*` tests, one at a time) the system's directories are checked
/// too: agents started by sshd do not see the test's `TMPDIR`.
fn kauri(ctx: &Ctx, args: &[&str], n: usize, prog: &str, env: &[(&str, &str)]) -> Outcome {
    let over_ssh = args.windows(2).any(|w| w == ["-launcher", "ssh"]);
    let before = over_ssh.then(kauri_system_entries);
    let s = Scratch::new(ctx);
    let n = n.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-n", &n, prog]);
    let job = s.apply(ctx.job(Launcher::Kauri, &a).program(ctx.kauri()));
    let o = run("kauri", env.iter().fold(job, |j, (k, v)| j.env(k, v)));
    s.assert_empty(&o);
    if let Some(before) = before {
        let left = kauri_system_leftovers(&before);
        assert!(left.is_empty(), "kauri's agents left {left:?} behind\n{o}");
    }
    o
}

fn sorted(o: &Outcome) -> Vec<String> {
    let mut v: Vec<String> = o.stdout.lines().map(str::to_string).collect();
    v.sort();
    v
}

fn assert_lines(who: &str, o: &Outcome, mut want: Vec<String>) {
    want.sort();
    assert_eq!(sorted(o), want, "{who}: wrong stdout\n{o}");
}

const ONE_HOST: &[&str] = &[];
const TWO_HOSTS_BLOCK: &[&str] = &["-launcher", "fork", "-hosts", "n1,n2", "-ppn", "2"];
const TWO_HOSTS_CYCLIC: &[&str] = &["-launcher", "fork", "-hosts", "n1,n2", "-map-by", "node"];
const THREE_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "n1,n2,n3", "-ppn", "2"];

/// A job that ends normally under mpirun and kauri (`args` place it): status 0, `want`
/// under kauri, and the same sorted output under both when `same` (not for `ompi_hello` on
/// several hosts, whose `local=` differs).
fn normal(
    name: &str,
    prog: &str,
    args: &[&str],
    n: usize,
    env: &[(&str, &str)],
    want: Vec<String>,
    same: bool,
) {
    let ctx = Ctx::new(name);
    let p = ctx.ompi_prog(prog);
    let m = mpirun(&ctx, n, &p, env);
    let k = kauri(&ctx, args, n, &p, env);
    assert_eq!(m.code, Some(0), "mpirun.openmpi failed\n{m}");
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    assert_lines("kauri", &k, want);
    if same {
        assert_eq!(sorted(&k), sorted(&m), "kauri vs mpirun.openmpi");
    }
    ctx.assert_no_leftovers();
}

fn ring_line(n: usize) -> Vec<String> {
    vec![format!(
        "ompi_ring: ok size={n} rounds=10 token={}",
        10 * n * (n + 1) / 2
    )]
}

fn allreduce_lines(n: usize) -> Vec<String> {
    let sum: usize = (1..=n).map(|k| k * k).sum();
    (0..n)
        .map(|r| {
            format!(
                "ompi_allreduce: ok rank={r} size={n} sum={sum} max={} vector=ok bcast=ok \
                 allgather=ok",
                n * n
            )
        })
        .collect()
}

const VADER: &[(&str, &str)] = &[("OMPI_MCA_btl", "self,vader")];

#[test]
fn one_host_hello_n1() {
    normal(
        "pmix_hello_n1",
        "ompi_hello",
        ONE_HOST,
        1,
        &[],
        hello_lines(&[0]),
        true,
    );
}

#[test]
fn one_host_hello_n4() {
    normal(
        "pmix_hello_n4",
        "ompi_hello",
        ONE_HOST,
        4,
        &[],
        hello_lines(&[0; 4]),
        true,
    );
}

#[test]
fn one_host_ring_n4() {
    normal(
        "pmix_ring_n4",
        "ompi_ring",
        ONE_HOST,
        4,
        &[],
        ring_line(4),
        true,
    );
}

#[test]
fn one_host_allreduce_n4() {
    normal(
        "pmix_allreduce_n4",
        "ompi_allreduce",
        ONE_HOST,
        4,
        &[],
        allreduce_lines(4),
        true,
    );
}

/// Shared memory only: fails unless every rank knows the others are on its node.
#[test]
fn one_host_vader_ring_n4() {
    normal(
        "pmix_vader_ring_n4",
        "ompi_ring",
        ONE_HOST,
        4,
        VADER,
        ring_line(4),
        true,
    );
}

#[test]
fn one_host_vader_allreduce_n4() {
    normal(
        "pmix_vader_allreduce_n4",
        "ompi_allreduce",
        ONE_HOST,
        4,
        VADER,
        allreduce_lines(4),
        true,
    );
}

#[test]
fn two_hosts_hello_block() {
    normal(
        "pmix_two_hosts_hello_block",
        "ompi_hello",
        TWO_HOSTS_BLOCK,
        4,
        &[],
        hello_lines(&[0, 0, 1, 1]),
        false,
    );
}

#[test]
fn two_hosts_ring_map_by_node() {
    normal(
        "pmix_two_hosts_ring",
        "ompi_ring",
        TWO_HOSTS_CYCLIC,
        4,
        &[],
        ring_line(4),
        true,
    );
}

#[test]
fn three_hosts_allreduce() {
    normal(
        "pmix_three_hosts_allreduce",
        "ompi_allreduce",
        THREE_HOSTS,
        6,
        &[],
        allreduce_lines(6),
        true,
    );
}

/// Simulated hosts are separate nodes to Open MPI, so shared memory alone cannot join them:
/// this runs vader within each host and TCP between them. Both hosts' local rank 0 name
/// their segment `vader_segment.<hostname>.<…>.0` on the same machine; they do not collide
/// because each host's server gives its ranks a backing directory of their own.
#[test]
fn two_hosts_vader_and_tcp_allreduce() {
    normal(
        "pmix_two_hosts_vader_tcp",
        "ompi_allreduce",
        TWO_HOSTS_BLOCK,
        4,
        &[("OMPI_MCA_btl", "self,vader,tcp")],
        allreduce_lines(4),
        true,
    );
}

/// Open MPI's asynchronous modex: the fences carry nothing, and each rank's first message to
/// a peer on another host asks its server, which asks kauri (`direct_modex`), which routes
/// the request through the tree to the peer's host.
#[test]
fn direct_modex_two_hosts_ring() {
    let env = [
        ("OMPI_MCA_pmix_base_async_modex", "1"),
        ("OMPI_MCA_pmix_base_collect_data", "0"),
    ];
    let ctx = Ctx::new("pmix_direct_modex_ring");
    let p = ctx.ompi_prog("ompi_ring");
    // Open MPI 4.1.4 itself races in this mode (see the reference below): MPI_Init fails
    // now and then with "PML add procs failed ... Not found" under mpirun as well. A kauri
    // run that fails exactly so is run again, up to RACE_TRIES runs in all; any other
    // failure, or that one every time, fails the test.
    const RACE_TRIES: usize = 5;
    let mut k = kauri(&ctx, TWO_HOSTS_CYCLIC, 4, &p, &env);
    for attempt in 2..=RACE_TRIES {
        if k.code == Some(0) || !ompi_async_modex_race(&k) {
            break;
        }
        eprintln!(
            "kauri run {} hit Open MPI's async-modex race; running again",
            attempt - 1
        );
        ctx.assert_no_leftovers();
        k = kauri(&ctx, TWO_HOSTS_CYCLIC, 4, &p, &env);
    }
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    assert_lines("kauri", &k, ring_line(4));
    // The reference: Open MPI 4.1.4's own mpirun fails this mode now and then on one host
    // ("PML add procs failed ... Not found" in MPI_Init, about 1 run in 5 here; once, in a
    // loaded run, otherwise, its output not kept), so its output is compared only when it
    // succeeds. kauri's is checked above either way.
    let m = mpirun(&ctx, 4, &p, &env);
    if m.code == Some(0) {
        assert_eq!(sorted(&k), sorted(&m), "kauri vs mpirun.openmpi");
    } else {
        eprintln!(
            "mpirun.openmpi failed (known race: {}); kauri's output checked alone",
            ompi_async_modex_race(&m)
        );
    }
    ctx.assert_no_leftovers();
}

/// Whether a failed run is Open MPI 4.1.4's own async-modex race: MPI_Init's PML add_procs
/// does not find a peer's data ("Not found", -13).
fn ompi_async_modex_race(o: &Outcome) -> bool {
    o.stderr.contains("PML add procs failed") && o.stderr.contains("\"Not found\" (-13)")
}

/// MPI_Abort(comm, 7) in the last rank: its line and status 7 under both.
fn abort(name: &str, args: &[&str]) {
    let ctx = Ctx::new(name);
    let p = ctx.ompi_prog("ompi_abort");
    let m = mpirun(&ctx, 4, &p, &[]);
    let k = kauri(&ctx, args, 4, &p, &[]);
    for (who, o) in [("mpirun.openmpi", &m), ("kauri", &k)] {
        assert_eq!(o.code, Some(7), "{who}: wrong exit status\n{o}");
        assert_lines(who, o, vec!["ompi_abort: rank 3 aborts".into()]);
    }
    assert!(
        k.stderr.contains("rank 3 aborted the job with code 7"),
        "kauri: no line naming the aborting rank\n{k}"
    );
    ctx.assert_no_leftovers();
}

#[test]
fn one_host_abort_n4() {
    abort("pmix_abort_n4", ONE_HOST);
}

#[test]
fn two_hosts_abort() {
    abort("pmix_two_hosts_abort", TWO_HOSTS_BLOCK);
}

/// The last rank dies of SIGSEGV: its line under both; mpirun 139, kauri 11; kauri names the
/// rank and the signal on stderr.
fn segv(name: &str, args: &[&str], host: &str) {
    let ctx = Ctx::new(name);
    let p = ctx.ompi_prog("ompi_segv");
    let m = mpirun(&ctx, 4, &p, &[]);
    let k = kauri(&ctx, args, 4, &p, &[]);
    for (who, o, want) in [("mpirun.openmpi", &m, 128 + 11), ("kauri", &k, 11)] {
        let ours: Vec<&str> = o
            .stdout
            .lines()
            .filter(|l| l.starts_with("ompi_"))
            .collect();
        assert_eq!(
            ours,
            ["ompi_segv: rank 3 crashes"],
            "{who}: wrong stdout\n{o}"
        );
        assert_eq!(o.code, Some(want), "{who}: wrong exit status\n{o}");
    }
    assert!(
        k.stderr.lines().any(|l| l.contains("rank 3 (pid ")
            && l.contains(&format!(") on {host} "))
            && l.contains("killed by signal 11")),
        "kauri: no stderr line naming rank 3 and SIGSEGV\n{k}"
    );
    ctx.assert_no_leftovers();
}

#[test]
fn one_host_segv_n4() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    segv("pmix_segv_n4", ONE_HOST, host.trim());
}

#[test]
fn two_hosts_segv() {
    segv("pmix_two_hosts_segv", TWO_HOSTS_BLOCK, "n2");
}

fn env_of(ctx: &Ctx, args: &[&str], n: usize) -> Outcome {
    let k = kauri(ctx, args, n, "env", &[("PMIX_RANK", "9"), ("PMI_FD", "99")]);
    assert_eq!(k.code, Some(0), "kauri env failed\n{k}");
    k
}

fn count(o: &Outcome, prefix: &str) -> usize {
    o.stdout.lines().filter(|l| l.starts_with(prefix)).count()
}

/// `--pmi=pmix`: every rank gets the PMIx server's variables and none of the PMI ones (a
/// PMI_FD in kauri's own environment does not leak either); a PMI job gets no PMIx variable.
#[test]
fn choice_variables() {
    let ctx = Ctx::new("pmix_choice_variables");
    let k = env_of(&ctx, &["--pmi=pmix"], 2);
    assert_eq!(count(&k, "PMIX_NAMESPACE="), 2, "{k}");
    assert_eq!(count(&k, "PMIX_SERVER_URI2="), 2, "{k}");
    assert_eq!(count(&k, "PMIX_RANK=9"), 0, "{k}");
    for v in [
        "PMI_FD=",
        "PMI_RANK=",
        "PMI_SIZE=",
        "PMI_PORT=",
        "MPI_LOCALNRANKS=",
    ] {
        assert_eq!(count(&k, v), 0, "{v} reached a PMIx job\n{k}");
    }
    for args in [&["--pmi=pmi1"][..], &["--pmi=pmi2"], &[]] {
        let k = env_of(&ctx, args, 2);
        assert_eq!(
            count(&k, "PMIX_"),
            0,
            "PMIx variables reached a PMI job\n{k}"
        );
        assert_eq!(count(&k, "PMI_FD="), 2, "{k}");
        assert_eq!(count(&k, "PMI_FD=99"), 0, "{k}");
    }
    ctx.assert_no_leftovers();
}

/// `--pmi=auto` picks PMIx for an Open MPI program (the other tests give no flag at all,
/// so they rely on it too); a bad `--pmi` value is one line and status 255.
#[test]
fn choice_auto_and_bad_values() {
    let ctx = Ctx::new("pmix_choice_auto");
    let p = ctx.ompi_prog("ompi_hello");
    let k = kauri(&ctx, &["--pmi=auto"], 2, &p, &[]);
    assert_eq!(k.code, Some(0), "{k}");
    assert_lines("kauri", &k, hello_lines(&[0, 0]));
    let bad = kauri(&ctx, &["--pmi=pmi3"], 1, &p, &[]);
    assert_eq!(bad.code, Some(255), "{bad}");
    assert!(
        bad.stderr.contains("auto, pmi1, pmi2 or pmix") && bad.stdout.is_empty(),
        "{bad}"
    );
    ctx.assert_no_leftovers();
}

// ---------------------------------------------------------------------------------------
// Network-namespace hosts

/// `-launcher ssh -launcher-exec SSH -hosts A1,A2,A3` and `extra`.
fn netns_args(hosts: &NetnsHosts, extra: &[&str]) -> Vec<String> {
    let mut a = hosts.ssh_launch(&hosts.addrs.join(","));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// 6 ranks, 2 per host: every rank sees 2 local peers (mpirun: 6 on its one node).
#[test]
fn netns_hello_ppn2() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-ppn", "2"]);
    normal(
        "pmix_netns_hello",
        "ompi_hello",
        &strs(&a),
        6,
        &[],
        hello_lines(&[0, 0, 1, 1, 2, 2]),
        false,
    );
}

/// A ring over the 3 hosts, neighbours always on another host (`-map-by node`): TCP only.
#[test]
fn netns_ring_map_by_node() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-map-by", "node"]);
    normal(
        "pmix_netns_ring",
        "ompi_ring",
        &strs(&a),
        6,
        &[],
        ring_line(6),
        true,
    );
}

/// Shared memory within each host and TCP between hosts (`btl=self,vader,tcp`).
#[test]
fn netns_vader_and_tcp_allreduce() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-ppn", "2"]);
    normal(
        "pmix_netns_vader_tcp",
        "ompi_allreduce",
        &strs(&a),
        6,
        &[("OMPI_MCA_btl", "self,vader,tcp")],
        allreduce_lines(6),
        true,
    );
}

/// MPI_Abort in rank 3, on the second host: status 7, and the other hosts' ranks are ended.
#[test]
fn netns_abort() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-ppn", "2"]);
    abort("pmix_netns_abort", &strs(&a));
}

/// Rank 3 dies of SIGSEGV on the second host: kauri names that host.
#[test]
fn netns_segv() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-ppn", "2"]);
    segv("pmix_netns_segv", &strs(&a), &hosts.addrs[1]);
}

// ---------------------------------------------------------------------------------------
// Failure events

/// How long `ompi_failure`'s survivors wait for the event before they say they saw nothing
/// (a bound for a run where none comes, not a measure: kauri's arrive at once).
const EVENT_WAIT_S: &str = "20";

/// Open MPI's MPI_Finalize begins with a fence over the whole job, which a dead rank never
/// enters; without it the survivors finalize alone.
const NO_FINALIZE_FENCE: (&str, &str) = ("OMPI_MCA_async_mpi_finalize", "1");

/// The survivors' `saw` lines, in rank order (a "got SIGTERM" line depends on when the
/// teardown's signal lands, so it is left out).
fn saw_lines(o: &Outcome) -> Vec<String> {
    let mut v: Vec<String> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("ompi_failure: rank ") && l.contains(" saw "))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// `ompi_failure MODE` with `n` ranks under kauri placed by `args`, its last rank failing:
/// with the teardown (its SIGTERM is ignored by the survivors, which finish by themselves
/// well inside a long grace) and with `-disable-auto-cleanup`, where nobody is signalled
/// unless the failure ends the job anyway (`sigterm_anyway`: an exit 0 without finalize).
/// Every survivor sees `saw` (the event's words) under both, the status is `status` under
/// both (src/policy.rs is unchanged), and nothing is left behind but, when the test kills
/// node `killed_agent`'s agent, that agent's own server files.
#[allow(clippy::too_many_arguments)]
fn kauri_failure(
    ctx: &Ctx,
    p: &str,
    mode: &str,
    handler: &str,
    args: &[&str],
    n: usize,
    saw: &str,
    status: i32,
    sigterm_anyway: bool,
    killed_agent: Option<usize>,
) -> (Outcome, Outcome) {
    let env = [NO_FINALIZE_FENCE, ("KAURI_KILL_GRACE", "60")];
    let with_args = |extra: &[&str]| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(["-n", &n.to_string(), p, mode, handler, EVENT_WAIT_S].map(String::from));
        a
    };
    let run_kauri = |extra: &[&str]| {
        let a = with_args(extra);
        // The program and its arguments are in `a`: kauri() adds only -n and a program, so
        // it is driven with the full command line here.
        let s = Scratch::new(ctx);
        let job = s.apply(ctx.job(Launcher::Kauri, &a).program(ctx.kauri()));
        let o = run("kauri", env.iter().fold(job, |j, (k, v)| j.env(k, v)));
        if let Some(node) = killed_agent {
            s.forget_killed_agent(node);
        }
        s.assert_empty(&o);
        o
    };
    let want: Vec<String> = (0..n - 1)
        .map(|r| format!("ompi_failure: rank {r} {saw}"))
        .collect();
    let torn = run_kauri(&[]);
    let kept = run_kauri(&["-disable-auto-cleanup"]);
    for (who, o) in [("kauri", &torn), ("kauri -disable-auto-cleanup", &kept)] {
        assert_eq!(o.code, Some(status), "{who}: wrong exit status\n{o}");
        assert_eq!(saw_lines(o), want, "{who}: the survivors' events\n{o}");
    }
    if !sigterm_anyway {
        assert!(
            !kept.stdout.contains("got SIGTERM"),
            "-disable-auto-cleanup: a survivor was signalled\n{kept}"
        );
    }
    (torn, kept)
}

/// mpirun.openmpi with `extra` flags, `ompi_failure MODE HANDLER` with `n` ranks.
fn mpirun_failure(
    ctx: &Ctx,
    extra: &[&str],
    p: &str,
    mode: &str,
    handler: &str,
    n: usize,
) -> Outcome {
    let mut a = vec!["--allow-run-as-root", "--oversubscribe"];
    a.extend(extra);
    let n = n.to_string();
    a.extend(["-n", &n, p, mode, handler, EVENT_WAIT_S]);
    let job = ctx
        .job(Launcher::Hydra, &a)
        .program(mpirun_openmpi())
        .env(NO_FINALIZE_FENCE.0, NO_FINALIZE_FENCE.1);
    run(&format!("mpirun.openmpi {}", extra.join(" ")), job)
}

/// The same failure under mpirun.openmpi, on this host: by default it ends the job (no
/// survivor gets as far as a line); with `--enable-recovery` (ORTE's way to keep the
/// survivors) every survivor runs to its end, as under kauri's `-disable-auto-cleanup`.
/// What they see there is printed, not asserted: Debian 12's mpirun (ORTE 4.1.4) sends
/// `PMIX_ERR_PROC_ABORTED` with `PMIX_RANGE_SESSION` and a `PMIX_EVENT_CUSTOM_RANGE`, which
/// its PMIx 4.2 server library refuses ("PMIX ERROR: BAD-PARAM"), so they see nothing.
fn mpirun_failure_reference(ctx: &Ctx, p: &str, mode: &str, n: usize, kept: &Outcome) {
    let ended = mpirun_failure(ctx, &[], p, mode, "handler", n);
    assert_ne!(
        ended.code,
        Some(0),
        "mpirun.openmpi: the job should fail\n{ended}"
    );
    assert!(
        saw_lines(&ended).is_empty(),
        "mpirun.openmpi: survivors went on\n{ended}"
    );
    let recovered = mpirun_failure(ctx, &["--enable-recovery"], p, mode, "handler", n);
    let who = |o: &Outcome| -> Vec<String> {
        saw_lines(o)
            .iter()
            .map(|l| l.split(" saw ").next().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        who(&recovered),
        who(kept),
        "the survivors that ran to their end: mpirun.openmpi --enable-recovery vs kauri \
         -disable-auto-cleanup\n{recovered}\n{kept}"
    );
}

/// The last of 3 ranks is killed by SIGKILL: the others see PMIX_ERR_PROC_ABORTED_BY_SIG
/// from it, about it, exit code 137 (128 + 9, as PRRTE reports it); status 9 (kauri's
/// convention for a signal), with and without the teardown.
#[test]
fn one_host_failure_event_signal() {
    let ctx = Ctx::new("pmix_failure_signal");
    let p = ctx.ompi_prog("ompi_failure");
    let saw = "saw PROC-ABORTED-BY-SIG source=2 affected=2 exit=137";
    let (_, kept) = kauri_failure(
        &ctx, &p, "kill", "handler", ONE_HOST, 3, saw, 9, false, None,
    );
    mpirun_failure_reference(&ctx, &p, "kill", 3, &kept);
    ctx.assert_no_leftovers();
}

/// Rank 3 of 4, on the second host, exits with code 3 without finalizing: every other rank,
/// on both hosts, sees PMIX_ERR_PROC_ABORTED with exit code 3; status 3.
#[test]
fn two_hosts_failure_event_exit_code() {
    let ctx = Ctx::new("pmix_two_hosts_failure_exit");
    let p = ctx.ompi_prog("ompi_failure");
    let saw = "saw PROC-ABORTED source=3 affected=3 exit=3";
    let (_, kept) = kauri_failure(
        &ctx,
        &p,
        "exit3",
        "handler",
        TWO_HOSTS_BLOCK,
        4,
        saw,
        3,
        false,
        None,
    );
    mpirun_failure_reference(&ctx, &p, "exit3", 4, &kept);
    ctx.assert_no_leftovers();
}

/// The last rank exits 0 without finalizing while the others use PMIx: they see
/// PMIX_ERR_PROC_TERM_WO_SYNC before the job ends, which it does even with
/// `-disable-auto-cleanup` (status 255, as before).
#[test]
fn one_host_failure_event_exit_without_finalize() {
    let ctx = Ctx::new("pmix_failure_wo_sync");
    let p = ctx.ompi_prog("ompi_failure");
    let saw = "saw PROC TERMINATED WITHOUT SYNC source=2 affected=2 exit=0";
    let (torn, kept) = kauri_failure(
        &ctx, &p, "exit0", "handler", ONE_HOST, 3, saw, 255, true, None,
    );
    for o in [&torn, &kept] {
        assert!(
            o.stderr.contains("rank 2 on ") && o.stderr.contains("exited without finalizing"),
            "{o}"
        );
    }
    ctx.assert_no_leftovers();
}

/// Rank 2, alone on host n2, kills its host's agent (its parent under `-launcher fork`) and
/// then itself: the ranks on n1 see PMIX_ERR_LOST_CONNECTION about rank 2 (no exit code:
/// nobody saw it end); status 255. mpirun has no simulated hosts to lose.
#[test]
fn two_hosts_failure_event_lost_host() {
    let ctx = Ctx::new("pmix_two_hosts_failure_lost");
    let p = ctx.ompi_prog("ompi_failure");
    let saw = "saw LOST_CONNECTION source=2 affected=2 exit=-";
    let (torn, kept) = kauri_failure(
        &ctx,
        &p,
        "agent",
        "handler",
        TWO_HOSTS_BLOCK,
        3,
        saw,
        255,
        false,
        Some(1),
    );
    assert!(torn.stderr.contains("kauri: agent on n2 died"), "{torn}");
    assert!(
        kept.stderr
            .contains("the job goes on without it (-disable-auto-cleanup)"),
        "{kept}"
    );
    ctx.assert_no_leftovers();
}

/// A program that registered no handler of its own: the event is marked
/// PMIX_EVENT_NON_DEFAULT, so Open MPI's default handler (which aborts the process) is not
/// called, and with `-disable-auto-cleanup` the survivors go on and finish, as under
/// mpirun.openmpi --enable-recovery.
#[test]
fn one_host_failure_event_spares_programs_without_a_handler() {
    let ctx = Ctx::new("pmix_failure_no_handler");
    let p = ctx.ompi_prog("ompi_failure");
    let (_, kept) = kauri_failure(
        &ctx,
        &p,
        "kill",
        "nohandler",
        ONE_HOST,
        3,
        "saw nothing",
        9,
        false,
        None,
    );
    let recovered = mpirun_failure(&ctx, &["--enable-recovery"], &p, "kill", "nohandler", 3);
    assert_eq!(
        saw_lines(&recovered),
        saw_lines(&kept),
        "mpirun.openmpi vs kauri\n{recovered}"
    );
    ctx.assert_no_leftovers();
}
