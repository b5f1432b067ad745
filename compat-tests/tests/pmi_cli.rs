//! `kauri pmi` (a PMI client for admins) under every launcher, with every method that
//! launcher serves, and the server's PMI wire trace (`KAURI_PMI_TRACE`).
//!
//! * `kauri_*`: under kauri itself, on one host and on two simulated hosts
//!   (`-launcher fork`): `pmi1` and `pmi2` on the wire (`--pmi=pmi1|pmi2`, and `-pmi-port`),
//!   `libpmi2` (Slurm's `libpmi2.so.0`, Debian `libpmi2-0`) over PMI-2, `pmix` under
//!   `--pmi=pmix`, and `auto` under kauri's own `--pmi=auto` (kauri as a rank gets PMI and
//!   PMIx both, and `auto` picks PMIx).
//! * `hydra_*`: under MPICH 4.0.2's `mpiexec.hydra`, which serves PMI-1 and PMI-2 on the wire
//!   (so `libpmi2` too) and no PMIx.
//! * `slurm_*` (**root**, the one-host Slurm of `tree.rs`): under `srun --mpi=pmi2` (PMI-1 and
//!   PMI-2 wire, `libpmi2`) and `srun --mpi=pmix` (`pmix`).
//!
//! Each run checks the exit status and the summary line rank 0 prints (the method and the
//! job's size), and `get` checks the value every rank printed; an exchange checks every
//! value it reads back itself, and exits 1 when one is wrong.

use compat_tests::{kauri, slurm_local, Ctx, Launcher, Outcome};

/// A method and the key `kauri pmi get` reads with it.
struct Case {
    method: &'static str,
    get_key: &'static str,
}

const PMI1: Case = Case {
    method: "pmi1",
    get_key: "PMI_process_mapping",
};
const PMI2: Case = Case {
    method: "pmi2",
    get_key: "PMI_process_mapping",
};
const LIBPMI2: Case = Case {
    method: "libpmi2",
    get_key: "PMI_process_mapping",
};
const PMIX: Case = Case {
    method: "pmix",
    get_key: "pmix.job.size",
};

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `kauri pmi --method M ARGS…` as a rank's command line.
fn pmi_args(method: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec![kauri().to_string_lossy().into_owned(), "pmi".into()];
    v.extend(strings(&["--method", method]));
    v.extend(strings(args));
    v
}

/// Asserts success and that exactly one stdout line starts with `want`.
fn assert_summary(o: &Outcome, want: &str) {
    assert_eq!(o.code, Some(0), "wrong exit status\n{o}");
    let hits = o.stdout.lines().filter(|l| l.starts_with(want)).count();
    assert_eq!(hits, 1, "want one line starting {want:?}\n{o}");
}

/// Runs exchange (2 keys of 300 bytes), barrier (with `--timing`) and get of `case` through
/// `job`, a function from a rank's arguments to an outcome, with `n` ranks; every rank's get
/// must print `get_value`.
fn every_subcommand(
    label: &str,
    n: usize,
    case: &Case,
    get_value: &str,
    job: &dyn Fn(Vec<String>) -> Outcome,
) {
    let o = job(pmi_args(
        case.method,
        &["exchange", "--size", "300", "--count", "2"],
    ));
    eprintln!("=== {label} {} exchange\n{o}", case.method);
    assert_summary(
        &o,
        &format!(
            "kauri pmi exchange: {n} ranks, method {}, 300 bytes x 2 keys per rank ({} bytes in all)",
            case.method,
            600 * n
        ),
    );
    let o = job(pmi_args(case.method, &["--timing", "barrier"]));
    eprintln!("=== {label} {} barrier\n{o}", case.method);
    assert_summary(
        &o,
        &format!("kauri pmi barrier: {n} ranks, method {}", case.method),
    );
    for r in 0..n {
        let line = format!("kauri pmi: rank {r}: init ");
        assert_eq!(
            o.stdout.lines().filter(|l| l.starts_with(&line)).count(),
            1,
            "--timing: no line of rank {r}\n{o}"
        );
    }
    let o = job(pmi_args(case.method, &["get", case.get_key]));
    eprintln!("=== {label} {} get\n{o}", case.method);
    assert_eq!(o.code, Some(0), "{label} {}: get failed\n{o}", case.method);
    assert_eq!(
        o.stdout.lines().collect::<Vec<_>>(),
        vec![get_value; n],
        "{label} {}: get {}\n{o}",
        case.method,
        case.get_key
    );
}

