//! kauri inside a real resource manager's job: its hosts from the job, its agents started by
//! the manager's own launcher, its ranks' environment cleaned of the manager's task variables;
//! and kauri killed with `SIGKILL` in the middle leaves nothing of its job.
//!
//! Two groups, by what they need (named by prefix, so one group runs with a filter):
//!
//! * `sge_*`: **root**, a one-host Grid Engine (Debian `gridengine-master`,
//!   `gridengine-exec`, `gridengine-client`) started with `sge/sge-local.sh` once and stopped
//!   when the binary exits. kauri runs as an interactive job of the parallel environment
//!   `kauri`: `qrsh -pe kauri 2 -cwd -V KAURI PROGRAM`.
//! * `slurm_*`: **root**, the one-node Slurm of `tree.rs` (`slurm/slurm-local.sh`); kauri
//!   runs as `salloc -Q -N1 -n4 KAURI …`.
//!
//! A missing tool or package is a test failure naming the package, never a skip. Every test
//! asserts the exit status (a test that kills kauri: that the job's processes went) and ends
//! with the leftover check.

use compat_tests::{
    find_marked, processes, sge_local, signal_pid, slurm_local, Ctx, Job, Launcher, Outcome,
    ProcInfo, MARKER_VAR,
};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn run(job: Job) -> Outcome {
    let o = job.run();
    eprintln!("=== {}\n{o}", o.launcher);
    o
}

/// A kauri job run from the test's own link to the binary.
fn kauri_job<S: AsRef<str>>(ctx: &Ctx, args: &[S]) -> Job {
    ctx.job(Launcher::Kauri, args).program(ctx.kauri())
}

/// `where.sh`: "where: rank=R size=N host=H job=JOB_ID anc=comm,comm,..." (the names of the
/// rank's ancestors, to see what started its agent).
const WHERE_SH: &str = r#"#!/bin/sh
anc=""
p=$PPID
while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    anc="$anc,$(cat /proc/$p/comm 2>/dev/null)"
    p=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f2)
done
echo "where: rank=$KAURI_RANK size=$KAURI_SIZE host=$KAURI_HOST job=$JOB_ID anc=${anc#,}"
"#;

/// The `where:` lines, sorted: (rank, host, job, ancestors).
fn wheres(o: &Outcome) -> Vec<(usize, String, String, Vec<String>)> {
    let mut v: Vec<_> = o
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
            (
                field("rank").parse().expect("rank"),
                field("host"),
                field("job"),
                field("anc").split(',').map(str::to_string).collect(),
            )
        })
        .collect();
    v.sort();
    v
}

// =======================================================================================
// Grid Engine (root)

/// Inside a Grid Engine parallel environment kauri takes its hosts from `$PE_HOSTFILE` and,
/// unasked, starts its agent through `qrsh -inherit`.
///
/// What this proves, honestly: there is one machine, so the job's one host is this machine
/// under another name. The cell calls this host `kauri-sge1` (`host_aliases`, with the
/// machine's own name as an alias; `kauri-sge1` resolves to 127.0.0.2 in the cell's private
/// view of /etc/hosts), so `PE_HOSTFILE` lists `kauri-sge1 2 kauri.q@kauri-sge1 UNDEFINED`.
/// kauri does not take that name for itself, so it starts an agent for it with
/// `qrsh -inherit -nostdin -V kauri-sge1 …`; Grid Engine delivers the task to this host's
/// execd, which runs the agent under `qrsh_starter` and `sge_shepherd` as a task of the job.
/// The ranks' ancestors show that chain, their `KAURI_HOST` is the PE host file's name and
/// their `JOB_ID` the job's. Not proved: two real machines (the agent's connection back to
/// kauri crosses loopback only).
#[test]
fn sge_hosts_from_pe_hostfile_agent_through_qrsh_inherit() {
    let sge = sge_local();
    let ctx = Ctx::new("sge_where");
    let w = ctx.script("where.sh", WHERE_SH);
    let o = run(kauri_job(&ctx, &[w.as_str()]).wrapped(&sge.qrsh_pe(2)));
    o.assert_success();
    let w = wheres(&o);
    assert_eq!(w.len(), 2, "one where: line per slot of the PE\n{o}");
    for (i, (rank, host, job, anc)) in w.iter().enumerate() {
        assert_eq!(*rank, i, "{o}");
        assert_eq!(host, &sge.host, "ranks run on the PE host file's host\n{o}");
        assert!(
            !job.is_empty(),
            "rank {rank} is not in a Grid Engine job\n{o}"
        );
        let chain: Vec<&str> = anc.iter().take(4).map(String::as_str).collect();
        assert_eq!(
            chain,
            ["kauri", "qrsh_starter", "sge_shepherd", "sge_execd"],
            "rank {rank}'s agent was not started by qrsh -inherit (ancestors {anc:?})\n{o}"
        );
    }
    ctx.assert_no_leftovers();
}

