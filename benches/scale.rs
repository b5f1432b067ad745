//! Scale past what one machine runs as processes: wire-up time and fence latency against host
//! count, for tree widths 2, 8, 32 and flat.
//!
//! * In process (default): H virtual agents with R virtual ranks each, linked over loopback
//!   TCP with kauri's real link framing, tree shape, fence gather and store
//!   (`common::sim`). Wire-up here is connecting every link of the tree (no launches); a
//!   fence is every agent's ranks entering at once until every agent has committed the
//!   merged delta. H = 64, 256, 1,024, 2,048 by default.
//! * Real processes (`--real`): `kauri -launcher fork` with H simulated hosts, one `kauri agent`
//!   process and `--ppn` ranks each (`pmi-load`: 3 rounds of one 64-byte put, a fence and 2
//!   gets), read through `--profile=json`: wire-up = the last agent connected and the last
//!   rank's PMI init; fence = the median of the job's fences as the profile measured them.
//!
//! ```text
//! cargo bench --bench scale                                         # in process
//! cargo bench --bench scale -- --hosts 256,1024 --ranks 16 --fences 9
//! cargo bench --bench scale -- --real --hosts 64,256,1024 --ppn 1
//! cargo bench --bench scale -- --write-docs                         # docs/scale.md + plots
//! ```

mod common;

use common::sim::{self, Shape};
use common::{build, load_avg, machine, median, opt, plot, write_generated};
use std::fmt::Write as _;
use std::path::Path;

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    opt(name).map_or(default.to_vec(), |v| {
        v.split(',').filter_map(|x| x.parse().ok()).collect()
    })
}

fn width_name(w: usize) -> String {
    if w == 0 {
        "flat".into()
    } else {
        w.to_string()
    }
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Results per width: (hosts, wire-up ms, fence median ms).
type Series = Vec<(String, Vec<(f64, f64)>)>;

fn in_process(
    hosts: &[usize],
    widths: &[usize],
    ranks: usize,
    fences: usize,
) -> (String, Series, Series) {
    let mut text = "| hosts | ranks | width | wire-up ms | fence median (min-max) ms | merged delta | load |\n\
                    |---:|---:|---|---:|---|---:|---:|\n"
        .to_string();
    let (mut wire, mut fence): (Series, Series) = (Vec::new(), Vec::new());
    for &w in widths {
        wire.push((format!("width {}", width_name(w)), Vec::new()));
        fence.push((format!("width {}", width_name(w)), Vec::new()));
    }
    for &h in hosts {
        for (i, &w) in widths.iter().enumerate() {
            let load = load_avg();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let local = tokio::task::LocalSet::new();
            let shape = Shape {
                hosts: h,
                width: w,
                ranks,
                keys: 1,
                vsize: 64,
                commit: true,
            };
            let line = local.block_on(&rt, async {
                let mut t = match sim::start(shape).await {
                    Ok(t) => t,
                    Err(e) => return format!("| {h} | {} | {} | failed: {e} | - | - | {load} |\n", h * ranks, width_name(w)),
                };
                let _ = t.fence().await; // warm-up
                let mut v: Vec<f64> = Vec::new();
                for _ in 0..fences {
                    v.push(t.fence().await.as_secs_f64() * 1e3);
                }
                let wire_ms = t.wireup.as_secs_f64() * 1e3;
                let m = median(&mut v);
                let lo = v.iter().cloned().fold(f64::MAX, f64::min);
                let hi = v.iter().cloned().fold(f64::MIN, f64::max);
                wire[i].1.push((h as f64, wire_ms));
                fence[i].1.push((h as f64, m));
                let bytes = h * ranks * (64 + format!("h{h}r{ranks}k0").len());
                format!(
                    "| {h} | {} | {} | {wire_ms:.1} | {m:.2} ({lo:.2}-{hi:.2}) | {:.1} KiB | {load} |\n",
                    h * ranks,
                    width_name(w),
                    bytes as f64 / 1024.0
                )
            });
            print!("{line}");
            text.push_str(&line);
        }
    }
    (text, wire, fence)
}

fn profile_ms(v: &serde_json::Value, phase: &str) -> Vec<f64> {
    v["kauri_profile"]["phases"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["phase"] == phase)
                .filter_map(|p| {
                    p["end_ms"]
                        .as_f64()
                        .map(|e| (e, p["ms"].as_f64().unwrap_or(0.0)))
                })
                .map(|(e, ms)| if phase == "fence" { ms } else { e })
                .collect()
        })
        .unwrap_or_default()
}

