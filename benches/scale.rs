//! Scale past what one machine runs as processes: wire-up time and fence latency against host
//! count, for tree widths 2, 8, 32 and flat.
//!
//! * In process (default): H virtual agents with R virtual ranks each, each agent and the
//!   root a real `kauri::tree::branch::Branch` (the tree node kauri runs), linked over loopback TCP
//!   with kauri's real link framing, in its tree shape, committing into its store
//!   (`common::sim`). Wire-up here is connecting every link of the tree (no launches); a
//!   fence is every agent's ranks entering at once until every agent has committed the
//!   merged delta. H = 64, 256, 1,024, 2,048 by default. Two numbers per fence: its real
//!   time on this one thread (the tree's total work), and its modelled latency: the same
//!   work replayed as if every agent had a CPU of its own and links were a network of
//!   `--hop-us` µs (default 25) and `--gbps` Gbit/s (default 10) (see `common::sim`).
//! * Real processes (`--real`): `kauri -launcher fork` with H simulated hosts, one `kauri agent`
//!   process and `--ppn` ranks each (`pmi-load`: 3 rounds of one 64-byte put, a fence and 2
//!   gets), read through `--profile=json`: wire-up = the last agent connected and the last
//!   rank's PMI init; fence = the median of the job's fences as the profile measured them.
//!
//! ```text
//! cargo bench --bench scale                                         # in process
//! cargo bench --bench scale -- --hosts 256,1024 --ranks 16 --fences 9
//! cargo bench --bench scale -- --keys 0            # fences that carry nothing (a barrier)
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

/// The modelled network of the in-process run (see `common::sim`).
#[derive(Clone, Copy)]
struct NetModel {
    hop_us: f64,
    gbps: f64,
}

fn in_process(
    hosts: &[usize],
    widths: &[usize],
    ranks: usize,
    fences: usize,
    keys: usize,
    net: NetModel,
) -> (String, Series, Series) {
    let mut text = "| hosts | ranks | width | wire-up ms | fence work, one thread, median (min-max) ms | modelled fence latency, median (min-max) ms | merged delta | load |\n\
                    |---:|---:|---|---:|---|---|---:|---:|\n"
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
                keys,
                vsize: 64,
                commit: true,
                hop_us: net.hop_us,
                pmix: false,
                model: true,
                gbps: net.gbps,
            };
            let line = local.block_on(&rt, async {
                let mut t = match sim::start(shape).await {
                    Ok(t) => t,
                    Err(e) => return format!("| {h} | {} | {} | failed: {e} | - | - | - | {load} |\n", h * ranks, width_name(w)),
                };
                let _ = t.fence().await; // warm-up
                let (mut v, mut lat): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
                for _ in 0..fences {
                    v.push(t.fence().await.as_secs_f64() * 1e3);
                    lat.push(t.modelled.as_secs_f64() * 1e3);
                }
                let wire_ms = t.wireup.as_secs_f64() * 1e3;
                let range = |v: &[f64]| {
                    let lo = v.iter().cloned().fold(f64::MAX, f64::min);
                    let hi = v.iter().cloned().fold(f64::MIN, f64::max);
                    (lo, hi)
                };
                let (lo, hi) = range(&v);
                let (llo, lhi) = range(&lat);
                let m = median(&mut v);
                let lm = median(&mut lat);
                wire[i].1.push((h as f64, wire_ms));
                fence[i].1.push((h as f64, lm));
                let bytes = h * ranks * keys * (64 + format!("h{h}r{ranks}k0").len());
                format!(
                    "| {h} | {} | {} | {wire_ms:.1} | {m:.2} ({lo:.2}-{hi:.2}) | {lm:.3} ({llo:.3}-{lhi:.3}) | {:.1} KiB | {load} |\n",
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
        (t, w, f, "real".to_string())
    } else {
        let hosts = list("--hosts", &[64, 256, 1024, 2048]);
        let ranks = opt("--ranks").and_then(|v| v.parse().ok()).unwrap_or(4);
        let fences = opt("--fences").and_then(|v| v.parse().ok()).unwrap_or(5);
        let net = NetModel {
            hop_us: opt("--hop-us").and_then(|v| v.parse().ok()).unwrap_or(25.0),
            gbps: opt("--gbps").and_then(|v| v.parse().ok()).unwrap_or(10.0),
        };
        let keys = opt("--keys").and_then(|v| v.parse().ok()).unwrap_or(1);
        let (t, w, f) = in_process(&hosts, &widths, ranks, fences, keys, net);
        let t = format!(
            "{keys} key(s) of 64 bytes per virtual rank per fence. Modelled network: {} µs per \
             hop, {} Gbit/s per link.\n\n{t}",
            net.hop_us, net.gbps
        );
        let what = if keys == 1 {
            "inproc".to_string()
        } else {
            format!("inproc-keys{keys}")
        };
        (t, w, f, what)
    };
    if std::env::args().any(|a| a == "--write-docs") {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut body = format!("{}. \n\n{text}\n", machine());
        let fpng = format!("perf/scale-{what}-fence.png");
        let wpng = format!("perf/scale-{what}-wireup.png");
        let title = if is_real {
            "fork-launched agents".to_string()
        } else if what == "inproc" {
            "agents in one process".to_string()
        } else {
            format!("agents in one process, {what}")
        };
        let (fl, wl) = if is_real {
            ("fence, median (ms)", "last PMI init (ms)")
        } else {
            (
                "modelled fence latency, median (ms)",
                "all links connected (ms)",
            )
        };
        for (png, alt, ylabel, series) in [
            (&fpng, "fence latency", fl, &fence),
            (&wpng, "wire-up", wl, &wire),
        ] {
            let t = format!("{alt}, {title}");
            if plot(&root.join("docs").join(png), &t, "hosts", ylabel, series) {
                let _ = writeln!(body, "![{alt}]({png})\n");
            }
        }
        write_generated("scale.md", &what, &format!("## {title} (generated)"), &body);
    }
}
