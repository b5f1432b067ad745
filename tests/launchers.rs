//! Launcher behaviour that needs no real remote host: the ssh launcher's retry when sshd turns
//! connections away, and the resource managers' allocations and launchers (Slurm's srun, Grid
//! Engine's qrsh -inherit, LSF's blaunch, PBS's pbs_tmrsh) in made-up environments. The
//! "remote" side is a local stand-in for the launcher that logs its arguments and runs the
//! command on this machine.

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
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
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

// Resource managers' launchers, with stand-ins that log their arguments and run the command
// here. Grid Engine is also tested for real (compat-tests/tests/rms.rs); LSF and PBS only
// here: there is no package of either to test against.

/// Writes a stand-in for a resource manager's launcher into `dir`: it appends one line to
/// `dir/calls` (`key=set|unset ARGS…`: whether the job key reached it in the environment, and
/// its arguments), drops the options before the host (`takes_value` lists those that take a
/// value), and runs the rest here: through `sh -c` with the words joined (a launcher that
/// hands its command to a remote shell) or as it is (one that executes it directly).
fn stand_in(dir: &std::path::Path, name: &str, through_shell: bool) -> String {
    let run = if through_shell {
        r#"exec sh -c "$*""#
    } else {
        r#"exec "$@""#
    };
    let body = format!(
        r#"#!/bin/sh
if [ -n "$KAURI_JOB_KEY" ]; then k=set; else k=unset; fi
echo "key=$k $*" >> "$(dirname "$0")/calls"
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
{run}
"#
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// The stand-in's calls, one per line.
fn calls(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The rank line every test's program prints.
const WHERE: &str = "echo $KAURI_RANK $KAURI_HOST";

#[test]
fn sge_hosts_from_pe_hostfile_and_agents_through_qrsh_inherit() {
    let (dir, _) = script("sge-fake", "#!/bin/sh\n");
    // Hydra's path: $SGE_ROOT/bin/$ARC/qrsh.
    let bin = dir.join("root/bin/lx-test");
    stand_in(&bin, "qrsh", true);
    let pe = dir.join("pe_hostfile");
    std::fs::write(&pe, "s1 2 all.q@s1 UNDEFINED\ns2 1 all.q@s2 UNDEFINED\n").unwrap();
    let root = dir.join("root").display().to_string();
    let pe = pe.display().to_string();
    let env = [
        ("PE_HOSTFILE", pe.as_str()),
        ("JOB_ID", "42"),
        ("SGE_ROOT", root.as_str()),
        ("ARC", "lx-test"),
        ("KAURI_ADDR", "127.0.0.1"),
    ];
    // No -n, no -hosts, no -launcher: the PE's 3 slots on its 2 hosts, through qrsh.
    let o = kauri(&["sh", "-c", WHERE], None, &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 s1", "1 s1", "2 s2"]);
    let mut c = calls(&bin);
    c.sort();
    assert_eq!(c.len(), 2, "{c:?}");
    for (call, host) in c.iter().zip(["s1", "s2"]) {
        let want = format!("key=set -inherit -nostdin -V {host} ");
        assert!(
            call.starts_with(&want),
            "{call:?} does not start with {want:?}"
        );
        assert!(call.contains(" agent --parent "), "{call}");
        assert!(call.ends_with(&format!(" --host {host}")), "{call}");
    }
    // An explicit -launcher wins over the allocation's.
    std::fs::remove_file(bin.join("calls")).unwrap();
    let o = kauri(&["-launcher", "fork", "sh", "-c", WHERE], None, &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 s1", "1 s1", "2 s2"]);
    assert!(calls(&bin).is_empty(), "qrsh ran under -launcher fork");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lsf_hosts_from_lsb_mcpu_hosts_and_agents_through_blaunch() {
    let (dir, _) = script("lsf-fake", "#!/bin/sh\n");
    let bindir = dir.join("lsfbin");
    stand_in(&bindir, "blaunch", true);
    let bd = bindir.display().to_string();
    let env = [
        ("LSB_MCPU_HOSTS", "l1 1 l2 2"),
        ("LSF_BINDIR", bd.as_str()),
        ("KAURI_ADDR", "127.0.0.1"),
    ];
    let o = kauri(&["sh", "-c", WHERE], None, &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 l1", "1 l2", "2 l2"]);
    let mut c = calls(&bindir);
    c.sort();
    assert_eq!(c.len(), 2, "{c:?}");
    for (call, host) in c.iter().zip(["l1", "l2"]) {
        assert!(call.starts_with(&format!("key=set -n {host} ")), "{call}");
        assert!(call.ends_with(&format!(" --host {host}")), "{call}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pbs_agents_through_pbs_tmrsh_else_ssh() {
    let (dir, _) = script("pbs-fake", "#!/bin/sh\n");
    let nodefile = dir.join("nodefile");
    std::fs::write(&nodefile, "p1\np1\np2\n").unwrap();
    let nf = nodefile.display().to_string();
    let path = std::env::var("PATH").unwrap_or_default();
    // pbs_tmrsh in PATH: TM runs the command itself, no shell.
    let tm = dir.join("tm");
    stand_in(&tm, "pbs_tmrsh", false);
    let p = format!("{}:{path}", tm.display());
    let env = [
        ("PBS_NODEFILE", nf.as_str()),
        ("PATH", p.as_str()),
        ("KAURI_ADDR", "127.0.0.1"),
    ];
    let o = kauri(&["sh", "-c", WHERE], None, &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 p1", "1 p1", "2 p2"]);
    let mut c = calls(&tm);
    c.sort();
    assert_eq!(c.len(), 2, "{c:?}");
    for (call, host) in c.iter().zip(["p1", "p2"]) {
        assert!(call.starts_with(&format!("key=set {host} /")), "{call}");
        assert!(call.ends_with(&format!(" --host {host}")), "{call}");
    }
    // No pbs_tmrsh: ssh, the job key on stdin.
    let ssh = dir.join("ssh");
    stand_in(&ssh, "ssh", true);
    let p = format!("{}:{path}", ssh.display());
    let env = [
        ("PBS_NODEFILE", nf.as_str()),
        ("PATH", p.as_str()),
        ("KAURI_ADDR", "127.0.0.1"),
    ];
    let o = kauri(&["sh", "-c", WHERE], None, &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 p1", "1 p1", "2 p2"]);
    let c = calls(&ssh);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|l| l.starts_with("key=unset ")), "{c:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stand-in srun: `--version` and `--help` as Slurm `VERSION` (the environment's
/// `FAKE_SRUN_VERSION`) would answer, any other call logged to `calls` and run here, once
/// per node of `--nodelist`, as that node (`SLURMD_NODENAME`).
const FAKE_SRUN: &str = r#"#!/bin/sh
d=$(dirname "$0")
case "$1" in
--version) echo "slurm $FAKE_SRUN_VERSION"; exit 0 ;;
--help)
    echo "Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]"
    case "$FAKE_SRUN_VERSION" in 2[3-9].1*|2[4-9].*) echo "      --external-launcher     run as an external launcher" ;; esac
    echo "  -N, --nodes=N               number of nodes on which to run"
    exit 0 ;;
esac
echo "$*" >> "$d/calls"
nodes=""
while [ $# -gt 0 ]; do
    case "$1" in
    --nodes|--ntasks|--ntasks-per-node) shift 2 ;;
    --nodelist=*) nodes=${1#--nodelist=}; shift ;;
    -*) shift ;;
    *) break ;;
    esac
done
for n in $(echo "$nodes" | tr ',' ' '); do
    SLURMD_NODENAME=$n "$@" &
done
wait
"#;

#[test]
fn slurm_external_launcher_when_srun_has_it() {
    for (version, want) in [("23.11.4", true), ("22.05.8", false)] {
        let (dir, srun) = script(&format!("srun-fake-{version}"), FAKE_SRUN);
        let o = kauri(
            &["-launcher-exec", &srun, "sh", "-c", WHERE],
            None,
            &[
                ("SLURM_JOB_NODELIST", "f[1-2]"),
                ("SLURM_TASKS_PER_NODE", "1(x2)"),
                ("FAKE_SRUN_VERSION", version),
                ("KAURI_ADDR", "127.0.0.1"),
            ],
        );
        assert!(o.status.success(), "{version}: {}", stderr(&o));
        assert_eq!(lines(&o), vec!["0 f1", "1 f2"], "{version}");
        let c = calls(&dir);
        assert_eq!(c.len(), 1, "one srun step for both agents: {c:?}");
        assert_eq!(
            c[0].starts_with("--external-launcher --nodes 2 --ntasks 2 "),
            want,
            "slurm {version}: {}",
            c[0]
        );
        assert!(c[0].contains("--nodelist=f1,f2 "), "{}", c[0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_malformed_allocation_is_one_line() {
    let (dir, _) = script("bad-allocations", "#!/bin/sh\n");
    let pe = dir.join("pe_hostfile");
    std::fs::write(&pe, "s1 2 all.q@s1 UNDEFINED\ns2 two all.q@s2 UNDEFINED\n").unwrap();
    let nodefile = dir.join("nodefile");
    std::fs::write(&nodefile, "p1\np2 np=2\n").unwrap();
    let (pe, nf) = (pe.display().to_string(), nodefile.display().to_string());
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[("PE_HOSTFILE", &pe), ("JOB_ID", "1")],
            "line 2: expected \"HOST SLOTS QUEUE PROCESSORS\", got \"s2 two all.q@s2 UNDEFINED\"",
        ),
        (
            &[("PE_HOSTFILE", "/nonexistent/pe"), ("JOB_ID", "1")],
            "cannot read PE_HOSTFILE /nonexistent/pe",
        ),
        (
            &[("LSB_MCPU_HOSTS", "l1 2 l2")],
            "LSB_MCPU_HOSTS \"l1 2 l2\": expected",
        ),
        (
            &[("PBS_NODEFILE", &nf)],
            "line 2: expected one host name, got \"p2 np=2\"",
        ),
    ];
    for (env, want) in cases {
        let o = kauri(&["true"], None, env);
        let e = stderr(&o);
        assert!(!o.status.success(), "{env:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{env:?}: one line, got {e:?}");
        assert!(e.contains(want), "{env:?}: {e:?} lacks {want:?}");
        assert!(!e.contains("panicked"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fork launcher starts each agent in a session of its own, as sshd does on a real host
/// and as Hydra starts its proxies: with the kernel's automatic scheduling groups, one per
/// session, a host's agent and ranks then get one group's share of the CPU, where before
/// every simulated host shared kauri's one group (and 300 of them on 2 cores, beside another
/// job, starved until their links fell silent). Each rank reads the leader of its session:
/// its own host's agent.
#[test]
fn fork_agents_lead_sessions_of_their_own() {
    let prog = "sid=$(awk '{print $6}' /proc/self/stat); \
                echo \"rank $KAURI_RANK sid $sid leader $(tr '\\0' ' ' < /proc/$sid/cmdline)\"";
    let o = kauri(&common::on_fork_hosts("a,b", "2", prog), None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut sids = Vec::new();
    for (rank, host) in [(0, "a"), (1, "b")] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank} ")))
            .unwrap_or_else(|| panic!("no line from rank {rank}\n{out}"));
        assert!(
            line.contains(" agent ") && line.contains(&format!("--host {host} ")),
            "rank {rank}'s session is not led by the agent on {host}: {line}"
        );
        sids.push(line.split(' ').nth(3).unwrap_or_default().to_string());
    }
    assert_ne!(sids[0], sids[1], "{out}");
}

/// The job key reaches each agent in its environment or on its stdin, never on a command line
/// (neither kauri's nor an agent's holds a word that could be it: 64 hexadecimal digits), and
/// no rank sees it: not on one host, not through agents started by `-launcher fork` or ssh,
/// and not when kauri itself was started with `KAURI_JOB_KEY` in its environment.
#[test]
fn ranks_never_see_the_job_key_nor_a_command_line_hold_it() {
    let (dir, ssh) = script("key-ssh", common::SSH_STAND_IN);
    let prog = "echo \"key ${KAURI_JOB_KEY-none}\"; \
                echo \"parent $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"";
    let outer = [("KAURI_JOB_KEY", "outer")];
    let over_ssh = [("KAURI_ADDR", "127.0.0.1")];
    let on_ssh = common::on_ssh_hosts(&ssh, "r1,r2", "2", prog);
    type Case<'a> = (&'a str, Vec<&'a str>, &'a [(&'a str, &'a str)]);
    let cases: [Case; 3] = [
        ("one host", vec!["-n", "2", "sh", "-c", prog], &outer),
        (
            "fork hosts",
            common::on_fork_hosts("a,b", "2", prog),
            &outer,
        ),
        ("ssh hosts", on_ssh, &over_ssh),
    ];
    let key_like = |w: &str| w.len() >= 64 && w.bytes().all(|b| b.is_ascii_hexdigit());
    for (name, args, env) in cases {
        let o = kauri(&args, None, env);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let out = lines(&o);
        let keys: Vec<&String> = out.iter().filter(|l| l.starts_with("key ")).collect();
        assert_eq!(keys, ["key none", "key none"], "{name}: {out:?}");
        let parents: Vec<&String> = out.iter().filter(|l| l.starts_with("parent ")).collect();
        assert_eq!(parents.len(), 2, "{name}: {out:?}");
        for p in parents {
            assert!(
                !p.split(|c: char| !c.is_ascii_hexdigit()).any(key_like),
                "{name}: a key on a command line: {p}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
