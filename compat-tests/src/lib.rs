//! Helpers shared by the compatibility tests: finding peers, building the C programs once,
//! running a job under a launcher (kauri or `mpiexec.hydra`) with a timeout, and checking
//! that a job left no process behind.
//!
//! Missing peers are test failures, never silent skips: every such panic names the Debian
//! package to install.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

pub mod libpmi;

/// The C sources and scripts of `programs/`.
pub const PROGRAMS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/programs");

/// Programs compiled with `mpicc.mpich`.
const MPI_PROGRAMS: &[&str] = &[
    "hello",
    "ring",
    "collectives",
    "abort",
    "segv",
    "early_exit",
    "stdin",
    "sleeper",
    "cleared_env",
    "singleton",
    "restart",
];
/// Programs compiled with `cc … -lpmi2` (Slurm's PMI-2 client).
const PMI2_PROGRAMS: &[&str] = &["libpmi2_check"];
/// Scripts copied as they are.
const SCRIPTS: &[&str] = &["env_only.sh"];

/// Default wall-clock limit of one job: generous, the machines have 2 cores and are
/// oversubscribed. Reaching it is a test failure (the job hung), never a measurement.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// The environment variable carrying a test's unique marker into every process of its job
/// (both launchers forward the whole environment), so leftovers can be attributed.
pub const MARKER_VAR: &str = "KAURI_COMPAT_MARKER";

/// Jobs run one at a time: with 2 cores, several busy-polling MPI jobs at once only make
/// everything slower and timeouts less meaningful.
static JOB_LOCK: Mutex<()> = Mutex::new(());

/// Which process manager launches the job. Both get the same (Hydra) command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    Kauri,
    Hydra,
}

impl Launcher {
    pub const BOTH: [Launcher; 2] = [Launcher::Hydra, Launcher::Kauri];

    /// The launcher's executable; panics (test failure) with instructions if it is missing.
    pub fn executable(self) -> PathBuf {
        match self {
            Launcher::Hydra => hydra(),
            Launcher::Kauri => kauri(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Launcher::Kauri => "kauri",
            Launcher::Hydra => "mpiexec.hydra",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------------------
// Finding peers and binaries

pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `mpiexec.hydra` from PATH (Debian package `mpich`).
pub fn hydra() -> PathBuf {
    which("mpiexec.hydra").unwrap_or_else(|| {
        panic!("mpiexec.hydra not found in PATH: install the Debian package `mpich`")
    })
}

/// The cargo target dir of this build: `CARGO_TARGET_DIR` if set, otherwise derived from the
/// test executable (`<target>/debug/deps/<test>`).
pub fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        let d = PathBuf::from(d);
        return if d.is_absolute() {
            d
        } else {
            workspace_root().join(d)
        };
    }
    let exe = std::env::current_exe().expect("current_exe");
    // <target>/<profile>/deps/<exe>
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace_root().join("target"))
}

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compat-tests has a parent")
        .to_path_buf()
}

/// Runs `$CARGO build -q -p <package> --bin <bin>` and returns `<target>/debug/<bin>`.
fn cargo_bin(package: &str, bin: &str) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir();
    let out = Command::new(&cargo)
        .args(["build", "-q", "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo build -p {package} --bin {bin}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let path = target.join("debug").join(bin);
    if !path.is_file() {
        return Err(format!("{} was not produced", path.display()));
    }
    Ok(path)
}

/// The kauri binary, built once per test run; `KAURI_BIN=/path` tests that binary instead.
pub fn kauri() -> PathBuf {
    static KAURI: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match KAURI.get_or_init(|| match std::env::var_os("KAURI_BIN") {
        Some(p) if Path::new(&p).is_file() => Ok(PathBuf::from(p)),
        Some(p) => Err(format!("KAURI_BIN={p:?} is not a file")),
        None => cargo_bin("kauri", "kauri"),
    }) {
        Ok(p) => p.clone(),
        Err(e) => panic!("kauri binary unavailable: {e}"),
    }
}

/// pmi-wire's `pmi-load` rank program, built once per test run.
pub fn pmi_load() -> PathBuf {
    static PMI_LOAD: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PMI_LOAD.get_or_init(|| cargo_bin("pmi-wire", "pmi-load")) {
        Ok(p) => p.clone(),
        Err(e) => panic!("pmi-load binary unavailable: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Building the C programs

pub(crate) fn run_root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = std::env::temp_dir();
        remove_stale_run_dirs(&base);
        let root = base.join(format!("kauri-compat-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create the run directory");
        root
    })
}

/// Removes `kauri-compat-<pid>` directories of earlier runs whose process is gone and which
/// nothing changed for [`STALE_AFTER`]. The age matters: a run in another PID namespace
/// (a container, `unshare --pid`) sharing this `/tmp` has a pid that means nothing here, and
/// removing its directory failed that run's tests.
fn remove_stale_run_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("kauri-compat-") else {
            continue;
        };
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if old && pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// How long a run's directory must be untouched before another run removes it.
const STALE_AFTER: Duration = Duration::from_secs(12 * 3600);

/// Runs the build command `cmd`, failing the test with its output when it fails.
pub fn build_or_panic(cmd: &mut Command) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The libraries `file` names (`DT_NEEDED`), as `readelf -d` prints them.
pub fn needed_libraries(file: &str) -> Vec<String> {
    let o = Command::new("readelf")
        .args(["-d", file])
        .output()
        .unwrap_or_else(|e| panic!("readelf: {e}"));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.trim_end_matches(']').to_string()))
        .collect()
}

pub(crate) fn compile(cc: &Path, src: &Path, out: &Path, libs: &[&str]) -> Result<(), String> {
    let res = Command::new(cc)
        .arg("-O1")
        .arg("-Wall")
        .arg("-o")
        .arg(out)
        .arg(src)
        .args(libs)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cc.display()))?;
    if res.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed ({}):\n{}",
            cc.display(),
            src.display(),
            res.status,
            String::from_utf8_lossy(&res.stderr)
        ))
    }
}

