#!/usr/bin/env python3
"""kauri's hot code, laid out first: makes and checks src/main.order.

src/main.order lists the functions a short job runs, by their symbol names; build.rs passes it
to the linker (lld's --symbol-ordering-file), which lays them out together at the start of
kauri's text (docs/performance.md, "The hot code laid out first"). Symbol names hold hashes of the
compiler's version and the build's profile, so the file is made for one rustc, named in its
`# rustc:` line, and made again for another.

  hot-order.py check BINARY   the release binary has the file's functions, laid out in its
                              order (exit 1 if not; only a note when the file is for another
                              rustc, whose build leaves it out)
  hot-order.py make [ROUNDS]  makes the file again: perf's samples of short jobs (with their
                              call stacks) give most of the functions; then, ROUNDS times
                              (default 4), a release build with the file so far, and the
                              function at each page fault in kauri's text is added (a fault
                              there is the first touch of 64 KB not mapped yet: code the file
                              missed, or the file's own code, mapped in turn)

Needs nm (binutils); `make` also perf, run from the workspace root, and writes src/main.order.
"""

import bisect
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FILE = os.path.join(ROOT, "src", "main.order")
RELEASE = os.path.join(ROOT, "target", "release")
# What the jobs run: one-rank and small jobs over PMI-1 and PMI-2, and a program with no PMI.
JOBS = [
    ["-n", "1", "{load}", "--pmi", "1", "--rounds", "1", "--quiet"],
    ["-n", "2", "{load}", "--pmi", "2", "--rounds", "1", "--quiet"],
    ["-n", "3", "{load}", "--pmi", "1", "--rounds", "2", "--quiet"],
    ["-n", "1", "true"],
]


def rustc_version():
    return subprocess.run(["rustc", "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def read_order():
    """The file's names and the rustc it names."""
    names, made = [], None
    with open(FILE) as f:
        for line in f:
            line = line.strip()
            if line.startswith("# rustc: "):
                made = line[len("# rustc: "):]
            elif line and not line.startswith("#"):
                names.append(line)
    return names, made


def text_symbols(binary):
    """The binary's function symbols: name -> (address, size)."""
    out = subprocess.run(["nm", "--defined-only", "-S", binary], capture_output=True,
                         text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW":
            syms[p[3]] = (int(p[0], 16), int(p[1], 16))
    return syms


def check(binary):
    names, made = read_order()
    rustc = rustc_version()
    if made != rustc:
        print(f"hot-order: {FILE} is for {made}, this is {rustc}: build.rs leaves it out "
              "(make it again: contrib/tools/hot-order.py make)")
        return 0
    syms = text_symbols(binary)
    found = [syms[n][0] for n in names if n in syms]
    rising = sum(1 for a, b in zip(found, found[1:]) if b > a)
    span = (max(found) - min(found)) if found else 0
    print(f"hot-order: {len(found)} of {len(names)} functions in {binary}, "
          f"{rising} of {max(len(found) - 1, 0)} in the file's order")
    ok = True
    if len(found) < 0.9 * len(names):
        print("hot-order: fewer than 9 in 10 of the file's functions are in the binary: "
              "make it again (contrib/tools/hot-order.py make)")
        ok = False
    if rising < 0.9 * max(len(found) - 1, 1):
        print("hot-order: the functions are not laid out in the file's order: the linker did "
              f"not take it (build.rs; their addresses span {span} bytes)")
        ok = False
    return 0 if ok else 1


def build():
    subprocess.run(["cargo", "build", "--release", "--bin", "kauri", "-p", "kauri",
                    "--bin", "pmi-load", "-p", "pmi-wire"], cwd=ROOT, check=True)
    return os.path.join(RELEASE, "kauri")


def jobs(kauri):
    load = os.path.join(RELEASE, "pmi-load")
    return [[kauri] + [a.format(load=load) for a in j] for j in JOBS]


def sampled(kauri):
    """Functions of kauri on the call stacks of perf's samples of the jobs, 40 times each."""
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        script = "\n".join(" ".join(j) + " >/dev/null 2>&1" for j in jobs(kauri))
        subprocess.run(["perf", "record", "-q", "-F", "20000", "--call-graph", "dwarf,8192",
                        "--all-user", "-o", data, "--", "sh", "-c",
                        f"for i in $(seq 40); do {script}; done"], check=True)
        out = subprocess.run(["perf", "script", "-i", data, "--no-demangle", "-F",
                              "ip,sym,dso"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 3 and p[-1] == f"({kauri})" and p[1] not in names:
            names.append(p[1])
    return names


def faulted(kauri):
    """Functions of kauri at the page faults in its text, 3 runs of each job."""
    syms = sorted((a, s, n) for n, (a, s) in text_symbols(kauri).items())
    starts = [a for a, _, _ in syms]
    found = []
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        for job in jobs(kauri) * 3:
            subprocess.run(["perf", "record", "-q", "-e", "minor-faults", "-c", "1", "-d",
                            "-o", data, "--"] + job, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            out = subprocess.run(["perf", "script", "-i", data, "-F", "addr"],
                                 capture_output=True, text=True).stdout
            for line in out.split():
                addr = int(line, 16)
                i = bisect.bisect_right(starts, addr) - 1
                if i >= 0 and syms[i][0] <= addr < syms[i][0] + max(syms[i][1], 1):
                    if syms[i][2] not in found:
                        found.append(syms[i][2])
    return found


def write(names):
    with open(FILE) as f:
        head = [l for l in f.read().splitlines() if l.startswith("#")
                and not l.startswith("# rustc: ")]
    with open(FILE, "w") as f:
        f.write("\n".join(head + [f"# rustc: {rustc_version()}"] + names) + "\n")


def make(rounds):
    kauri = build()
    have = text_symbols(kauri)
    names, _ = read_order()
    names = [n for n in names if n in have]
    for n in sampled(kauri):
        if n in have and n not in names:
            names.append(n)
    write(names)
    for r in range(rounds):
        kauri = build()
        new = [n for n in faulted(kauri) if n not in names]
        print(f"hot-order: round {r + 1}: {len(new)} functions more")
        names += new
        write(names)
        if not new:
            break
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        return check(argv[1])
    if argv and argv[0] == "make":
        return make(int(argv[1]) if len(argv) > 1 else 4)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
