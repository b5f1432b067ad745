//! Hydra's environment, driven through the real binary: hosts from `HYDRA_HOST_FILE`, the
//! launcher, its program and its extra arguments from `HYDRA_LAUNCHER*`/`HYDRA_BOOTSTRAP*`
//! (and Intel MPI's `I_MPI_HYDRA_*`), `HYDRA_ENV`, `MPIEXEC_PORT_RANGE`,
//! `MPIEXEC_PREFIX_DEFAULT`, and the command line winning over each. The "remote" hosts are
//! simulated (`-launcher fork`) or reached through a stand-in for ssh that logs its
//! arguments and runs the command here.

mod common;

use common::{kauri, lines, stderr, KAURI};
use std::path::PathBuf;

/// A fresh directory for one test.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kauri-hydraenv-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A stand-in for ssh in a fresh directory: appends its arguments, one line per call, to
/// `argv.log` beside it, skips its options (and `-o`'s value) and runs the command here.
/// Returns (the directory, the script's path).
fn logging_ssh(test: &str) -> (PathBuf, String) {
    common::script(
        &format!("hydraenv-{test}"),
        "fake-ssh",
        r#"#!/bin/sh
echo "$*" >> "$(dirname "$0")/argv.log"
while [ $# -gt 0 ]; do
  case "$1" in
    -o) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
shift
exec sh -c "$*"
"#,
    )
}

