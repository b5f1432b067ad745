//! Real applications from Debian 12's packages, as their users run them (`kauri -n N program
//! input`, no flag), under `mpirun.openmpi` and under kauri in the same test, on one host and
//! on two simulated hosts: each application's own results (LAMMPS's thermodynamics, Quantum
//! ESPRESSO's total energy, PETSc's iterations and residual, what parallel HDF5 wrote) must
//! be the native launcher's, and nothing may be left behind. When kauri served only the
//! protocol it guessed, it ran `pw.x` (an Open MPI Fortran program) and a petsc4py script as N
//! singletons and exited 0.
//!
//! The packages (`lammps`, `quantum-espresso`, `python3-petsc4py`, `python3-h5py-mpi`) come
//! from `.ci/setup`; Quantum ESPRESSO's pseudopotential from `compat-tests/apps/setup.sh`
//! (the source package's `pseudo/Si.bhs`). A missing one is a skip said on stderr, and a
//! failure under `CI=true`.

use compat_tests::{Ctx, Job, Launcher, Outcome};
use std::path::{Path, PathBuf};

const TWO_HOSTS: &[&str] = &["-launcher", "fork", "-hosts", "a,b"];

/// The inputs in `compat-tests/apps`.
fn input(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("apps")
        .join(name)
}

/// Whether `path` exists; if not, a skip (a failure under `CI=true`) naming what installs it.
fn have(path: &str, fix: &str) -> bool {
    let there = Path::new(path).exists();
    if !there {
        let why = format!("{path} not found: {fix}");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
    }
    there
}

/// `mpirun.openmpi` (as root where the tests run as root, oversubscribing the 2 cores).
fn mpirun(ctx: &Ctx, n: usize, argv: &[&str], env: &[(&str, &str)]) -> Job {
    let n = n.to_string();
    let mut a = vec!["--allow-run-as-root", "--oversubscribe", "-n", &n];
    for (k, _) in env {
        a.extend(["-x", k]);
    }
    a.extend(argv);
    env.iter().fold(
        ctx.job(Launcher::Hydra, &a)
            .program(compat_tests::libpmi::mpirun_openmpi()),
        |j, (k, v)| j.env(k, v),
    )
}

/// `kauri HOSTS -n N ARGV…`, no `--pmi`.
fn kauri(ctx: &Ctx, hosts: &[&str], n: usize, argv: &[&str], env: &[(&str, &str)]) -> Job {
    let n = n.to_string();
    let mut a: Vec<&str> = hosts.to_vec();
    a.extend(["-n", &n]);
    a.extend(argv);
    env.iter().fold(
        ctx.job(Launcher::Kauri, &a).program(ctx.kauri()),
        |j, (k, v)| j.env(k, v),
    )
}

/// Runs `job`, prints it, and checks it succeeded.
fn ok(what: &str, job: Job) -> Outcome {
    let o = job.run();
    eprintln!("=== {what}\n{o}");
    assert_eq!(o.code, Some(0), "{what}: {o}");
    o
}

/// The lines of `o`'s stdout that `keep` keeps.
fn results(o: &Outcome, keep: impl Fn(&str) -> bool) -> Vec<String> {
    o.stdout
        .lines()
        .filter(|l| keep(l))
        .map(|l| l.trim().to_string())
        .collect()
}

/// LAMMPS: the Lennard-Jones melt of its examples (4,000 atoms, 250 steps) on 2 ranks, its
/// input on stdin (`lmp < in.melt`, the usual way): every thermodynamic row and the count of
/// ranks as under mpirun.
#[test]
fn lammps_melt() {
    if !have("/usr/bin/lmp", "apt-get install lammps (.ci/setup)") {
        return;
    }
    let ctx = Ctx::new("apps_lammps");
    let melt = std::fs::read(input("in.melt")).unwrap();
    // The thermodynamic rows ("step temp epair emol etotal press") and the world it ran in
    // ("… with 2 MPI tasks x 1 OpenMP threads", after a CPU share that varies run to run).
    let rows = |o: &Outcome| -> Vec<String> {
        o.stdout
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() == 6 && w.iter().all(|x| x.parse::<f64>().is_ok()) {
                    Some(w.join(" "))
                } else {
                    let tasks = l.contains("MPI tasks");
                    l.find("with ")
                        .filter(|_| tasks)
                        .map(|i| l[i..].to_string())
                }
            })
            .collect()
    };
    let argv = ["lmp", "-log", "none"];
    let native = ok("mpirun", mpirun(&ctx, 2, &argv, &[]).stdin(melt.clone()));
    let want = rows(&native);
    assert_eq!(want.len(), 7, "{native}");
    assert_eq!(want[6], "with 2 MPI tasks x 1 OpenMP threads", "{native}");
    for hosts in [&[][..], TWO_HOSTS] {
        let o = ok(
            "kauri",
            kauri(&ctx, hosts, 2, &argv, &[]).stdin(melt.clone()),
        );
        assert_eq!(rows(&o), want, "{hosts:?}: {o}");
    }
    ctx.assert_no_leftovers();
}

