//! Arguments, program names, environment values and working directories that are not UTF-8
//! (a Latin-1 file name from an old file system): every byte reaches the ranks as the OS gave
//! it to kauri, on this host and on simulated hosts whose agents get the plan over the tree's
//! links. Each rank prints the bytes it got in hex, and the test compares them exactly.

mod common;

use common::{run_under_watchdog, stderr, KAURI};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `caf\xe9`: "café" in Latin-1, not UTF-8.
const CAFE: &[u8] = b"caf\xe9";

/// What each rank prints, one line: its rank, then in hex its `$0` (the program as run), its
/// two arguments, its inherited, `-genv` and `-env` variables, the line of its environment
/// whose name is not UTF-8, and its working directory.
const SHOW: &str = r#"#!/bin/sh
LC_ALL=C
export LC_ALL
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
key=$(tr '\0' '\n' < /proc/$$/environ | grep -a '^NONUTF8KEY_')
printf 'rank=%s zero=%s a1=%s a2=%s inherited=%s genv=%s env=%s key=%s pwd=%s\n' \
  "$PMI_RANK" "$(hex "$0")" "$(hex "$1")" "$(hex "$2")" "$(hex "$INHERITED")" \
  "$(hex "$GIVEN")" "$(hex "$SEGMENT")" "$(hex "$key")" "$(hex "$(pwd -P)")"
"#;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn os(b: &[u8]) -> OsString {
    OsString::from_vec(b.to_vec())
}

