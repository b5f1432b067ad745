#!/usr/bin/env python3
"""The fence bench's builds side by side in one run: for each round, each tree
shape and each group (`tree_fence`, `pmix_tree_fence`, `tree_fence_floor`), every build's
fence bench binary runs once in turn (criterion, short), so load that comes and goes falls on
all of them alike. Prints, per shape, the medians of the rounds' medians, their range, and
the ratios to the floor (all builds' floor runs together, and each build's own).

    cargo bench --bench fence --no-run        # prints the binary: target/release/deps/fence-*
    python3 benches/fence_rotate.py after=target/release/deps/fence-HASH,before=/tmp/b/fence-HASH \
        width=8/256,width=flat/256 3 2

Arguments: NAME=BINARY,... SHAPES ROUNDS [SECONDS of measurement per run, default 2].
Shapes are criterion's ids (`width=8/256`); 1,024 hosts need KAURI_BENCH_1024=1.
"""
import re
import statistics
import subprocess
import sys
import tempfile

GROUPS = ["tree_fence", "pmix_tree_fence", "tree_fence_floor"]
UNIT = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
NUM = r"([0-9.]+) (ns|µs|us|ms|s)"


def run(binary, group, shape, seconds, cwd):
    """One criterion run of one bench; its median in ms, or None."""
    out = subprocess.run(
        [binary, "--bench", f"^{group}/{shape}$", "--warm-up-time", "0.5",
         "--measurement-time", seconds, "--noplot"],
        capture_output=True, text=True, cwd=cwd).stdout
    m = re.search(r"time:\s+\[" + NUM + " " + NUM + " " + NUM + r"\]", out)
    return float(m.group(3)) * UNIT[m.group(4)] if m else None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    builds = dict(b.split("=", 1) for b in sys.argv[1].split(","))
    shapes = sys.argv[2].split(",")
    rounds = int(sys.argv[3])
    seconds = sys.argv[4] if len(sys.argv) > 4 else "2"
    res = {}
    with tempfile.TemporaryDirectory() as cwd:  # criterion's reports go there
        for r in range(rounds):
            load = open("/proc/loadavg").read().split()[0]
            for shape in shapes:
                for group in GROUPS:
                    for name, binary in builds.items():
                        t = run(binary, group, shape, seconds, cwd)
                        if t is None:
                            print(f"no result: {name} {group}/{shape}", file=sys.stderr)
                        else:
                            res.setdefault((shape, group, name), []).append(t)
            print(f"round {r + 1} of {rounds} done, load {load}", file=sys.stderr)
    for shape in shapes:
        floors = [t for n in builds for t in res.get((shape, GROUPS[2], n), [])]
        if not floors:
            continue
        floor = statistics.median(floors)
        print(f"{shape}: floor {floor:.3f} ms")
        for group in GROUPS[:2]:
            for name in builds:
                v = res.get((shape, group, name))
                own = res.get((shape, GROUPS[2], name))
                if not v or not own:
                    continue
                med = statistics.median(v)
                print(f"  {group:16s} {name:8s} {med:8.3f} ms ({min(v):.3f}-{max(v):.3f})"
                      f"  / floor {med / floor:.2f}  / own floor {med / statistics.median(own):.2f}")


if __name__ == "__main__":
    main()
