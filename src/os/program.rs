//! Where a program is: found as `execvp` would find it, before anything is started, so that a
//! missing or unrunnable program is one line for the user rather than a failed start.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Finds `program` the way `execvp` would, in the `PATH` the rank will have, relative paths
/// taken from `wdir`. Names are bytes: a program or a `PATH` entry that is not UTF-8 is found
/// as it is. The error is one line for the user (such bytes shown as `�`).
pub fn resolve(
    program: impl AsRef<OsStr>,
    path_var: Option<&OsStr>,
    wdir: &Path,
) -> Result<PathBuf, String> {
    let program = program.as_ref();
    let shown = program.to_string_lossy();
    let check = |p: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| format!("cannot execute {shown}: {e}"))?;
        if meta.is_dir() {
            return Err(format!("cannot execute {shown}: it is a directory"));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(format!("cannot execute {shown}: permission denied"));
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
        return Err(format!(
            "cannot execute {shown}: not found in PATH (./{shown} exists)"
        ));
    }
    Err(format!("cannot execute {shown}: not found in PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        let wd = std::env::temp_dir();
        assert!(resolve("sh", Some(OsStr::new("/usr/bin:/bin")), &wd).is_ok());
        let e = resolve("no-such-program-kauri", Some(OsStr::new("/usr/bin")), &wd).unwrap_err();
        assert!(e.contains("not found in PATH"), "{e}");
        let f = wd.join(format!("kauri-noexec-{}", std::process::id()));
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(f.to_str().unwrap(), None, &wd).unwrap_err();
        std::fs::remove_file(&f).unwrap();
        assert!(e.contains("permission denied"), "{e}");
        let e = resolve("./missing", None, &wd).unwrap_err();
        assert!(e.contains("No such file"), "{e}");
        // A program of the working directory, typed without ./, is named.
        let dir = wd.join(format!("kauri-here-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("hello-kauri");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = resolve("hello-kauri", Some(OsStr::new("/usr/bin")), &dir).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            e.ends_with("not found in PATH (./hello-kauri exists)"),
            "{e}"
        );
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
        assert_eq!(found, Ok(f));
        assert!(e.starts_with("cannot execute ./th\u{fffd}: "), "{e}");
    }
}
