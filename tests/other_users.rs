//! Other users stay out: a process of another local user cannot take part in a job, read
//! or enter what kauri makes for it, nor make kauri write over a file through a link it
//! planted; and kauri's keeper ends none of its processes. The tests run as root (on CI too)
//! and play the other user with `setpriv` as `nobody`; where either is missing they say why
//! and pass, except under `CI=true`, where a missing prerequisite is a failure.

mod common;

use common::{kauri, run_under_watchdog, stderr, KAURI};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Why the test cannot run here, if it cannot: it needs root and `setpriv`. Under `CI=true`
/// that is a failure, not a reason to pass.
fn cannot_play_another_user() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("the tests do not run as root")
    } else {
        let found = Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        (!found).then_some("setpriv is not installed")
    };
    if let Some(why) = why {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot play another user on CI: {why}"
        );
    }
    why
}

/// Runs `script` with `sh` as user `nobody` (uid 65534) in `dir`.
fn as_nobody(dir: &Path, script: &str) {
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "as nobody: {script}: {}", stderr(&o));
}

/// A world-writable directory, with the sticky bit (as `/tmp`) and without (a badly shared
/// scratch directory), where `nobody` planted `shared/out.0`, a symbolic link to a file of
/// the user's (`victim`, mode 0600), and `shared/err.0`, a file of its own. kauri refuses
/// both with one line and runs nothing, and neither file is touched. Before, kauri emptied the
/// victim and wrote the rank's line into it (and into nobody's file). Without the sticky bit
/// only kauri's own check protects the victim; with it, Linux's `fs.protected_symlinks` (and
/// `fs.protected_regular`) would refuse too.
#[test]
fn an_output_file_planted_by_another_user_is_refused() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    for (sticky, mode) in [(false, 0o777), (true, 0o1777)] {
        let dir = std::env::temp_dir().join(format!(
            "kauri-planted-{}-{}",
            if sticky { "sticky" } else { "open" },
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("shared")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("shared"), std::fs::Permissions::from_mode(mode))
            .unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "the user's own\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        as_nobody(
            &dir,
            "ln -s ../victim shared/out.0 && echo nobody > shared/err.0",
        );
        for (option, file, why) in [
            ("-outfile-pattern", "out", "symbolic link"),
            ("-errfile-pattern", "err", "owned by uid 65534"),
        ] {
            let pattern = format!("shared/{file}.%r");
            let o = run_under_watchdog(Command::new(KAURI).current_dir(&dir).args([
                option,
                &pattern,
                "-n",
                "1",
                "sh",
                "-c",
                "echo injected; echo injected >&2",
            ]));
            let err = stderr(&o);
            eprintln!("sticky {sticky}, {option}: {err}");
            assert_eq!(o.status.code(), Some(255), "{err}");
            assert!(o.stdout.is_empty(), "nothing ran");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            let line = err.lines().next().unwrap_or_default();
            assert!(
                line.starts_with(&format!("kauri: {option}: cannot create shared/{file}.0: "))
                    && line.contains(why),
                "{line}"
            );
        }
        let kept = std::fs::read_to_string(&victim).unwrap();
        assert_eq!(kept, "the user's own\n", "the victim is untouched");
        let kept = std::fs::read_to_string(dir.join("shared/err.0")).unwrap();
        assert_eq!(kept, "nobody\n", "nobody's file is untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }
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

/// A tree of user `nobody`'s, `shared/bin/job.py` (a script that names mpi4py) and
/// `shared/bin/tool` (a program linked to it) beside `shared/lib/libmpi.so.40`, whose
/// `DT_NEEDED` and `DT_RUNPATH` lead to a `libpmix.so.2` of nobody's making with a
/// constructor that writes a marker file. Root's `kauri -n 1 cat shared/bin/job.py` prints
/// the file and never looks for a library past it: the rank only reads a script, whose
/// `../lib` nothing loads. Root's `kauri -n 1 wc -c shared/bin/tool` does follow the program
/// its argument names to nobody's library, and refuses it with one line. Before, kauri
/// followed either argument to `../lib/libmpi.so.40` and ran the constructor as uid 0.
#[test]
fn a_library_of_another_users_tree_that_an_argument_names_is_not_loaded() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let found = Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let why = "gcc is not installed";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        return eprintln!("skipped: {why}");
    }
    let dir = std::env::temp_dir().join(format!("kauri-planted-lib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let marker = dir.join("marker");
    as_nobody(&dir, &planted_tree(&marker));
    let job = dir.join("shared/bin/job.py").to_string_lossy().into_owned();
    let tool = dir.join("shared/bin/tool").to_string_lossy().into_owned();
    let lib = dir.join("shared/lib/libpmix.so.2");
    let size = std::fs::metadata(&tool).unwrap().len();
    let mut outcomes = Vec::new();
    for (args, want, line) in [
        (vec!["cat", &job], std::fs::read(&job).unwrap(), None),
        (
            vec!["wc", "-c", &tool],
            format!("{size} {tool}\n").into_bytes(),
            Some(format!(
                "kauri: not loading {}: it is owned by uid 65534, not by root or uid 0 who \
                 runs kauri; serving the job with the system's OpenPMIx library",
                lib.display()
            )),
        ),
    ] {
        let _ = std::fs::remove_file(&marker);
        let _ = std::fs::remove_file(&marker);
        let o = run_under_watchdog(
            Command::new(KAURI)
                .current_dir("/")
                .args(["-n", "1"])
                .args(&args),
        );
        outcomes.push((args, o, want, line, std::fs::read_to_string(&marker).ok()));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    for (args, o, want, line, ran) in outcomes {
        let err = stderr(&o);
        eprintln!("{args:?}: {err}");
        assert_eq!(ran, None, "{args:?}: nobody's library ran inside kauri");
        assert!(o.status.success(), "{args:?}: {err}");
        assert_eq!(o.stdout, want, "{args:?}: the job's output");
        assert_eq!(
            err.lines().next().map(str::to_string),
            line,
            "{args:?}: {err}"
        );
        assert!(err.lines().count() <= 1, "{args:?}: {err}");
    }
}

/// The script that builds nobody's tree for
/// [`a_library_of_another_users_tree_that_an_argument_names_is_not_loaded`]: its library's
/// constructor writes `marker`.
fn planted_tree(marker: &Path) -> String {
    format!(
        r#"set -e
mkdir -p shared/bin shared/lib shared/src
printf 'from mpi4py import MPI\nprint("job")\n' > shared/bin/job.py
printf '#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{marker}", "w"); if (f) {{ fprintf(f, "ran as uid %%d\\n", (int)geteuid()); fclose(f); }} }}\n' > shared/src/pmix.c
printf 'int mpi_placeholder(void) {{ return 0; }}\n' > shared/src/mpi.c
printf 'int mpi_placeholder(void);\nint main(void) {{ return mpi_placeholder(); }}\n' > shared/src/tool.c
gcc -shared -fPIC -Wl,-soname,libpmix.so.2 -o shared/lib/libpmix.so.2 shared/src/pmix.c
gcc -shared -fPIC -Wl,-soname,libmpi.so.40 -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN' -Wl,--no-as-needed -o shared/lib/libmpi.so.40 shared/src/mpi.c -Lshared/lib -l:libpmix.so.2
gcc -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN/../lib' -Wl,--no-as-needed -o shared/bin/tool shared/src/tool.c -Lshared/lib -l:libmpi.so.40
chmod -R go-w shared
"#,
        marker = marker.display()
    )
}

/// The system's `python3` (one in root's home would be out of `nobody`'s reach).
fn python() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("python3 is needed (Debian package python3)")
}

/// Runs `python3 -c code` as user `nobody`, with `args` after it, standard input a pipe; the
/// child, to read its output from and end by closing its input.
fn python_as_nobody(code: &str, args: &[&str]) -> std::process::Child {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            python(),
            "-c",
            code,
        ])
        .args(args)
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 as nobody")
}

