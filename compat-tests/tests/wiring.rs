//! Wiring without a guess: with no `--pmi` flag every job is offered PMI-1/PMI-2
//! and PMIx side by side, and each MPI forms its world however its program reaches it: an
//! Open MPI Fortran program (linked to `libmpi_mpifh.so.40`, not `libmpi.so.40`), a C
//! program that reaches Open MPI or MPICH only through a library of its own (as a program
//! linked to PETSc or HDF5 does), and a Python script that imports mpi4py through a module
//! of its own. Before, `--pmi=auto` looked for Open MPI among the program's own libraries and
//! for words such as `mpi4py` in the script: each of these ran as N singletons, status 0.
//!
//! And what that costs a job that speaks no PMIx: nothing of the server. The library is
//! loaded only when a client knocks at the door kauri opened for it (`proto::pmix::door`).
//!
//! The same for the pip wheels' Open MPI 5: `wheel_mpis.rs`.

use compat_tests::Ctx;
use std::path::Path;
use std::process::Command;

/// The interpreter Debian's `python3-mpi4py` (Open MPI 4.1) is built for.
const PYTHON: &str = "/usr/bin/python3";

/// Each run of `argv` at 2 and 4 ranks, on one host and on two simulated hosts, prints
/// `{prefix}rank R of N` once for every R of one world, with status 0 and no line from kauri.
fn one_world_everywhere(ctx: &Ctx, argv: &[&str], prefix: &str) {
    ctx.assert_one_world_everywhere(argv, &|r, n| format!("{prefix}rank {r} of {n}"));
}

/// Quantum ESPRESSO's case: an Open MPI Fortran program names `libmpi_mpifh.so.40` and
/// reaches `libmpi.so.40` only through it.
#[test]
fn open_mpi_fortran_program_forms_its_world() {
    let ctx = Ctx::new("wiring_fortran");
    let prog = ctx.dir.join("hello_f90").to_string_lossy().into_owned();
    let src = Path::new(compat_tests::PROGRAMS_DIR).join("hello.f90");
    compat_tests::build_or_panic(
        Command::new("mpifort.openmpi")
            .arg("-o")
            .arg(&prog)
            .arg(&src),
    );
    let libs = compat_tests::needed_libraries(&prog);
    assert!(
        libs.iter().any(|l| l == "libmpi_mpifh.so.40") && !libs.iter().any(|l| l == "libmpi.so.40"),
        "{libs:?}"
    );
    one_world_everywhere(&ctx, &[&prog], "hello.f90: ");
}

/// PETSc's case: the program is linked to a library of its own, which is linked to Open MPI.
#[test]
fn open_mpi_program_through_a_library_of_its_own_forms_its_world() {
    let ctx = Ctx::new("wiring_through_lib_ompi");
    let prog = ctx.through_lib("mpicc.openmpi", &[]);
    one_world_everywhere(&ctx, &[&prog], "through_lib: ");
}

/// The same with MPICH: it takes the PMI-1 server it always had.
#[test]
fn mpich_program_through_a_library_of_its_own_forms_its_world() {
    let ctx = Ctx::new("wiring_through_lib_mpich");
    let prog = ctx.through_lib("mpicc.mpich", &[]);
    one_world_everywhere(&ctx, &[&prog], "through_lib: ");
}

/// petsc4py's case: the script imports a module (here one of its own) that imports mpi4py,
/// and no word of the script names an MPI.
#[test]
fn python_reaching_mpi4py_through_another_module_forms_its_world() {
    let ctx = Ctx::new("wiring_python_indirect");
    ctx.script("mylib.py", "from mpi4py import MPI\n");
    let app = ctx.script(
        "app.py",
        "import mylib\nc = mylib.MPI.COMM_WORLD\nprint('rank', c.Get_rank(), 'of', c.Get_size())\n",
    );
    one_world_everywhere(&ctx, &[PYTHON, &app], "");
}

/// Whether kauri's process (`pid`) has an OpenPMIx library mapped.
fn pmix_loaded(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libpmix"))
}

