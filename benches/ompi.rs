//! Open MPI hello started four ways, in the same run: `mpirun.openmpi` (Open MPI's own
//! launcher, PMIx inside), kauri through its own PMIx server (`--pmi=pmix`), kauri through
//! Open MPI's `flux` component and Kauri's `libpmi.so` (PMI-1 over `PMI_FD`; kauri picks the
//! `FLUX_JOB_ID`), and mpiexec.hydra the same way (with `-genv FLUX_JOB_ID`).
//!
//! The whole job is timed, `--runs` times per cell after one warm-up per launcher, the
//! launchers taking turns run by run; each cell waits first (at most a minute) until the
//! machine has been at least 90 % idle for a second (other jobs on a 2-core machine inflate
//! times several-fold; the load average before each row is printed with it). Prints medians,
//! ranges and the ratios kauri/mpirun as a Markdown table. Needs `openmpi-bin` and
//! `libopenmpi-dev` (`mpicc.openmpi`).
//!
//! ```text
//! cargo bench --bench ompi                        # N = 1, 4, 16, 5 runs
//! cargo bench --bench ompi -- --runs 9 --sizes 1,2,4,8,16
//! ```
//!
//! With more ranks than cores kauri sets `OMPI_MCA_mpi_yield_when_idle=1` for Open MPI ranks,
//! as mpirun's daemons do when they oversubscribe; Hydra does not, so its column at N = 16
//! shows busy-polling ranks slowing each other down.

mod common;

use common::{build, median, opt, run_timed, summary, wait_quiet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Builds libpmi.so (release) and the hello program; returns their paths.
fn build_ompi(target: &Path) -> (PathBuf, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "kauri-pmi1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cargo build --release -p kauri-pmi1 failed");
    let hello = target.join("ompi-bench-hello");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/programs/ompi_hello.c");
    let ok = Command::new("mpicc.openmpi")
        .args(["-O2", "-o"])
        .arg(&hello)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "mpicc.openmpi failed: install the Debian packages openmpi-bin and libopenmpi-dev"
    );
    (target.join("release/libpmi.so"), hello)
}

/// A FLUX_JOB_ID for run `k` of this process: low 16 bits in 1..=0x7fff (see
/// compat-tests' `flux_job_id`).
fn job_id(k: u32) -> u32 {
    ((std::process::id() & 0x7fff) << 16) | (k % 0x7fff + 1)
}

fn main() {
    let runs: usize = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(5);
    let sizes: Vec<usize> = opt("--sizes").map_or(vec![1, 4, 16], |v| {
        v.split(',').filter_map(|x| x.parse().ok()).collect()
    });
    let timeout = Duration::from_secs(120);
    let bins = build();
    let (lib, hello) = build_ompi(&bins.target);
    let (lib, hello) = (lib.display().to_string(), hello.display().to_string());
    let mut seq = 0u32;
    let kauri = bins.kauri.display().to_string();
    let mut argv = |who: &str, n: usize| -> Vec<String> {
        seq += 1;
        let n = n.to_string();
        let lib_env = vec![
            "-genv".to_string(),
            "FLUX_PMI_LIBRARY_PATH".into(),
            lib.clone(),
        ];
        let (head, extra): (Vec<String>, Vec<String>) = match who {
            "mpirun" => (
                ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                Vec::new(),
            ),
            "kauri-pmix" => (vec![kauri.clone(), "--pmi=pmix".into()], Vec::new()),
            "kauri-libpmi" => (vec![kauri.clone(), "--pmi=pmi1".into()], lib_env),
            _ => (
                vec!["mpiexec.hydra".into()],
                [
                    "-genv".to_string(),
                    "FLUX_JOB_ID".into(),
                    job_id(seq).to_string(),
                ]
                .into_iter()
                .chain(lib_env)
                .collect(),
            ),
        };
        head.into_iter()
            .chain(extra)
            .chain(["-n".to_string(), n, hello.clone()])
            .collect()
    };
    let who = ["mpirun", "kauri-pmix", "kauri-libpmi", "hydra"];
    let env_of = |_: &str| -> Vec<(&str, &str)> { Vec::new() };
    println!(
        "| N | mpirun.openmpi median (min-max) s | kauri (PMIx) | kauri + libpmi (PMI-1) | mpiexec.hydra + libpmi | kauri PMIx/mpirun | kauri libpmi/mpirun | load |"
    );
    println!("|---:|---|---|---|---|---:|---:|---:|");
    for &n in &sizes {
        if !wait_quiet(Duration::from_secs(60)) {
            eprintln!("ompi bench: the machine stayed busy; N={n} is measured anyway");
        }
        // The 1-minute load average before the row (the row's own ranks would dominate it
        // afterwards).
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load = load.split_whitespace().next().unwrap_or("?").to_string();
        let expect = format!("ompi_hello: rank 0 of {n} allreduce={n}");
        // One warm-up each, then the launchers in turn, run by run: a machine whose load
        // drifts during the cell affects all three alike.
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); who.len()];
        let mut failures: Vec<Option<String>> = vec![None; who.len()];
        for w in who {
            let _ = run_timed(&argv(w, n), &env_of(w), &expect, timeout);
        }
        for _ in 0..runs {
            for (i, w) in who.iter().enumerate() {
                if failures[i].is_some() {
                    continue;
                }
                match run_timed(&argv(w, n), &env_of(w), &expect, timeout) {
                    Ok((t, _)) => times[i].push(t),
                    Err(e) => failures[i] = Some(e),
                }
            }
        }
        let mut cells = Vec::new();
        let mut medians = Vec::new();
        for i in 0..who.len() {
            match &failures[i] {
                Some(e) => {
                    cells.push(e.clone());
                    medians.push(None);
                }
                None => {
                    cells.push(summary(&mut times[i].clone(), 3));
                    medians.push(Some(median(&mut times[i])));
                }
            }
        }
        let ratio = |i: usize| match (medians[0], medians[i]) {
            (Some(m), Some(k)) => format!("{:.2}", k / m),
            _ => "-".into(),
        };
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {load} |",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            ratio(1),
            ratio(2)
        );
    }
}