/// What user `nobody` learns of, and can do to, the `MASTER_PORT` of root's `-ml-env` job
/// while rank 0 has not bound it yet: no abstract name in `/proc/net/unix` gives it away (none
/// says kauri or the port), nor a line of `/proc/net/tcp{,6}`, and a bind
/// of it (on loopback or on every address) fails; the job then runs, rank 0 binding the
/// port with `SO_REUSEADDR` as torch's `TCPStore` does. Before, the reservation was the
/// abstract name `@kauri-port-PORT`, listed to every user, and the port itself was free to
/// anyone's bind until rank 0's.
#[test]
fn another_user_can_neither_see_nor_take_master_port() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("kauri-master-port-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (port_file, gate) = (dir.join("port"), dir.join("gate"));
    let rank = format!(
        "if [ \"$RANK\" = 0 ]; then echo \"$MASTER_PORT\" > {port}.tmp && mv {port}.tmp {port}; \
         while [ ! -e {gate} ]; do sleep 0.05; done; fi; exec {python} {prog} owner 0",
        python = python(),
        port = port_file.display(),
        gate = gate.display(),
        prog = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/late_master.py"),
    );
    let seen = std::thread::scope(|s| {
        let job = s.spawn(|| kauri(&["-ml-env", "-n", "2", "sh", "-c", &rank], None, &[]));
        while !port_file.exists() && !job.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let port = std::fs::read_to_string(&port_file).unwrap_or_default();
        let nobody = python_as_nobody(
            r#"
import socket, sys
port = int(sys.argv[1])
paths = [l.split()[-1] for l in open("/proc/net/unix") if len(l.split()) >= 8]
names = [p for p in paths if p.startswith("@") and ("kauri" in p or str(port) in p)]
print("names", names)
tcp = [l for f in ["/proc/net/tcp", "/proc/net/tcp6"] for l in list(open(f))[1:]
       if int(l.split()[1].rsplit(":", 1)[1], 16) == port]
print("tcp", len(tcp))
for addr in ["127.0.0.1", "0.0.0.0"]:
    s = socket.socket()
    try:
        s.bind((addr, port)); s.listen(); print("bound", addr)
    except OSError as e:
        print("refused", addr, e.errno)
    s.close()
"#,
            &[port.trim()],
        )
        .wait_with_output()
        .unwrap();
        std::fs::write(&gate, b"").unwrap();
        (port, nobody, job.join().unwrap())
    });
    std::fs::remove_dir_all(&dir).unwrap();
    let (port, nobody, job) = seen;
    let said = String::from_utf8_lossy(&nobody.stdout).into_owned();
    eprintln!("MASTER_PORT {port}nobody: {said}{}", stderr(&nobody));
    assert!(
        !port.trim().is_empty(),
        "rank 0 never said its port: {}",
        stderr(&job)
    );
    assert!(said.lines().any(|l| l == "names []"), "{said}");
    assert!(
        said.lines().any(|l| l == "tcp 0"),
        "the port is in /proc/net/tcp: {said}"
    );
    for addr in ["127.0.0.1", "0.0.0.0"] {
        assert!(
            said.lines().any(|l| l == format!("refused {addr} 98")),
            "nobody bound {addr}:{port}: {said}"
        );
    }
    assert!(job.status.success(), "{}", stderr(&job));
    assert_eq!(
        String::from_utf8_lossy(&job.stdout),
        format!("port {} token owner\n", port.trim())
    );
}

