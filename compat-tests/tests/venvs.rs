//! The MPIs of pip wheels, through mpi4py, under kauri with no flag: MPICH 5.0, MPICH 4.3,
//! Open MPI 5.0 and Intel MPI 2021, each in its own Python environment under
//! `${KAURI_CACHE:-$HOME/.cache/kauri}/venvs` ([`compat_tests::venv`]: a missing one is
//! skipped with a line saying so, and fails under `CI=true`).
//!
//! `python3 -c 'from mpi4py import MPI …'` is linked to no MPI, so `--pmi=auto` serves it
//! PMI-1/PMI-2 and PMIx side by side (issue #17). Each MPI must take the one it speaks and
//! make one world: MPICH 5 reads both `PMI_SIZE` and `PMIX_NAMESPACE` and, unless told
//! which (`MPIR_CVAR_PMI_VERSION`), aborts every rank (issue #26).
//!
//! Every job runs with `TMPDIR` in the test's directory (kauri's PMIx server and Open MPI
//! keep their files there), removed with it.

use compat_tests::{venv, Ctx, Launcher, Outcome};
use std::path::Path;

const ONE_HOST: &[&str] = &[];
const TWO_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "a,b"];

/// Prints `rank R of N` from every rank.
const HELLO: &str = "from mpi4py import MPI; c = MPI.COMM_WORLD; \
                     print('rank', c.Get_rank(), 'of', c.Get_size(), flush=True)";

/// `kauri ARGS -n N VENV/bin/python3 PROG…` with `VENV/bin` first on `PATH`.
fn kauri_py(ctx: &Ctx, venv: &Path, args: &[&str], n: usize, prog: &[&str]) -> Outcome {
    let tmp = ctx.dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let python = venv.join("bin/python3").to_string_lossy().into_owned();
    let n = n.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-n", &n, &python]);
    a.extend(prog);
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = ctx
        .job(Launcher::Kauri, &a)
        .program(ctx.kauri())
        .env("PATH", &path)
        .env("TMPDIR", &tmp.to_string_lossy())
        .run();
    eprintln!("=== kauri\n{o}");
    o
}

fn sorted_stdout(o: &Outcome) -> Vec<String> {
    let mut l: Vec<String> = o.stdout.lines().map(str::to_string).collect();
    l.sort();
    l
}

fn world(n: usize) -> Vec<String> {
    let mut w: Vec<String> = (0..n).map(|r| format!("rank {r} of {n}")).collect();
    w.sort();
    w
}

/// mpi4py's hello of `venv` at 1, 2 and 4 ranks on each of `layouts` (one host, two
/// simulated hosts): one world each, status 0, no line from kauri.
fn one_world_each_time(name: &str, layouts: &[&[&str]]) {
    let Some(v) = venv(name) else { return };
    let ctx = Ctx::new(&format!("venv_{name}"));
    for &hosts in layouts {
        for n in [1, 2, 4] {
            let o = kauri_py(&ctx, &v, hosts, n, &["-c", HELLO]);
            assert_eq!(o.code, Some(0), "{name} {hosts:?} -n {n}: {o}");
            assert_eq!(sorted_stdout(&o), world(n), "{name} {hosts:?} -n {n}: {o}");
            assert!(!o.stderr.contains("kauri:"), "{name} {hosts:?} -n {n}: {o}");
        }
    }
    ctx.assert_no_leftovers();
}

/// Issue #26: MPICH 5 served both protocols (`MPIR_CVAR_PMI_VERSION` defaults to `auto`)
/// aborted every rank with "Auto-detection of PMI version failed"; kauri now tells it to
/// take PMI-1.
#[test]
fn mpich5_mpi4py_with_no_flag() {
    one_world_each_time("mpich5", &[ONE_HOST, TWO_HOSTS]);
}

/// The user's own choice is kept, under any of MPICH's names for it: with
/// `-genv MPICH_PMI_VERSION 1` (the old prefix) kauri adds no `MPIR_CVAR_PMI_VERSION`, which
/// would win over it. (The wheel's MPICH is built with PMI-1 only: `2` or `x` fail in
/// `MPI_Init` with "Internal MPI error", served or not.)
#[test]
fn mpich5_mpi4py_keeps_the_users_pmi_version() {
    let Some(v) = venv("mpich5") else { return };
    let ctx = Ctx::new("venv_mpich5_user_choice");
    let prog = format!("{HELLO}; import os; print(os.environ.get('MPIR_CVAR_PMI_VERSION'))");
    let o = kauri_py(
        &ctx,
        &v,
        &["-genv", "MPICH_PMI_VERSION", "1"],
        2,
        &["-c", &prog],
    );
    assert_eq!(o.code, Some(0), "{o}");
    let mut want = world(2);
    want.extend(["None".to_string(), "None".to_string()]);
    want.sort();
    assert_eq!(sorted_stdout(&o), want, "{o}");
    ctx.assert_no_leftovers();
}

/// MPICH 4.3 (PMI-1 unless told otherwise) is served both and keeps working.
#[test]
fn mpich43_mpi4py_with_no_flag() {
    one_world_each_time("mpich43", &[ONE_HOST, TWO_HOSTS]);
}

/// Open MPI 5 keeps speaking PMIx when served both.
#[test]
fn openmpi5_mpi4py_with_no_flag() {
    one_world_each_time("openmpi5", &[ONE_HOST, TWO_HOSTS]);
}

/// Intel MPI 2021 (Hydra's PMI-1 client; it reads `I_MPI_PMI`, not MPICH's variable) keeps
/// working when served both. One host only: on two simulated hosts a rank of its 4-rank
/// job dies of SIGSEGV in `MPI_Init`, with `--pmi=pmi1` as well (not a wiring matter).
#[test]
fn impi_mpi4py_with_no_flag() {
    one_world_each_time("impi", &[ONE_HOST]);
}