fn build_programs() -> Result<PathBuf, String> {
    let bin = run_root().join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let src = Path::new(PROGRAMS_DIR);

    let mpicc = which("mpicc.mpich").ok_or(
        "mpicc.mpich not found in PATH: install the Debian packages `mpich` and `libmpich-dev`",
    )?;
    for p in MPI_PROGRAMS {
        compile(&mpicc, &src.join(format!("{p}.c")), &bin.join(p), &[])?;
    }

    if !Path::new("/usr/include/slurm/pmi2.h").is_file() {
        return Err(
            "/usr/include/slurm/pmi2.h not found: install the Debian package \
                    `libpmi2-0-dev` (Slurm's PMI-2 client library)"
                .into(),
        );
    }
    let cc = which("cc")
        .or_else(|| which("gcc"))
        .ok_or("no C compiler (cc): install the Debian package `gcc`")?;
    for p in PMI2_PROGRAMS {
        compile(&cc, &src.join(format!("{p}.c")), &bin.join(p), &["-lpmi2"])
            .map_err(|e| format!("{e}\n(libpmi2 comes with the Debian package `libpmi2-0-dev`)"))?;
    }

    for s in SCRIPTS {
        std::fs::copy(src.join(s), bin.join(s)).map_err(|e| format!("copy {s}: {e}"))?;
    }
    Ok(bin)
}

/// The directory holding every compiled program, built once per test run.
pub fn programs_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(build_programs) {
        Ok(p) => p.clone(),
        Err(e) => panic!("building the test programs failed: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// MPICH's ch3 builds and pmi-dyn (dynamic processes)

/// pmi-wire's `pmi-dyn` rank program (spawn and the name service), built once per test run.
pub fn pmi_dyn() -> PathBuf {
    static PMI_DYN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PMI_DYN.get_or_init(|| cargo_bin("pmi-wire", "pmi-dyn")) {
        Ok(p) => p.clone(),
        Err(e) => panic!("pmi-dyn binary unavailable: {e}"),
    }
}

/// Where `.ci/setup` keeps what it builds and downloads: `${KAURI_CACHE:-$HOME/.cache/kauri}`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("KAURI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kauri")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache/kauri"))
}

/// Something a test needs is not there: under `CI=true` a failure (a panic naming `what`
/// and `fix`), else a skip said on stderr. Returns `there`: false means the caller returns.
pub fn have(what: &str, fix: &str, there: bool) -> bool {
    if !there {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{what} is missing: {fix}");
        }
        eprintln!("SKIPPED: {what} is missing ({fix})");
    }
    there
}