fn log_of(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(dir.join("argv.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

const WHO: &str = "echo $PMI_RANK $KAURI_HOST";

#[test]
fn hosts_from_hydra_host_file_and_its_intel_name() {
    let d = dir("hostfile");
    let f = d.join("hosts");
    std::fs::write(&f, "h1:2\nh2\n").unwrap();
    let f = f.display().to_string();
    // No -n: the file's slots, as with -f.
    for var in ["HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE"] {
        let o = kauri(&["-launcher", "fork", "sh", "-c", WHO], None, &[(var, &f)]);
        assert!(o.status.success(), "{var}: {}", stderr(&o));
        assert_eq!(lines(&o), vec!["0 h1", "1 h1", "2 h2"], "{var}");
    }
    // The command line wins: -hosts, then -f.
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "c1",
            "-n",
            "2",
            "sh",
            "-c",
            WHO,
        ],
        None,
        &[("HYDRA_HOST_FILE", &f)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 c1", "1 c1"]);
    let g = d.join("other");
    std::fs::write(&g, "g1\n").unwrap();
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-f",
            &g.display().to_string(),
            "sh",
            "-c",
            WHO,
        ],
        None,
        &[("HYDRA_HOST_FILE", &f)],
    );
    assert_eq!(lines(&o), vec!["0 g1"]);
    // The variable wins over an allocation, as in Hydra (read before the resource manager).
    let nodefile = d.join("nodefile");
    std::fs::write(&nodefile, "p1\np1\n").unwrap();
    let o = kauri(
        &["-launcher", "fork", "sh", "-c", WHO],
        None,
        &[
            ("HYDRA_HOST_FILE", &f),
            ("PBS_NODEFILE", &nodefile.display().to_string()),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 h1", "1 h1", "2 h2"]);
    // A file that is not there: one line naming the variable.
    let o = kauri(
        &["-n", "1", "true"],
        None,
        &[("HYDRA_HOST_FILE", "/nonexistent/kauri-hosts")],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("kauri: HYDRA_HOST_FILE: cannot read hostfile /nonexistent/kauri-hosts"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn launcher_its_program_and_extra_args_from_hydra_variables() {
    let sets: [[(&str, &str); 3]; 3] = [
        [
            ("HYDRA_LAUNCHER", "ssh"),
            ("HYDRA_LAUNCHER_EXEC", ""),
            (
                "HYDRA_LAUNCHER_EXTRA_ARGS",
                "-o  StrictHostKeyChecking=no -q",
            ),
        ],
        [
            ("HYDRA_BOOTSTRAP", "ssh"),
            ("HYDRA_BOOTSTRAP_EXEC", ""),
            (
                "HYDRA_LAUNCHER_EXTRA_ARGS",
                "-o  StrictHostKeyChecking=no -q",
            ),
        ],
        [
            ("I_MPI_HYDRA_BOOTSTRAP", "ssh"),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC", ""),
            (
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                "-o  StrictHostKeyChecking=no -q",
            ),
        ],
    ];
    for (i, set) in sets.iter().enumerate() {
        let (d, ssh) = logging_ssh(&format!("launcher{i}"));
        let mut env: Vec<(&str, &str)> = set.to_vec();
        env[1].1 = &ssh;
        env.push(("KAURI_ADDR", "127.0.0.1"));
        let o = kauri(&["-hosts", "r1,r2", "-n", "2", "sh", "-c", WHO], None, &env);
        assert!(o.status.success(), "{set:?}: {}", stderr(&o));
        assert_eq!(lines(&o), vec!["0 r1", "1 r2"], "{set:?}");
        let log = log_of(&d);
        assert_eq!(log.len(), 2, "{set:?}: {log:?}");
        for (line, host) in log.iter().zip(["r1", "r2"]) {
            // Hydra's order: the extra arguments, split on spaces, then the host (after `--`,
            // which Hydra does not put: no host name is read as an option).
            let want = format!("-o StrictHostKeyChecking=no -q -- {host} ");
            assert!(line.starts_with(&want), "{set:?}: {line:?}");
            assert!(line.contains(" agent "), "{set:?}: {line:?}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn a_slurm_allocations_variables_reach_srun() {
    // What Slurm 23.11 and later put in every allocation, with a stand-in for srun that logs
    // its arguments and starts the command once per node of --nodelist, here.
    let (d, srun) = common::script(
        "hydraenv-srun",
        "fake-srun",
        r#"#!/bin/sh
echo "$*" >> "$(dirname "$0")/argv.log"
nodes=
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) nodes=${1#--nodelist=}; shift ;;
    --nodes|--ntasks|--ntasks-per-node) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
for n in $(echo "$nodes" | tr , ' '); do SLURMD_NODENAME=$n "$@" & done
wait
"#,
    );
    let o = kauri(
        &["-hosts", "s1,s2", "-n", "2", "sh", "-c", WHO],
        None,
        &[
            ("HYDRA_BOOTSTRAP", "slurm"),
            ("HYDRA_BOOTSTRAP_EXEC", &srun),
            ("HYDRA_LAUNCHER_EXTRA_ARGS", "--external-launcher"),
            ("KAURI_ADDR", "127.0.0.1"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 s1", "1 s2"]);
    // kauri also asks srun its version and options (for Slurm's own --external-launcher).
    let log: Vec<String> = log_of(&d)
        .into_iter()
        .filter(|l| l.contains(" agent "))
        .collect();
    assert_eq!(log.len(), 1, "one srun step: {log:?}");
    // After srun's own options, before the agent's command.
    let at = log[0]
        .find("--external-launcher")
        .expect("extra argument passed");
    assert!(at > log[0].find("--nodelist=s1,s2").unwrap(), "{}", log[0]);
    assert!(at < log[0].find(" agent ").unwrap(), "{}", log[0]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_command_line_wins_over_the_launcher_variables() {
    let (d, ssh) = logging_ssh("cli-wins");
    let (d2, other) = logging_ssh("cli-wins-other");
    // -launcher fork beats HYDRA_LAUNCHER=ssh (whose program does not exist).
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "f1",
            "-n",
            "1",
            "sh",
            "-c",
            WHO,
        ],
        None,
        &[
            ("HYDRA_LAUNCHER", "ssh"),
            ("HYDRA_LAUNCHER_EXEC", "/nonexistent/ssh"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 f1"]);
    // -launcher-exec beats HYDRA_LAUNCHER_EXEC; HYDRA_LAUNCHER still says ssh.
    let o = kauri(
        &[
            "-launcher-exec",
            &ssh,
            "-hosts",
            "r1",
            "-n",
            "1",
            "sh",
            "-c",
            WHO,
        ],
        None,
        &[
            ("HYDRA_LAUNCHER", "ssh"),
            ("HYDRA_LAUNCHER_EXEC", &other),
            ("KAURI_ADDR", "127.0.0.1"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["0 r1"]);
    assert_eq!(log_of(&d).len(), 1);
    assert!(log_of(&d2).is_empty());
    // HYDRA_LAUNCHER beats HYDRA_BOOTSTRAP, as in Hydra.
    let o = kauri(
        &["-hosts", "f1", "-n", "1", "sh", "-c", WHO],
        None,
        &[("HYDRA_LAUNCHER", "fork"), ("HYDRA_BOOTSTRAP", "nonesuch")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // An unknown launcher named by a variable is one line.
    let o = kauri(
        &["-hosts", "f1", "-n", "1", "true"],
        None,
        &[("HYDRA_BOOTSTRAP", "nonesuch")],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("unknown launcher \"nonesuch\""), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn hydra_env_none_drops_the_launchers_variables() {
    let show = "echo A=$KAURI_T_HENV B=$KAURI_T_HENV2";
    let env = [("KAURI_T_HENV", "a"), ("HYDRA_ENV", "none")];
    let o = kauri(
        &["-genv", "KAURI_T_HENV2", "b", "-n", "1", "sh", "-c", show],
        None,
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["A= B=b"]);
    // The command line wins: -genvall, and a segment's -envall.
    let o = kauri(&["-genvall", "-n", "1", "sh", "-c", show], None, &env);
    assert_eq!(lines(&o), vec!["A=a B="]);
    let o = kauri(&["-n", "1", "-envall", "sh", "-c", show], None, &env);
    assert_eq!(lines(&o), vec!["A=a B="]);
    // HYDRA_ENV=all is the default anyway; anything else is one line.
    let o = kauri(
        &["-n", "1", "sh", "-c", show],
        None,
        &[("KAURI_T_HENV", "a"), ("HYDRA_ENV", "all")],
    );
    assert_eq!(lines(&o), vec!["A=a B="]);
    let o = kauri(&["-n", "1", "true"], None, &[("HYDRA_ENV", "some")]);
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert_eq!(stderr(&o), "kauri: HYDRA_ENV=\"some\": use all or none\n");
}

#[test]
fn help_lists_hydras_variables() {
    let o = kauri(&["--help-env"], None, &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    for v in [
        "HYDRA_HOST_FILE",
        "I_MPI_HYDRA_HOST_FILE",
        "HYDRA_LAUNCHER",
        "HYDRA_BOOTSTRAP",
        "I_MPI_HYDRA_BOOTSTRAP",
        "HYDRA_LAUNCHER_EXEC",
        "HYDRA_BOOTSTRAP_EXEC",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC",
        "HYDRA_LAUNCHER_EXTRA_ARGS",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
        "HYDRA_ENV",
        "MPIEXEC_PORT_RANGE",
        "MPIEXEC_PREFIX_DEFAULT",
    ] {
        assert!(text.contains(v), "{v} missing from --help-env");
    }
}

#[test]
fn prefix_default_labels_output_lines() {
    let o = kauri(
        &["-n", "2", "sh", "-c", "echo hi"],
        None,
        &[("MPIEXEC_PREFIX_DEFAULT", "1")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["[0] hi", "[1] hi"]);
}

#[test]
fn hydra_spellings_of_options() {
    // Any number of dashes, -opt=value, and names in any case, as Hydra's parser takes them.
    let o = kauri(
        &[
            "--genv",
            "KAURI_T_SP",
            "x",
            "-NP=2",
            "---l",
            "sh",
            "-c",
            "echo $KAURI_T_SP",
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o), vec!["[0] x", "[1] x"]);
}

/// `n` consecutive ports that were free a moment ago (found by asking the system for one).
fn free_range(n: u16) -> (u16, u16) {
    loop {
        let p = std::net::TcpListener::bind("0.0.0.0:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if p > 1024 && p <= u16::MAX - n {
            let all_free = (p..p + n).all(|q| std::net::TcpListener::bind(("0.0.0.0", q)).is_ok());
            if all_free {
                return (p, p + n - 1);
            }
        }
    }
}

/// The ports' reservations (`ports::Reservation`, bound sockets) leave no file behind (the
/// range's lock was once a lock file in `$TMPDIR`).
fn forget_range(low: u16, high: u16) {
    let old = std::env::temp_dir().join(format!("kauri-ports-{low}-{high}.lock"));
    assert!(!old.exists(), "{} was left behind", old.display());
}

#[test]
fn every_listener_keeps_to_the_port_range() {
    let (low, high) = free_range(12);
    let range = format!("{low}:{high}");
    // Each rank prints its PMI port and the port of the agent port its agent connected
    // to (from the agent's command line: `--parent IP:PORT`); with -ml-env, MASTER_PORT.
    let prog = "p=$(tr '\\0' ' ' < /proc/$PPID/cmdline | sed -n 's/.*--parent [^ ]*:\\([0-9]*\\).*/\\1/p'); echo $PMI_PORT ${p:-none} $MASTER_PORT";
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "a,b,c",
            "-tree-width",
            "1",
            "-n",
            "3",
            "-pmi-port",
            "-ml-env",
            "sh",
            "-c",
            prog,
        ],
        None,
        &[("MPIEXEC_PORT_RANGE", &range)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = lines(&o);
    assert_eq!(out.len(), 3, "{out:?}");
    let mut parents = 0;
    for l in &out {
        let w: Vec<&str> = l.split_whitespace().collect();
        let pmi = w[0].rsplit(':').next().unwrap().parse::<u16>().unwrap();
        assert!(
            (low..=high).contains(&pmi),
            "PMI port {pmi} outside {range}: {l}"
        );
        if w[1] != "none" {
            parents += 1;
            let p: u16 = w[1].parse().unwrap();
            assert!(
                (low..=high).contains(&p),
                "agent port {p} outside {range}: {l}"
            );
        }
        let m: u16 = w[2].parse().unwrap();
        assert!(
            (low..=high).contains(&m),
            "MASTER_PORT {m} outside {range}: {l}"
        );
    }
    // A chain a <- b <- c (width 1): agents listen too, not only the front end.
    assert!(parents >= 2, "{out:?}");
    // The first variable of Hydra's list that is set wins.
    let o = kauri(
        &["-n", "1", "-pmi-port", "sh", "-c", "echo $PMI_PORT"],
        None,
        &[("MPIEXEC_PORT_RANGE", "1:1"), ("MPICH_PORT_RANGE", &range)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let port: u16 = lines(&o)[0].rsplit(':').next().unwrap().parse().unwrap();
    assert!((low..=high).contains(&port), "{port}");
    forget_range(low, high);
}

#[test]
fn the_pmix_servers_keep_to_the_port_range() {
    let (low, high) = free_range(12);
    let range = format!("{low}:{high}");
    // Three simulated hosts, each agent with its own PMIx server, started at once; then this
    // host alone (the front end's own server). Each rank knocks, so that its server library
    // starts, then says the port it was given (the door's) and every TCP port its parent (the
    // process that serves it: the door and the library) listens on, from /proc/net/tcp.
    let prog = format!(
        r#"{KAURI} pmi -m pmix barrier >/dev/null || exit 3
l=$(for i in $(ls -l /proc/$PPID/fd | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p'); do
  awk -v i="$i" '$4 == "0A" && $10 == i {{ print $2 }}' /proc/net/tcp /proc/net/tcp6
done)
echo ${{PMIX_SERVER_URI4##*:}} ${{PMIX_MCA_ptl_base_ipv4_port:-unset}} $l"#
    );
    for hosts in [
        &["-launcher", "fork", "-hosts", "a,b,c", "-n", "3"][..],
        &["-n", "2"][..],
    ] {
        let mut args = vec!["--pmi=pmix"];
        args.extend_from_slice(hosts);
        args.extend(["sh", "-c", &prog]);
        let o = kauri(&args, None, &[("MPIEXEC_PORT_RANGE", &range)]);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = lines(&o);
        assert!(!out.is_empty(), "{args:?}");
        for l in &out {
            let w: Vec<&str> = l.split(' ').collect();
            let port: u16 = w[0].parse().unwrap_or_else(|_| panic!("{l}"));
            assert!(
                (low..=high).contains(&port),
                "PMIx port {port} outside {range}"
            );
            assert_eq!(w[1], "unset", "the library's variable leaked to a rank");
            // The door and the library's own port.
            assert!(w.len() >= 4, "{l}");
            for a in &w[2..] {
                let hex = a.rsplit(':').next().unwrap();
                let p = u16::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{l}"));
                assert!(
                    (low..=high).contains(&p),
                    "a listener's port {p} outside {range}: {l}"
                );
            }
        }
    }
    forget_range(low, high);
}

#[test]
fn a_bad_or_full_port_range_is_one_line() {
    for bad in ["9000", "9000-9100", "x:y", "9100:9000", "0:10", "1:99999"] {
        let o = kauri(&["-n", "1", "true"], None, &[("MPIEXEC_PORT_RANGE", bad)]);
        assert_eq!(o.status.code(), Some(255), "{bad}");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{bad}: {e}");
        assert!(
            e.starts_with(&format!("kauri: MPIEXEC_PORT_RANGE={bad:?}: ")),
            "{bad}: {e}"
        );
    }
    // Every port of the range taken: the job cannot start, and says why in one line.
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let p = held.local_addr().unwrap().port();
    let range = format!("{p}:{p}");
    let o = kauri(
        &["-n", "1", "-pmi-port", "true"],
        None,
        &[("MPIEXEC_PORT_RANGE", &range)],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "every port of MPIEXEC_PORT_RANGE={range} is taken"
        )),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    drop(held);
    forget_range(p, p);
}
