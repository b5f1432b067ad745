//! `kauri nameserver` driven as its clients drive it: request lines over TCP, and kauri runs
//! told `-nameserver`. A name belongs to the connection that published it; with `-key` (or
//! `KAURI_NAMESERVER_KEY`) a client presents the secret before anything else.

mod common;

use common::{kauri, stderr};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `kauri nameserver -port 0` on loopback, killed when dropped.
struct NameServer {
    child: Child,
    addr: String,
}

impl NameServer {
    fn start(args: &[&str], env: &[(&str, &str)]) -> NameServer {
        let mut child = Command::new(common::KAURI)
            .args(["nameserver", "-port", "0", "-bind", "127.0.0.1"])
            .args(args)
            .env_remove("KAURI_NAMESERVER_KEY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kauri nameserver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("kauri nameserver listening on ")
            .unwrap_or_else(|| panic!("kauri nameserver {args:?} said {line:?}"))
            .to_string();
        NameServer { child, addr }
    }

    /// The server's peak resident set so far (`VmHWM`, kB).
    fn peak_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM in {status}"))
    }

    fn connect(&self) -> Conn {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Conn {
            rd: BufReader::new(s.try_clone().unwrap()),
            wr: s,
        }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One client connection.
struct Conn {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
}

impl Conn {
    /// Sends one request line; returns the reply line ("" once the server closed).
    fn ask(&mut self, line: &str) -> String {
        self.wr.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut reply = String::new();
        let _ = self.rd.read_line(&mut reply);
        reply.trim_end().to_string()
    }
}

/// Another client cannot unpublish a name: it gets an error reply and the name stays, still
/// the publisher's to withdraw.
#[test]
fn only_the_publisher_unpublishes_a_name() {
    let ns = NameServer::start(&[], &[]);
    let (mut a, mut b) = (ns.connect(), ns.connect());
    assert_eq!(a.ask("publish svc p-a"), "ok");
    let r = b.ask("unpublish svc");
    assert!(r.starts_with("error "), "another client's unpublish: {r:?}");
    assert!(r.contains("another"), "{r:?}");
    assert_eq!(b.ask("lookup svc"), "ok p-a", "the name stays");
    assert!(b.ask("publish svc p-b").starts_with("error "));
    assert_eq!(a.ask("unpublish svc"), "ok");
    assert!(b.ask("lookup svc").starts_with("error "));
}

/// With a key, a client that does not present it first (or presents another) gets one error
/// reply and is disconnected; one that does is served. The key may come from the command line
/// or the environment.
#[test]
fn a_keyed_name_server_serves_only_clients_with_the_key() {
    for ns in [
        NameServer::start(&["-key", "s3cret"], &[]),
        NameServer::start(&[], &[("KAURI_NAMESERVER_KEY", "s3cret")]),
    ] {
        let mut c = ns.connect();
        let r = c.ask("lookup x");
        assert!(r.starts_with("error ") && r.contains("key"), "{r:?}");
        assert_eq!(c.ask("lookup x"), "", "disconnected after the error");
        let mut c = ns.connect();
        assert!(c.ask("auth wrong").starts_with("error "));
        assert_eq!(c.ask("auth s3cret"), "", "disconnected after a wrong key");
        let mut c = ns.connect();
        assert_eq!(c.ask("auth s3cret"), "ok");
        assert_eq!(c.ask("publish n p"), "ok");
        assert_eq!(c.ask("lookup n"), "ok p");
    }
}

/// A rank's `publish_name` through a kauri run told `-nameserver`: its front end presents
/// `KAURI_NAMESERVER_KEY` when set; without it, or with another key, the keyed server refuses
/// and the rank gets an error reply (and, for a wrong key, kauri says so on its stderr).
#[test]
fn kauri_presents_the_key_from_its_environment() {
    let ns = NameServer::start(&["-key", "s3cret"], &[]);
    let script = r#"
printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&$PMI_FD; read -r l <&$PMI_FD
printf 'cmd=publish_name service=svc port=p1\n' >&$PMI_FD; read -r l <&$PMI_FD; echo "$l"
printf 'cmd=finalize\n' >&$PMI_FD; read -r l <&$PMI_FD
"#;
    let args = ["-nameserver", &ns.addr, "-n", "1", "bash", "-c", script];
    let with = kauri(&args, None, &[("KAURI_NAMESERVER_KEY", "s3cret")]);
    let out = String::from_utf8_lossy(&with.stdout).into_owned();
    assert!(with.status.success(), "{}", stderr(&with));
    assert!(
        out.contains("cmd=publish_result rc=0"),
        "{out}{}",
        stderr(&with)
    );
    let mut c = ns.connect();
    assert_eq!(c.ask("auth s3cret"), "ok");
    // The run has ended: its name went with its connection.
    assert!(c.ask("lookup svc").starts_with("error "));
    let without = kauri(&args, None, &[("KAURI_NAMESERVER_KEY", "")]);
    let out = String::from_utf8_lossy(&without.stdout).into_owned();
    assert!(
        out.contains("cmd=publish_result rc=") && !out.contains("rc=0") && out.contains("key"),
        "{out}{}",
        stderr(&without)
    );
    let wrong = kauri(&args, None, &[("KAURI_NAMESERVER_KEY", "guess")]);
    let err = stderr(&wrong);
    assert!(
        err.contains(&format!(
            "kauri: the name server at {} refused the key",
            ns.addr
        )),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&wrong.stdout).contains("rc=0"));
}

/// Sends `n` requests `line(i)` on `c`, one at a time, until the server closes; returns how
/// many were answered `ok`, the first other answer and how many were answered.
fn flood(c: &mut Conn, n: usize, line: impl Fn(usize) -> String) -> (usize, Option<String>, usize) {
    let (mut ok, mut other, mut answered) = (0, None, 0);
    for i in 0..n {
        match c.ask_or_closed(&line(i)).as_deref() {
            None | Some("") => break,
            Some("ok") => ok += 1,
            Some(r) => {
                other.get_or_insert_with(|| r.to_string());
            }
        }
        answered += 1;
    }
    (ok, other, answered)
}

impl Conn {
    /// [`Conn::ask`], or `None` once the server closed (a write or read that fails).
    fn ask_or_closed(&mut self, line: &str) -> Option<String> {
        self.wr.write_all(format!("{line}\n").as_bytes()).ok()?;
        let mut reply = String::new();
        self.rd.read_line(&mut reply).ok()?;
        Some(reply.trim_end().to_string())
    }
}

/// One client cannot make the server grow: 20,000 publishes with ports of 60,000 bytes
/// (1.2 GB) end at the first, a line over the limit (an error naming it, the connection
/// closed); 2,000 names of 7,000 bytes stop at the 1024 one client may hold (an error naming
/// the limit, the connection served on); a client that sends requests and never reads the
/// replies stops being read. The server's peak resident set stays under 64 MB. (Before: every
/// publish was taken, the server's peak RSS reached 1.2 GB.)
#[test]
fn one_client_cannot_make_the_name_server_grow() {
    let ns = NameServer::start(&[], &[]);
    let big = "p".repeat(60_000);
    let mut c = ns.connect();
    let (ok, first, answered) = flood(&mut c, 20_000, |i| format!("publish big{i} {big}"));
    eprintln!(
        "long lines: {ok} ok of {answered} answered, first refusal {first:?}; server peak {} kB",
        ns.peak_kb()
    );
    assert_eq!(ok, 0, "no name with a 60,000-byte port is taken");
    let first = first.unwrap_or_default();
    assert!(
        first.starts_with("error ") && first.contains("8192"),
        "{first}"
    );
    assert_eq!(
        answered, 1,
        "the connection is closed after the over-long line"
    );

    let port = "q".repeat(7_000);
    let mut c = ns.connect();
    let (ok, first, answered) = flood(&mut c, 2_000, |i| format!("publish n{i} {port}"));
    eprintln!(
        "many names: {ok} ok of {answered} answered, first refusal {first:?}; server peak {} kB",
        ns.peak_kb()
    );
    assert_eq!(
        (ok, answered),
        (1024, 2_000),
        "1024 names taken, the connection served on"
    );
    let first = first.unwrap_or_default();
    assert!(
        first.starts_with("error ")
            && first.contains("1024")
            && first.contains("KAURI_NAMESERVER_MAX_NAMES_PER_CLIENT"),
        "{first}"
    );
    assert_eq!(c.ask("lookup n0"), format!("ok {port}"));
    assert_eq!(c.ask("unpublish n0"), "ok");
    assert_eq!(
        c.ask(&format!("publish again {port}")),
        "ok",
        "a name withdrawn frees its place"
    );

    // Requests without reading a reply, until a write waits 3 s: the server stops reading
    // once the replies fill the socket, and serves others meanwhile.
    let mut mute = ns.connect();
    mute.wr
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let chunk = "lookup n1\n".repeat(10_000);
    let mut sent = 0usize;
    while sent < 200_000_000 && mute.wr.write_all(chunk.as_bytes()).is_ok() {
        sent += chunk.len();
    }
    eprintln!(
        "a client that does not read: {sent} bytes sent before a write waited 3 s; server peak {} kB",
        ns.peak_kb()
    );
    assert!(
        sent < 200_000_000,
        "the server kept reading a client that does not read"
    );
    assert_eq!(c.ask("lookup n1"), format!("ok {port}"));
    drop(mute);

    let kb = ns.peak_kb();
    assert!(kb < 64 * 1024, "the name server's peak RSS reached {kb} kB");
}

/// The names of all clients together are bounded too (here 50, 30 per client, set by
/// `KAURI_NAMESERVER_MAX_NAMES` and `KAURI_NAMESERVER_MAX_NAMES_PER_CLIENT`), and a client
/// gone frees its names' places; a bad value stops the server at its start.
#[test]
fn the_name_servers_names_are_bounded_in_all() {
    let ns = NameServer::start(
        &[],
        &[
            ("KAURI_NAMESERVER_MAX_NAMES", "50"),
            ("KAURI_NAMESERVER_MAX_NAMES_PER_CLIENT", "30"),
        ],
    );
    let (mut a, mut b) = (ns.connect(), ns.connect());
    let (ok, first, _) = flood(&mut a, 31, |i| format!("publish a{i} p"));
    assert_eq!(ok, 30);
    assert!(first.unwrap_or_default().contains("30"));
    let (ok, first, _) = flood(&mut b, 21, |i| format!("publish b{i} p"));
    assert_eq!(ok, 20);
    let first = first.unwrap_or_default();
    assert!(
        first.starts_with("error ")
            && first.contains("50")
            && first.contains("KAURI_NAMESERVER_MAX_NAMES"),
        "{first}"
    );
    drop(a);
    // The server withdraws a's names once it sees the connection closed.
    let mut freed = false;
    for _ in 0..300 {
        if b.ask("publish b-after p") == "ok" {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(freed, "a's names still held 30 s after it left");

    let bad = Command::new(common::KAURI)
        .args(["nameserver", "-port", "0", "-bind", "127.0.0.1"])
        .env("KAURI_NAMESERVER_MAX_NAMES", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("KAURI_NAMESERVER_MAX_NAMES must be a positive number"),
        "{}",
        stderr(&bad)
    );
}

/// At most `KAURI_NAMESERVER_MAX_CLIENTS` clients are served at once (here 3): one more gets
/// an error naming the limit and is closed; once a client leaves, a new one is served.
#[test]
fn the_name_server_serves_a_bounded_number_of_clients() {
    let ns = NameServer::start(&[], &[("KAURI_NAMESERVER_MAX_CLIENTS", "3")]);
    let mut served: Vec<Conn> = (0..3).map(|_| ns.connect()).collect();
    assert_eq!(served[0].ask("publish x p"), "ok");
    for c in &mut served {
        assert_eq!(c.ask("lookup x"), "ok p", "each of the first 3 is served");
    }
    let mut extra = ns.connect();
    let r = extra.ask("lookup x");
    assert!(
        r.starts_with("error ") && r.contains("3") && r.contains("KAURI_NAMESERVER_MAX_CLIENTS"),
        "{r}"
    );
    assert_eq!(extra.ask_or_closed("lookup x").unwrap_or_default(), "");
    drop(served.pop());
    let mut back = false;
    for _ in 0..300 {
        let mut c = ns.connect();
        if c.ask("lookup x") == "ok p" {
            back = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(back, "no client served 30 s after one left");
}