fn real(hosts: &[usize], widths: &[usize], ppn: usize) -> (String, Series, Series) {
    let bins = build();
    let mut text = "| hosts | ranks | width | agents connected ms | PMI init done ms | fence median ms | whole job s | load |\n\
                    |---:|---:|---|---:|---:|---:|---:|---:|\n"
        .to_string();
    let (mut wire, mut fence): (Series, Series) = (Vec::new(), Vec::new());
    for &w in widths {
        wire.push((format!("width {}", width_name(w)), Vec::new()));
        fence.push((format!("width {}", width_name(w)), Vec::new()));
    }
    for &h in hosts {
        for (i, &w) in widths.iter().enumerate() {
            let load = load_avg();
            let names: Vec<String> = (1..=h).map(|i| format!("h{i}")).collect();
            let mut argv: Vec<String> = [
                bins.kauri.display().to_string(),
                "--profile=json".into(),
                "-launcher".into(),
                "fork".into(),
                "-tree-width".into(),
                width_name(w),
                "-hosts".into(),
                names.join(","),
                "-ppn".into(),
                ppn.to_string(),
                "-n".into(),
                (h * ppn).to_string(),
                bins.load.display().to_string(),
            ]
            .into();
            argv.extend(
                [
                    "--pmi", "1", "--keys", "1", "--vsize", "64", "--rounds", "3", "--gets", "2",
                    "--quiet",
                ]
                .map(String::from),
            );
            let line = match run_profiled(&argv) {
                Ok((secs, v)) => {
                    let agents = profile_ms(&v, "agents").into_iter().fold(0.0, f64::max);
                    let init = profile_ms(&v, "pmi_init").into_iter().fold(0.0, f64::max);
                    let mut f = profile_ms(&v, "fence");
                    let fm = if f.is_empty() { 0.0 } else { median(&mut f) };
                    wire[i].1.push((h as f64, init));
                    fence[i].1.push((h as f64, fm.max(0.001)));
                    format!(
                        "| {h} | {} | {} | {agents:.1} | {init:.1} | {fm:.2} | {secs:.2} | {load} |\n",
                        h * ppn,
                        width_name(w)
                    )
                }
                Err(e) => format!(
                    "| {h} | {} | {} | {e} | - | - | - | {load} |\n",
                    h * ppn,
                    width_name(w)
                ),
            };
            print!("{line}");
            text.push_str(&line);
        }
    }
    (text, wire, fence)
}

/// Runs kauri with `--profile=json`; its wall time and the profile.
fn run_profiled(argv: &[String]) -> Result<(f64, serde_json::Value), String> {
    let start = std::time::Instant::now();
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("failed ({})", out.status));
    }
    let line = err
        .lines()
        .find(|l| l.starts_with("{\"kauri_profile\""))
        .ok_or("no profile")?;
    serde_json::from_str(line)
        .map(|v| (secs, v))
        .map_err(|e| e.to_string())
}

fn main() {
    raise_fd_limit();
    let is_real = std::env::args().any(|a| a == "--real");
    let widths = list("--widths", &[2, 8, 32, 0]);
    let (text, wire, fence, what) = if is_real {
        let hosts = list("--hosts", &[64, 256, 1024]);
        let ppn = opt("--ppn").and_then(|v| v.parse().ok()).unwrap_or(1);
        let (t, w, f) = real(&hosts, &widths, ppn);
        (t, w, f, "real")
    } else {
        let hosts = list("--hosts", &[64, 256, 1024, 2048]);
        let ranks = opt("--ranks").and_then(|v| v.parse().ok()).unwrap_or(4);
        let fences = opt("--fences").and_then(|v| v.parse().ok()).unwrap_or(5);
        let (t, w, f) = in_process(&hosts, &widths, ranks, fences);
        (t, w, f, "inproc")
    };
    if std::env::args().any(|a| a == "--write-docs") {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut body = format!("{}. \n\n{text}\n", machine());
        let fpng = format!("perf/scale-{what}-fence.png");
        let wpng = format!("perf/scale-{what}-wireup.png");
        let title = if is_real {
            "fork-launched agents"
        } else {
            "agents in one process"
        };
        if plot(
            &root.join("docs").join(&fpng),
            &format!("fence latency, {title}"),
            "hosts",
            "fence, median (ms)",
            &fence,
        ) {
            let _ = writeln!(body, "![fence latency]({fpng})\n");
        }
        let wl = if is_real {
            "last PMI init (ms)"
        } else {
            "all links connected (ms)"
        };
        if plot(
            &root.join("docs").join(&wpng),
            &format!("wire-up, {title}"),
            "hosts",
            wl,
            &wire,
        ) {
            let _ = writeln!(body, "![wire-up]({wpng})\n");
        }
        write_generated("scale.md", what, &format!("## {title} (generated)"), &body);
    }
}
