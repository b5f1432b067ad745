//! Dynamic processes and the name service: spawn, spawn_multiple, nested spawn, publish and
//! lookup within a run and across runs (`kauri nameserver`), connect/accept between runs.
//!
//! Two groups:
//!
//! * `pmi_*`: pmi-wire's `pmi-dyn` rank program, in both protocols. It shows the process
//!   manager's side exactly (what was spawned where, with which preput, which error reply).
//! * `mpich_*`: MPICH 4.0.2 programs (`programs/dynamic.c`) built against the ch3 libraries of
//!   `mpich-testsuite/build-mpich.sh`, PMI-1 and PMI-2 (Debian's ch4:ucx MPICH cannot do
//!   dynamic processes). Where Hydra can run the same job (one host), it runs too and the
//!   outputs must match.
//!
//! Simulated hosts are `-launcher fork` agents (`n1` …). Every test checks the exit status and
//! ends with the leftover check.

use compat_tests::{Ch3, Ctx, Job, Launcher, NameServer, Outcome};
use std::process::{Command, Stdio};

fn kauri_job<S: AsRef<str>>(ctx: &Ctx, args: &[S]) -> Job {
    ctx.job(Launcher::Kauri, args).program(ctx.kauri())
}

fn run(job: Job) -> Outcome {
    let o = job.run();
    eprintln!("=== {}\n{o}", o.launcher);
    o
}

