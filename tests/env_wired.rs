//! Programs that take their place from the environment and exchange addresses with
//! `kauri kvs`: shell scripts, a Python program, ML-style variables. Hosts are simulated with
//! the fork launcher (one `kauri agent` per host name on this machine).

use std::process::{Command, Output};

mod common;

use common::{lines, stderr as err, KAURI};

fn kauri(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::kauri(args, None, env)
}

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3"] {
        if std::path::Path::new(p).exists() {
            return p;
        }
    }
    panic!("python3 is needed (Debian package python3)");
}

fn program(name: &str) -> String {
    format!("{}/tests/programs/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_rank_gets_its_place() {
    let o = kauri(
        &["-launcher", "fork", "-hosts", "a,b,c", "-ppn", "2", "-n", "5", "sh", "-c",
          "echo $KAURI_RANK $KAURI_SIZE $KAURI_LOCAL_RANK $KAURI_LOCAL_SIZE $KAURI_NODE $KAURI_NODES $KAURI_HOST $KAURI_HOSTS $PMI_RANK ${KAURI_JOBID:+job}"],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        lines(&o),
        vec![
            "0 5 0 2 0 3 a a,b,c 0 job",
            "1 5 1 2 0 3 a a,b,c 1 job",
            "2 5 0 2 1 3 b a,b,c 2 job",
            "3 5 1 2 1 3 b a,b,c 3 job",
            "4 5 0 1 2 3 c a,b,c 4 job",
        ]
    );
}

#[test]
fn a_bash_job_exchanges_addresses_across_four_hosts() {
    let script = format!(
        "K={KAURI}; $K kvs put addr-$KAURI_RANK $KAURI_HOST:$((7000 + KAURI_RANK)) || exit 1; \
         $K kvs fence || exit 1; \
         all=''; for i in $(seq 0 $((KAURI_SIZE - 1))); do all=\"$all $($K kvs get addr-$i)\" || exit 1; done; \
         echo \"rank $KAURI_RANK:$all\""
    );
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2,h3,h4",
            "-n",
            "4",
            "bash",
            "-c",
            &script,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    let want = " h1:7000 h2:7001 h3:7002 h4:7003";
    assert_eq!(
        lines(&o),
        (0..4)
            .map(|r| format!("rank {r}:{want}"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_python_program_connects_to_its_peers() {
    let py = python();
    let prog = program("peers.py");
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2",
            "-ppn",
            "2",
            "-n",
            "4",
            py,
            &prog,
            KAURI,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        lines(&o),
        vec![
            "peers rank=0 size=4 node=0/2 heard=3",
            "peers rank=1 size=4 node=0/2 heard=3",
            "peers rank=2 size=4 node=1/2 heard=3",
            "peers rank=3 size=4 node=1/2 heard=3",
        ]
    );
}

#[test]
fn ml_variables_on_two_hosts() {
    let py = python();
    let prog = program("master.py");
    let o = kauri(
        &[
            "-ml-env",
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2",
            "-ppn",
            "2",
            "-n",
            "4",
            py,
            &prog,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["master 0:0/2 1:1/2 2:0/2 3:1/2"]);
    // Without -ml-env the conventional names are not set.
    let o = kauri(
        &[
            "-n",
            "1",
            "sh",
            "-c",
            "echo ${RANK:-unset} ${MASTER_PORT:-unset}",
        ],
        &[],
    );
    assert_eq!(lines(&o), vec!["unset unset"]);
}

#[test]
fn get_wait_waits_for_a_later_put_across_hosts() {
    // Rank 0 publishes a second after rank 1 starts waiting; no fence is involved.
    let script = format!(
        "K={KAURI}; if [ $KAURI_RANK = 0 ]; then sleep 1; $K kvs put late v42 || exit 1; \
         else echo \"got $($K kvs get late --wait)\"; fi"
    );
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "h1,h2",
            "-n",
            "2",
            "bash",
            "-c",
            &script,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["got v42"]);
}

/// A rank that used `kauri kvs` and exits while a peer waits in a fence it never joined
/// ends the job, promptly and naming it, instead of leaving the peer waiting for ever
/// (`MPIEXEC_TIMEOUT` only bounds the test when that is broken).
#[test]
fn a_rank_gone_from_a_fence_ends_the_job() {
    let script = format!(
        "K={KAURI}; if [ $KAURI_RANK = 1 ]; then $K kvs put early v1 || exit 1; exit 0; fi; \
         $K kvs fence; echo \"fence status $?\""
    );
    // One host (its engine sees rank 1 go), and two (rank 1's host has nobody left to
    // enter the fence: the tree sees it).
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "h1,h2"][..]] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "bash", "-c", &script]);
        let o = kauri(&args, &[("MPIEXEC_TIMEOUT", "120")]);
        assert!(!o.status.success(), "{hosts:?}: {}", err(&o));
        assert!(
            !err(&o).contains("timed out"),
            "{hosts:?}: the job waited for the timeout: {}",
            err(&o)
        );
        if hosts.is_empty() {
            assert!(err(&o).contains("rank 1 "), "{}", err(&o));
        } else {
            assert!(
                err(&o).contains("fence 0 can never complete: every rank on h2 "),
                "{}",
                err(&o)
            );
        }
    }
}

