//! A host cut from the network while its job runs: its link goes down, so nothing closes (no
//! FIN, no RST) and TCP would keep the connection open for many minutes. Kauri notices the
//! silence on the tree link (`KAURI_HEARTBEAT_TIMEOUT`), ends the job with one line naming the
//! host, and the cut host's agent, which hears nothing from its parent either, ends its ranks.
//!
//! Its own test binary: the cut host is one of the namespace hosts (`netns_hosts`), which no
//! other test may use while its link is down (cargo runs test binaries one after another, and
//! each binary holds the hosts' lock while it runs).

use compat_tests::{netns_hosts, Ctx, Launcher};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// Sets the bridge side of namespace host `name`'s link (`PREFIX-hI` → `PREFIX-vI`, made by
/// `netns/hosts.sh`) up or down.
fn set_link(name: &str, up: bool) {
    let (prefix, index) = name.rsplit_once("-h").expect("a namespace host's name");
    let veth = format!("{prefix}-v{index}");
    let st = Command::new("ip")
        .args(["link", "set", &veth, if up { "up" } else { "down" }])
        .status()
        .expect("run ip");
    assert!(st.success(), "ip link set {veth} failed");
}

#[test]
fn netns_a_host_cut_from_the_network_ends_the_job_and_names_it() {
    let hosts = netns_hosts();
    let ctx = Ctx::new("netcut");
    let dir = ctx.dir.to_string_lossy().into_owned();
    // Every rank says it runs, then waits far longer than the test.
    let prog = ctx.script(
        "rank.sh",
        &format!(
            "#!/bin/sh\ntouch {dir}/started.$KAURI_RANK\nexec sleep 300 # {}\n",
            ctx.marker
        ),
    );
    let mut args = hosts.ssh_launch(&hosts.addrs.join(","));
    args.extend(["-n".to_string(), "3".to_string(), prog]);
    let job = ctx
        .job(Launcher::Kauri, &args)
        .program(ctx.kauri())
        .env("KAURI_HEARTBEAT", "0.2")
        .env("KAURI_HEARTBEAT_TIMEOUT", "3")
        .env("KAURI_KILL_GRACE", "1")
        .env("KAURI_TEARDOWN_WAIT", "1")
        .timeout(Duration::from_secs(120));
    let running = thread::spawn(move || job.run());
    // Generous: ssh to three hosts on a busy 2-core machine.
    let start = Instant::now();
    while !(0..3).all(|r| Path::new(&format!("{dir}/started.{r}")).exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the ranks did not start"
        );
        if running.is_finished() {
            let o = running.join().unwrap();
            panic!("the job ended before the cut:\n{o}");
        }
        thread::sleep(Duration::from_millis(100));
    }
    let cut = &hosts.names[1];
    set_link(cut, false);
    let o = running.join();
    // Up again before anything can fail (the hosts are torn down at exit anyway).
    set_link(cut, true);
    let o = o.expect("the job's thread");
    eprintln!("=== {}\n{o}", o.launcher);
    assert_eq!(o.code, Some(255), "{o}");
    let line = format!(
        "kauri: agent on {} was silent for 3 s (KAURI_HEARTBEAT_TIMEOUT)",
        hosts.addrs[1]
    );
    assert!(o.stderr.contains(&line), "wanted {line:?}:\n{o}");
    // The cut host's agent heard nothing from its parent either: it ended its rank and left.
    ctx.assert_no_leftovers();
}
