//! Messages for an agent that has not connected yet wait for it. Hosts are simulated with the
//! fork launcher; `KAURI_AGENT_PATH` points at a wrapper that sleeps before it becomes the
//! agent, so the front end sends before the agent is there to read.

mod common;

use common::{kauri, script, stderr, KAURI};

/// An agent wrapper that waits `secs` before it runs the agent, for the agents of `hosts`
/// (a `case` pattern) only.
fn slow_agent(test: &str, hosts: &str, secs: u32) -> (std::path::PathBuf, String) {
    script(
        test,
        "slow-agent",
        &format!(
            "#!/bin/sh\nprev=; for a; do [ \"$prev\" = --host ] && host=$a; prev=$a; done\n\
             case \"$host\" in {hosts}) sleep {secs} ;; esac\nexec {KAURI} \"$@\"\n"
        ),
    )
}

/// stdin for a rank 0 on another host, read and ended before that host's agent connects,
/// reaches it whole, EOF included (it used to be dropped, and `cat` waited for ever).
#[test]
fn stdin_reaches_a_remote_rank_0_whose_agent_connects_late() {
    let (dir, agent) = slow_agent("stdin-late", "*", 2);
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", "if [ $KAURI_RANK = 0 ]; then cat; fi"),
        Some(b"line one\nline two\n"),
        &[("KAURI_AGENT_PATH", &agent), ("MPIEXEC_TIMEOUT", "60")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "line one\nline two\n",
        "{}",
        stderr(&o)
    );
}

/// A teardown that begins before a slow agent connects reaches it: the agent starts no rank
/// (it used to get its part of the job afterwards and run its ranks to their end).
#[test]
fn an_agent_that_connects_after_the_teardown_starts_nothing() {
    let (dir, agent) = slow_agent("teardown-late", "b", 3);
    let started = dir.join("rank-1-started");
    let prog = format!(
        "if [ $KAURI_RANK = 0 ]; then exit 4; fi; touch {}; sleep 30",
        started.display()
    );
    let o = kauri(
        &common::on_fork_hosts("a,b", "2", &prog),
        None,
        &[("KAURI_AGENT_PATH", &agent)],
    );
    let ran = started.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(!ran, "rank 1 started after the job ended: {}", stderr(&o));
}
