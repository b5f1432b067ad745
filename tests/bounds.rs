//! Bounded resources against a broken or hostile peer, driven as a user would: a rank that
//! never reads its PMI replies, a host without enough file descriptors, a rank that floods
//! its output. Memory is read from kauri's own `/proc/PID/status` (`VmHWM`, the peak RSS, or
//! `VmRSS` sampled while the job runs, for kauri and its agents).

mod common;

use common::{kauri, stderr};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

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
/// or only a consequence, "its parent did not send the handshake".) The ranks sleep, so
/// that every agent holds its link at once: ranks that end at once give their hosts'
/// descriptors back while later agents start, and forty of them then fit in 64.
#[test]
fn out_of_file_descriptors_is_one_line_naming_the_limit() {
    let hosts: Vec<String> = (1..=40).map(|i| format!("h{i}")).collect();
    let hosts = hosts.join(",");
    for (limit, width) in [(64, "-tree-width 0"), (32, "")] {
        let cmd = format!(
            "ulimit -n {limit}; exec {} -launcher fork {width} -hosts {hosts} -n 40 sleep 20",
            common::KAURI
        );
        limit_line(&kauri_sh(&cmd), limit, "");
    }
}

/// What follows "kauri: out of file descriptors (ulimit -n is LIMIT): " on the one line of
/// `o`'s stderr, which must be all it printed, with exit status 255 (`what`: the case, for
/// the failure's message).
fn limit_line(o: &std::process::Output, limit: u32, what: &str) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(255), "{what} ulimit -n {limit}: {e}");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 1, "{what} ulimit -n {limit}: one line:\n{e}");
    let prefix = format!("kauri: out of file descriptors (ulimit -n is {limit}): ");
    match lines[0].strip_prefix(&prefix) {
        Some(rest) => rest.to_string(),
        None => panic!("{what} ulimit -n {limit}: {e}"),
    }
}

/// One host with too few file descriptors for its 40 ranks: the ranks forked before the
/// refusal (forked before kauri's runtime exists, when a job runs on this host alone) are
/// killed, with what they started, and reaped; one line names the limit and the rank that
/// could not start, and the status is 255.
#[test]
fn ranks_forked_before_the_descriptors_ran_out_are_ended() {
    let marker = format!("fd-start-{}", std::process::id());
    let cmd = format!(
        "ulimit -n 32; exec {} -n 40 sh -c 'sleep 300; echo {marker}'",
        common::KAURI
    );
    let rest = limit_line(&kauri_sh(&cmd), 32, "");
    let rank: Option<usize> = rest
        .strip_prefix("cannot start rank ")
        .and_then(|r| r.split(' ').next()?.parse().ok());
    assert!(
        rank.is_some_and(|r| r > 0),
        "some ranks were forked before the refusal: {rest}"
    );
    common::assert_none_left(&marker, Duration::from_secs(20));
}

/// One host and a few descriptors, for every job size around the limit: each run either
/// succeeds or fails with the one line that names the limit, never with the failure it
/// caused (`cannot start the runtime`, `cannot make a job key`: what a one-host job said
/// when its ranks were forked before kauri's runtime and took the last descriptors), and
/// never with a panic.
#[test]
fn a_one_host_job_near_the_descriptor_limit_names_it() {
    for limit in [24, 32] {
        for n in 1..=8 {
            let cmd = format!("ulimit -n {limit}; exec {} -n {n} true", common::KAURI);
            let o = kauri_sh(&cmd);
            if !(o.status.success() && stderr(&o).is_empty()) {
                limit_line(&o, limit, &format!("-n {n},"));
            }
        }
    }
}

/// Runs `sh -c cmd` (kauri inside it) under the same watchdog as [`kauri`].
fn kauri_sh(cmd: &str) -> std::process::Output {
    common::run_under_watchdog(std::process::Command::new("sh").args(["-c", cmd]))
}