/// The `examples` directory of the OpenPMIx source package that
/// `compat-tests/pmix-examples/fetch-source.sh` fetched into the cache, if any (the newest
/// version that has the file `needs`).
pub fn pmix_examples_dir(needs: &str) -> Option<PathBuf> {
    let src = cache_dir().join("pmix-src");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&src)
        .ok()?
        .flatten()
        .map(|e| e.path().join("examples"))
        .filter(|d| d.join(needs).is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Builds C source `src` (with `include` as an include directory: OpenPMIx's examples need
/// their `examples.h`) against the installed `libpmix` (`pkg-config pmix`, Debian's
/// `libpmix-dev`) into the test's directory as `name`; its path.
pub fn build_pmix_program(ctx: &Ctx, src: &Path, include: &Path, name: &str) -> String {
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .output()
        .expect("pkg-config (Debian package pkg-config)");
    assert!(
        flags.status.success(),
        "pkg-config pmix failed (libpmix-dev)"
    );
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let out = ctx.dir.join(name);
    let st = Command::new("cc")
        .arg("-o")
        .arg(&out)
        .arg(src)
        .arg("-I")
        .arg(include)
        .args(flags.split_whitespace())
        .status()
        .expect("cc (Debian package build-essential)");
    assert!(st.success(), "cc {} failed", src.display());
    out.to_string_lossy().into_owned()
}

/// The virtual environment of an MPI from the Python registry, with mpi4py 4 in it
/// (`openmpi5`, `mpich5`, `mpich43`, `impi`), made by `compat-tests/wheels/setup.sh` in
/// [`cache_dir`]`/venvs`. `None` when it is missing, after a line saying the test is skipped;
/// under `CI=true` a missing one fails the test instead.
pub fn wheel_venv(name: &str) -> Option<PathBuf> {
    let venv = cache_dir().join("venvs").join(name);
    if venv.join("bin/python3").is_file() {
        return Some(venv);
    }
    let why = format!(
        "{} not found: make it with compat-tests/wheels/setup.sh (.ci/setup does)",
        venv.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// `programs/NAME.c` built with the `mpicc` of the wheel venv `venv` ([`wheel_venv`]) into
/// the test's directory as `NAME`; its path. `None` when the venv is missing (see
/// [`wheel_venv`]).
pub fn build_with_venv_mpicc(ctx: &Ctx, venv: &str, name: &str) -> Option<String> {
    build_with_venv_mpicc_and(ctx, venv, name, &[])
}

/// [`build_with_venv_mpicc`], with more arguments for `mpicc` (`extra`, after the source).
pub fn build_with_venv_mpicc_and(
    ctx: &Ctx,
    venv: &str,
    name: &str,
    extra: &[String],
) -> Option<String> {
    let mpicc = wheel_venv(venv)?.join("bin/mpicc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("programs/{name}.c"));
    let out = ctx.dir.join(name);
    let st = Command::new(&mpicc)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", mpicc.display()));
    assert!(st.success(), "{} {name}.c failed", mpicc.display());
    Some(out.to_string_lossy().into_owned())
}

/// One of the two MPICH 4.0.2 builds with the ch3 device (Debian's ch4:ucx build cannot do
/// dynamic processes), made by `compat-tests/mpich-testsuite/build-mpich.sh` under
/// `${KAURI_CACHE:-$HOME/.cache/kauri}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ch3 {
    /// `--with-pmi=simple`: the PMI-1 wire.
    Pmi1,
    /// `--with-pmi=pmi2/simple`: the PMI-2 wire.
    Pmi2,
}

impl Ch3 {
    pub const BOTH: [Ch3; 2] = [Ch3::Pmi1, Ch3::Pmi2];

    /// The installation prefix.
    pub fn prefix(self) -> PathBuf {
        cache_dir().join(match self {
            Ch3::Pmi1 => "mpich-4.0.2-ch3-pmi1",
            Ch3::Pmi2 => "mpich-4.0.2-ch3-pmi2",
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Ch3::Pmi1 => "ch3-pmi1",
            Ch3::Pmi2 => "ch3-pmi2",
        }
    }
}

/// `programs/<name>.c` compiled with the `build`'s mpicc, once per test run. A missing build
/// is a failure that says how to make it.
pub fn ch3_program(build: Ch3, name: &str) -> PathBuf {
    type Built = (Ch3, String, Result<PathBuf, String>);
    static BUILT: Mutex<Vec<Built>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, r)) = built.iter().find(|(b, n, _)| *b == build && n == name) {
        return r.clone().unwrap_or_else(|e| panic!("{e}"));
    }
    let mpicc = build.prefix().join("bin/mpicc");
    let r = if !mpicc.is_file() {
        Err(format!(
            "{} not found: build MPICH's ch3 libraries with \
             compat-tests/mpich-testsuite/build-mpich.sh (about 3 minutes each)",
            mpicc.display()
        ))
    } else {
        let dir = run_root().join(build.name());
        std::fs::create_dir_all(&dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let out = dir.join(name);
                compile(
                    &mpicc,
                    &Path::new(PROGRAMS_DIR).join(format!("{name}.c")),
                    &out,
                    &[],
                )
                .map(|()| out)
            })
    };
    built.push((build, name.to_string(), r.clone()));
    r.unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------
// Per-test context

/// One test's private directory and marker. Programs are linked into the directory, so every
/// rank's executable path names it; the marker also travels in the environment.
pub struct Ctx {
    pub name: String,
    pub dir: PathBuf,
    pub marker: String,
}

impl Ctx {
    pub fn new(name: &str) -> Ctx {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = run_root().join(format!("{name}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        let marker = format!("kauri-compat-{}-{name}-{n}", std::process::id());
        Ctx {
            name: name.to_string(),
            dir,
            marker,
        }
    }

    /// Path of program `name` inside this test's directory (linked from the build dir).
    pub fn prog(&self, name: &str) -> String {
        let dst = self.dir.join(name);
        if !dst.exists() {
            let src = programs_bin().join(name);
            assert!(src.is_file(), "no program {name} in {}", src.display());
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).expect("copy program");
            }
        }
        dst.to_string_lossy().into_owned()
    }

    /// pmi-wire's `pmi-load`, linked into this test's directory.
    pub fn pmi_load(&self) -> String {
        let dst = self.dir.join("pmi-load");
        if !dst.exists() {
            let src = pmi_load();
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).expect("copy pmi-load");
            }
        }
        dst.to_string_lossy().into_owned()
    }

    /// pmi-wire's `pmi-dyn`, linked into this test's directory.
    pub fn pmi_dyn(&self) -> String {
        self.link("pmi-dyn", &pmi_dyn())
    }

    /// `programs/<name>.c` built against MPICH's ch3 `build`, linked into this test's
    /// directory as `<name>-<build>`.
    pub fn ch3_prog(&self, build: Ch3, name: &str) -> String {
        self.link(
            &format!("{name}-{}", build.name()),
            &ch3_program(build, name),
        )
    }

    fn link(&self, name: &str, src: &Path) -> String {
        let dst = self.dir.join(name);
        if !dst.exists() && std::fs::hard_link(src, &dst).is_err() {
            std::fs::copy(src, &dst).expect("copy a program");
        }
        dst.to_string_lossy().into_owned()
    }

    /// A job of `launcher` with the given Hydra-style arguments.
    pub fn job<S: AsRef<str>>(&self, launcher: Launcher, args: &[S]) -> Job {
        Job {
            launcher,
            args: args.iter().map(|a| a.as_ref().into()).collect(),
            env: vec![(MARKER_VAR.into(), self.marker.clone())],
            stdin: None,
            timeout: JOB_TIMEOUT,
            dir: self.dir.clone(),
            marker: self.marker.clone(),
            program: None,
            wrapper: Vec::new(),
        }
    }

    /// The kauri binary linked (or copied) into this test's directory as `kauri`, so that
    /// the front end and every agent it starts (`KAURI_AGENT_PATH` defaults to the front
    /// end's own path) have an executable path naming the directory: the leftover check
    /// then finds agents even where the marker variable does not travel (ssh, srun).
    /// Use it with [`Job::program`].
    pub fn kauri(&self) -> PathBuf {
        let dst = self.dir.join("kauri");
        if !dst.exists() {
            let src = kauri();
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).expect("copy kauri");
            }
        }
        dst
    }

    /// Writes an executable script `name` into this test's directory and returns its path.
    /// `programs/through_lib.c` built twice in this test's directory: as `libkwrap.so` by
    /// `mpicc` (with `flags`), and as a program linked to that library alone (`cc`, an rpath
    /// to it), whose own libraries name no MPI (checked). The program's path.
    pub fn through_lib(&self, mpicc: &str, flags: &[&str]) -> String {
        let src = Path::new(PROGRAMS_DIR).join("through_lib.c");
        let dir = self.dir.to_string_lossy().into_owned();
        let lib = format!("{dir}/libkwrap.so");
        let mut lib_cmd = Command::new(mpicc);
        lib_cmd
            .args(flags)
            .args(["-shared", "-fPIC", "-o", &lib])
            .arg(&src);
        build_or_panic(&mut lib_cmd);
        let prog = format!("{dir}/through_lib");
        let mut prog_cmd = Command::new("cc");
        prog_cmd
            .args(["-DTHROUGH_LIB_MAIN", "-o", &prog])
            .arg(&src)
            .args(["-L", &dir, "-lkwrap", &format!("-Wl,-rpath,{dir}")]);
        build_or_panic(&mut prog_cmd);
        let libs = needed_libraries(&prog);
        assert!(
            libs.iter().any(|l| l == "libkwrap.so")
                && !libs.iter().any(|l| l.starts_with("libmpi")),
            "{libs:?}"
        );
        prog
    }

    /// Runs `kauri HOSTS -n N ARGV…` (no `--pmi`, `TMPDIR` in this test's directory) at 2 and
    /// 4 ranks, on one host and on two simulated hosts (`-launcher fork -hosts a,b`): each run
    /// must print `line(r, n)` once for every rank `r` of one world of `n`, end with status 0
    /// and say nothing of kauri's own; then nothing of the test may be left.
    pub fn assert_one_world_everywhere(
        &self,
        argv: &[&str],
        line: &dyn Fn(usize, usize) -> String,
    ) {
        let tmp = self.dir.join("tmp");
        std::fs::create_dir_all(&tmp).expect("create TMPDIR");
        for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
            for n in [2, 4] {
                let n_s = n.to_string();
                let mut a: Vec<&str> = hosts.to_vec();
                a.extend(["-n", &n_s]);
                a.extend(argv);
                let o = self
                    .job(Launcher::Kauri, &a)
                    .program(self.kauri())
                    .env("TMPDIR", &tmp.to_string_lossy())
                    .run();
                eprintln!("=== kauri {a:?}\n{o}");
                assert_eq!(o.code, Some(0), "{hosts:?} -n {n}: {o}");
                let mut want: Vec<String> = (0..n).map(|r| line(r, n)).collect();
                want.sort();
                assert_eq!(o.sorted_stdout(), want, "{hosts:?} -n {n}: {o}");
                assert!(!o.stderr.contains("kauri:"), "{hosts:?} -n {n}: {o}");
            }
        }
        self.assert_no_leftovers();
    }

    pub fn script(&self, name: &str, text: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let dst = self.dir.join(name);
        std::fs::write(&dst, text).expect("write script");
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755))
            .expect("chmod script");
        dst.to_string_lossy().into_owned()
    }

    /// Fails the test if any process of this test is still around (see [`assert_no_leftovers`]).
    pub fn assert_no_leftovers(&self) {
        assert_no_leftovers(&self.marker, &self.dir);
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running a job

pub struct Job {
    pub launcher: Launcher,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    pub dir: PathBuf,
    pub marker: String,
    /// The executable to run instead of the launcher's usual one (see [`Job::program`]).
    pub program: Option<PathBuf>,
    /// A command the launcher runs under, e.g. `salloc -N1` (see [`Job::wrapped`]).
    pub wrapper: Vec<OsString>,
}

/// What a job did.
#[derive(Debug)]
pub struct Outcome {
    pub launcher: Launcher,
    pub command: String,
    pub stdout: String,
    pub stderr: String,
    /// Exit code of the launcher, if it exited.
    pub code: Option<i32>,
    /// Signal that killed the launcher, if one did.
    pub signal: Option<i32>,
}

/// Variables of an outer launcher or of the developer's shell that must not leak into a job.
const SCRUBBED: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_SPAWNED",
    "PMI_JOBID",
    "MPI_LOCALNRANKS",
    "MPI_LOCALRANKID",
    "MPIEXEC_TIMEOUT",
    "PMIX_RANK",
    "PMIX_VERSION",
    "PMIX_NAMESPACE",
    "PRTE_LAUNCHED",
    "FLUX_JOB_ID",
    "FLUX_PMI_LIBRARY_PATH",
];

