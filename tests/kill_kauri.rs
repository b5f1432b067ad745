//! Kauri itself killed with `SIGKILL`: at every stage of a run, on one
//! host and over two simulated hosts (`-launcher fork -hosts a,b`), and one agent killed
//! alone; after each, nothing of the run is left: no rank, no child of a rank, no daemon a
//! rank started with `setsid`, no zombie, no keeper ([`kauri::host::keeper`]).
//!
//! Every process of a run is found by a mark only it has: `KILLTEST_MARK=…` in kauri's
//! environment, which the agents, the keeper, the ranks and what they start inherit. No test
//! asserts on time: the deadlines are generous, and passing one is the failure.

mod common;

use common::KAURI;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a run may take to reach a stage, or its processes to go: failures, not timings
/// (90 s; `KILLTEST_PATIENCE=S` to change it).
fn patience() -> Duration {
    let s = std::env::var("KILLTEST_PATIENCE")
        .ok()
        .and_then(|s| s.parse().ok());
    Duration::from_secs(s.unwrap_or(90))
}

/// The start of every rank: a daemon that leaves with `setsid` (it says so in `d.RANK` once
/// it has), and a plain child; the rank goes on when the daemon is there.
const PRELUDE: &str = r#"
setsid bash -c 'touch $KILLTEST_DIR/d.$KAURI_RANK; exec sleep 300' </dev/null >/dev/null 2>&1 &
sleep 300 &
while [ ! -e $KILLTEST_DIR/d.$KAURI_RANK ]; do sleep 0.1; done
pmi() { printf "$1" >&$PMI_FD; read -r r <&$PMI_FD; }
up() { touch $KILLTEST_DIR/up.$KAURI_RANK; }
"#;

/// A run under test.
struct Run {
    child: Child,
    dir: PathBuf,
    mark: String,
}

impl Run {
    /// Starts kauri with `args` (its program is `bash -c SCRIPT`, after [`PRELUDE`]).
    fn start(test: &str, args: &[&str], script: &str, env: &[(&str, &str)]) -> Run {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let mark = format!("kill-kauri-{test}-{}-{nanos:x}", std::process::id());
        let dir = std::env::temp_dir().join(&mark);
        std::fs::create_dir_all(&dir).unwrap();
        let prog = format!("{PRELUDE}\n{script}");
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["bash", "-c", &prog]);
        let child = Command::new(KAURI)
            .args(&all)
            .env("KILLTEST_MARK", &mark)
            .env("KILLTEST_DIR", &dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .unwrap();
        Run { child, dir, mark }
    }

