//! Kauri against `mpiexec.hydra` (and `mpirun.openmpi` where it applies) on the same
//! workloads, in the same run. One command for the whole comparison:
//!
//! * `hello`: an MPI hello (`MPI_Init`, an allreduce, `MPI_Finalize`) at N = 1, 2, 4, …, 64.
//!   kauri and Hydra run MPICH's (`contrib/examples/hello.c` built with `mpicc.mpich`);
//!   `mpirun.openmpi --oversubscribe` runs Open MPI's own (`compat-tests/programs/ompi_hello.c`
//!   built with `mpicc.openmpi`): the same program in its own MPI, so the columns compare
//!   launchers, each with its MPI.
//! * `pmi`: every rank runs `pmi-load` (pmi-wire's rank program: each round it puts K keys of V
//!   bytes, fences, reads G peers' keys, checking every value), PMI-1 and PMI-2, N = 16, 64,
//!   256, 1024: `light` (K=1 V=64 R=10 G=16) and `allgather` (K=1 V=512 R=3, every rank
//!   reads every other rank's key). Open MPI's launcher serves no PMI-1/PMI-2, so
//!   it has no column here. The **floor** runs too: `pmi-floor` (pmi-wire's minimal
//!   launcher and PMI-1/PMI-2 server: one thread, one epoll loop, one read per readiness, one write
//!   per batch of replies, a plain hash table, no output forwarding), the least any launcher
//!   could cost here; the table gives each launcher's time over the floor's.
//! * `first`: the first millisecond, `-n 1` running `pmi-load` for one round, 40 runs per
//!   launcher (`--first-runs`): the launcher's fixed cost, against the floor's.
//! * `hosts`: H simulated hosts with 4 ranks each running `pmi-load` (5 rounds, one 64-byte key,
//!   4 gets), H = 4, 8, 16, 32, 64: kauri's fork launcher, and kauri and Hydra through a local
//!   stand-in for ssh that sleeps 20 ms (tree width 8 for kauri). See `benches/tree.rs` for
//!   every width.
//! * `mpich-hosts`: an MPICH hello on H = 50, 100, 200, 300 simulated hosts with one rank
//!   each, kauri's and Hydra's fork launchers, against `pmi-floor --hosts H` running the same
//!   ranks, mapped one per host, with no agent: hundreds of agents and spinning ranks on 2 cores, where a tree that stops
//!   answering under CPU starvation would show.
//!
//! The whole job is timed, `--runs` times per cell after one warm-up, the launchers taking
//! turns run by run, in a new random order each run. A launcher that fails or does not finish
//! within `--timeout` seconds is recorded (`timeout`, `failed`) and not run again for larger
//! N of that workload: the table says where each launcher stops working. Every row carries
//! the 1-minute load average before it, and how many of its runs started on a quiet machine:
//! before each run the bench waits (at most `--quiet-wait` seconds, 30; 0 does not wait) for a
//! quarter-second in which the machine is 90 % idle. Prints Markdown tables; with
//! `--write-docs` also replaces the generated part of `docs/performance.md` (machine, date,
//! tables) and draws one PNG per workload into `docs/perf/` with gnuplot (`gnuplot-nox`,
//! installed by `.ci/setup`).
//!
//! With `--baseline PATH` another kauri binary (the build before a change, say) runs beside
//! the one under test in every cell (`kauri-before`), taking its turn like the others: the
//! same-run comparison a change is judged by.
//!
//! ```text
//! cargo bench --bench launchers                                   # everything
//! cargo bench --bench launchers -- --baseline /tmp/kauri-before --workloads pmi,hosts
//! cargo bench --bench launchers -- --workloads hello,pmi --runs 3 --sizes 16,64
//! cargo bench --bench launchers -- --workloads pmi --pmi 2 --sizes 1024 --no-hydra
//! cargo bench --bench launchers -- --write-docs
//! ```

mod common;