impl Job {
    pub fn env(mut self, name: &str, value: &str) -> Job {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn stdin(mut self, data: Vec<u8>) -> Job {
        self.stdin = Some(data);
        self
    }

    pub fn timeout(mut self, t: Duration) -> Job {
        self.timeout = t;
        self
    }

    /// Runs `exe` (e.g. [`Ctx::kauri`]) instead of the launcher's usual executable.
    pub fn program(mut self, exe: impl Into<PathBuf>) -> Job {
        self.program = Some(exe.into());
        self
    }

    /// Runs the launcher under `argv`: the command becomes `argv… EXE ARGS…` (e.g.
    /// `salloc -Q -N1 -n4`, which runs it inside a Slurm allocation). The exit status is the
    /// wrapper's.
    pub fn wrapped<S: AsRef<str>>(mut self, argv: &[S]) -> Job {
        self.wrapper = argv.iter().map(|a| a.as_ref().into()).collect();
        self
    }

    /// Runs the job in its own process group. If it outlives its timeout, the whole group
    /// (and anything carrying the test's marker) is killed and the test fails.
    pub fn run(self) -> Outcome {
        let exe = self
            .program
            .clone()
            .unwrap_or_else(|| self.launcher.executable());
        let command = format!(
            "{}{}{} {}",
            self.env
                .iter()
                .filter(|(k, _)| k != MARKER_VAR)
                .map(|(k, v)| format!("{k}={v} "))
                .collect::<String>(),
            self.wrapper
                .iter()
                .map(|a| format!("{} ", a.to_string_lossy()))
                .collect::<String>(),
            exe.display(),
            self.args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let _serial = JOB_LOCK.lock().unwrap_or_else(|e| e.into_inner());

        let mut cmd = match self.wrapper.split_first() {
            None => Command::new(&exe),
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(&exe);
                c
            }
        };
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .process_group(0)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for v in SCRUBBED {
            cmd.env_remove(v);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let pgid = child.id();

        let feeder = self.stdin.map(|data| {
            let mut w = child.stdin.take().expect("stdin pipe");
            // A launcher may legitimately stop reading (EPIPE): ignore write errors.
            thread::spawn(move || {
                let _ = w.write_all(&data);
            })
        });
        let mut out_pipe = child.stdout.take().expect("stdout pipe");
        let out_reader = thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out_pipe.read_to_end(&mut v);
            v
        });
        // Stderr as it comes: a hang's report is read before the job is killed.
        let err_so_far = Arc::new(Mutex::new(Vec::new()));
        let err_reader = {
            let (mut pipe, sink) = (
                child.stderr.take().expect("stderr pipe"),
                err_so_far.clone(),
            );
            thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                std::mem::take(&mut *sink.lock().unwrap())
            })
        };

        let start = Instant::now();
        let status = loop {
            match child.try_wait().expect("wait for the launcher") {
                Some(s) => break Some(s),
                None if start.elapsed() > self.timeout => break None,
                None => thread::sleep(Duration::from_millis(20)),
            }
        };
        let Some(status) = status else {
            // kauri says where every rank is on SIGUSR1: the report names what hung.
            let report = if self.wrapper.is_empty() && exe.file_name() == Some("kauri".as_ref()) {
                hang_report(pgid, &err_so_far)
            } else {
                String::new()
            };
            kill_group(pgid);
            let _ = child.kill();
            let _ = child.wait();
            let killed = kill_marked(&self.marker, &self.dir);
            // Pipes may still be held by escaped processes; do not wait for the readers forever.
            panic!(
                "{command}: still running after {:?} (the job hangs); killed its process group \
                 {pgid} and {} other marked process(es){report}",
                self.timeout,
                killed.len()
            );
        };
        if let Some(f) = feeder {
            // The feeder ends once the launcher's stdin is closed (EPIPE) or fully written.
            let _ = f.join();
        }
        // A rank that escaped the launcher may hold the pipes open: bounded wait for EOF.
        let stdout = join_reader(out_reader, &self.marker, &self.dir, &command);
        let stderr = join_reader(err_reader, &self.marker, &self.dir, &command);
        Outcome {
            launcher: self.launcher,
            command,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            code: status.code(),
            signal: status.signal(),
        }
    }
}

/// Sends kauri (pid `pid`) `SIGUSR1` and waits up to 20 s for the table it prints ("where
/// the ranks are:"); returns kauri's stderr since the start (its last 8 KiB), or says that no
/// table came.
fn hang_report(pid: u32, stderr: &Mutex<Vec<u8>>) -> String {
    let start = Instant::now();
    let heading = b"where the ranks are:";
    let printed = |v: &[u8]| v.windows(heading.len()).any(|w| w == heading);
    signal_pid(pid, "USR1");
    while !printed(&stderr.lock().unwrap()) && start.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(100));
    }
    // The table's last lines follow its heading closely.
    thread::sleep(Duration::from_millis(500));
    let v = stderr.lock().unwrap();
    let text = String::from_utf8_lossy(&v[v.len().saturating_sub(8192)..]).into_owned();
    let what = if printed(&v) {
        "kauri's report (SIGUSR1)"
    } else {
        "no report from kauri within 20 s of SIGUSR1"
    };
    format!("\n--- {what}; its stderr:\n{text}")
}