/// MPICH's hello (Debian's MPICH) over the same path: 2 ranks from the PE's 2 slots, wired
/// up by the agent that `qrsh -inherit` started.
#[test]
fn sge_mpich_hello() {
    let sge = sge_local();
    let ctx = Ctx::new("sge_hello");
    let hello = ctx.prog("hello");
    let o = run(kauri_job(&ctx, &[hello.as_str()]).wrapped(&sge.qrsh_pe(2)));
    o.assert_success();
    let mut got: Vec<&str> = o.stdout.lines().collect();
    got.sort();
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let me = me.trim();
    assert_eq!(
        got,
        [
            format!("hello rank 0 of 2 on {me}"),
            format!("hello rank 1 of 2 on {me}")
        ],
        "{o}"
    );
    ctx.assert_no_leftovers();
}

/// kauri killed with `SIGKILL` inside a Grid Engine parallel environment (`qrsh -pe kauri 2
/// KAURI -n 2 rank.sh`), while its ranks run under the agent `qrsh -inherit` started: no rank,
/// agent or `qrsh` of the job is left, and the job ends (`qrsh` returns). kauri is the job's
/// command, so its death ends the job and Grid Engine ends the job's tasks; `qrsh -inherit`
/// dies with kauri (its death signal), and the agent, seeing its parent's link end, kills its
/// ranks too.
#[test]
fn sge_kauri_killed_leaves_no_rank_or_agent() {
    let sge = sge_local();
    let ctx = Ctx::new("sge_kill");
    let rank = ctx.script("rank.sh", RUNNING_SH);
    let dir = ctx.dir.to_string_lossy().into_owned();
    let argv = sge.qrsh_pe(2);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .arg(ctx.kauri())
        .args(["-n", "2", &rank, &dir]);
    let mut qrsh = start_until_ranks_run(&ctx, cmd, "qrsh", 2);
    let stderr = || std::fs::read_to_string(ctx.dir.join("stderr")).unwrap_or_default();
    // The ranks, agents and front end, and `qrsh -inherit` (which names the agent's path);
    // not the job's own `qrsh` (this test's child) nor a zombie `kauri` under init (another
    // run's, which `find_marked` takes for this test's by its name alone).
    let qrsh_pid = qrsh.id();
    let marked = || -> Vec<ProcInfo> {
        find_marked(&ctx.marker, &ctx.dir)
            .into_iter()
            .filter(|p| p.pid != qrsh_pid && !(p.state == 'Z' && p.ppid == 1))
            .filter(|p| {
                p.cmdline.contains(&rank)
                    || ["kauri", "ranks-keeper", "qrsh"].contains(&p.comm.as_str())
            })
            .collect()
    };
    let before = marked();
    let front = before
        .iter()
        .find(|p| {
            p.comm == "kauri" && !p.cmdline.contains(" agent ") && !p.cmdline.contains("--keeper")
            // (a keeper is `ranks-keeper`, forked or `kauri --keeper`)
        })
        .unwrap_or_else(|| fail_clean(&ctx, format!("no front end among {before:?}")))
        .clone();
    let agents = before
        .iter()
        .filter(|p| p.comm == "kauri" && p.cmdline.contains(" agent "))
        .count();
    if agents != 1 || before.iter().filter(|p| p.cmdline.contains(&rank)).count() < 2 {
        fail_clean(&ctx, format!("not one agent and 2 ranks: {before:?}"));
    }
    assert!(signal_pid(front.pid, "KILL"), "kill kauri");
    let start = Instant::now();
    let mut ended = None;
    while start.elapsed() < KILL_PATIENCE {
        if ended.is_none() {
            ended = qrsh.try_wait().ok().flatten();
        }
        if ended.is_some() && marked().is_empty() {
            break;
        }
        thread::sleep(Duration::from_millis(200));
    }
    let left = marked();
    if ended.is_none() {
        kill_group(qrsh_pid);
    }
    let _ = qrsh.wait();
    assert!(
        left.is_empty(),
        "{} process(es) of the job outlived kauri by {} s: {left:#?}\n{}",
        left.len(),
        KILL_PATIENCE.as_secs(),
        stderr()
    );
    assert!(
        ended.is_some(),
        "the Grid Engine job did not end: {}",
        stderr()
    );
    ctx.assert_no_leftovers();
}