/// Quantum ESPRESSO: `pw.x`, an Open MPI Fortran program, on silicon (an SCF cycle) with 2
/// ranks, its input given with `-in` and on stdin: the total energy and "running on 2
/// processors" as under mpirun (before: twice "running on 1 processors", status 0).
#[test]
fn quantum_espresso_pw_x() {
    let cache = compat_tests::cache_dir().join("apps");
    let pseudo = cache.join("pseudo/Si.bhs");
    if !have(
        "/usr/bin/pw.x",
        "apt-get install quantum-espresso (.ci/setup)",
    ) || !have(
        &pseudo.to_string_lossy(),
        "compat-tests/apps/setup.sh (.ci/setup)",
    ) {
        return;
    }
    let ctx = Ctx::new("apps_pw");
    std::fs::create_dir_all(ctx.dir.join("pseudo")).unwrap();
    std::fs::copy(&pseudo, ctx.dir.join("pseudo/Si.bhs")).unwrap();
    let pw_in = ctx.dir.join("si.pw.in");
    std::fs::copy(input("si.pw.in"), &pw_in).unwrap();
    let text = std::fs::read(&pw_in).unwrap();
    let keep = |l: &str| l.starts_with('!') || l.contains("running on");
    let argv = ["pw.x", "-in", "si.pw.in"];
    let native = ok("mpirun", mpirun(&ctx, 2, &argv, &[]));
    let want = results(&native, keep);
    assert_eq!(want.len(), 2, "{native}");
    assert!(want[0].ends_with("running on     2 processors"), "{native}");
    for hosts in [&[][..], TWO_HOSTS] {
        let o = ok("kauri -in", kauri(&ctx, hosts, 2, &argv, &[]));
        assert_eq!(results(&o, keep), want, "{hosts:?}: {o}");
        let o = ok(
            "kauri <",
            kauri(&ctx, hosts, 2, &["pw.x"], &[]).stdin(text.clone()),
        );
        assert_eq!(results(&o, keep), want, "{hosts:?}: {o}");
    }
    ctx.assert_no_leftovers();
}

/// Debian's petsc4py reaches its PETSc through `PETSC_DIR` (the package leaves the
/// `/usr/lib/petsc` link to the development package).
const PETSC_DIR: &str = "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real";

/// petsc4py: a 64 x 64 Poisson problem solved with CG on 2 and 4 ranks: the world size, the
/// iterations and the residual as under mpirun (before: size 1 on every rank, status 0).
#[test]
fn petsc4py_poisson() {
    if !have(PETSC_DIR, "apt-get install python3-petsc4py (.ci/setup)") {
        return;
    }
    let ctx = Ctx::new("apps_petsc4py");
    let script = input("petsc_ksp.py").to_string_lossy().into_owned();
    let argv = ["/usr/bin/python3", &script];
    let env = [("PETSC_DIR", PETSC_DIR)];
    let keep = |l: &str| l.starts_with("KSP ");
    for n in [2, 4] {
        let native = ok("mpirun", mpirun(&ctx, n, &argv, &env));
        let want = results(&native, keep);
        assert_eq!(want.len(), 1, "{native}");
        assert!(want[0].starts_with(&format!("KSP size={n} ")), "{native}");
        for hosts in [&[][..], TWO_HOSTS] {
            let o = ok("kauri", kauri(&ctx, hosts, n, &argv, &env));
            assert_eq!(results(&o, keep), want, "{hosts:?} -n {n}: {o}");
        }
    }
    ctx.assert_no_leftovers();
}

/// h5py's parallel `mpio` driver (Debian's h5py picks its MPI build at import from the
/// launcher's variables): every rank writes its slice of one file, rank 0 reads it back.
#[test]
fn h5py_mpio() {
    if !have(
        "/usr/lib/python3/dist-packages/h5py/_debian_h5py_mpi",
        "apt-get install python3-h5py-mpi (.ci/setup)",
    ) {
        return;
    }
    let ctx = Ctx::new("apps_h5py");
    let script = input("h5py_mpio.py").to_string_lossy().into_owned();
    let keep = |l: &str| l.starts_with("h5py mpio");
    for n in [2, 4] {
        let file = format!("native-{n}.h5");
        let native = ok(
            "mpirun",
            mpirun(&ctx, n, &["/usr/bin/python3", &script, &file], &[]),
        );
        let want = results(&native, keep);
        assert_eq!(
            want,
            [format!("h5py mpio size={n} sum={}", 4 * n * (n + 1) / 2)]
        );
        for (i, hosts) in [&[][..], TWO_HOSTS].into_iter().enumerate() {
            let file = format!("kauri-{n}-{i}.h5");
            let o = ok(
                "kauri",
                kauri(&ctx, hosts, n, &["/usr/bin/python3", &script, &file], &[]),
            );
            assert_eq!(results(&o, keep), want, "{hosts:?} -n {n}: {o}");
        }
    }
    ctx.assert_no_leftovers();
}

