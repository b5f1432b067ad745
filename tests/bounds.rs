//! Bounded resources against a broken or hostile peer, driven as a user would: a rank that
//! never reads its PMI replies, a host without enough file descriptors, a rank that floods
//! its output. Memory is read from kauri's own `/proc/PID/status` (`VmHWM`, the peak RSS).

mod common;

use common::{kauri, stderr};

/// The `VmHWM` (peak resident set, in kB) a rank printed for its parent, kauri.
fn hwm_kb(o: &std::process::Output) -> u64 {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM line: {o:?}"))
}

/// A rank that sends 100,000 `get`s of a 1000-byte value and reads none of the ~100 MB of
/// replies costs kauri a bounded queue: its connection is closed once 4 MiB are queued, with
/// one line naming the rank. (Before the queue was bounded, kauri's peak RSS passed 100 MB.)
#[test]
fn a_rank_that_never_reads_its_replies_costs_a_bounded_queue() {
    let script = r#"
printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&$PMI_FD; read -r a <&$PMI_FD
printf 'cmd=get_my_kvsname\n' >&$PMI_FD; read -r k <&$PMI_FD
K=$(echo "$k" | tr ' ' '\n' | sed -n 's/^kvsname=//p')
v=$(head -c 1000 /dev/zero | tr '\0' v)
printf "cmd=put kvsname=$K key=a value=$v\n" >&$PMI_FD; read -r a <&$PMI_FD
printf 'cmd=barrier_in\n' >&$PMI_FD; read -r a <&$PMI_FD
yes "cmd=get kvsname=$K key=a" | head -n 100000 >&$PMI_FD 2>/dev/null
sleep 1
grep VmHWM /proc/$PPID/status
"#;
    let o = kauri(&["-n", "1", "bash", "-c", script], None, &[]);
    let kb = hwm_kb(&o);
    eprintln!("kauri's peak RSS: {kb} kB; stderr: {}", stderr(&o));
    assert!(kb < 50 * 1024, "kauri's peak RSS reached {kb} kB");
    assert!(
        stderr(&o).contains(
            "kauri: rank 0 does not read its PMI replies (4 MiB queued); closing its connection"
        ),
        "{}",
        stderr(&o)
    );
}

/// Forty fork hosts with too few file descriptors (`ulimit -n`: a flat tree with 64, the
/// default tree with 32): one line on stderr, which names the cause and the limit, and exit
/// status 255. (Before: the launch error followed by warnings and the agents' complaints,
/// or only a consequence, "its parent did not send the handshake".)
#[test]
fn out_of_file_descriptors_is_one_line_naming_the_limit() {
    let hosts: Vec<String> = (1..=40).map(|i| format!("h{i}")).collect();
    let hosts = hosts.join(",");
    for (limit, width) in [(64, "-tree-width 0"), (32, "")] {
        let cmd = format!(
            "ulimit -n {limit}; exec {} -launcher fork {width} -hosts {hosts} -n 40 true",
            common::KAURI
        );
        let o = kauri_sh(&cmd);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(255), "ulimit -n {limit}: {e}");
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 1, "ulimit -n {limit}: one line:\n{e}");
        assert!(
            lines[0].starts_with(&format!(
                "kauri: out of file descriptors (ulimit -n is {limit}): "
            )),
            "{e}"
        );
    }
}

/// Runs `sh -c cmd` (kauri inside it) under the same watchdog as [`kauri`].
fn kauri_sh(cmd: &str) -> std::process::Output {
    common::run_under_watchdog(std::process::Command::new("sh").args(["-c", cmd]))
}
