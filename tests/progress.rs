//! `-v`: progress lines on stderr while a job starts (agents connected per tree level, ranks
//! started and through PMI init, each fence), each phase's line once it completes and at most
//! one line a second in between. Lines are counted against the run's length, generously; no
//! time is asserted.

mod common;

use common::{kauri, stderr, PMI1_RANK};
use std::time::Instant;

/// A PMI-1 rank that enters `FENCES` fences in a row.
const FENCING_RANK: &str = r#"
import os
fd = int(os.environ["PMI_FD"])
def ask(line):
    os.write(fd, (line + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            raise SystemExit("PMI socket closed")
        buf += chunk
    return buf.decode()
ask("cmd=init pmi_version=1 pmi_subversion=1")
for _ in range(int(os.environ["FENCES"])):
    ask("cmd=barrier_in")
ask("cmd=finalize")
"#;

/// The progress lines of kauri's stderr, in order.
fn progress_lines(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| {
            ["kauri: agents ", "kauri: ranks ", "kauri: fence "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect()
}

/// Every `a/b` count in `line` has `a <= b`, and the line ends with its time.
fn check_counts(line: &str) {
    assert!(line.ends_with(" s"), "no time: {line}");
    for word in line.split([' ', ',', ';', '(', ')']) {
        if let Some((a, b)) = word.split_once('/') {
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            assert!(a <= b, "{line}");
        }
    }
}

/// Where the one line that starts with `prefix` is among `lines`.
fn one(lines: &[&str], prefix: &str) -> usize {
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with(prefix))
        .collect();
    assert_eq!(at.len(), 1, "{prefix:?} once in {lines:#?}");
    at[0]
}

#[test]
fn verbose_shows_the_start_of_eight_simulated_hosts() {
    // Eight simulated hosts, four agents on level 1 and four below the first on level 2,
    // two ranks each.
    let hosts: Vec<String> = (1..=8).map(|i| format!("h{i}")).collect();
    let hosts = hosts.join(",");
    let began = Instant::now();
    let o = kauri(
        &[
            "-v",
            "-launcher",
            "fork",
            "-tree-width",
            "4",
            "-hosts",
            &hosts,
            "-n",
            "16",
            "python3",
            "-c",
            PMI1_RANK,
        ],
        None,
        &[],
    );
    let secs = began.elapsed().as_secs() as usize;
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains('\x1b'), "colour in a pipe: {err}");
    let lines = progress_lines(&err);
    let phases = [
        "kauri: agents 8/8 connected (level 1: 4/4, level 2: 4/4) at ",
        "kauri: ranks 16/16 started at ",
        "kauri: ranks 16/16 through PMI init at ",
        "kauri: fence 0 complete, 16/16 ranks, at ",
    ];
    let at: Vec<usize> = phases.iter().map(|p| one(&lines, p)).collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "out of order: {lines:#?}"
    );
    for l in &lines {
        check_counts(l);
    }
    // The rest: at most one line a second of the run (and one more for the first second).
    let between = lines.len() - phases.len();
    assert!(
        between <= secs + 1,
        "{between} lines in {secs} s: {lines:#?}"
    );
}

#[test]
fn a_one_rank_job_prints_only_its_phases() {
    let o = kauri(&["-v", "-n", "1", "python3", "-c", PMI1_RANK], None, &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let lines = progress_lines(&err);
    let phases: Vec<&str> = lines
        .iter()
        .map(|l| l.rsplit_once(" at ").unwrap().0)
        .collect();
    assert_eq!(
        phases,
        [
            "kauri: ranks 1/1 started",
            "kauri: ranks 1/1 through PMI init",
            "kauri: fence 0 complete, 1/1 ranks,"
        ],
        "{err}"
    );
}

#[test]
fn without_verbose_there_is_no_progress() {
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2",
            "-n",
            "2",
            "python3",
            "-c",
            PMI1_RANK,
        ],
        None,
        &[],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(progress_lines(&err), Vec::<&str>::new(), "{err}");
}

#[test]
fn fences_in_a_loop_make_at_most_a_line_a_second_and_the_last_one_is_said() {
    let began = Instant::now();
    let o = kauri(
        &[
            "-v",
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2",
            "-n",
            "4",
            "python3",
            "-c",
            FENCING_RANK,
        ],
        None,
        &[("FENCES", "300")],
    );
    let secs = began.elapsed().as_secs() as usize;
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let lines = progress_lines(&err);
    let fences: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("kauri: fence "))
        .collect();
    one(&lines, "kauri: fence 0 complete, 4/4 ranks, at ");
    assert!(
        fences
            .last()
            .is_some_and(|l| l.starts_with("kauri: fence 299 complete, 4/4 ranks, at ")),
        "{lines:#?}"
    );
    // Fence 0's line, one a second at most, and the last one's at the end.
    assert!(fences.len() <= secs + 3, "{} in {secs} s", fences.len());
}
