//! `-max-restarts N`: a job that fails is ended and started again, whole, at most N times,
//! each attempt told its restart count; a lost host's slots are left out when the others
//! hold the job; nothing of an attempt is left behind. Each rank is `sh -c` printing its
//! restart count, rank and host; it fails in the first attempt where the test says.

mod common;

use std::time::Duration;

/// Each rank's line, `RESTART RANK HOST`, sorted, and kauri's stderr and status.
fn run(args: &[&str], prog: &str) -> (Vec<String>, String, i32) {
    let mut a = args.to_vec();
    a.extend(["sh", "-c", prog]);
    let out = common::kauri(&a, None, &[]);
    let mut lines = common::lines(&out);
    lines.sort();
    (lines, common::stderr(&out), out.status.code().unwrap_or(-1))
}

/// A rank's line, then its failure in the first attempt when `fail` (a shell test) holds.
fn failing_first(fail: &str, how: &str) -> String {
    format!(
        "echo \"$KAURI_RESTART_COUNT $KAURI_RANK $KAURI_HOST\"; \
         if [ \"$KAURI_RESTART_COUNT\" = 0 ] && {fail}; then {how}; fi"
    )
}

#[test]
fn a_failed_job_is_started_again_and_its_last_attempt_decides() {
    let prog = failing_first("[ \"$KAURI_RANK\" = 1 ]", "exit 3");
    let (lines, err, code) = run(&["-max-restarts", "2", "-n", "3"], &prog);
    assert_eq!(code, 0, "{err}");
    let firsts: Vec<_> = lines.iter().filter(|l| l.starts_with("0 ")).collect();
    let seconds: Vec<_> = lines.iter().filter(|l| l.starts_with("1 ")).collect();
    assert!(firsts.iter().any(|l| l.starts_with("0 1 ")), "{lines:?}");
    assert_eq!(seconds.len(), 3, "every rank started again: {lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("2 ")), "{lines:?}");
    let restarts: Vec<_> = err
        .lines()
        .filter(|l| l.contains("restart 1 of 2"))
        .collect();
    assert_eq!(restarts.len(), 1, "{err}");
    assert!(
        restarts[0].starts_with("kauri: restart 1 of 2: rank 1 on "),
        "{err}"
    );
    assert!(restarts[0].ends_with(" exited with code 3"), "{err}");
}

#[test]
fn a_job_that_keeps_failing_ends_with_its_last_status() {
    // One rank: a failing rank's own output is kept, the others' may be cut by the teardown.
    let (lines, err, code) = run(
        &["-max-restarts", "1", "-n", "1"],
        "echo \"$KAURI_RESTART_COUNT\"; exit 4",
    );
    assert_eq!(code, 4, "{err}");
    assert_eq!(lines, ["0", "1"]);
    assert!(err.contains("kauri: restart 1 of 1: rank "), "{err}");
    assert!(
        err.contains("kauri: no restart left (-max-restarts 1): rank "),
        "{err}"
    );
    // Without -max-restarts nothing restarts, and no rank is told a count.
    let (lines, _, code) = run(
        &["-n", "1"],
        "echo \"${KAURI_RESTART_COUNT-unset}\"; exit 4",
    );
    assert_eq!((lines, code), (vec!["unset".to_string()], 4));
}

#[test]
fn success_and_interrupts_are_not_restarted() {
    let (lines, err, code) = run(
        &["-max-restarts", "3", "-n", "2"],
        "echo $KAURI_RESTART_COUNT",
    );
    assert_eq!(
        (lines, code),
        (vec!["0".to_string(), "0".to_string()], 0),
        "{err}"
    );
    assert!(!err.contains("restart"), "{err}");
    // Interrupted: the attempt ends as kauri does on SIGINT, and nothing restarts.
    let marker = format!("restarts-interrupt-{}", std::process::id());
    let (dir, _) = common::script("restarts-interrupt", "unused", "");
    let ready = |r: usize| dir.join(format!("ready.{r}"));
    let mut cmd = std::process::Command::new(common::KAURI);
    cmd.args(["-max-restarts", "3", "-n", "2", "sh", "-c"])
        .arg(format!(
            "echo $KAURI_RESTART_COUNT; touch {}/ready.$KAURI_RANK; sleep 30 # {marker}",
            dir.display()
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let start = std::time::Instant::now();
    // Both ranks said their line and are sleeping.
    while !(ready(0).exists() && ready(1).exists()) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("restart 1"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    common::assert_none_left(&marker, Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lost_host_is_left_out_when_the_others_hold_the_job() {
    let marker = format!("restarts-lost-{}", std::process::id());
    // Rank 2 runs on b: in the first attempt it kills b's agent, and b is lost.
    let prog = format!(
        "{} # {marker}",
        failing_first("[ \"$KAURI_RANK\" = 2 ]", "kill -9 $PPID; sleep 30")
    );
    let fork = ["-launcher", "fork", "-max-restarts", "2", "-n", "4"];
    let mut args = fork.to_vec();
    args.extend(["-hosts", "a:2,b:2,c:2"]);
    let (lines, err, code) = run(&args, &prog);
    assert_eq!(code, 0, "{err}");
    let seconds: Vec<_> = lines.iter().filter(|l| l.starts_with("1 ")).collect();
    assert_eq!(seconds.len(), 4, "{lines:?}");
    assert!(
        seconds.iter().all(|l| !l.ends_with(" b")),
        "without b: {lines:?}"
    );
    assert!(
        seconds.iter().any(|l| l.ends_with(" c")),
        "on c instead: {lines:?}"
    );
    assert!(err.contains("kauri: restart 1 of 2: "), "{err}");
    common::assert_none_left(&marker, Duration::from_secs(30));
    // When the others cannot hold the job, the run ends with one line.
    let mut args = fork.to_vec();
    args.extend(["-hosts", "a:2,b:2"]);
    let (_, err, code) = run(&args, &prog);
    assert_eq!(code, 255, "{err}");
    assert!(
        err.contains(
            "kauri: restart 1: without b, the hosts have 2 slot(s) for 4 ranks: the run ends"
        ),
        "{err}"
    );
    common::assert_none_left(&marker, Duration::from_secs(30));
}
