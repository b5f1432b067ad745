//! Wire-up across simulated hosts, kauri's tree against Hydra's star, in the same run.
//!
//! H hosts with 4 ranks each run `pmi-load` (5 rounds of: put one 64-byte key, fence, read 4
//! peers' keys). Each cell reports the whole job's wall time (launch, wire-up, teardown) and
//! the fence latency rank 0 measured (median of its fences after the first).
//!
//! Launch configurations:
//! * `kauri fork`: every host is a local `kauri agent` started by the fork launcher.
//! * `kauri ssh+D`: the ssh launcher pointed (`-launcher-exec`) at a local stand-in for ssh that
//!   sleeps D ms, then runs the command on this machine.
//! * `hydra ssh+D`: `mpiexec.hydra` with its ssh launcher pointed at the same stand-in (hosts
//!   are 127.0.0.2, 127.0.0.3, … so that no name needs resolving).
//!
//! kauri runs with tree widths 2, 8, 32 and flat, and over ssh also with the cost-model tree
//! (`-tree-width cost`: placed by the launch cost measured at start).
//!
//! ```text
//! cargo bench --bench tree                              # H = 4, 16, 64
//! cargo bench --bench tree -- --hosts 4,16 --runs 3
//! ```

mod common;

use common::{build, opt, run_timed, standin, summary};
use std::time::Duration;

/// Seconds (as the stand-in's `sleep` takes them) to whole milliseconds.
fn ms(secs: &str) -> u32 {
    (secs.parse::<f64>().unwrap_or(0.0) * 1000.0).round() as u32
}

/// One launch configuration of a row.
struct Cell {
    name: String,
    width: String,
    argv: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
}

fn main() {
    let runs: usize = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(3);
    let hosts: Vec<usize> = opt("--hosts")
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![4, 16, 64]);
    let timeout = Duration::from_secs(120);
    let bins = build();
    let standin = standin(&bins);
    let load: Vec<String> = [
        bins.load.display().to_string(),
        "--pmi".into(),
        "1".into(),
        "--keys".into(),
        "1".into(),
        "--vsize".into(),
        "64".into(),
        "--rounds".into(),
        "5".into(),
        "--gets".into(),
        "4".into(),
        "--quiet".into(),
    ]
    .into();

    println!("| hosts | ranks | launcher | tree width | wall median (min-max) s | fence median (min-max) µs |");
    println!("|---:|---:|---|---|---|---|");
    for &h in &hosts {
        let n = 4 * h;
        let fake: Vec<String> = (1..=h).map(|i| format!("h{i}")).collect();
        let loop_ips: Vec<String> = (2..h + 2)
            .map(|i| format!("127.0.{}.{}", i / 250, i % 250 + 2))
            .collect();
        let mut cells: Vec<Cell> = Vec::new();
        for w in ["2", "8", "32", "flat"] {
            let mut argv = vec![
                bins.kauri.display().to_string(),
                "-launcher".into(),
                "fork".into(),
            ];
            argv.extend([
                "-tree-width".into(),
                w.into(),
                "-hosts".into(),
                fake.join(","),
            ]);
            cells.push(Cell {
                name: "kauri fork".into(),
                width: w.into(),
                argv,
                env: vec![],
            });
        }
        for delay in ["0", "0.02"] {
            for w in ["2", "8", "32", "flat", "cost"] {
                let mut argv = vec![
                    bins.kauri.display().to_string(),
                    "-launcher".into(),
                    "ssh".into(),
                ];
                argv.extend([
                    "-launcher-exec".into(),
                    standin.clone(),
                    "-tree-width".into(),
                    w.into(),
                ]);
                argv.extend(["-hosts".into(), fake.join(",")]);
                cells.push(Cell {
                    name: format!("kauri ssh+{}ms", ms(delay)),
                    width: w.into(),
                    argv,
                    env: vec![("FAKESSH_DELAY", delay), ("KAURI_ADDR", "127.0.0.1")],
                });
            }
            let mut argv = vec![
                "mpiexec.hydra".to_string(),
                "-launcher".into(),
                "ssh".into(),
            ];
            argv.extend([
                "-launcher-exec".into(),
                standin.clone(),
                "-hosts".into(),
                loop_ips.join(","),
            ]);
            cells.push(Cell {
                name: format!("hydra ssh+{}ms", ms(delay)),
                width: "star".into(),
                argv,
                env: vec![("FAKESSH_DELAY", delay)],
            });
        }
        for Cell {
            name,
            width,
            mut argv,
            env,
        } in cells
        {
            argv.extend(["-ppn".into(), "4".into(), "-n".into(), n.to_string()]);
            argv.extend(load.iter().cloned());
            let _ = run_timed(&argv, &env, "pmi-load: ok rank=0", timeout); // warm-up
            let (mut walls, mut fences) = (Vec::new(), Vec::new());
            let mut failure = None;
            for _ in 0..runs {
                match run_timed(&argv, &env, "pmi-load: ok rank=0", timeout) {
                    Ok((t, out)) => {
                        walls.push(t);
                        let f = out
                            .split_whitespace()
                            .find_map(|t| t.strip_prefix("fence_us="))
                            .and_then(|v| v.parse::<f64>().ok());
                        fences.extend(f);
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            match failure {
                Some(e) => println!("| {h} | {n} | {name} | {width} | {e} | - |"),
                None => println!(
                    "| {h} | {n} | {name} | {width} | {} | {} |",
                    summary(&mut walls, 3),
                    if fences.is_empty() {
                        "-".into()
                    } else {
                        summary(&mut fences, 0)
                    }
                ),
            }
        }
    }
}
