//! `pmi-load`: a rank program that exercises a PMI server through [`pmi_wire::client`].
//!
//! Each round every rank puts `--keys` keys of `--vsize` bytes, fences, and reads `--gets`
//! keys of its peers (the next ranks, cyclically; `all` for every other rank), checking each
//! value. It also reads `PMI_process_mapping` and the universe size once. Rank 0 prints one
//! summary line (with `fence_us`, the median time of its fences after the first); any mismatch
//! makes the rank print what it saw and exit 1.
//!
//! ```text
//! pmi-load [--pmi 1|2] [--keys K] [--vsize V] [--gets G|all] [--rounds R] [--quiet]
//! ```
//! Used by the integration tests (under `mpiexec.hydra` and `kauri`) and by the benchmarks.

use pmi_wire::client::Client;
use pmi_wire::Version;
use std::process::ExitCode;

struct Opts {
    version: Version,
    keys: usize,
    vsize: usize,
    gets: Option<usize>,
    rounds: usize,
    quiet: bool,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        version: Version::V1,
        keys: 1,
        vsize: 64,
        gets: None,
        rounds: 1,
        quiet: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|_| format!("bad number {v:?}"));
        match a.as_str() {
            "--pmi" => {
                o.version = match val("--pmi")?.as_str() {
                    "1" => Version::V1,
                    "2" => Version::V2,
                    v => return Err(format!("--pmi takes 1 or 2, not {v:?}")),
                }
            }
            "--keys" => o.keys = num(val("--keys")?)?,
            "--vsize" => o.vsize = num(val("--vsize")?)?,
            "--rounds" => o.rounds = num(val("--rounds")?)?,
            "--gets" => {
                let v = val("--gets")?;
                o.gets = if v == "all" { None } else { Some(num(v)?) };
            }
            "--quiet" => o.quiet = true,
            "-h" | "--help" => {
                return Err("usage: pmi-load [--pmi 1|2] [--keys K] [--vsize V] \
                            [--gets G|all] [--rounds R] [--quiet]"
                    .into())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// The value rank `rank` puts under key number `i` in round `r`: `vsize` bytes that differ for
/// every (round, rank, key), so a wrong answer cannot pass for a right one.
fn value_of(r: usize, rank: i64, i: usize, vsize: usize) -> String {
    let seed = format!("{r}.{rank}.{i}:");
    seed.chars().cycle().take(vsize).collect()
}

fn run(o: &Opts) -> Result<String, String> {
    let mut pmi = Client::from_env(o.version).map_err(|e| format!("init: {e}"))?;
    let (rank, size) = (pmi.rank(), pmi.size());
    let mapping = pmi
        .job_attr("PMI_process_mapping")
        .map_err(|e| format!("PMI_process_mapping: {e}"))?
        .ok_or("PMI_process_mapping is missing")?;
    let universe = pmi.universe_size().map_err(|e| format!("universe: {e}"))?;
    let peers = o.gets.unwrap_or(size.max(1) as usize - 1);
    let mut checked = 0usize;
    let mut fences = Vec::with_capacity(o.rounds);
    for r in 0..o.rounds {
        for i in 0..o.keys {
            pmi.put(&format!("k{r}-{rank}-{i}"), &value_of(r, rank, i, o.vsize))
                .map_err(|e| format!("put: {e}"))?;
        }
        let t = std::time::Instant::now();
        pmi.fence().map_err(|e| format!("fence: {e}"))?;
        fences.push(t.elapsed().as_micros());
        for p in 1..=peers {
            let peer = (rank + p as i64) % size;
            for i in 0..o.keys {
                let key = format!("k{r}-{peer}-{i}");
                let want = value_of(r, peer, i, o.vsize);
                match pmi.get(&key).map_err(|e| format!("get {key}: {e}"))? {
                    Some(v) if v == want => checked += 1,
                    Some(v) => return Err(format!("get {key}: wrong value {v:?}")),
                    None => return Err(format!("get {key}: not found")),
                }
            }
        }
    }
    let kvsname = pmi.kvsname().to_string();
    pmi.finalize().map_err(|e| format!("finalize: {e}"))?;
    fences.sort_unstable();
    // The first fence includes waiting for the slowest rank to start; later ones are the
    // fence's own cost.
    let later = if fences.len() > 1 {
        &fences[1..]
    } else {
        &fences[..]
    };
    let median = later.get(later.len() / 2).copied().unwrap_or(0);
    Ok(format!(
        "pmi-load: ok rank={rank} size={size} kvsname={kvsname} universe={universe} \
         mapping={mapping} checked={checked} fence_us={median}"
    ))
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pmi-load: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(line) => {
            if !o.quiet || line.contains("rank=0 ") {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "pmi-load: rank {}: {e}",
                std::env::var("PMI_RANK").unwrap_or_default()
            );
            ExitCode::FAILURE
        }
    }
}
