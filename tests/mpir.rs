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
    let host = kauri::os::hostname::local_host();
    let (table, _) = table_and_truth(&["-n", "2"]);
    assert!(table.values().all(|(h, _, _)| *h == host), "{table:?}");
    // Each rank starts sharing kauri's memory until its exec (posix_spawn's vfork): a
    // debugger told of such a child must not take its breakpoint out of kauri's own text.
    check(&["-n", "3"], 3);
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

/// A program whose path is not UTF-8 (a Latin-1 directory `b\xe9n`, and the program `sh\xe9`
/// in it): the table holds the resolved path's bytes as they are, here and from the agents
/// of simulated hosts (it showed them as `�` on the way).
#[test]
fn the_table_holds_a_path_that_is_not_utf8_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let top = std::env::temp_dir().join(format!("kauri-mpir-latin1-{}", std::process::id()));
    let dir = top.join(std::ffi::OsStr::from_bytes(b"b\xe9n"));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join(std::ffi::OsStr::from_bytes(b"sh\xe9"));
    std::os::unix::fs::symlink("/bin/sh", &prog).unwrap();
    let mut want = b"executable ".to_vec();
    want.extend_from_slice(prog.as_os_str().as_bytes());
    want.extend_from_slice(b" pid ");
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
        let mut cmd = Command::new("gdb");
        cmd.args(["-q", "-batch", "-x", SCRIPT, "--args", common::KAURI]);
        cmd.args(hosts)
            .args(["-n", "2"])
            .arg(&prog)
            .args(["-c", "true"]);
        let out = common::run_under_watchdog(&mut cmd);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{hosts:?}: {text}{}",
            common::stderr(&out)
        );
        let rows: Vec<&[u8]> = out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(b"MPIR rank "))
            .collect();
        assert_eq!(rows.len(), 2, "{hosts:?}: {text}");
        for row in rows {
            assert!(
                row.windows(want.len()).any(|w| w == want),
                "{hosts:?}: {}",
                String::from_utf8_lossy(row)
            );
        }
    }
    std::fs::remove_dir_all(&top).unwrap();
}
