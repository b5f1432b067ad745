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
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let prog = program();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-n", "4", python(), &prog]);
    kauri(&all, None, env)
}

/// What survivor `rank` prints once told: the key empty before, `dead` after, in its protocol
/// (even ranks PMI-1, odd ranks PMI-2).
fn told(rank: usize, dead: &str) -> String {
    if rank % 2 == 0 {
        format!("rank {rank} SIGUSR1; before: get=0:; after: get=0:{dead}")
    } else {
        format!(
            "rank {rank} SIGUSR1; before: kvs-get=TRUE: info-getjobattr=TRUE:; \
             after: kvs-get=TRUE:{dead} info-getjobattr=TRUE:{dead}"
        )
    }
}

#[test]
fn one_host_survivors_are_told_of_a_dead_rank() {
    let o = run(&["-disable-auto-cleanup"], &[]);
    let want: Vec<String> = (0..3).map(|r| told(r, "3")).collect();
    assert_eq!(lines(&o), want, "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// Rank 3 dies on b; ranks 0 and 1 on a read it from a's own engine.
#[test]
fn two_hosts_survivors_are_told_of_a_dead_rank() {
    let o = run(
        &[
            "-disable-auto-cleanup",
            "-launcher",
            "fork",
            "-hosts",
            "a,b",
            "-ppn",
            "2",
        ],
        &[],
    );
    let want: Vec<String> = (0..3).map(|r| told(r, "3")).collect();
    assert_eq!(lines(&o), want, "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// Without `-disable-auto-cleanup` the job ends as before: no signal, no key, the
/// survivors are torn down.
#[test]
fn with_auto_cleanup_the_job_ends_as_before() {
    let o = run(&["-launcher", "fork", "-hosts", "a,b", "-ppn", "2"], &[]);
    let err = stderr(&o);
    assert!(lines(&o).is_empty(), "{:?} {err}", lines(&o));
    assert!(err.contains("rank 3"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
}

/// Rank 3 kills b's agent: b is lost with ranks 2 and 3, and the ranks on a are told of both.
#[test]
fn two_hosts_survivors_are_told_of_a_lost_host() {
    let o = run(
        &[
            "-disable-auto-cleanup",
            "-launcher",
            "fork",
            "-hosts",
            "a,b",
            "-ppn",
            "2",
        ],
        &[("DEAD_PROCS_KILL_AGENT", "1")],
    );
    let err = stderr(&o);
    assert_eq!(lines(&o), vec![told(0, "2,3"), told(1, "2,3")], "{err}");
    assert!(err.contains("the job goes on without it"), "{err}");
    assert_eq!(o.status.code(), Some(255), "{err}");
}

/// Under `-disable-auto-cleanup` a rank that exits with a non-zero code gets no line on
/// stderr (as under Hydra, which never prints one for an exit code): the survivors were told
/// and went on, and what the job prints is theirs. MPICH's `runtests` fails `ft/senddead`
/// and its siblings on any line but ` No Errors`. The status still says it (1), and a rank
/// killed by a signal still gets its line (Hydra prints the signal too).
#[test]
fn with_disable_auto_cleanup_an_exit_code_gets_no_line() {
    for hosts in [
        &[][..],
        &["-launcher", "fork", "-hosts", "a,b", "-ppn", "2"][..],
    ] {
        let mut args = vec!["-disable-auto-cleanup"];
        args.extend_from_slice(hosts);
        let o = run(&args, &[]);
        let err = stderr(&o);
        assert!(!err.contains("exited with code"), "{hosts:?}: {err}");
        assert_eq!(o.status.code(), Some(1), "{hosts:?}: {err}");
    }
    let o = kauri(
        &[
            "-disable-auto-cleanup",
            "-n",
            "2",
            "sh",
            "-c",
            "[ \"$PMI_RANK\" = 1 ] && kill -9 $$; sleep 1",
        ],
        None,
        &[],
    );
    let err = stderr(&o);
    assert!(
        err.contains("rank 1 (pid ") && err.contains("killed by signal 9"),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(9), "{err}");
}
