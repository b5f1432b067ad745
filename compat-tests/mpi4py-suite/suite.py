#!/usr/bin/env python3
"""mpi4py's own test suite (test/runtests.py) under mpirun.openmpi and under kauri.

Standard library only. See README.md next to this file; in short:

  suite.py all --mode ci --out OUT        # what CI runs: the runs of the mode, then compare
  suite.py all --mode full --out OUT      # 1, 2 and 4 ranks under every launcher
  suite.py run --launcher kauri --np 2 --out OUT [--groups test_comm,test_spawn]
  suite.py compare OUT                    # exit 1 on a regression (or a known gap that passes)
  suite.py plan --mode ci                 # what a mode runs
  suite.py selftest                       # the parser and the comparison, checked

The tests are the ones of the source package of the installed python3-mpi4py (Debian 12:
3.1.4, linked to Open MPI 4.1.4), fetched by .ci/setup into CACHE/mpi4py-src/mpi4py-VERSION
(CACHE is $KAURI_CACHE or ~/.cache/kauri); they run against the INSTALLED mpi4py: rank.py
imports it before runtests.py is loaded, records its path, and runtests.py is given
--no-builddir (the source tree has no build either).

Launchers (--launcher):
  mpirun     mpirun.openmpi --oversubscribe -n N (as root also --allow-run-as-root)
  kauri      kauri -n N                          (no --pmi flag: auto must find PMIx)
  kauri-2h   kauri -launcher fork -hosts a,b -n N (two simulated hosts)

A run starts the launcher once per group: `main` (every module but the isolated ones) and
each module of ISOLATED (test_spawn, test_dynproc: the ones that start or connect jobs, so
that a hang there costs only their own timeout). Every rank writes its own log (rank.py);
a test's result is collated over the ranks: it fails when it fails, errors or is missing on
any rank, is skipped when every rank skipped it, and passes otherwise. Each group also has a
row `GROUP (run)`: it fails when the launcher exits non-zero, runs into its timeout, or the
ranks did not form one world of N (each ran alone: a `--pmi=auto` that served the wrong protocol).

Results: OUT/<launcher>-np<N>/results.tsv (one row per test: launcher, np, module, test,
result, ranks, detail), OUT/results.tsv (every run), OUT/compare.md and OUT/runs.json (the
seconds of every run). `compare` fails when a test that passes under mpirun at N fails under
a kauri launcher at N, except in KNOWN_GAPS (by launcher and module), which are reported
apart ("known gap, still failing"); a known-gap module in which no test fails under kauri any
more also fails the comparison, so that the list shrinks. mpirun.openmpi cannot run the
ISOLATED modules on this machine (its own test_spawn fails after some twenty spawns and then
hangs in MPI_Finalize), so under kauri every test of those must pass.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("KAURI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kauri")
PYTHON = "/usr/bin/python3"  # the interpreter Debian's python3-mpi4py is built for

LAUNCHERS = ("mpirun", "kauri", "kauri-2h")
# Modules run by a launcher start of their own (they spawn or connect jobs).
ISOLATED = ("test_spawn", "test_dynproc")
# Modules that fail under kauri for a reason that is known and tracked: module -> why.
# Empty since the last one (kauri-2h test_spawn: children on two simulated hosts shared one
# vader segment) was mended; the mechanism stays for the next.
KNOWN_GAPS = {}
# Tests that cannot pass with the ranks on two hosts, whatever launches them: (module,
# class) -> why. Under kauri-2h their failures are reported as "one node only", not held
# against kauri (mpirun, on one host, has no two-host run to compare with).
ONE_NODE_ONLY = {
    ("test_win", "TestWinAllocateSharedWorld"):
        "MPI_Win_allocate_shared needs every rank on one shared-memory node (MPI_ERR_RMA_SHARED)",
    ("test_win", "TestWinAllocateWorld"):
        "Debian's Open MPI 4.1.4 has only osc/sm and osc/rdma: between nodes joined by TCP "
        "neither serves MPI_Win_allocate (MPI_ERR_WIN)",
}
# Seconds a launcher has after SIGTERM (on a timeout) before its session is killed.
TERM_GRACE = 20
# Seconds each group's launcher may run (2 busy cores: generous; `main` takes 7 to 280 s).
TIMEOUT = {"main": 600, "test_spawn": 240, "test_dynproc": 240}
# kauri is given its own deadline this much before the group's timeout (MPIEXEC_TIMEOUT): a
# hang then ends with kauri's table of where every rank was, in the launcher's log and in the
# row's detail (kauri_deadline, timeout_table).
KAURI_DEADLINE_MARGIN = 30
# The runs of a mode: (launcher, np, groups). Two hangs that cost a run its whole timeout
# keep the isolated modules out of most CI runs: Open MPI 4.1.4's own spawn fails after some
# twenty spawns in one job on this machine (MPI_ERR_INTERN) and mpirun's test_spawn then
# hangs in MPI_Finalize. So mpirun never runs them here, and kauri's results there must pass
# on their own (a known gap must still fail somewhere). CI runs them under kauri at 1 and 2
# ranks and on two simulated hosts at 2 (about 15, 20 and 25 s).
ALL_GROUPS = ("main",) + ISOLATED
MODES = {
    "ci": [("mpirun", 1, ("main",)), ("kauri", 1, ALL_GROUPS),
           ("mpirun", 2, ("main",)), ("kauri", 2, ALL_GROUPS), ("kauri-2h", 2, ALL_GROUPS)],
    "full": [(l, n, ALL_GROUPS) for n in (1, 2, 4) for l in LAUNCHERS],
}
FIELDS = ["launcher", "np", "module", "test", "result", "ranks", "detail"]
RESULT_WORDS = ("ok", "FAIL", "ERROR", "expected failure", "unexpected success")


def log(msg):
    print("mpi4py-suite: " + msg, file=sys.stderr, flush=True)


def die(msg):
    log("error: " + msg)
    sys.exit(2)


def source_dir():
    """The test directory of the source package (the newest one in the cache)."""
    dirs = sorted(glob.glob(os.path.join(CACHE, "mpi4py-src", "mpi4py-*", "test", "runtests.py")))
    if not dirs:
        die("no mpi4py source in %s/mpi4py-src: run .ci/setup" % CACHE)
    return os.path.dirname(dirs[-1])


def modules(test_dir):
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(test_dir, "test_*.py")))


def launcher_argv(a, launcher, np):
    if launcher == "mpirun":
        argv = [a.mpirun, "--oversubscribe", "-n", str(np)]
        if os.geteuid() == 0:
            argv.insert(1, "--allow-run-as-root")
        return argv
    if launcher == "kauri":
        return [a.kauri, "-n", str(np)]
    return [a.kauri, "-launcher", "fork", "-hosts", "a,b", "-n", str(np)]


def kauri_deadline(env, timeout):
    """The environment of a kauri run whose group has `timeout` seconds: kauri's own
    MPIEXEC_TIMEOUT ends it KAURI_DEADLINE_MARGIN seconds earlier, with its table."""
    env = dict(env)
    env["MPIEXEC_TIMEOUT"] = str(max(10, int(timeout) - KAURI_DEADLINE_MARGIN))
    return env


def timeout_table(logpath, most=12):
    """kauri's MPIEXEC_TIMEOUT report in a launcher log, joined for a detail column: the
    `job timed out` line and the first `most` lines of its table; None when it has none."""
    try:
        with open(logpath, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    start = next((i for i, l in enumerate(lines)
                  if l.startswith("kauri: job timed out") and "MPIEXEC_TIMEOUT" in l), None)
    if start is None:
        return None
    table = [l[len("kauri:"):].strip() for l in lines[start:]
             if l.startswith("kauri:   ")][:most]
    return " / ".join([lines[start][len("kauri: "):]] + table)


def group_include(group):
    """runtests.py's -i/-e options for a group."""
    if group == "main":
        return sum((["-e", "^%s$" % m] for m in ISOLATED), [])
    return ["-i", "^%s$" % group]


