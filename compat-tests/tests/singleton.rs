//! Singleton init: an MPI program started without a launcher runs `mpiexec -pmi_args PORT
//! INTERFACE KEY PID` from `PATH` when it first needs a process manager, and kauri (through
//! `contrib/mpiexec/mpiexec`) connects back and serves it.
//!
//! * `mpich_*`: `programs/singleton.c` built against MPICH's ch3 PMI-1 library (spawn, join)
//!   and Debian's MPICH (universe size): started directly, with kauri's `mpiexec` wrapper
//!   first in `PATH`. Every test ends by checking that no process is left: not the program,
//!   not kauri, not a spawned child. (Hydra 4.0.2 cannot be compared: it rejects `-pmi_args`
//!   and the program then waits forever.)
//! * `singinit_*`: a fake singleton in the test (a loopback listener and a `sleep` standing
//!   in for the program's pid) shows the exchange byte for byte and the failure cases.

use compat_tests::{find_marked, Ch3, Ctx, MARKER_VAR};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one program may run before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(180);

/// What a program started without a launcher did.
struct Ended {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "code {:?} signal {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.signal, self.stdout, self.stderr
        )
    }
}

/// Kills `pid` after [`LIMIT`] unless the returned sender is used (or dropped) first.
fn kill_after_limit(pid: u32) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(LIMIT) {
            compat_tests::signal_pid(pid, "KILL");
        }
    });
    tx
}

/// A directory holding only kauri's `mpiexec` wrapper (copied from `contrib/mpiexec`).
fn wrapper_dir(ctx: &Ctx) -> PathBuf {
    let dir = ctx.dir.join("mpiexec-bin");
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).expect("create the wrapper directory");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib/mpiexec/mpiexec");
        std::fs::copy(&src, dir.join("mpiexec")).expect("copy contrib/mpiexec/mpiexec");
    }
    dir
}