/// Kills the process group `pgid` this test started (a job that did not end).
fn kill_group(pgid: u32) {
    signal_pid(pgid, "KILL");
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

// =======================================================================================
// Slurm (root)

/// `env.sh`: the rank's `SLURM_*` variables, one `env: NAME` line each.
const ENV_SH: &str = r#"#!/bin/sh
env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/env: \1/p' | sort
echo "env: done"
"#;

/// Under `salloc … kauri -launcher slurm`, ranks do not inherit what describes srun's tasks
/// and steps (`SLURM_JOBID`, `SLURM_NODELIST`, `SLURM_NTASKS`, `SLURM_TASKS_PER_NODE`, …
/// from salloc; `SLURM_STEP_ID`, `SLURM_PROCID`, … as a batch step or an enclosing srun
/// would set them, set here by hand on salloc's command line), and do keep the job's own
/// `SLURM_JOB_ID` and `SLURM_JOB_NODELIST`.
#[test]
fn slurm_ranks_do_not_see_task_variables() {
    let slurm = slurm_local();
    let ctx = Ctx::new("slurm_env");
    let e = ctx.script("env.sh", ENV_SH);
    let in_salloc = |job: Job| {
        let mut job = job
            .wrapped(&["salloc", "-Q", "-N1", "-n4"])
            .env("SLURM_CONF", &slurm.conf.to_string_lossy());
        for (k, v) in [
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEPID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_NUM_TASKS", "1"),
            ("SLURM_STEP_NODELIST", "kslurm1"),
        ] {
            job = job.env(k, v);
        }
        job
    };
    let seen = |o: &Outcome| -> Vec<String> {
        o.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("env: "))
            .map(str::to_string)
            .collect()
    };
    let gone = [
        "SLURM_JOBID",
        "SLURM_NODELIST",
        "SLURM_NNODES",
        "SLURM_NPROCS",
        "SLURM_NTASKS",
        "SLURM_TASKS_PER_NODE",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_NODELIST",
    ];
    // The control: the same script straight under salloc sees every one of them.
    let o = run(in_salloc(
        ctx.job(Launcher::Kauri, &[] as &[&str]).program(&e),
    ));
    o.assert_success();
    let control = seen(&o);
    for g in gone {
        assert!(
            control.iter().any(|l| l == g),
            "salloc did not set {g}\n{o}"
        );
    }
    let o = run(in_salloc(kauri_job(
        &ctx,
        &["-launcher", "slurm", "-n", "2", e.as_str()],
    )));
    o.assert_success();
    let seen = seen(&o);
    assert_eq!(seen.iter().filter(|l| *l == "done").count(), 2, "{o}");
    for g in gone {
        assert!(!seen.iter().any(|l| l == g), "a rank sees {g}\n{o}");
    }
    for kept in ["SLURM_JOB_ID", "SLURM_JOB_NODELIST"] {
        assert_eq!(
            seen.iter().filter(|l| *l == kept).count(),
            2,
            "every rank keeps {kept}\n{o}"
        );
    }
    ctx.assert_no_leftovers();
}

/// `rank.sh`: says it runs (`up.RANK`, and the Slurm or Grid Engine job's id in `job`) in the directory
/// given as its first argument, then runs until killed.
const RUNNING_SH: &str = r#"#!/bin/sh
echo "${SLURM_JOB_ID:-$JOB_ID}" > "$1/job"
touch "$1/up.$KAURI_RANK"
while :; do sleep 1; done
"#;

