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
//! * `names_*`: `MPI_Publish_name`/`MPI_Lookup_name`/`MPI_Unpublish_name` and a waiting
//!   `PMIx_Lookup` (`PMIX_WAIT`) through the run's name table, and an upcall kauri does not
//!   implement (`PMIx_Allocation_request`) refused and said once under `-v`; names shared with PMI programs
//!   of other runs through `kauri nameserver`.
//! * `dynamic_*`: `MPI_Comm_spawn`, `spawn_multiple`, nested spawns and connect/accept
//!   between jobs of one run (`ompi_dynamic`).
//! * `auto_*`: `auto` past the program: `python3` with mpi4py, wrapped MPICH
//!   and Open MPI programs, served PMIx and PMI side by side; `singletons_*`: the line kauri
//!   prints when Open MPI ranks served PMI ran alone.
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
    kauri_system_entries, kauri_system_leftovers, netns_hosts, netns_turn, Ch3, Ctx, Job, Launcher,
    NameServer, NetnsHosts, Outcome,
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
    mpirun_with(ctx, n, prog, &[], env)
}

/// [`mpirun`], the program given arguments `prog_args`.
fn mpirun_with(
    ctx: &Ctx,
    n: usize,
    prog: &str,
    prog_args: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    let n = n.to_string();
    let mut a = vec!["--allow-run-as-root", "--oversubscribe", "-n", &n, prog];
    a.extend(prog_args);
    let job = ctx.job(Launcher::Hydra, &a).program(mpirun_openmpi());
    run(
        "mpirun.openmpi",
        env.iter().fold(job, |j, (k, v)| j.env(k, v)),
    )
}

/// kauri with `args` (then `-n N PROG`), its scratch directories checked afterwards. With
/// `-launcher ssh` (the `netns_*` tests, one at a time) the system's directories are checked
/// too: agents started by sshd do not see the test's `TMPDIR`.
fn kauri(ctx: &Ctx, args: &[&str], n: usize, prog: &str, env: &[(&str, &str)]) -> Outcome {
    kauri_with(ctx, args, n, prog, &[], env)
}

/// [`kauri`] with a program and its arguments.
fn kauri_argv(ctx: &Ctx, args: &[&str], n: usize, argv: &[&str], env: &[(&str, &str)]) -> Outcome {
    kauri_with(ctx, args, n, argv[0], &argv[1..], env)
}