/// A job whose ranks never knock loads no PMIx library at all (`sleep`, an MPICH program
/// that waits after `MPI_Init`), though each rank was offered PMIx; an Open MPI job does,
/// once its ranks connect. Watched in kauri's own memory map while the job runs.
#[test]
fn the_pmix_server_starts_only_for_a_job_that_uses_it() {
    let ctx = Ctx::new("wiring_lazy_server");
    let mpich_sleeper = ctx.prog("sleeper");
    let ompi_sleeper = "from mpi4py import MPI; import time; \
                        print('rank', MPI.COMM_WORLD.Get_rank(), 'ready', flush=True); \
                        time.sleep(600)";
    for (argv, ready, loads) in [
        (&["sleep", "600"][..], false, false),
        (&[mpich_sleeper.as_str()], true, false),
        (&[PYTHON, "-c", ompi_sleeper], true, true),
    ] {
        let mut child = Command::new(ctx.kauri())
            .args(["-n", "2"])
            .args(argv)
            .env(compat_tests::MARKER_VAR, &ctx.marker)
            .env("MPIEXEC_TIMEOUT", "120")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        // The MPI programs say when they are past MPI_Init; sleep is given a moment.
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        if ready {
            for _ in 0..2 {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut out, &mut line).unwrap();
                assert!(line.contains("ready"), "{argv:?}: {line}");
            }
        } else {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let loaded = pmix_loaded(pid);
        compat_tests::signal_pid(pid, "TERM");
        let _ = child.wait();
        assert_eq!(loaded, loads, "{argv:?}: libpmix mapped in kauri: {loaded}");
    }
    ctx.assert_no_leftovers();
}

/// An MPICH program (linked to `libmpich.so.12` itself) whose ranks lose kauri's variables
/// (here the program clears them, as `env -i` or a container's `--cleanenv` would) runs as
/// N singletons, and MPICH's singletons leave no trace while they run. kauri says so at the
/// end in one line, and the run fails with 255: N copies of "rank 0 of 1" and status 0 would
/// look like success. A job that never looks like MPI (`hostname`) keeps status 0 and no line;
/// one whose ranks failed before any MPI started (`import mpi4py`, then exit 3) gets the
/// failure's line and status, and no word of singletons.
#[test]
fn mpich_singletons_fail_the_run() {
    let ctx = Ctx::new("wiring_mpich_singletons");
    let prog = ctx.prog("cleared_env");
    let libs = compat_tests::needed_libraries(&prog);
    assert!(libs.iter().any(|l| l.starts_with("libmpich")), "{libs:?}");
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
        let mut a: Vec<&str> = hosts.to_vec();
        a.extend(["-n", "2", &prog]);
        let o = ctx
            .job(compat_tests::Launcher::Kauri, &a)
            .program(ctx.kauri())
            .run();
        assert_eq!(o.code, Some(255), "{hosts:?}: {o}");
        assert_eq!(
            o.sorted_stdout(),
            ["cleared rank 0 of 1", "cleared rank 0 of 1"],
            "{hosts:?}: {o}"
        );
        let lines: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.starts_with("kauri:"))
            .collect();
        assert_eq!(lines.len(), 1, "{hosts:?}: {o}");
        assert!(
            lines[0].starts_with(
                "kauri: none of the 2 ranks connected to the PMI-1/PMI-2 and PMIx servers"
            ) && lines[0].contains("--cleanenv"),
            "{hosts:?}: {o}"
        );
        let o = ctx
            .job(
                compat_tests::Launcher::Kauri,
                &[hosts, &["-n", "2", "hostname"]].concat(),
            )
            .program(ctx.kauri())
            .run();
        assert_eq!(o.code, Some(0), "{hosts:?}: {o}");
        assert!(!o.stderr.contains("kauri:"), "{hosts:?}: {o}");
        let failed = [
            hosts,
            &["-n", "2", PYTHON, "-c", "import sys, mpi4py; sys.exit(3)"],
        ];
        let o = ctx
            .job(compat_tests::Launcher::Kauri, &failed.concat())
            .program(ctx.kauri())
            .run();
        assert_eq!(o.code, Some(3), "{hosts:?}: {o}");
        assert!(o.stderr.contains("exited with code 3"), "{hosts:?}: {o}");
        assert!(!o.stderr.contains("singleton"), "{hosts:?}: {o}");
    }
    ctx.assert_no_leftovers();
}