fn kauri_job(ctx: &Ctx, place: &[&str], pmi: &str, rank: Vec<String>) -> Outcome {
    let mut a = strings(place);
    if !pmi.is_empty() {
        a.push(format!("--pmi={pmi}"));
    }
    a.extend(rank);
    ctx.job(Launcher::Kauri, &a).run()
}

fn kauri_all_methods(name: &str, place: &[&str], n: usize, mapping: &str) {
    let ctx = Ctx::new(name);
    for (pmi, case) in [
        ("pmi1", &PMI1),
        ("pmi2", &PMI2),
        ("pmi2", &LIBPMI2),
        ("pmix", &PMIX),
    ] {
        let value = if case.method == "pmix" {
            n.to_string()
        } else {
            mapping.to_string()
        };
        every_subcommand(&format!("kauri --pmi={pmi}"), n, case, &value, &|rank| {
            kauri_job(&ctx, place, pmi, rank)
        });
    }
    // PMI_PORT/PMI_ID in place of PMI_FD.
    let mut port = strings(place);
    port.push("-pmi-port".into());
    let port: Vec<&str> = port.iter().map(String::as_str).collect();
    for case in [&PMI1, &PMI2, &LIBPMI2] {
        let o = kauri_job(&ctx, &port, "pmi1", pmi_args(case.method, &["exchange"]));
        eprintln!("=== kauri -pmi-port {}\n{o}", case.method);
        assert_summary(
            &o,
            &format!("kauri pmi exchange: {n} ranks, method {}, ", case.method),
        );
    }
    // --pmi=auto: kauri as a rank gets PMI and PMIx, and `auto` picks PMIx.
    let o = kauri_job(&ctx, place, "", pmi_args("auto", &["exchange"]));
    assert_summary(&o, &format!("kauri pmi exchange: {n} ranks, method pmix, "));
    let o = kauri_job(&ctx, place, "", pmi_args("pmi1", &["barrier"]));
    assert_summary(&o, &format!("kauri pmi barrier: {n} ranks, method pmi1, "));
    ctx.assert_no_leftovers();
}

#[test]
fn kauri_every_method_one_host() {
    kauri_all_methods(
        "pmi_cli_kauri_one_host",
        &["-n", "4"],
        4,
        "(vector,(0,1,4))",
    );
}

#[test]
fn kauri_every_method_two_hosts() {
    kauri_all_methods(
        "pmi_cli_kauri_two_hosts",
        &["-launcher", "fork", "-hosts", "n1:2,n2:2", "-n", "4"],
        4,
        "(vector,(0,2,2))",
    );
}

