//! A port kauri hands to a program (`MASTER_PORT` of `-ml-env`) is reserved for the job's
//! whole life against every other kauri job: ten jobs started at once, whose rank 0 binds the
//! port late (as torch's `TCPStore` does), each get a port of their own, with a port range and
//! without; a range with no port left ends the job with one line.
//!
//! The ranges are below Linux's default ephemeral ports (32768 to 60999), where no program is
//! given a port by the kernel.

use std::process::{Command, Output};

mod common;

use common::stderr as err;

/// How many jobs start at once.
const JOBS: usize = 10;

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3"] {
        if std::path::Path::new(p).exists() {
            return p;
        }
    }
    panic!("python3 is needed (Debian package python3)");
}

fn late_master() -> String {
    format!(
        "{}/tests/programs/late_master.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs a two-rank `-ml-env` job of `late_master.py` with `args` after its token, with `env`.
fn job(token: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let prog = late_master();
    let mut all = vec!["-ml-env", "-n", "2", python(), &prog, token];
    all.extend_from_slice(args);
    common::kauri(&all, None, env)
}

/// Starts [`JOBS`] jobs at once with `env`, and checks that every one passed and that their
/// `MASTER_PORT`s are distinct (and inside `range`, when there is one).
fn jobs_at_once(env: &[(&str, &str)], range: Option<(u16, u16)>) {
    let outs: Vec<(String, Output)> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..JOBS)
            .map(|i| {
                let token = format!("job{i}-{}", std::process::id());
                s.spawn(move || {
                    let o = job(&token, &[], env);
                    (token, o)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut ports = Vec::new();
    for (token, o) in &outs {
        assert!(o.status.success(), "{token}: {}", err(o));
        let out = String::from_utf8_lossy(&o.stdout);
        let line = out.trim();
        let port: u16 = line
            .strip_prefix("port ")
            .and_then(|l| l.strip_suffix(&format!(" token {token}")))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{token}: {line:?}"));
        if let Some((low, high)) = range {
            assert!(
                (low..=high).contains(&port),
                "{token}: {port} outside the range"
            );
        }
        ports.push(port);
    }
    let mut distinct = ports.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), JOBS, "MASTER_PORTs shared: {ports:?}");
}

#[test]
fn ten_jobs_in_a_port_range_each_get_their_own_master_port() {
    jobs_at_once(
        &[("MPIEXEC_PORT_RANGE", "29100:29140")],
        Some((29100, 29140)),
    );
}

#[test]
fn ten_jobs_without_a_range_each_get_their_own_master_port() {
    jobs_at_once(&[], None);
}

/// Two jobs hold a range of four ports: each its `MASTER_PORT` (the highest free ones) and the
/// loopback port of its PMIx door (the lowest: every job is offered PMIx). A third job finds
/// no `MASTER_PORT` and says so.
#[test]
fn a_range_with_every_port_reserved_is_one_line() {
    let range = "29150:29153";
    let env = [("MPIEXEC_PORT_RANGE", range)];
    let dir = std::env::temp_dir().join(format!("kauri-ports-reserved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gate = dir.join("gate");
    let gate_arg = gate.display().to_string();
    std::thread::scope(|s| {
        // Two jobs hold the range's two ports: their rank 0 says it runs (its job's port is
        // chosen by then) and waits for the gate before it binds.
        let holders: Vec<_> = ["holder0", "holder1"]
            .into_iter()
            .map(|token| {
                let gate_arg = gate_arg.as_str();
                s.spawn(move || job(token, &["0", gate_arg], &env))
            })
            .collect();
        let up = |t: &str| dir.join(format!("gate.{t}.up")).exists();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while !(up("holder0") && up("holder1")) {
            if holders.iter().any(|h| h.is_finished()) || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let third = common::run_under_watchdog(
            Command::new(common::KAURI)
                .args(["-ml-env", "-n", "1", "sh", "-c", "echo $MASTER_PORT"])
                .env("MPIEXEC_PORT_RANGE", range),
        );
        std::fs::write(&gate, b"").unwrap();
        for h in holders {
            let o = h.join().unwrap();
            assert!(o.status.success(), "a job holding the range: {}", err(&o));
        }
        let o = third;
        let e = err(&o);
        assert!(!o.status.success(), "a third job ran: {}", o.status);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(&format!("MPIEXEC_PORT_RANGE={range}")), "{e}");
        assert!(e.contains("MASTER_PORT"), "{e}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}
