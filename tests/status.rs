//! The hang diagnosis while the job runs: `kauri --status` from another shell, `SIGUSR1` to
//! kauri, stacks with `-timeout-stacks`; and the status socket keeps other users out.

mod common;

use common::{assert_none_left, kauri, stderr, KAURI};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A fresh private directory to stand for the session's `$XDG_RUNTIME_DIR`, so tests that run
/// at once each see their own jobs only.
fn runtime_dir(test: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("kauri-rt-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// A kauri job running in the background, its stderr collected as it comes.
struct Job {
    child: Child,
    err: Arc<Mutex<String>>,
    out: std::thread::JoinHandle<String>,
}

impl Job {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Job {
        let mut child = Command::new(KAURI)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kauri");
        let err = Arc::new(Mutex::new(String::new()));
        let (mut e, sink) = (child.stderr.take().unwrap(), err.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = e.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut o = child.stdout.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = o.read_to_string(&mut s);
            s
        });
        Job { child, err, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits (generously) until kauri's stderr has a line containing each of `want`.
    fn wait_stderr(&self, want: &[&str]) {
        let start = Instant::now();
        loop {
            let err = self.stderr();
            if want.iter().all(|w| err.lines().any(|l| l.contains(w))) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no {want:?} on stderr: {err}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the end; (exit code, stdout, stderr).
    fn end(mut self) -> (Option<i32>, String, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(180) {
                let _ = self.child.kill();
                panic!("kauri did not end: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = self.out.join().unwrap();
        // The stderr reader sees the end of the pipe soon after the exit.
        std::thread::sleep(Duration::from_millis(200));
        let err = self.err.lock().unwrap().clone();
        (status.code(), out, err)
    }
}

/// `kauri --status ARGS` with `env`.
fn status(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(KAURI)
        .arg("--status")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run kauri --status")
}

/// Asks `kauri --status PID` until its answer has a line containing each of `want`.
fn status_until(pid: u32, env: &[(&str, &str)], want: &[&str]) -> String {
    let start = Instant::now();
    loop {
        let o = status(&[&pid.to_string()], env);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() && want.iter().all(|w| text.lines().any(|l| l.contains(w))) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "kauri --status never said {want:?}; last: {text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A two-host job whose rank 0 waits in a fence for rank 1, which waits for the file `go`
/// before it enters: `kauri --status` from another shell and `SIGUSR1` both say rank 0 is in
/// fence 0, rank 1 not yet in PMI, and the fence waits for host b; the job then ends well.
#[test]
fn status_from_another_shell_and_on_sigusr1_while_the_job_goes_on() {
    let marker = format!("status-shell-{}", std::process::id());
    let rt = runtime_dir("shell");
    let go = rt.join("go");
    let prog = format!(
        "if [ $KAURI_RANK = 0 ]; then {KAURI} kvs fence; echo done0; \
         else while [ ! -e {} ]; do sleep 0.1; done; {KAURI} kvs fence; echo done1; fi # {marker}",
        go.display()
    );
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let job = Job::start(&common::on_fork_hosts("a,b", "2", &prog), &env);
    let pid = job.pid();
    let text = status_until(pid, &env, &["rank 0 on a (pid ", "): in fence 0"]);
    eprintln!("kauri --status {pid}:\n{text}");
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("kauri {pid} (1 job(s), 2 ranks, running for ")),
        "{text}"
    );
    assert!(first.contains(&marker), "the command line: {text}");
    assert!(text.contains("  where the ranks are:"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("rank 1 on b (pid ") && l.ends_with("): not in PMI yet")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.ends_with(", fence 0 waits for the agent on b")),
        "{text}"
    );
    // Host a sent its part of fence 0 up: it waits for nothing of its own.
    assert!(!text.contains("fence 1"), "{text}");
    // Without a pid: every job of this user (here, this one).
    let all = status(&[], &env);
    assert!(all.status.success());
    assert!(String::from_utf8_lossy(&all.stdout).starts_with(&format!("kauri {pid} ")));

    // SIGUSR1: the same on kauri's stderr, and the job goes on.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    job.wait_stderr(&[
        "kauri:   where the ranks are:",
        ", fence 0 waits for the agent on b",
    ]);
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = job.end();
    assert_eq!(code, Some(0), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["done0", "done1"], "{err}");
    assert!(
        !err.contains("timed out") && !err.contains("ending the job"),
        "{err}"
    );
    // The socket is gone with the job, and nobody answers any more.
    let sock = rt.join("kauri").join(format!("{pid}.sock"));
    assert!(!sock.exists(), "{} left behind", sock.display());
    assert!(
        !rt.join("kauri").exists(),
        "the socket's directory is left behind"
    );
    let after = status(&[], &env);
    assert_eq!(after.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&after.stderr).contains("no kauri job of yours"));
    assert_none_left(&marker, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&rt);
}

/// A rank that closed its PMI connection without finalizing, and runs on, is shown as such:
/// before, `running (in no PMI call)`, without a word of the closed connection. (Alone in its
/// job it harms no fence: the job goes on, and ends well.)
#[test]
fn status_names_a_rank_that_closed_its_pmi_connection() {
    let marker = format!("status-hangup-{}", std::process::id());
    let rt = runtime_dir("hangup");
    let go = rt.join("go");
    let _go = Touch(go.clone());
    let prog = format!(
        "printf 'cmd=init pmi_version=1 pmi_subversion=1\\n' >&$PMI_FD; read -r a <&$PMI_FD; \
         eval \"exec $PMI_FD>&-\"; while [ ! -e {} ]; do sleep 0.1; done # {marker}",
        go.display()
    );
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let job = Job::start(&["-n", "1", "bash", "-c", &prog], &env);
    let pid = job.pid();
    let text = status_until(
        pid,
        &env,
        &["rank 0 on ", "closed its PMI connection without finalizing"],
    );
    eprintln!("kauri --status {pid}:\n{text}");
    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.end();
    assert_eq!(code, Some(0), "{err}");
    assert_none_left(&marker, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&rt);
}

/// Makes its file when dropped: what a test waits for comes even when an assertion fails.
struct Touch(std::path::PathBuf);

impl Drop for Touch {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// While the launcher still starts host b's agent (a stand-in for ssh that waits for the file
/// `go` before it runs the agent), `kauri --status` says host b's agent is being launched, for
/// how long and by which launcher, and does not count b among the hosts that did not answer;
/// host a, whose agent is up, answers for its rank. Once b's agent runs, the job ends well.
/// Before, b was in `no answer from the host(s) b`, as if its agent were up.
#[test]
fn status_during_start_up_names_the_hosts_still_being_launched() {
    let marker = format!("status-launching-{}", std::process::id());
    let rt = runtime_dir("launching");
    let go = rt.join("go");
    let (dir, ssh) = common::script(
        &marker,
        "slow-ssh",
        &format!(
            r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
# Host b's launch takes until the test says go (300 s at most: nothing outlives the test).
n=0
while [ "$host" = b ] && [ ! -e {go} ] && [ $n -lt 3000 ]; do sleep 0.1; n=$((n + 1)); done
exec sh -c "$*"
"#,
            go = go.display()
        ),
    );
    let prog = format!(
        "while [ ! -e {} ]; do sleep 0.1; done; echo ran on $KAURI_HOST # {marker}",
        go.display()
    );
    let env = [
        ("XDG_RUNTIME_DIR", rt.to_str().unwrap()),
        ("KAURI_ADDR", "127.0.0.1"),
        // b's launch may take its time on a loaded machine.
        ("KAURI_CONNECT_TIMEOUT", "300"),
    ];
    let job = Job::start(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "a,b",
            "-n",
            "2",
            "sh",
            "-c",
            &prog,
        ],
        &env,
    );
    // Should an assertion fail, b's launch and the ranks still go on to their end.
    let _go_anyway = Touch(go.clone());
    let pid = job.pid();
    let text = status_until(
        pid,
        &env,
        &["rank 0 on a (pid ", "host b: agent being launched for "],
    );
    eprintln!("kauri --status {pid}:\n{text}");
    let launching = text
        .lines()
        .find(|l| l.contains("host b: agent being launched for "))
        .unwrap();
    assert!(launching.ends_with(" s (ssh)"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("no answer from") && l.contains('b')),
        "b is being launched, not silent: {text}"
    );
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = job.end();
    assert_eq!(code, Some(0), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["ran on a", "ran on b"], "{err}");
    assert_none_left(&marker, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&rt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-timeout-stacks`: when `MPIEXEC_TIMEOUT` fires, the diagnosis has each stuck rank's stack,
/// taken on its own host (here one simulated host each), before the job ends.
#[test]
fn a_timeout_with_stacks_shows_where_each_rank_sleeps() {
    let marker = format!("status-stacks-{}", std::process::id());
    let prog = format!("exec sleep 300 # {marker}");
    let mut args = vec!["-timeout-stacks"];
    args.extend(common::on_fork_hosts("a,b", "2", &prog));
    let o = kauri(
        &args,
        None,
        &[("MPIEXEC_TIMEOUT", "5"), ("KAURI_KILL_GRACE", "1")],
    );
    let err = stderr(&o);
    eprintln!("{err}");
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        !err.contains("neither eu-stack nor gdb"),
        "this test needs gdb or eu-stack (.ci/setup installs gdb): {err}"
    );
    for host in ["a", "b"] {
        let head = err
            .lines()
            .position(|l| {
                l.starts_with("kauri:   stack of rank ") && l.contains(&format!(" on {host} (pid "))
            })
            .unwrap_or_else(|| panic!("no stack from {host}: {err}"));
        let frames: Vec<&str> = err
            .lines()
            .skip(head + 1)
            .take_while(|l| l.starts_with("kauri:     "))
            .collect();
        assert!(
            frames
                .iter()
                .any(|l| l.starts_with("kauri:     #0 ") && l.contains("sleep")),
            "rank on {host}: no frame 0 in a sleep: {frames:?}"
        );
    }
    assert_none_left(&marker, Duration::from_secs(30));
}

/// The status socket is the job's user's only: the directory keeps others out, and when it
/// is opened up anyway, a connection of another user is refused with one line.
#[test]
fn another_user_cannot_ask_for_status() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0
        || !Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let marker = format!("status-other-{}", std::process::id());
    let rt = runtime_dir("other");
    let go = rt.join("go");
    let prog = format!(
        "while [ ! -e {} ]; do sleep 0.1; done # {marker}",
        go.display()
    );
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let job = Job::start(&["-n", "1", "sh", "-c", &prog], &env);
    let pid = job.pid();
    status_until(pid, &env, &["rank 0 on "]);
    let as_nobody = || {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", KAURI])
            .args(["--status", &pid.to_string()])
            .env("XDG_RUNTIME_DIR", &rt)
            .current_dir("/")
            .output()
            .unwrap()
    };
    // Open the test's runtime directory to nobody: kauri's own 0700 directory still stops it.
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o711)).unwrap();
    let o = as_nobody();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    // Open kauri's directory and socket too: `kauri --status` of nobody's asks no socket in
    // a directory that is not nobody's, and kauri itself refuses a connection made anyway.
    let dir = rt.join("kauri");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let sock = dir.join(format!("{pid}.sock"));
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = as_nobody();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(o.stdout.is_empty(), "nobody got an answer: {o:?}");
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("python3 is needed (Debian package python3)");
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            python,
            "-c",
        ])
        .arg(
            "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.connect(sys.argv[1])\n\
             try:\n    s.sendall(b'status\\n'); got = s.recv(4096)\n\
             except OSError:\n    got = b''\n\
             print(repr(got))",
        )
        .arg(&sock)
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "b''\n",
        "nobody got an answer: {o:?}"
    );
    job.wait_stderr(&["kauri: refused a status request from uid 65534"]);
    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.end();
    assert_eq!(code, Some(0), "{err}");
    assert_none_left(&marker, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&rt);
}

/// A link planted where the status directory goes is not followed: the job runs without a
/// status socket (and says so under `-v`), and nothing is made where the link points.
#[test]
fn a_planted_link_at_the_status_directory_is_not_followed() {
    let rt = runtime_dir("planted");
    let elsewhere = rt.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, rt.join("kauri")).unwrap();
    let o = kauri(
        &["-v", "-n", "1", "true"],
        None,
        &[("XDG_RUNTIME_DIR", rt.to_str().unwrap())],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("no status socket") && l.contains("symbolic link")),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&rt);
}

/// The open descriptors of process `pid` that are sockets.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// 300 idle connections to a job's status socket (the user's own: nobody else gets past the
/// directory) cost kauri a bounded number of sockets: it serves 16 at once
/// (`status::CLIENTS_MAX`) and closes the others at once, and an idle one is closed after its
/// deadline; then `kauri --status` is answered again. Before, each was accepted and held (for
/// 5 s), a socket and a task apiece: kauri's sockets rose by 300.
#[test]
fn idle_status_connections_are_bounded_and_dropped() {
    use std::os::unix::net::UnixStream;
    let marker = format!("status-idle-{}", std::process::id());
    let rt = runtime_dir("idle");
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let prog = format!("sleep 300 # {marker}");
    let job = Job::start(&["-n", "1", "sh", "-c", &prog], &env);
    let pid = job.pid();
    status_until(pid, &env, &["rank 0 on "]);
    let base = sockets_of(pid);
    let sock = rt.join("kauri").join(format!("{pid}.sock"));
    let mut conns: Vec<UnixStream> = (0..300)
        .map(|_| {
            let c = UnixStream::connect(&sock).unwrap();
            c.set_nonblocking(true).unwrap();
            c
        })
        .collect();
    // Each connection ends closed by kauri: at once over the limit, at its deadline else.
    // Meanwhile kauri never holds more than the limit (and a little room).
    let start = Instant::now();
    let mut peak = 0;
    let mut failed = None;
    while !conns.is_empty() && failed.is_none() {
        peak = peak.max(sockets_of(pid).saturating_sub(base));
        conns.retain_mut(|c| {
            let mut b = [0u8; 64];
            match c.read(&mut b) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            }
        });
        if peak > 16 + 8 {
            failed = Some(format!(
                "kauri holds {peak} more sockets than before the 300 connections"
            ));
        } else if start.elapsed() > Duration::from_secs(120) {
            failed = Some(format!("{} idle connections still open", conns.len()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("peak: {peak} sockets over the {base} before");
    if failed.is_none() {
        status_until(pid, &env, &["rank 0 on "]);
    }
    let _ = Command::new("kill").arg(pid.to_string()).status();
    job.end();
    assert_none_left(&marker, Duration::from_secs(10));
    assert!(failed.is_none(), "{}", failed.unwrap_or_default());
    let _ = std::fs::remove_dir_all(&rt);
}

/// `kauri --status` asks no socket in a status directory someone else could have put there
/// (open to others, or another user's): such a socket may be anybody's, and its answer would
/// be printed as the job's. It says so in one line, status 1, and touches nothing there.
/// Before, it printed whatever a socket planted there answered (status 0), and removed the
/// files named for a process that is gone.
#[test]
fn kauri_status_asks_no_socket_in_a_directory_it_cannot_trust() {
    use std::io::{BufRead, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let rt = runtime_dir("untrusted");
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let dir = rt.join("kauri");
    std::fs::create_dir(&dir).unwrap();
    // A socket named for a live process (this test), which answers like a kauri job, and a
    // file named for a process that is gone.
    let me = std::process::id();
    let planted = std::os::unix::net::UnixListener::bind(dir.join(format!("{me}.sock"))).unwrap();
    let gone = dir.join("4194303.sock");
    std::fs::write(&gone, "").unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let (count, listener) = (asked.clone(), planted.try_clone().unwrap());
    let server = std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = std::io::BufReader::new(&c).read_line(&mut line);
            if line.is_empty() {
                return; // the test's own connection: the end
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = (&c).write_all(format!("kauri {me} (1 job(s), spoofed)\n").as_bytes());
        }
    });
    let mut cases = vec![(0o777, None, "its mode is 777, not 700")];
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        cases.push((0o700, Some(65534), "it is owned by uid 65534"));
    }
    for (mode, owner, why) in cases {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        if owner.is_some() {
            std::os::unix::fs::chown(&dir, owner, owner).unwrap();
        }
        for args in [vec![], vec![me.to_string()]] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = status(&args, &env);
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
            assert!(
                o.stdout.is_empty(),
                "{args:?}: the planted socket answered: {o:?}"
            );
            assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
            assert!(
                err.contains(&format!(
                    "{} exists and is not a private directory",
                    dir.display()
                )) && err.contains(why),
                "{args:?}: {err}"
            );
        }
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "a planted socket was asked"
    );
    assert!(gone.exists(), "a file in the planted directory was removed");
    drop(std::os::unix::net::UnixStream::connect(
        dir.join(format!("{me}.sock")),
    ));
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&rt);
}

/// The socket of a kauri that is gone (killed with `SIGKILL`, it could not remove it) is
/// removed by the next `kauri --status`, which finds no process of its pid; the directory,
/// the user's own, stays for the jobs to come.
#[test]
fn kauri_status_removes_the_socket_of_a_kauri_that_is_gone() {
    use std::os::unix::fs::PermissionsExt;
    let rt = runtime_dir("gone");
    let env = [("XDG_RUNTIME_DIR", rt.to_str().unwrap())];
    let dir = rt.join("kauri");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let pid = (1..4_194_304u32)
        .rev()
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    let sock = dir.join(format!("{pid}.sock"));
    // A socket whose listener is closed: what a killed kauri leaves.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let o = status(&[], &env);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no kauri job of yours"),
        "{o:?}"
    );
    assert!(!sock.exists(), "{} is left", sock.display());
    assert!(dir.is_dir());
    let _ = std::fs::remove_dir_all(&rt);
}