# ---------------------------------------------------------------------------------------
# Parsing one rank's log: unittest's verbose lines
#   testName (test_mod.Class.testName) ... ok
#   testName (test_mod.Class.testName)\nFirst docstring line ... skipped 'why'
# Output a test prints may come between the name and the result.

TEST_RE = re.compile(r"^(\w+) \((test_\w+)\.([\w.]+)\)")
RESULT_RE = re.compile(r"(?:^|\.\.\. )(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")


def parse_rank_log(lines):
    """{(module, test id): result} for one rank, result one of pass, fail, skip; a test
    whose result never came (the rank died or hung in it) is `fail` with detail `no result`."""
    out, current = {}, None
    for line in lines:
        m = TEST_RE.match(line)
        if m:
            if current and current not in out:
                out[current] = ("fail", "no result")
            current = (m.group(2), m.group(3))
        if current is None or current in out:
            continue
        r = RESULT_RE.search(line.rstrip())
        if r:
            word = r.group(1)
            if word in ("ok", "expected failure"):
                out[current] = ("pass", "")
            elif word.startswith("skipped"):
                out[current] = ("skip", word[len("skipped "):].strip("'"))
            else:
                out[current] = ("fail", word)
    if current and current not in out:
        out[current] = ("fail", "no result")
    return out


