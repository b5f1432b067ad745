//! Hydra's output options: the patterns of `-prepend-pattern`, `-outfile-pattern` and
//! `-errfile-pattern` ([`Pattern`]: `%r` rank, `%g` process group, `%p` proxy, `%h` host,
//! `%t` seconds since the start, `%%`), `-output-from` ([`OutputOptions`]), what becomes of
//! each line of one rank's stream ([`Route`]), and the output files the front end writes
//! ([`Files`]).
//!
//! As in Hydra, a host's agent labels its ranks' lines and drops those `-output-from` does not
//! want; the lines bound for a file travel up the tree with the file's name, and the front end
//! opens and writes the files, relative to its own working directory (not the ranks'). The
//! patterns and routes are plain data; only [`Files`] does I/O, and the forwarding itself
//! lives in `iofwd`.

use crate::error::OutputError;
pub use kauri_core::plan::output::{Origin, OutputOptions, OutputPlan, Pattern};
use kauri_os::clock::unix_ms;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// A [`Pattern`] for one rank: expanded once, or at every use when it counts seconds.
#[derive(Debug, Clone)]
pub struct RankPattern {
    pattern: Pattern,
    rank: usize,
    pgid: u32,
    proxy: u32,
    host: String,
    start_unix_ms: u64,
    fixed: Option<Arc<str>>,
}

impl RankPattern {
    /// `pattern` with rank `rank`'s values.
    pub fn new(pattern: &Pattern, plan: &OutputPlan, rank: usize, proxy: u32, host: &str) -> Self {
        let mut p = RankPattern {
            pattern: pattern.clone(),
            rank,
            pgid: plan.pgid,
            proxy,
            host: host.to_string(),
            start_unix_ms: plan.start_unix_ms,
            fixed: None,
        };
        if !pattern.has_time() {
            p.fixed = Some(p.expand().into());
        }
        p
    }

    fn expand(&self) -> String {
        let o = Origin {
            rank: self.rank,
            pgid: self.pgid,
            proxy: self.proxy,
            host: &self.host,
        };
        let seconds = unix_ms().saturating_sub(self.start_unix_ms) / 1000;
        self.pattern.expand(&o, seconds)
    }

    /// The text now.
    pub fn now(&self) -> Arc<str> {
        match &self.fixed {
            Some(f) => f.clone(),
            None => self.expand().into(),
        }
    }
}

/// What becomes of the lines of one rank's stdout or stderr.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// Dropped: `-output-from` names another rank (the stream is still read to its end).
    pub drop: bool,
    /// Put before every line.
    pub prefix: Option<RankPattern>,
    /// The file the lines go to, instead of kauri's stream.
    pub file: Option<RankPattern>,
}

impl Route {
    /// The route of rank `rank`'s `stdout` (else stderr) in a job with `plan`; the rank runs on
    /// `host`, the job's host number `proxy`.
    pub fn new(plan: &OutputPlan, stdout: bool, rank: usize, proxy: u32, host: &str) -> Route {
        let o = &plan.options;
        let file = if stdout { &o.outfile } else { &o.errfile };
        let bind = |p: &Pattern| RankPattern::new(p, plan, rank, proxy, host);
        Route {
            drop: o.output_from.is_some_and(|r| r != rank),
            prefix: o.prepend.as_ref().map(bind),
            file: file.as_ref().map(bind),
        }
    }
}

