//! The blocking client against the reference server: `pmi-load` under `mpiexec.hydra -n 4`,
//! over PMI-1 and PMI-2, with the socket inherited (`PMI_FD`) and over TCP (`-pmi-port`).
//!
//! `mpiexec.hydra` must be installed (Debian/Ubuntu: `apt-get install mpich`; CI installs it).
//! Without it these tests fail, on purpose: they never pass silently.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const MPIEXEC: &str = "mpiexec.hydra";
/// Generous: the machines have two cores and may be busy. Never asserted on as a duration.
const TIMEOUT: Duration = Duration::from_secs(300);
const NPROCS: i64 = 4;

fn require_hydra() {
    match Command::new(MPIEXEC)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => {}
        Err(e) => panic!(
            "cannot run {MPIEXEC} ({e}): these tests need MPICH's Hydra; install it with \
             `apt-get install mpich` (CI installs it)"
        ),
    }
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `mpiexec.hydra <mpiexec_args> -n 4 pmi-load <load_args>`, killing it after TIMEOUT.
fn run(mpiexec_args: &[&str], load_args: &[&str]) -> Run {
    // One job at a time: the tests run on threads, the machines have two cores.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_hydra();
    let mut child = Command::new(MPIEXEC)
        .args(mpiexec_args)
        .args(["-n", &NPROCS.to_string()])
        .arg(env!("CARGO_BIN_EXE_pmi-load"))
        .args(load_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {MPIEXEC}: {e}"));
    // Drain both pipes on threads so a chatty job cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).map(|_| s)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{MPIEXEC} {mpiexec_args:?} pmi-load {load_args:?} did not finish within \
                 {TIMEOUT:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    }
}

/// The `key=value` fields of a `pmi-load: ok …` line.
fn fields(line: &str) -> std::collections::HashMap<&str, &str> {
    line.trim_start_matches("pmi-load: ok")
        .split_whitespace()
        .map(|t| {
            t.split_once('=')
                .unwrap_or_else(|| panic!("token {t:?} in {line:?}"))
        })
        .collect()
}

/// Runs pmi-load and checks that it succeeded with one correct line from every rank.
fn check(mpiexec_args: &[&str], load_args: &[&str], checked_per_rank: i64) {
    let r = run(mpiexec_args, load_args);
    let what = format!("{MPIEXEC} {mpiexec_args:?} -n {NPROCS} pmi-load {load_args:?}");
    assert!(
        r.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        r.status,
        r.stdout,
        r.stderr
    );
    let lines: Vec<&str> = r.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        NPROCS as usize,
        "{what}: one line per rank expected\n{}",
        r.stdout
    );
    let mut ranks = Vec::new();
    let mut kvsnames = Vec::new();
    for line in &lines {
        assert!(line.starts_with("pmi-load: ok "), "{what}: {line:?}");
        let f = fields(line);
        let num = |k: &str| -> i64 {
            f.get(k)
                .unwrap_or_else(|| panic!("{what}: no {k} in {line:?}"))
                .parse()
                .unwrap_or_else(|_| panic!("{what}: bad {k} in {line:?}"))
        };
        ranks.push(num("rank"));
        assert_eq!(num("size"), NPROCS, "{what}: {line:?}");
        assert_eq!(num("checked"), checked_per_rank, "{what}: {line:?}");
        let universe = num("universe");
        assert!(universe == -1 || universe >= NPROCS, "{what}: {line:?}");
        let mapping = f["mapping"];
        assert!(
            mapping.starts_with("(vector,") && mapping.ends_with(')'),
            "{what}: {line:?}"
        );
        kvsnames.push(f["kvsname"].to_string());
    }
    ranks.sort();
    assert_eq!(ranks, (0..NPROCS).collect::<Vec<_>>(), "{what}");
    kvsnames.dedup();
    assert_eq!(kvsnames.len(), 1, "{what}: ranks disagree on the kvsname");
    assert!(kvsnames[0].starts_with("kvs_"), "{what}: {}", kvsnames[0]);
}

#[test]
fn pmi1_over_pmi_fd() {
    check(&[], &["--pmi", "1"], NPROCS - 1);
}

#[test]
fn pmi2_over_pmi_fd() {
    check(&[], &["--pmi", "2"], NPROCS - 1);
}

#[test]
fn pmi1_over_pmi_port() {
    check(&["-pmi-port"], &["--pmi", "1"], NPROCS - 1);
}

#[test]
fn pmi2_over_pmi_port() {
    check(&["-pmi-port"], &["--pmi", "2"], NPROCS - 1);
}

#[test]
fn several_rounds_of_large_values() {
    // 3 keys of 900 bytes per rank, two rounds: near the 1024-byte value limit.
    let args = ["--keys", "3", "--vsize", "900", "--rounds", "2"];
    for pmi in ["1", "2"] {
        let mut a = vec!["--pmi", pmi];
        a.extend(args);
        check(&[], &a, 3 * (NPROCS - 1) * 2);
    }
}

#[test]
fn a_failing_rank_fails_the_job() {
    // Proves the exit-status check can fail: every rank rejects its arguments and exits 2.
    let r = run(&[], &["--no-such-option"]);
    assert!(!r.status.success(), "stdout:\n{}", r.stdout);
    assert!(
        r.stderr.contains("unknown argument"),
        "stderr:\n{}",
        r.stderr
    );
}