use common::{
    build, load_avg, machine, median, opt, plot, run_timed, standin, summary, wait_idle,
    write_generated, Bins,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One launcher's way of running a cell.
#[derive(Clone)]
struct Launcher {
    name: &'static str,
    /// The command line before `-n N` (or the whole line, for hosts cells).
    argv: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
}

/// One row of a table: a launcher's times, or why it has none.
enum Cell {
    Times(Vec<f64>),
    Failed(String),
    Skipped(String),
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Times(t) => summary(&mut t.clone(), 3),
            Cell::Failed(e) => e.clone(),
            Cell::Skipped(s) => s.clone(),
        }
    }

    fn median(&self) -> Option<f64> {
        match self {
            Cell::Times(t) => Some(median(&mut t.clone())),
            _ => None,
        }
    }
}

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    opt(name).map_or(default.to_vec(), |v| {
        v.split(',').filter_map(|x| x.parse().ok()).collect()
    })
}

/// Compiles `src` with `cc` into the target directory.
fn compile(cc: &str, src: &str, out: &Path) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(cc)
        .arg("-O2")
        .arg("-o")
        .arg(out)
        .arg(root.join(src))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then(|| out.to_path_buf())
}

/// How long a round waits for a quiet machine (`--quiet-wait` seconds, default 30; 0 does
/// not wait), and the window it must find at least 90 % idle.
fn quiet_wait() -> Duration {
    Duration::from_secs(
        opt("--quiet-wait")
            .and_then(|v| v.parse().ok())
            .unwrap_or(30),
    )
}
const QUIET_WINDOW: Duration = Duration::from_millis(250);

/// Runs one row: every launcher `runs` times, taking turns, after a warm-up each. Each run
/// takes the launchers in a new random order: in a fixed one, a launcher always follows the
/// same other, and pays for what that one leaves running as it ends (its teardown, a
/// daemon's exit). Before each run (each round of turns) it waits, up to `--quiet-wait`, for
/// a quarter-second in which the machine is 90 % idle: the ranks of the run before (the
/// last of 1,024 take a while to go) would otherwise fall on the next one. Launchers already
/// marked failed in `stopped` are skipped; new failures are marked there. Returns the cells
/// and how many rounds started on a quiet machine.
fn row(
    launchers: &[(Launcher, Vec<String>)],
    expect: &str,
    runs: usize,
    timeout: Duration,
    stopped: &mut [Option<String>],
    n: usize,
) -> (Vec<Cell>, usize) {
    let mut cells: Vec<Cell> = stopped
        .iter()
        .map(|s| match s {
            Some(why) => Cell::Skipped(why.clone()),
            None => Cell::Times(Vec::new()),
        })
        .collect();
    for (i, (l, argv)) in launchers.iter().enumerate() {
        if stopped[i].is_none() {
            if let Err(e) = run_timed(argv, &l.env, expect, timeout) {
                cells[i] = Cell::Failed(e.clone());
                stopped[i] = Some(format!("not run ({e} at N={n})"));
            }
        }
    }
    let mut order: Vec<usize> = (0..launchers.len()).collect();
    let mut seed = shuffle_seed(n);
    let wait = quiet_wait();
    let mut quiet = 0;
    for _ in 0..runs {
        if wait.is_zero() || wait_idle(wait, QUIET_WINDOW) {
            quiet += 1;
        }
        shuffle(&mut order, &mut seed);
        for &i in &order {
            let (l, argv) = &launchers[i];
            let Cell::Times(t) = &mut cells[i] else {
                continue;
            };
            match run_timed(argv, &l.env, expect, timeout) {
                Ok((s, _)) => t.push(s),
                Err(e) => {
                    stopped[i] = Some(format!("not run ({e} at N={n})"));
                    cells[i] = Cell::Failed(e);
                }
            }
        }
    }
    (cells, quiet)
}

/// A seed for [`shuffle`]: the clock's nanoseconds and the row's size.
fn shuffle_seed(n: usize) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (n as u64).rotate_left(32)) | 1
}