/// [`kauri`], the program given arguments `prog_args`.
fn kauri_with(
    ctx: &Ctx,
    args: &[&str],
    n: usize,
    prog: &str,
    prog_args: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    let over_ssh = args.windows(2).any(|w| w == ["-launcher", "ssh"]);
    let before = over_ssh.then(kauri_system_entries);
    let s = Scratch::new(ctx);
    let n = n.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-n", &n, prog]);
    a.extend(prog_args);
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

/// `ompi_names`'s lines common to both launchers, for `n` ranks: the name is not there, then
/// (rank 0 publishing late) every other rank's waiting PMIx lookup gets it, every rank finds
/// it, a stranger's unpublish leaves it, its publisher's withdraws it.
fn names_lines(n: usize) -> Vec<String> {
    let mut v = vec![
        "ompi_names: rank 0: publish: MPI_SUCCESS".to_string(),
        "ompi_names: rank 0: unpublish: MPI_SUCCESS".to_string(),
    ];
    for r in 0..n {
        let p = format!("ompi_names: rank {r}:");
        v.push(format!("{p} lookup before the publish: MPI_ERR_NAME"));
        if r > 0 {
            v.push(format!("{p} waited for the name: SUCCESS port-of-rank-0"));
        }
        v.push(format!("{p} lookup: MPI_SUCCESS port-of-rank-0"));
        v.push(format!(
            "{p} lookup after a stranger's unpublish: MPI_SUCCESS port-of-rank-0"
        ));
        v.push(format!("{p} lookup after the unpublish: MPI_ERR_NAME"));
    }
    v
}

/// Publish, lookup (waiting, with `PMIX_WAIT`) and unpublish of Open MPI ranks through the
/// run's name table, against mpirun.openmpi's (its HNP's data server: no `ompi-server`
/// needed within one mpirun). kauri runs `ompi_names strict` under `-v`: the answers mpirun
/// words otherwise are checked against kauri's rules (a second publish is refused; only the
/// publisher may unpublish, the name stays; a `PMIX_TIMEOUT` ends a wait), an upcall it does
/// not implement (`PMIx_Allocation_request`, twice) is said once on stderr, and a cleanup registration
/// (`PMIx_Job_control`, as Open MPI's `MPI_Init` makes) is served by the library: the file is
/// gone after the run.
fn names(name: &str, args: &[&str]) {
    let n = 4;
    let ctx = Ctx::new(name);
    let p = ctx.ompi_prog("ompi_names");
    let m = mpirun(&ctx, n, &p, &[]);
    let mut a = vec!["-v"];
    a.extend(args);
    let victim = ctx.dir.join("cleaned-up-by-pmix");
    let v = victim.to_string_lossy();
    let k = kauri_with(&ctx, &a, n, &p, &["strict", &v], &[]);
    assert_eq!(m.code, Some(0), "mpirun.openmpi failed\n{m}");
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    assert_lines("mpirun.openmpi", &m, names_lines(n));
    let (strict, common): (Vec<String>, Vec<String>) = sorted(&k)
        .into_iter()
        .partition(|l| l.starts_with("strict:"));
    let mut want = names_lines(n);
    want.sort();
    assert_eq!(common, want, "kauri: wrong stdout\n{k}");
    let last = n - 1;
    let mut want_strict = vec![
        "strict: rank 0: publish again: MPI_ERR_FILE_EXISTS".to_string(),
        // PMIX_ERR_NO_PERMISSIONS, which Open MPI 4.1 maps to OPAL_ERR_UNREACH.
        format!("strict: rank {last}: unpublish of rank 0's name: MPI_ERR_INTERN"),
        format!("strict: rank {last}: wait for a name nobody publishes: TIMEOUT"),
        "strict: rank 0: allocate 1: NOT-SUPPORTED".to_string(),
        "strict: rank 0: allocate 2: NOT-SUPPORTED".to_string(),
        "strict: rank 0: register a file for cleanup: SUCCESS".to_string(),
        "strict: rank 0: pause: NOT-SUPPORTED".to_string(),
    ];
    want_strict.sort();
    assert_eq!(strict, want_strict, "kauri: wrong strict lines\n{k}");
    for upcall in ["allocate", "job_control"] {
        let said = k
            .stderr
            .lines()
            .filter(|l| {
                l.starts_with(&format!("kauri: PMIx upcall {upcall} from "))
                    && l.ends_with(":0 is not supported")
            })
            .count();
        assert_eq!(said, 1, "kauri: the unsupported {upcall} is said once\n{k}");
    }
    assert!(
        !victim.exists(),
        "kauri: the file registered for cleanup is still there\n{k}"
    );
    ctx.assert_no_leftovers();
}

#[test]
fn names_one_host() {
    names("pmix_names", ONE_HOST);
}

/// Ranks 0 and 1 on n1, 2 and 3 on n2: the waiting lookups of n2 and the stranger's
/// unpublish cross the tree.
#[test]
fn names_two_hosts() {
    names("pmix_names_two_hosts", TWO_HOSTS_BLOCK);
}

/// kauri with `args` in the background, outside the harness's one-job-at-a-time lock (the
/// jobs it meets run meanwhile), its scratch directories as [`kauri`]'s; killed after 180 s.
/// Its pid, and a handle that joins to (exit code, stdout, stderr).
fn background(
    ctx: &Ctx,
    args: &[&str],
) -> (u32, std::thread::JoinHandle<(Option<i32>, String, String)>) {
    let s = Scratch::new(ctx);
    let child = std::process::Command::new(ctx.kauri())
        .args(args)
        .env(compat_tests::MARKER_VAR, &ctx.marker)
        .env("TMPDIR", &s.tmp)
        .env("KAURI_PMIX_SHM_DIR", &s.shm)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start kauri");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx
            .recv_timeout(std::time::Duration::from_secs(180))
            .is_err()
        {
            compat_tests::signal_pid(pid, "KILL");
        }
    });
    let h = std::thread::spawn(move || {
        let out = child.wait_with_output().expect("wait for kauri");
        let _ = tx.send(());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    });
    (pid, h)
}

