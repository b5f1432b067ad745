//! `--profile`: the startup profile at exit. Only its presence and shape are checked, never a
//! time.

mod common;

use common::{kauri, stderr, KAURI};
use std::path::Path;

/// A minimal PMI-1 rank: init, put one 64-byte value, fence, finalize.
const PMI1_RANK: &str = r#"
import os
fd = int(os.environ["PMI_FD"])
rank = os.environ["PMI_RANK"]
def ask(line):
    os.write(fd, (line + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            raise SystemExit("PMI socket closed")
        buf += chunk
    return buf.decode()
ask("cmd=init pmi_version=1 pmi_subversion=1")
kvs = ask("cmd=get_my_kvsname").split("kvsname=")[1].split()[0]
ask("cmd=put kvsname=%s key=k%s value=%s" % (kvs, rank, "x" * 64))
ask("cmd=barrier_in")
ask("cmd=finalize")
"#;

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
    assert!(o.status.success());
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
