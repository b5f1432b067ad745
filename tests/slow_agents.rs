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

/// An agent wrapper: a relay between the agent and its parent that holds the agent's first
/// bytes (its answer to the parent's challenge) for `secs` seconds, as a host too starved
/// to run its agent does. It starts the agent with `--parent` pointing at itself.
const HELD_HELLO: &str = r#"#!/usr/bin/env python3
import os, socket, subprocess, sys, threading, time
args = sys.argv[1:]
i = args.index("--parent")
host, port = args[i + 1].rsplit(":", 1)
relay = socket.socket()
relay.bind(("127.0.0.1", 0))
relay.listen(1)
args[i + 1] = "127.0.0.1:%d" % relay.getsockname()[1]
agent = subprocess.Popen([os.environ["KAURI"]] + args)
down, _ = relay.accept()
up = socket.create_connection((host, int(port)))
def pump(src, dst, hold):
    first = True
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        if first and hold:
            time.sleep(hold)
        first = False
        try:
            dst.sendall(data)
        except OSError:
            break
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
t = threading.Thread(target=pump, args=(up, down, 0), daemon=True)
t.start()
pump(down, up, float(os.environ["HOLD_SECS"]))
sys.exit(agent.wait())
"#;

/// An agent whose answer to its parent's challenge takes 12 s (a host too starved to run
/// it) joins the job: a connection has as long as a link may be silent
/// (`KAURI_HEARTBEAT_TIMEOUT`, 30 s) to answer, not 10 s (it was refused: `no handshake
/// within 10 s`, and the job failed). One with a 4 s heartbeat timeout is refused after
/// 10 s, the least any connection has.
#[test]
fn an_agent_slow_to_answer_the_challenge_joins_the_job() {
    let (dir, agent) = script("held-hello", "held-hello", HELD_HELLO);
    let env = |hold: &'static str, silence: &'static str| {
        [
            ("KAURI_AGENT_PATH", agent.clone()),
            ("KAURI", KAURI.to_string()),
            ("HOLD_SECS", hold.to_string()),
            ("KAURI_HEARTBEAT_TIMEOUT", silence.to_string()),
            ("MPIEXEC_TIMEOUT", "120".to_string()),
        ]
    };
    let args = common::on_fork_hosts("a", "1", "echo rank $KAURI_RANK ran");
    let slow = env("12", "30");
    let slow: Vec<(&str, &str)> = slow.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = kauri(&args, None, &slow);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "rank 0 ran\n");
    let short = env("12", "4");
    let short: Vec<(&str, &str)> = short.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = kauri(&args, None, &short);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no handshake within 10 s"),
        "{}",
        stderr(&o)
    );
}