/// The files the ranks of a job with `plan` write to, as far as they are known before it
/// starts: those of every rank whose output is kept, for patterns without `%t`. `origin(r)`:
/// rank `r`'s proxy and host. Each file once, in rank order.
pub fn files_of_job<'a>(
    plan: &OutputPlan,
    size: usize,
    origin: impl Fn(usize) -> (u32, &'a str),
) -> Vec<(String, &'static str)> {
    let o = &plan.options;
    let mut seen = std::collections::HashSet::new();
    let mut files = Vec::new();
    for (pattern, option) in [
        (&o.outfile, "-outfile-pattern"),
        (&o.errfile, "-errfile-pattern"),
    ] {
        let Some(p) = pattern.as_ref().filter(|p| !p.has_time()) else {
            continue;
        };
        for rank in (0..size).filter(|&r| o.output_from.is_none_or(|k| k == r)) {
            let (proxy, host) = origin(rank);
            let o = Origin {
                rank,
                pgid: plan.pgid,
                proxy,
                host,
            };
            let path = p.expand(&o, 0);
            if seen.insert(path.clone()) {
                files.push((path, option));
            }
        }
    }
    files
}

/// The output files the front end writes, by name (relative to its working directory). A
/// file is created (or emptied) when first opened, readable and writable by the user only,
/// as Hydra creates it; Hydra does not empty an old file but writes over its start, which
/// leaves the end of a longer old output behind. A file is opened as [`open_for_user`] does:
/// never through a symbolic link, and never one that is not the user's own regular file.
///
/// A spawned job's files are closed when it ends ([`Files::close_one`]), so that a run of many
/// spawns holds no descriptor per finished job; a later job whose pattern names the same file
/// opens it again to append, and what the earlier jobs wrote stays. The names of the files
/// closed are kept for that (one per file the run created, not per job).
#[derive(Debug, Default)]
pub struct Files {
    open: HashMap<Arc<str>, Option<tokio::fs::File>>,
    /// Files this run wrote and closed since: opened again, they are appended to.
    closed: HashSet<Arc<str>>,
}

/// Opens (or creates, mode 0600) the file `path` for the user to write, and empties it
/// (`truncate`) or appends to it; or refuses it with an error that says why. A directory anyone may write to (`/tmp`, a shared
/// scratch directory) may hold a link or a file another user planted at the name a pattern
/// gives, to make kauri empty and write over a file of the user's: so the last component is
/// not followed if it is a symbolic link (`O_NOFOLLOW`: the open fails), a FIFO or a device
/// does not block or act (`O_NONBLOCK`, `O_NOCTTY`), and what was opened is checked on its
/// descriptor (`fstat`, no window between the check and the use) to be a regular file whose
/// owner is the user running kauri, with no other name (a hard link to another of the user's
/// files). Only then is it emptied: an open never truncates.
pub fn open_for_user(path: &str, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .append(!truncate)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let f = match opened {
        Ok(f) => f,
        // The open refused it (a link: ELOOP; a FIFO without a reader: ENXIO; in a sticky
        // directory, the kernel's protected_symlinks or protected_regular: EACCES): say why
        // from what is there now. Only the message depends on it; the file is refused anyway.
        Err(e) => {
            let there = std::fs::symlink_metadata(path).ok();
            return Err(there.and_then(|m| refusal(&m)).unwrap_or(e));
        }
    };
    if let Some(why) = refusal(&f.metadata()?) {
        return Err(why);
    }
    if truncate {
        f.set_len(0)?;
    }
    blocking(&f)?;
    Ok(f)
}

/// Why a file with `meta` (not followed if it is a link) is not one kauri writes for the user.
fn refusal(meta: &std::fs::Metadata) -> Option<std::io::Error> {
    use std::os::unix::fs::MetadataExt;
    let kind = meta.file_type();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let why = if kind.is_symlink() {
        "it is a symbolic link, which kauri does not follow for an output file".to_string()
    } else if !kind.is_file() {
        "it is not a regular file".to_string()
    } else if meta.uid() != me {
        format!(
            "it is owned by uid {}, not by uid {me} who runs kauri; refusing to write over it",
            meta.uid()
        )
    } else if meta.nlink() > 1 {
        // A hard link someone made to another of the user's files (possible where
        // fs.protected_hardlinks is off): writing would empty that file.
        format!(
            "it has {} names (hard links); refusing to write over another file",
            meta.nlink()
        )
    } else {
        return None;
    };
    Some(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        why,
    ))
}

