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