fn join_reader(h: thread::JoinHandle<Vec<u8>>, marker: &str, dir: &Path, command: &str) -> Vec<u8> {
    let start = Instant::now();
    while !h.is_finished() {
        if start.elapsed() > Duration::from_secs(30) {
            let killed = kill_marked(marker, dir);
            panic!(
                "{command}: the launcher exited but its output pipes stayed open for 30 s \
                 (processes left behind: {killed:?})"
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    h.join().expect("pipe reader")
}

fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Outcome {
    /// The lines of stdout, sorted (the ranks' lines come in any order).
    pub fn sorted_stdout(&self) -> Vec<String> {
        let mut v: Vec<String> = self.stdout.lines().map(str::to_string).collect();
        v.sort();
        v
    }

    /// The exit code, failing the test if the launcher was killed by a signal.
    pub fn code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => panic!("{} was killed by signal {s}\n{self}", self.launcher),
            _ => unreachable!(),
        }
    }

    /// The status as a shell would show it: the code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }

    pub fn assert_code(&self, want: i32) {
        assert_eq!(
            self.code,
            Some(want),
            "{}: wrong exit status (want {want})\n{self}",
            self.launcher
        );
    }

    pub fn assert_success(&self) {
        self.assert_code(0);
    }

    pub fn stdout_lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// Stdout lines sorted (rank output interleaves arbitrarily), normalised with
    /// [`normalise_line`].
    pub fn normalised_stdout(&self) -> Vec<String> {
        let mut v: Vec<String> = self.stdout.lines().map(normalise_line).collect();
        v.sort();
        v
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "--- command: {}", self.command)?;
        match (self.code, self.signal) {
            (Some(c), _) => writeln!(f, "--- exit code: {c}")?,
            (None, Some(s)) => writeln!(f, "--- killed by signal: {s}")?,
            _ => {}
        }
        writeln!(f, "--- stdout:\n{}", clip(&self.stdout))?;
        write!(f, "--- stderr:\n{}", clip(&self.stderr))
    }
}

fn clip(s: &str) -> &str {
    if s.len() <= 8000 {
        s
    } else {
        let mut end = 8000;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        &s[..end]
    }
}

/// Makes a line launcher-independent: `kvsname=…` (job names differ by design) becomes
/// `kvsname=*`, `universe=…` becomes `universe=*`, `fence_us=…` (a time) becomes `fence_us=*`,
/// and `mapping=<PMI_process_mapping>` becomes
/// `nodes=<node id of each rank>` (Hydra writes 4 local ranks as `(vector,(0,1,1))`, relying on
/// wrap-around, which means the same as `(vector,(0,1,4))`). Needs `size=N` on the line to
/// expand the mapping.
pub fn normalise_line(line: &str) -> String {
    let size = line
        .split_whitespace()
        .find_map(|t| t.strip_prefix("size="))
        .and_then(|s| s.parse::<usize>().ok());
    line.split(' ')
        .map(|tok| {
            if tok.starts_with("kvsname=") {
                "kvsname=*".to_string()
            } else if tok.starts_with("universe=") {
                "universe=*".to_string()
            } else if tok.starts_with("fence_us=") {
                "fence_us=*".to_string()
            } else if let Some(m) = tok.strip_prefix("mapping=") {
                match size.and_then(|n| expand_mapping(m, n)) {
                    Some(nodes) => format!(
                        "nodes={}",
                        nodes
                            .iter()
                            .map(|n| n.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    None => tok.to_string(),
                }
            } else {
                tok.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Expands a `PMI_process_mapping` value `(vector,(start,count,ppn),…)` into the node id of
/// each of `size` ranks, wrapping around to the first block as MPICH's parser does.
/// `None` if it cannot be parsed (repeat groups are not supported).
pub fn expand_mapping(m: &str, size: usize) -> Option<Vec<usize>> {
    let s: String = m.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = s.strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut blocks = Vec::new();
    for part in inner.split("),") {
        let t = part.trim_start_matches('(').trim_end_matches(')');
        let nums: Vec<usize> = t
            .split(',')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        if nums.len() != 3 {
            return None;
        }
        blocks.push((nums[0], nums[1], nums[2]));
    }
    if blocks.is_empty() || blocks.iter().all(|b| b.1 == 0 || b.2 == 0) {
        return None;
    }
    let mut out = Vec::with_capacity(size);
    'outer: loop {
        for &(start, count, ppn) in &blocks {
            for node in start..start + count {
                for _ in 0..ppn {
                    if out.len() == size {
                        break 'outer;
                    }
                    out.push(node);
                }
            }
        }
    }
    Some(out)
}

/// Asserts the real output of both launchers is the same once normalised (sorted lines).
pub fn assert_same_stdout(hydra: &Outcome, kauri: &Outcome) {
    assert_eq!(
        kauri.normalised_stdout(),
        hydra.normalised_stdout(),
        "kauri's stdout differs from mpiexec.hydra's (sorted, normalised)\n=== hydra\n{hydra}\n=== kauri\n{kauri}"
    );
}

// ---------------------------------------------------------------------------------------
// Leftovers

/// A process found in /proc.
#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    pub state: char,
    pub comm: String,
    pub cmdline: String,
}

fn read_stat(pid: u32) -> Option<(char, u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid, comm))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Processes that belong to a test: exe or cmdline naming `dir` or `marker`, or the marker in
/// the environment; plus zombies whose parent is one of those, and orphaned zombies (parent 1)
/// named like one of the test's programs.
pub fn find_marked(marker: &str, dir: &Path) -> Vec<ProcInfo> {
    let me = std::process::id();
    let dir_s = dir.to_string_lossy().into_owned();
    let env_entry = format!("{MARKER_VAR}={marker}");
    let mut marked = Vec::new();
    let mut zombies = Vec::new();
    for pid in all_pids() {
        if pid == me {
            continue;
        }
        let Some((state, ppid, comm)) = read_stat(pid) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let info = ProcInfo {
            pid,
            ppid,
            state,
            comm,
            cmdline: cmdline.trim_end().to_string(),
        };
        if state == 'Z' {
            zombies.push(info);
            continue;
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let in_env = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|b| b.split(|&c| c == 0).any(|e| e == env_entry.as_bytes()))
            .unwrap_or(false);
        let named = |s: &str| s.contains(&format!("{dir_s}/")) || s.contains(marker);
        if in_env || named(&exe) || named(&cmdline) {
            marked.push(info);
        }
    }
    // A zombie has no exe, cmdline or environ left: attribute it by its parent, or by its
    // name (comm, 15 bytes) if it is one of this test's programs and was orphaned.
    let parents: BTreeSet<u32> = marked.iter().map(|p| p.pid).collect();
    let names: BTreeSet<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().chars().take(15).collect())
                .collect()
        })
        .unwrap_or_default();
    marked.extend(
        zombies
            .into_iter()
            .filter(|z| parents.contains(&z.ppid) || (z.ppid == 1 && names.contains(&z.comm))),
    );
    marked
}