/// A PMIx program and PMI programs of separate runs see one name table (`kauri
/// nameserver`): Open MPI's rank publishes and then waits (`PMIX_WAIT`, which through a name
/// server is kauri asking it again) for a name; a PMI-2 program of another run finds the
/// first name; a PMI-1 program of a third run then publishes the second, and the waiting rank
/// gets it. The PMI-1 run holds its name until the test ends it.
#[test]
fn names_meet_pmi_through_the_nameserver() {
    let ctx = Ctx::new("pmix_names_pmi");
    let ns = NameServer::start(&ctx);
    let p = ctx.ompi_prog("ompi_names");
    let d = ctx.pmi_dyn();
    let (_, pmix) = background(&ctx, &["-nameserver", &ns.addr, "-n", "1", &p, "bridge"]);
    // PMI-2, until the PMIx rank has published (it holds the name until it got its answer).
    let found = run(
        "kauri (PMI-2 lookup)",
        ctx.job(
            Launcher::Kauri,
            &[
                "-nameserver",
                &ns.addr,
                "-n",
                "1",
                &d,
                "--pmi",
                "2",
                "lookup",
                "from-pmix",
                "--wait",
                "60",
            ],
        )
        .program(ctx.kauri()),
    );
    assert_eq!(found.code, Some(0), "{found}");
    assert!(
        found.stdout.contains("found from-pmix=port-of-pmix"),
        "the PMI-2 run finds the PMIx rank's name\n{found}"
    );
    // PMI-1 publishes and holds the name (120 s) until the test ends its run.
    let (pmi_pid, pmi) = background(
        &ctx,
        &[
            "-nameserver",
            &ns.addr,
            "-n",
            "1",
            &d,
            "publish",
            "from-pmi",
            "port-of-pmi",
            "120",
        ],
    );
    let (code, out, err) = pmix.join().unwrap();
    eprintln!("=== kauri (PMIx bridge)\n{out}{err}");
    compat_tests::signal_pid(pmi_pid, "TERM");
    let (_, pmi_out, pmi_err) = pmi.join().unwrap();
    eprintln!("=== kauri (PMI-1 publish, ended by the test)\n{pmi_out}{pmi_err}");
    assert_eq!(code, Some(0), "the PMIx run failed\n{out}{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "bridge: publish from-pmix: MPI_SUCCESS",
            "bridge: waited for from-pmi: SUCCESS port-of-pmi",
            "bridge: unpublish from-pmix: MPI_SUCCESS",
        ],
        "the PMIx run: wrong stdout\n{err}"
    );
    let left: Vec<String> = ["tmp", "shm"]
        .iter()
        .flat_map(|d| walk(&ctx.dir.join(d)))
        .collect();
    assert!(left.is_empty(), "kauri left files behind: {left:?}");
    drop(ns);
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
/// PMI_FD in kauri's own environment does not leak either), but Hydra's and mpirun's
/// variables of where it is; `--pmi=pmi1`/`pmi2` give no PMIx
/// variable; `auto` (no flag) gives both, kauri's own values.
#[test]
fn choice_variables() {
    let ctx = Ctx::new("pmix_choice_variables");
    let k = env_of(&ctx, &["--pmi=pmix"], 2);
    assert_eq!(count(&k, "PMIX_NAMESPACE="), 2, "{k}");
    assert_eq!(count(&k, "PMIX_SERVER_URI2="), 2, "{k}");
    assert_eq!(count(&k, "PMIX_RANK=9"), 0, "{k}");
    for v in ["PMI_FD=", "PMI_RANK=", "PMI_SIZE=", "PMI_PORT="] {
        assert_eq!(count(&k, v), 0, "{v} reached a PMIx job\n{k}");
    }
    // Where a rank is, as Hydra and mpirun say it, whatever the job is served.
    for v in [
        "MPI_LOCALNRANKS=2",
        "OMPI_COMM_WORLD_SIZE=2",
        "OMPI_COMM_WORLD_LOCAL_SIZE=2",
    ] {
        assert_eq!(count(&k, v), 2, "{v}\n{k}");
    }
    for args in [&["--pmi=pmi1"][..], &["--pmi=pmi2"]] {
        let k = env_of(&ctx, args, 2);
        assert_eq!(
            count(&k, "PMIX_"),
            0,
            "PMIx variables reached a PMI job\n{k}"
        );
        assert_eq!(count(&k, "PMI_FD="), 2, "{k}");
        assert_eq!(count(&k, "PMI_FD=99"), 0, "{k}");
    }
    let k = env_of(&ctx, &[], 2);
    for v in [
        "PMIX_NAMESPACE=",
        "PMIX_SERVER_URI4=",
        "PMI_FD=",
        "PMI_RANK=",
    ] {
        assert_eq!(count(&k, v), 2, "{v}\n{k}");
    }
    assert_eq!(count(&k, "PMIX_RANK=9"), 0, "{k}");
    assert_eq!(count(&k, "PMI_FD=99"), 0, "{k}");
    ctx.assert_no_leftovers();
}

/// `--pmi=auto` serves an Open MPI program (the other tests give no flag at all, so they
/// rely on it too); a bad `--pmi` value is one line and status 255.
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
// Interpreters and wrappers: served both, whatever they run

/// The interpreter Debian's `python3-mpi4py` (Open MPI 4.1) is built for: a `python3`
/// earlier in `PATH` (pyenv, a venv) may not have it.
const PYTHON: &str = "/usr/bin/python3";

