//! `kauri --version` (version, git commit, build date) and `kauri -info [--json]`.

use std::process::Command;

const KAURI: &str = env!("CARGO_BIN_EXE_kauri");

fn run(args: &[&str]) -> String {
    let o = Command::new(KAURI).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let v = run(&["--version"]);
    assert!(
        v.starts_with(&format!("kauri {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    assert_eq!(v, run(&["-V"]));
    // Built from this checkout: the commit is HEAD's (unless KAURI_GIT_COMMIT overrode it).
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match (option_env!("KAURI_GIT_COMMIT"), head) {
        (Some(c), _) if !c.is_empty() => assert!(v.contains(&format!("commit {c},")), "{v}"),
        (_, Some(h)) => assert!(v.contains(&format!("commit {h},")), "{v} (HEAD {h})"),
        _ => assert!(v.contains("commit unknown,"), "{v}"),
    }
    let date = v
        .trim_end()
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .unwrap();
    let parts: Vec<&str> = date.split('-').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        "{v}"
    );
}

#[test]
fn info_prints_what_kauri_serves() {
    let t = run(&["-info"]);
    for want in [
        "kauri build details:",
        "PMI versions served:             PMI-1 1.1, PMI-2 2.0",
        "PMIx server library:",
        "Launchers available:             ssh rsh slurm sge lsf pbs fork",
        "Resource managers:               slurm sge lsf pbs",
        "libpmi2.so.0",
    ] {
        assert!(t.contains(want), "{want}: {t}");
    }
}

#[test]
fn info_json_is_one_object_with_every_key() {
    // Outside any allocation, whatever the machine running the test is in.
    let mut cmd = Command::new(KAURI);
    cmd.args(["-info", "--json"]);
    for var in [
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "PE_HOSTFILE",
        "LSB_MCPU_HOSTS",
        "PBS_NODEFILE",
    ] {
        cmd.env_remove(var);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success());
    let j = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(j.lines().count(), 1, "{j}");
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    for key in [
        "version",
        "commit",
        "build_date",
        "pmi_versions",
        "pmix_library",
        "launchers",
        "resource_managers",
        "resource_manager_detected",
        "bind_to",
        "map_by",
        "pmi_client_libraries",
    ] {
        assert!(v.get(key).is_some(), "{key} missing: {j}");
    }
    assert_eq!(v["pmi_versions"], serde_json::json!(["1.1", "2.0"]));
    assert!(v["pmix_library"].as_str().unwrap().contains("PMIx"), "{j}");
    assert!(v["resource_manager_detected"].is_null(), "{j}");
    // Inside an allocation, the manager is detected.
    let o = Command::new(KAURI)
        .args(["-info", "--json"])
        .env("SLURM_JOB_NODELIST", "n[1-3]")
        .env("SLURM_TASKS_PER_NODE", "2(x3)")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["resource_manager_detected"],
        serde_json::json!({"manager": "slurm", "hosts": 3})
    );
}