/// What a terminal shows: the lines `script` (util-linux) copies from the pseudo-terminal it
/// gives kauri, as they come.
struct Terminal {
    rx: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Terminal {
    /// Reads lines until `done` holds for what was seen (within 300 s, else the test fails).
    fn until(&mut self, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("never saw {what} on the terminal: {:#?}", self.seen),
            }
        }
    }
}

/// The step of a thermodynamic row of LAMMPS ("step temp epair emol etotal press").
fn thermo_step(line: &str) -> Option<u64> {
    let w: Vec<&str> = line.split_whitespace().collect();
    (w.len() == 6 && w[1..].iter().all(|x| x.parse::<f64>().is_ok()))
        .then(|| w[0].parse().ok())
        .flatten()
}

/// `script` running kauri, killed if the test ends first (a failed one): the terminal then
/// hangs up, and kauri ends its job on the `SIGHUP`.
struct Script(std::process::Child);

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `kauri ARGS` run by `script` on a pseudo-terminal of its own, as a person at a terminal
/// runs it; stdin is the terminal's keyboard (a `^C` written to it is a Ctrl-C).
fn kauri_on_a_terminal(ctx: &Ctx, args: &[&str]) -> (Script, Terminal) {
    use std::io::BufRead;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let kauri = ctx.kauri().to_string_lossy().into_owned();
    let cmd = std::iter::once(kauri.as_str())
        .chain(args.iter().copied())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &format!("exec {cmd}"), "/dev/null"])
        .env(compat_tests::MARKER_VAR, &ctx.marker)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("script");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l.trim_end_matches('\r').to_string()).is_err() {
                break;
            }
        }
    });
    (
        Script(child),
        Terminal {
            rx,
            seen: Vec::new(),
        },
    )
}

/// LAMMPS under kauri, on a terminal, shows its thermodynamic rows as it computes
/// them, as under mpirun: each rank's stdout is a pseudo-terminal, so its C stdio writes a
/// line at a time. The melt's 250 steps, then LAMMPS waits (its `shell` command) for a file
/// the test makes only once the rows of steps 0 to 250 are on the terminal, then 50 steps
/// more; on one host and on two simulated hosts. (Before, the rows sat in LAMMPS's 4 KiB
/// buffer of a pipe, and the test waited for ever.) Then Ctrl-C typed while LAMMPS waits: the
/// job ends with status 130, nothing left, every row it printed on the terminal.
#[test]
fn lammps_on_a_terminal_shows_each_row_as_it_comes() {
    if !have("/usr/bin/lmp", "apt-get install lammps (.ci/setup)")
        || !have("/usr/bin/script", "apt-get install bsdutils")
    {
        return;
    }
    let ctx = Ctx::new("apps_lammps_terminal");
    let gate = ctx.dir.join("gate");
    let wait = ctx.dir.join("wait_for_gate.sh");
    std::fs::write(
        &wait,
        format!(
            "#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.1; done\n",
            gate.display()
        ),
    )
    .unwrap();
    let melt = std::fs::read_to_string(input("in.melt")).unwrap();
    let gated = ctx.dir.join("in.melt.gated");
    std::fs::write(
        &gated,
        format!("{melt}shell sh {}\nrun 50\n", wait.display()),
    )
    .unwrap();
    let gated = gated.to_string_lossy().into_owned();
    let first_run = |seen: &[String]| {
        let steps: Vec<u64> = seen.iter().filter_map(|l| thermo_step(l)).collect();
        (0..=250).step_by(50).all(|s| steps.contains(&s))
    };
    for hosts in [&[][..], TWO_HOSTS] {
        let _ = std::fs::remove_file(&gate);
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "lmp", "-log", "none", "-in", &gated]);
        let (mut script, mut term) = kauri_on_a_terminal(&ctx, &args);
        term.until("the rows of steps 0 to 250", first_run);
        assert!(
            script.0.try_wait().unwrap().is_none(),
            "{hosts:?}: ended early: {:#?}",
            term.seen
        );
        std::fs::write(&gate, "").unwrap();
        term.until("the row of step 300", |seen| {
            seen.iter().any(|l| thermo_step(l) == Some(300))
        });
        let status = script.0.wait().unwrap();
        assert!(status.success(), "{hosts:?}: {status}: {:#?}", term.seen);
    }
    // Ctrl-C while LAMMPS waits for a gate that never comes.
    let _ = std::fs::remove_file(&gate);
    let (mut script, mut term) =
        kauri_on_a_terminal(&ctx, &["-n", "2", "lmp", "-log", "none", "-in", &gated]);
    term.until("the rows of steps 0 to 250", first_run);
    {
        use std::io::Write;
        let keyboard = script.0.stdin.as_mut().unwrap();
        keyboard.write_all(b"\x03").unwrap();
        keyboard.flush().unwrap();
    }
    let status = script.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{:#?}", term.seen);
    ctx.assert_no_leftovers();
}
