//! Every ending has a deadline: an agent that stops answering (here `SIGSTOP`, as a host that
//! is cut off or frozen would) cannot hold kauri once the job is ending. Hosts are simulated
//! with the fork launcher; the rank on host `b` stops its own agent (its parent process).

mod common;

use common::{kauri, stderr};
use std::time::Duration;

/// Fails if a process holding `marker` is still there after 20 s.
fn assert_none_left(marker: &str) {
    common::assert_none_left(marker, Duration::from_secs(20));
}

/// Rank 0 (host a) fails after a moment; rank 1 (host b) first stops its agent.
fn stop_b_then_fail(marker: &str) -> String {
    format!(
        "if [ $KAURI_RANK = 1 ]; then kill -STOP $PPID; exec sleep 300; fi; sleep 1; exit 3 # {marker}"
    )
}

/// A job ends with a rank's failure while the agent of another host is stopped: kauri sends
/// the teardown, kills after the grace, waits `KAURI_TEARDOWN_WAIT` for the agents' answer,
/// names the silent one and leaves with the failed rank's status; nothing is left behind.
/// (It used to wait for the stopped agent for ever.)
#[test]
fn a_silent_agent_does_not_hold_the_teardown() {
    let marker = format!("teardown-silent-{}", std::process::id());
    let prog = stop_b_then_fail(&marker);
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", &prog),
        None,
        &[("KAURI_KILL_GRACE", "1"), ("KAURI_TEARDOWN_WAIT", "2")],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no answer from the agent(s) on b "),
        "names the silent host: {err}"
    );
    assert_none_left(&marker);
}

/// `MPIEXEC_TIMEOUT` bounds the whole run, a teardown included: with the agents given all the
/// time in the world to answer, the timeout still ends kauri.
#[test]
fn the_timeout_bounds_a_teardown_too() {
    let marker = format!("teardown-timeout-{}", std::process::id());
    let prog = stop_b_then_fail(&marker);
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", &prog),
        None,
        &[
            ("KAURI_KILL_GRACE", "1"),
            ("KAURI_TEARDOWN_WAIT", "100000"),
            ("MPIEXEC_TIMEOUT", "8"),
        ],
    );
    let err = stderr(&o);
    assert!(err.contains("during its teardown"), "{err}");
    assert!(
        err.contains("no answer from the agent(s) on b "),
        "names the silent host: {err}"
    );
    assert_eq!(o.status.code(), Some(3), "the first cause's status: {err}");
    assert_none_left(&marker);
}

/// A host that stops answering while the job runs (its agent stopped: no FIN, no RST, the
/// socket stays open) is noticed by its silence on the link: the job ends with one line naming
/// the host and how long it was silent. (It used to wait for ever.)
#[test]
fn a_host_that_goes_silent_is_noticed() {
    let marker = format!("silent-host-{}", std::process::id());
    let prog =
        format!("if [ $KAURI_RANK = 1 ]; then kill -STOP $PPID; fi; exec sleep 300 # {marker}");
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", &prog),
        None,
        &[
            ("KAURI_HEARTBEAT", "0.2"),
            ("KAURI_HEARTBEAT_TIMEOUT", "2"),
            ("KAURI_KILL_GRACE", "1"),
            ("KAURI_TEARDOWN_WAIT", "1"),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.contains("kauri: agent on b was silent for 2 s (KAURI_HEARTBEAT_TIMEOUT)"),
        "{err}"
    );
    assert_none_left(&marker);
}

/// Liveness is the agents', not the ranks': ranks that compute (here: sleep) far longer than
/// the silence allowed on a link are never taken for a lost host.
#[test]
fn ranks_that_compute_long_are_not_a_silent_host() {
    let o = kauri(
        &common::on_fork_hosts("a,b,c", "3", "sleep 10; echo done"),
        None,
        &[("KAURI_HEARTBEAT", "0.2"), ("KAURI_HEARTBEAT_TIMEOUT", "4")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(common::lines(&o), vec!["done", "done", "done"]);
}

/// When `MPIEXEC_TIMEOUT` fires, kauri says where every rank was (host, pid, PMI state) and
/// what the open fence still waits for, before it ends the job.
#[test]
fn a_timeout_says_where_the_ranks_were() {
    let marker = format!("timeout-status-{}", std::process::id());
    let prog = format!(
        "if [ $KAURI_RANK = 0 ]; then {} kvs fence; else exec sleep 300; fi # {marker}",
        common::KAURI
    );
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", &prog),
        None,
        &[("MPIEXEC_TIMEOUT", "5"), ("KAURI_KILL_GRACE", "1")],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(err.contains("kauri: job timed out after 5 s"), "{err}");
    let line = |want: &str| {
        assert!(
            err.lines()
                .any(|l| l.starts_with("kauri:   ") && l.contains(want)),
            "no line with {want:?}: {err}"
        )
    };
    line("rank 0 on a (pid ");
    line("): in fence 0");
    line("rank 1 on b (pid ");
    line("): not in PMI yet");
    line("fence 0 waits for the agent on b");
    assert_none_left(&marker);
}

/// With `-disable-auto-cleanup` a lost host does not end the job: the others go on and finish
/// (the loss is said in one line, and the status says the job did not end well).
#[test]
fn with_auto_cleanup_off_the_job_goes_on_without_a_lost_host() {
    let marker = format!("goon-{}", std::process::id());
    let prog = format!(
        "if [ $KAURI_RANK = 1 ]; then kill -KILL $PPID; exec sleep 300; fi; sleep 2; echo survived # {marker}"
    );
    let o = kauri(
        &[
            "-disable-auto-cleanup",
            "-launcher",
            "fork",
            "-hosts",
            "a,b",
            "-n",
            "2",
            "sh",
            "-c",
            &prog,
        ],
        None,
        &[],
    );
    let err = stderr(&o);
    assert_eq!(common::lines(&o), vec!["survived"], "{err}");
    assert!(
        err.contains("kauri: agent on b died; the job goes on without it (-disable-auto-cleanup)"),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert_none_left(&marker);
}
