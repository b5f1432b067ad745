//! The root's policy, as pure functions: what a rank's end means for the job, and kauri's exit
//! status. The front end applies them; they see no socket, no process and no clock, so every
//! rule is tested here on its own.

/// Exit status when kauri itself ends the job (timeout, a failed launch, a fence that can
/// never complete), as Hydra does.
pub const STATUS_LAUNCHER: i32 = 255;

/// `SIGTERM`'s number: the teardown's first signal to the ranks.
pub const SIGTERM: i32 = 15;

/// `SIGKILL`'s number: the teardown's last.
pub const SIGKILL: i32 = 9;

/// Why the job ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A rank aborted with this code.
    Abort(i32),
    /// `MPIEXEC_TIMEOUT` ran out.
    Timeout,
    /// kauri got this signal.
    Signal(i32),
    /// A rank failed, a host was lost, a launch failed, or a fence can never complete.
    Failed,
    /// kauri's stdout or stderr closed while the ranks wrote to it.
    OutputClosed,
}

/// What one rank's end means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitVerdict {
    /// Nothing: it succeeded, or the job is already ending, or the user asked to keep going.
    Nothing,
    /// It failed (a non-zero code or a signal): the job ends.
    Failed,
    /// It exited 0 without finalizing PMI while other ranks still use it: they can never
    /// complete a fence with it, so the job ends. The text says what it did.
    LeftPmi(&'static str),
}

/// The verdict on a rank that ended with `code` (`None`: killed by a signal). `ending`: the job
/// is already ending; `auto_cleanup`: a failure ends the job (`-disable-auto-cleanup` turns it
/// off); `others_in_pmi`: another rank has initialized PMI and neither finalized nor ended.
pub fn on_exit(
    code: Option<i32>,
    initialized: bool,
    finalized: bool,
    ending: bool,
    auto_cleanup: bool,
    others_in_pmi: bool,
) -> ExitVerdict {
    if ending {
        return ExitVerdict::Nothing;
    }
    let failed = code != Some(0);
    if failed {
        return if auto_cleanup {
            ExitVerdict::Failed
        } else {
            ExitVerdict::Nothing
        };
    }
    if !finalized && others_in_pmi {
        return ExitVerdict::LeftPmi(left_pmi(initialized));
    }
    ExitVerdict::Nothing
}

/// How a rank that ended without finalize left PMI.
pub fn left_pmi(initialized: bool) -> &'static str {
    if initialized {
        "exited without finalizing PMI"
    } else {
        "exited before PMI init"
    }
}

/// SIGPIPE's number (Linux's, on every architecture kauri builds for; a unit test checks it
/// against libc's), so that this module needs no libc.
const SIGPIPE: i32 = 13;

/// Linux's signal numbers and names, for messages ([`signal_name`]). Plain numbers keep the
/// policy free of libc; a unit test checks each against libc's.
const SIGNAL_NAMES: [(i32, &str); 15] = [
    (1, "SIGHUP"),
    (2, "SIGINT"),
    (3, "SIGQUIT"),
    (4, "SIGILL"),
    (5, "SIGTRAP"),
    (6, "SIGABRT"),
    (7, "SIGBUS"),
    (8, "SIGFPE"),
    (9, "SIGKILL"),
    (10, "SIGUSR1"),
    (11, "SIGSEGV"),
    (12, "SIGUSR2"),
    (13, "SIGPIPE"),
    (14, "SIGALRM"),
    (15, "SIGTERM"),
];

/// The name of a signal, for messages: `SIGSEGV`, or `signal` for one without a name here.
pub fn signal_name(sig: i32) -> &'static str {
    SIGNAL_NAMES
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or("signal", |(_, name)| name)
}

/// What a rank's end adds to the exit status, and the words for it: `None` for a success;
/// a code for itself, a signal as its number (Hydra reports 11 for a segfault).
pub fn rank_failure(code: Option<i32>, signal: Option<i32>) -> Option<(i32, String)> {
    match (code, signal) {
        (Some(0), _) => None,
        (Some(c), _) => Some((c, format!("exited with code {c}"))),
        (None, Some(s)) => Some((s, format!("killed by signal {s} ({})", signal_name(s)))),
        (None, None) => Some((1, "ended".into())),
    }
}

/// Whether a rank's failure is left out of kauri's exit status: under `-with-ft`
/// (`fault_tolerant`) a rank killed by a signal is a fault its job's survivors were told of
/// and recovered from, and PRRTE's `--with-ft ulfm` sets no exit code for it (0 when the
/// survivors finish). A non-zero exit is the program's own verdict and still counts.
pub fn tolerated(fault_tolerant: bool, signal: Option<i32>) -> bool {
    fault_tolerant && signal.is_some()
}

/// What a job was served, for [`singleton_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// PMIx (alone or beside PMI-1/PMI-2).
    Pmix,
    /// PMI-1/PMI-2 only, as `--pmi=pmi1` or `pmi2` asked.
    Pmi,
    /// PMI-1/PMI-2 only, for Open MPI's PMI-1 path (`FLUX_PMI_LIBRARY_PATH`).
    FluxPmi,
}

