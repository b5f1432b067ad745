//! The MPIR process-acquisition interface, read the way a debugger reads it: gdb starts
//! kauri, stops at `MPIR_Breakpoint` and prints `MPIR_proctable` with
//! `contrib/gdb/mpir-proctable.gdb`; every rank prints its own rank and pid, and the two
//! must agree (host, executable and pid per rank), on one host and on simulated hosts (whose
//! ranks are started by agents, which send their pids up).

mod common;

use std::collections::BTreeMap;
use std::process::Command;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/contrib/gdb/mpir-proctable.gdb"
);

/// What gdb read: rank -> (host, executable, pid).
type Table = BTreeMap<usize, (String, String, u32)>;
/// What the ranks said: rank -> (host, pid).
type Truth = BTreeMap<usize, (String, u32)>;

/// Runs `kauri ARGS sh -c 'echo me RANK PID HOST'` under gdb with the script; returns the
/// table gdb printed and what the ranks printed.
fn table_and_truth(args: &[&str]) -> (Table, Truth) {
    let mut cmd = Command::new("gdb");
    cmd.args(["-q", "-batch", "-x", SCRIPT, "--args", common::KAURI]);
    cmd.args(args);
    cmd.args(["sh", "-c", "echo me $KAURI_RANK $$ $KAURI_HOST"]);
    let out = common::run_under_watchdog(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "gdb failed: {text}\n{}",
        common::stderr(&out)
    );
    let (mut table, mut truth) = (BTreeMap::new(), BTreeMap::new());
    let mut size = None;
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["MPIR_proctable_size", n, "MPIR_debug_state", s] => {
                assert_eq!(*s, "1", "MPIR_DEBUG_SPAWNED: {text}");
                size = Some(n.parse::<usize>().unwrap());
            }
            ["MPIR", "rank", r, "host", h, "executable", e, "pid", p] => {
                table.insert(
                    r.parse().unwrap(),
                    (h.to_string(), e.to_string(), p.parse().unwrap()),
                );
            }
            ["me", r, p, h] => {
                truth.insert(r.parse().unwrap(), (h.to_string(), p.parse().unwrap()));
            }
            _ => {}
        }
    }
    assert_eq!(size, Some(table.len()), "the table's size: {text}");
    (table, truth)
}

fn check(args: &[&str], n: usize) {
    let (table, truth) = table_and_truth(args);
    assert_eq!(truth.len(), n, "every rank ran: {truth:?}");
    assert_eq!(table.len(), n, "every rank in the table: {table:?}");
    for (r, (host, exe, pid)) in &table {
        assert_eq!(
            Some(&(host.clone(), *pid)),
            truth.get(r),
            "rank {r}: {table:?} vs {truth:?}"
        );
        assert!(
            exe.ends_with("/sh"),
            "rank {r}'s executable is the resolved program: {exe}"
        );
    }
}

#[test]
fn gdb_reads_the_process_table_on_one_host() {
    let host = kauri::host::node::local_host();
    let (table, _) = table_and_truth(&["-n", "2"]);
    assert!(table.values().all(|(h, _, _)| *h == host), "{table:?}");
    // Enough ranks that, undebugged, they would start sharing kauri's memory: a debugger
    // told of such a "fork" took its breakpoint out of kauri's own text.
    let n = kauri::host::child::SHARE_MIN + 2;
    check(&["-n", &n.to_string()], n);
}

#[test]
fn gdb_reads_the_process_table_of_ranks_on_other_hosts() {
    check(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "a,b,c",
            "-tree-width",
            "1",
            "-n",
            "4",
        ],
        4,
    );
}