/// User `nobody` binds the abstract names `@kauri-port-PORT` of every port of a range (the
/// names kauri's reservations once were): root's `-ml-env` job and `-pmi-port` job in that
/// range run all the same. Before, both found every port "reserved by another kauri job".
#[test]
fn names_another_user_binds_reserve_no_port() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let (low, high) = (29170u16, 29173u16);
    let mut squatter = python_as_nobody(
        r#"
import socket, sys
held = []
for p in range(int(sys.argv[1]), int(sys.argv[2]) + 1):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(b"\0kauri-port-%d" % p)
    held.append(s)
print("holding", flush=True)
sys.stdin.read()
"#,
        &[&low.to_string(), &high.to_string()],
    );
    let mut line = String::new();
    let out = squatter.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    let range = format!("{low}:{high}");
    let env = [("MPIEXEC_PORT_RANGE", range.as_str())];
    let ml = kauri(
        &["-ml-env", "-n", "1", "sh", "-c", "echo $MASTER_PORT"],
        None,
        &env,
    );
    let pmi = kauri(
        &["-pmi-port", "-n", "1", "sh", "-c", "echo ${PMI_PORT##*:}"],
        None,
        &env,
    );
    drop(squatter.stdin.take());
    let _ = squatter.wait();
    assert_eq!(line, "holding\n", "nobody holds the names: {line:?}");
    for (what, o) in [("-ml-env", ml), ("-pmi-port", pmi)] {
        assert!(o.status.success(), "{what}: {}", stderr(&o));
        let port: u16 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        assert!((low..=high).contains(&port), "{what}: {port}");
    }
}

