//! Process binding: `-bind-to`, `-map-by` a topology object, `-report-bindings`. Each rank
//! reads the CPUs it may run on from `/proc/self/status` (`Cpus_allowed_list`), as a user
//! would check it.

mod common;

use kauri::host::bind::{allowed_cpus, parse_cpu_list};

/// Each rank's allowed CPUs, by rank.
fn cpus_by_rank(args: &[&str], n: usize) -> (Vec<Vec<usize>>, String) {
    let n_s = n.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend([
        "-n",
        &n_s,
        "sh",
        "-c",
        "echo \"$KAURI_RANK $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"",
    ]);
    let out = common::kauri(&a, None, &[]);
    let err = common::stderr(&out);
    assert!(out.status.success(), "kauri {args:?} failed: {err}");
    let mut v = vec![Vec::new(); n];
    for l in common::lines(&out) {
        let (r, list) = l.split_once(' ').expect("rank and list");
        v[r.parse::<usize>().unwrap()] = parse_cpu_list(list).expect("a CPU list");
    }
    (v, err)
}

/// The CPUs kauri itself may use here (the test's own affinity).
fn mine() -> Vec<usize> {
    allowed_cpus()
}

#[test]
fn bind_to_core_gives_each_rank_its_own_cpu() {
    let cpus = mine();
    if cpus.len() < 2 {
        eprintln!("skipped: this machine lets the test use {cpus:?}, fewer than 2 CPUs");
        return;
    }
    let (got, err) = cpus_by_rank(&["-bind-to", "core", "-report-bindings"], 2);
    // This machine's cores may hold several hardware threads each; each rank has one core's.
    assert!(got.iter().all(|c| !c.is_empty()), "{got:?}");
    assert!(
        got[0].iter().all(|c| !got[1].contains(c)),
        "two ranks share a CPU: {got:?}"
    );
    assert!(
        got.iter().flatten().all(|c| cpus.contains(c)),
        "{got:?} not within {cpus:?}"
    );
    for (r, c) in got.iter().enumerate() {
        let line = format!("bound to CPUs {}", kauri::host::bind::cpu_list(c));
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("kauri: rank {r} on ")) && l.ends_with(&line)),
            "-report-bindings for rank {r}: {err}"
        );
    }
}

#[test]
fn no_binding_by_default() {
    let (got, err) = cpus_by_rank(&[], 2);
    assert_eq!(got, vec![mine(), mine()]);
    assert!(!err.contains("bound"), "{err}");
}

#[test]
fn more_ranks_than_threads_wrap_around_and_say_so_once() {
    let cpus = mine();
    let n = cpus.len() + 1;
    let (got, err) = cpus_by_rank(&["-bind-to", "hwthread"], n);
    assert!(got.iter().all(|c| c.len() == 1), "one CPU each: {got:?}");
    assert_eq!(
        got[n - 1],
        got[0],
        "the last rank wrapped around to the first's CPU"
    );
    let said: Vec<&str> = err.lines().filter(|l| l.contains("place(s)")).collect();
    assert_eq!(said.len(), 1, "said once: {err}");
    assert!(
        said[0].starts_with(&format!("kauri: -bind-to hwthread: {n} ranks on ")),
        "{err}"
    );
}

/// On two simulated hosts each agent binds its own ranks: local ranks 0 and 1 of each host
/// get different cores, and every rank says where it is bound.
#[test]
fn each_host_binds_its_own_ranks() {
    if mine().len() < 2 {
        eprintln!("skipped: fewer than 2 CPUs");
        return;
    }
    let (got, err) = cpus_by_rank(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "a:2,b:2",
            "-bind-to",
            "core",
            "-report-bindings",
        ],
        4,
    );
    // Ranks 0,1 on a; 2,3 on b: within a host, two cores; across hosts, the same ones.
    assert_ne!(got[0], got[1], "{got:?}");
    assert_eq!((&got[0], &got[1]), (&got[2], &got[3]), "{got:?}");
    for (r, h) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        assert!(
            err.contains(&format!("kauri: rank {r} on {h}: bound to CPUs ")),
            "{err}"
        );
    }
}

/// A CPU set kauri was started in (taskset, a batch system's cpuset) bounds the binding.
#[test]
fn the_binding_stays_within_kauris_own_cpus() {
    let cpus = mine();
    let Some(&last) = cpus.last().filter(|_| cpus.len() >= 2) else {
        eprintln!("skipped: fewer than 2 CPUs");
        return;
    };
    let list = last.to_string();
    let out = common::run_under_watchdog(
        std::process::Command::new("taskset")
            .args(["-c", &list, common::KAURI, "-bind-to", "core", "-n", "2"])
            .args([
                "sh",
                "-c",
                "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status",
            ]),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::lines(&out), vec![list.clone(), list]);
}

#[test]
fn bad_bind_to_and_map_by_values_are_one_line() {
    for args in [
        ["-bind-to", "board"],
        ["-map-by", "board"],
        ["-bind-to", "core:0"],
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "1", "true"]);
        let out = common::kauri(&a, None, &[]);
        assert!(!out.status.success(), "{args:?} was taken");
        let err = common::stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("kauri: "), "{args:?}: {err}");
    }
}