/// A method the launcher does not serve, a library that is not there, a value too long:
/// one line naming the rank, and a failed job.
#[test]
fn failures_are_one_line_and_fail_the_job() {
    let ctx = Ctx::new("pmi_cli_failures");
    let cases: [(&str, Vec<String>, &str); 4] = [
        ("pmi1", pmi_args("pmix", &["barrier"]), "PMIx_Init failed"),
        (
            "pmi2",
            pmi_args(
                "libpmi2",
                &["--library", "/nonexistent/libpmi2.so.0", "barrier"],
            ),
            "cannot load /nonexistent/libpmi2.so.0",
        ),
        (
            "pmi1",
            pmi_args("pmi1", &["exchange", "--size", "5000"]),
            "--size 5000: more than the",
        ),
        (
            "pmi1",
            pmi_args("pmi1", &["get", "no.such.key"]),
            "no.such.key: not found",
        ),
    ];
    for (pmi, rank, want) in cases {
        let o = kauri_job(&ctx, &["-n", "2"], pmi, rank);
        eprintln!("=== {want}\n{o}");
        assert_ne!(o.code, Some(0), "{want}: the job succeeded\n{o}");
        let line = o
            .stderr
            .lines()
            .find(|l| l.contains(want))
            .unwrap_or_else(|| panic!("no {want:?} on stderr\n{o}"));
        assert!(line.starts_with("kauri pmi: rank "), "{line}");
        assert!(!o.stderr.contains("panicked"), "{o}");
    }
    // Outside any launcher: one line, status 1.
    let out = std::process::Command::new(kauri())
        .args(["pmi", "barrier"])
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("PMIX_NAMESPACE")
        .output()
        .expect("run kauri pmi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("kauri pmi: no PMI server"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Bad usage: status 2.
    let out = std::process::Command::new(kauri())
        .args(["pmi", "--method", "pmi3", "barrier"])
        .output()
        .expect("run kauri pmi");
    assert_eq!(out.status.code(), Some(2));
    let help = std::process::Command::new(kauri())
        .args(["pmi", "-h"])
        .output()
        .expect("run kauri pmi -h");
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    for word in [
        "pmi1",
        "pmi2",
        "libpmi2",
        "pmix",
        "auto",
        "--library",
        "--timing",
        "exchange",
    ] {
        assert!(help.contains(word), "kauri pmi -h does not mention {word}");
    }
    ctx.assert_no_leftovers();
}

/// `-v` prints every message both ways, with the rank: `cmd=put`, `cmd=get` and their
/// replies on the wire; the library calls for libpmi2 and pmix.
#[test]
fn verbose_traces_the_wire_both_ways() {
    let ctx = Ctx::new("pmi_cli_verbose");
    let wants: [(&str, &str, &[&str]); 4] = [
        (
            "pmi1",
            "pmi1",
            &[
                "rank 1 -> cmd=put kvsname=",
                "rank 1 <- cmd=put_result rc=0",
                "rank 1 -> cmd=get kvsname=",
                "rank 1 <- cmd=get_result rc=0 value=0.0.",
                "rank 0 -> cmd=barrier_in",
                "rank 0 <- cmd=barrier_out",
            ],
        ),
        (
            "pmi2",
            "pmi2",
            &[
                "cmd=kvs-put;key=kauri.pmi.1.0;",
                "cmd=kvs-put-response;rc=0;",
                "cmd=kvs-get;",
                "cmd=kvs-get-response;rc=0;found=TRUE;value=0.0.",
                "cmd=kvs-fence;",
            ],
        ),
        (
            "pmi2",
            "libpmi2",
            &[
                "rank 1 call PMI2_Init() = 0 (spawned 0, size 2, rank 1",
                "rank 1 call PMI2_KVS_Put(kauri.pmi.1.0, \"1.0.",
                "rank 0 call PMI2_KVS_Fence() = 0",
                "rank 0 call PMI2_KVS_Get(",
            ],
        ),
        (
            "pmix",
            "pmix",
            &[
                "rank 1 call PMIx_Init = PMIX_SUCCESS",
                "rank 1 call PMIx_Put(GLOBAL, kauri.pmi.1.0, \"1.0.",
                "rank 0 call PMIx_Fence(WILDCARD, COLLECT_DATA) = PMIX_SUCCESS",
                "rank 0 call PMIx_Get(rank 1, kauri.pmi.1.0) = PMIX_SUCCESS Some(\"1.0.",
            ],
        ),
    ];
    for (pmi, method, want) in wants {
        let o = kauri_job(
            &ctx,
            &["-n", "2"],
            pmi,
            pmi_args(method, &["-v", "exchange"]),
        );
        eprintln!("=== {method} -v\n{o}");
        o.assert_success();
        for w in want {
            assert!(o.stderr.contains(w), "{method} -v: no {w:?}\n{o}");
        }
        if method.starts_with("pmi") && method != "pmix" {
            let sent = o.stderr.lines().filter(|l| l.contains(" -> ")).count();
            let got = o.stderr.lines().filter(|l| l.contains(" <- ")).count();
            // Every request but none (finalize included) has its reply.
            assert_eq!(sent, got, "{method} -v: requests and replies differ\n{o}");
        }
    }
    ctx.assert_no_leftovers();
}

/// The server's trace: `KAURI_PMI_TRACE=1` and `-v -v` log each rank's requests and replies
/// with the rank, on the front end and on agents, even where a remote shell drops the
/// variable (a fake ssh that runs the agent here without it).
#[test]
fn server_trace_logs_each_ranks_requests_and_replies() {
    let ctx = Ctx::new("pmi_cli_server_trace");
    let ssh = ctx.script(
        "fake-ssh",
        "#!/bin/sh\n# ssh -- HOST COMMAND: COMMAND here, without KAURI_PMI_TRACE (as over ssh).\nshift 2\nexec env -u KAURI_PMI_TRACE sh -c \"$*\"\n",
    );
    let places: [(&str, Vec<&str>); 3] = [
        ("one host", vec!["-n", "2"]),
        (
            "fork",
            vec!["-launcher", "fork", "-hosts", "n1,n2", "-n", "2"],
        ),
        (
            "ssh",
            vec![
                "-launcher",
                "ssh",
                "-launcher-exec",
                &ssh,
                "-hosts",
                "n1,n2",
                "-n",
                "2",
            ],
        ),
    ];
    for (label, place) in places {
        let mut args = strings(&place);
        args.push("--pmi=pmi1".into());
        args.extend(pmi_args("pmi1", &["exchange"]));
        let o = ctx
            .job(Launcher::Kauri, &args)
            .env("KAURI_PMI_TRACE", "1")
            .run();
        eprintln!("=== KAURI_PMI_TRACE=1 {label}\n{o}");
        o.assert_success();
        for r in 0..2 {
            for w in [
                format!(" rank {r} -> cmd=put kvsname="),
                format!(" rank {r} <- cmd=put_result rc=0"),
                format!(" rank {r} -> cmd=get kvsname="),
                format!(" rank {r} <- cmd=get_result rc=0"),
            ] {
                assert!(o.stderr.contains(&w), "{label}: no {w:?}\n{o}");
            }
        }
        // With a timestamp (the year) before each trace line.
        for l in o.stderr.lines().filter(|l| l.contains(" -> cmd=")) {
            assert!(
                l.contains("20") && l.contains('T'),
                "{label}: no time in {l:?}"
            );
        }
    }
    // -v -v, without the variable.
    let mut args = strings(&["-v", "-v", "-launcher", "ssh", "-launcher-exec", &ssh]);
    args.extend(strings(&["-hosts", "n1,n2", "-n", "2", "--pmi=pmi2"]));
    args.extend(pmi_args("pmi2", &["barrier"]));
    let o = ctx.job(Launcher::Kauri, &args).run();
    eprintln!("=== -v -v\n{o}");
    o.assert_success();
    for r in 0..2 {
        for w in [
            format!(" rank {r} -> 14    cmd=kvs-fence;"),
            format!(" rank {r} <- 28    cmd=kvs-fence-response;rc=0;"),
        ] {
            assert!(o.stderr.contains(&w), "-v -v: no {w:?}\n{o}");
        }
    }
    // Off by default.
    let mut args = strings(&["-n", "2", "--pmi=pmi1"]);
    args.extend(pmi_args("pmi1", &["barrier"]));
    let o = ctx.job(Launcher::Kauri, &args).run();
    o.assert_success();
    assert!(
        !o.stderr.contains("cmd=barrier_in"),
        "traced without asking\n{o}"
    );
    ctx.assert_no_leftovers();
}

/// MPICH 4.0.2's Hydra serves PMI-1 and PMI-2 on the wire, so Slurm's libpmi2 works under it
/// too; it has no PMIx server, and `--method pmix` says so and fails.
#[test]
fn hydra_pmi1_pmi2_libpmi2() {
    let ctx = Ctx::new("pmi_cli_hydra");
    // Hydra without -hosts counts one slot on localhost and places ranks round-robin: its
    // mapping says one rank per "node" (kauri puts all 4 on it: `(vector,(0,1,4))`).
    for case in [&PMI1, &PMI2, &LIBPMI2] {
        every_subcommand("mpiexec.hydra", 4, case, "(vector,(0,1,1))", &|rank| {
            let mut a = strings(&["-n", "4"]);
            a.extend(rank);
            ctx.job(Launcher::Hydra, &a).run()
        });
    }
    let mut a = strings(&["-n", "2"]);
    a.extend(pmi_args("auto", &["exchange"]));
    let o = ctx.job(Launcher::Hydra, &a).run();
    assert_summary(&o, "kauri pmi exchange: 2 ranks, method pmi1, ");
    // Hydra advertises vallen_max=1024 but hands back 1023 bytes of a 1024-byte value: the
    // exchange must catch it (kauri keeps all 1024: `kauri_every_method_*` would fail else).
    let mut a = strings(&["-n", "2"]);
    a.extend(pmi_args("pmi1", &["exchange", "--size", "1024"]));
    let o = ctx.job(Launcher::Hydra, &a).run();
    assert_ne!(o.code, Some(0), "a truncated value went unnoticed\n{o}");
    assert!(
        o.stderr
            .contains("get kauri.pmi.0.0: the value differs from what rank 0 put: 1023 bytes"),
        "{o}"
    );
    let mut a = strings(&["-n", "2", "--pmi=pmi1"]);
    a.extend(pmi_args("pmi1", &["exchange", "--size", "1024"]));
    assert_summary(
        &ctx.job(Launcher::Kauri, &a).run(),
        "kauri pmi exchange: 2 ranks, method pmi1, 1024 bytes",
    );
    let mut a = strings(&["-n", "2"]);
    a.extend(pmi_args("pmix", &["barrier"]));
    let o = ctx.job(Launcher::Hydra, &a).run();
    assert_ne!(o.code, Some(0), "pmix under Hydra succeeded?\n{o}");
    assert!(o.stderr.contains("PMIx_Init failed"), "{o}");
    ctx.assert_no_leftovers();
}

/// `salloc -Q -N1 -n4 srun --mpi=MPI -n 4 RANK…` on the one-host Slurm.
fn srun(ctx: &Ctx, mpi: &str, rank: Vec<String>) -> Outcome {
    let slurm = slurm_local();
    let srun = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("srun"))
        .find(|p| p.is_file())
        .expect("srun not found in PATH: install the Debian package `slurm-client`");
    let mut a = vec![format!("--mpi={mpi}"), "-n".into(), "4".into()];
    a.extend(rank);
    ctx.job(Launcher::Kauri, &a)
        .program(srun)
        .wrapped(&["salloc", "-Q", "-N1", "-n4"])
        .env("SLURM_CONF", &slurm.conf.to_string_lossy())
        .run()
}

/// `srun --mpi=pmi2`: Slurm's PMI-2 plugin answers PMI-1 and PMI-2 on the wire and its own
/// libpmi2; `srun --mpi=pmix`: its PMIx plugin. (Slurm's PMI_process_mapping for 4 ranks on
/// one node is `(vector,(0,1,4))`, as kauri's and Hydra's.)
#[test]
fn slurm_srun_every_method() {
    let ctx = Ctx::new("pmi_cli_slurm");
    for case in [&PMI1, &PMI2, &LIBPMI2] {
        every_subcommand("srun --mpi=pmi2", 4, case, "(vector,(0,1,4))", &|rank| {
            srun(&ctx, "pmi2", rank)
        });
    }
    every_subcommand("srun --mpi=pmix", 4, &PMIX, "4", &|rank| {
        srun(&ctx, "pmix", rank)
    });
    let o = srun(&ctx, "pmix", pmi_args("auto", &["exchange"]));
    assert_summary(&o, "kauri pmi exchange: 4 ranks, method pmix, ");
    let o = srun(&ctx, "pmi2", pmi_args("auto", &["exchange"]));
    assert_summary(&o, "kauri pmi exchange: 4 ranks, method pmi1, ");
    ctx.assert_no_leftovers();
}
