//! Kauri against `mpiexec.hydra` on the same PMI workload, in the same run.
//!
//! Every rank runs `pmi-load` (pmi-wire's rank program): each round it puts K keys of V bytes,
//! fences, and reads G peers' keys, checking each value. The whole job is timed (launch,
//! wire-up, teardown), `--runs` times per cell after one warm-up, under each launcher, and the
//! median, the range and the ratio kauri/hydra are printed as a Markdown table.
//!
//! ```text
//! cargo bench --bench launchers                      # the default table
//! cargo bench --bench launchers -- --runs 3 --sizes 16,64 --pmi 1
//! ```
//!
//! A launcher that does not finish a run within `--timeout` seconds (Hydra's PMI-2 path hangs
//! at 256 ranks on one host) is recorded as `timeout` and not run again for that cell.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Workload {
    name: &'static str,
    keys: usize,
    vsize: usize,
    rounds: usize,
    gets: Option<usize>,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "K=1 V=64 R=10 G=16",
        keys: 1,
        vsize: 64,
        rounds: 10,
        gets: Some(16),
    },
    Workload {
        name: "K=1 V=512 R=3 G=all",
        keys: 1,
        vsize: 512,
        rounds: 3,
        gets: None,
    },
];

struct Opts {
    runs: usize,
    sizes: Vec<usize>,
    pmi: Vec<u8>,
    timeout: Duration,
}

fn opts() -> Opts {
    let mut o = Opts {
        runs: 5,
        sizes: vec![16, 64, 256],
        pmi: vec![1, 2],
        timeout: Duration::from_secs(60),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        let list = |v: &str| {
            v.split(',')
                .filter_map(|x| x.parse().ok())
                .collect::<Vec<_>>()
        };
        match args[i].as_str() {
            "--runs" => o.runs = v.parse().unwrap_or(o.runs),
            "--sizes" => o.sizes = list(&v),
            "--pmi" => o.pmi = list(&v).into_iter().map(|x: usize| x as u8).collect(),
            "--timeout" => o.timeout = Duration::from_secs(v.parse().unwrap_or(60)),
            _ => {
                i += 1; // cargo's own flags (--bench)
                continue;
            }
        }
        i += 2;
    }
    o
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Builds the release binaries this benchmark runs.
fn build() -> (PathBuf, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "--workspace", "--bins", "-q"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cargo build --release failed");
    let dir = target_dir().join("release");
    (dir.join("kauri"), dir.join("pmi-load"))
}

/// Runs one job; `None` when it timed out or failed.
fn run_once(
    launcher: &[String],
    load: &Path,
    pmi: u8,
    n: usize,
    w: &Workload,
    timeout: Duration,
) -> Result<f64, String> {
    let mut cmd = Command::new(&launcher[0]);
    cmd.args(&launcher[1..])
        .args(["-n", &n.to_string()])
        .arg(load)
        .args(["--pmi", &pmi.to_string(), "--keys", &w.keys.to_string()])
        .args([
            "--vsize",
            &w.vsize.to_string(),
            "--rounds",
            &w.rounds.to_string(),
        ])
        .args([
            "--gets",
            &w.gets.map_or("all".into(), |g| g.to_string()),
            "--quiet",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", launcher[0]))?;
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            let secs = start.elapsed().as_secs_f64();
            let mut out = String::new();
            use std::io::Read;
            if let Some(mut o) = child.stdout.take() {
                let _ = o.read_to_string(&mut out);
            }
            return if st.success() && out.contains("pmi-load: ok rank=0") {
                Ok(secs)
            } else {
                Err(format!("failed ({st})"))
            };
        }
        if start.elapsed() > timeout {
            // SAFETY: kill has no memory-safety preconditions; the group is the one we made.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            return Err("timeout".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

use std::os::unix::process::CommandExt;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let o = opts();
    let (kauri, load) = build();
    let launchers: Vec<(&str, Vec<String>)> = vec![
        ("kauri", vec![kauri.display().to_string()]),
        ("hydra", vec!["mpiexec.hydra".to_string()]),
    ];
    println!("| workload | PMI | N | kauri median (min-max) s | hydra median (min-max) s | kauri/hydra |");
    println!("|---|---|---:|---|---|---:|");
    for w in WORKLOADS {
        for &pmi in &o.pmi {
            for &n in &o.sizes {
                let mut cells = Vec::new();
                let mut medians = Vec::new();
                for (_, l) in &launchers {
                    let _ = run_once(l, &load, pmi, n, w, o.timeout); // warm-up
                    let mut times = Vec::new();
                    let mut failure = None;
                    for _ in 0..o.runs {
                        match run_once(l, &load, pmi, n, w, o.timeout) {
                            Ok(t) => times.push(t),
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    match failure {
                        Some(e) => {
                            cells.push(e);
                            medians.push(None);
                        }
                        None => {
                            let (lo, hi) = (
                                times.iter().cloned().fold(f64::MAX, f64::min),
                                times.iter().cloned().fold(0.0, f64::max),
                            );
                            let m = median(&mut times);
                            cells.push(format!("{m:.3} ({lo:.3}-{hi:.3})"));
                            medians.push(Some(m));
                        }
                    }
                }
                let ratio = match (medians[0], medians[1]) {
                    (Some(k), Some(h)) => format!("{:.2}", k / h),
                    (Some(_), None) => "hydra failed".into(),
                    _ => "-".into(),
                };
                println!(
                    "| {} | {pmi} | {n} | {} | {} | {ratio} |",
                    w.name, cells[0], cells[1]
                );
            }
        }
    }
}
