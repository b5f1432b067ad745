//! PMIx groups (`PMIx_Group_construct`/`destruct`, the server module's `group` upcall)
//! through kauri's PMIx server: on by default when the server library is OpenPMIx 5 (as it is
//! for Open MPI 5's programs, served by their own `libpmix`), turned on with
//! `KAURI_PMIX_GROUPS=1` for OpenPMIx 4.2 (docs/pmix.md, "Groups").
//!
//! * `examples_*`: OpenPMIx's own group examples (`group`, `group_dmodex`, `group_lcl_cid`,
//!   `asyncgroup`) from the source package of the installed `libpmix-dev`, fetched into
//!   `${KAURI_CACHE:-$HOME/.cache/kauri}/pmix-src` by `pmix-examples/fetch-source.sh` (run by
//!   `.ci/setup`) and built here against the installed library (`pkg-config pmix`). Each must
//!   print `COMPLETE` for every rank and no failure, on one host and on two simulated hosts
//!   (`-launcher fork`); `asyncgroup` (invite/join: PMIx events between the members) on one
//!   host only (kauri relays no client events between hosts: docs/pmix.md).
//! * `ompi5_*`: `programs/ompi5_groups.c` built with the Open MPI 5 of
//!   `${KAURI_CACHE:-$HOME/.cache/kauri}/venvs/openmpi5` (`MPI_Comm_create_from_group`,
//!   `MPI_Intercomm_create_from_groups`), run by kauri with no flag and no variable: kauri
//!   finds the venv's OpenPMIx 5 through the program's libraries and serves it with that.
//!
//! What is missing (the source package, the venv) skips a test with a line saying so, unless
//! `CI=true`, where it fails.

use compat_tests::{
    build_pmix_program, build_with_venv_mpicc, have, pmix_examples_dir, Ctx, Launcher, Outcome,
};
use std::path::PathBuf;

/// The examples directory of the fetched OpenPMIx source package, if any.
fn examples_dir() -> Option<PathBuf> {
    pmix_examples_dir("group.c")
}

/// kauri `args` `-n n prog`, with `TMPDIR` in the test's directory (checked empty after).
fn kauri(ctx: &Ctx, args: &[&str], n: usize, prog: &str, groups_var: bool) -> Outcome {
    let tmp = ctx.dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let n = n.to_string();
    let mut a = args.to_vec();
    a.extend(["-n", &n, prog]);
    let mut job = ctx
        .job(Launcher::Kauri, &a)
        .program(ctx.kauri())
        .env("TMPDIR", &tmp.to_string_lossy());
    if groups_var {
        job = job.env("KAURI_PMIX_GROUPS", "1");
    }
    let o = job.run();
    eprintln!("=== kauri {}\n{o}", a.join(" "));
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "kauri left {left:?} in TMPDIR\n{o}");
    o
}

const TWO_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "a,b"];

/// Every example of `names` passes under kauri `args` with 4 ranks: status 0, `COMPLETE`
/// from each rank, no line saying something failed.
fn examples(name: &str, args: &[&str], names: &[&str]) {
    let dir = examples_dir();
    if !have(
        "OpenPMIx's source package",
        "run compat-tests/pmix-examples/fetch-source.sh",
        dir.is_some(),
    ) {
        return;
    }
    let dir = dir.unwrap();
    let ctx = Ctx::new(name);
    for ex in names {
        let p = build_pmix_program(&ctx, &dir.join(format!("{ex}.c")), &dir, ex);
        let mut a = args.to_vec();
        a.extend(["--pmi=pmix"]);
        let o = kauri(&ctx, &a, 4, &p, true);
        assert_eq!(o.code, Some(0), "{ex} failed\n{o}");
        let all = format!("{}{}", o.stdout, o.stderr);
        let complete = all.lines().filter(|l| l.ends_with(" COMPLETE")).count();
        assert_eq!(complete, 4, "{ex}: not every rank completed\n{o}");
        let bad: Vec<&str> = all
            .lines()
            .filter(|l| l.contains("failed") || l.contains("ERROR") || l.contains("no CID"))
            .collect();
        assert!(bad.is_empty(), "{ex}: {bad:?}\n{o}");
    }
    ctx.assert_no_leftovers();
}

#[test]
fn examples_one_host() {
    examples(
        "groups-examples-one-host",
        &[],
        &["group", "group_dmodex", "group_lcl_cid", "asyncgroup"],
    );
}

#[test]
fn examples_two_hosts() {
    examples(
        "groups-examples-two-hosts",
        TWO_HOSTS,
        &["group", "group_dmodex", "group_lcl_cid"],
    );
}

fn ompi5(name: &str, args: &[&str], n: usize) {
    let ctx = Ctx::new(name);
    let Some(p) = build_with_venv_mpicc(&ctx, "openmpi5", "ompi5_groups") else {
        return;
    };
    let o = kauri(&ctx, args, n, &p, false);
    assert_eq!(o.code, Some(0), "ompi5_groups failed\n{o}");
    let mut got: Vec<&str> = o.stdout.lines().collect();
    got.sort();
    let mut want: Vec<String> = (0..n)
        .map(|r| format!("ompi5_groups: ok rank={r} size={n}"))
        .collect();
    want.sort();
    assert_eq!(got, want, "ompi5_groups: wrong stdout\n{o}");
    ctx.assert_no_leftovers();
}

#[test]
fn ompi5_one_host_n2() {
    ompi5("groups-ompi5-n2", &[], 2);
}

#[test]
fn ompi5_one_host_n4() {
    ompi5("groups-ompi5-n4", &[], 4);
}

#[test]
fn ompi5_two_hosts_n4() {
    ompi5("groups-ompi5-two-hosts", TWO_HOSTS, 4);
}
