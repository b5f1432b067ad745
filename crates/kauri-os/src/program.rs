//! Where a program is: found as `execvp` would find it, before anything is started, so that a
//! missing or unrunnable program is one line for the user rather than a failed start.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a program cannot be started; `program` is its name as typed, shown as text (bytes that
/// are not UTF-8 as `�`). Each prints the one line the user sees.
#[derive(Debug, Error)]
pub enum ProgramError {
    /// The file could not be examined (missing, unreadable directory, …).
    #[error("cannot execute {program}: {why}")]
    Unreadable {
        /// The program as typed.
        program: String,
        /// What `stat` said.
        #[source]
        why: std::io::Error,
    },
    /// The path names a directory.
    #[error("cannot execute {program}: it is a directory")]
    Directory {
        /// The program as typed.
        program: String,
    },
    /// The file has no execute bit.
    #[error("cannot execute {program}: permission denied")]
    NotExecutable {
        /// The program as typed.
        program: String,
    },
    /// No directory of `PATH` holds it, but the working directory does (typed without `./`).
    #[error("cannot execute {program}: not found in PATH (./{program} exists)")]
    OnlyHere {
        /// The program as typed.
        program: String,
    },
    /// No directory of `PATH` holds it.
    #[error("cannot execute {program}: not found in PATH")]
    NotInPath {
        /// The program as typed.
        program: String,
    },
}

/// Finds `program` the way `execvp` would, in the `PATH` the rank will have, relative paths
/// taken from `wdir`. Names are bytes: a program or a `PATH` entry that is not UTF-8 is found
/// as it is. The error is one line for the user (such bytes shown as `�`).
pub fn resolve(
    program: impl AsRef<OsStr>,
    path_var: Option<&OsStr>,
    wdir: &Path,
) -> Result<PathBuf, ProgramError> {
    let program = program.as_ref();
    let shown = || program.to_string_lossy().into_owned();
    let check = |p: &Path| -> Result<(), ProgramError> {
        let meta = std::fs::metadata(p).map_err(|why| ProgramError::Unreadable {
            program: shown(),
            why,
        })?;
        if meta.is_dir() {
            return Err(ProgramError::Directory { program: shown() });
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(ProgramError::NotExecutable { program: shown() });
        }
        Ok(())
    };
    if program.as_bytes().contains(&b'/') {
        let p = wdir.join(program);
        check(&p)?;
        return Ok(p);
    }
    for dir in path_var
        .unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"))
        .as_bytes()
        .split(|&b| b == b':')
    {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let p = wdir.join(dir).join(program);
        if p.is_file() && check(&p).is_ok() {
            return Ok(p);
        }
    }
    // A program of the working directory typed without `./`, as a shell would refuse it too.
    let here = wdir.join(program);
    if here.is_file() && check(&here).is_ok() {
        return Err(ProgramError::OnlyHere { program: shown() });
    }
    Err(ProgramError::NotInPath { program: shown() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        let wd = std::env::temp_dir();
        assert!(resolve("sh", Some(OsStr::new("/usr/bin:/bin")), &wd).is_ok());
        let e = resolve("no-such-program-kauri", Some(OsStr::new("/usr/bin")), &wd).unwrap_err();
        assert!(matches!(e, ProgramError::NotInPath { .. }), "{e:?}");
        let f = wd.join(format!("kauri-noexec-{}", std::process::id()));
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(f.to_str().unwrap(), None, &wd).unwrap_err();
        std::fs::remove_file(&f).unwrap();
        assert!(matches!(e, ProgramError::NotExecutable { .. }), "{e:?}");
        let e = resolve("./missing", None, &wd).unwrap_err();
        assert!(
            matches!(&e, ProgramError::Unreadable { why, .. } if why.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        // A program of the working directory, typed without ./, is named.
        let dir = wd.join(format!("kauri-here-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("hello-kauri");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = resolve("hello-kauri", Some(OsStr::new("/usr/bin")), &dir).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, ProgramError::OnlyHere { .. }), "{e:?}");
    }

    /// A program and a `PATH` directory named in Latin-1 (not UTF-8) are found as they are;
    /// the error for one that is missing shows its name as text.
    #[test]
    fn resolves_names_that_are_not_utf8() {
        let top = std::env::temp_dir().join(format!("kauri-latin1-{}", std::process::id()));
        let dir = top.join(OsStr::from_bytes(b"b\xe9n"));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(OsStr::from_bytes(b"caf\xe9"));
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut path = b"/nonexistent:".to_vec();
        path.extend_from_slice(dir.as_os_str().as_bytes());
        let found = resolve(
            OsStr::from_bytes(b"caf\xe9"),
            Some(OsStr::from_bytes(&path)),
            &top,
        );
        let e = resolve(OsStr::from_bytes(b"./th\xe9"), None, &top).unwrap_err();
        std::fs::remove_dir_all(&top).unwrap();
        assert_eq!(found.ok(), Some(f));
        assert!(
            e.to_string().starts_with("cannot execute ./th\u{fffd}: "),
            "{e}"
        );
    }

    /// Each error prints the line kauri printed when errors were text.
    #[test]
    fn each_error_prints_its_line() {
        let p = || "a.out".to_string();
        let cases = [
            (
                ProgramError::Unreadable {
                    program: p(),
                    why: std::io::Error::from_raw_os_error(2),
                },
                "cannot execute a.out: No such file or directory (os error 2)",
            ),
            (
                ProgramError::Directory { program: p() },
                "cannot execute a.out: it is a directory",
            ),
            (
                ProgramError::NotExecutable { program: p() },
                "cannot execute a.out: permission denied",
            ),
            (
                ProgramError::OnlyHere { program: p() },
                "cannot execute a.out: not found in PATH (./a.out exists)",
            ),
            (
                ProgramError::NotInPath { program: p() },
                "cannot execute a.out: not found in PATH",
            ),
        ];
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
    }
}
