//! Other users stay out: a process of another local user cannot take part in a job. The tests
//! run as root (on CI too) and play the other user with `setpriv` as `nobody`; where either is
//! missing they say why and pass.

mod common;

use common::{kauri, stderr};

/// Why the test cannot run here, if it cannot: it needs root and `setpriv`.
fn cannot_play_another_user() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the tests do not run as root");
    }
    let found = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (!found).then_some("setpriv is not installed")
}

/// With `-pmi-port`, a connection of user `nobody` to the job's PMI port is closed without a
/// reply and one line says so; the job's own user's connection after it is served.
#[test]
fn another_users_pmi_connection_is_refused() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let script = r#"
cd /
H=${PMI_PORT%:*}; P=${PMI_PORT##*:}
echo "port=$P"
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '
  exec 3<>/dev/tcp/$0/$1 || { echo "nobody: cannot connect"; exit 0; }
  printf "cmd=init pmi_version=1 pmi_subversion=1\n" >&3
  read -t 10 -r l <&3; rc=$?
  if [ -n "$l" ]; then echo "nobody got: $l"; elif [ $rc -gt 128 ]; then echo "nobody: no answer"; else echo "nobody: closed"; fi
' "$H" "$P"
exec 3<>/dev/tcp/$H/$P
printf "cmd=init pmi_version=1 pmi_subversion=1\n" >&3
read -t 10 -r l <&3
echo "owner got: $l"
"#;
    let o = kauri(&["-pmi-port", "-n", "1", "bash", "-c", script], None, &[]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stderr(&o);
    eprintln!("stdout:\n{out}stderr:\n{err}");
    assert!(o.status.success(), "{err}");
    let port = out
        .lines()
        .find_map(|l| l.strip_prefix("port="))
        .expect("the rank says its port");
    assert!(
        out.lines().any(|l| l == "nobody: closed"),
        "nobody's connection is closed without a reply: {out}"
    );
    assert!(
        err.lines()
            .any(|l| l == format!("kauri: refused a PMI connection from uid 65534 on port {port}")),
        "one line says who was refused: {err}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("owner got: cmd=response_to_init") && l.contains("rc=0")),
        "the job's own user is served after the refusal: {out}"
    );
}
