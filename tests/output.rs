//! The output options driven through the real `kauri` binary, with shell programs as ranks:
//! `-outfile-pattern`, `-errfile-pattern`, `-prepend-pattern` (and `-l`), `-output-from`, on
//! one host and on simulated hosts (`-launcher fork`), with the errors a bad pattern or a
//! missing directory gets. (What these check was compared with `mpiexec.hydra` 4.0.2.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod common;

use common::{kauri, stderr, KAURI};

/// A rank that writes two lines on stdout around one on stderr.
const TWO_AND_ONE: &str =
    "echo \"out $PMI_RANK a\"; echo \"err $PMI_RANK\" >&2; echo \"out $PMI_RANK b\"";

/// A fresh directory for test `name`.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kauri-output-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs kauri with `args` in the directory `cwd`.
fn kauri_in(cwd: &Path, args: &[&str]) -> Output {
    common::run_under_watchdog(Command::new(KAURI).args(args).current_dir(cwd))
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The names of the files in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// This machine's host name, as `%h` has it for a job on this host alone.
fn hostname() -> String {
    let o = Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn outfile_and_errfile_patterns_write_one_file_per_rank() {
    let dir = fresh_dir("files");
    let wdir = dir.join("ranks-run-here");
    std::fs::create_dir_all(&wdir).unwrap();
    // A longer file from an earlier run is emptied, not written over (Hydra leaves its end).
    std::fs::write(
        dir.join("out.1"),
        "an old line that is longer than the new ones\n",
    )
    .unwrap();
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "3",
            "-wdir",
            wdir.to_str().unwrap(),
            "-outfile-pattern",
            "out.%r",
            "-errfile-pattern",
            "err.%r",
            "sh",
            "-c",
            TWO_AND_ONE,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    for r in 0..3 {
        assert_eq!(
            read(&dir, &format!("out.{r}")),
            format!("out {r} a\nout {r} b\n")
        );
        assert_eq!(read(&dir, &format!("err.{r}")), format!("err {r}\n"));
        // A new file is the user's alone, as Hydra creates it.
        let mode = std::fs::metadata(dir.join(format!("err.{r}"))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
    // Relative to kauri's directory, not the ranks'.
    assert!(names(&wdir).is_empty(), "{:?}", names(&wdir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_the_outfile_pattern_leaves_stderr_on_the_terminal() {
    let dir = fresh_dir("outonly");
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "2",
            "-outfile-pattern",
            "o.%r",
            "sh",
            "-c",
            TWO_AND_ONE,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let mut err: Vec<&str> = std::str::from_utf8(&o.stderr).unwrap().lines().collect();
    err.sort();
    assert_eq!(err, ["err 0", "err 1"]);
    assert_eq!(names(&dir), ["o.0", "o.1"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn host_proxy_and_group_expand_on_one_host() {
    let dir = fresh_dir("onehost");
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "2",
            "-outfile-pattern",
            "o.%h.%p.%g.%r",
            "-errfile-pattern",
            "e-%%-%r",
            "sh",
            "-c",
            TWO_AND_ONE,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let h = hostname();
    assert_eq!(
        names(&dir),
        [
            "e-%-0",
            "e-%-1",
            &format!("o.{h}.0.0.0"),
            &format!("o.{h}.0.0.1")
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn patterns_on_two_simulated_hosts() {
    let dir = fresh_dir("twohosts");
    let mut args = vec![
        "-outfile-pattern",
        "o.%h.%p.%g.%r",
        "-errfile-pattern",
        "e.%h",
    ];
    args.extend(common::on_fork_hosts("a,b", "4", TWO_AND_ONE));
    let o = kauri_in(&dir, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", stderr(&o));
    // Ranks go round the hosts: 0 and 2 on a (its proxy 0), 1 and 3 on b (proxy 1).
    assert_eq!(
        names(&dir),
        [
            "e.a",
            "e.b",
            "o.a.0.0.0",
            "o.a.0.0.2",
            "o.b.1.0.1",
            "o.b.1.0.3"
        ]
    );
    for (r, h, p) in [(0, "a", 0), (1, "b", 1), (2, "a", 0), (3, "b", 1)] {
        let f = format!("o.{h}.{p}.0.{r}");
        assert_eq!(read(&dir, &f), format!("out {r} a\nout {r} b\n"), "{f}");
    }
    // One file for a host's ranks: whole lines of both.
    for (h, ranks) in [("a", ["0", "2"]), ("b", ["1", "3"])] {
        let mut lines: Vec<String> = read(&dir, &format!("e.{h}"))
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        assert_eq!(lines, ranks.map(|r| format!("err {r}")), "e.{h}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A rank that writes many long lines, each in several pieces, on both streams.
const LONG_LINES: &str = "for i in $(seq 1 40); do \
     printf 'x%.0s' $(seq 1 300); printf ' %s-%s' $PMI_RANK $i; printf 'y%.0s' $(seq 1 300); echo; \
     printf 'e%s-%s' $PMI_RANK $i >&2; echo >&2; \
     done";

#[test]
fn prepend_pattern_prefixes_every_whole_line() {
    let mut args = vec!["-prepend-pattern", "[%r@%h] "];
    args.extend(common::on_fork_hosts("a,b", "4", LONG_LINES));
    let o = kauri(&args, None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let host = |r: usize| if r % 2 == 0 { "a" } else { "b" };
    let out = String::from_utf8_lossy(&o.stdout);
    let mut seen = [0; 4];
    for line in out.lines() {
        let (prefix, rest) = line.split_once("] ").expect(line);
        let (r, h) = prefix.trim_start_matches('[').split_once('@').expect(line);
        let r: usize = r.parse().expect(line);
        assert_eq!(h, host(r), "{line}");
        // Never cut by another rank's bytes.
        let i = seen[r] + 1;
        let want = format!("{} {r}-{i}{}", "x".repeat(300), "y".repeat(300));
        assert_eq!(rest, want, "rank {r}'s line {i}");
        seen[r] = i;
    }
    assert_eq!(seen, [40; 4]);
    let err = stderr(&o);
    for r in 0..4 {
        let mine: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with(&format!("[{r}@{}] ", host(r))))
            .collect();
        assert_eq!(mine.len(), 40, "{err}");
        assert_eq!(mine[39], format!("[{r}@{}] e{r}-40", host(r)));
    }
}

#[test]
fn prepend_pattern_goes_into_files_and_counts_seconds() {
    let dir = fresh_dir("prefixfile");
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "2",
            "-prepend-pattern",
            "%t|%g|",
            "-outfile-pattern",
            "o.%r",
            "sh",
            "-c",
            TWO_AND_ONE,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for r in 0..2 {
        let text = read(&dir, &format!("o.{r}"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for (line, end) in lines.iter().zip(["a", "b"]) {
            let (secs, rest) = line.split_once('|').expect(line);
            assert!(secs.parse::<u64>().is_ok(), "{line}");
            assert_eq!(rest, format!("0|out {r} {end}"));
        }
    }
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err
        .lines()
        .all(|l| l.ends_with("|0|err 0") || l.ends_with("|0|err 1")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prepend_rank_still_labels_and_conflicts_with_a_pattern() {
    let o = kauri(
        &["-prepend-rank", "-n", "2", "sh", "-c", TWO_AND_ONE],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        common::lines(&o),
        ["[0] out 0 a", "[0] out 0 b", "[1] out 1 a", "[1] out 1 b"]
    );
    // As in Hydra, -l and -prepend-pattern both set the prefix: an error, one line.
    let o = kauri(
        &["-l", "-prepend-pattern", "%r: ", "-n", "1", "true"],
        None,
        &[],
    );
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("give one"), "{}", stderr(&o));
}

#[test]
fn output_from_shows_only_that_rank() {
    let o = kauri(
        &["-n", "3", "-output-from", "1", "sh", "-c", TWO_AND_ONE],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(common::lines(&o), ["out 1 a", "out 1 b"]);
    assert_eq!(stderr(&o), "err 1\n");
    // On simulated hosts, labelled, with the rank's lines in a file: no other rank's file.
    let dir = fresh_dir("outputfrom");
    let mut args = vec!["-output-from", "1", "-l", "-outfile-pattern", "o.%r"];
    args.extend(common::on_fork_hosts("a,b", "4", TWO_AND_ONE));
    let o = kauri_in(&dir, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(stderr(&o), "[1] err 1\n");
    assert_eq!(names(&dir), ["o.1"]);
    assert_eq!(read(&dir, "o.1"), "[1] out 1 a\n[1] out 1 b\n");
    std::fs::remove_dir_all(&dir).unwrap();
    // A rank the job does not have.
    let o = kauri(&["-n", "2", "-output-from", "2", "true"], None, &[]);
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o),
        "kauri: -output-from 2: the job has 2 ranks (0 to 1)\n"
    );
}

#[test]
fn a_directory_that_does_not_exist_fails_with_one_line() {
    let dir = fresh_dir("nodir");
    let marker = "kauri-marker-output-nodir";
    let prog = format!("echo started; sleep 300 # {marker}");
    // Known before the start: nothing runs.
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "2",
            "-errfile-pattern",
            "no/such/dir/e.%r",
            "sh",
            "-c",
            &prog,
        ],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(
        stderr(&o),
        "kauri: -errfile-pattern: cannot create no/such/dir/e.0: No such file or directory (os error 2)\n"
    );
    common::assert_none_left(marker, Duration::from_secs(30));
    // Known only at the first line (%t): the job is ended, on simulated hosts too.
    let mut args = vec!["-outfile-pattern", "no/such/dir/o.%r.%t"];
    args.extend(common::on_fork_hosts("a,b", "2", &prog));
    let o = kauri_in(&dir, &args);
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].starts_with("kauri: cannot create output file no/such/dir/o."),
        "{err}"
    );
    assert!(
        !err.contains("started") && lines[1..].iter().all(|l| !l.contains("output file")),
        "{err}"
    );
    common::assert_none_left(marker, Duration::from_secs(30));
    assert!(names(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_patterns_are_one_line() {
    for (args, want) in [
        (
            ["-outfile-pattern", "o.%x"],
            "kauri: -outfile-pattern: unknown specifier %x in \"o.%x\" (use %r, %g, %p, %h, %t or %%)\n",
        ),
        (
            ["-prepend-pattern", "%r%"],
            "kauri: -prepend-pattern: \"%r%\" ends with a lone % (write %% for a %)\n",
        ),
        (
            ["-output-from", "one"],
            "kauri: -output-from \"one\": not a rank\n",
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "1", "true"]);
        let o = kauri(&a, None, &[]);
        assert!(!o.status.success(), "{args:?}");
        assert_eq!(stderr(&o), want);
    }
}

/// A rank that spawns two processes through PMI-1 (`mcmd=spawn`), speaking it with the
/// shell over its `PMI_FD`.
const SPAWNER: &str = "printf 'cmd=init pmi_version=1 pmi_subversion=1\\n' >&$PMI_FD; read -r a <&$PMI_FD
printf 'mcmd=spawn\\nnprocs=2\\nexecname=sh\\ntotspawns=1\\nspawnssofar=1\\nargcnt=2\\narg1=-c\\narg2=echo child $PMI_RANK\\npreput_num=0\\ninfo_num=0\\nendcmd\\n' >&$PMI_FD
read -r b <&$PMI_FD; echo \"parent: $b\"
printf 'cmd=finalize\\n' >&$PMI_FD; read -r c <&$PMI_FD";

#[test]
fn a_spawned_job_is_group_one() {
    let dir = fresh_dir("spawn");
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "1",
            "-prepend-pattern",
            "[%g:%r] ",
            "-outfile-pattern",
            "o.%g.%r",
            "bash",
            "-c",
            SPAWNER,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(names(&dir), ["o.0.0", "o.1.0", "o.1.1"]);
    assert_eq!(read(&dir, "o.0.0"), "[0:0] parent: cmd=spawn_result rc=0\n");
    assert_eq!(read(&dir, "o.1.0"), "[1:0] child 0\n");
    assert_eq!(read(&dir, "o.1.1"), "[1:1] child 1\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An output file that is a second name of another file (a hard link, which another user
/// could make to a file of the user's where `fs.protected_hardlinks` is off) is refused with
/// one line, and the file it names is untouched; so is a file named by a `%t` pattern, which
/// kauri opens only at the rank's first line. Before, the other file was emptied and written.
#[test]
fn a_hard_link_or_a_planted_link_is_refused_with_one_line() {
    let dir = fresh_dir("hardlink");
    std::fs::write(dir.join("victim"), "the user's own\n").unwrap();
    std::fs::hard_link(dir.join("victim"), dir.join("out.0")).unwrap();
    let o = kauri_in(
        &dir,
        &["-outfile-pattern", "out.%r", "-n", "1", "echo", "injected"],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("kauri: -outfile-pattern: cannot create out.0: it has 2 names"),
        "{err}"
    );
    // %t: the file is known only at the first line; a link planted at its name.
    // (One link for each of the first 60 seconds: the line's second is not known.)
    for t in 0..60 {
        std::os::unix::fs::symlink("victim", dir.join(format!("late.{t}"))).unwrap();
    }
    let o = kauri_in(
        &dir,
        &["-outfile-pattern", "late.%t", "-n", "1", "echo", "injected"],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("kauri: cannot create output file late.")
                && l.ends_with(
                    ": it is a symbolic link, which kauri does not follow for an output file"
                )),
        "{err}"
    );
    assert_eq!(read(&dir, "victim"), "the user's own\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A rank that spawns `$1` one-rank jobs one after the other, each writing a line on stdout
/// and one on stderr, and prints kauri's open descriptors (its parent's `/proc/PPID/fd`)
/// after the 5th spawn and at the end, once every job's line is in its file.
const MANY_SPAWNS: &str = r#"
pmi() { printf "$1" >&$PMI_FD; read -r r <&$PMI_FD; }
fds() { echo "fds at $1: $(ls /proc/$PPID/fd | wc -l)"; }
pmi 'cmd=init pmi_version=1 pmi_subversion=1\n'
i=0
while [ $i -lt $1 ]; do
    i=$((i+1))
    pmi "mcmd=spawn\nnprocs=1\nexecname=sh\ntotspawns=1\nspawnssofar=1\nargcnt=3\narg1=-c\narg2=echo \"child \$0\"; echo \"err \$0\" >&2\narg3=$i\npreput_num=0\ninfo_num=0\nendcmd\n"
    case "$r" in *rc=0*) ;; *) echo "spawn $i failed: $r"; exit 3;; esac
    [ $i = 5 ] && { sleep 1; fds 5; }
done
while [ ! -s o.$1.0 ]; do sleep 0.1; done
sleep 2
fds end
pmi 'cmd=finalize\n'
"#;

/// A run that spawns 100 jobs, each with its own output file (`o.%g.%r`) and all sharing one
/// error file: kauri closes a spawned job's files when it ends (its descriptors at the end
/// are those after the 5th spawn, give or take the last jobs'), and a job that opens a
/// shared file again appends to it: every job's line is there. Before, every finished job's
/// file stayed open (100 more descriptors).
#[test]
fn a_finished_spawned_job_closes_its_output_files() {
    let n = 100;
    let dir = fresh_dir("many-spawns");
    let o = kauri_in(
        &dir,
        &[
            "-n",
            "1",
            "-outfile-pattern",
            "o.%g.%r",
            "-errfile-pattern",
            "e.shared",
            "bash",
            "-c",
            MANY_SPAWNS,
            "rank",
            &n.to_string(),
        ],
    );
    let parent = std::fs::read_to_string(dir.join("o.0.0")).unwrap_or_default();
    assert!(o.status.success(), "{parent}{}", stderr(&o));
    let fds = |when: &str| -> usize {
        parent
            .lines()
            .find_map(|l| l.strip_prefix(&format!("fds at {when}: ")))
            .unwrap_or_else(|| panic!("no count at {when} in {parent:?}"))
            .parse()
            .unwrap()
    };
    let (early, end) = (fds("5"), fds("end"));
    eprintln!("kauri's descriptors: {early} after 5 spawns, {end} after {n}");
    assert!(
        end <= early + 8,
        "kauri's descriptors grew from {early} to {end} over {n} spawns"
    );
    for g in 1..=n {
        assert_eq!(read(&dir, &format!("o.{g}.0")), format!("child {g}\n"));
    }
    let mut shared: Vec<String> = read(&dir, "e.shared").lines().map(String::from).collect();
    shared.sort();
    let mut want: Vec<String> = (1..=n).map(|g| format!("err {g}")).collect();
    want.sort();
    assert_eq!(shared, want, "every job's line in the shared file");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a terminal the test holds shows: everything read from its master so far.
struct Terminal {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Terminal {
    /// Reads until the text contains every one of `want` (within 120 s, else the test
    /// fails).
    fn until(&mut self, want: &[&str]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while !want.iter().all(|w| self.seen.contains(w)) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(b) => self.seen.push_str(&String::from_utf8_lossy(&b)),
                Err(_) => panic!("never saw {want:?} on the terminal: {:?}", self.seen),
            }
        }
    }
}

/// kauri run with its stdout and stderr on a terminal (a pseudo-terminal the test holds),
/// with `args`; returns the process and what its terminal shows.
fn kauri_on_a_terminal(args: &[&str]) -> (std::process::Child, Terminal) {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two new descriptors; the name, termios and window size are null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let child = Command::new(KAURI)
        .args(args)
        // Python's own buffering decides, as a user's shell leaves it.
        .env_remove("PYTHONUNBUFFERED")
        .stdin(std::process::Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut m = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n @ 1..) = m.read(&mut b) {
            if tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (
        child,
        Terminal {
            rx,
            seen: String::new(),
        },
    )
}

/// With kauri's stdout on a terminal, each rank's stdout is a pseudo-terminal (as
/// under mpirun), so the rank's own buffering writes each line as it comes: Python (line
/// buffered on a terminal, block buffered on a pipe) prints a line and waits for a file the
/// test makes only once the line reached the terminal, on one host and on two simulated
/// hosts. Then ranks that printed and wait for ever are ended by Ctrl-C (`SIGINT` to kauri):
/// what they printed was on the terminal already. `--no-pty` gives a pipe; stderr stays a
/// pipe.
#[test]
fn ranks_on_a_terminal_write_each_line_as_it_comes() {
    let dir = fresh_dir("pty");
    let gate = dir.join("gate");
    let prog = format!(
        "import os, sys, time\n\
         print('first', os.environ['PMI_RANK'], sys.stdout.isatty(), sys.stderr.isatty())\n\
         while not os.path.exists({gate:?}): time.sleep(0.05)\n\
         print('second', os.environ['PMI_RANK'])\n"
    );
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
        let _ = std::fs::remove_file(&gate);
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "python3", "-c", &prog]);
        let (mut child, mut term) = kauri_on_a_terminal(&args);
        term.until(&["first 0 True False", "first 1 True False"]);
        std::fs::write(&gate, "").unwrap();
        term.until(&["second 0", "second 1"]);
        assert!(child.wait().unwrap().success(), "{hosts:?}: {}", term.seen);
    }
    // Ctrl-C: nothing printed before it is lost.
    let (mut child, mut term) = kauri_on_a_terminal(&[
        "-n",
        "2",
        "python3",
        "-c",
        "import os, time; print('line', os.environ['PMI_RANK']); time.sleep(600)",
    ]);
    term.until(&["line 0", "line 1"]);
    // SAFETY: kill takes plain numbers.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{}", term.seen);
    // --no-pty: a pipe, as without a terminal.
    let (mut child, mut term) = kauri_on_a_terminal(&[
        "--no-pty",
        "-n",
        "1",
        "python3",
        "-c",
        "import sys; print('tty', sys.stdout.isatty())",
    ]);
    term.until(&["tty False"]);
    assert!(child.wait().unwrap().success(), "{}", term.seen);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs kauri with `args` and `env`, its stdout read 64 KiB at a time with 30 ms between
/// reads (about 2 MB/s: a slow terminal, `pv -L 2m`), its stderr kept. Returns the bytes
/// read, the status and stderr. A job still running after 600 s is killed and the test fails.
fn read_slowly(args: &[&str], env: &[(&str, &str)]) -> (u64, std::process::ExitStatus, String) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(KAURI)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kauri");
    let pid = child.id() as i32;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(600)).is_err() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let mut err = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = child.stdout.take().unwrap();
    let (mut bytes, mut buf) = (0u64, vec![0u8; 64 * 1024]);
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("reading kauri's stdout: {e}"),
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let status = child.wait().unwrap();
    let _ = done_tx.send(());
    assert!(
        !watchdog.join().unwrap(),
        "kauri {args:?} did not end in 600 s"
    );
    (bytes, status, errors.join().unwrap())
}

/// Two ranks that each write 10 MB, read at about 2 MB/s: every byte arrives and the status
/// is the ranks' (0), on one host, on two fork hosts (with links lost after 3 s of silence,
/// shorter than the run: a throttled uplink is not a silent one), on four fork hosts in a
/// tree two wide (an agent below an agent), and over two hosts of an ssh stand-in. An agent
/// that has sent its `Done` shuts its side of the link and reads its parent's heartbeats
/// until the parent closes its side; before, it closed its socket with heartbeats unread,
/// the kernel reset the link and the reset threw away what its parent had not read yet:
/// `kauri: agent on a died`, status 255, 16.6-18.9 of the 20 MB (39.7 of 40 MB with four
/// ranks).
#[test]
fn a_slow_reader_over_several_hosts_loses_nothing() {
    const EACH: u64 = 10_000_000;
    let prog = format!("head -c {EACH} /dev/zero");
    let (dir, ssh) = common::script("slow-reader-ssh", "ssh", common::SSH_STAND_IN);
    let timers = [("KAURI_HEARTBEAT", "1"), ("KAURI_HEARTBEAT_TIMEOUT", "3")];
    let deep = [("KAURI_TREE_WIDTH", "2")];
    let over_ssh = [("KAURI_ADDR", "127.0.0.1")];
    let ssh_args = [
        "-launcher",
        "ssh",
        "-launcher-exec",
        &ssh,
        "-hosts",
        "r1,r2",
    ];
    let ssh_args: Vec<&str> = ssh_args
        .iter()
        .copied()
        .chain(["-n", "2", "sh", "-c", &prog])
        .collect();
    let cases: [Case; 4] = [
        ("one host", vec!["-n", "2", "sh", "-c", &prog], &[], 2),
        (
            "two fork hosts",
            common::on_fork_hosts("a,b", "2", &prog),
            &timers,
            2,
        ),
        (
            "four fork hosts",
            common::on_fork_hosts("a,b,c,d", "4", &prog),
            &deep,
            4,
        ),
        ("two ssh hosts", ssh_args, &over_ssh, 2),
    ];
    for (name, args, env, ranks) in cases {
        let (bytes, status, errors) = read_slowly(&args, env);
        assert_eq!(
            bytes,
            ranks * EACH,
            "{name}: every byte arrives; stderr: {errors}"
        );
        assert!(status.success(), "{name}: {status}; stderr: {errors}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A case of a test: its name, kauri's arguments and environment, its number of ranks.
type Case<'a> = (&'a str, Vec<&'a str>, &'a [(&'a str, &'a str)], u64);
