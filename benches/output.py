#!/usr/bin/env python3
"""Output forwarding's throughput: 4 ranks writing many short lines into a pipe, under
kauri (one host, and two simulated hosts with `-launcher fork`), under mpiexec.hydra, and the
floor (the 4 writers started by one shell, writing into the same pipe with no launcher between:
the least any launcher can cost). The parties run in turns, round after round; each cell's
median wall time, the ratios kauri / Hydra and kauri / floor, and kauri's peak resident set
(the most of kauri and its agents, from getrusage of the waited processes) are printed.

    cargo build --release
    python3 benches/output.py --kauri target/release/kauri --runs 5

Cells:
  y2     each rank writes 256 MiB of `y\\n` (`yes | head -c`): 1 GiB of 2-byte lines in all
  l52    each rank writes 104 MB of 52-byte lines (`cat` of a file): 416 MB in all

Every run's byte count is checked, and once per kauri party and cell the lines are checked to
be whole and unmixed (a separate, untimed run through awk).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from wiring import wait_quiet  # benches/wiring.py: the same wait for a quiet machine

RANKS = 4


def cells(tmp):
    """(name, the rank's shell command, total bytes, line length)."""
    l52 = os.path.join(tmp, "l52")
    with open(l52, "w") as f:
        f.write(("x" * 51 + "\n") * 2_000_000)
    y = 256 * 1024 * 1024
    return [
        ("y2", f"yes | head -c {y}", RANKS * y, 2),
        ("l52", f"cat {l52}", RANKS * 104_000_000, 52),
    ]


def parties(kauri, before, hydra):
    """(name, argv before the rank's `sh -c CMD`), the floor as None."""
    p = [("floor", None)]
    if hydra:
        p.append(("hydra", [hydra, "-n", str(RANKS)]))
    p.append(("kauri", [kauri, "-n", str(RANKS)]))
    p.append(("kauri-2h", [kauri, "-launcher", "fork", "-hosts", "a,b", "-n", str(RANKS)]))
    if before:
        p.append(("before", [before, "-n", str(RANKS)]))
        p.append(("before-2h", [before, "-launcher", "fork", "-hosts", "a,b", "-n", str(RANKS)]))
    return p


def command(prefix, cmd, sink):
    """The shell pipeline of one run: the writers (under `prefix`, or started by the shell
    itself for the floor) into `sink`."""
    if prefix is None:
        writers = "for i in " + " ".join(["x"] * RANKS) + f"; do sh -c '{cmd}' & done; wait"
        return f"({writers}) | {sink}"
    argv = " ".join(prefix)
    return f"{argv} sh -c '{cmd}' | {sink}"


def run(prefix, cmd, sink, timeout):
    """(seconds, the sink's stdout); seconds None when it timed out."""
    start = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", command(prefix, cmd, sink)], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None, b""
    return time.perf_counter() - start, out


def peak_rss(prefix, cmd):
    """The most resident set (KiB) of kauri or any process it waited for, in one run to
    /dev/null."""
    if prefix is None:
        return 0
    t = "/usr/bin/time"
    if not os.path.exists(t):
        return 0
    r = subprocess.run([t, "-f", "%M"] + prefix + ["sh", "-c", cmd], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        return int(r.stderr.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def check_lines(prefix, cmd, total, length):
    """Whether every line arrived whole: as many as written, each of `length` bytes."""
    awk = f"awk 'length($0) != {length - 1} {{ bad++ }} END {{ print NR, bad + 0 }}'"
    took, out = run(prefix, cmd, awk, 600)
    if took is None:
        return "timed out"
    n, bad = (int(x) for x in out.split())
    want = total // length
    return "ok" if n == want and bad == 0 else f"{n} lines of {want}, {bad} broken"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kauri", default="target/release/kauri")
    ap.add_argument("--before", help="another kauri build, run beside (for a change's effect)")
    ap.add_argument("--hydra", default=shutil.which("mpiexec.hydra"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cells", default="y2,l52")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--quiet-wait", type=float, default=20)
    a = ap.parse_args()
    kauri = os.path.abspath(a.kauri)
    before = os.path.abspath(a.before) if a.before else None
    with tempfile.TemporaryDirectory() as tmp:
        chosen = [c for c in cells(tmp) if c[0] in a.cells.split(",")]
        ps = parties(kauri, before, a.hydra)
        times = {(c[0], p[0]): [] for c in chosen for p in ps}
        for r in range(a.runs):
            for name, cmd, total, _ in chosen:
                for party, prefix in ps:
                    wait_quiet(a.quiet_wait)
                    took, out = run(prefix, cmd, "wc -c", a.timeout)
                    got = int(out.strip() or 0)
                    if took is None or got != total:
                        print(f"{name} {party}: {got} of {total} bytes"
                              + (" (timed out)" if took is None else ""), file=sys.stderr)
                        times[(name, party)].append(float("inf"))
                    else:
                        times[(name, party)].append(took)
            print(f"round {r + 1} of {a.runs} done", file=sys.stderr)
        print(f"{'cell':6} {'party':10} {'median s':>9} {'/hydra':>7} {'/floor':>7} "
              f"{'peak RSS MB':>12} lines")
        for name, cmd, total, length in chosen:
            med = {p: statistics.median(times[(name, p)]) for p, _ in ps}
            for party, prefix in ps:
                m = med[party]
                hy = m / med["hydra"] if "hydra" in med else float("nan")
                fl = m / med["floor"]
                kau = party.startswith(("kauri", "before"))
                rss = peak_rss(prefix, cmd) / 1024 if kau else 0
                lines = check_lines(prefix, cmd, total, length) if kau else ""
                print(f"{name:6} {party:10} {m:9.2f} {hy:7.2f} {fl:7.2f} "
                      f"{rss:12.1f} {lines}")


if __name__ == "__main__":
    main()
