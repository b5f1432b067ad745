//! Long runs: nothing kauri holds grows with the number of jobs a run spawns or the fences it
//! goes through. The ranks are bash scripts that speak PMI-1 over their
//! `PMI_FD`, as a user's small client would; on one host kauri forks them itself, so a rank's
//! parent is kauri and it measures kauri's open descriptors (`/proc/PPID/fd`) and resident set
//! (`VmRSS`) after the first 10 rounds and at the end, and prints them.
//!
//! No test here asserts on time.

mod common;

use common::{kauri, run_under_watchdog, stderr, KAURI};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// How many more descriptors kauri may hold at the end than after the first 10 rounds: the
/// last spawned job's pipes and PMI socket may still be open when the rank measures (its end
/// travels through kauri's event queue), which is 4 (stdout, stderr, the PMI socket, the
/// child's exit watch); nothing may grow with the number of rounds.
const FD_MARGIN: usize = 4;

/// How much more resident memory kauri may hold at the end than after the first 10 rounds:
/// 1.5 MiB. The allocator keeps freed pages and a tokio runtime's queues grow to their high
/// water mark, which is a constant, not a function of the rounds (measured: 0.4 MiB over
/// 1,000 spawns); a leak of 1.5 kB per spawned job or of 160 bytes per fence (10,000) fails
/// it. Before, each finished spawned job kept its whole record, 2.7 kB (2.7 MiB over 1,000).
const RSS_MARGIN_KB: u64 = 1536;

/// Bash functions the ranks share: `pmi LINE` sends a line and reads the reply into `$r`;
/// `measure WHEN` prints `at WHEN: fds=F rss=R` for kauri (the rank's parent), after a
/// second for the last round's effects to settle.
const PRELUDE: &str = r#"
pmi() { printf "$1" >&$PMI_FD; read -r r <&$PMI_FD; }
measure() {
    sleep 1
    echo "at $1: exe=$(readlink /proc/$PPID/exe) fds=$(ls /proc/$PPID/fd | wc -l) rss=$(awk '/VmRSS/{print $2}' /proc/$PPID/status)"
}
pmi 'cmd=init pmi_version=1 pmi_subversion=1\n'
"#;

/// A rank that spawns `$1` one-rank jobs of `$2` (a program on the `PATH`), one after the
/// other, each after the last one's `spawn_result`.
const SPAWNER: &str = r#"
i=0
while [ $i -lt $1 ]; do
    i=$((i+1))
    pmi "mcmd=spawn\nnprocs=1\nexecname=$2\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n"
    case "$r" in *rc=0*) ;; *) echo "spawn $i failed: $r"; exit 3;; esac
    [ $i = 10 ] && measure 10
done
measure end
pmi 'cmd=finalize\n'
"#;

/// A rank that goes through `$1` fences (`barrier_in`), alone in its job.
const FENCER: &str = r#"
i=0
while [ $i -lt $1 ]; do
    i=$((i+1))
    pmi 'cmd=barrier_in\n'
    case "$r" in *barrier_out*) ;; *) echo "fence $i failed: $r"; exit 3;; esac
    [ $i = 10 ] && measure 10
done
measure end
pmi 'cmd=finalize\n'
"#;

/// The `(fds, rss_kb)` a rank printed for `when`, checking it measured kauri.
fn measured(out: &str, when: &str) -> (usize, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("at {when}: ")))
        .unwrap_or_else(|| panic!("no measure at {when} in {out:?}"));
    let field = |name: &str| -> String {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_string()
    };
    assert_eq!(field("exe"), KAURI, "the rank measured kauri: {line}");
    (field("fds").parse().unwrap(), field("rss").parse().unwrap())
}

/// Checks that the end is within the margins of the measure after 10 rounds.
fn assert_flat(what: &str, out: &str) {
    let (fds0, rss0) = measured(out, "10");
    let (fds1, rss1) = measured(out, "end");
    eprintln!("{what}: after 10: {fds0} descriptors, {rss0} kB; at the end: {fds1}, {rss1} kB");
    assert!(
        fds1 <= fds0 + FD_MARGIN,
        "{what}: kauri's descriptors grew from {fds0} to {fds1}"
    );
    assert!(
        rss1 <= rss0 + RSS_MARGIN_KB,
        "{what}: kauri's resident set grew from {rss0} kB to {rss1} kB"
    );
}

/// Runs one rank of bash `script` with `args` under kauri; returns its stdout, checking that
/// the job succeeded.
fn one_rank(script: &str, args: &[&str]) -> String {
    let prog = format!("{PRELUDE}{script}");
    let mut a = vec!["-n", "1", "bash", "-c", &prog, "rank"];
    a.extend_from_slice(args);
    let o = kauri(&a, None, &[]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    out
}

#[test]
fn a_thousand_spawns_leave_nothing_behind() {
    let out = one_rank(SPAWNER, &["1000", "true"]);
    assert_flat("1,000 spawns", &out);
}

#[test]
fn ten_thousand_fences_leave_nothing_behind() {
    let out = one_rank(FENCER, &["10000"]);
    assert_flat("10,000 fences", &out);
}

/// Stdin goes to the first job's rank 0 only: a spawned rank 0 reads end-of-file at once,
/// as under Hydra, and the first rank 0 still reads kauri's stdin.
#[test]
fn a_spawned_rank_reads_end_of_file_on_stdin() {
    // The spawned rank: `timeout` only keeps a failing run from hanging (status 124).
    let script = r#"
pmi 'mcmd=spawn\nnprocs=1\nexecname=sh\ntotspawns=1\nspawnssofar=1\nargcnt=2\narg1=-c\narg2=timeout 60 cat; echo child cat ended with $?\npreput_num=0\ninfo_num=0\nendcmd\n'
echo "parent: $r"
read -r line; echo "parent read: $line"
pmi 'cmd=finalize\n'
"#;
    let prog = format!("{PRELUDE}{script}");
    let o = kauri(
        &["-n", "1", "bash", "-c", &prog],
        Some(b"for the first rank 0\n"),
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("child cat ended with 0\n"), "{out}");
    assert!(out.contains("parent read: for the first rank 0\n"), "{out}");
}

/// With `ulimit -n 128`, a job spawns 300 one-rank jobs in a row (before: the 106th failed,
/// each finished job kept a descriptor).
#[test]
fn three_hundred_spawns_fit_in_128_descriptors() {
    let prog = format!("{PRELUDE}{SPAWNER}");
    let mut cmd = Command::new(KAURI);
    cmd.args(["-n", "1", "bash", "-c", &prog, "rank", "300", "true"]);
    // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 128,
                rlim_max: 128,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = run_under_watchdog(&mut cmd);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("at end: "), "{out}");
}
