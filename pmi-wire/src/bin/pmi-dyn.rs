//! `pmi-dyn`: a rank program for the dynamic-process parts of PMI (spawn, the name service),
//! through [`pmi_wire::client`], in either protocol. Used by kauri's tests, which can then check
//! the process manager's side without an MPI library.
//!
//! ```text
//! Options: `--pmi 1|2` first; `--rank R` (anywhere after it) makes rank R act instead of 0.
//!
//! pmi-dyn [--pmi 1|2] spawn N [KEY=VALUE ...] [-- CMD2 N2 ...]
//!     rank 0 spawns N copies of this program (one job; with `--`, a second command too),
//!     info KEY=VALUE pairs attached to the first command, and the preput
//!     PARENT_ROOT_PORT_NAME=port-of-<kvsname>; prints `spawned jobid=<id>` or
//!     `spawn failed: <why>`. Every rank then fences and finalizes.
//! pmi-dyn [--pmi 1|2] nest DEPTH
//!     rank 0 spawns one copy that nests DEPTH-1 levels further.
//! pmi-dyn [--pmi 1|2] orphan N
//!     rank 0 spawns N copies that print their line and then sleep without end, in no PMI
//!     call, while their parents fence, finalize and exit (children waiting for parents
//!     that are gone).
//! pmi-dyn [--pmi 1|2] publish NAME PORT [SECONDS]
//!     rank 0 publishes, waits SECONDS (default 0), unpublishes.
//! pmi-dyn [--pmi 1|2] lookup NAME [--wait SECONDS]
//!     rank 0 looks NAME up (retrying until SECONDS have passed) and prints
//!     `found NAME=PORT` or `lookup failed: NAME`.
//! ```
//! A spawned copy prints `child rank=R size=S appnum=A spawned=1 parent=<preput value>
//! cwd=<dir> host=<KAURI_HOST>`, fences, and exits; with `nest` it spawns further first.

use pmi_wire::client::Client;
use pmi_wire::{Spawn, SpawnCommand, Version};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pmi-dyn: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut version = Version::V1;
    if args.first().map(String::as_str) == Some("--pmi") {
        version = match args.get(1).map(String::as_str) {
            Some("1") => Version::V1,
            Some("2") => Version::V2,
            v => return Err(format!("--pmi takes 1 or 2, not {v:?}")),
        };
        args.drain(..2);
    }
    // The rank that acts (`--rank R` anywhere after the protocol; default 0).
    let mut actor = 0i64;
    if let Some(p) = args.iter().position(|a| a == "--rank") {
        actor = args
            .get(p + 1)
            .and_then(|v| v.parse().ok())
            .ok_or("--rank R: R is a number")?;
        args.drain(p..p + 2);
    }
    let e = |x: pmi_wire::client::ClientError| x.to_string();
    let mut c = Client::from_env(version).map_err(e)?;
    let me = std::env::current_exe().map_err(|x| x.to_string())?;
    let me = me.display().to_string();
    let pmi = if version == Version::V1 { "1" } else { "2" };
    if c.spawned() || std::env::var("PMI_SPAWNED").is_ok_and(|v| v == "1") {
        let parent = c
            .get("PARENT_ROOT_PORT_NAME")
            .map_err(e)?
            .unwrap_or_else(|| "<none>".into());
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let host = std::env::var("KAURI_HOST").unwrap_or_default();
        println!(
            "child rank={} size={} appnum={} spawned=1 parent={parent} cwd={cwd} host={host}",
            c.rank(),
            c.size(),
            c.appnum()
        );
    }
    let cmd = args.first().cloned().unwrap_or_default();
    let mut status = 0u8;
    match cmd.as_str() {
        "sleep-alone" => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        "spawn" | "nest" | "orphan" if c.rank() == actor => {
            let n: u32 = args
                .get(1)
                .and_then(|v| v.parse().ok())
                .ok_or("spawn N: N is a number")?;
            let mut commands = Vec::new();
            let (first, second) = match args.iter().position(|a| a == "--") {
                Some(p) => (&args[2..p], Some(&args[p + 1..])),
                None => (&args[2..], None),
            };
            let child_args = if cmd == "nest" {
                if n <= 1 {
                    vec![]
                } else {
                    vec![
                        "--pmi".into(),
                        pmi.into(),
                        "nest".into(),
                        (n - 1).to_string(),
                    ]
                }
            } else if cmd == "orphan" {
                vec!["--pmi".into(), pmi.into(), "sleep-alone".into()]
            } else {
                vec!["--pmi".into(), pmi.into()]
            };
            commands.push(SpawnCommand {
                execname: me.clone(),
                nprocs: if cmd == "nest" { 1 } else { n },
                args: child_args.clone(),
                info: first
                    .iter()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
            if let Some(s) = second {
                let prog = s.first().ok_or("-- needs a program")?;
                let n2: u32 = s
                    .get(1)
                    .and_then(|v| v.parse().ok())
                    .ok_or("-- PROG N: N is a number")?;
                commands.push(SpawnCommand {
                    execname: if prog == "self" {
                        me.clone()
                    } else {
                        prog.clone()
                    },
                    nprocs: n2,
                    args: child_args,
                    info: Vec::new(),
                });
            }
            let spawn = Spawn {
                commands,
                preput: vec![(
                    "PARENT_ROOT_PORT_NAME".into(),
                    format!("port-of-{}", c.kvsname()),
                )],
            };
            match c.spawn(&spawn) {
                Ok(s) => println!(
                    "spawned jobid={}",
                    s.jobid.unwrap_or_else(|| "<not given>".into())
                ),
                Err(x) => {
                    println!("spawn failed: {x}");
                    status = 3;
                }
            }
        }
        "publish" if c.rank() == actor => {
            let (name, port) = (
                args.get(1).ok_or("publish NAME PORT")?,
                args.get(2).ok_or("publish NAME PORT")?,
            );
            let secs: f64 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            match c.publish(name, port) {
                Ok(()) => println!("published {name}"),
                Err(x) => {
                    println!("publish failed: {x}");
                    status = 3;
                }
            }
            std::thread::sleep(Duration::from_secs_f64(secs));
            if status == 0 {
                c.unpublish(name).map_err(e)?;
                println!("unpublished {name}");
                if c.unpublish(name).is_ok() {
                    println!("a second unpublish of {name} succeeded");
                    status = 4;
                }
            }
        }
        "lookup" if c.rank() == actor => {
            let name = args.get(1).ok_or("lookup NAME")?;
            let wait: f64 = match args.get(2).map(String::as_str) {
                Some("--wait") => args.get(3).and_then(|v| v.parse().ok()).unwrap_or(0.0),
                _ => 0.0,
            };
            let until = Instant::now() + Duration::from_secs_f64(wait);
            loop {
                match c.lookup(name).map_err(e)? {
                    Some(p) => {
                        println!("found {name}={p}");
                        break;
                    }
                    None if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    None => {
                        println!("lookup failed: {name}");
                        status = 3;
                        break;
                    }
                }
            }
        }
        _ => {}
    }
    c.fence().map_err(e)?;
    c.finalize().map_err(e)?;
    Ok(ExitCode::from(status))
}