/// Shuffles `v` in place (Fisher-Yates over a xorshift generator in `seed`).
fn shuffle(v: &mut [usize], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

/// A generated table and the series to plot.
struct Table {
    title: String,
    slug: String,
    xlabel: &'static str,
    text: String,
    /// (launcher, [(x, median s)]).
    series: Vec<(String, Vec<(usize, f64)>)>,
}

fn header(x: &str, names: &[&str], extra: &str) -> String {
    let mut h = format!(
        "| {x} |{}",
        names
            .iter()
            .map(|n| format!(" {n} median (min-max) s |"))
            .collect::<String>()
    );
    h.push_str(extra);
    h.push_str(" quiet | load |\n|---:|");
    for _ in names {
        h.push_str("---|");
    }
    for _ in extra.matches('|') {
        h.push_str("---:|");
    }
    h.push_str("---:|---:|\n");
    h
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        (Some(_), None) => "other failed".into(),
        (None, Some(_)) => "kauri failed".into(),
        _ => "-".into(),
    }
}

/// Runs `cells` of one workload over `sizes`; `argv(l, n)` is the full command line.
#[allow(clippy::too_many_arguments)]
fn table(
    title: &str,
    slug: &str,
    xlabel: &'static str,
    launchers: &[Launcher],
    sizes: &[usize],
    argv: impl Fn(&Launcher, usize) -> Vec<String>,
    expect: impl Fn(usize) -> String,
    runs: usize,
    timeout: Duration,
) -> Table {
    let names: Vec<&str> = launchers.iter().map(|l| l.name).collect();
    // kauri over each other launcher; with a floor, every other launcher over it too.
    let floor = names.iter().position(|&n| n == "floor");
    let mut pairs: Vec<(usize, usize)> = (1..names.len()).map(|i| (0, i)).collect();
    if let Some(f) = floor {
        pairs.extend((1..names.len()).filter(|&i| i != f).map(|i| (i, f)));
    }
    let extra: String = pairs
        .iter()
        .map(|&(a, b)| format!(" {} / {} |", names[a], names[b]))
        .collect();
    let mut text = header(xlabel, &names, &extra);
    let mut stopped: Vec<Option<String>> = vec![None; launchers.len()];
    let mut series: Vec<(String, Vec<(usize, f64)>)> =
        names.iter().map(|n| (n.to_string(), Vec::new())).collect();
    for &n in sizes {
        let load = load_avg();
        let lines: Vec<(Launcher, Vec<String>)> =
            launchers.iter().map(|l| (l.clone(), argv(l, n))).collect();
        let (cells, quiet) = row(&lines, &expect(n), runs, timeout, &mut stopped, n);
        let meds: Vec<Option<f64>> = cells.iter().map(Cell::median).collect();
        for (s, m) in series.iter_mut().zip(&meds) {
            if let Some(m) = m {
                s.1.push((n, *m));
            }
        }
        let mut line = format!("| {n} |");
        for c in &cells {
            let _ = write!(line, " {} |", c.text());
        }
        for &(a, b) in &pairs {
            let _ = write!(line, " {} |", ratio(meds[a], meds[b]));
        }
        let _ = writeln!(line, " {quiet}/{runs} | {load} |");
        print!("{line}");
        text.push_str(&line);
    }
    Table {
        title: title.into(),
        slug: slug.into(),
        xlabel,
        text,
        series,
    }
}

fn hello(bins: &Bins, runs: usize, timeout: Duration) -> Option<Table> {
    let mpich = compile(
        "mpicc.mpich",
        "contrib/examples/hello.c",
        &bins.target.join("bench-hello-mpich"),
    )?;
    let ompi = compile(
        "mpicc.openmpi",
        "compat-tests/programs/ompi_hello.c",
        &bins.target.join("bench-hello-ompi"),
    );
    let mut launchers = kauri_and_hydra(bins);
    if ompi.is_some() {
        launchers.push(Launcher {
            name: "mpirun.openmpi",
            argv: ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]
                .map(String::from)
                .into(),
            env: vec![],
        });
    }
    let sizes = list("--hello-sizes", &[1, 2, 4, 8, 16, 32, 64]);
    println!("\nMPI hello\n");
    Some(table(
        "MPI hello (kauri and Hydra: MPICH's; mpirun.openmpi: Open MPI's)",
        "hello",
        "ranks",
        &launchers,
        &sizes,
        |l, n| {
            let mut a = l.argv.clone();
            a.extend(["-n".into(), n.to_string()]);
            let prog = if l.name == "mpirun.openmpi" {
                ompi.clone().unwrap_or_default()
            } else {
                mpich.clone()
            };
            a.push(prog.display().to_string());
            a
        },
        |_| "hello".into(),
        runs,
        timeout,
    ))
}

