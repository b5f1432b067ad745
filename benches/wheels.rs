//! Start-up of today's MPIs from the Python registry's wheels: Open MPI 5 and
//! MPICH 5, each from its venv (`compat-tests/wheels/setup.sh`), a hello at 1, 4 and 16 ranks
//! on one host and at 4 and 16 ranks on 4 simulated hosts, under the MPI's own launcher
//! (PRRTE's `mpirun`, Hydra's `mpiexec`) and under kauri, launched as
//! `compat-tests/wheels/matrix.py` launches them.
//!
//! The hello is `compat-tests/wheels/programs/hello_timed.c` (the matrix's `hello.c` that also
//! prints, per rank, when it was started, when `main` was entered and when `MPI_Init`
//! returned), built with each venv's `mpicc`. The whole job is timed, `--runs` times per cell
//! after one warm-up per launcher, the launchers taking turns run by run; each cell first waits
//! (at most `--quiet-wait` seconds, 60) for a quiet machine, as `benches/ompi.rs` does. Prints two Markdown
//! tables: the wall times (medians, min-max, kauri/native, the load before the cell) and the
//! start-up phases (medians over the runs of the slowest rank, ms since the launcher started).
//!
//! ```text
//! cargo bench --bench wheels                    # 5 runs, both MPIs
//! cargo bench --bench wheels -- --runs 9 --mpis mpich5 --quiet-wait 15
//! cargo bench --bench wheels -- --baseline /tmp/kauri-before   # another kauri beside
//! ```
//!
//! With `--baseline PATH` another kauri binary (the build before a change) takes its turn
//! too, in a third column with kauri/baseline.
//!
//! PRRTE's `mpirun` is not run on simulated hosts: its daemons started through the ssh
//! stand-in hang on this machine (`NATIVE_ONE_HOST_ONLY` in matrix.py); kauri's column is
//! measured alone there. Exits 0 with a message when the venvs are missing.

mod common;

use common::{load_avg, median, opt, run_timed, summary, wait_quiet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Prefixes of the variables a launcher or an MPI reads, dropped from the environment the
/// launchers get (as matrix.py's `cell_env`).
const DROPPED: [&str; 9] = [
    "PMI_", "PMIX_", "OMPI_", "PRTE_", "HYDRA_", "I_MPI_", "MPIR_", "MPICH_", "KAURI_",
];

/// The (ranks, hosts) shapes of a cell.
const SHAPES: [(usize, usize); 5] = [(1, 1), (4, 1), (16, 1), (4, 4), (16, 4)];

/// One MPI of the wheels: its venv, and whether its launcher is PRRTE's.
struct Mpi {
    name: &'static str,
    prte: bool,
}

const MPIS: [Mpi; 2] = [
    Mpi {
        name: "openmpi5",
        prte: true,
    },
    Mpi {
        name: "mpich5",
        prte: false,
    },
];

/// The venv of `mpi`, under `${KAURI_CACHE:-$HOME/.cache/kauri}/venvs`.
fn venv(mpi: &str) -> PathBuf {
    let cache = std::env::var_os("KAURI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/kauri")
        });
    cache.join("venvs").join(mpi)
}