/// Ranks that each fence with `kauri kvs` and exit 0 at their own pace end the job well,
/// however far apart they end: a rank is between calls (finalized) when it exits.
#[test]
fn ranks_that_fence_then_end_at_their_own_pace_succeed() {
    let script = format!(
        "K={KAURI}; $K kvs put r$KAURI_RANK x || exit 1; $K kvs fence || exit 1; \
         if [ $KAURI_RANK = 0 ]; then sleep 1; $K kvs get r1 || exit 1; fi"
    );
    let o = kauri(&["-n", "2", "bash", "-c", &script], &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["x"]);
}

#[test]
fn kvs_errors_are_one_line() {
    // Outside a job.
    let o = Command::new(KAURI)
        .args(["kvs", "get", "x"])
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("not running as a rank of a kauri job"),
        "{}",
        err(&o)
    );
    assert_eq!(err(&o).lines().count(), 1);
    // Bad usage.
    let o = Command::new(KAURI)
        .args(["kvs", "frobnicate"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    // A missing key, and a value too long, inside a job.
    let long = "v".repeat(2000);
    let script = format!(
        "{KAURI} kvs get nothing-here; echo missing=$?; {KAURI} kvs put k {long}; echo long=$?"
    );
    let o = kauri(&["-n", "1", "bash", "-c", &script], &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["long=1", "missing=1"]);
    assert!(err(&o).contains("nothing-here not found"), "{}", err(&o));
    assert!(
        err(&o).contains("value of 2000 bytes exceeds"),
        "{}",
        err(&o)
    );
}

/// `kauri kvs -h` and `--help` print the usage on stdout and succeed, as `kauri pmi -h`
/// does; a real usage error keeps stderr and status 2.
#[test]
fn kvs_help_is_on_stdout_and_succeeds() {
    for flag in ["-h", "--help"] {
        let o = Command::new(KAURI).args(["kvs", flag]).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "kauri kvs {flag}: {}", err(&o));
        assert!(
            out.starts_with("Usage: kauri kvs put KEY VALUE"),
            "kauri kvs {flag}: {out}"
        );
        assert!(out.contains("fence"), "kauri kvs {flag}: {out}");
        assert_eq!(err(&o), "", "kauri kvs {flag}");
    }
    for bad in [&["frobnicate"][..], &[], &["get"], &["-x"]] {
        let o = Command::new(KAURI).arg("kvs").args(bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "kauri kvs {bad:?}");
        assert!(o.stdout.is_empty(), "kauri kvs {bad:?}");
        assert!(
            err(&o).contains("kauri kvs -h for help"),
            "kauri kvs {bad:?}: {}",
            err(&o)
        );
    }
}

#[test]
fn help_env_lists_the_variables() {
    let o = Command::new(KAURI).arg("--help-env").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    for v in [
        "KAURI_RANK",
        "KAURI_LOCAL_SIZE",
        "KAURI_NODES",
        "KAURI_HOSTS",
        "KAURI_JOBID",
        "MASTER_PORT",
        "GROUP_RANK",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_ERROR_FILE is not set",
        "JAX_COORDINATOR_ADDRESS",
        "OMPI_MCA_orte_hnp_uri",
        "kauri kvs put",
    ] {
        assert!(text.contains(v), "{v} missing from --help-env");
    }
}

