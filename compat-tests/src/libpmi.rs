//! Kauri's C PMI libraries (`contrib/libpmi`) and the programs that use them.
//!
//! * [`libpmi`]: builds `libpmi.so` and `libpmi2.so` once per test run (`cargo build -p
//!   kauri-pmi1 -p kauri-pmi2`) and installs them, under their sonames plus the link-time
//!   names, into the run directory, so a rebuild during the run cannot change them under a
//!   job.
//! * [`libpmi_bin`]: `pmi1_check`, `pmi2_check`, `pmi1_spawn`, `pmi2_spawn`, compiled with `cc` against those
//!   libraries and the headers of `contrib/libpmi/include` (rpath to the run directory).
//! * [`ompi_bin`]: the Open MPI programs (`ompi_*.c`), compiled with `mpicc.openmpi` (and
//!   `ompi_failure` linked to `libpmix` too).
//! * [`flux_job_id`], [`remove_vader_segments`]: what Open MPI's `flux` component needs per
//!   job and what it leaves behind when a job dies.
//! * [`ompi_hello_lines`]: what `ompi_hello` prints for a placement.
//!
//! Missing peers are test failures naming the Debian package, as everywhere in this crate.

use crate::{compile, run_root, target_dir, which, workspace_root, Ctx};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Programs compiled with `mpicc.openmpi`.
const OMPI_PROGRAMS: &[&str] = &[
    "ompi_hello",
    "ompi_ring",
    "ompi_allreduce",
    "ompi_abort",
    "ompi_segv",
];
/// Open MPI programs that also call OpenPMIx directly (`pkg-config pmix`: the library Open
/// MPI's own PMIx component uses).
const OMPI_PMIX_PROGRAMS: &[&str] = &[
    "ompi_names",
    "ompi_failure",
    "ompi_dynamic",
    "ompi_query",
    "ompi_locality",
];
/// Programs compiled with `cc` against Kauri's `libpmi.so` (`-lpmi`) or `libpmi2.so`
/// (`-lpmi2`).
const LIBPMI_PROGRAMS: &[(&str, &str)] = &[
    ("pmi1_check", "-lpmi"),
    ("pmi2_check", "-lpmi2"),
    ("pmi1_spawn", "-lpmi"),
    ("pmi2_spawn", "-lpmi2"),
];

/// The installed libraries of one test run.
#[derive(Debug, Clone)]
pub struct LibPmi {
    /// The directory holding `libpmi.so.0`, `libpmi.so`, `libpmi2.so.0`, `libpmi2.so`.
    pub lib_dir: PathBuf,
    /// `contrib/libpmi/include` (`pmi.h`, `pmi2.h`).
    pub include_dir: PathBuf,
    /// `libpmi.so.0`: what `FLUX_PMI_LIBRARY_PATH` names.
    pub pmi1: PathBuf,
    /// `libpmi2.so.0`.
    pub pmi2: PathBuf,
}

/// `mpirun.openmpi` from PATH (Debian package `openmpi-bin`).
pub fn mpirun_openmpi() -> PathBuf {
    which("mpirun.openmpi").unwrap_or_else(|| {
        panic!("mpirun.openmpi not found in PATH: install the Debian package `openmpi-bin`")
    })
}