/// CLOCK_BOOTTIME in ns: the clock the ranks' start times and timestamps count on.
fn boottime_ns() -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut t) };
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// The `PATH` of a cell: the venv's `bin` first.
fn path_of(mpi: &str) -> String {
    format!(
        "{}:{}",
        venv(mpi).join("bin").display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

/// Builds kauri (release) and the timed hello of each MPI; their paths.
fn build_all(dir: &Path) -> (String, Vec<String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(cargo)
        .args(["build", "--release", "--bin", "kauri", "-q"])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cargo build --release --bin kauri failed");
    let src = root.join("compat-tests/wheels/programs/hello_timed.c");
    let hellos = MPIS
        .iter()
        .map(|m| {
            let exe = dir.join(format!("hello-{}", m.name));
            let ok = Command::new(venv(m.name).join("bin/mpicc"))
                .args(["-O2", "-o"])
                .arg(&exe)
                .arg(&src)
                .env("PATH", path_of(m.name))
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "{}'s mpicc failed", m.name);
            exe.display().to_string()
        })
        .collect();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    (target.join("release/kauri").display().to_string(), hellos)
}

/// The command line of one run: `env` dropping the launchers' variables and setting `PATH`
/// and `TMPDIR`, then the launcher as matrix.py runs it; None when not run (PRRTE on
/// simulated hosts).
fn argv(
    mpi: &Mpi,
    native: bool,
    n: usize,
    hosts: usize,
    kauri: &str,
    hello: &str,
    tmp: &Path,
) -> Option<Vec<String>> {
    let mut v: Vec<String> = vec!["/usr/bin/env".into()];
    for (k, _) in std::env::vars() {
        if DROPPED.iter().any(|p| k.starts_with(p)) {
            v.extend(["-u".into(), k]);
        }
    }
    v.push(format!("PATH={}", path_of(mpi.name)));
    v.push(format!("TMPDIR={}", tmp.display()));
    let bin = venv(mpi.name).join("bin");
    let hostlist = ["a", "b", "c", "d"][..hosts].join(",");
    let s = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if !native {
        v.push(kauri.into());
        if hosts > 1 {
            v.extend(s(&["-launcher", "fork", "-hosts", &hostlist]));
        }
    } else if mpi.prte {
        if hosts > 1 {
            return None;
        }
        v.push(bin.join("mpirun").display().to_string());
        v.extend(s(&["--oversubscribe", "--bind-to", "none"]));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            v.push("--allow-run-as-root".into());
        }
    } else {
        v.push(bin.join("mpiexec").display().to_string());
        if hosts > 1 {
            v.extend(s(&["-launcher", "fork", "-hosts", &hostlist]));
        }
    }
    v.extend(["-n".into(), n.to_string(), hello.into()]);
    Some(v)
}

/// The phases of one run, ms since the launcher started, slowest rank each: the last rank's
/// exec (10 ms ticks), the last `main`, the longest `MPI_Init`, the last `MPI_Init` return.
fn phases(out: &str, t0: i64) -> Option<[f64; 4]> {
    let mut p = [0f64; 4];
    let mut seen = 0;
    for l in out.lines().filter(|l| l.starts_with("T rank ")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |key: &str| -> Option<i64> {
            let i = w.iter().position(|x| *x == key)?;
            w.get(i + 1)?.parse().ok()
        };
        let (ticks, hz) = (num("start_ticks")?, num("hz")?);
        let (main, init) = (num("main_ns")?, num("init_ns")?);
        let ms = |ns: i64| (ns - t0) as f64 / 1e6;
        let exec = (ticks * 1_000_000_000 / hz.max(1) - t0) as f64 / 1e6;
        let row = [exec, ms(main), (init - main) as f64 / 1e6, ms(init)];
        for (a, b) in p.iter_mut().zip(row) {
            *a = a.max(b);
        }
        seen += 1;
    }
    (seen > 0).then_some(p)
}

/// The runs of one launcher in a cell: wall seconds, phases, or why it stopped.
#[derive(Default)]
struct Runs {
    secs: Vec<f64>,
    phases: Vec<[f64; 4]>,
    failed: Option<String>,
}

impl Runs {
    /// Runs `argv` once and records it.
    fn run(&mut self, argv: &[String], expect: &str) {
        let t0 = boottime_ns();
        match run_timed(argv, &[], expect, Duration::from_secs(120)) {
            Ok((t, out)) => {
                self.secs.push(t);
                if let Some(p) = phases(&out, t0) {
                    self.phases.push(p);
                }
            }
            Err(e) => self.failed = Some(e),
        }
    }

    /// `median (min-max)` of the wall times, or why not.
    fn cell(&self) -> String {
        match &self.failed {
            Some(e) => e.clone(),
            None if self.secs.is_empty() => "-".into(),
            None => summary(&mut self.secs.clone(), 3),
        }
    }

    /// The median wall time, when every run passed.
    fn median(&self) -> Option<f64> {
        (self.failed.is_none() && !self.secs.is_empty()).then(|| median(&mut self.secs.clone()))
    }

