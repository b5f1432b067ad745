//! Host lists a user got wrong or made hostile, through the real `kauri` binary: each is one
//! line naming what is wrong, before anything starts (issue #30). A host name never reaches
//! ssh as one of its options, and a huge one is not echoed whole.

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