    /// Waits until every file of `names` exists in the run's directory.
    fn reach(&mut self, names: &[String]) {
        let start = Instant::now();
        while !names.iter().all(|n| self.dir.join(n).exists()) {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("kauri ended ({st}) before {names:?}: {}", self.stderr());
            }
            assert!(
                start.elapsed() < patience(),
                "the run did not reach {names:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// `SIGKILL` to kauri, and its reaping.
    fn kill_kauri(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Run {
    /// A failed test leaves nothing of its run either: kauri and every marked process go.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in marked(&self.mark, &[]) {
            // SAFETY: kill has no memory-safety preconditions; the process holds our mark.
            unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One process: its pid, its start time (so a reused pid is not taken for it), its state and
/// its command line.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    start: u64,
    state: char,
    ppid: u32,
    cmd: String,
    /// Its name (`/proc/PID/comm`): a keeper's is `ranks-keeper`.
    comm: String,
}

fn proc_of(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    Some(Proc {
        comm: comm.trim_end().to_string(),
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        // Field 22 (starttime), the 20th after the command.
        start: f.get(19)?.parse().ok()?,
        cmd: String::from_utf8_lossy(&cmd).replace('\0', " "),
    })
}

/// The processes whose environment holds `KILLTEST_MARK=mark` and every one of `also`
/// (`NAME=VALUE` entries).
fn marked(mark: &str, also: &[&str]) -> Vec<Proc> {
    let want = format!("KILLTEST_MARK={mark}");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        let has = |v: &str| vars.contains(&v.as_bytes());
        if has(&want) && also.iter().all(|v| has(v)) {
            if let Some(p) = proc_of(pid) {
                found.push(p);
            }
        }
    }
    found
}

/// Waits until none of `seen` is there any more (living or a zombie) and no process holds
/// the mark (and `also`); fails with what is left after [`patience`]. Zombies whose parent
/// is `reaper` (a kauri that still runs) are not counted.
fn assert_all_gone(seen: &[Proc], mark: &str, also: &[&str], reaper: Option<u32>) {
    let start = Instant::now();
    loop {
        let mut left: Vec<Proc> = Vec::new();
        let seen_now = seen
            .iter()
            .filter_map(|p| proc_of(p.pid).filter(|q| q.start == p.start));
        for p in seen_now.chain(marked(mark, also)) {
            let reaped_later = p.state == 'Z' && Some(p.ppid) == reaper;
            if !reaped_later && !left.iter().any(|q| q.pid == p.pid) {
                left.push(p);
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(start.elapsed() < patience(), "left behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `up.R` for every rank.
fn ups(n: usize) -> Vec<String> {
    (0..n).map(|r| format!("up.{r}")).collect()
}

/// When kauri is killed.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// As soon as the first of six ranks is up: the others may not have started yet.
    Launching,
    /// Every rank has initialized PMI and all but the last wait in a fence.
    WiringUp,
    /// Every rank runs.
    Running,
    /// Rank 0 failed; rank 1 handles the teardown's `SIGTERM` and goes on, in the kill grace.
    TearingDown,
}

const FORK_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "a,b"];

/// Kills kauri with `SIGKILL` at `stage`, over `hosts` (empty: one host), and checks that
/// nothing of the run is left.
fn kill_at(test: &str, stage: Stage, hosts: &[&str]) {
    kill_at_with(test, stage, hosts, &[]);
}

/// [`kill_at`], with more variables for kauri.
fn kill_at_with(test: &str, stage: Stage, hosts: &[&str], env: &[(&str, &str)]) {
    let (n, script, wait_for, grace): (usize, &str, Vec<String>, &str) = match stage {
        Stage::Launching => (6, "up; wait", vec!["up.0".into()], "3"),
        Stage::WiringUp => (
            3,
            // Up once in the fence: after its barrier_in is sent, before the reply.
            r#"pmi 'cmd=init pmi_version=1 pmi_subversion=1\n'
               if [ $KAURI_RANK = 2 ]; then up; wait; fi
               printf 'cmd=barrier_in\n' >&$PMI_FD; up; read -r r <&$PMI_FD
               echo "out of the fence: $r"; wait"#,
            ups(3),
            "3",
        ),
        Stage::Running => (2, "up; wait", ups(2), "3"),
        Stage::TearingDown => (
            2,
            r#"up
               if [ $KAURI_RANK = 0 ]; then
                   while [ ! -e $KILLTEST_DIR/up.1 ]; do sleep 0.1; done; exit 3
               fi
               trap 'touch $KILLTEST_DIR/term' TERM
               while :; do sleep 1; done"#,
            vec!["term".into()],
            "10",
        ),
    };
    let n = n.to_string();
    let mut args = hosts.to_vec();
    args.extend(["-n", &n]);
    let mut env = env.to_vec();
    env.push(("KAURI_KILL_GRACE", grace));
    let mut run = Run::start(test, &args, script, &env);
    run.reach(&wait_for);
    let seen = marked(&run.mark, &[]);
    run.kill_kauri();
    assert_all_gone(&seen, &run.mark, &[], None);
}

#[test]
fn killed_while_launching_one_host() {
    kill_at("launch1", Stage::Launching, &[]);
}

#[test]
fn killed_while_launching_fork_hosts() {
    kill_at("launch2", Stage::Launching, FORK_HOSTS);
}

#[test]
fn killed_while_wiring_up_one_host() {
    kill_at("wire1", Stage::WiringUp, &[]);
}

#[test]
fn killed_while_wiring_up_fork_hosts() {
    kill_at("wire2", Stage::WiringUp, FORK_HOSTS);
}

#[test]
fn killed_while_running_one_host() {
    kill_at("run1", Stage::Running, &[]);
}

#[test]
fn killed_while_running_fork_hosts() {
    kill_at("run2", Stage::Running, FORK_HOSTS);
}

#[test]
fn killed_while_tearing_down_one_host() {
    kill_at("down1", Stage::TearingDown, &[]);
}

#[test]
fn killed_while_tearing_down_fork_hosts() {
    kill_at("down2", Stage::TearingDown, FORK_HOSTS);
}

/// An `ssh` that runs the command here and, like a real host's sshd, leaves it running when
/// the ssh client is killed: the agent is not kauri's descendant and has no death signal.
const DETACHING_SSH: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec 3<&0
sh -c "$*" <&3 3<&- &
wait
"#;

/// Kauri killed with `SIGKILL` while the ranks run on two "remote" hosts (`-launcher ssh`
/// with [`DETACHING_SSH`]): each agent sees its parent's link end, kills its ranks' groups
/// and leaves; its keeper ends what the ranks started (before the keeper, and with a keeper
/// told `done` on that path: the daemons ran on under init).
#[test]
fn killed_while_running_over_ssh_the_agents_end_everything() {
    let (dir, ssh) = common::script("kill-kauri-ssh", "ssh", DETACHING_SSH);
    kill_at_with(
        "ssh",
        Stage::Running,
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "r1,r2",
        ],
        &[("KAURI_ADDR", "127.0.0.1")],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The agent of host `b` killed with `SIGKILL` while the job runs, under
/// `-disable-auto-cleanup` so the job goes on: b's ranks, their children and daemons, and
/// b's keeper go while kauri still runs (before, b's rank died of its death signal but what
/// it started ran on, adopted by the front end, until the run's end; their zombies, the front
/// end's children then, are still reaped only at the end); then the run ends and nothing is
/// left.
#[test]
fn a_killed_agent_leaves_nothing_of_its_host() {
    let script = r#"echo $PPID > $KILLTEST_DIR/agent.$KAURI_RANK; up
        if [ $KAURI_RANK = 0 ]; then
            while [ ! -e $KILLTEST_DIR/finish ]; do sleep 0.2; done; exit 0
        fi
        wait"#;
    let mut args = vec!["-disable-auto-cleanup"];
    args.extend(FORK_HOSTS);
    args.extend(["-n", "2"]);
    let mut run = Run::start("agent", &args, script, &[]);
    run.reach(&ups(2));
    let agent: u32 = std::fs::read_to_string(run.dir.join("agent.1"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let on_b = ["KAURI_HOST=b"];
    // b's ranks and what they started, and b's agent's other children (its keeper).
    let mut seen = marked(&run.mark, &on_b);
    seen.extend(
        marked(&run.mark, &[])
            .into_iter()
            .filter(|p| p.ppid == agent),
    );
    let a = proc_of(agent).expect("b's agent");
    assert!(
        a.cmd.contains(" agent"),
        "the rank's parent is its agent: {a:?}"
    );
    // SAFETY: kill has no memory-safety preconditions; the pid is the agent of our run.
    unsafe { libc::kill(agent as i32, libc::SIGKILL) };
    // What b's agent started was adopted by kauri, the subreaper of everything it started
    // (`-launcher fork` only: on a real host, init): it reaps them when the run ends.
    assert_all_gone(&seen, &run.mark, &on_b, Some(run.child.id()));
    assert!(
        matches!(run.child.try_wait(), Ok(None)),
        "kauri still runs: {}",
        run.stderr()
    );
    std::fs::write(run.dir.join("finish"), "").unwrap();
    let start = Instant::now();
    while matches!(run.child.try_wait(), Ok(None)) {
        assert!(start.elapsed() < patience(), "kauri did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_all_gone(&[], &run.mark, &[], None);
}

/// A clean run had a keeper while it ran, and has none when kauri has returned, on one host
/// and over fork hosts (kauri reaps its keeper; agents theirs before they leave).
#[test]
fn a_clean_run_leaves_no_keeper() {
    for hosts in [&[][..], FORK_HOSTS] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "2"]);
        let script = "up; while [ ! -e $KILLTEST_DIR/go ]; do sleep 0.1; done";
        let mut run = Run::start("clean", &args, script, &[]);
        run.reach(&ups(2));
        let keepers = |run: &Run| -> Vec<Proc> {
            marked(&run.mark, &[])
                .into_iter()
                .filter(|p| p.comm == kauri::host::keeper::NAME)
                .collect()
        };
        let want = if hosts.is_empty() { 1 } else { 2 };
        assert_eq!(
            keepers(&run).len(),
            want,
            "{hosts:?}: one per process with ranks"
        );
        std::fs::write(run.dir.join("go"), "").unwrap();
        let st = run.child.wait().unwrap();
        assert!(st.success(), "{hosts:?}: {st}: {}", run.stderr());
        assert_eq!(keepers(&run).len(), 0, "{hosts:?}: kauri reaped its keeper");
        assert_all_gone(&[], &run.mark, &[], None);
    }
}

/// `kauri … | cat` still ends: the keeper holds neither kauri's stdout nor a descriptor
/// kauri's own parent left open (here the pipe again, as fd 3).
#[test]
fn kauri_piped_into_cat_still_ends() {
    for hosts in ["", "-launcher fork -hosts a,b"] {
        let line = format!("{KAURI} {hosts} -n 2 echo hi 3>&1 | cat");
        let o = common::run_under_watchdog(Command::new("sh").args(["-c", &line]));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\nhi\n", "{line}");
        assert!(o.status.success(), "{line}");
    }
}

/// The keeper of a one-host run, once the ranks are up: `(pid, command line)`.
fn keeper_of(run: &Run) -> Option<Proc> {
    marked(&run.mark, &[])
        .into_iter()
        .find(|p| p.comm == kauri::host::keeper::NAME)
}

/// Each rank also starts a child with an empty environment (no mark: the keeper finds it
/// only by the rank's session, so only if it was told of the rank), and says its pid in
/// `bare.RANK`, then is up.
const BARE_CHILD: &str = "env -i sleep 300 & echo $! > $KILLTEST_DIR/bare.$KAURI_RANK; up; wait";

/// The processes of `run` ([`marked`]) and the children without a mark of [`BARE_CHILD`].
fn seen_with_bare_children(run: &Run, n: usize) -> Vec<Proc> {
    let mut seen = marked(&run.mark, &[]);
    for r in 0..n {
        let pid = std::fs::read_to_string(run.dir.join(format!("bare.{r}"))).unwrap();
        let bare = proc_of(pid.trim().parse().unwrap()).expect("the bare child runs");
        assert!(!seen.iter().any(|p| p.pid == bare.pid), "no mark: {bare:?}");
        seen.push(bare);
    }
    seen
}

/// Kauri killed with `SIGKILL` while its keeper runs (`kauri --keeper TOKEN GRACE_MS`, an
/// ordinary child, started before the first rank): the keeper sees its pipe end and ends the
/// run with the ranks it was told of; nothing is left, not even the ranks' children without
/// a mark, nor the ranks themselves, which have no death signal.
#[test]
fn killed_with_its_keeper_running() {
    let env = [("KAURI_KILL_GRACE", "3")];
    let mut run = Run::start("keeper", &["-n", "2"], BARE_CHILD, &env);
    run.reach(&ups(2));
    let keeper = keeper_of(&run).expect("a keeper");
    let words: Vec<&str> = keeper.cmd.split_whitespace().collect();
    assert_eq!(
        words.get(1..).map(|w| w.len()),
        Some(3),
        "kauri --keeper TOKEN GRACE_MS: {keeper:?}"
    );
    assert_eq!(words[1], kauri::host::keeper::SUBCOMMAND, "{keeper:?}");
    assert_eq!(words[3], "3000", "the job's grace: {keeper:?}");
    let seen = seen_with_bare_children(&run, 2);
    run.kill_kauri();
    assert_all_gone(&seen, &run.mark, &[], None);
}

/// `pkill -9 kauri` while the ranks run: every process whose name holds "kauri" gets
/// `SIGKILL` at once (here only this run's: kauri and its marked processes, so that other
/// tests' runs are left alone). The keeper must not be among them, or nothing ends the ranks,
/// which have no death signal: its name does not hold "kauri", and neither does its command
/// line (`pkill -f`). (Before: the keeper was `ranks-keeper`, and both ranks ran on.)
#[test]
fn killed_by_name_the_keeper_survives_and_ends_the_ranks() {
    let env = [("KAURI_KILL_GRACE", "3")];
    let mut run = Run::start("by-name", &["-n", "2"], BARE_CHILD, &env);
    run.reach(&ups(2));
    let keeper = keeper_of(&run).expect("a keeper");
    assert!(!keeper.comm.contains("kauri"), "{keeper:?}");
    assert!(!keeper.cmd.contains("kauri"), "{keeper:?}");
    let seen = seen_with_bare_children(&run, 2);
    for p in marked(&run.mark, &[]) {
        if p.comm.contains("kauri") {
            let _ = Command::new("kill")
                .args(["-9", &p.pid.to_string()])
                .status();
        }
    }
    run.kill_kauri();
    assert_all_gone(&seen, &run.mark, &[], None);
}
