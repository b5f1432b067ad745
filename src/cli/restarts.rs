//! `-max-restarts N`: the whole job started again when it fails, as `torchrun --max-restarts`
//! restarts every worker.
//!
//! The kauri the user ran supervises: it runs each attempt as a kauri of its own (this same
//! program and command line, told which attempt it is in [`Attempt::VAR`]), so every attempt
//! has a fresh key-value store, PMIx servers, ports and agents, and nothing of one attempt's
//! state reaches the next. An attempt writes how it ended to a file ([`AttemptEnd`]). When it
//! failed (a rank failed or aborted, a host was lost) and restarts are left, the supervisor
//! says one line naming what failed and starts the next, without the hosts that were lost
//! (the next attempt fails at once, with one line, when the others cannot hold the job). A
//! job that succeeds, runs out of restarts, is interrupted, times out or cannot start ends
//! with its last attempt's status.
//!
//! Signals: one the terminal sends (`^C`) reaches every attempt's process as it reaches the
//! supervisor; one sent to the supervisor alone (`kill`) is passed on to the attempt. Either
//! way no restart follows an interrupt. `SIGUSR1` (the hang diagnosis) is passed on too.

use crate::plan::job::{Attempt, AttemptEnd};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The attempt running now (its pid), for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// The user interrupted the job (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT`): no restart.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The signals the supervisor passes on to the attempt.
const PASSED_ON: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn on_signal(sig: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if sig != libc::SIGUSR1 && sig != libc::SIGUSR2 {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let child = CHILD.load(Ordering::SeqCst);
    // Sent by a process (kill, sigqueue: si_code <= 0) to the supervisor alone; the
    // kernel's (a terminal's ^C, SI_KERNEL) reached the attempt's process group already.
    if child > 0 && code <= 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

/// Installs [`on_signal`] for [`PASSED_ON`].
fn pass_signals_on() {
    for sig in PASSED_ON {
        // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (atomics and
        // kill only) and has the SA_SIGINFO signature.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Runs the job the command line `args` describes, restarting it at most `max` times when
/// it fails; kauri's exit status.
pub fn supervise(args: &[OsString], max: u32) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            crate::say!("kauri: -max-restarts: cannot find kauri's own program: {e}");
            return 255;
        }
    };
    pass_signals_on();
    let run_id = format!("kauri-{}", std::process::id());
    let mut without: Vec<String> = Vec::new();
    for restart in 0..=max {
        let report = match report_file(restart) {
            Ok(r) => r,
            Err(e) => {
                crate::say!("kauri: -max-restarts: cannot make the attempts' report file: {e}");
                return 255;
            }
        };
        let attempt = Attempt {
            restart,
            max_restarts: max,
            run_id: run_id.clone(),
            without: without.clone(),
            report: Some(report.display().to_string()),
        };
        let status = run_attempt(&exe, args, &attempt);
        let end = std::fs::read_to_string(&report)
            .ok()
            .map(|t| AttemptEnd::from_text(&t));
        let _ = std::fs::remove_file(&report);
        // What the attempt left behind (it cleans up after itself; an attempt that was
        // killed may not have).
        crate::host::proc::kill_leftovers(&[]);
        let code = exit_code(status);
        let Some(end) = end.filter(|e| e.failed && code != 0) else {
            return code;
        };
        if INTERRUPTED.load(Ordering::SeqCst) {
            return code;
        }
        if restart == max {
            crate::say!("kauri: no restart left (-max-restarts {max}): {}", end.why);
            return code;
        }
        for h in end.lost {
            if !without.contains(&h) {
                without.push(h);
            }
        }
        crate::say!("kauri: restart {} of {max}: {}", restart + 1, end.why);
    }
    unreachable!("the last attempt returns")
}

/// Runs one attempt and waits for it.
fn run_attempt(exe: &std::path::Path, args: &[OsString], attempt: &Attempt) -> Option<ExitStatus> {
    let mut cmd = Command::new(exe);
    cmd.args(args).env(Attempt::VAR, attempt.to_var());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::say!(
                "kauri: -max-restarts: cannot start attempt {}: {e}",
                attempt.restart + 1
            );
            return None;
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = child.wait().ok();
    CHILD.store(0, Ordering::SeqCst);
    status
}

/// kauri's status for an attempt that ended with `status`: its code, or 128 + the signal
/// that killed it (as a shell says); 255 when it could not be waited for.
fn exit_code(status: Option<ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        None => 255,
    }
}

/// The file attempt `restart` writes how it ended into: made here, new and readable by this
/// user alone, in `$TMPDIR` (so nobody else's file or link can stand in its place).
fn report_file(restart: u32) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let p = std::env::temp_dir().join(format!("kauri-attempt-{}-{restart}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)?;
    Ok(p)
}
