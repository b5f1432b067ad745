//! Failure notification for MPICH, as Hydra gives it: under `-disable-auto-cleanup`, a rank
//! that dies is added to the reserved key `PMI_dead_processes` on every host, then the
//! survivors get `SIGUSR1`. The ranks are `tests/programs/dead_procs.py`, a PMI client
//! written on the wire (even ranks PMI-1, odd ranks PMI-2); the last rank exits 1 after a
//! fence.

use std::process::Output;

mod common;

use common::{kauri, lines, stderr};

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3"] {
        if std::path::Path::new(p).exists() {
            return p;
        }
    }
    panic!("python3 is needed (Debian package python3)");
}

fn program() -> String {
    format!(
        "{}/tests/programs/dead_procs.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Four ranks of the program, with `args` before it.
fn run(args: &[&str]) -> Output {
    let prog = program();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-n", "4", python(), &prog]);
    kauri(&all, None, &[])
}

/// What each survivor prints once told: the key empty before, `3` after, in each protocol.
fn told() -> Vec<String> {
    let v1 = "before: get=0: ; after: get=0:3";
    let v2 = "before: kvs-get=TRUE: info-getjobattr=TRUE: ; \
              after: kvs-get=TRUE:3 info-getjobattr=TRUE:3";
    vec![
        format!("rank 0 SIGUSR1; {v1}").replace(" ;", ";"),
        format!("rank 1 SIGUSR1; {v2}").replace(" ;", ";"),
        format!("rank 2 SIGUSR1; {v1}").replace(" ;", ";"),
    ]
}

#[test]
fn one_host_survivors_are_told_of_a_dead_rank() {
    let o = run(&["-disable-auto-cleanup"]);
    assert_eq!(lines(&o), told(), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// Rank 3 dies on b; ranks 0 and 1 on a read it from a's own engine.
#[test]
fn two_hosts_survivors_are_told_of_a_dead_rank() {
    let o = run(&[
        "-disable-auto-cleanup",
        "-launcher",
        "fork",
        "-hosts",
        "a,b",
        "-ppn",
        "2",
    ]);
    assert_eq!(lines(&o), told(), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// Without `-disable-auto-cleanup` the job ends as before: no signal, no key, the
/// survivors are torn down.
#[test]
fn with_auto_cleanup_the_job_ends_as_before() {
    let o = run(&["-launcher", "fork", "-hosts", "a,b", "-ppn", "2"]);
    let err = stderr(&o);
    assert!(lines(&o).is_empty(), "{:?} {err}", lines(&o));
    assert!(err.contains("rank 3"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
}