fn kill_marked(marker: &str, dir: &Path) -> Vec<ProcInfo> {
    let found = find_marked(marker, dir);
    for p in &found {
        if p.state != 'Z' {
            kill_pid(p.pid);
        }
    }
    found
}

/// Fails the test if any process of the test identified by `marker` (and its directory `dir`)
/// is still alive, or a zombie. Processes already killed get a few seconds to disappear (the
/// kernel tears a SIGKILLed process down asynchronously); whatever remains is listed, killed
/// (so one failure does not poison later tests) and reported.
pub fn assert_no_leftovers(marker: &str, dir: &Path) {
    let start = Instant::now();
    let mut found = find_marked(marker, dir);
    while !found.is_empty() && start.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(100));
        found = find_marked(marker, dir);
    }
    if found.is_empty() {
        return;
    }
    let list = found
        .iter()
        .map(|p| {
            format!(
                "  pid {} ppid {} state {} comm {} cmdline {:?}",
                p.pid, p.ppid, p.state, p.comm, p.cmdline
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    kill_marked(marker, dir);
    panic!(
        "{} process(es) of this test left behind (orphans or zombies):\n{list}",
        found.len()
    );
}

// ---------------------------------------------------------------------------------------
// Processes (for tests that act on a job while it runs)

/// Every process in /proc (this test process included), with state, parent and cmdline.
pub fn processes() -> Vec<ProcInfo> {
    all_pids()
        .into_iter()
        .filter_map(|pid| {
            let (state, ppid, comm) = read_stat(pid)?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            Some(ProcInfo {
                pid,
                ppid,
                state,
                comm,
                cmdline: cmdline.trim_end().to_string(),
            })
        })
        .collect()
}

/// The executable of `pid` (`/proc/PID/exe`), if readable.
pub fn proc_exe(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The argument vector of `pid`.
pub fn proc_argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The environment of `pid` as `NAME=VALUE` strings.
pub fn proc_environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Sends `signal` to `pid` (with `kill(1)`); true if it was delivered.
pub fn signal_pid(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Waits up to `limit` for no process of the test to be left (see [`find_marked`]); the
/// leftover check itself then only waits 5 s. For jobs whose teardown is asynchronous (a
/// killed front end's agents notice on their own).
pub fn wait_for_no_marked(marker: &str, dir: &Path, limit: Duration) {
    let start = Instant::now();
    while !find_marked(marker, dir).is_empty() && start.elapsed() < limit {
        thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures set up once per test binary and torn down when it exits

/// Teardown actions run when the test binary exits (libtest ends with `exit()`, also when
/// tests failed). A binary killed outright leaves its fixtures behind: every set-up
/// therefore starts with the matching teardown.
static AT_EXIT: Mutex<Vec<Box<dyn FnOnce() + Send>>> = Mutex::new(Vec::new());

extern "C" {
    fn atexit(cb: extern "C" fn()) -> std::os::raw::c_int;
}

extern "C" fn run_at_exit() {
    let actions: Vec<_> = match AT_EXIT.lock() {
        Ok(mut v) => v.drain(..).collect(),
        Err(e) => e.into_inner().drain(..).collect(),
    };
    for a in actions.into_iter().rev() {
        // Never unwind out of an atexit handler.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(a));
    }
}

fn at_exit(action: Box<dyn FnOnce() + Send>) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a plain extern "C" function with the C library.
        let rc = unsafe { atexit(run_at_exit) };
        assert_eq!(rc, 0, "atexit failed");
    });
    AT_EXIT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(action);
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Fails (with the Debian package to install) unless every `(path or PATH name, package)`
/// is there.
fn require_tools(tools: &[(&str, &str)]) -> Result<(), String> {
    let missing: Vec<String> = tools
        .iter()
        .filter(|(t, _)| {
            if t.starts_with('/') {
                !Path::new(t).is_file()
            } else {
                which(t).is_none()
            }
        })
        .map(|(t, p)| format!("{t} (install the Debian package `{p}`)"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing: {}", missing.join(", ")))
    }
}

/// Takes an exclusive lock on `path` for the rest of the process (waits for another test
/// binary using the same fixture names to finish).
fn hold_lock(path: &Path) -> Result<(), String> {
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    f.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    Ok(())
}

fn run_script(script: &Path, arg: &str, env: &[(String, String)]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(script)
        .arg(arg)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{} {arg}` failed ({}):\n{}{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Test hosts made by `netns/hosts.sh`: network namespaces with an sshd each.
#[derive(Debug, Clone)]
pub struct NetnsHosts {
    /// The ssh wrapper (`-F /dev/null -i KEY -o StrictHostKeyChecking=no -o BatchMode=yes …`).
    pub ssh: PathBuf,
    /// The hosts' addresses (`10.77.0.11`, …).
    pub addrs: Vec<String>,
    /// The hosts' names: namespace names, also their hostnames (own UTS namespace).
    pub names: Vec<String>,
    /// The root namespace's address on the bridge.
    pub bridge_ip: String,
    /// The bridge's interface name (Hydra needs `-iface BRIDGE`).
    pub bridge: String,
    /// The `/24` prefix (`10.77.0`).
    pub net: String,
}

impl NetnsHosts {
    /// A launcher's arguments for these hosts over the ssh wrapper: `-launcher ssh
    /// -launcher-exec SSH -hosts LIST` (kauri's and Hydra's spelling).
    pub fn ssh_launch(&self, host_list: &str) -> Vec<String> {
        vec![
            "-launcher".into(),
            "ssh".into(),
            "-launcher-exec".into(),
            self.ssh.to_string_lossy().into_owned(),
            "-hosts".into(),
            host_list.into(),
        ]
    }
}

/// `netns/hosts.sh`.
pub const NETNS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/netns/hosts.sh");
/// `slurm/slurm-local.sh`.
pub const SLURM_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/slurm/slurm-local.sh");

/// The 3 namespace hosts, set up by the first caller in this test binary (`hosts.sh down`,
/// then `up`) and torn down (`hosts.sh down`) when the binary exits. Needs root; a missing
/// tool fails the test naming its Debian package. `KAURI_NETNS_PREFIX` (default `kauri`)
/// and `KAURI_NETNS_NET` (default `10.77.0`) are passed on, so concurrent runs can differ;
/// runs with the same prefix wait for each other (a lock file).
pub fn netns_hosts() -> NetnsHosts {
    static HOSTS: OnceLock<Result<NetnsHosts, String>> = OnceLock::new();
    match HOSTS.get_or_init(set_up_netns) {
        Ok(h) => h.clone(),
        Err(e) => panic!("test hosts (network namespaces) unavailable: {e}"),
    }
}

fn set_up_netns() -> Result<NetnsHosts, String> {
    if !is_root() {
        return Err("these tests need root (network namespaces, sshd)".into());
    }
    require_tools(&[
        ("ip", "iproute2"),
        ("ss", "iproute2"),
        ("/usr/sbin/sshd", "openssh-server"),
        ("ssh", "openssh-client"),
        ("ssh-keygen", "openssh-client"),
        ("unshare", "util-linux"),
        ("setsid", "util-linux"),
    ])?;
    let prefix = std::env::var("KAURI_NETNS_PREFIX").unwrap_or_else(|_| "kauri".into());
    let net = std::env::var("KAURI_NETNS_NET").unwrap_or_else(|_| "10.77.0".into());
    let env = vec![
        ("KAURI_NETNS_PREFIX".to_string(), prefix.clone()),
        ("KAURI_NETNS_NET".to_string(), net.clone()),
        ("KAURI_NETNS_COUNT".to_string(), "3".to_string()),
    ];
    hold_lock(Path::new(&format!("/tmp/{prefix}-netns.lock")))?;
    let script = Path::new(NETNS_SCRIPT);
    // A run killed outright leaves its hosts behind: start clean (`up` runs `down` too).
    let _ = run_script(script, "down", &env);
    let out = run_script(script, "up", &env)?;
    {
        let env = env.clone();
        at_exit(Box::new(move || {
            let _ = run_script(Path::new(NETNS_SCRIPT), "down", &env);
        }));
    }
    let get = |name: &str| -> Result<String, String> {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(str::to_string)
            .ok_or_else(|| format!("hosts.sh up printed no {name}:\n{out}"))
    };
    let list = |v: String| v.split(',').map(str::to_string).collect::<Vec<_>>();
    Ok(NetnsHosts {
        ssh: PathBuf::from(get("KAURI_NETNS_SSH")?),
        addrs: list(get("KAURI_NETNS_ADDRS")?),
        names: list(get("KAURI_NETNS_NAMES")?),
        bridge_ip: get("KAURI_NETNS_BRIDGE_IP")?,
        bridge: get("KAURI_NETNS_BRIDGE")?,
        net,
    })
}

/// Holds the namespace hosts for one test at a time within a test binary: for tests that
/// check the system's directories for what their own job left (agents started by sshd
/// see none of the test's variables, so they use `/tmp` and `/dev/shm`).
pub fn netns_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// What kauri's agents make in the system's directories for an Open MPI job, by name:
/// `/tmp/kauri-<tag>` (a PMIx job's tmp directory) and `/dev/shm/kauri-<tag>-n<node>-<pid>`
/// (Open MPI's shared-memory directory), `<tag>` being 8 hex digits. Compared before and
/// after a job to find what it left.
pub fn kauri_system_entries() -> BTreeSet<String> {
    let tagged = |name: &str| {
        name.strip_prefix("kauri-").is_some_and(|rest| {
            rest.len() >= 8 && rest.as_bytes()[..8].iter().all(u8::is_ascii_hexdigit)
        })
    };
    let mut found = BTreeSet::new();
    for (dir, exact) in [("/tmp", true), ("/dev/shm", false)] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if tagged(&name) && (!exact || name.len() == "kauri-".len() + 8) {
                found.insert(format!("{dir}/{name}"));
            }
        }
    }
    found
}

/// The [`kauri_system_entries`] that are new since `before` and still there after up to
/// 10 s: what a job left. Entries another test's job has open at the moment (the system's
/// directories are shared) go away when that job ends and are not counted.
pub fn kauri_system_leftovers(before: &BTreeSet<String>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = kauri_system_entries().difference(before).cloned().collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// A one-node Slurm made by `slurm/slurm-local.sh`.
#[derive(Debug, Clone)]
pub struct SlurmLocal {
    /// `SLURM_CONF` for every client (`salloc`, `srun`, `sinfo`).
    pub conf: PathBuf,
    /// The node's name (`SLURM_JOB_NODELIST` inside an allocation): by default `kslurm1`,
    /// not this machine's name, so a launcher cannot take it for the local host.
    pub node: String,
}

/// The local Slurm, started by the first caller in this test binary (`stop`, then `start`)
/// and stopped when the binary exits. State under `SLURM_LOCAL_DIR` (default
/// `/tmp/kauri-compat-slurm`); node name `SLURM_LOCAL_NODE` (default `kslurm1`); the ports
/// `SLURM_LOCAL_CTLD_PORT`/`SLURM_LOCAL_SLURMD_PORT` pass through. Needs root.
pub fn slurm_local() -> SlurmLocal {
    static SLURM: OnceLock<Result<SlurmLocal, String>> = OnceLock::new();
    match SLURM.get_or_init(set_up_slurm) {
        Ok(s) => s.clone(),
        Err(e) => panic!("local Slurm unavailable: {e}"),
    }
}

fn set_up_slurm() -> Result<SlurmLocal, String> {
    if !is_root() {
        return Err("these tests need root (slurmctld, slurmd, munged)".into());
    }
    require_tools(&[
        ("/usr/sbin/slurmctld", "slurmctld"),
        ("/usr/sbin/slurmd", "slurmd"),
        ("/usr/sbin/munged", "munge"),
        ("munge", "munge"),
        ("salloc", "slurm-client"),
        ("srun", "slurm-client"),
        ("sinfo", "slurm-client"),
    ])?;
    let dir = std::env::var("SLURM_LOCAL_DIR").unwrap_or_else(|_| "/tmp/kauri-compat-slurm".into());
    let node = std::env::var("SLURM_LOCAL_NODE").unwrap_or_else(|_| "kslurm1".into());
    let env = vec![
        ("SLURM_LOCAL_DIR".to_string(), dir.clone()),
        ("SLURM_LOCAL_NODE".to_string(), node.clone()),
    ];
    hold_lock(Path::new(&format!("{dir}.lock")))?;
    let script = Path::new(SLURM_SCRIPT);
    let _ = run_script(script, "stop", &env);
    {
        let env = env.clone();
        at_exit(Box::new(move || {
            let _ = run_script(Path::new(SLURM_SCRIPT), "stop", &env);
        }));
    }
    run_script(script, "start", &env)?;
    Ok(SlurmLocal {
        conf: PathBuf::from(format!("{dir}/etc/slurm.conf")),
        node,
    })
}

/// `sge/sge-local.sh`.
pub const SGE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sge/sge-local.sh");

/// A one-host Grid Engine made by `sge/sge-local.sh`.
#[derive(Debug, Clone)]
pub struct SgeLocal {
    /// Its state directory (`SGE_LOCAL_DIR`).
    pub dir: String,
    /// The name Grid Engine knows this host by (`SGE_LOCAL_NAME`, default `kauri-sge1`): not
    /// this machine's name, so that a launcher inside a job takes it for another host, and
    /// resolving to 127.0.0.2 in the cell's own view of /etc/hosts.
    pub host: String,
    /// Its parallel environment (`kauri`: `control_slaves TRUE`).
    pub pe: String,
}

impl SgeLocal {
    /// The argv that runs a command as an interactive job in the parallel environment with
    /// `slots` slots: `sge-local.sh exec qrsh -pe PE SLOTS -cwd -V`, the command to follow.
    /// qrsh passes the command's words to a remote shell joined by spaces (as rsh does): keep
    /// them free of spaces and quotes.
    pub fn qrsh_pe(&self, slots: usize) -> Vec<String> {
        [
            "env",
            &format!("SGE_LOCAL_DIR={}", self.dir),
            &format!("SGE_LOCAL_NAME={}", self.host),
            "bash",
            SGE_SCRIPT,
            "exec",
            "qrsh",
            "-pe",
            &self.pe,
            &slots.to_string(),
            "-cwd",
            "-V",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// The local Grid Engine, started by the first caller in this test binary (`stop`, then
/// `start`) and stopped when the binary exits. State under `SGE_LOCAL_DIR` (default
/// `/tmp/kauri-compat-sge`); its ports `SGE_LOCAL_QMASTER_PORT`/`SGE_LOCAL_EXECD_PORT` pass
/// through. Needs root and Debian's `gridengine-master`, `gridengine-exec`,
/// `gridengine-client`.
pub fn sge_local() -> SgeLocal {
    static SGE: OnceLock<Result<SgeLocal, String>> = OnceLock::new();
    match SGE.get_or_init(set_up_sge) {
        Ok(s) => s.clone(),
        Err(e) => panic!("local Grid Engine unavailable: {e}"),
    }
}

fn set_up_sge() -> Result<SgeLocal, String> {
    if !is_root() {
        return Err("these tests need root (sge_qmaster, sge_execd)".into());
    }
    require_tools(&[
        ("/usr/lib/gridengine/sge_qmaster", "gridengine-master"),
        ("/usr/lib/gridengine/sge_execd", "gridengine-exec"),
        ("/usr/lib/gridengine/qrsh", "gridengine-client"),
        ("/usr/lib/gridengine/qconf", "gridengine-client"),
        ("unshare", "util-linux"),
    ])?;
    let dir = std::env::var("SGE_LOCAL_DIR").unwrap_or_else(|_| "/tmp/kauri-compat-sge".into());
    let host = std::env::var("SGE_LOCAL_NAME").unwrap_or_else(|_| "kauri-sge1".into());
    let mut env = vec![
        ("SGE_LOCAL_DIR".to_string(), dir.clone()),
        ("SGE_LOCAL_NAME".to_string(), host.clone()),
    ];
    for k in ["SGE_LOCAL_QMASTER_PORT", "SGE_LOCAL_EXECD_PORT"] {
        if let Ok(v) = std::env::var(k) {
            env.push((k.to_string(), v));
        }
    }
    hold_lock(Path::new(&format!("{dir}.lock")))?;
    let script = Path::new(SGE_SCRIPT);
    let _ = run_script(script, "stop", &env);
    {
        let env = env.clone();
        at_exit(Box::new(move || {
            let _ = run_script(Path::new(SGE_SCRIPT), "stop", &env);
        }));
    }
    run_script(script, "start", &env)?;
    Ok(SgeLocal {
        dir,
        host,
        pe: "kauri".into(),
    })
}

/// A `kauri nameserver -port 0 -bind 127.0.0.1` for one test (marked as the test's), killed
/// when dropped.
pub struct NameServer {
    child: std::process::Child,
    /// Where it listens, `127.0.0.1:PORT`, as it said on its first line.
    pub addr: String,
}

impl NameServer {
    /// Starts it and reads where it listens.
    pub fn start(ctx: &Ctx) -> NameServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(ctx.kauri())
            .args(["nameserver", "-port", "0", "-bind", "127.0.0.1"])
            .env(MARKER_VAR, &ctx.marker)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start kauri nameserver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the nameserver's first line");
        let addr = line
            .trim()
            .strip_prefix("kauri nameserver listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        NameServer { child, addr }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_expansion() {
        assert_eq!(
            expand_mapping("(vector,(0,1,1))", 4),
            Some(vec![0, 0, 0, 0])
        );
        assert_eq!(
            expand_mapping("(vector,(0,1,4))", 4),
            Some(vec![0, 0, 0, 0])
        );
        assert_eq!(
            expand_mapping("(vector,(0,2,2))", 4),
            Some(vec![0, 0, 1, 1])
        );
        assert_eq!(
            expand_mapping("(vector,(0,2,1))", 4),
            Some(vec![0, 1, 0, 1])
        );
        assert_eq!(
            expand_mapping("(vector, (0,2,2), (2,1,1))", 5),
            Some(vec![0, 0, 1, 1, 2])
        );
        assert_eq!(expand_mapping("", 4), None);
        assert_eq!(expand_mapping("(vector,[(0,1,1)]x2)", 4), None);
    }

    #[test]
    fn line_normalisation() {
        assert_eq!(
            normalise_line(
                "pmi-load: ok rank=1 size=4 kvsname=kvs_9355_0_x_vm universe=-1 \
                 mapping=(vector,(0,1,1)) checked=3"
            ),
            "pmi-load: ok rank=1 size=4 kvsname=* universe=* nodes=0,0,0,0 checked=3"
        );
        assert_eq!(
            normalise_line("hello rank 0 of 2 on vm"),
            "hello rank 0 of 2 on vm"
        );
    }
}