/// kauri (the build under test) and mpiexec.hydra, with no extra environment; with
/// `--baseline`, that kauri too; without Hydra under `--no-hydra` (it times out on PMI-2
/// from 256 ranks, and its hung run loads the machine for the cells after it).
fn kauri_and_hydra(bins: &Bins) -> Vec<Launcher> {
    let mut v = vec![Launcher {
        name: "kauri",
        argv: vec![bins.kauri.display().to_string()],
        env: vec![],
    }];
    if let Some(b) = opt("--baseline") {
        v.push(Launcher {
            name: "kauri-before",
            argv: vec![b],
            env: vec![],
        });
    }
    if !std::env::args().any(|a| a == "--no-hydra") {
        v.push(Launcher {
            name: "hydra",
            argv: vec!["mpiexec.hydra".into()],
            env: vec![],
        });
    }
    v
}

/// A `pmi-load` workload: its name and its arguments besides `--pmi`.
struct Load {
    name: &'static str,
    /// (K keys, V bytes, R rounds, G gets or `all`).
    args: (usize, usize, usize, &'static str),
}

/// The light workload (every launcher's daily wire-up) and the allgather one.
const LIGHT: Load = Load {
    name: "light",
    args: (1, 64, 10, "16"),
};
const ALLGATHER: Load = Load {
    name: "allgather",
    args: (1, 512, 3, "all"),
};

fn pmi(bins: &Bins, pmi: u8, w: &Load, runs: usize, timeout: Duration) -> Table {
    let mut launchers = kauri_and_hydra(bins);
    launchers.push(Launcher {
        name: "floor",
        argv: vec![bins.floor.display().to_string()],
        env: vec![],
    });
    let sizes = list("--sizes", &[16, 64, 256, 1024]);
    let (k, v, r, g) = w.args;
    let what = format!("pmi-load {}, PMI-{pmi} (K={k} V={v} R={r} G={g})", w.name);
    println!("\n{what}\n");
    let load = bins.load.display().to_string();
    let slug = match w.name {
        "light" => format!("pmi{pmi}"),
        other => format!("pmi{pmi}-{other}"),
    };
    table(
        &what,
        &slug,
        "ranks",
        &launchers,
        &sizes,
        |l, n| {
            let mut a = l.argv.clone();
            a.extend(["-n".into(), n.to_string(), load.clone()]);
            for (key, val) in [
                ("--pmi", pmi.to_string()),
                ("--keys", k.to_string()),
                ("--vsize", v.to_string()),
                ("--rounds", r.to_string()),
                ("--gets", g.to_string()),
            ] {
                a.extend([key.to_string(), val]);
            }
            a.push("--quiet".into());
            a
        },
        |_| "pmi-load: ok rank=0".into(),
        runs,
        timeout,
    )
}

/// The first millisecond: `-n 1 pmi-load` with one round (init, one put, a fence, finalize),
/// so nearly all of it is the launcher's fixed cost: its own start, a rank's start, the
/// teardown. `--first-runs` runs (default 40) per launcher, the launchers taking turns.
fn first(bins: &Bins, timeout: Duration) -> Table {
    let mut launchers = kauri_and_hydra(bins);
    launchers.push(Launcher {
        name: "floor",
        argv: vec![bins.floor.display().to_string()],
        env: vec![],
    });
    let runs: usize = opt("--first-runs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let what = "The first millisecond: -n 1, pmi-load 1 round (PMI-1)";
    println!("\n{what}\n");
    let load = bins.load.display().to_string();
    table(
        what,
        "first",
        "ranks",
        &launchers,
        &[1],
        |l, n| {
            let mut a = l.argv.clone();
            a.extend(["-n".into(), n.to_string(), load.clone()]);
            a.extend(["--pmi", "1", "--rounds", "1", "--quiet"].map(String::from));
            a
        },
        |_| "pmi-load: ok rank=0".into(),
        runs,
        timeout,
    )
}

fn hosts(bins: &Bins, runs: usize, timeout: Duration) -> Table {
    let ssh = standin(bins);
    let kauri = bins.kauri.display().to_string();
    let mut launchers = vec![
        Launcher {
            name: "kauri ssh+20ms",
            argv: [
                &kauri,
                "-launcher",
                "ssh",
                "-launcher-exec",
                &ssh,
                "-tree-width",
                "8",
            ]
            .map(String::from)
            .into(),
            env: vec![("FAKESSH_DELAY", "0.02"), ("KAURI_ADDR", "127.0.0.1")],
        },
        Launcher {
            name: "hydra ssh+20ms",
            argv: ["mpiexec.hydra", "-launcher", "ssh", "-launcher-exec", &ssh]
                .map(String::from)
                .into(),
            env: vec![("FAKESSH_DELAY", "0.02")],
        },
        Launcher {
            name: "kauri fork",
            argv: [&kauri, "-launcher", "fork", "-tree-width", "8"]
                .map(String::from)
                .into(),
            env: vec![],
        },
    ];
    if let Some(b) = opt("--baseline") {
        launchers.push(Launcher {
            name: "kauri-before fork",
            argv: [&b, "-launcher", "fork", "-tree-width", "8"]
                .map(String::from)
                .into(),
            env: vec![],
        });
    }
    let sizes = list("--hosts", &[4, 8, 16, 32, 64]);
    println!("\nsimulated hosts, 4 ranks each, pmi-load 5 rounds\n");
    let load = bins.load.display().to_string();
    table(
        "Simulated hosts, 4 ranks each (pmi-load, PMI-1, 5 rounds)",
        "hosts",
        "hosts",
        &launchers,
        &sizes,
        |l, h| {
            let names: Vec<String> = if l.name.starts_with("hydra") {
                (2..h + 2)
                    .map(|i| format!("127.0.{}.{}", i / 250, i % 250 + 2))
                    .collect()
            } else {
                (1..=h).map(|i| format!("h{i}")).collect()
            };
            let mut a = l.argv.clone();
            a.extend(["-hosts".into(), names.join(",")]);
            a.extend(["-ppn".into(), "4".into(), "-n".into(), (4 * h).to_string()]);
            a.push(load.clone());
            a.extend(
                [
                    "--pmi", "1", "--keys", "1", "--vsize", "64", "--rounds", "5", "--gets", "4",
                ]
                .map(String::from),
            );
            a.push("--quiet".into());
            a
        },
        |_| "pmi-load: ok rank=0".into(),
        runs,
        timeout,
    )
}

/// An MPICH hello on H simulated hosts, one rank each (`-launcher fork -hosts h1,…,hH`):
/// kauri and Hydra each start an agent (a proxy) per host on this one machine, so at 300
/// hosts the 2 cores hold 300 agents and 300 ranks, each rank spinning in MPICH's progress
/// loop while it waits: the starved machine a tree must keep answering on. The floor is
/// `pmi-floor --hosts H` running the same H ranks with no agent at all, their process mapping
/// saying one host each (without it MPICH wires them as one host's, and takes longer). `--sim-hosts` (default
/// 50,100,200,300). A run counts only if the last rank's line says `of H`.
fn mpich_hosts(bins: &Bins, runs: usize, timeout: Duration) -> Option<Table> {
    let mpich = compile(
        "mpicc.mpich",
        "contrib/examples/hello.c",
        &bins.target.join("bench-hello-mpich"),
    )?
    .display()
    .to_string();
    let kauri = bins.kauri.display().to_string();
    let mut launchers = vec![Launcher {
        name: "kauri fork",
        argv: [&kauri, "-launcher", "fork"].map(String::from).into(),
        env: vec![],
    }];
    if let Some(b) = opt("--baseline") {
        launchers.push(Launcher {
            name: "kauri-before fork",
            argv: [&b, "-launcher", "fork"].map(String::from).into(),
            env: vec![],
        });
    }
    launchers.push(Launcher {
        name: "hydra fork",
        argv: ["mpiexec.hydra", "-launcher", "fork"]
            .map(String::from)
            .into(),
        env: vec![],
    });
    launchers.push(Launcher {
        name: "floor",
        argv: vec![bins.floor.display().to_string()],
        env: vec![],
    });
    let sizes = list("--sim-hosts", &[50, 100, 200, 300]);
    println!("\nMPICH hello on simulated hosts, one rank each\n");
    Some(table(
        "MPICH hello on simulated hosts, one rank each (floor: the same ranks, no agents)",
        "mpich-hosts",
        "hosts",
        &launchers,
        &sizes,
        |l, h| {
            let mut a = l.argv.clone();
            if l.name == "floor" {
                a.extend(["--hosts".into(), h.to_string()]);
            } else {
                let names: Vec<String> = (1..=h).map(|i| format!("h{i}")).collect();
                a.extend(["-hosts".into(), names.join(",")]);
            }
            a.extend(["-n".into(), h.to_string(), mpich.clone()]);
            a
        },
        |h| format!("of {h} on"),
        runs,
        timeout,
    ))
}

/// Writes the tables and their plots into docs/performance.md and docs/perf/.
fn write_docs(tables: &[Table], runs: usize, timeout: Duration) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = format!(
        "{}. {runs} runs per cell after a warm-up, launchers taking turns in a new random \
         order each run; a launcher that fails or passes {} s is not run again for larger N. \
         Quiet: the runs that started after a quarter-second at least 90 % idle (each waits \
         up to {} s for one). Load: the 1-minute load average before the row.\n\n",
        machine(),
        timeout.as_secs(),
        quiet_wait().as_secs(),
    );
    for t in tables {
        let _ = writeln!(out, "#### {}\n\n{}", t.title, t.text);
        let png = format!("perf/launchers-{}.png", t.slug);
        let series: Vec<(String, Vec<(f64, f64)>)> = t
            .series
            .iter()
            .map(|(n, p)| (n.clone(), p.iter().map(|&(x, y)| (x as f64, y)).collect()))
            .collect();
        if plot(
            &root.join("docs").join(&png),
            &t.title,
            t.xlabel,
            "whole job, median (s)",
            &series,
        ) {
            let _ = writeln!(out, "![{}]({png})\n", t.title);
        }
    }
    write_generated(
        "performance.md",
        "launchers",
        "## Comparison with Hydra and Open MPI (generated)",
        &out,
    );
}

fn main() {
    let runs: usize = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(5);
    let timeout = Duration::from_secs(opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(60));
    let workloads =
        opt("--workloads").unwrap_or_else(|| "hello,pmi,allgather,first,hosts,mpich-hosts".into());
    let bins = build();
    let mut tables = Vec::new();
    for w in workloads.split(',') {
        match w {
            "hello" => match hello(&bins, runs, timeout) {
                Some(t) => tables.push(t),
                None => {
                    println!("hello: mpicc.mpich cannot build contrib/examples/hello.c; skipped")
                }
            },
            "pmi" => {
                for p in list("--pmi", &[1, 2]) {
                    tables.push(pmi(&bins, p as u8, &LIGHT, runs, timeout));
                }
            }
            "allgather" => {
                for p in list("--pmi", &[1, 2]) {
                    tables.push(pmi(&bins, p as u8, &ALLGATHER, runs, timeout));
                }
            }
            "first" => tables.push(first(&bins, timeout)),
            "hosts" => tables.push(hosts(&bins, runs, timeout)),
            "mpich-hosts" => match mpich_hosts(&bins, runs, timeout) {
                Some(t) => tables.push(t),
                None => println!(
                    "mpich-hosts: mpicc.mpich cannot build contrib/examples/hello.c; skipped"
                ),
            },
            other => println!(
                "unknown workload {other:?} (hello, pmi, allgather, first, hosts, mpich-hosts)"
            ),
        }
    }
    if std::env::args().any(|a| a == "--write-docs") {
        write_docs(&tables, runs, timeout);
    }
}