    /// The medians of the phases, as table cells.
    fn phase_cells(&self) -> String {
        (0..4)
            .map(|i| {
                let mut v: Vec<f64> = self.phases.iter().map(|p| p[i]).collect();
                if v.is_empty() {
                    "-".into()
                } else {
                    format!("{:.0}", median(&mut v))
                }
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

fn main() {
    let runs: usize = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(5);
    let only = opt("--mpis");
    let quiet: u64 = opt("--quiet-wait")
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let missing: Vec<String> = MPIS
        .iter()
        .flat_map(|m| {
            let b = venv(m.name).join("bin");
            [
                b.join(if m.prte { "mpirun" } else { "mpiexec" }),
                b.join("mpicc"),
            ]
        })
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        println!(
            "wheels bench: skipped, no {} (run compat-tests/wheels/setup.sh)",
            missing.join(", ")
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("kauri-wheels-bench-{}", std::process::id()));
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("make the bench's temp dir");
    let (kauri, hellos) = build_all(&dir);
    let baseline = opt("--baseline");
    let mut rows = Vec::new();
    let mut phase_rows = Vec::new();
    for (mpi, hello) in MPIS.iter().zip(&hellos) {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|x| x == mpi.name))
        {
            continue;
        }
        for (n, hosts) in SHAPES {
            if !wait_quiet(Duration::from_secs(quiet)) {
                eprintln!("wheels bench: the machine stayed busy; measuring anyway");
            }
            let load = load_avg();
            let expect = format!("OK hello rank 0 of {n}:");
            let mut cmds: Vec<Option<Vec<String>>> = [true, false]
                .iter()
                .map(|&nat| argv(mpi, nat, n, hosts, &kauri, hello, &tmp))
                .collect();
            if let Some(b) = &baseline {
                cmds.push(argv(mpi, false, n, hosts, b, hello, &tmp));
            }
            let mut res: Vec<Runs> = cmds.iter().map(|_| Runs::default()).collect();
            for c in cmds.iter().flatten() {
                let _ = run_timed(c, &[], &expect, Duration::from_secs(120));
            }
            for _ in 0..runs {
                for (r, c) in res.iter_mut().zip(&cmds) {
                    if let (Some(c), None) = (c, &r.failed) {
                        r.run(c, &expect);
                    }
                }
            }
            let native = if cmds[0].is_none() {
                "skipped (PRRTE's daemons on simulated hosts hang)".into()
            } else {
                res[0].cell()
            };
            let ratio = match (res[0].median(), res[1].median()) {
                (Some(a), Some(b)) => format!("{:.2}", b / a),
                _ => "-".into(),
            };
            let mut row = format!(
                "| {} | {n} | {hosts} | {native} | {} | {ratio} |",
                mpi.name,
                res[1].cell()
            );
            if let Some(b) = res.get(2) {
                let ratio = match (b.median(), res[1].median()) {
                    (Some(a), Some(k)) => format!("{:.2}", k / a),
                    _ => "-".into(),
                };
                row += &format!(" {} | {ratio} |", b.cell());
            }
            row += &format!(" {load} |");
            println!("{row}");
            rows.push(row);
            for (who, r) in ["native", "kauri", "baseline"].iter().zip(&res) {
                if !r.phases.is_empty() {
                    phase_rows.push(format!(
                        "| {} | {n} | {hosts} | {who} | {} | {:.0} |",
                        mpi.name,
                        r.phase_cells(),
                        r.median().unwrap_or(f64::NAN) * 1e3
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("\nruns: {runs} per launcher and cell, after a warm-up each, taking turns\n");
    if baseline.is_some() {
        println!("| MPI | N | hosts | native median (min-max) s | kauri median (min-max) s | kauri/native | baseline median (min-max) s | kauri/baseline | load |");
        println!("|---|---:|---:|---|---|---:|---|---:|---:|");
    } else {
        println!("| MPI | N | hosts | native median (min-max) s | kauri median (min-max) s | kauri/native | load |");
        println!("|---|---:|---:|---|---|---:|---:|");
    }
    rows.iter().for_each(|r| println!("{r}"));
    println!("\nStart-up phases, ms since the launcher started (medians over the runs of the slowest rank):\n");
    println!("| MPI | N | hosts | launcher | last rank exec'd | last main | longest MPI_Init | last MPI_Init return | total |");
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|");
    phase_rows.iter().for_each(|r| println!("{r}"));
}
