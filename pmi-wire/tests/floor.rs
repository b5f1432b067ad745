//! `pmi-floor`, the benchmarks' minimal PMI-1 and PMI-2 launcher, serves what it must:
//! `pmi-load` at 32 ranks, over either protocol, checks every value it reads (puts, fences, gets of every other rank's key, the
//! process mapping, the universe size), and the exit status is the ranks'.

use std::process::Command;

const FLOOR: &str = env!("CARGO_BIN_EXE_pmi-floor");
const LOAD: &str = env!("CARGO_BIN_EXE_pmi-load");

#[test]
fn floor_serves_pmi_load_at_32_ranks() {
    for pmi in ["1", "2"] {
        serves_pmi_load(pmi);
    }
}

fn serves_pmi_load(pmi: &str) {
    let out = Command::new(FLOOR)
        .args([
            "-n", "32", LOAD, "--pmi", pmi, "--rounds", "3", "--vsize", "512", "--gets", "all",
        ])
        .output()
        .expect("pmi-floor runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = text
        .lines()
        .filter(|l| l.starts_with("pmi-load: ok "))
        .count();
    assert_eq!(ok, 32, "{text}");
    assert!(text.contains("mapping=(vector,(0,1,32))") && text.contains("universe=32"));
}

#[test]
fn floor_passes_on_the_ranks_status_and_refuses_bad_usage() {
    let st = Command::new(FLOOR)
        .args(["-n", "2", "sh", "-c", "exit 3"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    let st = Command::new(FLOOR)
        .args(["-n", "x", "true"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(255));
}

/// `--hosts H` maps N/H consecutive ranks to each of H hosts, over both protocols, and a
/// count that does not divide is refused.
#[test]
fn floor_maps_ranks_to_hosts_with_hosts() {
    for pmi in ["1", "2"] {
        let out = Command::new(FLOOR)
            .args([
                "--hosts", "4", "-n", "8", LOAD, "--pmi", pmi, "--rounds", "1",
            ])
            .output()
            .expect("pmi-floor runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("mapping=(vector,(0,4,2))"), "{text}");
    }
    let st = Command::new(FLOOR)
        .args(["--hosts", "3", "-n", "8", "true"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(255));
}