/// Two ranks that each write 200 MB to stdout without a newline, while nothing reads kauri's
/// stdout for a while and then a reader drains it: the ranks' pipes stop being read while
/// kauri's output queue is full, so the peak resident set of kauri and of each agent stays
/// under 48 MB; every byte arrives, the status is 0, nothing is left. Once on one host
/// (unread for 4 s), once over two fork hosts (the agents' uplinks), unread for 12 s with
/// links that are lost after 6 s of silence: a throttled uplink is not a lost one. (Before
/// the output queues were bounded in bytes as well as in lines: peaks of 80 MB on one host,
/// 84 MB for the front end and 70-76 MB for each agent over two hosts. Before the uplink
/// dropped `TCP_USER_TIMEOUT`: `kauri: agent on a died` once its window had been closed 6 s,
/// status 255, 7 MB of the 200 MB printed.)
#[test]
fn a_rank_that_floods_its_output_costs_kauri_bounded_memory() {
    const EACH: u64 = 200_000_000;
    const BOUND_KB: u64 = 48 * 1024;
    let marker = format!("flood-{}", std::process::id());
    // One endless line: the longest messages (pieces of 64 KiB), so the most bytes per line.
    let prog = format!("head -c {EACH} /dev/zero | tr '\\0' x # {marker}");
    let one_host = vec!["-n", "2", "sh", "-c", &prog];
    let two_hosts = common::on_fork_hosts("a,b", "2", &prog);
    let short_timers = [("KAURI_HEARTBEAT", "1"), ("KAURI_HEARTBEAT_TIMEOUT", "6")];
    for (name, args, agents, stall, env) in [
        ("one host", one_host, 0, 4, &[][..]),
        ("two fork hosts", two_hosts, 2, 12, &short_timers[..]),
    ] {
        let (bytes, status, peaks) = flood(&args, env, Duration::from_secs(stall));
        eprintln!("{name}: {bytes} bytes, {status}, peak RSS (kB) by pid: {peaks:?}");
        assert!(status.success(), "{name}: {status}");
        assert_eq!(bytes, 2 * EACH, "{name}: every byte arrives");
        assert_eq!(
            peaks.len(),
            1 + agents,
            "{name}: kauri and its agents sampled"
        );
        for (pid, kb) in &peaks {
            assert!(*kb < BOUND_KB, "{name}: process {pid} reached {kb} kB");
        }
        common::assert_none_left(&marker, Duration::from_secs(20));
    }
}

/// Runs kauri with `args` and `env`, its stdout a pipe nobody reads for `stall`, then read to
/// its end; meanwhile samples every 100 ms the `VmRSS` of kauri and of its agents. Returns
/// the bytes read, the exit status and each process's peak (kB). A job still running after
/// 600 s is killed and the test fails.
fn flood(
    args: &[&str],
    env: &[(&str, &str)],
    stall: Duration,
) -> (u64, std::process::ExitStatus, Vec<(u32, u64)>) {
    let mut child = Command::new(common::KAURI)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kauri");
    let pid = child.id();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let sampler = std::thread::spawn(move || {
        let mut peaks = std::collections::BTreeMap::new();
        let mut waited = Duration::ZERO;
        loop {
            for p in kauri_and_agents(pid) {
                if let Some(kb) = status_kb(p, "VmRSS:") {
                    let peak = peaks.entry(p).or_insert(0);
                    *peak = kb.max(*peak);
                }
            }
            match stop_rx.recv_timeout(Duration::from_millis(100)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return (peaks, false),
            }
            waited += Duration::from_millis(100);
            if waited > Duration::from_secs(600) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                return (peaks, true);
            }
        }
    });
    std::thread::sleep(stall);
    let mut out = child.stdout.take().unwrap();
    let (mut bytes, mut buf) = (0u64, vec![0u8; 64 * 1024]);
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading kauri's stdout: {e}"),
        }
    }
    let status = child.wait().unwrap();
    let _ = stop_tx.send(());
    let (peaks, killed) = sampler.join().unwrap();
    assert!(!killed, "kauri {args:?} did not end in 600 s");
    (bytes, status, peaks.into_iter().collect())
}

/// `pid` and its agents: its children that run `kauri agent` (with `-launcher fork`; a child
/// forked for a rank is still `kauri` until it execs, and is left out).
fn kauri_and_agents(pid: u32) -> Vec<u32> {
    let mut found = vec![pid];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // /proc/P/stat: "P (comm) S PPID ...", comm may hold spaces: split after its ')'.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, tail)| tail.split_whitespace().nth(1)?.parse::<u32>().ok());
        let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let is_agent = argv.split(|&b| b == 0).nth(1) == Some(b"agent");
        if ppid == Some(pid) && is_agent {
            found.push(p);
        }
    }
    found
}