/// `kauri kvs` sends only what the wire protocol carries: a value with a newline
/// followed by a PMI command, a key with `=` or a space, or a newline, is refused with one
/// line naming the character, status 1, and nothing reaches the server (before: the value
/// `v\ncmd=abort exitcode=7` aborted the job with status 7). A value with spaces reads back
/// the same.
#[test]
fn kvs_refuses_what_the_wire_cannot_carry() {
    let script = format!(
        r#"K={KAURI}
$K kvs put k "$(printf 'v\ncmd=abort exitcode=7')"; echo value-newline=$?
$K kvs put 'a=b' v; echo key-equals=$?
$K kvs put 'a b' v; echo key-space=$?
$K kvs get "$(printf 'k\ncmd=abort exitcode=9')"; echo get-newline=$?
$K kvs put spaced 'one two  three'; echo spaced=$?
$K kvs get spaced"#
    );
    let o = kauri(&["-n", "1", "bash", "-c", &script], &[]);
    assert!(o.status.success(), "{:?} {}", o.status, err(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "value-newline=1\nkey-equals=1\nkey-space=1\nget-newline=1\nspaced=0\none two  three\n"
    );
    let e = err(&o);
    assert_eq!(e.lines().count(), 4, "{e}");
    assert!(
        e.contains("a newline ends a PMI message") || e.contains("line break"),
        "{e}"
    );
    assert!(e.contains("`=` ends a key"), "{e}");
    assert!(e.contains("white space ends a field"), "{e}");
}

/// Each rank's `-ml-env` variables as `ml_env.py` prints them, in rank order (by `KAURI_RANK`
/// order of the sorted lines is not rank order past 9 ranks; these jobs are smaller).
fn ml_vars(o: &Output) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut v: Vec<std::collections::BTreeMap<String, String>> = lines(o)
        .iter()
        .map(|l| {
            l.split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    v.sort_by_key(|m| m["RANK"].parse::<usize>().unwrap_or(usize::MAX));
    v
}

/// Checks every variable torchrun sets (and JAX's) for a job of `ranks.len()` ranks over
/// `hosts`, `per_host` ranks on each, numbered host by host as torchrun numbers them.
fn check_torchrun_vars(
    ranks: &[std::collections::BTreeMap<String, String>],
    hosts: &[&str],
    per_host: usize,
) {
    let n = ranks.len();
    assert_eq!(n, hosts.len() * per_host, "{ranks:?}");
    let port = &ranks[0]["MASTER_PORT"];
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{port}");
    for (r, m) in ranks.iter().enumerate() {
        let (group, local) = (r / per_host, r % per_host);
        let coordinator = format!("127.0.0.1:{port}");
        let want: Vec<(&str, String)> = vec![
            ("RANK", r.to_string()),
            ("GROUP_RANK", group.to_string()),
            ("ROLE_RANK", r.to_string()),
            ("ROLE_NAME", "default".into()),
            ("LOCAL_RANK", local.to_string()),
            ("LOCAL_WORLD_SIZE", per_host.to_string()),
            ("WORLD_SIZE", n.to_string()),
            ("GROUP_WORLD_SIZE", hosts.len().to_string()),
            ("ROLE_WORLD_SIZE", n.to_string()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.clone()),
            ("TORCHELASTIC_RESTART_COUNT", "0".into()),
            ("TORCHELASTIC_MAX_RESTARTS", "0".into()),
            ("TORCHELASTIC_RUN_ID", m["KAURI_JOBID"].clone()),
            ("TORCHELASTIC_USE_AGENT_STORE", "False".into()),
            ("TORCHELASTIC_ERROR_FILE", "-".into()),
            ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into()),
            (
                "OMP_NUM_THREADS",
                if per_host > 1 { "1" } else { "-" }.into(),
            ),
            ("JAX_COORDINATOR_ADDRESS", coordinator.clone()),
            ("OMPI_COMM_WORLD_SIZE", n.to_string()),
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", local.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", per_host.to_string()),
            ("OMPI_COMM_WORLD_NODE_RANK", local.to_string()),
            ("OMPI_MCA_orte_hnp_uri", format!("0.0;tcp://{coordinator}")),
            ("KAURI_HOST", hosts[group].to_string()),
        ];
        for (k, v) in want {
            assert_eq!(m[k], v, "rank {r}: {k} in {m:?}");
        }
        assert!(m["KAURI_JOBID"].starts_with("kauri_"), "{m:?}");
    }
}