/// Fails a test with `why` before its kill, ending every process of it first (the job would
/// run on: the wrapper waits for the test).
/// Starts `cmd` (a resource manager's command that runs kauri) in a process group of its own,
/// marked with the test's marker, its stderr in `ctx.dir/stderr`, and waits until each of
/// the job's `n` ranks has written its `up.R` file; fails the test (after cleaning up) if
/// `what` ends first or the ranks do not start within [`KILL_PATIENCE`].
fn start_until_ranks_run(ctx: &Ctx, mut cmd: Command, what: &str, n: usize) -> Child {
    let mut child = cmd
        .env(MARKER_VAR, &ctx.marker)
        .current_dir(&ctx.dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(ctx.dir.join("stderr")).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let stderr = || std::fs::read_to_string(ctx.dir.join("stderr")).unwrap_or_default();
    let start = Instant::now();
    while !(0..n).all(|r| ctx.dir.join(format!("up.{r}")).exists()) {
        if let Ok(Some(st)) = child.try_wait() {
            fail_clean(
                ctx,
                format!("{what} ended ({st}) before the ranks ran: {}", stderr()),
            );
        }
        if start.elapsed() > KILL_PATIENCE {
            fail_clean(ctx, format!("the ranks did not start: {}", stderr()));
        }
        thread::sleep(Duration::from_millis(100));
    }
    child
}

fn fail_clean(ctx: &Ctx, why: String) -> ! {
    eprintln!("{why}");
    ctx.assert_no_leftovers();
    panic!("{why}");
}

/// How long the processes of a killed kauri may take to go: a failure, not a timing.
const KILL_PATIENCE: Duration = Duration::from_secs(120);

/// kauri killed with `SIGKILL` under `-launcher slurm`, while its ranks run on the node its
/// agent was started on by `srun` (`salloc -Q -N1 -n4 sh -c 'KAURI …; wait for the test'`,
/// so the allocation outlives kauri and salloc does not end the ranks): no rank, agent or
/// `srun` of the job is left, and Slurm lists no step of it (`squeue -s`). Then the
/// allocation is let go. Two things end them: `srun` dies with kauri (its death signal,
/// `launch`), and Slurm cancels a step whose `srun` is gone, killing the agent and the ranks;
/// and the agent, seeing its parent's link end, kills its ranks itself (the path
/// `tests/kill_kauri.rs` proves over ssh). With the agent stopped (`SIGSTOP`) before the kill,
/// this test passes too: Slurm's path alone suffices.
#[test]
fn slurm_kauri_killed_leaves_no_rank_agent_or_step() {
    let slurm = slurm_local();
    let ctx = Ctx::new("slurm_kill");
    let rank = ctx.script("rank.sh", RUNNING_SH);
    let dir = ctx.dir.to_string_lossy().into_owned();
    let kauri = ctx.kauri();
    let wrapper = format!("\"$@\"; while [ ! -e {dir}/release ]; do sleep 0.2; done",);
    let mut cmd = Command::new("salloc");
    cmd.args(["-Q", "-N1", "-n4", "sh", "-c", &wrapper, "sh"])
        .arg(&kauri)
        .args(["-launcher", "slurm", "-n", "2", &rank, &dir])
        .env("SLURM_CONF", &slurm.conf);
    let mut salloc = start_until_ranks_run(&ctx, cmd, "salloc", 2);
    let stderr = || std::fs::read_to_string(ctx.dir.join("stderr")).unwrap_or_default();
    let job = std::fs::read_to_string(ctx.dir.join("job")).expect("the job's id");
    let job = job.trim().to_string();
    // The ranks, agents, front end and srun: not salloc and the wrapper it runs, which
    // wait for the test (and name the rank's script too), nor a zombie `kauri` under init,
    // which `find_marked` takes for this test's by its name alone (another run's, reaped by
    // init in its time).
    let salloc_pid = salloc.id();
    let of_job = |p: &ProcInfo| {
        p.pid != salloc_pid
            && p.ppid != salloc_pid
            && !(p.state == 'Z' && p.ppid == 1)
            && (p.cmdline.contains(&rank)
                || ["srun", "kauri", "ranks-keeper"].contains(&p.comm.as_str()))
    };
    let marked = || -> Vec<ProcInfo> {
        find_marked(&ctx.marker, &ctx.dir)
            .into_iter()
            .filter(of_job)
            .collect()
    };
    // The front end: the kauri whose parent is the wrapper, salloc's child.
    let all = processes();
    let front = marked()
        .into_iter()
        .find(|p| p.comm == "kauri" && all.iter().any(|w| w.pid == p.ppid && w.ppid == salloc.id()))
        .unwrap_or_else(|| fail_clean(&ctx, format!("no front end among {:?}", marked())));
    let before = marked();
    if !before.iter().any(|p| p.comm == "srun")
        || before.iter().filter(|p| p.cmdline.contains(&rank)).count() < 2
    {
        fail_clean(&ctx, format!("not an srun and 2 ranks: {before:?}"));
    }
    let steps = || -> Vec<String> {
        let o = Command::new("squeue")
            .args(["-h", "-s", "-j", &job, "-o", "%i"])
            .env("SLURM_CONF", &slurm.conf)
            .output()
            .expect("squeue");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.ends_with(".extern") && !s.ends_with(".interactive"))
            .map(String::from)
            .collect()
    };
    if steps().is_empty() {
        fail_clean(&ctx, format!("Slurm lists no step of job {job}"));
    }
    assert!(signal_pid(front.pid, "KILL"), "kill kauri");
    let start = Instant::now();
    while (!marked().is_empty() || !steps().is_empty()) && start.elapsed() < KILL_PATIENCE {
        thread::sleep(Duration::from_millis(200));
    }
    let (left, running) = (marked(), steps());
    std::fs::write(ctx.dir.join("release"), "").expect("release the allocation");
    let _ = salloc.wait();
    assert!(
        left.is_empty(),
        "{} process(es) of the job outlived kauri by {} s: {left:#?}\n{}",
        left.len(),
        KILL_PATIENCE.as_secs(),
        stderr()
    );
    assert!(
        running.is_empty(),
        "Slurm still runs step(s) {running:?} of job {job}"
    );
    ctx.assert_no_leftovers();
}