/// Starts `prog args` with no launcher, kauri's wrapper first in `PATH`; the handle yields
/// how it ended (killed after [`LIMIT`]).
fn start(
    ctx: &Ctx,
    prog: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::thread::JoinHandle<Ended> {
    use std::os::unix::process::ExitStatusExt;
    let path = format!(
        "{}:{}",
        wrapper_dir(ctx).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .current_dir(&ctx.dir)
        .env("PATH", path)
        .env("KAURI", ctx.kauri())
        .env(MARKER_VAR, &ctx.marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("start the singleton");
    let pid = child.id();
    let tx = kill_after_limit(pid);
    std::thread::spawn(move || {
        let out = child.wait_with_output().expect("wait for the singleton");
        let _ = tx.send(());
        Ended {
            code: out.status.code(),
            signal: out.status.signal(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
}

fn run(ctx: &Ctx, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Ended {
    let e = start(ctx, prog, args, env)
        .join()
        .expect("singleton thread");
    eprintln!("=== {prog} {}\n{e}", args.join(" "));
    e
}

/// Waits (generously: kauri ends its spawned jobs with a grace period) until no process of
/// the test is left, then asserts it.
fn assert_all_gone(ctx: &Ctx) {
    let t = Instant::now();
    while !find_marked(&ctx.marker, &ctx.dir).is_empty() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    ctx.assert_no_leftovers();
}

// =======================================================================================
// MPICH programs

#[test]
fn mpich_singleton_spawns_children() {
    let ctx = Ctx::new("sing-spawn");
    let prog = ctx.ch3_prog(Ch3::Pmi1, "singleton");
    let e = run(&ctx, &prog, &["spawn", "3"], &[]);
    assert_eq!(e.code, Some(0), "{e}");
    let mut got: Vec<&str> = e
        .stdout
        .lines()
        .filter(|l| l.starts_with("singleton: child"))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "singleton: child rank=0 size=3",
            "singleton: child rank=1 size=3",
            "singleton: child rank=2 size=3"
        ],
        "{e}"
    );
    assert!(e.stdout.contains("singleton: done"), "{e}");
    assert_eq!(e.stdout.matches("child: rank=").count(), 3, "{e}");
    assert_all_gone(&ctx);
}

#[test]
fn mpich_singleton_universe_size() {
    let ctx = Ctx::new("sing-universe");
    // Debian's MPICH (what users have) and the ch3 build: both ask kauri at MPI_Init's
    // attribute set-up. Unknown by default, as Hydra answers; KAURI_USIZE sets it (a
    // singleton has no command line to pass -usize on).
    let progs = [ctx.prog("singleton"), ctx.ch3_prog(Ch3::Pmi1, "singleton")];
    for prog in &progs {
        let e = run(&ctx, prog, &["universe"], &[]);
        assert_eq!(e.code, Some(0), "{e}");
        assert!(e.stdout.contains("universe: unset"), "{e}");
        assert!(e.stderr.is_empty(), "{e}");
        let e = run(&ctx, prog, &["universe"], &[("KAURI_USIZE", "5")]);
        assert_eq!(e.code, Some(0), "{e}");
        assert!(e.stdout.contains("universe: 5"), "{e}");
        assert!(e.stderr.is_empty(), "{e}");
    }
    assert_all_gone(&ctx);
}

#[test]
fn mpich_singletons_join() {
    let ctx = Ctx::new("sing-join");
    let prog = ctx.ch3_prog(Ch3::Pmi1, "singleton");
    let file = ctx.dir.join("port");
    let f = file.to_string_lossy().into_owned();
    let server = start(&ctx, &prog, &["join", "server", &f], &[]);
    let client = run(&ctx, &prog, &["join", "client", &f], &[]);
    let server = server.join().expect("server thread");
    eprintln!("=== server\n{server}");
    assert_eq!(server.code, Some(0), "{server}");
    assert_eq!(client.code, Some(0), "{client}");
    assert!(server.stdout.contains("join: sent 42"), "{server}");
    assert!(client.stdout.contains("join: got 42"), "{client}");
    assert_all_gone(&ctx);
}

#[test]
fn mpich_singleton_child_crash_ends_cleanly() {
    let ctx = Ctx::new("sing-crash");
    let prog = ctx.ch3_prog(Ch3::Pmi1, "singleton");
    let e = run(&ctx, &prog, &["crash", "2"], &[]);
    // A spawned rank died: like any job of the run, the singleton is ended (SIGTERM).
    assert_ne!(e.code, Some(0), "{e}");
    assert!(
        e.stderr.contains("of spawned job 1") && e.stderr.contains("SIGSEGV"),
        "{e}"
    );
    assert!(e.stdout.contains("singleton: pid="), "{e}");
    assert!(!e.stdout.contains("singleton: done"), "{e}");
    assert_all_gone(&ctx);
}

// =======================================================================================
// The exchange, with a fake singleton

/// A fake singleton: a loopback listener, and a `sleep` whose pid kauri watches.
struct Fake {
    listener: TcpListener,
    sleeper: std::process::Child,
}

impl Fake {
    fn new(ctx: &Ctx) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let sleeper = Command::new("sleep")
            .arg("600")
            .env(MARKER_VAR, &ctx.marker)
            .spawn()
            .expect("start sleep");
        Fake { listener, sleeper }
    }

    fn port(&self) -> String {
        self.listener.local_addr().expect("addr").port().to_string()
    }

    /// Starts `kauri -pmi_args PORT default_interface default_key PID`.
    fn kauri(&self, ctx: &Ctx) -> std::process::Child {
        Command::new(ctx.kauri())
            .args([
                "-pmi_args",
                &self.port(),
                "default_interface",
                "default_key",
                &self.sleeper.id().to_string(),
            ])
            .env(MARKER_VAR, &ctx.marker)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kauri")
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
    }
}

/// Waits for `child` (killing it after [`LIMIT`]); returns its exit code and stderr.
fn finish(child: std::process::Child) -> (Option<i32>, String) {
    let pid = child.id();
    let tx = kill_after_limit(pid);
    let out = child.wait_with_output().expect("wait for kauri");
    let _ = tx.send(());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("=== kauri: {:?}\n{err}", out.status);
    (out.status.code(), err)
}

fn read_line(r: &mut BufReader<std::net::TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).expect("read a line");
    l
}

#[test]
fn singinit_exchange_then_pmi_and_the_end_of_the_pid() {
    let ctx = Ctx::new("singinit-fake");
    let mut fake = Fake::new(&ctx);
    let kauri = fake.kauri(&ctx);
    let (s, _) = fake.listener.accept().expect("kauri connects back");
    s.set_read_timeout(Some(LIMIT)).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    let hello = read_line(&mut r);
    assert!(hello.starts_with("cmd=singinit "), "{hello:?}");
    assert!(hello.contains("authtype=none"), "{hello:?}");
    w.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=1 stdio=yes authtype=none\n")
        .expect("write");
    let info = read_line(&mut r);
    // A kvsname of kauri's own, not the client's made-up `singinit_kvs_PID_0`: MPICH's ch3
    // renames its process group only to a name that differs (MPIDI_PG_CheckForSingleton).
    let kvs = info
        .strip_prefix("cmd=singinit_info versionok=yes stdio=no kvsname=")
        .map(str::trim_end)
        .unwrap_or_else(|| panic!("{info:?}"))
        .to_string();
    assert!(
        !kvs.is_empty() && !kvs.starts_with("singinit_kvs"),
        "{info:?}"
    );
    // Then PMI-1 on the same connection, as MPICH's client does.
    w.write_all(b"cmd=init pmi_version=1 pmi_subversion=1\n")
        .expect("write");
    assert!(read_line(&mut r).starts_with("cmd=response_to_init"));
    w.write_all(b"cmd=get_maxes\n").expect("write");
    assert!(read_line(&mut r).starts_with("cmd=maxes"));
    // The replayed cached put (empty when nothing was put) and an unfenced get of a real one.
    let put = format!("cmd=put kvsname={kvs} key= value=\n");
    w.write_all(put.as_bytes()).expect("write");
    assert!(read_line(&mut r).contains("rc=0"));
    let put = format!("cmd=put kvsname={kvs} key=P0-businesscard value=xyz\n");
    w.write_all(put.as_bytes()).expect("write");
    assert!(read_line(&mut r).contains("rc=0"));
    let get = format!("cmd=get kvsname={kvs} key=P0-businesscard\n");
    w.write_all(get.as_bytes()).expect("write");
    let got = read_line(&mut r);
    assert!(got.contains("rc=0") && got.contains("value=xyz"), "{got:?}");
    w.write_all(b"cmd=get_universe_size\n").expect("write");
    assert!(read_line(&mut r).contains("size=-1"));
    w.write_all(b"cmd=finalize\n").expect("write");
    assert!(read_line(&mut r).starts_with("cmd=finalize_ack"));
    drop((w, r));
    // kauri serves the program until its pid ends, not until the socket closes.
    std::thread::sleep(Duration::from_millis(500));
    let mut kauri = kauri;
    assert!(
        kauri.try_wait().expect("try_wait").is_none(),
        "kauri ended before the singleton's pid did"
    );
    let _ = fake.sleeper.kill();
    let _ = fake.sleeper.wait();
    let (code, err) = finish(kauri);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    drop(fake);
    assert_all_gone(&ctx);
}

#[test]
fn singinit_failures_are_clear_and_quick() {
    let ctx = Ctx::new("singinit-bad");
    // Nothing listens on the port.
    let fake = Fake::new(&ctx);
    let port = fake.port();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").expect("listen");
        l.local_addr().expect("addr").port().to_string()
    };
    let out = Command::new(ctx.kauri())
        .args([
            "-pmi_args",
            &closed,
            "default_interface",
            "default_key",
            &fake.sleeper.id().to_string(),
        ])
        .env(MARKER_VAR, &ctx.marker)
        .output()
        .expect("run kauri");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    assert!(err.contains("cannot connect to the singleton"), "{err}");

    // A peer that does not speak singinit.
    let kauri = fake.kauri(&ctx);
    let (mut s, _) = fake.listener.accept().expect("kauri connects back");
    let mut hello = [0u8; 64];
    let _ = s.read(&mut hello).expect("read");
    s.write_all(b"cmd=hello\n").expect("write");
    let (code, err) = finish(kauri);
    assert_eq!(code, Some(255), "{err}");
    assert!(err.contains("not cmd=singinit"), "{err}");

    // A peer that asks for authentication kauri does not offer.
    let kauri = fake.kauri(&ctx);
    let (mut s, _) = fake.listener.accept().expect("kauri connects back");
    let _ = s.read(&mut hello).expect("read");
    s.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=1 authtype=shared\n")
        .expect("write");
    let (code, err) = finish(kauri);
    assert_eq!(code, Some(255), "{err}");
    assert!(err.contains("authentication"), "{err}");

    // Bad arguments: a usage error, nothing started.
    for args in [
        &["-pmi_args", "0", "x", "y", "12"][..],
        &["-pmi_args", &port, "x", "y", "notapid"][..],
        &["-pmi_args", &port, "x"][..],
        &["-pmi_args", &port, "x", "y", "12", "./a.out"][..],
    ] {
        let out = Command::new(ctx.kauri())
            .args(args)
            .env(MARKER_VAR, &ctx.marker)
            .output()
            .expect("run kauri");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(255), "{args:?}: {err}");
        assert!(err.contains("-pmi_args"), "{args:?}: {err}");
    }
    drop(fake);
    assert_all_gone(&ctx);
}

#[test]
fn contrib_install_does_not_shadow_by_surprise() {
    let ctx = Ctx::new("mpiexec-install");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib/mpiexec/install.sh");
    let dir = ctx.dir.join("inst");
    let out = Command::new("sh")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run install.sh");
    assert!(out.status.success(), "{out:?}");
    let installed = std::fs::read_to_string(dir.join("mpiexec")).expect("installed");
    assert!(installed.contains("kauri as `mpiexec`"));
    // Again: replaces its own wrapper.
    let out = Command::new("sh")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run install.sh");
    assert!(out.status.success(), "{out:?}");
    // Someone else's mpiexec there: left alone, and an error.
    std::fs::write(dir.join("mpiexec"), "#!/bin/sh\necho other\n").expect("write");
    let out = Command::new("sh")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run install.sh");
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("mpiexec")).expect("read"),
        "#!/bin/sh\necho other\n"
    );
    // The wrapper runs the kauri it is told to.
    let w = wrapper_dir(&ctx).join("mpiexec");
    let out = Command::new(&w)
        .arg("--version")
        .env("KAURI", ctx.kauri())
        .output()
        .expect("run the wrapper");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("kauri "),
        "{out:?}"
    );
}
