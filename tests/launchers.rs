//! Launcher behaviour that needs no real remote host: the ssh launcher's retry when sshd turns
//! connections away, and hosts from a PBS allocation. The "remote" side is a local stand-in
//! for ssh that runs the command on this machine.

mod common;

use common::{kauri, lines, stderr};

/// Writes an executable script into a fresh directory; returns (dir, script path).
fn script(name: &str, body: &str) -> (std::path::PathBuf, String) {
    common::script(name, name, body)
}

#[test]
fn ssh_refusals_under_max_startups_are_retried() {
    // Turns each host away twice, as sshd does past MaxStartups, then runs the command here.
    let (dir, ssh) = script(
        "refusing-ssh",
        r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
state="$(dirname "$0")/tries-$host"
n=$(cat "$state" 2>/dev/null || echo 0)
echo $((n + 1)) > "$state"
if [ "$n" -lt 2 ]; then
  echo "kex_exchange_identification: Connection closed by remote host" >&2
  exit 255
fi
exec sh -c "$*"
"#,
    );
    let o = kauri(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "r1,r2",
            "-n",
            "2",
            "sh",
            "-c",
            "echo ran on $KAURI_HOST",
        ],
        None,
        &[("KAURI_ADDR", "127.0.0.1")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["ran on r1", "ran on r2"]);
    for h in ["r1", "r2"] {
        let tries = std::fs::read_to_string(dir.join(format!("tries-{h}"))).unwrap();
        assert_eq!(tries.trim(), "3", "{h}: two refusals, then a launch");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_launcher_that_keeps_failing_ends_the_job_with_its_words() {
    let (dir, ssh) = script(
        "broken-ssh",
        "#!/bin/sh\necho 'ssh: Could not resolve hostname nowhere: Name or service not known' >&2\nexit 255\n",
    );
    let o = kauri(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "nowhere",
            "-n",
            "1",
            "true",
        ],
        None,
        &[("KAURI_ADDR", "127.0.0.1")],
    );
    assert_eq!(o.status.code(), Some(255));
    let e = stderr(&o);
    assert!(
        e.contains(
            "kauri: cannot start an agent on nowhere: ssh: Could not resolve hostname nowhere"
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hosts_and_slots_from_a_pbs_allocation() {
    let dir = std::env::temp_dir().join(format!("kauri-pbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodefile = dir.join("nodefile");
    std::fs::write(&nodefile, "p1\np1\np2\n").unwrap();
    let nf = nodefile.display().to_string();
    // No -n: the allocation's slots (3); no -hosts: the allocation's hosts.
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "sh",
            "-c",
            "echo $KAURI_RANK $KAURI_HOST $KAURI_LOCAL_RANK/$KAURI_LOCAL_SIZE",
        ],
        None,
        &[("PBS_NODEFILE", &nf)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 p1 0/2", "1 p1 1/2", "2 p2 0/1"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