/// The host's topology XML that ranks are named (`PMI_hwloc_xmlfile`) is no file of any file
/// system: an anonymous file of kauri's, named `/proc/PID/fd/N`, which the job's user opens
/// and user `nobody` cannot (`Permission denied`), so no other user reads it, plants one at
/// its name, or finds one left behind.
#[test]
fn another_user_cannot_open_the_hosts_topology_file() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let script = format!(
        r#"f=$({KAURI} pmi -m pmi1 get PMI_hwloc_xmlfile) || exit 3
echo "file $f"
echo "owner $(head -c 5 "$f")"
echo "nobody $(setpriv --reuid=65534 --regid=65534 --clear-groups head -c 5 "$f" 2>&1)"
"#
    );
    let o = kauri(&["-n", "1", "sh", "-c", &script], None, &[]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stderr(&o);
    eprintln!("stdout:\n{out}stderr:\n{err}");
    assert!(o.status.success(), "{err}");
    let file = out
        .lines()
        .find_map(|l| l.strip_prefix("file "))
        .expect("the rank says its file");
    if file == "unavailable" {
        eprintln!("skipped: this host has no libhwloc.so.15 to make the topology with");
        return;
    }
    let fd = file
        .strip_prefix("/proc/")
        .and_then(|f| f.split_once("/fd/"))
        .filter(|(pid, fd)| pid.parse::<u32>().is_ok() && fd.parse::<u32>().is_ok());
    assert!(fd.is_some(), "not a descriptor of a process: {file}");
    assert!(out.lines().any(|l| l == "owner <?xml"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("nobody ") && l.ends_with("Permission denied")),
        "nobody opened {file}: {out}"
    );
}

