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

mod common;

use common::{build, opt, run_timed, summary};
use std::path::Path;
use std::time::Duration;

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

/// Runs pmi-load under `launcher` once.
fn run_once(
    launcher: &[String],
    load: &Path,
    pmi: u8,
    n: usize,
    w: &Workload,
    timeout: Duration,
) -> Result<f64, String> {
    let mut argv: Vec<String> = launcher.to_vec();
    argv.extend(["-n".into(), n.to_string(), load.display().to_string()]);
    argv.extend(["--pmi", &pmi.to_string(), "--keys", &w.keys.to_string()].map(String::from));
    argv.extend(
        [
            "--vsize",
            &w.vsize.to_string(),
            "--rounds",
            &w.rounds.to_string(),
        ]
        .map(String::from),
    );
    argv.extend([
        "--gets".to_string(),
        w.gets.map_or("all".into(), |g| g.to_string()),
        "--quiet".into(),
    ]);
    run_timed(&argv, &[], "pmi-load: ok rank=0", timeout).map(|(t, _)| t)
}

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    opt(name).map_or(default.to_vec(), |v| {
        v.split(',').filter_map(|x| x.parse().ok()).collect()
    })
}

fn main() {
    let runs: usize = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(5);
    let sizes = list("--sizes", &[16, 64, 256]);
    let pmis = list("--pmi", &[1, 2]);
    let timeout = Duration::from_secs(opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(60));
    let bins = build();
    let launchers: Vec<Vec<String>> = vec![
        vec![bins.kauri.display().to_string()],
        vec!["mpiexec.hydra".to_string()],
    ];
    println!("| workload | PMI | N | kauri median (min-max) s | hydra median (min-max) s | kauri/hydra |");
    println!("|---|---|---:|---|---|---:|");
    for w in WORKLOADS {
        for &pmi in &pmis {
            for &n in &sizes {
                let mut cells = Vec::new();
                let mut medians = Vec::new();
                for l in &launchers {
                    let _ = run_once(l, &bins.load, pmi as u8, n, w, timeout); // warm-up
                    let mut times = Vec::new();
                    let mut failure = None;
                    for _ in 0..runs {
                        match run_once(l, &bins.load, pmi as u8, n, w, timeout) {
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
                            cells.push(summary(&mut times.clone(), 3));
                            medians.push(Some(common::median(&mut times)));
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
