//! A newcomer's habits: Open MPI's `mpirun` spellings and Hydra's, side by side
//! with kauri's own, give the same job; what kauri does otherwise is refused in one line that
//! names its spelling; `-h` is help only alone; a count given twice is refused; `-v` writes
//! colour only to a terminal.
//!
//! Where Open MPI's `mpirun` is installed (Debian's `openmpi-bin`), the Open MPI spelling is
//! also run under it, and its output compared with kauri's.

mod common;
use common::{kauri, lines, stderr, KAURI};
use std::process::Command;

/// kauri's output (sorted lines) and status for `args`.
fn outcome(args: &[&str]) -> (Vec<String>, Option<i32>, String) {
    let o = kauri(args, None, &[]);
    (lines(&o), o.status.code(), stderr(&o))
}

/// Open MPI's `mpirun` runs `args` (as root it needs `--allow-run-as-root`): its sorted
/// stdout lines, or `None` when it is not installed.
fn mpirun(args: &[&str]) -> Option<Vec<String>> {
    let exe = ["/usr/bin/mpirun.openmpi", "/usr/bin/orterun"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let o = common::run_under_watchdog(
        Command::new(exe)
            .args(["--allow-run-as-root", "--oversubscribe"])
            .args(args),
    );
    assert!(o.status.success(), "mpirun {args:?}: {}", stderr(&o));
    Some(lines(&o))
}

#[test]
fn open_mpi_spellings_run_the_job_hydras_do() {
    let pairs: &[(&[&str], &[&str])] = &[
        (
            &["-H", "localhost:2", "-n", "2", "hostname"],
            &["-hosts", "localhost:2", "-n", "2", "hostname"],
        ),
        (&["-c", "3", "echo", "x"], &["-n", "3", "echo", "x"]),
        (
            &["-x", "FOO=bar", "-n", "2", "printenv", "FOO"],
            &["-genv", "FOO", "bar", "-n", "2", "printenv", "FOO"],
        ),
        (
            &[
                "--mca",
                "btl",
                "self",
                "-n",
                "1",
                "printenv",
                "OMPI_MCA_btl",
            ],
            &[
                "-genv",
                "OMPI_MCA_btl",
                "self",
                "-n",
                "1",
                "printenv",
                "OMPI_MCA_btl",
            ],
        ),
        (
            &["--tag-output", "-n", "2", "echo", "hi"],
            &["-l", "-n", "2", "echo", "hi"],
        ),
        (
            &[
                "--oversubscribe",
                "--allow-run-as-root",
                "-n",
                "2",
                "echo",
                "y",
            ],
            &["-n", "2", "echo", "y"],
        ),
        (
            &[
                "-launcher",
                "fork",
                "-H",
                "a,b",
                "-N",
                "2",
                "printenv",
                "KAURI_HOST",
            ],
            &[
                "-launcher",
                "fork",
                "-hosts",
                "a,b",
                "-ppn",
                "2",
                "printenv",
                "KAURI_HOST",
            ],
        ),
        (
            &[
                "-launcher",
                "fork",
                "-H",
                "a,b",
                "--map-by",
                "ppr:2:node",
                "printenv",
                "KAURI_HOST",
            ],
            &[
                "-launcher",
                "fork",
                "-hosts",
                "a,b",
                "-ppn",
                "2",
                "printenv",
                "KAURI_HOST",
            ],
        ),
        (
            &[
                "-launcher",
                "fork",
                "-H",
                "a,b",
                "--npernode",
                "1",
                "printenv",
                "KAURI_HOST",
            ],
            &[
                "-launcher",
                "fork",
                "-hosts",
                "a,b",
                "-ppn",
                "1",
                "printenv",
                "KAURI_HOST",
            ],
        ),
    ];
    for (ompi, hydra) in pairs {
        let (o_out, o_code, o_err) = outcome(ompi);
        let (h_out, h_code, h_err) = outcome(hydra);
        assert_eq!(o_code, Some(0), "{ompi:?}: {o_err}");
        assert_eq!(h_code, Some(0), "{hydra:?}: {h_err}");
        assert!(!o_out.is_empty(), "{ompi:?}: no output");
        assert_eq!(o_out, h_out, "{ompi:?} against {hydra:?}");
        assert!(!o_err.contains("kauri:"), "{ompi:?}: {o_err}");
    }
    // The same command lines under Open MPI's own launcher print the same.
    for args in [
        &["-H", "localhost:2", "-n", "2", "hostname"][..],
        &["-x", "FOO=bar", "-n", "2", "printenv", "FOO"],
        &["-c", "3", "echo", "x"],
    ] {
        if let Some(theirs) = mpirun(args) {
            assert_eq!(outcome(args).0, theirs, "{args:?}");
        }
    }
}

#[test]
fn open_mpis_other_outputs() {
    // --merge-stderr-to-stdout: the rank's stderr comes out on kauri's stdout.
    let o = kauri(
        &[
            "--merge-stderr-to-stdout",
            "-n",
            "1",
            "sh",
            "-c",
            "echo out; echo err >&2",
        ],
        None,
        &[],
    );
    assert_eq!(lines(&o), ["err", "out"], "{}", stderr(&o));
    assert!(!stderr(&o).contains("err"), "{}", stderr(&o));
    // --display-map and -print-all-exitcodes: one line per host each.
    let o = kauri(
        &[
            "--display-map",
            "-print-all-exitcodes",
            "-launcher",
            "fork",
            "-hosts",
            "a:2,b:2",
            "-n",
            "4",
            "sh",
            "-c",
            "exit 0",
        ],
        None,
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for want in [
        "kauri: map: a runs 2 ranks (0-1)",
        "kauri: map: b runs 2 ranks (2-3)",
        "kauri: exit codes on a (ranks 0-1): 0,0",
        "kauri: exit codes on b (ranks 2-3): 0,0",
    ] {
        assert!(err.lines().any(|l| l == want), "{want}: {err}");
    }
    // --timeout as MPIEXEC_TIMEOUT, which it overrides.
    let o = kauri(
        &["--timeout", "2", "-n", "1", "sleep", "600"],
        None,
        &[("MPIEXEC_TIMEOUT", "500")],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out after 2 s"), "{}", stderr(&o));
}

#[test]
fn refusals_are_one_line_naming_kauris_spelling() {
    for (args, says) in [
        (
            &["-h", "-n", "2", "true"][..],
            "-h shows the help and takes nothing else",
        ),
        (&["-n", "2", "-l", "-n", "3", "true"], "given twice"),
        (
            &["--output-filename", "out", "-n", "2", "true"],
            "-outfile-pattern out/rank.%r.out",
        ),
        (&["--stdin", "all", "-n", "2", "true"], "rank 0 only"),
        (&["-gdb", "-n", "2", "true"], "gdb -batch"),
        (
            &["--map-by", "ppr:1:socket", "-n", "2", "true"],
            "-map-by socket",
        ),
    ] {
        let o = kauri(args, None, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(255), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing runs");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // -H is Open MPI's hosts, never the help.
    let o = kauri(&["-H", "localhost:2", "-n", "2", "hostname"], None, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(lines(&o).len(), 2);
}

#[test]
fn a_program_of_the_working_directory_typed_without_dot_slash_is_named() {
    let (dir, _) = common::script("habits-here", "hello-here", "#!/bin/sh\necho hi\n");
    let o = common::run_under_watchdog(
        Command::new(KAURI)
            .args(["-n", "1", "hello-here"])
            .current_dir(&dir),
    );
    let err = stderr(&o);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(err.contains("(./hello-here exists)"), "{err}");
}

#[test]
fn verbose_logs_have_no_colour_in_a_file_or_a_pipe() {
    let o = kauri(&["-v", "-n", "2", "true"], None, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("INFO"), "-v logs: {err}");
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");
}