/// A PMIx job's directories (the job's, the server's in it, which the ranks are named as
/// `PMIX_SERVER_TMPDIR`, and Open MPI's shared-memory directory,
/// `OMPI_MCA_btl_vader_backing_directory`) are made with mode 0700, so user `nobody` cannot
/// list them even where their parents are open to all; kauri's TCP listeners for the job (the
/// PMIx server's door and the library's own port) are on loopback alone; and nothing is left
/// in either parent when the job ends.
#[test]
fn another_user_cannot_enter_a_pmix_jobs_directories() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("kauri-pmix-dirs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (tmp, shm) = (dir.join("tmp"), dir.join("shm"));
    for d in [&dir, &tmp, &shm] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The rank starts the server (its client's knock), then looks: modes, nobody's `ls`,
    // and the TCP sockets its parent (kauri) listens on, from /proc/net/tcp{,6}.
    let script = format!(
        r#"{KAURI} pmi -m pmix barrier >/dev/null || exit 3
d=$PMIX_SERVER_TMPDIR
for x in "${{d%/*}}" "$d" "$OMPI_MCA_btl_vader_backing_directory"; do
  m=$(stat -c %a "$x")
  if setpriv --reuid=65534 --regid=65534 --clear-groups ls "$x" >/dev/null 2>&1; then n=listed; else n=refused; fi
  echo "dir $m $n $x"
done
echo "uri $PMIX_SERVER_URI41"
for i in $(ls -l /proc/$PPID/fd | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p'); do
  awk -v i="$i" '$4 == "0A" && $10 == i {{ print "listen", $2 }}' /proc/net/tcp /proc/net/tcp6
done
"#
    );
    let o = kauri(
        &["--pmi=pmix", "-n", "1", "sh", "-c", &script],
        None,
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            ("KAURI_PMIX_SHM_DIR", shm.to_str().unwrap()),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stderr(&o);
    eprintln!("stdout:\n{out}stderr:\n{err}");
    assert!(o.status.success(), "{err}");
    let dirs: Vec<&str> = out.lines().filter(|l| l.starts_with("dir ")).collect();
    assert_eq!(dirs.len(), 3, "{out}");
    for (l, parent) in dirs.iter().zip([&tmp, &tmp, &shm]) {
        assert!(l.starts_with("dir 700 refused "), "{l}");
        assert!(l.contains(&*parent.to_string_lossy()), "{l}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("uri ") && l.contains(";tcp4://127.0.0.1:")),
        "{out}"
    );
    let listening: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("listen "))
        .collect();
    assert!(!listening.is_empty(), "kauri listens on no TCP port: {out}");
    for a in &listening {
        // 127.0.0.1 in /proc/net/tcp's byte order, or ::ffff:127.0.0.1 in tcp6's.
        assert!(
            a.starts_with("0100007F:") || a.starts_with("0000000000000000FFFF00000100007F:"),
            "a listener not on loopback: {a}"
        );
    }
    for d in [&tmp, &shm] {
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The keeper's token is no secret (it is on the keeper's command line once it runs as a
/// process of its own), and it grants nothing: when kauri is killed with `SIGKILL`, its
/// keeper ends the user's processes of the run and none of another user's, even one in the
/// rank's process group with `KAURI_KEEPER=TOKEN` in its environment (a rank's child that
/// became `nobody`).
#[test]
fn the_keeper_ends_no_process_of_another_user() {
    if let Some(why) = cannot_play_another_user() {
        eprintln!("skipped: {why}");
        return;
    }
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("kauri-keeper-other-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups sleep 300 & \
         echo $! > {d}/nobody.tmp && mv {d}/nobody.tmp {d}/nobody; \
         echo $$ > {d}/rank.tmp && mv {d}/rank.tmp {d}/rank; exec sleep 300",
        d = dir.display()
    );
    let mut child = Command::new(KAURI)
        .args(["-n", "1", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let kauri_pid = child.id();
    let patience = Duration::from_secs(120);
    let start = Instant::now();
    let read_pid = |name: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let stat = |pid: u32| -> Option<(char, u32)> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let f: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
        Some((f[0].chars().next()?, f[1].parse().ok()?))
    };
    let alive = |pid: u32| stat(pid).is_some_and(|(state, _)| state != 'Z');
    let keeper = || {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim_end() == "ranks-keeper" && stat(pid)?.1 == kauri_pid).then_some(pid)
        })
    };
    let (nobody, rank, keeper) = loop {
        if let (Some(n), Some(r), Some(k)) = (read_pid("nobody"), read_pid("rank"), keeper()) {
            break (n, r, k);
        }
        assert!(start.elapsed() < patience, "the run never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let environ = std::fs::read(format!("/proc/{nobody}/environ")).unwrap_or_default();
    let token = environ
        .split(|&b| b == 0)
        .any(|v| v.starts_with(b"KAURI_KEEPER="));
    child.kill().unwrap();
    child.wait().unwrap();
    // The keeper leaves once nothing it ends is left.
    while alive(keeper) && start.elapsed() < patience {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (keeper_gone, rank_gone, nobody_alive) = (!alive(keeper), !alive(rank), alive(nobody));
    // SAFETY: kill takes plain numbers; nobody's sleep is this test's to end.
    unsafe { libc::kill(nobody as i32, libc::SIGKILL) };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        token,
        "nobody's process has no KAURI_KEEPER in its environment"
    );
    assert!(keeper_gone, "the keeper did not leave");
    assert!(rank_gone, "the rank outlived kauri");
    assert!(nobody_alive, "the keeper ended nobody's process");
}