/// Fails the test unless `PYTHON` imports mpi4py (`.ci/setup` installs `python3-mpi4py`).
fn need_mpi4py() {
    let ok = std::process::Command::new(PYTHON)
        .args(["-c", "import mpi4py"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{PYTHON} cannot import mpi4py: apt-get install python3-mpi4py (.ci/setup)"
    );
}

const WORLD4: &str = "from mpi4py import MPI; c = MPI.COMM_WORLD; \
                      print('rank', c.Get_rank(), 'of', c.Get_size()); \
                      assert c.Get_size() == 4";

fn world_lines(n: usize) -> Vec<String> {
    (0..n).map(|r| format!("rank {r} of {n}")).collect()
}

/// `kauri -n 4 python3 -c 'from mpi4py import MPI; …'` with no flag is
/// one world of 4 (`python3` is linked to no MPI; every job is served PMIx beside PMI), on
/// one host and on two simulated hosts; and so is a script that imports mpi4py.
#[test]
fn auto_python_mpi4py_is_one_world() {
    need_mpi4py();
    let ctx = Ctx::new("pmix_auto_python");
    for args in [ONE_HOST, TWO_HOSTS_BLOCK] {
        let k = kauri_argv(&ctx, args, 4, &[PYTHON, "-c", WORLD4], &[]);
        assert_eq!(k.code, Some(0), "{k}");
        assert_lines("kauri", &k, world_lines(4));
        assert!(!k.stderr.contains("singleton"), "{k}");
    }
    let script = ctx.script("world.py", &WORLD4.replace("; ", "\n"));
    let k = kauri_argv(&ctx, ONE_HOST, 4, &[PYTHON, "-u", &script], &[]);
    assert_eq!(k.code, Some(0), "{k}");
    assert_lines("kauri", &k, world_lines(4));
    ctx.assert_no_leftovers();
}

/// Every job is served both: every rank has the PMI variables and the PMIx
/// ones, whether or not its arguments name an MPI.
#[test]
fn auto_serves_both_to_every_job() {
    let ctx = Ctx::new("pmix_auto_both_vars");
    let show = "import os; print(sorted(k for k in os.environ if k.startswith(('PMI', 'MPI_'))))";
    let named = format!("{show} # mpi4py");
    for prog in [named.as_str(), show] {
        let k = kauri_argv(&ctx, ONE_HOST, 2, &[PYTHON, "-c", prog], &[]);
        assert_eq!(k.code, Some(0), "{k}");
        for v in [
            "'PMI_FD'",
            "'PMI_RANK'",
            "'PMIX_NAMESPACE'",
            "'PMIX_SERVER_URI2'",
        ] {
            assert_eq!(k.stdout.matches(v).count(), 2, "{v} missing\n{k}");
        }
    }
    ctx.assert_no_leftovers();
}

/// MPICH programs behind a wrapper (`sh -c 'exec ./hello'`: the argument names a program
/// linked to MPICH) are served both, and still run: MPICH 4.0.2's clients (Debian's
/// ch4:ucx over PMI-1, ch3 over PMI-1 and PMI-2) ignore the PMIx variables. So do Open MPI
/// programs behind the same wrapper, which speak PMIx and ignore `PMI_FD`.
#[test]
fn auto_wrapped_mpich_and_open_mpi_programs() {
    let ctx = Ctx::new("pmix_auto_wrapped");
    let mut progs = vec![ctx.prog("hello")];
    progs.extend(Ch3::BOTH.map(|b| ctx.ch3_prog(b, "hello")));
    for p in &progs {
        for args in [ONE_HOST, TWO_HOSTS_BLOCK] {
            let cmd = format!("test -n \"$PMIX_NAMESPACE\" && test -n \"$PMI_FD\" && exec {p}");
            let k = kauri_argv(&ctx, args, 4, &["sh", "-c", &cmd], &[]);
            assert_eq!(k.code, Some(0), "{p}: {k}");
            let want: Vec<String> = (0..4).map(|r| format!("hello rank {r} of 4")).collect();
            let got: Vec<String> = sorted(&k)
                .iter()
                .map(|l| l.split(" on ").next().unwrap_or("").to_string())
                .collect();
            assert_eq!(got, want, "{p}\n{k}");
        }
    }
    let p = ctx.ompi_prog("ompi_hello");
    let cmd = format!("test -n \"$PMI_FD\" && exec {p}");
    let k = kauri_argv(&ctx, ONE_HOST, 2, &["sh", "-c", &cmd], &[]);
    assert_eq!(k.code, Some(0), "{k}");
    assert_lines("kauri", &k, hello_lines(&[0, 0]));
    ctx.assert_no_leftovers();
}

/// An Open MPI program served PMI only (`--pmi=pmi1`) runs as singletons: kauri sees one
/// (its `orted`) while it runs and ends the job at once, with one line naming the rank and
/// the flag, and status 255; the ranks would otherwise sleep for ten minutes, past the
/// harness's limit. Ranks that end before their host looks are named at the job's end, with
/// the same status (on a loaded machine they may still be seen running). Programs that
/// never speak PMI and are not Open MPI (`sh`, a plain Python program) get no such line.
#[test]
fn singletons_end_the_job_in_one_line() {
    need_mpi4py();
    let ctx = Ctx::new("pmix_singleton_warning");
    let tmp = ctx.dir.join("singleton-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let live = |l: &str| {
        l.starts_with("kauri: rank ")
            && l.ends_with(
                "runs alone as an Open MPI singleton: Open MPI wires up through PMIx, which \
                 --pmi=pmi1 and --pmi=pmi2 do not offer (drop the flag); ending the job",
            )
    };
    let at_end =
        |l: &str| l.starts_with("kauri: none of the 3 ranks connected to the PMI-1/PMI-2 server");
    for (prog, may_end_first) in [
        (
            "from mpi4py import MPI; import time; time.sleep(600)",
            false,
        ),
        ("from mpi4py import MPI", true),
    ] {
        let job = ctx
            .job(
                Launcher::Kauri,
                &["--pmi=pmi1", "-n", "3", PYTHON, "-c", prog],
            )
            .program(ctx.kauri())
            // Open MPI singletons leave session directories: not in the test's scratch.
            .env("TMPDIR", &tmp.to_string_lossy());
        let k = run("kauri --pmi=pmi1", job);
        assert_eq!(k.code, Some(255), "{k}");
        let lines: Vec<&str> = k
            .stderr
            .lines()
            .filter(|l| l.contains("singleton"))
            .collect();
        assert_eq!(lines.len(), 1, "{k}");
        assert!(live(lines[0]) || may_end_first && at_end(lines[0]), "{k}");
    }
    for argv in [&["sh", "-c", "true"][..], &[PYTHON, "-c", "print(1)"]] {
        let k = kauri_argv(&ctx, ONE_HOST, 3, argv, &[]);
        assert_eq!(k.code, Some(0), "{k}");
        assert!(!k.stderr.contains("singleton"), "{argv:?}: {k}");
    }
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

/// What `ompi_dynamic MODE` prints at 2 ranks, under any launcher.
fn dynamic_lines(mode: &str) -> Vec<String> {
    let v: Vec<&str> = match mode {
        "spawn" => vec![
            "spawn: child 0 of 3, parent world of 2",
            "spawn: child 1 of 3, parent world of 2",
            "spawn: child 2 of 3, parent world of 2",
            "spawn: parent world of 2: 3 children, sum of their ranks 3",
        ],
        "multiple" => vec![
            "multiple: 3 children",
            "multiple: a child of 3, appnum 0, argument a",
            "multiple: a child of 3, appnum 0, argument a",
            "multiple: a child of 3, appnum 1, argument b",
        ],
        "nested" => vec!["nested: 43 came from the grandchild through the child"],
        "siblings" => vec![
            "siblings: server and client are done",
            "siblings: the server got 7 from the client",
        ],
        other => panic!("no such mode {other}"),
    };
    v.into_iter().map(str::to_string).collect()
}

/// `ompi_dynamic MODE` at 2 ranks under mpirun.openmpi and under kauri placed by `args`: the
/// same lines, status 0, nothing left behind (the spawned jobs' PMIx files included).
fn dynamic(name: &str, mode: &str, args: &[&str]) {
    let ctx = Ctx::new(name);
    let p = ctx.ompi_prog("ompi_dynamic");
    let prog_args: &[&str] = if mode == "spawn" {
        &["spawn", "3"]
    } else {
        &[mode]
    };
    let m = mpirun_with(&ctx, 2, &p, prog_args, &[]);
    let k = kauri_with(&ctx, args, 2, &p, prog_args, &[]);
    assert_eq!(m.code, Some(0), "mpirun.openmpi failed\n{m}");
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    assert_lines("mpirun.openmpi", &m, dynamic_lines(mode));
    assert_lines("kauri", &k, dynamic_lines(mode));
    ctx.assert_no_leftovers();
}

/// `MPI_Comm_spawn` of 3 children from a world of 2 (PMIx spawn, connect, a direct modex
/// across the jobs, the disconnect's fence over both).
#[test]
fn dynamic_spawn_one_host() {
    dynamic("pmix_dyn_spawn", "spawn", ONE_HOST);
}

/// The same, the parents and the children spread over two simulated hosts.
#[test]
fn dynamic_spawn_two_hosts() {
    dynamic("pmix_dyn_spawn_2h", "spawn", TWO_HOSTS_CYCLIC);
}

/// `MPI_Comm_spawn_multiple`: two commands, their arguments and `MPI_APPNUM`.
#[test]
fn dynamic_spawn_multiple_one_host() {
    dynamic("pmix_dyn_multiple", "multiple", ONE_HOST);
}

/// The same over two simulated hosts.
#[test]
fn dynamic_spawn_multiple_two_hosts() {
    dynamic("pmix_dyn_multiple_2h", "multiple", TWO_HOSTS_CYCLIC);
}

/// A spawned job spawns in turn (three jobs, two intercommunicators).
#[test]
fn dynamic_nested_spawn_one_host() {
    dynamic("pmix_dyn_nested", "nested", ONE_HOST);
}

/// The same over two simulated hosts.
#[test]
fn dynamic_nested_spawn_two_hosts() {
    dynamic("pmix_dyn_nested_2h", "nested", TWO_HOSTS_CYCLIC);
}

/// Connect/accept between two unrelated jobs of one run (spawned separately): a port
/// published by one, looked up by the other.
#[test]
fn dynamic_connect_accept_one_host() {
    dynamic("pmix_dyn_siblings", "siblings", ONE_HOST);
}

/// The same over two simulated hosts.
#[test]
fn dynamic_connect_accept_two_hosts() {
    dynamic("pmix_dyn_siblings_2h", "siblings", TWO_HOSTS_CYCLIC);
}

/// The ranks of a job, parent or spawned, on different hosts never share a shared-memory
/// directory, and a spawned job's `PMIX_PARENT_ID` names the rank that spawned it. Open MPI copies its parent's `OMPI_MCA_*` variables into a spawn's environment, so
/// the children once all got parent rank 0's host's directory: two children on two
/// simulated hosts, both local rank 0 of their job, then shared one vader segment (its name
/// is the hostname, the job and the local rank), and some twenty spawns into mpi4py's
/// `test_spawn` one of them died of SIGSEGV in `mca_btl_vader_poll_handle_frag`.
#[test]
fn dynamic_children_get_their_own_hosts_shared_memory_directory() {
    let ctx = Ctx::new("pmix_dyn_dirs");
    let p = ctx.ompi_prog("ompi_dynamic");
    let k = kauri_with(&ctx, TWO_HOSTS_CYCLIC, 2, &p, &["dirs"], &[]);
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    // Each job's ranks by host: (parent or child, host) -> directory.
    let mut dirs: Vec<(String, String, String)> = Vec::new();
    for l in k.stdout.lines().filter_map(|l| l.strip_prefix("dirs: ")) {
        if !l.contains(" on ") {
            continue; // a child's PMIX_PARENT_ID line
        }
        let (who, dir) = l.split_once(": ").expect("who: dir");
        let (job, host) = who.split_once(" on ").expect("job on host");
        dirs.push((job.into(), host.into(), dir.into()));
    }
    dirs.sort();
    let hosts = |job: &str| -> Vec<(String, String)> {
        let v = dirs.iter().filter(|(j, _, _)| j == job);
        v.map(|(_, h, d)| (h.clone(), d.clone())).collect()
    };
    for job in ["child", "parent"] {
        let h = hosts(job);
        assert_eq!(h.len(), 2, "two {job} ranks\n{k}");
        assert_eq!(
            (h[0].0.as_str(), h[1].0.as_str()),
            ("n1", "n2"),
            "{job}: a rank on each host\n{k}"
        );
        assert!(
            h.iter().all(|(_, d)| d != "none"),
            "{job}: a directory each\n{k}"
        );
        assert_ne!(
            h[0].1, h[1].1,
            "{job}: the ranks on n1 and n2 share a directory\n{k}"
        );
    }
    // And the spawned job knows its parent: PMIX_PARENT_ID.
    let mut parents: Vec<&str> = k
        .stdout
        .lines()
        .filter(|l| l.starts_with("dirs: child ") && l.contains("parent"))
        .collect();
    parents.sort();
    assert_eq!(
        parents,
        [
            "dirs: child 0: parent the world rank 0",
            "dirs: child 1: parent the world rank 0"
        ],
        "PMIX_PARENT_ID\n{k}"
    );
    ctx.assert_no_leftovers();
}

/// How many of `o`'s `placed:` children ran on each host.
fn placed(o: &Outcome) -> Vec<(String, usize)> {
    let mut m: std::collections::BTreeMap<String, usize> = Default::default();
    for l in o.stdout.lines().filter(|l| l.starts_with("placed: child ")) {
        *m.entry(l.rsplit(' ').next().unwrap().to_string())
            .or_default() += 1;
    }
    m.into_iter().collect()
}

/// Open MPI's spawn info keys `npernode` and `map_by` (job directives `PMIX_PPR` and
/// `PMIX_MAPBY`) place the children: 4 children at `npernode 1` over 3 simulated hosts fail
/// the spawn (and only it), at `npernode 2` they fill n1 and n2; `map_by slot` fills n1's
/// 4 slots before n2; `map_by node` goes round the hosts.
#[test]
fn dynamic_spawn_directives_place_the_children() {
    let ctx = Ctx::new("pmix_dyn_placed");
    let p = ctx.ompi_prog("ompi_dynamic");
    let hosts = &["-launcher", "fork", "-hosts", "n1:4,n2:4,n3:4"];
    let run = |k: &str, v: &str, n: &str| kauri_with(&ctx, hosts, 1, &p, &["placed", k, v, n], &[]);
    let count = |v: &[(&str, usize)]| -> Vec<(String, usize)> {
        v.iter().map(|(h, n)| (h.to_string(), *n)).collect()
    };
    let o = run("npernode", "1", "4");
    assert_ne!(o.code, Some(0), "npernode 1: 4 children on 3 hosts\n{o}");
    assert!(
        o.stderr
            .lines()
            .any(|l| l.starts_with("kauri: a PMIx spawn failed: ")
                && l.contains("at 1 per host needs more hosts than the 3")),
        "npernode 1: the cause is said\n{o}"
    );
    assert_eq!(placed(&o), count(&[]), "npernode 1\n{o}");
    let o = run("npernode", "2", "4");
    assert_eq!(o.code, Some(0), "npernode 2\n{o}");
    assert_eq!(
        placed(&o),
        count(&[("n1", 2), ("n2", 2)]),
        "npernode 2\n{o}"
    );
    let o = run("map_by", "slot", "4");
    assert_eq!(o.code, Some(0), "map_by slot\n{o}");
    // The parent holds one of n1's 4 slots.
    assert_eq!(
        placed(&o),
        count(&[("n1", 3), ("n2", 1)]),
        "map_by slot\n{o}"
    );
    let o = run("map_by", "node", "3");
    assert_eq!(o.code, Some(0), "map_by node\n{o}");
    assert_eq!(
        placed(&o),
        count(&[("n1", 1), ("n2", 1), ("n3", 1)]),
        "map_by node\n{o}"
    );
    ctx.assert_no_leftovers();
}

/// `PMIx_Query_info` for what Open MPI programs and tools ask a launcher: the run's
/// namespaces, a namespace's size, its process sets (none), on one host and on two
/// simulated hosts (rank 0 on the first, its query served there). A key kauri does not
/// answer (`pmix.qry.nsinfo`) is NOT-FOUND. mpirun.openmpi 4.1 (ORTE) answers none of
/// them; its lines are shown, not held against it.
#[test]
fn query_namespaces_job_size_and_psets() {
    let ctx = Ctx::new("pmix_query");
    let p = ctx.ompi_prog("ompi_query");
    let want = |n: usize| {
        vec![
            "ompi_query: pmix.job.size: SUCCESS 3".to_string(),
            format!("ompi_query: pmix.qry.ns: SUCCESS {n} namespace(s), mine listed"),
            "ompi_query: pmix.qry.nsinfo: NOT-FOUND".to_string(),
            "ompi_query: pmix.qry.psetnum: SUCCESS 0".to_string(),
            "ompi_query: pmix.qry.psets: SUCCESS ''".to_string(),
        ]
    };
    let m = mpirun(&ctx, 3, &p, &[]);
    assert_eq!(m.code, Some(0), "mpirun.openmpi failed\n{m}");
    for args in [ONE_HOST, TWO_HOSTS_CYCLIC] {
        let k = kauri(&ctx, args, 3, &p, &[]);
        assert_eq!(k.code, Some(0), "kauri {args:?} failed\n{k}");
        assert_eq!(
            sorted(&k),
            want(1),
            "kauri {args:?}\n{k}\n(mpirun.openmpi:\n{m})"
        );
    }
    ctx.assert_no_leftovers();
}

/// `line` without its `distances=` field.
fn without_distances(line: &str) -> String {
    line.split(' ')
        .filter(|w| !w.starts_with("distances="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each bound rank is told where it is, as mpirun.openmpi tells it (one rank per core, its
/// default at 2 ranks): its `PMIX_CPUSET` and `PMIX_LOCALITY_STRING`, from which Open MPI
/// 4.1 computes which peers share its socket and NUMA node (`MPI_Comm_split_type` of
/// `OMPI_COMM_TYPE_SOCKET`/`_NUMA`: 2 under both; kauri gave no cpuset, so 1 rank each).
/// On two simulated hosts each rank is alone on its host, bound to its first CPU. The
/// device distances (Open MPI 4.1's mpirun gives none) are compared with PRRTE's in
/// `wheel_mpis.rs`.
#[test]
fn bound_ranks_are_told_where_they_are() {
    let ctx = Ctx::new("pmix_locality");
    let p = ctx.ompi_prog("ompi_locality");
    let m = mpirun(&ctx, 2, &p, &[]);
    assert_eq!(m.code, Some(0), "mpirun.openmpi failed\n{m}");
    let reference: Vec<String> = sorted(&m).iter().map(|l| without_distances(l)).collect();
    assert!(
        reference.iter().all(|l| l.ends_with("socket=2 numa=2")),
        "mpirun.openmpi binds a rank per core\n{m}"
    );
    let k = kauri(&ctx, &["-bind-to", "core"], 2, &p, &[]);
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    let got: Vec<String> = sorted(&k).iter().map(|l| without_distances(l)).collect();
    assert_eq!(got, reference, "kauri vs mpirun.openmpi\n{k}\n{m}");
    let mut two = vec!["-bind-to", "core"];
    two.extend(TWO_HOSTS_CYCLIC);
    let k = kauri(&ctx, &two, 2, &p, &[]);
    assert_eq!(k.code, Some(0), "kauri {two:?} failed\n{k}");
    let alone = reference[0].replace("socket=2 numa=2", "socket=1 numa=1");
    let want = vec![alone.clone(), alone.replace("rank 0 ", "rank 1 ")];
    let got: Vec<String> = sorted(&k).iter().map(|l| without_distances(l)).collect();
    assert_eq!(got, want, "kauri {two:?}\n{k}\n(mpirun.openmpi:\n{m})");
    ctx.assert_no_leftovers();
}

/// A spawn kauri cannot place (a host that is not in the run) fails that call with an error
/// class and one line saying why, and the world goes on. At 1 rank: Open MPI 4.1 itself
/// leaves the other ranks of a larger world waiting in `MPI_Comm_spawn` when the root's spawn
/// fails (mpirun.openmpi too); and mpirun.openmpi hangs at the end of this run even at 1
/// rank, so kauri's run is checked alone.
#[test]
fn dynamic_unplaceable_spawn_fails_the_call_only() {
    let ctx = Ctx::new("pmix_dyn_unplaceable");
    let p = ctx.ompi_prog("ompi_dynamic");
    let k = kauri_with(&ctx, ONE_HOST, 1, &p, &["unplaceable"], &[]);
    assert_eq!(k.code, Some(0), "kauri failed\n{k}");
    assert_lines(
        "kauri",
        &k,
        vec![
            "unplaceable: the spawn failed".into(),
            "unplaceable: rank 0 goes on".into(),
        ],
    );
    assert!(
        k.stderr
            .lines()
            .any(|l| l.starts_with("kauri: a PMIx spawn failed: ")
                && l.contains("no-such-host-kauri")),
        "the cause is said\n{k}"
    );
    ctx.assert_no_leftovers();
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
/// both (crates/kauri-core/src/tree/policy.rs is unchanged), and nothing is left behind but, when the test kills
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

/// `PMIx_Abort` with a list of processes: rank 0 of 4 aborts rank 3, on the other host.
/// Rank 3 alone is killed (`SIGKILL`, after one line naming who asked and why); rank 0's call
/// returns; every survivor sees PMIX_ERR_PROC_ABORTED_BY_SIG about rank 3; then the job ends
/// as after any rank killed by a signal (status 9), or, with `-disable-auto-cleanup`, the
/// survivors run to their end. (Open MPI 4.1 itself never passes a list: its
/// `ompi_rte_abort_peers` is empty; a PMIx client or Open MPI 5 does.)
#[test]
fn two_hosts_abort_of_one_process() {
    let ctx = Ctx::new("pmix_two_hosts_abort_procs");
    let p = ctx.ompi_prog("ompi_failure");
    let saw = "saw PROC-ABORTED-BY-SIG source=3 affected=3 exit=137";
    let (torn, kept) = kauri_failure(
        &ctx,
        &p,
        "abortproc",
        "handler",
        TWO_HOSTS_BLOCK,
        4,
        saw,
        9,
        false,
        None,
    );
    for o in [&torn, &kept] {
        assert!(
            o.stdout
                .contains("ompi_failure: rank 0 aborted the last rank: SUCCESS"),
            "rank 0's PMIx_Abort returned\n{o}"
        );
        let said: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.contains("called PMIx_Abort"))
            .collect();
        assert_eq!(said.len(), 1, "one line for the abort\n{o}");
        assert!(
            said[0].starts_with("kauri: ")
                && said[0].contains(":0 called PMIx_Abort (status 7) on ")
                && said[0].ends_with(" rank(s) 3: ompi_failure: rank 0 aborts the last rank"),
            "the abort's line\n{o}"
        );
    }
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

/// A lost host under `-disable-auto-cleanup`, and survivors whose `MPI_Finalize` begins with
/// a PMIx fence over the whole job (no `async_mpi_finalize`): the fence needs the lost
/// host's rank and can never complete. Kauri says so and ends the job, as it does for a PMI
/// fence, instead of leaving the survivors in `MPI_Finalize` until `MPIEXEC_TIMEOUT` (which
/// is what happened: the timeout here is a bound for a run where that comes back, not a
/// measure).
#[test]
fn two_hosts_pmix_fence_after_a_lost_host_ends_the_job() {
    let ctx = Ctx::new("pmix_fence_lost_host");
    let p = ctx.ompi_prog("ompi_failure");
    let s = Scratch::new(&ctx);
    let mut a: Vec<String> = TWO_HOSTS_BLOCK.iter().map(|x| x.to_string()).collect();
    a.extend(
        [
            "-disable-auto-cleanup",
            "-n",
            "3",
            &p,
            "agent",
            "handler",
            EVENT_WAIT_S,
        ]
        .map(String::from),
    );
    let job = s.apply(ctx.job(Launcher::Kauri, &a).program(ctx.kauri()));
    let o = run("kauri", job.env("MPIEXEC_TIMEOUT", "300"));
    s.forget_killed_agent(1);
    s.assert_empty(&o);
    let want: Vec<String> = (0..2)
        .map(|r| format!("ompi_failure: rank {r} saw LOST_CONNECTION source=2 affected=2 exit=-"))
        .collect();
    assert_eq!(saw_lines(&o), want, "the survivors' events\n{o}");
    assert!(
        o.stderr.lines().any(|l| l.starts_with("kauri: PMIx fence ")
            && l.contains("can never complete: the ranks on n2")),
        "the stuck fence is said\n{o}"
    );
    assert!(
        !o.stderr.contains("timed out"),
        "it waited for the timeout\n{o}"
    );
    assert_ne!(o.code, Some(0), "{o}");
    ctx.assert_no_leftovers();
}

/// Spawn over ssh between network-namespace hosts: the children's agents are started over
/// ssh too.
#[test]
fn netns_dynamic_spawn() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-map-by", "node"]);
    dynamic("pmix_netns_dyn_spawn", "spawn", &strs(&a));
}

/// Connect/accept between two spawned jobs over ssh between network-namespace hosts.
#[test]
fn netns_dynamic_connect_accept() {
    let hosts = netns_hosts();
    let _turn = netns_turn();
    let a = netns_args(&hosts, &["-map-by", "node"]);
    dynamic("pmix_netns_dyn_siblings", "siblings", &strs(&a));
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