/// A fresh directory for `test` holding a directory `d\xe9` (the ranks' `-wdir`) with the
/// script `caf\xe9.sh` in it; returns (the top directory, the working directory).
fn latin1_tree(test: &str) -> (PathBuf, PathBuf) {
    let top = std::env::temp_dir().join(format!("kauri-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&top);
    let wdir = top.join(OsStr::from_bytes(b"d\xe9"));
    std::fs::create_dir_all(&wdir).unwrap();
    let script = wdir.join(OsStr::from_bytes(b"caf\xe9.sh"));
    std::fs::write(&script, SHOW).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (top, wdir.canonicalize().unwrap())
}

/// Runs `./caf\xe9.sh caf\xe9 plain` as `n` ranks (after `before`, with `env`, `-wdir` the
/// directory `d\xe9`, an inherited variable, a `-genv` and a `-env` one, and an inherited
/// variable whose name is not UTF-8, all of them not UTF-8 either), and checks every byte
/// each rank printed.
fn every_byte_arrives(test: &str, before: &[&str], n: usize, env: &[(&str, &str)]) {
    let (top, wdir) = latin1_tree(test);
    let mut cmd = Command::new(KAURI);
    cmd.args(before)
        .arg("-genv")
        .arg("GIVEN")
        .arg(os(b"\xe9t\xe9"))
        .arg("-wdir")
        .arg(&wdir)
        .args(["-n", &n.to_string(), "-env", "SEGMENT"])
        .arg(os(b"\xff\xfe"))
        .arg(os(b"./caf\xe9.sh"))
        .arg(os(CAFE))
        .arg("plain")
        .envs(env.iter().copied())
        .env("INHERITED", os(CAFE))
        .env(os(b"NONUTF8KEY_\xe9"), os(b"v\xe9"));
    let o = run_under_watchdog(&mut cmd);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{before:?}: {err}");
    let mut got: Vec<String> = String::from_utf8(o.stdout.clone())
        .expect("hex output")
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    let program = wdir.join(OsStr::from_bytes(b"./caf\xe9.sh"));
    let want: Vec<String> = (0..n)
        .map(|r| {
            format!(
                "rank={r} zero={} a1={} a2={} inherited={} genv={} env={} key={} pwd={}",
                hex(program.as_os_str().as_bytes()),
                hex(CAFE),
                hex(b"plain"),
                hex(CAFE),
                hex(b"\xe9t\xe9"),
                hex(b"\xff\xfe"),
                hex(b"NONUTF8KEY_\xe9=v\xe9"),
                hex(Path::new(&wdir).as_os_str().as_bytes()),
            )
        })
        .collect();
    assert_eq!(got, want, "{before:?}: {err}");
    std::fs::remove_dir_all(&top).unwrap();
}

/// On this host: kauri panicked reading its own command line (status 101), before it started
/// anything.
#[test]
fn bytes_that_are_not_utf8_reach_ranks_here() {
    every_byte_arrives("osbytes-here", &[], 2, &[]);
}

/// On two simulated hosts, each with its agent: the plan carries the bytes over the links.
#[test]
fn bytes_that_are_not_utf8_reach_ranks_on_other_hosts() {
    every_byte_arrives(
        "osbytes-hosts",
        &["-launcher", "fork", "-hosts", "a,b"],
        2,
        &[],
    );
}

/// A configfile's lines are bytes too: a segment's program and arguments in Latin-1 run as
/// written.
#[test]
fn a_configfile_in_latin1_runs_as_written() {
    let (top, wdir) = latin1_tree("osbytes-config");
    let file = top.join("config");
    let mut line = b"-n 1 -wdir ".to_vec();
    line.extend_from_slice(wdir.as_os_str().as_bytes());
    line.extend_from_slice(b" ./caf\xe9.sh caf\xe9 plain\n");
    std::fs::write(&file, line).unwrap();
    let mut cmd = Command::new(KAURI);
    cmd.arg("-configfile").arg(&file);
    let o = run_under_watchdog(&mut cmd);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8(o.stdout.clone()).expect("hex output");
    let program = wdir.join(OsStr::from_bytes(b"./caf\xe9.sh"));
    assert!(
        out.starts_with(&format!(
            "rank=0 zero={} a1={} a2={} ",
            hex(program.as_os_str().as_bytes()),
            hex(CAFE),
            hex(b"plain")
        )),
        "{out}{err}"
    );
    std::fs::remove_dir_all(&top).unwrap();
}

/// A program that is not there, named in Latin-1: one line naming it (its bytes shown as
/// text can), status 255, not a panic.
#[test]
fn a_missing_program_in_latin1_is_named_in_one_line() {
    let mut cmd = Command::new(KAURI);
    cmd.args(["-n", "1"]).arg(os(b"./no-such-caf\xe9"));
    let o = run_under_watchdog(&mut cmd);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(101), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("no-such-caf"), "{err}");
    assert!(o.stdout.is_empty());
}

/// An ssh stand-in in `dir` that runs its remote command here, through a shell as sshd
/// would; returns its path.
fn ssh_stand_in(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("ssh");
    std::fs::write(&path, common::SSH_STAND_IN).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Through the ssh launcher (a stand-in that runs the remote command here): the same bytes.
#[test]
fn bytes_that_are_not_utf8_reach_ranks_through_ssh() {
    let dir = std::env::temp_dir().join(format!("kauri-osbytes-ssh-{}", std::process::id()));
    let ssh = ssh_stand_in(&dir);
    let launcher = [
        "-launcher",
        "ssh",
        "-launcher-exec",
        &ssh,
        "-hosts",
        "r1,r2",
    ];
    every_byte_arrives(
        "osbytes-sshjob",
        &launcher,
        2,
        &[("KAURI_ADDR", "127.0.0.1")],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// kauri itself in a directory that is not UTF-8 (a hard link to it in `k\xe9`): it ran at
/// all (its `argv[0]` panicked too), and the fork and ssh launchers start its agents from
/// there (the ssh one quotes the path for the remote shell).
#[test]
fn kauri_in_a_latin1_directory_starts_its_agents() {
    // Beside the binary (a hard link needs the same file system).
    let mut name = b"k\xe9-".to_vec();
    name.extend_from_slice(std::process::id().to_string().as_bytes());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(OsStr::from_bytes(&name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let me = dir.join("kauri");
    std::fs::hard_link(KAURI, &me).unwrap();
    let bin = std::env::temp_dir().join(format!("kauri-osbytes-agentssh-{}", std::process::id()));
    let ssh = ssh_stand_in(&bin);
    for launcher in [
        &["-launcher", "fork"][..],
        &["-launcher", "ssh", "-launcher-exec", &ssh][..],
    ] {
        let mut cmd = Command::new(&me);
        cmd.args(launcher)
            .args(["-hosts", "a,b", "-n", "2", "sh", "-c", "echo $KAURI_HOST"])
            .env("KAURI_ADDR", "127.0.0.1");
        let o = run_under_watchdog(&mut cmd);
        assert_eq!(o.status.code(), Some(0), "{launcher:?}: {}", stderr(&o));
        assert_eq!(common::lines(&o), ["a", "b"], "{launcher:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&bin).unwrap();
}

/// The inheritance policies hold for such variables: `-genvlist` passes the one it names
/// (byte for byte) and not a name that is not UTF-8; `-genvnone` passes neither.
#[test]
fn the_environment_policies_hold_for_bytes() {
    let show = "printf '%s|' \"$INHERITED\" | od -An -tx1 | tr -d ' \\n'; \
                tr '\\0' '\\n' < /proc/$$/environ | grep -c '^NONUTF8KEY_'";
    for (policy, want) in [
        (&["-genvlist", "INHERITED"][..], format!("{}7c0", hex(CAFE))),
        (&["-genvnone"][..], "7c0".to_string()),
        (&["-genvall"][..], format!("{}7c1", hex(CAFE))),
    ] {
        let mut cmd = Command::new(KAURI);
        cmd.args(policy)
            .args(["-n", "1", "sh", "-c", show])
            .env("INHERITED", os(CAFE))
            .env(os(b"NONUTF8KEY_\xe9"), os(b"v\xe9"));
        let o = run_under_watchdog(&mut cmd);
        let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert_eq!(out, want, "{policy:?}: {}", stderr(&o));
    }
}