#[test]
fn ml_env_sets_what_torchrun_sets_on_one_host_and_on_two() {
    let py = python();
    let prog = program("ml_env.py");
    let me = String::from_utf8_lossy(&Command::new("hostname").output().unwrap().stdout)
        .trim()
        .to_string();
    let o = kauri(&["-v", "-ml-env", "-n", "3", py, &prog], &[]);
    assert!(o.status.success(), "{}", err(&o));
    check_torchrun_vars(&ml_vars(&o), &[&me], 3);
    assert!(
        err(&o).contains("-ml-env: OMP_NUM_THREADS=1 for the ranks on "),
        "{}",
        err(&o)
    );
    // Hydra's placement puts ranks 0 and 2 on a; -ml-env numbers each host's ranks in turn.
    let two = ["-ml-env", "-launcher", "fork", "-hosts", "a,b"];
    let o = kauri(&[&two[..], &["-n", "4", py, &prog]].concat(), &[]);
    assert!(o.status.success(), "{}", err(&o));
    check_torchrun_vars(&ml_vars(&o), &["a", "b"], 2);
    // One rank per host: no OMP_NUM_THREADS (torchrun sets it for nproc_per_node > 1 only).
    let o = kauri(&[&two[..], &["-n", "2", py, &prog]].concat(), &[]);
    assert!(o.status.success(), "{}", err(&o));
    check_torchrun_vars(&ml_vars(&o), &["a", "b"], 1);
}

#[test]
fn ml_env_numbers_each_hosts_ranks_consecutively_unless_a_mapping_was_asked() {
    let py = python();
    let prog = program("ml_env.py");
    let place = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["-ml-env", "-launcher", "fork", "-hosts", "a,b"];
        args.extend(extra);
        args.extend([py, prog.as_str()]);
        let o = kauri(&args, &[]);
        assert!(o.status.success(), "{extra:?}: {}", err(&o));
        ml_vars(&o)
            .iter()
            .map(|m| {
                let (g, lw, l): (usize, usize, usize) = (
                    m["GROUP_RANK"].parse().unwrap(),
                    m["LOCAL_WORLD_SIZE"].parse().unwrap(),
                    m["LOCAL_RANK"].parse().unwrap(),
                );
                let torchrun = if m["RANK"] == (g * lw + l).to_string() {
                    "="
                } else {
                    "!"
                };
                format!("{}:{}{torchrun}", m["RANK"], m["KAURI_HOST"])
            })
            .collect()
    };
    // RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK on every rank, Hydra's counts kept.
    assert_eq!(place(&["-n", "4"]), ["0:a=", "1:a=", "2:b=", "3:b="]);
    // Uneven counts stay Hydra's (a: 2, b: 1), numbered host by host; torchrun's rule needs
    // as many ranks on every host.
    assert_eq!(place(&["-n", "3"]), ["0:a=", "1:a=", "2:b!"]);
    // A mapping the user asked for is kept as Hydra makes it.
    assert_eq!(
        place(&["-map-by", "node", "-n", "4"]),
        ["0:a=", "1:b!", "2:a!", "3:b="]
    );
    assert_eq!(
        place(&["-ppn", "1", "-n", "4"]),
        ["0:a=", "1:b!", "2:a!", "3:b="]
    );
}

