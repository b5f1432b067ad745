//! Host lists through the real `kauri` binary. Those a user got wrong or made hostile: each is
//! one line naming what is wrong, before anything starts; a host name never
//! reaches ssh as one of its options, and a huge one is not echoed whole. Those that name
//! this machine more than once, by any of its names or addresses: run here, never through
//! ssh.

mod common;

use common::{kauri, script, stderr};

/// kauri with `args` before `-n 1 echo ran`, expected to refuse them: status 255, nothing run,
/// one line on stderr, which is returned.
fn refused(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["-n", "1", "echo", "ran"]);
    let o = kauri(&all, None, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing runs");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    err.trim_end().to_string()
}

/// `-hosts ''`, `,,,`, `a,,b` and `a:3:4` were accepted silently (the first two ran the job
/// here, the last tried to reach a host named `a:3`); each is one line now, and so is the
/// same mistake on a hostfile's line.
#[test]
fn empty_or_malformed_host_lists_are_refused() {
    let e = refused(&["-hosts", ""]);
    assert!(e.contains("-hosts \"\": names no host"), "{e}");
    let e = refused(&["-hosts", ",,,"]);
    assert!(e.contains("an empty host name"), "{e}");
    let e = refused(&["-launcher", "fork", "-hosts", "a,,b"]);
    assert!(e.contains("an empty host name"), "{e}");
    let e = refused(&["-hosts", "a:3:4"]);
    assert!(
        e.contains("bad host \"a:3:4\"") && e.contains("host:N"),
        "{e}"
    );
    let (dir, _) = script("hostlists", "unused", "");
    let f = dir.join("hosts");
    std::fs::write(&f, "a\nb:3:4\n").unwrap();
    let e = refused(&["-f", f.to_str().unwrap()]);
    assert!(e.contains("hosts:2: bad host \"b:3:4\""), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An ssh stand-in in a directory of its own that records its arguments in `calls` there and
/// fails: (the directory, the stand-in's path).
fn recording_ssh(name: &str) -> (std::path::PathBuf, String) {
    script(
        name,
        "ssh",
        "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/calls\"\nexit 255\n",
    )
}

/// A host name that starts with `-` would be an option to ssh (`-oProxyCommand=…` runs a
/// command on this machine): refused with one line, and the ssh stand-in never runs.
#[test]
fn a_host_name_that_looks_like_an_option_is_refused() {
    let (dir, ssh) = recording_ssh("hostlists-option");
    let hostile = format!("-oProxyCommand={}/ssh", dir.display());
    for args in [
        vec![
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            &hostile,
        ],
        vec!["-launcher", "ssh", "-launcher-exec", &ssh, "-hosts", "-x,a"],
    ] {
        let e = refused(&args);
        assert!(e.contains("cannot start with '-'"), "{e}");
    }
    let f = dir.join("hosts");
    std::fs::write(&f, format!("{hostile}\n")).unwrap();
    let e = refused(&[
        "-launcher",
        "ssh",
        "-launcher-exec",
        &ssh,
        "-f",
        f.to_str().unwrap(),
    ]);
    assert!(e.contains("cannot start with '-'"), "{e}");
    assert!(!dir.join("calls").exists(), "ssh never ran");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The ssh (and rsh) command line puts `--` before the host name, so that no host name is ever
/// read as one of its options, whatever list it came from.
#[test]
fn the_ssh_command_line_ends_its_options_before_the_host() {
    let (dir, ssh) = recording_ssh("hostlists-dashdash");
    let o = kauri(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "h1",
            "-n",
            "1",
            "true",
        ],
        None,
        &[],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    assert!(!calls.is_empty(), "ssh ran: {}", stderr(&o));
    for call in calls.lines() {
        assert!(format!(" {call}").contains(" -- h1 "), "{call}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A host name of a megabyte (from a hostfile: one argument cannot be that long) is refused
/// with one short line: its first 64 characters and its length, not the whole name. Before,
/// each of kauri's lines about it held the megabyte.
#[test]
fn a_huge_host_name_is_not_echoed_whole() {
    let (dir, _) = script("hostlists-huge", "unused", "");
    let f = dir.join("hosts");
    std::fs::write(&f, format!("{}\n", "h".repeat(1 << 20))).unwrap();
    for launcher in ["ssh", "fork"] {
        let e = refused(&["-launcher", launcher, "-f", f.to_str().unwrap()]);
        assert!(
            e.len() < 400,
            "{launcher}: {} bytes: {}…",
            e.len(),
            &e[..200]
        );
        assert!(e.contains("(1048576 bytes)"), "{launcher}: {e}");
    }
    let long = "h".repeat(100_000);
    let e = refused(&["-launcher", "fork", "-hosts", &long]);
    assert!(e.len() < 400 && e.contains("(100000 bytes)"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The first word `hostname` prints with `flag` (`hostname -I`: this machine's addresses), if
/// any.
fn hostname(flag: Option<&str>) -> Option<String> {
    let o = std::process::Command::new("hostname")
        .args(flag)
        .output()
        .ok()?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    out.split_whitespace().next().map(str::to_string)
}

/// Each list that names this machine more than once (a name twice, its own name twice, a
/// loopback name and a loopback address, a hostfile with `localhost` on every slot's line,
/// its own address twice) runs every rank here and exits 0. Before, every entry after the
/// first was reached by ssh, which failed: one rank's output, then 255.
#[test]
fn a_list_that_names_this_machine_twice_runs_here_without_ssh() {
    let (dir, ssh) = recording_ssh("hostlists-here");
    let hostfile = dir.join("hosts");
    std::fs::write(&hostfile, "localhost\nlocalhost\nlocalhost\nlocalhost\n").unwrap();
    let name = hostname(None).expect("hostname prints this machine's name");
    let mut lists: Vec<Vec<String>> = vec![
        vec![
            "-hosts".into(),
            "localhost,localhost".into(),
            "-n".into(),
            "2".into(),
        ],
        vec![
            "-hosts".into(),
            format!("{name},{name}"),
            "-n".into(),
            "2".into(),
        ],
        vec![
            "-hosts".into(),
            "localhost:2,127.0.0.1:2".into(),
            "-n".into(),
            "4".into(),
        ],
        vec![
            "-f".into(),
            hostfile.display().to_string(),
            "-n".into(),
            "4".into(),
        ],
    ];
    if let Some(ip) = hostname(Some("-I")) {
        lists.push(vec![
            "-hosts".into(),
            format!("{ip},{ip}"),
            "-n".into(),
            "2".into(),
        ]);
    }
    for list in &lists {
        let mut args = vec!["-launcher", "ssh", "-launcher-exec", &ssh];
        args.extend(list.iter().map(String::as_str));
        args.push("hostname");
        let o = kauri(&args, None, &[]);
        let n: usize = list[3].parse().unwrap();
        assert_eq!(o.status.code(), Some(0), "{list:?}: {}", stderr(&o));
        assert_eq!(common::lines(&o).len(), n, "{list:?}: {}", stderr(&o));
        assert!(!dir.join("calls").exists(), "{list:?}: ssh ran");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A remote host named twice is one host: one agent, started by one ssh.
#[test]
fn a_remote_host_named_twice_is_reached_once() {
    let (dir, ssh) = recording_ssh("hostlists-twice");
    let o = kauri(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "h1,h1:2",
            "-n",
            "3",
            "true",
        ],
        None,
        &[],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    assert_eq!(calls.lines().count(), 1, "{calls}");
    std::fs::remove_dir_all(&dir).unwrap();
}
