//! A rank that closes its PMI connection without finalize and runs on (a library that closes
//! every descriptor as it turns into a daemon, a program that closes the socket): to the
//! fence rules it has left, so the ranks waiting for it are not kept waiting for as long as it
//! lives. Ranks here speak raw PMI-1 through their inherited socket (`PMI_FD`).

use std::time::Duration;

mod common;

use common::{kauri, stderr};

/// Every rank initializes and passes a barrier; then rank 3 closes its PMI socket and sleeps
/// for a long time, while the others enter the next barrier.
fn closing_rank_script(marker: &str) -> String {
    format!(
        "printf 'cmd=init pmi_version=1 pmi_subversion=1\\ncmd=barrier_in\\n' >&$PMI_FD; \
         read -r a <&$PMI_FD; read -r b <&$PMI_FD; \
         if [ $PMI_RANK = 3 ]; then eval \"exec $PMI_FD>&-\"; exec sleep 100000; fi; \
         printf 'cmd=barrier_in\\n' >&$PMI_FD; read -r c <&$PMI_FD; echo \"released: $c\" # {marker}"
    )
}

/// The job ends with one line naming rank 3 and what it did, status 255, and nothing left:
/// on one host (its own engine sees the fence it fails) and with rank 3 alone on a second
/// simulated host (the front end judges it: the others use PMI still). Before, kauri waited
/// for as long as rank 3 lived.
#[test]
fn a_rank_that_closes_its_pmi_connection_and_runs_on_ends_the_job() {
    for hosts in [None, Some("a:3,b")] {
        let marker = format!("hangup-{}-{}", std::process::id(), hosts.is_some());
        let script = closing_rank_script(&marker);
        let mut args = vec![];
        if let Some(h) = hosts {
            args.extend(["-launcher", "fork", "-hosts", h]);
        }
        args.extend(["-n", "4", "bash", "-c", &script]);
        let o = kauri(&args, None, &[("KAURI_KILL_GRACE", "1")]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(255), "{hosts:?}: {err}");
        assert!(
            err.lines().any(|l| l.starts_with("kauri: rank 3 ")
                && l.contains("closed its PMI connection without finalizing")),
            "{hosts:?}: {err}"
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(!out.contains("released"), "{hosts:?}: {out}");
        common::assert_none_left(&marker, Duration::from_secs(30));
    }
}

/// A rank that closes its connection in its last moments (here: closes it, then exits 3 at
/// once) is judged by its end, not as a rank that runs on: its own failure is the cause.
#[test]
fn a_rank_that_closes_its_connection_and_ends_is_judged_by_its_end() {
    let script = "printf 'cmd=init pmi_version=1 pmi_subversion=1\\ncmd=barrier_in\\n' >&$PMI_FD; \
         read -r a <&$PMI_FD; read -r b <&$PMI_FD; \
         if [ $PMI_RANK = 1 ]; then eval \"exec $PMI_FD>&-\"; exit 3; fi; \
         printf 'cmd=barrier_in\\n' >&$PMI_FD; read -r c <&$PMI_FD";
    let o = kauri(&["-n", "2", "bash", "-c", script], None, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(!err.contains("runs on"), "{err}");
}