#[test]
fn ml_variables_the_user_set_win_and_an_outer_launchers_do_not() {
    let py = python();
    let prog = program("ml_env.py");
    let o = kauri(
        &[
            "-ml-env",
            "-genv",
            "OMP_NUM_THREADS",
            "4",
            "-genv",
            "TORCHELASTIC_RUN_ID",
            "mine",
            "-n",
            "2",
            py,
            &prog,
        ],
        &[
            // An outer launcher's, for its own worker: kauri's replace them.
            ("RANK", "99"),
            ("WORLD_SIZE", "100"),
            ("TORCHELASTIC_ERROR_FILE", "/tmp/outer/error.json"),
            ("OMPI_MCA_orte_hnp_uri", "1.0;tcp://10.0.0.1:1"),
            // A choice of the user's, as torchrun keeps it.
            ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"),
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let ranks = ml_vars(&o);
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    for (r, m) in ranks.iter().enumerate() {
        assert_eq!(m["RANK"], r.to_string(), "{m:?}");
        assert_eq!(m["WORLD_SIZE"], "2", "{m:?}");
        assert_eq!(m["TORCHELASTIC_ERROR_FILE"], "-", "{m:?}");
        assert_eq!(
            m["OMPI_MCA_orte_hnp_uri"],
            format!("0.0;tcp://127.0.0.1:{}", m["MASTER_PORT"])
        );
        assert_eq!(m["OMP_NUM_THREADS"], "4", "{m:?}");
        assert_eq!(m["TORCHELASTIC_RUN_ID"], "mine", "{m:?}");
        assert_eq!(m["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0", "{m:?}");
    }
}

/// In a job kauri serves PMIx alone (Open MPI's), mpirun's marker is not made up for JAX:
/// Open MPI 4.1 parses `OMPI_MCA_orte_hnp_uri` as its mpirun's address. The variables of
/// where a rank is, as mpirun gives them, every rank has.
#[test]
fn ml_env_leaves_open_mpis_variables_to_open_mpi() {
    let py = python();
    let prog = program("ml_env.py");
    let o = kauri(&["-ml-env", "--pmi=pmix", "-n", "2", py, &prog], &[]);
    assert!(o.status.success(), "{}", err(&o));
    for (r, m) in ml_vars(&o).iter().enumerate() {
        assert_eq!(m["OMPI_MCA_orte_hnp_uri"], "-", "{m:?}");
        assert_eq!(m["OMPI_COMM_WORLD_SIZE"], "2", "{m:?}");
        assert_eq!(m["OMPI_COMM_WORLD_RANK"], r.to_string(), "{m:?}");
        assert_eq!(
            m["JAX_COORDINATOR_ADDRESS"],
            format!("127.0.0.1:{}", m["MASTER_PORT"])
        );
    }
}

/// The ML venv's Python (PyTorch and JAX, CPU), where this machine has one.
fn ml_python() -> Option<String> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let py = format!("{home}/.cache/kauri/venvs/ml/bin/python3");
    let ok = Command::new(&py)
        .args(["-c", "import jax"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: no Python with JAX at {py}");
    }
    ok.then_some(py)
}

/// JAX finds its cluster with no arguments, on one host and on two; also when the script
/// mentions mpi4py (such a script used to be served PMIx alone, and the job then
/// got none of the variables JAX reads: "Number of processes must be defined").
#[test]
fn jax_initializes_with_no_arguments_on_one_host_and_on_two() {
    let Some(py) = ml_python() else { return };
    let plain = program("jax_init.py");
    let dir = std::env::temp_dir().join(format!("kauri-jax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let named = dir.join("jax_init_mpi4py.py");
    let text = std::fs::read_to_string(&plain).unwrap();
    std::fs::write(
        &named,
        format!("# the model's data comes through mpi4py\n{text}"),
    )
    .unwrap();
    let named = named.to_string_lossy().into_owned();
    let want: Vec<String> = (0..4)
        .map(|r| format!("jax {r}/4 devices=1 sum=6"))
        .collect();
    let cases = [
        (&[][..], &plain),
        (&["-launcher", "fork", "-hosts", "a,b"][..], &plain),
        (&[][..], &named),
    ];
    for (hosts, prog) in cases {
        let mut args = vec!["-ml-env"];
        args.extend(hosts);
        args.extend(["-n", "4", &py, prog]);
        let o = kauri(&args, &[]);
        assert!(o.status.success(), "{hosts:?} {prog}: {}", err(&o));
        // (Gloo reports its connections on standard output too.)
        let got: Vec<String> = lines(&o)
            .into_iter()
            .filter(|l| l.starts_with("jax "))
            .collect();
        assert_eq!(got, want, "{hosts:?} {prog}: {}", err(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Open MPI's ranks must yield when more of them than the machine's cores run on it. Simulated
/// hosts (`-launcher fork`) are one machine: with as many ranks as cores plus one, split over
/// two of them, each host alone has no more ranks than cores, but together they have more,
/// and every rank is told to yield (before, none was, and Open MPI's ranks
/// busy-polled each other out). On one real host with as many ranks as cores, none is.
#[test]
fn simulated_hosts_count_the_machines_ranks_against_its_cores() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let show = "echo yield=${OMPI_MCA_mpi_yield_when_idle:-no}";
    let n = (cores + 1).to_string();
    let o = kauri(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "a,b",
            "-n",
            &n,
            "sh",
            "-c",
            show,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["yield=1"; cores + 1], "{}", err(&o));
    let n = cores.to_string();
    let o = kauri(&["-n", &n, "sh", "-c", show], &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(lines(&o), vec!["yield=no"; cores], "{}", err(&o));
}