fn build_libpmi() -> Result<LibPmi, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir();
    let out = Command::new(&cargo)
        .args(["build", "-q", "-p", "kauri-pmi1", "-p", "kauri-pmi2"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo build -p kauri-pmi1 -p kauri-pmi2` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let lib_dir = run_root().join("lib");
    std::fs::create_dir_all(&lib_dir).map_err(|e| e.to_string())?;
    for name in ["libpmi", "libpmi2"] {
        let built = target.join("debug").join(format!("{name}.so"));
        let soname = lib_dir.join(format!("{name}.so.0"));
        std::fs::copy(&built, &soname)
            .map_err(|e| format!("copy {} to {}: {e}", built.display(), soname.display()))?;
        let link = lib_dir.join(format!("{name}.so"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("{name}.so.0"), &link)
            .map_err(|e| format!("symlink {}: {e}", link.display()))?;
    }
    Ok(LibPmi {
        pmi1: lib_dir.join("libpmi.so.0"),
        pmi2: lib_dir.join("libpmi2.so.0"),
        lib_dir,
        include_dir: workspace_root().join("contrib/libpmi/include"),
    })
}

/// Kauri's `libpmi.so` and `libpmi2.so`, built and installed once per test run.
pub fn libpmi() -> LibPmi {
    static LIB: OnceLock<Result<LibPmi, String>> = OnceLock::new();
    match LIB.get_or_init(build_libpmi) {
        Ok(l) => l.clone(),
        Err(e) => panic!("building Kauri's PMI libraries failed: {e}"),
    }
}

fn build_libpmi_programs() -> Result<PathBuf, String> {
    let lib = libpmi();
    let bin = run_root().join("bin-libpmi");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let cc = which("cc")
        .or_else(|| which("gcc"))
        .ok_or("no C compiler (cc): install the Debian package `gcc`")?;
    let include = format!("-I{}", lib.include_dir.display());
    let libdir = format!("-L{}", lib.lib_dir.display());
    let rpath = format!("-Wl,-rpath,{}", lib.lib_dir.display());
    for (p, l) in LIBPMI_PROGRAMS {
        let src = Path::new(crate::PROGRAMS_DIR).join(format!("{p}.c"));
        let res = Command::new(&cc)
            .args(["-O1", "-Wall", &include, "-o"])
            .arg(bin.join(p))
            .arg(&src)
            .args([libdir.as_str(), rpath.as_str(), l])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", cc.display()))?;
        if !res.status.success() {
            return Err(format!(
                "{} {} failed ({}):\n{}",
                cc.display(),
                src.display(),
                res.status,
                String::from_utf8_lossy(&res.stderr)
            ));
        }
    }
    Ok(bin)
}

/// The directory holding the libpmi test programs, built once per test run.
pub fn libpmi_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(build_libpmi_programs) {
        Ok(p) => p.clone(),
        Err(e) => panic!("building the libpmi test programs failed: {e}"),
    }
}

fn build_ompi_programs() -> Result<PathBuf, String> {
    let bin = run_root().join("bin-ompi");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let mpicc = which("mpicc.openmpi").ok_or(
        "mpicc.openmpi not found in PATH: install the Debian packages `openmpi-bin` and \
         `libopenmpi-dev`",
    )?;
    let src = Path::new(crate::PROGRAMS_DIR);
    for p in OMPI_PROGRAMS {
        compile(&mpicc, &src.join(format!("{p}.c")), &bin.join(p), &[])?;
    }
    let pmix = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .ok_or("pkg-config pmix failed: install the Debian package `libpmix-dev`")?;
    let pmix = String::from_utf8_lossy(&pmix.stdout).into_owned();
    let flags: Vec<&str> = pmix.split_whitespace().collect();
    for p in OMPI_PMIX_PROGRAMS {
        compile(&mpicc, &src.join(format!("{p}.c")), &bin.join(p), &flags)?;
    }
    Ok(bin)
}

/// The directory holding the Open MPI programs, built once per test run.
pub fn ompi_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(build_ompi_programs) {
        Ok(p) => p.clone(),
        Err(e) => panic!("building the Open MPI test programs failed: {e}"),
    }
}

impl Ctx {
    fn link_from(&self, dir: &Path, name: &str) -> String {
        let dst = self.dir.join(name);
        if !dst.exists() {
            let src = dir.join(name);
            assert!(src.is_file(), "no program {name} in {}", dir.display());
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).expect("copy program");
            }
        }
        dst.to_string_lossy().into_owned()
    }

    /// Path of Open MPI program `name` inside this test's directory.
    pub fn ompi_prog(&self, name: &str) -> String {
        self.link_from(&ompi_bin(), name)
    }

    /// Path of libpmi program `name` (`pmi1_check`, `pmi2_spawn`, …) inside this test's
    /// directory.
    pub fn libpmi_prog(&self, name: &str) -> String {
        self.link_from(&libpmi_bin(), name)
    }

    /// A `FLUX_JOB_ID` for this test's job named `what`: Open MPI names its shared-memory
    /// segments and KVS keys by it, so concurrent jobs on one host must differ.
    pub fn flux_job_id(&self, what: &str) -> u32 {
        flux_job_id(&format!("{}-{what}", self.marker))
    }
}

/// A job id from a test's marker (which holds the test binary's pid and a sequence number),
/// hashed (FNV-1a) into the values Open MPI 4.1 handles: it reads the high 16 bits as the job
/// family and the low 16 bits as the local job id, where 0 is its daemons' job and values of
/// 0x8000 and up come out different on the peers (measured: 0xeef2 became 0x6ef2, and the
/// ranks could not reach each other). So the low half is kept in 1..=0x7fff.
pub fn flux_job_id(marker: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in marker.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let family = (h >> 16) & 0x7fff;
    let local = (h & 0x7fff).max(1);
    (family << 16) | local
}

/// `ompi_hello`'s lines when rank r runs on node `node[r]`: `local=` counts the ranks that
/// share its node (`MPI_COMM_TYPE_SHARED`).
pub fn ompi_hello_lines(node: &[usize]) -> Vec<String> {
    let n = node.len();
    (0..n)
        .map(|r| {
            let local = node.iter().filter(|&&x| x == node[r]).count();
            format!("ompi_hello: rank {r} of {n} allreduce={n} local={local}")
        })
        .collect()
}

/// Removes the shared-memory segments Open MPI's `vader` transport made for job `jobid`
/// (`/dev/shm/vader_segment.<host>.<…>.<jobid hex>.<local rank>`) and returns them. A job
/// that ends normally removes its own; one that aborts or crashes leaves them behind under a
/// PMI launcher (under `mpirun` the launcher cleans up).
pub fn remove_vader_segments(jobid: u32) -> Vec<PathBuf> {
    let tag = format!(".{jobid:x}.");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("vader_segment.") && name.contains(&tag) {
            let _ = std::fs::remove_file(e.path());
            removed.push(e.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_differ_and_have_a_local_part() {
        let a = flux_job_id("kauri-compat-100-ompi_hello-0");
        let b = flux_job_id("kauri-compat-100-ompi_hello-1");
        assert_ne!(a, b);
        for id in [a, b] {
            assert!(id < 0x8000_0000);
            assert!((1..0x8000).contains(&(id & 0xffff)));
        }
    }
}
