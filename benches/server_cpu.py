#!/usr/bin/env python3
"""The PMI server's own CPU, side by side: launchers (kauri builds, `pmi-floor`,
`mpiexec.hydra`) each run `pmi-load` in turn, round after round, under `perf stat
--no-inherit`, which counts the launcher process alone (not its ranks): its CPU time and its
context switches, with the run's wall time. Prints each launcher's medians and their ratios
to the first one's. A launcher's wall time includes its ranks', so two servers whose walls
are equal may still differ in what they cost the machine: this is the column that shows it.

    cargo build --release -p pmi-wire --bins
    python3 benches/server_cpu.py 256 12 "--pmi 1 --keys 1 --vsize 512 --rounds 3 --gets all" \
        target/release/pmi-floor /tmp/kauri-before target/release/kauri

Arguments: RANKS RUNS "PMI-LOAD ARGUMENTS" LAUNCHER... (each launcher takes `-n RANKS`).
Needs perf (linux-perf) and a kernel that lets this user count its own processes.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOAD = os.path.join(ROOT, "target", "release", "pmi-load")


def one(launcher, ranks, load_args):
    """(CPU ms, context switches, wall s) of one run of `launcher`."""
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
        cmd = ["perf", "stat", "--no-inherit", "-x,", "-o", out.name,
               "-e", "task-clock,context-switches",
               launcher, "-n", str(ranks), LOAD, *load_args.split(), "--quiet"]
        start = time.perf_counter()
        run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        if run.returncode != 0:
            sys.exit(f"server_cpu: {launcher} failed (exit {run.returncode})")
        values = {}
        for line in out.read().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and not line.startswith("#"):
                values[fields[2]] = float(fields[0])
    return values["task-clock"], values["context-switches"], wall


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    ranks, runs, load_args, launchers = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    got = {l: [] for l in launchers}
    for _ in range(runs):
        for l in launchers:
            got[l].append(one(l, ranks, load_args))
    first = None
    for l in launchers:
        cpu, switches, wall = (statistics.median(r[i] for r in got[l]) for i in range(3))
        first = first or (cpu, switches, wall)
        print(f"{l:32} CPU {cpu:9.1f} ms ({cpu / first[0]:.2f})  "
              f"switches {switches:9.0f} ({switches / first[1]:.2f})  "
              f"wall {wall:7.3f} s ({wall / first[2]:.3f})  runs {runs}")


if __name__ == "__main__":
    main()
