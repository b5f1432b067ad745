//! MPIs from the Python registry (`compat-tests/wheels/setup.sh` makes one virtual
//! environment per MPI, each with mpi4py 4), run through kauri with no flag: the defects those
//! MPIs showed, each kept as a test.
//!
//! Intel MPI reads `PMI_process_mapping` without repeating it: given the shortest cyclic form
//! (`(vector,(0,2,1))` for 4 ranks on 2 hosts, which MPICH's parser repeats) every rank died
//! of SIGSEGV. Here every layout of 2 and 3 simulated hosts, cyclic, block and uneven, must
//! wire up, and each rank's shared-memory communicator must hold exactly the ranks kauri put
//! on its host (what Intel MPI read from the mapping).

use compat_tests::{wheel_venv, Ctx, Launcher};
use std::path::Path;

/// Every rank checks that the world is whole and that its node-local communicator (built by
/// Intel MPI from `PMI_process_mapping`) holds the ranks on its host (`KAURI_HOST`).
const MAPPING_CHECK: &str = r#"import os
from mpi4py import MPI
w = MPI.COMM_WORLD
local = w.Split_type(MPI.COMM_TYPE_SHARED)
host = os.environ["KAURI_HOST"]
hosts = w.allgather(host)
assert w.allreduce(1) == w.Get_size()
assert local.Get_size() == hosts.count(host), (local.Get_size(), hosts)
print(f"rank {w.Get_rank()} of {w.Get_size()} on {host}: {local.Get_size()} local ok")
"#;

/// `PATH` with the virtual environment's `bin` first, as a user who activated it has.
fn venv_path(venv: &Path) -> String {
    format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn impi_every_layout_of_two_and_three_hosts_wires_up() {
    let Some(venv) = wheel_venv("impi") else {
        return;
    };
    let ctx = Ctx::new("impi-layouts");
    let script = ctx.script("mapping.py", MAPPING_CHECK);
    let python = venv.join("bin/python3");
    let layouts: &[(&str, &str, usize)] = &[
        ("cyclic", "a,b", 4),
        ("cyclic", "a,b,c", 5),
        ("block", "a:2,b:2", 4),
        ("block", "a:2,b:2,c:2", 6),
        ("uneven", "a:3,b:1", 4),
        ("uneven", "a:1,b:2,c:1", 6),
    ];
    for &(kind, hosts, n) in layouts {
        let n_arg = n.to_string();
        let out = ctx
            .job(
                Launcher::Kauri,
                &[
                    "-launcher",
                    "fork",
                    "-hosts",
                    hosts,
                    "-n",
                    &n_arg,
                    &python.to_string_lossy(),
                    &script,
                ],
            )
            .env("PATH", &venv_path(&venv))
            .run();
        assert_eq!(
            out.code,
            Some(0),
            "{kind} layout {hosts} -n {n}: {}\nstdout:\n{}\nstderr:\n{}",
            out.command,
            out.stdout,
            out.stderr
        );
        let ok = out
            .stdout
            .lines()
            .filter(|l| l.ends_with("local ok"))
            .count();
        assert_eq!(ok, n, "{kind} layout {hosts} -n {n}: {}", out.stdout);
    }
    ctx.assert_no_leftovers();
}