/// Clears the `O_NONBLOCK` [`open_for_user`] opened `f` with.
fn blocking(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor `f` owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Files {
    /// Creates the files `paths` names, each with the option that named it for the error.
    pub fn create(paths: &[(String, &str)]) -> Result<Files, OutputError> {
        let mut files = Files::default();
        for (path, option) in paths {
            let f = open_for_user(path, true).map_err(|source| OutputError::Create {
                option: option.to_string(),
                path: path.clone(),
                source,
            })?;
            files
                .open
                .insert(path.as_str().into(), Some(tokio::fs::File::from_std(f)));
        }
        Ok(files)
    }

    /// Appends `data` to the file `path`, opening it first if it is not open yet. An error is
    /// one line for the user, told once per file: the file's later lines are dropped.
    pub async fn write(&mut self, path: &Arc<str>, data: &[u8]) -> Result<(), OutputError> {
        if !self.open.contains_key(path) {
            let p = path.to_string();
            let truncate = !self.closed.contains(path);
            let opened = tokio::task::spawn_blocking(move || open_for_user(&p, truncate))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            match opened {
                Ok(f) => self
                    .open
                    .insert(path.clone(), Some(tokio::fs::File::from_std(f))),
                Err(e) => {
                    self.open.insert(path.clone(), None);
                    return Err(OutputError::Open {
                        path: path.to_string(),
                        source: e,
                    });
                }
            };
        }
        let Some(Some(f)) = self.open.get_mut(path) else {
            return Ok(());
        };
        let written = match f.write_all(data).await {
            Ok(()) => f.flush().await,
            Err(e) => Err(e),
        };
        written.map_err(|source| {
            self.open.insert(path.clone(), None);
            OutputError::Write {
                path: path.to_string(),
                source,
            }
        })
    }

    /// Flushes and closes the file `path`, if open, until the next write to it (which
    /// appends). A file that failed stays failed.
    pub async fn close_one(&mut self, path: &Arc<str>) {
        if !matches!(self.open.get(path), Some(Some(_))) {
            return;
        }
        if let Some(Some(mut f)) = self.open.remove(path) {
            let _ = f.flush().await;
            self.closed.insert(path.clone());
        }
    }

    /// Flushes and closes every file.
    pub async fn close(self) {
        for (_, f) in self.open {
            if let Some(mut f) = f {
                let _ = f.flush().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin<'static> {
        Origin {
            rank: 3,
            pgid: 1,
            proxy: 2,
            host: "n7",
        }
    }

    #[test]
    fn specifiers_expand_as_in_hydra() {
        let p = Pattern::parse("out.%r.%g.%p.%h.%t-100%%").unwrap();
        assert_eq!(p.expand(&origin(), 42), "out.3.1.2.n7.42-100%");
        assert!(p.has_time());
        let p = Pattern::parse("[%r] ").unwrap();
        assert!(!p.has_time());
        assert_eq!(p.expand(&origin(), 0), "[3] ");
        assert_eq!(Pattern::parse("").unwrap().expand(&origin(), 0), "");
        assert_eq!(
            Pattern::parse("%%r").unwrap().expand(&origin(), 0),
            "%r",
            "%% is a literal %, not the start of a specifier"
        );
    }

    #[test]
    fn bad_patterns_say_why() {
        use kauri_core::plan::output::PatternError;
        assert!(matches!(
            Pattern::parse("out.%x"),
            Err(PatternError::UnknownSpecifier { spec: 'x', .. })
        ));
        assert!(matches!(
            Pattern::parse("out.%"),
            Err(PatternError::LonePercent { .. })
        ));
    }

    #[test]
    fn routes_follow_the_options() {
        let plan = OutputPlan {
            options: OutputOptions {
                prepend: Some(Pattern::parse("%h:%r ").unwrap()),
                outfile: Some(Pattern::parse("o.%r").unwrap()),
                errfile: None,
                output_from: Some(1),
                ..Default::default()
            },
            pgid: 0,
            start_unix_ms: unix_ms(),
        };
        let out = Route::new(&plan, true, 1, 0, "a");
        assert!(!out.drop);
        assert_eq!(&*out.prefix.unwrap().now(), "a:1 ");
        assert_eq!(&*out.file.unwrap().now(), "o.1");
        let err = Route::new(&plan, false, 1, 0, "a");
        assert!(err.file.is_none());
        assert!(Route::new(&plan, true, 0, 0, "a").drop);
    }

    /// What [`open_for_user`] refuses, and what it empties. (Another user's file is in
    /// `tests/other_users.rs`, planted as `nobody`; here, as root, a file given to uid 65534.)
    #[test]
    fn an_output_file_is_the_users_own_regular_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("kauri-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let at = |n: &str| dir.join(n).to_str().unwrap().to_string();
        std::fs::write(dir.join("victim"), "keep me\n").unwrap();
        std::os::unix::fs::symlink(dir.join("victim"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        let e = open_for_user(&at("link"), true).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let e = open_for_user(&at("dangling"), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(
            !dir.join("nowhere").exists(),
            "a dangling link's target is not made"
        );
        let fifo = std::ffi::CString::new(at("fifo")).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = open_for_user(&at("fifo"), true).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file"),
            "a FIFO, without blocking: {e}"
        );
        assert!(
            open_for_user(dir.to_str().unwrap(), true).is_err(),
            "a directory"
        );
        std::fs::write(dir.join("old"), "an old longer line\n").unwrap();
        let f = open_for_user(&at("old"), true).unwrap();
        assert_eq!(
            f.metadata().unwrap().len(),
            0,
            "the user's own file is emptied"
        );
        // Opened again to append (a later job's): what is there stays, the same checks hold.
        use std::io::Write;
        (&f).write_all(b"first\n").unwrap();
        let mut again = open_for_user(&at("old"), false).unwrap();
        again.write_all(b"second\n").unwrap();
        let both = std::fs::read_to_string(dir.join("old")).unwrap();
        assert_eq!(both, "first\nsecond\n", "an append keeps what was written");
        let e = open_for_user(&at("link"), false).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let e = open_for_user(&at("fifo"), false).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let f = open_for_user(&at("new"), true).unwrap();
        assert_eq!(f.metadata().unwrap().mode() & 0o777, 0o600);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(dir.join("old"), Some(65534), Some(65534)).unwrap();
            std::fs::write(dir.join("old"), "nobody's\n").unwrap();
            for truncate in [true, false] {
                let e = open_for_user(&at("old"), truncate).unwrap_err().to_string();
                assert!(e.contains("owned by uid 65534"), "{e}");
            }
            let kept = std::fs::read_to_string(dir.join("old")).unwrap();
            assert_eq!(kept, "nobody's\n", "another user's file is not emptied");
        }
        let kept = std::fs::read_to_string(dir.join("victim")).unwrap();
        assert_eq!(kept, "keep me\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_job_knows_its_files_before_it_starts() {
        let mut plan = OutputPlan::default();
        plan.options.outfile = Some(Pattern::parse("o.%h").unwrap());
        plan.options.errfile = Some(Pattern::parse("e.%r").unwrap());
        let hosts = ["a", "b"];
        let files = files_of_job(&plan, 3, |r| ((r % 2) as u32, hosts[r % 2]));
        let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, ["o.a", "o.b", "e.0", "e.1", "e.2"]);
        plan.options.output_from = Some(2);
        plan.options.outfile = Some(Pattern::parse("o.%t").unwrap());
        let files = files_of_job(&plan, 3, |r| ((r % 2) as u32, hosts[r % 2]));
        assert_eq!(files, vec![("e.2".to_string(), "-errfile-pattern")]);
    }
}