/// The line that ends a job a rank of which (`who`, on `host`) runs as an Open MPI singleton
/// ([`crate::host::ompi`]), naming what would have served it.
pub fn singleton_line(who: &str, host: &str, served: Served) -> String {
    let why = match served {
        Served::Pmix => "kauri offered it PMIx, but it did not connect (were its PMIX_* variables cleared?)",
        Served::Pmi => {
            "Open MPI wires up through PMIx, which --pmi=pmi1 and --pmi=pmi2 do not offer (drop the flag)"
        }
        Served::FluxPmi => {
            "its PMI-1 path did not start (is FLUX_PMI_LIBRARY_PATH a libpmi.so it can load?)"
        }
    };
    format!("kauri: {who} on {host} runs alone as an Open MPI singleton: {why}; ending the job")
}

/// The line kauri prints at the end of a job of `size` ranks (more than one) that `spoke`
/// none of: no rank ever connected to the PMI-1/PMI-2 server or the PMIx server `offered`;
/// with it, whether the run fails (status 255). An MPI library that finds no server it
/// speaks runs as a singleton, a world of 1: N copies of "rank 0 of 1", status 0, and no
/// word, the signature of a wrong `--pmi` (Open MPI 5 served PMI, Intel MPI or MPICH served
/// PMIx only) or of ranks that lost kauri's variables (`env -i`, a container's `--cleanenv`).
///
/// Only when the job shows an `mpi` ([`crate::plan::job::MpiSign`]): a segment's program is linked to an MPI or
/// a PMI library or names one past itself (an interpreter's `mpi4py`, a wrapped MPI program),
/// or a rank left a singleton's trace (Open MPI 4.1's `orted`, Open MPI 5's session
/// directory: [`crate::host::ompi`]). A job of programs that never use an MPI (`hostname`, a
/// shell script, plain Python) never speaks PMI either and gets no line. `None` otherwise.
///
/// The run fails when a flag chose one protocol (the other would have served), and when a
/// segment's program is itself linked to an MPICH-ABI MPI ([`crate::plan::job::MpiSign::LinkedPmi`]): it
/// starts its MPI, whose singletons leave no trace to see them by while they run. A word or
/// a wrapped program is only a sign (`python3 -c 'import mpi4py'` starts no MPI), and Open
/// MPI's singletons end the run while they run ([`singleton_line`]).
pub fn never_wired(
    size: usize,
    spoke: usize,
    mpi: crate::plan::job::MpiSign,
    offered: crate::plan::job::Wiring,
) -> Option<(String, bool)> {
    use crate::plan::job::{MpiSign, Wiring};
    (size > 1 && spoke == 0 && mpi != MpiSign::None).then(|| {
        let (servers, hint) = match offered {
            Wiring::Pmi => (
                "the PMI-1/PMI-2 server",
                "if the program uses Open MPI (PMIx), try --pmi=pmix",
            ),
            Wiring::Pmix => (
                "the PMIx server",
                "if the program uses MPICH, Intel MPI or MVAPICH (PMI-1/PMI-2), try --pmi=pmi1",
            ),
            Wiring::Both => (
                "the PMI-1/PMI-2 and PMIx servers",
                "were the ranks' PMI_* and PMIX_* variables cleared (env -i, a container's \
                 --cleanenv), or is its MPI built without a launcher's client?",
            ),
        };
        let line = format!(
            "kauri: none of the {size} ranks connected to {servers} kauri offered: each ran \
             alone as a singleton; {hint}"
        );
        (line, offered != Wiring::Both || mpi == MpiSign::LinkedPmi)
    })
}

