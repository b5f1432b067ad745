//! kauri in a PID namespace whose session began outside it, as in a container entered with
//! `docker exec` or started by a CI runner: there `getsid` and `getpgrp` give 0 (the session's
//! leader is not in the namespace). Every path that ends ranks (a failing rank's teardown,
//! the sweep of what ranks left, a signal forwarded) must work there as anywhere: on such a
//! machine kauri once panicked (status 101) wherever it swept, in 27 of the Rust tests.
//!
//! The namespace is made with `unshare --pid --fork --mount-proc`, which needs root; where it
//! cannot be made the tests say why and pass, except under `CI=true`, where that fails.

use std::process::Command;

mod common;

use common::{run_under_watchdog, stderr, KAURI};

/// Why a PID namespace cannot be made here, if it cannot.
fn cannot_unshare() -> Option<String> {
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    let why = match o {
        Ok(o) if o.status.success() => return None,
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => format!("unshare: {e}"),
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "cannot make a PID namespace on CI: {why}"
    );
    eprintln!("skipped: cannot make a PID namespace here: {why}");
    Some(why)
}

/// Runs `kauri ARGS` in a new PID namespace (with its own `/proc`), where its session and
/// process group are 0.
fn kauri_in_namespace(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", KAURI])
        .args(args)
        .envs(env.iter().copied());
    run_under_watchdog(&mut cmd)
}

/// The session really is 0 in the namespace: what the other tests rely on.
#[test]
fn the_session_is_zero_in_the_namespace() {
    if cannot_unshare().is_some() {
        return;
    }
    let o = kauri_in_namespace(&["-n", "1", "sh", "-c", "ps -o sid= -p $$"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0");
}

/// A failing rank ends the job with its code and one line, its peers (each with a child)
/// are ended, on one host and through agents.
#[test]
fn a_failing_rank_ends_the_job_with_its_code() {
    if cannot_unshare().is_some() {
        return;
    }
    let script = "if [ $PMI_RANK = 1 ]; then exit 3; fi; sleep 60";
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"]] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "3", "sh", "-c", script]);
        let o = kauri_in_namespace(&args, &[("KAURI_KILL_GRACE", "1")]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{hosts:?}: {e}");
        assert_eq!(e.matches("exited with code 3").count(), 1, "{hosts:?}: {e}");
    }
}

/// What ranks leave behind (a background child, a daemon that left with `setsid`) is swept
/// at the end of a clean run, which stays clean.
#[test]
fn what_ranks_leave_is_swept() {
    if cannot_unshare().is_some() {
        return;
    }
    let prog = "(sleep 300) >/dev/null 2>&1 & \
                setsid sh -c 'sleep 300' >/dev/null 2>&1 </dev/null & echo started";
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"]] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "sh", "-c", prog]);
        let o = kauri_in_namespace(&args, &[]);
        assert!(o.status.success(), "{hosts:?}: {}", stderr(&o));
        assert_eq!(common::lines(&o), ["started", "started"], "{hosts:?}");
    }
}

/// A job that times out ends with 255 and its table.
#[test]
fn a_timeout_ends_the_job() {
    if cannot_unshare().is_some() {
        return;
    }
    let o = kauri_in_namespace(
        &["-n", "2", "sh", "-c", "sleep 300"],
        &[("MPIEXEC_TIMEOUT", "1")],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
}
