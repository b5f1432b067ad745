//! Failure notification for MPICH, as Hydra gives it: under `-disable-auto-cleanup`, a rank
//! that dies is added to the reserved key `PMI_dead_processes` on every host, then the
//! survivors get `SIGUSR1`. The ranks are `tests/programs/dead_procs.py`, a PMI client
//! written on the wire (even ranks PMI-1, odd ranks PMI-2); the last rank exits 1 after a
//! fence. `-with-ft ulfm` keeps the same notification, and a rank killed by a signal or a
//! lost host no longer fails kauri's exit status.

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

/// `first`, then two fork hosts a and b with ranks 0 and 1 on a, 2 and 3 on b.
fn with_two_hosts<'a>(first: &[&'a str]) -> Vec<&'a str> {
    let mut a = first.to_vec();
    a.extend(["-launcher", "fork", "-hosts", "a,b", "-ppn", "2"]);
    a
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
    let o = run(&with_two_hosts(&["-disable-auto-cleanup"]), &[]);
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
        &with_two_hosts(&["-disable-auto-cleanup"]),
        &[("DEAD_PROCS_KILL_AGENT", "1")],
    );
    let err = stderr(&o);
    assert_eq!(lines(&o), vec![told(0, "2,3"), told(1, "2,3")], "{err}");
    assert!(err.contains("the job goes on without it"), "{err}");
    assert_eq!(o.status.code(), Some(255), "{err}");
}

/// `-with-ft ulfm`: the survivors are told as under `-disable-auto-cleanup`, and a rank
/// killed by a signal is a tolerated fault: status 0 (as `mpirun --with-ft ulfm`), where
/// `-disable-auto-cleanup` alone gives the signal's number, as Hydra.
#[test]
fn with_ft_a_rank_killed_by_a_signal_does_not_fail_the_job() {
    let kill = [("DEAD_PROCS_SIGNAL", "1")];
    let want: Vec<String> = (0..3).map(|r| told(r, "3")).collect();
    let o = run(&["-with-ft", "ulfm"], &kill);
    let err = stderr(&o);
    assert_eq!(lines(&o), want, "{err}");
    assert!(
        err.contains("killed by signal 9 (SIGKILL) (tolerated: -with-ft)"),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    let o = run(&["-disable-auto-cleanup"], &kill);
    assert_eq!(lines(&o), want, "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
}

/// `-with-ft ulfm`: a rank's non-zero exit is its own verdict and still counts.
#[test]
fn with_ft_an_exit_code_still_counts() {
    let o = run(&["-with-ft", "ulfm"], &[]);
    let want: Vec<String> = (0..3).map(|r| told(r, "3")).collect();
    assert_eq!(lines(&o), want, "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// `-with-ft ulfm`, rank 3 kills b's agent: the survivors are told of 2 and 3, the job goes
/// on and ends 0 (255 under `-disable-auto-cleanup` alone).
#[test]
fn with_ft_a_lost_host_does_not_fail_the_job() {
    let o = run(
        &with_two_hosts(&["-with-ft", "ulfm"]),
        &[("DEAD_PROCS_KILL_AGENT", "1")],
    );
    let err = stderr(&o);
    assert_eq!(lines(&o), vec![told(0, "2,3"), told(1, "2,3")], "{err}");
    assert!(
        err.contains("the job goes on without it (-with-ft)"),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
}

/// `-with-ft ulfm` turns on Open MPI's and MPICH's fault tolerance for every rank, unless the
/// user set the variable; without it neither is set.
#[test]
fn with_ft_sets_the_mpis_switches_unless_the_user_did() {
    let show = [
        "sh",
        "-c",
        "echo ompi=$OMPI_MCA_mpi_ft_enable mpich=$MPIR_CVAR_ENABLE_FT",
    ];
    let mut a = vec!["-with-ft", "ulfm", "-n", "2"];
    a.extend(show);
    let o = kauri(&a, None, &[]);
    assert_eq!(lines(&o), vec!["ompi=1 mpich=1"; 2], "{}", stderr(&o));
    let mut a = vec![
        "-with-ft",
        "ulfm",
        "-genv",
        "MPIR_CVAR_ENABLE_FT",
        "0",
        "-n",
        "1",
    ];
    a.extend(show);
    let o = kauri(&a, None, &[("OMPI_MCA_mpi_ft_enable", "0")]);
    assert_eq!(lines(&o), vec!["ompi=0 mpich=0"], "{}", stderr(&o));
    let mut a = vec!["-n", "1"];
    a.extend(show);
    let o = kauri(&a, None, &[]);
    assert_eq!(lines(&o), vec!["ompi= mpich="], "{}", stderr(&o));
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
