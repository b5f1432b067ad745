//! Open MPI 5's fault-tolerant MPI (ULFM) under `kauri -with-ft ulfm`, beside the wheel's own
//! `mpirun --with-ft ulfm` (PRRTE) as the reference: the Open MPI 5 of
//! `${KAURI_CACHE:-$HOME/.cache/kauri}/venvs/openmpi5` ([`compat_tests::wheel_venv`]: a missing
//! one is skipped with a line saying so, and fails under `CI=true`).
//!
//! `programs/ompi5_ulfm.c` and its mpi4py twin `programs/ulfm.py` kill their last rank of 4;
//! the survivors revoke the world, shrink it and agree. Each survivor must print its shrunk
//! size (3, or 2 when a host of two ranks is lost), the agreement must succeed, and the job
//! must end with status 0, as under `mpirun --with-ft ulfm`: a rank killed by a signal is a
//! fault the job tolerated. On one host under both launchers (the same lines); on two
//! simulated hosts (`-launcher fork`) under kauri only (PRRTE's daemons for two simulated
//! hosts hang on one machine: compat-tests/wheels). The lost-host cases kill host b's agent:
//! its ranks must reach the survivors as failed processes (`PMIX_ERR_PROC_ABORTED`), not as
//! their server gone.
//!
//! Every job runs with `TMPDIR` in the test's directory, removed with it.

use compat_tests::{build_with_venv_mpicc, is_root, wheel_venv, Ctx, Launcher, Outcome};
use std::path::{Path, PathBuf};

const ONE_HOST: &[&str] = &[];
/// Ranks 0, 2 on a and 1, 3 on b.
const TWO_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "a,b"];
/// Ranks 0, 1 on a and 2, 3 on b: rank 3 killing its agent takes rank 2 with it.
const TWO_HOSTS_BLOCK: &[&str] = &["-launcher", "fork", "-hosts", "a,b", "-ppn", "2"];

/// The program to run: the C one (built here) or the mpi4py one (the venv's python).
enum Prog {
    C(String),
    Py(PathBuf),
}

impl Prog {
    fn argv(&self, mode: &str) -> Vec<String> {
        match self {
            Prog::C(p) => vec![p.clone(), mode.into()],
            Prog::Py(python) => vec![
                python.to_string_lossy().into_owned(),
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("programs/ulfm.py")
                    .to_string_lossy()
                    .into_owned(),
                mode.into(),
            ],
        }
    }

    /// The line survivor `rank` of `n` prints after shrinking to `shrunk`.
    fn line(&self, rank: usize, n: usize, shrunk: usize) -> String {
        match self {
            Prog::C(_) => format!(
                "ompi5_ulfm: rank {rank} of {n}: shrunk size {shrunk} rank {rank} agree rc=0 flag=1"
            ),
            Prog::Py(_) => format!(
                "ulfm.py: rank {rank} of {n}: shrunk size {shrunk} rank {rank} agree flag=1"
            ),
        }
    }
}

fn c_prog(ctx: &Ctx) -> Option<Prog> {
    build_with_venv_mpicc(ctx, "openmpi5", "ompi5_ulfm").map(Prog::C)
}

fn py_prog() -> Option<Prog> {
    wheel_venv("openmpi5").map(|v| Prog::Py(v.join("bin/python3")))
}

/// `LAUNCHER ARGS -n 4 PROG MODE` with the venv's `bin` first on `PATH`: `launcher` is
/// `None` for kauri (`-with-ft ulfm` first), or the wheel's `mpirun`.
fn run(ctx: &Ctx, mpirun: Option<&Path>, args: &[&str], prog: &Prog, mode: &str) -> Outcome {
    let venv = wheel_venv("openmpi5").expect("checked by the caller");
    let tmp = ctx.dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut a: Vec<String> = Vec::new();
    let exe = match mpirun {
        None => {
            a.extend(["-with-ft", "ulfm"].map(String::from));
            ctx.kauri()
        }
        Some(m) => {
            // Unbound and oversubscribed, as the wheels matrix runs it (2 cores).
            a.extend(
                ["--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none"].map(String::from),
            );
            if is_root() {
                a.push("--allow-run-as-root".into());
            }
            m.to_path_buf()
        }
    };
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["-n", "4"].map(String::from));
    a.extend(prog.argv(mode));
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = ctx
        .job(Launcher::Kauri, &a)
        .program(exe)
        .env("PATH", &path)
        .env("TMPDIR", &tmp.to_string_lossy())
        .env(
            "MPIEXEC_TIMEOUT",
            if mpirun.is_some() { "60" } else { "200" },
        )
        .timeout(std::time::Duration::from_secs(300))
        .run();
    eprintln!(
        "=== {}\n{o}",
        if mpirun.is_some() { "mpirun" } else { "kauri" }
    );
    o
}

/// The survivors' lines: ranks `0..survivors` of 4, each shrunk to `survivors`.
fn survivors(prog: &Prog, survivors: usize) -> Vec<String> {
    let mut w: Vec<String> = (0..survivors).map(|r| prog.line(r, 4, survivors)).collect();
    w.sort();
    w
}