/// kauri's exit status: the abort code (`& 0xff`) after an abort; 255 after a timeout, or a
/// failure no rank's status explains; 128+N after signal N to kauri (SIGPIPE's when its
/// output closed); otherwise `worst`, the highest rank status. Hydra 4.0.2 ORs statuses
/// together (3 and 5 give 7); kauri takes the highest.
pub fn exit_status(ending: Option<Ending>, worst: i32) -> i32 {
    match ending {
        Some(Ending::Abort(code)) => code & 0xff,
        Some(Ending::Timeout) => STATUS_LAUNCHER,
        Some(Ending::Signal(s)) => 128 + s,
        Some(Ending::OutputClosed) => 128 + SIGPIPE,
        Some(Ending::Failed) if worst == 0 => STATUS_LAUNCHER,
        _ => worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_ends_the_job_unless_told_otherwise_or_already_ending() {
        assert_eq!(
            on_exit(Some(3), true, false, false, true, true),
            ExitVerdict::Failed
        );
        assert_eq!(
            on_exit(None, true, true, false, true, false),
            ExitVerdict::Failed,
            "a signal is a failure"
        );
        assert_eq!(
            on_exit(Some(3), true, false, false, false, true),
            ExitVerdict::Nothing,
            "-disable-auto-cleanup"
        );
        assert_eq!(
            on_exit(Some(3), true, false, true, true, true),
            ExitVerdict::Nothing,
            "a casualty of the teardown is not a cause"
        );
    }

    #[test]
    fn leaving_pmi_early_ends_the_job_only_while_others_use_it() {
        assert_eq!(
            on_exit(Some(0), true, false, false, true, true),
            ExitVerdict::LeftPmi("exited without finalizing PMI")
        );
        assert_eq!(
            on_exit(Some(0), false, false, false, false, true),
            ExitVerdict::LeftPmi("exited before PMI init"),
            "not a failure: -disable-auto-cleanup does not keep it"
        );
        assert_eq!(
            on_exit(Some(0), true, false, false, true, false),
            ExitVerdict::Nothing,
            "nobody waits for it (a program without PMI, or the last rank)"
        );
        assert_eq!(
            on_exit(Some(0), true, true, false, true, true),
            ExitVerdict::Nothing
        );
    }

    #[test]
    fn under_with_ft_only_a_signal_is_tolerated() {
        assert!(tolerated(true, Some(9)));
        assert!(
            !tolerated(true, None),
            "an exit code is the program's verdict"
        );
        assert!(
            !tolerated(false, Some(9)),
            "-disable-auto-cleanup alone: as Hydra"
        );
    }

    #[test]
    fn rank_statuses() {
        assert_eq!(rank_failure(Some(0), None), None);
        assert_eq!(
            rank_failure(Some(7), None),
            Some((7, "exited with code 7".into()))
        );
        let (s, words) = rank_failure(None, Some(11)).unwrap();
        assert_eq!(s, 11);
        assert!(words.starts_with("killed by signal 11 ("), "{words}");
    }

    #[test]
    fn exit_statuses() {
        assert_eq!(exit_status(None, 0), 0);
        assert_eq!(exit_status(None, 5), 5);
        assert_eq!(exit_status(Some(Ending::Abort(300)), 9), 300 & 0xff);
        assert_eq!(exit_status(Some(Ending::Timeout), 0), 255);
        assert_eq!(exit_status(Some(Ending::Signal(2)), 0), 130, "SIGINT");
        assert_eq!(exit_status(Some(Ending::OutputClosed), 1), 141);
        assert_eq!(exit_status(Some(Ending::Failed), 0), 255);
        assert_eq!(
            exit_status(Some(Ending::Failed), 11),
            11,
            "a failed rank's own status"
        );
    }

    #[test]
    fn a_singleton_is_one_line_naming_what_would_serve_it() {
        let l = singleton_line("rank 2", "h1", Served::Pmi);
        assert!(l.starts_with("kauri: rank 2 on h1 runs alone as an Open MPI singleton: "));
        assert!(l.contains("(drop the flag); ending the job"), "{l}");
        assert!(singleton_line("rank 0", "h", Served::Pmix).contains("PMIX_* variables"));
        assert!(singleton_line("rank 0", "h", Served::FluxPmi).contains("FLUX_PMI_LIBRARY_PATH"));
        for s in [Served::Pmi, Served::Pmix, Served::FluxPmi] {
            assert!(!singleton_line("rank 0", "h", s).contains('\n'));
        }
    }

    #[test]
    fn never_wired_only_when_nobody_spoke_and_the_job_looks_like_mpi() {
        use crate::plan::job::{MpiSign, Wiring};
        let named = MpiSign::Named;
        assert_eq!(
            never_wired(4, 0, named, Wiring::Pmi),
            Some((
                "kauri: none of the 4 ranks connected to the PMI-1/PMI-2 server kauri \
                 offered: each ran alone as a singleton; if the program uses Open MPI \
                 (PMIx), try --pmi=pmix"
                    .into(),
                true
            ))
        );
        let (line, fails) = never_wired(3, 0, named, Wiring::Pmix).unwrap();
        assert!(
            line.contains("none of the 3 ranks connected to the PMIx server")
                && line.ends_with("try --pmi=pmi1")
                && fails,
            "{line}"
        );
        let (line, fails) = never_wired(2, 0, named, Wiring::Both).unwrap();
        assert!(
            line.contains("PMI-1/PMI-2 and PMIx servers") && line.contains("--cleanenv"),
            "{line}"
        );
        assert!(
            !fails,
            "a word is only a sign: `python3 -c 'import mpi4py'`"
        );
        let (_, fails) = never_wired(2, 0, MpiSign::LinkedPmi, Wiring::Both).unwrap();
        assert!(fails, "MPICH's singletons leave no trace");
        for w in [Wiring::Pmi, Wiring::Pmix, Wiring::Both] {
            for m in [MpiSign::Named, MpiSign::LinkedPmi] {
                assert!(!never_wired(2, 0, m, w).unwrap().0.contains('\n'));
                assert_eq!(never_wired(1, 0, m, w), None, "a world of one is right");
                assert_eq!(never_wired(4, 1, m, w), None, "a rank spoke");
            }
            assert_eq!(
                never_wired(4, 0, MpiSign::None, w),
                None,
                "hostname, sh, plain Python"
            );
        }
    }
}
