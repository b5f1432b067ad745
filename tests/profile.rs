//! `--profile`: the startup profile at exit. Only its presence and shape are checked, never a
//! time.

mod common;

use common::{kauri, stderr, KAURI, PMI1_RANK};
use std::path::Path;

/// PATH with kauri's directory first, so ranks can run `kauri kvs`.
fn path() -> String {
    let dir = Path::new(KAURI).parent().unwrap().display().to_string();
    format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
}

fn json_line(err: &str) -> serde_json::Value {
    let line = err
        .lines()
        .find(|l| l.starts_with("{\"kauri_profile\""))
        .unwrap_or_else(|| panic!("no JSON profile line in: {err}"));
    serde_json::from_str(line).expect("the profile line is JSON")
}

#[test]
fn the_profile_table_lists_the_phases_of_a_one_host_job() {
    let p = path();
    let o = kauri(
        &[
            "--profile",
            "-n",
            "2",
            "sh",
            "-c",
            "kauri kvs fence && echo done",
        ],
        None,
        &[("PATH", &p)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("kauri profile: 2 ranks on 1 hosts"),
        "{err}"
    );
    for phase in [
        "ranks forked",
        "PMI init",
        "fence 0",
        "ranks exited",
        "teardown",
        "total",
    ] {
        assert!(
            err.lines().any(|l| l.starts_with(phase)),
            "{phase} missing: {err}"
        );
    }
    // The ranks' own output is untouched.
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\ndone\n");
}

#[test]
fn kauri_profile_in_the_environment_does_the_same() {
    let o = kauri(&["-n", "1", "true"], None, &[("KAURI_PROFILE", "1")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("kauri profile: 1 ranks"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn json_profile_of_a_tree_has_every_level_and_the_fence_bytes() {
    // Four simulated hosts in a binary tree: two agents on level 1, one on level 2 under
    // the first. Each rank puts one 64-byte value under a two-byte key.
    let o = kauri(
        &[
            "--profile=json",
            "-launcher",
            "fork",
            "-tree-width",
            "2",
            "-hosts",
            "h1,h2,h3",
            "-n",
            "3",
            "python3",
            "-c",
            PMI1_RANK,
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_line(&stderr(&o));
    let p = &v["kauri_profile"];
    assert_eq!(p["ranks"], 3);
    assert_eq!(p["hosts"], 3);
    assert_eq!(p["tree"], "2");
    let phases = p["phases"].as_array().unwrap();
    let named = |name: &str| -> Vec<&serde_json::Value> {
        phases.iter().filter(|x| x["phase"] == name).collect()
    };
    let agents = named("agents");
    assert_eq!(agents.len(), 2, "{phases:?}");
    assert_eq!(
        (agents[0]["index"].clone(), agents[0]["count"].clone()),
        (1.into(), 2.into())
    );
    assert_eq!(
        (agents[1]["index"].clone(), agents[1]["count"].clone()),
        (2.into(), 1.into())
    );
    let fences = named("fence");
    assert_eq!(fences.len(), 1, "{phases:?}");
    assert_eq!(fences[0]["keys"], 3);
    assert_eq!(fences[0]["bytes"], 3 * (2 + 64));
    for name in ["fork", "pmi_init", "finalize", "exit", "teardown", "total"] {
        let row = named(name);
        assert_eq!(row.len(), 1, "{name}: {phases:?}");
        let (s, e) = (
            row[0]["start_ms"].as_f64().unwrap(),
            row[0]["end_ms"].as_f64().unwrap(),
        );
        assert!(e >= s, "{name} ends before it starts: {phases:?}");
    }
    let hosts = p["per_host"].as_array().unwrap();
    let names: Vec<&str> = hosts.iter().map(|h| h["host"].as_str().unwrap()).collect();
    assert_eq!(names[1..], ["h1", "h2", "h3"]);
    assert_eq!(hosts[3]["level"], 2);
}

#[test]
fn without_the_flag_nothing_extra_is_printed() {
    let o = kauri(&["-n", "2", "true"], None, &[("KAURI_PROFILE", "0")]);
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert_eq!(stderr(&o), "");
    let o = kauri(
        &["-launcher", "fork", "-hosts", "h1,h2", "-n", "2", "true"],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
}

#[test]
fn the_cost_model_tree_places_hosts_by_launch_cost() {
    // A launch that is all serial work gives a binomial tree: h1 and h2 under kauri, h3
    // under h1 (it comes up while kauri is still busy launching h2).
    let run = |cost: Option<&str>| {
        let mut env = vec![];
        if let Some(c) = cost {
            env.push(("KAURI_LAUNCH_COST", c));
        }
        let o = kauri(
            &[
                "--profile=json",
                "-launcher",
                "fork",
                "-tree-width",
                "cost",
                "-hosts",
                "h1,h2,h3",
                "-n",
                "3",
                "python3",
                "-c",
                PMI1_RANK,
            ],
            None,
            &env,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        json_line(&stderr(&o))
    };
    let v = run(Some("10,10"));
    let p = &v["kauri_profile"];
    assert!(p["tree"].as_str().unwrap().starts_with("cost"), "{p}");
    let levels: Vec<i64> = p["per_host"].as_array().unwrap()[1..]
        .iter()
        .map(|h| h["level"].as_i64().unwrap())
        .collect();
    assert_eq!(levels, [1, 1, 2]);
    // Measured at start (one `kauri --version`): whatever the shape, the job runs.
    let v = run(None);
    assert_eq!(
        v["kauri_profile"]["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["phase"] == "fence")
            .count(),
        1
    );
}

/// `--profile=trace` writes the timeline as Chrome trace events into `kauri-PID.trace.json`
/// in kauri's directory, and says where: every event has the format's fields, every host
/// (the front end and three simulated, in a tree of width 2) has a track named for it, and
/// every slice lies within its host's slice, on a thread where no two slices overlap.
#[test]
fn the_trace_profile_is_chrome_trace_events_one_track_per_host() {
    let dir = std::env::temp_dir().join(format!("kauri-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let o = common::run_under_watchdog(
        std::process::Command::new(KAURI)
            .args([
                "--profile=trace",
                "-launcher",
                "fork",
                "-tree-width",
                "2",
                "-hosts",
                "h1,h2,h3",
                "-n",
                "3",
                "python3",
                "-c",
                PMI1_RANK,
            ])
            .current_dir(&dir),
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("kauri-") && name.ends_with(".trace.json"),
        "{name}"
    );
    assert!(
        err.contains(&format!("kauri: start-up trace in {name} (open it in")),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut tracks = std::collections::BTreeMap::new();
    let mut slices: Vec<(u64, u64, u64, u64, String)> = Vec::new();
    for e in events {
        assert!(
            e["name"].is_string() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
        match e["ph"].as_str() {
            Some("M") => {
                if e["name"] == "process_name" {
                    let n = e["args"]["name"].as_str().unwrap().to_string();
                    tracks.insert(e["pid"].as_u64().unwrap(), n);
                }
            }
            Some("X") => {
                let (ts, dur) = (e["ts"].as_u64(), e["dur"].as_u64());
                assert!(ts.is_some() && dur.is_some(), "{e}");
                slices.push((
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    ts.unwrap(),
                    ts.unwrap() + dur.unwrap(),
                    e["name"].as_str().unwrap().to_string(),
                ));
            }
            other => panic!("event phase {other:?}: {e}"),
        }
    }
    // The front end and the three simulated hosts.
    assert_eq!(tracks.len(), 4, "{tracks:?}");
    for h in ["h1", "h2", "h3"] {
        assert!(
            tracks
                .values()
                .any(|n| n.starts_with(&format!("{h} (agent "))),
            "{tracks:?}"
        );
    }
    for (pid, name) in &tracks {
        let host: Vec<_> = slices.iter().filter(|s| s.0 == *pid && s.1 == 0).collect();
        assert_eq!(host.len(), 1, "{name}: one host slice");
        let (a, b) = (host[0].2, host[0].3);
        let mut on: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
        for s in slices.iter().filter(|s| s.0 == *pid && s.1 != 0) {
            assert!(a <= s.2 && s.3 <= b, "{name}: {} outside its host", s.4);
            on.entry(s.1).or_default().push((s.2, s.3));
        }
        for spans in on.values_mut() {
            spans.sort();
            for w in spans.windows(2) {
                assert!(w[0].1 <= w[1].0, "{name}: overlapping slices {w:?}");
            }
        }
    }
    // Each simulated host launched its agent and ran a fence.
    for (pid, name) in tracks.iter().filter(|(_, n)| n.starts_with('h')) {
        let mine: Vec<&str> = slices
            .iter()
            .filter(|s| s.0 == *pid)
            .map(|s| s.4.as_str())
            .collect();
        assert!(
            mine.contains(&"agent launched") && mine.contains(&"fence 0"),
            "{name}: {mine:?}"
        );
    }
}