/// Checks a kauri run whose last rank was killed by a signal: the survivors' lines, status 0,
/// the death named as tolerated, and no Open MPI help banner.
fn assert_recovered(o: &Outcome, prog: &Prog, n_survivors: usize, what: &str) {
    assert_eq!(
        o.sorted_stdout(),
        survivors(prog, n_survivors),
        "{what}: {o}"
    );
    assert_eq!(o.code, Some(0), "{what}: the survivors finished: {o}");
    assert!(
        !o.stderr.contains("Sorry!") && !o.stderr.contains("missing-param-file"),
        "{what}: an Open MPI help banner: {o}"
    );
}

/// One host: `mpirun --with-ft ulfm` and `kauri -with-ft ulfm` print the same survivors'
/// lines (shrunk to 3), and both exit 0.
fn one_host(prog: Option<Prog>, ctx: &Ctx) {
    let Some(prog) = prog else { return };
    let mpirun = wheel_venv("openmpi5").unwrap().join("bin/mpirun");
    let reference = run(ctx, Some(&mpirun), ONE_HOST, &prog, "signal");
    assert_eq!(
        reference.sorted_stdout(),
        survivors(&prog, 3),
        "mpirun --with-ft ulfm, the reference: {reference}"
    );
    // PRRTE 3.0 (the wheel's mpirun) sometimes never ends after the survivors finished (seen
    // 2 runs in 8 by hand here; kauri 0 in 10): its status is 0 when it ends by itself, and only then
    // compared.
    if reference
        .stderr
        .contains("time limit for job execution has been reached")
    {
        eprintln!("mpirun --with-ft ulfm did not end after the survivors finished (PRRTE)");
    } else {
        assert_eq!(reference.code, Some(0), "mpirun: {reference}");
    }
    let o = run(ctx, None, ONE_HOST, &prog, "signal");
    assert_recovered(&o, &prog, 3, "one host");
    assert!(
        o.stderr.contains("rank 3 (pid ")
            && o.stderr
                .contains("killed by signal 9 (SIGKILL) (tolerated: -with-ft)"),
        "the death is named as tolerated: {o}"
    );
    ctx.assert_no_leftovers();
}

#[test]
fn c_one_host_as_under_mpirun() {
    let ctx = Ctx::new("ulfm_c_one_host");
    one_host(c_prog(&ctx), &ctx);
}

#[test]
fn py_one_host_as_under_mpirun() {
    let ctx = Ctx::new("ulfm_py_one_host");
    one_host(py_prog(), &ctx);
}

/// Two simulated hosts, the last rank (on b) killed: the survivors on both hosts shrink to 3.
fn two_hosts(prog: Option<Prog>, ctx: &Ctx) {
    let Some(prog) = prog else { return };
    let o = run(ctx, None, TWO_HOSTS, &prog, "signal");
    assert_recovered(&o, &prog, 3, "two hosts");
    ctx.assert_no_leftovers();
}

#[test]
fn c_two_hosts() {
    let ctx = Ctx::new("ulfm_c_two_hosts");
    two_hosts(c_prog(&ctx), &ctx);
}

#[test]
fn py_two_hosts() {
    let ctx = Ctx::new("ulfm_py_two_hosts");
    two_hosts(py_prog(), &ctx);
}

/// Two simulated hosts, rank 3 kills b's agent: b is lost with ranks 2 and 3; the survivors
/// on a are told of both as failed processes and shrink to 2; the job goes on and ends 0.
fn lost_host(prog: Option<Prog>, ctx: &Ctx) {
    let Some(prog) = prog else { return };
    let o = run(ctx, None, TWO_HOSTS_BLOCK, &prog, "agent");
    assert_recovered(&o, &prog, 2, "lost host");
    assert!(
        o.stderr.contains("the job goes on without it (-with-ft)"),
        "{o}"
    );
    ctx.assert_no_leftovers();
}

#[test]
fn c_two_hosts_lost_host() {
    let ctx = Ctx::new("ulfm_c_lost_host");
    lost_host(c_prog(&ctx), &ctx);
}

#[test]
fn py_two_hosts_lost_host() {
    let ctx = Ctx::new("ulfm_py_lost_host");
    lost_host(py_prog(), &ctx);
}

/// Two simulated hosts, both ranks of b killed by a signal: b's agent ends with nothing left
/// to run, and the survivors' fences (the one in `MPI_Finalize`) go on without it; they
/// shrink to 2 and the job ends 0.
#[test]
fn c_two_hosts_every_rank_of_a_host_killed() {
    let ctx = Ctx::new("ulfm_c_host_emptied");
    let Some(prog) = c_prog(&ctx) else { return };
    let o = run(&ctx, None, TWO_HOSTS_BLOCK, &prog, "two");
    assert_recovered(&o, &prog, 2, "every rank of b killed");
    ctx.assert_no_leftovers();
}