def collate(per_rank):
    """One result per test over the ranks: fail if it failed or is missing on any rank,
    skip if every rank skipped it, else pass."""
    tests = sorted(set().union(*[set(r) for r in per_rank])) if per_rank else []
    out = {}
    for t in tests:
        got = [r.get(t, ("fail", "missing")) for r in per_rank]
        bad = [(i, g) for i, g in enumerate(got) if g[0] == "fail"]
        if bad:
            out[t] = ("fail", "rank %s: %s" % (",".join(str(i) for i, _ in bad), bad[0][1][1]))
        elif all(g[0] == "skip" for g in got):
            out[t] = ("skip", got[0][1])
        else:
            out[t] = ("pass", "")
    return out


# ---------------------------------------------------------------------------------------
# Running


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_group(a, launcher, np, group, test_dir, outdir):
    """Runs one group under one launcher; returns (rows, seconds)."""
    logdir = os.path.join(outdir, "logs", group)
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    work = os.path.join(logdir, "cwd")  # tests write files in the working directory
    os.makedirs(work)
    argv = launcher_argv(a, launcher, np) + [
        a.python, os.path.join(HERE, "rank.py"), logdir, os.path.join(test_dir, "runtests.py"),
        "-v", "--no-builddir"] + group_include(group)
    timeout = TIMEOUT.get(group, 300) * a.timeout_scale
    t0 = time.time()
    with open(os.path.join(logdir, "launcher.out"), "wb") as f:
        f.write(("$ %s\n" % " ".join(argv)).encode())
        f.flush()
        # A session of its own: on a timeout the launcher and everything under it go at once.
        env = kauri_deadline(os.environ, timeout) if launcher != "mpirun" else None
        p = subprocess.Popen(argv, cwd=work, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        try:
            status = p.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            # SIGTERM to the launcher first: kauri and mpirun then end their ranks and
            # remove their files (a SIGKILL would leave kauri's PMIx directories and Open
            # MPI's shared-memory segments behind); the whole session goes after a grace.
            p.terminate()
            try:
                status = p.wait(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                kill_group(p)
                status = p.wait()
            timed_out = True
    secs = round(time.time() - t0, 1)
    kill_group(p)  # whatever the ranks left in the launcher's session
    logs = sorted(glob.glob(os.path.join(logdir, "rank*-of-*-pid*.log")))
    worlds = [tuple(int(x) for x in re.match(r"rank(\d+)-of-(\d+)", os.path.basename(l)).groups())
              for l in logs]
    per_rank, sources = [], set()
    for l in logs:
        with open(l, errors="replace") as f:
            lines = f.read().splitlines()
        if lines and lines[0].startswith("rank.py: "):
            sources.add(lines[0].split(" from ")[1].split(",")[0])
        per_rank.append(parse_rank_log(lines))
    detail = []
    table = timeout_table(os.path.join(logdir, "launcher.out"))
    if timed_out:
        detail.append("timeout after %d s" % timeout)
    elif table:
        detail.append(table)
    elif status != 0:
        detail.append("launcher exit status %d" % status)
    if sorted(worlds) != [(r, np) for r in range(np)]:
        detail.append("world: %s instead of %d ranks of %d" % (
            ", ".join("rank %d of %d" % w for w in worlds) or "no rank", np, np))
    if any(s.startswith(os.path.dirname(test_dir)) for s in sources):
        detail.append("mpi4py imported from the source tree: %s" % ", ".join(sorted(sources)))
    rows = [{"launcher": launcher, "np": str(np), "module": group, "test": "(run)",
             "result": "fail" if detail else "pass", "ranks": str(len(logs)),
             "detail": "; ".join(detail) or "%.0f s" % secs}]
    for (module, test), (result, why) in sorted(collate(per_rank).items()):
        rows.append({"launcher": launcher, "np": str(np), "module": module, "test": test,
                     "result": result, "ranks": str(len(logs)), "detail": why})
    log("%s np=%d %s: %s, %d tests (%d pass, %d fail, %d skip), %.0f s" % (
        launcher, np, group, rows[0]["result"] + (" (" + rows[0]["detail"] + ")" if detail else ""),
        len(rows) - 1, *(sum(r["result"] == x for r in rows[1:]) for x in ("pass", "fail", "skip")),
        secs))
    return rows, secs


def groups_of(a, groups=None):
    if a.groups:
        return a.groups.split(",")
    return list(groups or ALL_GROUPS)


def write_tsv(path, rows):
    with open(path, "w") as f:
        f.write("\t".join(FIELDS) + "\n")
        for r in rows:
            f.write("\t".join(str(r[k]).replace("\t", " ").replace("\n", " ") for k in FIELDS) + "\n")


def read_tsv(path):
    with open(path) as f:
        lines = f.read().splitlines()
    return [dict(zip(FIELDS, l.split("\t"))) for l in lines[1:] if l]


def cmd_run(a, launcher=None, np=None, groups=None):
    launcher, np = launcher or a.launcher, np or a.np
    test_dir = source_dir()
    outdir = os.path.join(os.path.abspath(a.out), "%s-np%d" % (launcher, np))
    os.makedirs(outdir, exist_ok=True)
    rows, times = [], {}
    for g in groups_of(a, groups):
        r, secs = run_group(a, launcher, np, g, test_dir, outdir)
        rows += r
        times[g] = secs
    write_tsv(os.path.join(outdir, "results.tsv"), rows)
    with open(os.path.join(outdir, "runs.json"), "w") as f:
        json.dump(times, f, indent=1)
    return rows, times


# ---------------------------------------------------------------------------------------
# Comparing


def compare(rows):
    """Every kauri row against mpirun's at the same np. Returns (lines, regressions,
    gaps_still_failing, gaps_now_passing): lines are one per test per launcher. A test
    mpirun did not run is not compared, except in a known-gap module: there a kauri failure
    counts as the gap still failing unless mpirun ran the test and failed it too."""
    base = {(r["np"], r["module"], r["test"]): r for r in rows if r["launcher"] == "mpirun"}
    lines, regressions, gap_fail, gap_seen = [], [], {}, set()
    for r in rows:
        if r["launcher"] == "mpirun":
            continue
        gap = KNOWN_GAPS.get((r["launcher"], r["module"]))
        b = base.get((r["np"], r["module"], r["test"]))
        if b is None and (gap or r["module"] in ISOLATED):
            b = {"result": "not run"}
        if b is None:
            continue  # no mpirun run at this np
        cfg = "%s np=%s" % (r["launcher"], r["np"])
        if gap:
            gap_seen.add((cfg, r["module"]))
        if b["result"] in ("pass", "not run") and r["result"] == "fail":
            if one_node_only(r):
                verdict = "one node only"
            elif gap:
                gap_fail.setdefault((cfg, r["module"]), []).append(r)
                verdict = "known gap, still failing"
            else:
                regressions.append(r)
                verdict = "REGRESSION"
        elif b["result"] == r["result"]:
            verdict = "same"
        else:
            verdict = "mpirun %s" % b["result"]
        lines.append((r["launcher"], r["np"], r["module"], r["test"], b["result"], r["result"],
                      verdict, r["detail"]))
    now_passing = sorted(k for k in gap_seen if k not in gap_fail)
    # A group's `(run)` row that failed only by its exit status, every failing test of it
    # being excused (a known gap, one node only), is excused too.
    def excused_run(r):
        if r["test"] != "(run)" or not r["detail"].startswith("launcher exit status"):
            return False
        return not any(x["launcher"] == r["launcher"] and x["np"] == r["np"]
                       and group_of(x["module"]) == r["module"] and x["test"] != "(run)"
                       for x in regressions)
    excused = [r for r in regressions if excused_run(r)]
    regressions = [r for r in regressions if not excused_run(r)]
    lines = [l[:6] + ("excused: its failing tests are one node only or known gaps",) + l[7:]
             if l[3] == "(run)" and any(e["launcher"] == l[0] and e["np"] == l[1]
                                        and e["module"] == l[2] for e in excused)
             else l for l in lines]
    return lines, regressions, gap_fail, now_passing


def group_of(module):
    return module if module in ISOLATED else "main"


def one_node_only(r):
    return (r["launcher"] == "kauri-2h"
            and (r["module"], r["test"].split(".")[0]) in ONE_NODE_ONLY)


def cmd_compare(a):
    out = os.path.abspath(a.out)
    rows = []
    for tsv in sorted(glob.glob(os.path.join(out, "*-np*", "results.tsv"))):
        rows += read_tsv(tsv)
    if not rows:
        die("no results under %s" % out)
    write_tsv(os.path.join(out, "results.tsv"), rows)
    lines, regressions, gap_fail, now_passing = compare(rows)
    counts = {}
    for r in rows:
        if r["test"] == "(run)":
            continue
        c = counts.setdefault((r["launcher"], int(r["np"])), {"pass": 0, "fail": 0, "skip": 0})
        c[r["result"]] += 1
    md = ["# mpi4py's test suite: mpirun.openmpi and kauri", "",
          "Tests (the `(run)` rows apart):", "",
          "| launcher | np | pass | fail | skip |", "|---|---|---|---|---|"]
    for (l, n), c in sorted(counts.items(), key=lambda x: (x[0][1], x[0][0])):
        md.append("| %s | %d | %d | %d | %d |" % (l, n, c["pass"], c["fail"], c["skip"]))
    md += ["", "## Known gaps", ""]
    for (cfg, module), rs in sorted(gap_fail.items()):
        md.append("* %s %s: known gap, still failing (%d tests; %s)" % (
            cfg, module, sum(r["test"] != "(run)" for r in rs), KNOWN_GAPS[(cfg.split()[0], module)]))
    for cfg, module in now_passing:
        md.append("* %s %s: known gap NOW PASSES: remove it from KNOWN_GAPS" % (cfg, module))
    md += ["", "## One node only (kauri-2h)", ""]
    for (module, cls), why in sorted(ONE_NODE_ONLY.items()):
        n = sum(1 for l in lines if l[6] == "one node only" and l[2] == module
                and l[3].split(".")[0] == cls)
        md.append("* %s %s: %d failing on two hosts: %s" % (module, cls, n, why))
    md += ["", "## Every test under kauri against mpirun (same np)", "",
           "| launcher | np | module | test | mpirun | kauri | verdict | detail |",
           "|---|---|---|---|---|---|---|---|"]
    md += ["| %s |" % " | ".join(x.replace("|", "\\|") for x in line) for line in lines]
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    for (l, n), c in sorted(counts.items(), key=lambda x: (x[0][1], x[0][0])):
        log("%-8s np=%d: %4d pass %3d fail %3d skip" % (l, n, c["pass"], c["fail"], c["skip"]))
    for (cfg, module), rs in sorted(gap_fail.items()):
        log("%s %s: known gap, still failing (%d tests): %s" % (
            cfg, module, sum(r["test"] != "(run)" for r in rs), KNOWN_GAPS[(cfg.split()[0], module)]))
    one_node = sum(1 for l in lines if l[6] == "one node only")
    if one_node:
        log("%d test(s) failing on two hosts are one node only (ONE_NODE_ONLY)" % one_node)
    for r in regressions:
        log("REGRESSION: %s np=%s %s %s: passes under mpirun, %s under %s (%s)" % (
            r["launcher"], r["np"], r["module"], r["test"], r["result"], r["launcher"], r["detail"]))
    for cfg, module in now_passing:
        log("%s %s: known gap now passes: remove it from KNOWN_GAPS in %s" % (cfg, module, __file__))
    log("%d regression(s), %d known gap(s) now passing; %s" % (
        len(regressions), len(now_passing), os.path.join(out, "compare.md")))
    return 1 if regressions or now_passing else 0


def cmd_all(a):
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    t0, times = time.time(), {}
    for launcher, np, groups in MODES[a.mode]:
        _, t = cmd_run(a, launcher, np, groups)
        times["%s np=%d" % (launcher, np)] = t
    times["total"] = round(time.time() - t0, 1)
    with open(os.path.join(out, "runs.json"), "w") as f:
        json.dump(times, f, indent=1)
    log("seconds: " + json.dumps(times))
    return cmd_compare(a)


def cmd_plan(a):
    for launcher, np, groups in MODES[a.mode]:
        print("%-8s np=%d  groups: %s" % (launcher, np, ", ".join(groups)))
    print("known gaps: " + "; ".join("%s %s (%s)" % (k[0], k[1], v)
                                     for k, v in sorted(KNOWN_GAPS.items())))
    return 0


def cmd_selftest(_a):
    """Checks the parser, the collation and the comparison. No run."""
    log_lines = [
        "rank.py: mpi4py 3.1.4 from /usr/lib/python3/dist-packages/mpi4py, Open MPI",
        "testA (test_x.T.testA) ... ok",
        "testB (test_x.T.testB) ... skipped 'numpy'",
        "testC (test_x.T.testC)",
        "Docstring of C ... FAIL",
        "testD (test_x.T.testD) ... some output",
        "ok",
        "testE (test_x.T.testE) ... expected failure",
        "testF (test_x.T.testF) ... ",
    ]
    got = parse_rank_log(log_lines)
    assert got == {("test_x", "T.testA"): ("pass", ""), ("test_x", "T.testB"): ("skip", "numpy"),
                   ("test_x", "T.testC"): ("fail", "FAIL"), ("test_x", "T.testD"): ("pass", ""),
                   ("test_x", "T.testE"): ("pass", ""),
                   ("test_x", "T.testF"): ("fail", "no result")}, got
    a, b = {("m", "t"): ("pass", ""), ("m", "u"): ("skip", "x")}, {("m", "t"): ("fail", "ERROR")}
    c = collate([a, b])
    assert c[("m", "t")][0] == "fail" and c[("m", "u")] == ("fail", "rank 1: missing"), c
    assert collate([a, a])[("m", "u")] == ("skip", "x")

    # A known gap for the checks below (the real table may be empty).
    KNOWN_GAPS[("kauri-2h", "test_spawn")] = "a gap for the selftest"

    def row(launcher, module, test, result):
        return {"launcher": launcher, "np": "2", "module": module, "test": test,
                "result": result, "ranks": "2", "detail": ""}
    rows = [row("mpirun", "test_comm", "T.a", "pass"), row("kauri", "test_comm", "T.a", "fail"),
            row("mpirun", "test_comm", "T.b", "fail"), row("kauri", "test_comm", "T.b", "fail"),
            row("mpirun", "test_spawn", "S.a", "pass"), row("kauri-2h", "test_spawn", "S.a", "fail"),
            row("mpirun", "test_dynproc", "D.a", "pass"), row("kauri", "test_dynproc", "D.a", "pass")]
    _, reg, gap_fail, now_passing = compare(rows)
    assert [r["test"] for r in reg] == ["T.a"], reg
    assert list(gap_fail) == [("kauri-2h np=2", "test_spawn")], gap_fail
    assert now_passing == [], now_passing
    _, reg, _, _ = compare([row("mpirun", "test_comm", "T.a", "fail"),
                            row("kauri", "test_comm", "T.a", "fail")])
    assert not reg
    # One-node-only tests on two hosts, and the (run) row they fail, are excused.
    r2 = [row("mpirun", "test_win", "TestWinAllocateWorld.testMemory", "pass"),
          row("kauri-2h", "test_win", "TestWinAllocateWorld.testMemory", "fail"),
          row("mpirun", "main", "(run)", "pass"), row("kauri-2h", "main", "(run)", "fail")]
    r2[-1]["detail"] = "launcher exit status 1"
    _, reg, _, _ = compare(r2)
    assert not reg, reg
    r2[1]["launcher"] = "kauri"
    r2[-1]["launcher"] = "kauri"
    _, reg, _, _ = compare(r2)
    assert [r["test"] for r in reg] == ["TestWinAllocateWorld.testMemory", "(run)"], reg
    # Without an mpirun run (it cannot run the isolated modules here): kauri's results must
    # pass, except a known gap, which must still fail somewhere.
    _, reg, gap_fail, now_passing = compare([row("kauri", "test_spawn", "S.a", "fail"),
                                             row("kauri-2h", "test_spawn", "S.a", "skip"),
                                             row("kauri", "test_dynproc", "D.a", "pass")])
    assert [(r["launcher"], r["test"]) for r in reg] == [("kauri", "S.a")], reg
    assert not gap_fail and now_passing == [("kauri-2h np=2", "test_spawn")], now_passing
    del KNOWN_GAPS[("kauri-2h", "test_spawn")]
    # kauri's own deadline, and its report in a row's detail.
    assert kauri_deadline({"A": "1"}, 600) == {"A": "1", "MPIEXEC_TIMEOUT": "570"}
    assert kauri_deadline({}, 20)["MPIEXEC_TIMEOUT"] == "10"
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("$ kauri -n 2 python3\nrank 0 says hi\n"
                "kauri: job timed out after 570 s (MPIEXEC_TIMEOUT)\n"
                "kauri:   where the ranks were:\n"
                "kauri:   rank 0 on vm (pid 7): running (in no PMI call)\n"
                "kauri: rank 0 (pid 7) on vm killed by signal 9 (SIGKILL)\n")
    t = timeout_table(f.name)
    assert t == ("job timed out after 570 s (MPIEXEC_TIMEOUT) / where the ranks were: / "
                 "rank 0 on vm (pid 7): running (in no PMI call)"), t
    os.unlink(f.name)
    assert timeout_table(f.name) is None
    print("mpi4py suite.py selftest: ok")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--kauri", default=os.path.join(REPO, "target", "release", "kauri"),
                        help="kauri binary (%(default)s)")
        sp.add_argument("--mpirun", default=shutil.which("mpirun.openmpi") or "/usr/bin/mpirun.openmpi",
                        help="Open MPI's mpirun (%(default)s)")
        sp.add_argument("--python", default=PYTHON, help="the ranks' interpreter (%(default)s)")
        sp.add_argument("--groups", help="comma-separated: main and/or modules of ISOLATED")
        sp.add_argument("--timeout-scale", type=float, default=1.0,
                        help="multiply every run's timeout")
        sp.add_argument("--out", required=True)

    r = sub.add_parser("run", help="one launcher at one size")
    r.add_argument("--launcher", choices=LAUNCHERS, required=True)
    r.add_argument("--np", type=int, required=True)
    common(r)
    al = sub.add_parser("all", help="every run of a mode, then compare")
    al.add_argument("--mode", choices=sorted(MODES), default="ci")
    common(al)
    c = sub.add_parser("compare", help="compare the runs under OUT; exit 1 on a regression")
    c.add_argument("--out", required=True)
    pl = sub.add_parser("plan", help="print what a mode runs")
    pl.add_argument("--mode", choices=sorted(MODES), default="ci")
    sub.add_parser("selftest", help="check the parser and the comparison (no run)")
    a = p.parse_args()
    if getattr(a, "kauri", None):
        # Groups run in their own work directories: a relative path would not resolve there.
        a.kauri = os.path.abspath(a.kauri)
    if a.cmd == "run":
        cmd_run(a)
        return 0
    return {"all": cmd_all, "compare": cmd_compare, "plan": cmd_plan,
            "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