/// A `kB` field (`VmRSS:`, `VmHWM:`) of `/proc/PID/status`.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Every number of processes the user gives is bounded: past 2^24 ranks in all,
/// `-n`, `-ppn`, a host's slot count or their product is one line naming the limit, status
/// 255, nothing runs. Before: `-n 18446744073709551615` panicked on a capacity overflow
/// (101), `-n 99999999999` aborted on a failed allocation with a backtrace (134).
#[test]
fn a_huge_process_count_is_one_line_naming_the_limit() {
    for args in [
        &["-n", "18446744073709551615", "true"][..],
        &["-n", "99999999999", "true"],
        &["-n", "16777217", "true"],
        &["-n", "16777216", "true", ":", "-n", "1", "true"],
        &["-ppn", "99999999999999999", "-hosts", "a,b", "true"],
        &["-ppn", "16777216", "-hosts", "a,b", "true"],
        &["-hosts", "a:99999999999", "true"],
        &["-hosts", "a:16777216,b:16777216", "true"],
    ] {
        let o = common::kauri(args, None, &[]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(255), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("16777216"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// A time or count in kauri's variables beyond what it can hold was a panic
/// (`KAURI_KILL_GRACE=1e300`, `KAURI_HEARTBEAT=1e300`, `KAURI_TEARDOWN_WAIT=1e300`: "cannot
/// convert float seconds to Duration", 101; `MPIEXEC_TIMEOUT=18446744073709551615`: "overflow
/// when adding duration to instant", 101) or silently ignored (`KAURI_SPAWN_MAX=-1`,
/// `KAURI_HEARTBEAT=nan`). Each is now one line naming the variable and its range, status 255.
#[test]
fn a_bad_number_in_kauris_variables_is_one_line_naming_the_range() {
    for (var, value, range) in [
        ("KAURI_KILL_GRACE", "1e300", "100000000"),
        ("KAURI_HEARTBEAT", "1e300", "100000000"),
        ("KAURI_HEARTBEAT", "nan", "100000000"),
        ("KAURI_HEARTBEAT_TIMEOUT", "inf", "100000000"),
        ("KAURI_CONNECT_TIMEOUT", "-1", "100000000"),
        ("KAURI_TEARDOWN_WAIT", "1e300", "100000000"),
        ("MPIEXEC_TIMEOUT", "18446744073709551615", "100000000"),
        ("KAURI_SPAWN_MAX", "-1", "16777216"),
        ("KAURI_SPAWN_MAX", "99999999999", "16777216"),
        ("KAURI_TREE_WIDTH", "99999999999999999999", "4294967295"),
    ] {
        let o = common::kauri(&["-n", "1", "true"], None, &[(var, value)]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(255), "{var}={value}: {err}");
        assert_eq!(err.lines().count(), 1, "{var}={value}: {err}");
        assert!(
            err.contains(var) && err.contains(range),
            "{var}={value}: {err}"
        );
    }
    // In range: the job runs.
    for (var, value) in [("KAURI_KILL_GRACE", "0.5"), ("KAURI_TREE_WIDTH", "flat")] {
        let o = common::kauri(&["-n", "1", "true"], None, &[(var, value)]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{var}={value}: {}",
            common::stderr(&o)
        );
    }
}

/// 600 MB piped into kauri for a rank 0 on another host (a fork host) that sleeps 5 s before
/// it reads: kauri reads stdin no faster than rank 0's agent writes it into rank 0's pipe
/// (a window of 4 MiB in flight), so the peak resident set of kauri and of each agent stays
/// under 64 MiB, and every byte arrives. (Before, kauri read stdin as fast as the link took
/// it and the agent queued it without bound: 1.5 GB made an agent of 1.28 GB.)
#[test]
fn stdin_for_a_rank_0_on_another_host_costs_kauri_bounded_memory() {
    const BYTES: u64 = 600_000_000;
    const BOUND_KB: u64 = 64 * 1024;
    let marker = format!("stdin-{}", std::process::id());
    let prog = format!("sleep 5; if [ $PMI_RANK = 0 ]; then wc -c; fi # {marker}");
    let args = common::on_fork_hosts("a,b", "2", &prog);
    let mut child = Command::new(common::KAURI)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kauri");
    let mut input = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        let mut left = BYTES;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if std::io::Write::write_all(&mut input, &chunk[..n]).is_err() {
                return left;
            }
            left -= n as u64;
        }
        0
    });
    let (peaks, out, status) = sample_peaks(child);
    assert_eq!(feeder.join().unwrap(), 0, "kauri took all its stdin");
    eprintln!("{status}, rank 0 counted {out:?}, peak RSS (kB) by pid: {peaks:?}");
    assert!(status.success(), "{status}");
    assert_eq!(out.trim(), BYTES.to_string(), "every byte arrives");
    assert_eq!(peaks.len(), 3, "kauri and its two agents sampled");
    for (pid, kb) in &peaks {
        assert!(*kb < BOUND_KB, "process {pid} reached {kb} kB");
    }
    common::assert_none_left(&marker, Duration::from_secs(20));
}

/// Waits for `child` (kauri) to end, reading its stdout, and meanwhile samples every 100 ms
/// the `VmHWM` of kauri and of its agents. Returns each process's peak (kB), stdout and the
/// status. A job still running after 600 s is killed and the test fails.
fn sample_peaks(
    mut child: std::process::Child,
) -> (Vec<(u32, u64)>, String, std::process::ExitStatus) {
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut peaks = std::collections::BTreeMap::new();
    let start = std::time::Instant::now();
    let status = loop {
        for p in kauri_and_agents(pid) {
            if let Some(kb) = status_kb(p, "VmHWM:") {
                let peak = peaks.entry(p).or_insert(0);
                *peak = kb.max(*peak);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("kauri did not end in 600 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (peaks.into_iter().collect(), reader.join().unwrap(), status)
}