/// `-launcher fork -hosts HOSTS -n N PROG…`
fn fork<S: AsRef<str>>(hosts: &str, n: usize, prog: &[S]) -> Vec<String> {
    let mut a: Vec<String> = ["-launcher", "fork", "-hosts", hosts, "-n"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push(n.to_string());
    a.extend(prog.iter().map(|s| s.as_ref().to_string()));
    a
}

/// The `key=value` fields of the lines starting with `prefix`, one map per line, in order.
fn fields(o: &Outcome, prefix: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut v: Vec<_> = o
        .stdout_lines()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .collect();
    v.sort_by_key(|m| {
        (
            m.get("rank").and_then(|r| r.parse::<usize>().ok()),
            m.get("appnum").cloned(),
        )
    });
    v
}

/// pmi-dyn's `spawn failed: …` line (the spawn's error reply), under PMI-`v`.
fn spawn_failed(o: &Outcome, v: &str) -> String {
    o.stdout_lines()
        .into_iter()
        .find(|l| l.starts_with("spawn failed"))
        .unwrap_or_else(|| panic!("PMI-{v}: no failure line\n{o}"))
        .to_string()
}

/// Runs kauri in the background, outside the harness's one-job-at-a-time lock (the job it
/// talks to must run meanwhile); killed after 180 s. Joins to (exit code, stdout, stderr).
fn background(ctx: &Ctx, args: &[&str]) -> std::thread::JoinHandle<(Option<i32>, String, String)> {
    let child = Command::new(ctx.kauri())
        .args(args)
        .env(compat_tests::MARKER_VAR, &ctx.marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    std::thread::spawn(move || {
        let out = child.wait_with_output().expect("wait for kauri");
        let _ = tx.send(());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
}

// =======================================================================================
// pmi-dyn

fn pmi_spawn(version: &str) {
    let ctx = Ctx::new(&format!("pmi_spawn_v{version}"));
    let d = ctx.pmi_dyn();
    let o = run(kauri_job(
        &ctx,
        &["-n", "2", &d, "--pmi", version, "spawn", "3"],
    ));
    o.assert_success();
    let kids = fields(&o, "child ");
    assert_eq!(kids.len(), 3, "three children");
    for (r, k) in kids.iter().enumerate() {
        assert_eq!(k["rank"], r.to_string());
        assert_eq!(k["size"], "3");
        assert_eq!(k["appnum"], "0");
        assert!(
            k["parent"].starts_with("port-of-kauri_"),
            "preput seen: {k:?}"
        );
    }
    let spawned: Vec<&str> = o
        .stdout_lines()
        .into_iter()
        .filter(|l| l.starts_with("spawned jobid="))
        .collect();
    assert_eq!(spawned.len(), 1, "rank 0 spawned once");
    if version == "2" {
        // PMI-2 names the new job; its kvsname differs from the parent's.
        let jobid = spawned[0].trim_start_matches("spawned jobid=");
        assert!(jobid.starts_with("kauri_") && !kids[0]["parent"].ends_with(jobid));
    }
    ctx.assert_no_leftovers();
}

#[test]
fn pmi_spawn_v1() {
    pmi_spawn("1");
}

#[test]
fn pmi_spawn_v2() {
    pmi_spawn("2");
}

/// spawn_multiple over 4 simulated hosts: the first command pinned by `host` and `wdir`, the
/// second placed on free slots; appnum per command; one job of 5.
#[test]
fn pmi_spawn_multiple_with_host_and_wdir_info() {
    let ctx = Ctx::new("pmi_spawn_multiple");
    let d = ctx.pmi_dyn();
    let sub = ctx.dir.join("work");
    std::fs::create_dir_all(&sub).unwrap();
    let wdir = format!("wdir={}", sub.display());
    for v in ["1", "2"] {
        let args = fork(
            "n1:1,n2:2,n3:2,n4:2",
            1,
            &[
                &d, "--pmi", v, "spawn", "3", "host=n3", &wdir, "--", "self", "2",
            ],
        );
        let o = run(kauri_job(&ctx, &args));
        o.assert_success();
        let kids = fields(&o, "child ");
        assert_eq!(kids.len(), 5, "PMI-{v}: five children");
        for k in &kids[..3] {
            assert_eq!(
                (k["appnum"].as_str(), k["host"].as_str()),
                ("0", "n3"),
                "PMI-{v}: {k:?}"
            );
            assert_eq!(k["cwd"], sub.display().to_string());
            assert_eq!(k["size"], "5");
        }
        for k in &kids[3..] {
            assert_eq!(k["appnum"], "1", "PMI-{v}: {k:?}");
            // n3 has 2 slots and holds 3 already; n1 is full: free slots are on n2 and n4.
            assert!(["n2", "n4"].contains(&k["host"].as_str()), "PMI-{v}: {k:?}");
        }
    }
    ctx.assert_no_leftovers();
}

/// Spawned ranks fill free slots host by host, round-robin, before oversubscribing.
#[test]
fn pmi_spawn_places_on_free_slots_round_robin() {
    let ctx = Ctx::new("pmi_spawn_round_robin");
    let d = ctx.pmi_dyn();
    let o = run(kauri_job(
        &ctx,
        &fork("n1:2,n2:1,n3:1", 2, &[&d, "spawn", "4"]),
    ));
    o.assert_success();
    let hosts: Vec<String> = fields(&o, "child ")
        .iter()
        .map(|k| k["host"].clone())
        .collect();
    // n1 is full with the parents; n2 and n3 take one each, then all are full and the
    // round-robin goes on over every host.
    assert_eq!(hosts.len(), 4);
    assert_eq!(&hosts[..2], ["n2", "n3"], "free slots first: {hosts:?}");
    ctx.assert_no_leftovers();
}

#[test]
fn pmi_nested_spawn_across_hosts() {
    let ctx = Ctx::new("pmi_nested_spawn");
    let d = ctx.pmi_dyn();
    for v in ["1", "2"] {
        let o = run(kauri_job(
            &ctx,
            &fork("n1,n2,n3,n4", 1, &[&d, "--pmi", v, "nest", "3"]),
        ));
        o.assert_success();
        let kids = fields(&o, "child ");
        assert_eq!(kids.len(), 3, "PMI-{v}: three generations");
        let parents: std::collections::BTreeSet<&str> =
            kids.iter().map(|k| k["parent"].as_str()).collect();
        assert_eq!(
            parents.len(),
            3,
            "each generation has its own spawner: {kids:?}"
        );
    }
    ctx.assert_no_leftovers();
}

/// A host outside the run, a program that does not exist: error replies, and the spawning
/// job goes on (its fence after the failed spawn completes).
#[test]
fn pmi_failed_spawns_are_error_replies() {
    let ctx = Ctx::new("pmi_failed_spawns");
    let d = ctx.pmi_dyn();
    for v in ["1", "2"] {
        let o = run(kauri_job(
            &ctx,
            &fork(
                "n1,n2",
                2,
                &[&d, "--pmi", v, "spawn", "1", "host=elsewhere"],
            ),
        ));
        let line = spawn_failed(&o, v);
        assert!(
            line.contains("elsewhere"),
            "PMI-{v}: names the host: {line}"
        );
        // pmi-dyn exits 3 after a failed spawn, once the fence and finalize went through.
        o.assert_code(3);
        let o = run(kauri_job(
            &ctx,
            &[
                "-n",
                "2",
                &d,
                "--pmi",
                v,
                "spawn",
                "2",
                "--",
                "/no/such/program",
                "1",
            ],
        ));
        let line = spawn_failed(&o, v);
        assert!(line.contains("no/such/program"), "PMI-{v}: {line}");
        o.assert_code(3);
        assert!(
            fields(&o, "child ").is_empty(),
            "no child of a failed spawn runs to its end"
        );
    }
    ctx.assert_no_leftovers();
}

/// A spawn of ten million processes is refused at once with an error reply (above
/// `KAURI_SPAWN_MAX`, 65536 by default), and the spawning job goes on. (It used to plan ten
/// million ranks: 1.5 GB and minutes before anything was said; the job timeout ends that run.)
#[test]
fn pmi_a_spawn_above_the_hard_limit_is_an_error_reply() {
    let ctx = Ctx::new("pmi_spawn_hard_limit");
    let d = ctx.pmi_dyn();
    for v in ["1", "2"] {
        let o = run(
            kauri_job(&ctx, &["-n", "2", &d, "--pmi", v, "spawn", "10000000"])
                .timeout(std::time::Duration::from_secs(60)),
        );
        let line = spawn_failed(&o, v);
        assert!(
            line.contains("10000000") && line.contains("KAURI_SPAWN_MAX"),
            "PMI-{v}: names the size and the limit: {line}"
        );
        o.assert_code(3);
    }
    ctx.assert_no_leftovers();
}

/// A spawned job whose hosts form a chain (`-tree-width 1`: n3's agent is started by n2's)
/// and whose deepest agent cannot be started: the spawn fails with an error reply and the
/// spawning job goes on, as when a direct child of the root fails (it used to end the whole
/// run: the lost grandchild travelled up as a failure of the job).
#[test]
fn pmi_a_spawned_jobs_lost_grandchild_fails_only_the_spawn() {
    let ctx = Ctx::new("pmi_spawn_lost_grandchild");
    let d = ctx.pmi_dyn();
    let kauri = ctx.kauri();
    let agent = ctx.script(
        "agent-not-on-n3",
        &format!(
            "#!/bin/sh\nprev=; for a; do [ \"$prev\" = --host ] && host=$a; prev=$a; done\n\
             if [ \"$host\" = n3 ]; then echo \"n3: no route to host\" >&2; exit 1; fi\n\
             exec {} \"$@\"\n",
            kauri.display()
        ),
    );
    for v in ["1", "2"] {
        let mut args = vec!["-tree-width".to_string(), "1".to_string()];
        args.extend(fork(
            "n1,n2,n3",
            1,
            &[&d, "--pmi", v, "spawn", "2", "hosts=n2,n3"],
        ));
        let o = run(kauri_job(&ctx, &args).env("KAURI_AGENT_PATH", &agent));
        let line = spawn_failed(&o, v);
        assert!(line.contains("n3"), "PMI-{v}: names the host: {line}");
        // pmi-dyn exits 3 after a failed spawn, once the fence and finalize went through.
        o.assert_code(3);
    }
    ctx.assert_no_leftovers();
}

/// A spawned rank that crashes ends the run with its signal, named as a spawned job's rank.
/// Children that outlive their parents without a word to kauri (what Open MPI children in a
/// barrier with parents that have gone look like): `kauri --status` names their job while it
/// runs, `MPIEXEC_TIMEOUT` ends it with the same line, and nothing is left. On one host and
/// on two simulated hosts (where the agents say how long their ranks have been quiet).
fn pmi_orphans(hosts: Option<&str>) {
    let ctx = Ctx::new(&format!("pmi_orphans_{}", hosts.is_some()));
    let d = ctx.pmi_dyn();
    let prog = [d.as_str(), "orphan", "2"];
    let args: Vec<String> = match hosts {
        Some(h) => fork(h, 2, &prog),
        None => ["-n", "1"]
            .iter()
            .chain(&prog)
            .map(|s| s.to_string())
            .collect(),
    };
    let mut child = Command::new(ctx.kauri())
        .args(&args)
        .env(compat_tests::MARKER_VAR, &ctx.marker)
        .env("MPIEXEC_TIMEOUT", "30")
        .current_dir(&ctx.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kauri");
    let pid = child.id().to_string();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let want = "may wait for parents that are gone: every rank of the first job, which \
                spawned it, has ended, and its 2 rank(s) still run and have asked nothing of \
                kauri for";
    let mut asked = String::new();
    while child.try_wait().unwrap().is_none() && !asked.contains(want) {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let o = Command::new(ctx.kauri())
            .args(["--status", &pid])
            .output()
            .expect("kauri --status");
        asked = String::from_utf8_lossy(&o.stdout).into_owned();
    }
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    eprintln!("=== kauri --status\n{asked}\n=== kauri's stderr\n{stderr}");
    let named = "spawned job 1 (kauri_";
    assert!(
        asked.lines().any(|l| l.contains(named) && l.contains(want)),
        "{asked}"
    );
    assert!(
        stderr.contains("job timed out after 30 s (MPIEXEC_TIMEOUT)"),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(named) && l.contains(want)),
        "{stderr}"
    );
    assert_ne!(status.code(), Some(0));
    ctx.assert_no_leftovers();
}

#[test]
fn pmi_children_waiting_for_parents_that_are_gone_are_named() {
    pmi_orphans(None);
}

#[test]
fn pmi_children_waiting_for_parents_that_are_gone_are_named_on_two_hosts() {
    pmi_orphans(Some("n1,n2"));
}

#[test]
fn pmi_a_crashing_spawned_rank_ends_the_run() {
    let ctx = Ctx::new("pmi_spawned_crash");
    let d = ctx.pmi_dyn();
    let crash = ctx.script("crash.sh", "#!/bin/sh\nkill -SEGV $$\n");
    let o = run(
        kauri_job(&ctx, &["-n", "2", &d, "spawn", "1", "--", &crash, "1"])
            .timeout(std::time::Duration::from_secs(120)),
    );
    assert_eq!(
        o.code,
        Some(11),
        "the signal number, as for a first-job rank\n{o}"
    );
    assert!(
        o.stderr.contains("of spawned job 1") && o.stderr.contains("SIGSEGV"),
        "{o}"
    );
    ctx.assert_no_leftovers();
}

/// Names published on one host are found on another host of the same run.
#[test]
fn pmi_names_within_a_run_across_hosts() {
    let ctx = Ctx::new("pmi_names_in_run");
    let d = ctx.pmi_dyn();
    let script = ctx.script(
        "names.sh",
        &format!(
            "#!/bin/sh\nif [ \"$PMI_RANK\" = 1 ]; then exec {d} --pmi 2 lookup svc --rank 1 --wait 60\n\
             else exec {d} publish svc 'tag#0$port#7' 3; fi\n"
        ),
    );
    let o = run(kauri_job(&ctx, &fork("n1,n2", 2, &[&script])));
    o.assert_success();
    let out = o.stdout_lines();
    assert!(out.contains(&"found svc=tag#0$port#7"), "{o}");
    assert!(out.contains(&"unpublished svc"), "{o}");
    ctx.assert_no_leftovers();
}

/// Two runs share names through `kauri nameserver`; a duplicate name and a name server that
/// is down are error replies.
#[test]
fn pmi_names_across_runs_through_the_nameserver() {
    let ctx = Ctx::new("pmi_nameserver");
    let d = ctx.pmi_dyn();
    let ns = NameServer::start(&ctx);
    // Run A publishes and holds the name for a while; run B (told by the environment)
    // looks it up meanwhile; run C (told by -nameserver) tries to publish it again.
    let a = background(
        &ctx,
        &[
            "-nameserver",
            &ns.addr,
            "-n",
            "1",
            &d,
            "publish",
            "shared",
            "p-a",
            "6",
        ],
    );
    let b = run(kauri_job(
        &ctx,
        &[
            "-n", "1", &d, "--pmi", "2", "lookup", "shared", "--wait", "60",
        ],
    )
    .env("KAURI_NAMESERVER", &ns.addr));
    b.assert_success();
    assert!(b.stdout_lines().contains(&"found shared=p-a"), "{b}");
    let c = run(kauri_job(
        &ctx,
        &[
            "-nameserver",
            &ns.addr,
            "-n",
            "1",
            &d,
            "publish",
            "shared",
            "p-c",
        ],
    ));
    c.assert_code(3);
    assert!(
        c.stdout.contains("already"),
        "a duplicate name is refused: {c}"
    );
    let (code, out, err) = a.join().unwrap();
    assert_eq!(code, Some(0), "run A: {out}{err}");
    assert!(out.contains("unpublished shared"), "run A: {out}");
    // Gone once run A unpublished it.
    let e = run(kauri_job(
        &ctx,
        &["-nameserver", &ns.addr, "-n", "1", &d, "lookup", "shared"],
    ));
    e.assert_code(3);
    drop(ns);
    let down = run(kauri_job(
        &ctx,
        &[
            "-nameserver",
            "127.0.0.1:1",
            "-n",
            "1",
            &d,
            "publish",
            "x",
            "y",
        ],
    ));
    down.assert_code(3);
    assert!(
        down.stderr
            .contains("name server at 127.0.0.1:1 is unreachable"),
        "{down}"
    );
    ctx.assert_no_leftovers();
}

// =======================================================================================
// MPICH ch3

fn mpich_spawn(build: Ch3) {
    let ctx = Ctx::new(&format!("mpich_spawn_{}", build.name()));
    let p = ctx.ch3_prog(build, "dynamic");
    let mut outs = Vec::new();
    for l in Launcher::BOTH {
        let o = run(ctx.job(l, &["-n", "2", &p, "spawn", "3"]).program(match l {
            Launcher::Kauri => ctx.kauri(),
            Launcher::Hydra => compat_tests::hydra(),
        }));
        o.assert_success();
        let kids = fields(&o, "child ");
        assert_eq!(kids.len(), 3, "{}: {o}", l.name());
        assert!(o.stdout_lines().contains(&"parent: spawned 3"));
        outs.push(o);
    }
    compat_tests::assert_same_stdout(&outs[0], &outs[1]);
    ctx.assert_no_leftovers();
}

#[test]
fn mpich_spawn_ch3_pmi1() {
    mpich_spawn(Ch3::Pmi1);
}

#[test]
fn mpich_spawn_ch3_pmi2() {
    mpich_spawn(Ch3::Pmi2);
}

/// MPI_Comm_spawn_multiple with a `host` info per command, and MPI_Comm_spawn with `host` and
/// `wdir`, across 4 simulated hosts.
fn mpich_spawn_info(build: Ch3) {
    let ctx = Ctx::new(&format!("mpich_spawn_info_{}", build.name()));
    let p = ctx.ch3_prog(build, "dynamic");
    let o = run(kauri_job(
        &ctx,
        &fork("n1,n2,n3,n4", 2, &[&p, "multi", "2", "1", "n3", "n4"]),
    ));
    o.assert_success();
    let kids = fields(&o, "child ");
    let got: Vec<(&str, &str)> = kids
        .iter()
        .map(|k| (k["appnum"].as_str(), k["host"].as_str()))
        .collect();
    assert_eq!(got, [("0", "n3"), ("0", "n3"), ("1", "n4")], "{o}");
    let sub = ctx.dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let o = run(kauri_job(
        &ctx,
        &fork(
            "n1,n2,n3,n4",
            1,
            &[
                &p,
                "spawn",
                "2",
                "host=n2",
                &format!("wdir={}", sub.display()),
            ],
        ),
    ));
    o.assert_success();
    for k in fields(&o, "child ") {
        assert_eq!(
            (k["host"].as_str(), k["cwd"].as_str()),
            ("n2", sub.to_str().unwrap())
        );
    }
    ctx.assert_no_leftovers();
}

#[test]
fn mpich_spawn_info_ch3_pmi1() {
    mpich_spawn_info(Ch3::Pmi1);
}

#[test]
fn mpich_spawn_info_ch3_pmi2() {
    mpich_spawn_info(Ch3::Pmi2);
}

/// Nested spawn: generation by generation, across hosts, then under Hydra on one host.
#[test]
fn mpich_nested_spawn() {
    for build in Ch3::BOTH {
        let ctx = Ctx::new(&format!("mpich_nested_{}", build.name()));
        let p = ctx.ch3_prog(build, "dynamic");
        let o = run(kauri_job(&ctx, &fork("n1,n2,n3,n4", 1, &[&p, "nest", "3"])));
        o.assert_success();
        assert!(o.stdout_lines().contains(&"parent: chain of 3 done"), "{o}");
        assert_eq!(o.stdout.matches("alive").count(), 3, "{o}");
        ctx.assert_no_leftovers();
    }
}

/// A spawn that names a host outside the run fails in MPI_Comm_spawn (errors return), and the
/// program goes on to finalize. PMI-1 only: MPICH 4.0.2's ch3 over PMI-2 ignores a failed
/// `spawn-response` (kauri's is `rc=1;errmsg=spawn: host nowhere is not one of this run's
/// hosts`) and waits in MPI_Comm_accept for children that do not exist; the pmi-dyn test
/// above checks that reply in both protocols.
#[test]
fn mpich_spawn_on_an_unknown_host_fails_cleanly() {
    let build = Ch3::Pmi1;
    let ctx = Ctx::new(&format!("mpich_badhost_{}", build.name()));
    let p = ctx.ch3_prog(build, "dynamic");
    let o = run(kauri_job(
        &ctx,
        &fork("n1,n2", 1, &[&p, "badhost", "nowhere"]),
    ));
    assert!(
        o.stdout_lines()
            .contains(&"parent: spawn on nowhere failed"),
        "{o}"
    );
    o.assert_success();
    ctx.assert_no_leftovers();
}

/// MPI_Publish_name / MPI_Lookup_name / MPI_Comm_accept / MPI_Comm_connect between two runs
/// through `kauri nameserver`.
#[test]
fn mpich_connect_accept_between_runs() {
    for build in Ch3::BOTH {
        let ctx = Ctx::new(&format!("mpich_connect_{}", build.name()));
        let p = ctx.ch3_prog(build, "dynamic");
        let ns = NameServer::start(&ctx);
        let name = format!("svc-{}", build.name());
        let server = background(
            &ctx,
            &["-nameserver", &ns.addr, "-n", "1", &p, "serve", &name],
        );
        let client =
            run(kauri_job(&ctx, &["-n", "2", &p, "connect", &name])
                .env("KAURI_NAMESERVER", &ns.addr));
        let (code, out, err) = server.join().unwrap();
        client.assert_success();
        assert_eq!(code, Some(0), "server: {out}{err}");
        assert!(
            client.stdout_lines().contains(&"client: sent 42"),
            "{client}"
        );
        assert!(
            out.lines().any(|l| l == "server: received 42"),
            "server: {out}"
        );
        drop(ns);
        ctx.assert_no_leftovers();
    }
}

/// MPI_UNIVERSE_SIZE: `-usize`, the slots named, or unset (as under Hydra) when none is.
#[test]
fn mpich_universe_size() {
    let ctx = Ctx::new("mpich_universe");
    let p = ctx.ch3_prog(Ch3::Pmi1, "dynamic");
    let cases: [(&[&str], &str); 3] = [
        (&["-usize", "8"], "universe 8"),
        (&["-hosts", "localhost:6"], "universe 6"),
        (&[], "universe unset"),
    ];
    for (extra, want) in cases {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["-n", "1", &p, "universe"]);
        let o = run(kauri_job(&ctx, &args));
        o.assert_success();
        assert_eq!(o.stdout_lines(), [want], "{o}");
    }
    let h = run(ctx.job(Launcher::Hydra, &["-n", "1", &p, "universe"]));
    assert_eq!(h.stdout_lines(), ["universe unset"], "Hydra agrees: {h}");
    ctx.assert_no_leftovers();
}
