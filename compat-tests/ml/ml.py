#!/usr/bin/env python3
"""PyTorch and JAX started the way their users start them, and the same programs, unmodified,
under `kauri -ml-env`: the check that kauri's environment-wired startup is at torchrun's level.

Standard library only. The frameworks come from the venv setup.sh makes (torch 2.15.0 and
jax[cpu] 0.10.2 from the Python registry, cached). In short:

  ml.py all --kauri target/debug/kauri --out OUT    # every cell, then compare
  ml.py run --kauri K --out OUT [--cells torch]     # some cells (fnmatch on the cell's name)
  ml.py plan                                        # the cells
  ml.py selftest                                    # the comparison's rules

A cell is (framework, hosts, launcher), 4 ranks each:
- torch (programs/torch_allreduce.py: gloo on CPU, env://, an all-reduce, an all-gather of each
  rank's seat, the torchrun contract RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK). The
  reference is `torchrun --nproc-per-node 4` on one host; on 2 simulated hosts, two torchruns
  (`--nnodes 2 --node-rank K --nproc-per-node 2`, static rendezvous on this machine).
- jax (programs/jax_allgather.py: `jax.distributed.initialize()`, an all-gather of process
  indices over gloo). JAX has no launcher of its own: the reference is its explicit form, four
  processes started here with `--coordinator/--num-processes/--process-id` (on 2 simulated
  hosts, two groups of two, which is the same thing on one machine).
- under kauri: `kauri -ml-env -n 4 PYTHON PROGRAM`, and on 2 simulated hosts
  `kauri -ml-env -launcher fork -hosts a,b -n 4 ...`: the program given no arguments.

A cell passes when the launcher exits 0 within its timeout, every rank wrote its `OK` line
(to ML_REPORT_DIR/rank.R, a file per rank: the ranks' shared standard output may interleave
their lines, as it did under torchrun),
and nothing of the cell is left: no process with the cell's marker (KAURI_ML_CELL) in its
environment. For torch, each rank's torchrun variables (`ENV` lines) under kauri must equal
torchrun's for the same rank, except the values that are per job by nature (MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID: set under both) and TORCHELASTIC_USE_AGENT_STORE (torchrun's
agent hosts the TCPStore, "True"; kauri hosts none, so rank 0 must create it: "False").

The run fails when a cell passes under the reference and fails under kauri, or when the
torchrun variables differ beyond those rules.
"""

import argparse
import fnmatch
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("KAURI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kauri")
VENV = os.path.join(CACHE, "venvs", "ml")
PROGRAMS = os.path.join(HERE, "programs")
NP = 4
TIMEOUT = 300
FRAMEWORKS = {"torch": "torch_allreduce.py", "jax": "jax_allgather.py",
              "torch-restart": "torch_restart.py"}
# Restarts (torchrun --max-restarts / kauri -max-restarts): on one host only.
RESTARTS = 2
# Cells kauri must pass whatever the reference does: framework -> why. torchrun's restarts
# fail here in every restarted attempt (PyTorch's gloo mesh cannot connect, with --master-port
# and with --standalone alike; docs/ml.md), and a cell the reference fails was never held
# against kauri: kauri's restart cell could not fail the run. The program checks the restart
# itself (the sum of every step, TORCHELASTIC_RESTART_COUNT 1 in the attempt that finishes).
KAURI_MUST_PASS = {"torch-restart": "torchrun's own restarts fail on this machine"}
# torchrun's variables whose values are per job, not per seat: set under both launchers.
PER_JOB = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}
# Values that differ by design: variable -> (torchrun's, kauri's).
BY_DESIGN = {"TORCHELASTIC_USE_AGENT_STORE": ("True", "False")}


def cells():
    """Every cell, reference then kauri for each (framework, hosts): interleaved, so both
    launchers see the same machine load."""
    out = []
    for fw in FRAMEWORKS:
        for hosts in hosts_of(fw):
            for launcher in ("reference", "kauri"):
                out.append({"fw": fw, "hosts": hosts, "launcher": launcher,
                            "name": "%s-%dh-%s" % (fw, hosts, launcher)})
    return out


def hosts_of(fw):
    """The host counts a framework's cells run on: the restart cell on one host (torchrun's
    restarts across several need a rendezvous backend of their own)."""
    return (1,) if fw == "torch-restart" else (1, 2)


def timeout_of(cell):
    """Seconds a cell may run: TIMEOUT, but 60 for the reference of a KAURI_MUST_PASS cell.
    torchrun's restarts fail here in about 18 s, or now and then hang to the limit (300 s of
    a CI run), and kauri's verdict there does not wait on the reference."""
    if cell["launcher"] == "reference" and cell["fw"] in KAURI_MUST_PASS:
        return 60
    return TIMEOUT


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def commands(cell, kauri):
    """The processes a cell starts: a list of argv lists, all started at once."""
    py = os.path.join(VENV, "bin", "python3")
    prog = os.path.join(PROGRAMS, FRAMEWORKS[cell["fw"]])
    restarts = ["-max-restarts", str(RESTARTS)] if cell["fw"] == "torch-restart" else []
    if cell["launcher"] == "kauri":
        hosts = ["-launcher", "fork", "-hosts", "a,b"] if cell["hosts"] == 2 else []
        return [[kauri, "-ml-env"] + restarts + hosts + ["-n", str(NP), py, prog]]
    port = free_port()
    if cell["fw"] == "torch-restart":
        torchrun = os.path.join(VENV, "bin", "torchrun")
        return [[torchrun, "--nproc-per-node", str(NP), "--max-restarts", str(RESTARTS),
                 "--master-addr", "127.0.0.1", "--master-port", str(port), prog]]
    if cell["fw"] == "torch":
        torchrun = os.path.join(VENV, "bin", "torchrun")
        if cell["hosts"] == 1:
            return [[torchrun, "--nproc-per-node", str(NP), "--master-addr", "127.0.0.1",
                     "--master-port", str(port), prog]]
        per = NP // 2
        return [[torchrun, "--nnodes", "2", "--node-rank", str(k), "--nproc-per-node",
                 str(per), "--master-addr", "127.0.0.1", "--master-port", str(port), prog]
                for k in range(2)]
    return [[py, prog, "--coordinator", "127.0.0.1:%d" % port, "--num-processes", str(NP),
             "--process-id", str(i)] for i in range(NP)]


def marked(marker):
    """Pids of the processes whose environment carries the cell's marker."""
    pids = []
    needle = ("KAURI_ML_CELL=%s" % marker).encode() + b"\0"
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if needle in f.read() + b"\0":
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def run_cell(cell, kauri, out):
    """Runs one cell; returns its result record (and writes its log)."""
    marker = "%s-%d-%d" % (cell["name"], os.getpid(), time.time_ns())
    reports = os.path.join(out, "reports", cell["name"])
    shutil.rmtree(reports, ignore_errors=True)
    if os.path.exists(reports + ".ckpt"):
        os.remove(reports + ".ckpt")
    os.makedirs(reports)
    env = dict(os.environ, KAURI_ML_CELL=marker, ML_REPORT_DIR=reports)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"):
        env.pop(k, None)
    log = os.path.join(out, "logs", cell["name"] + ".log")
    argvs = commands(cell, kauri)
    start = time.time()
    procs = []
    with open(log, "w") as f:
        f.write("".join("$ %s\n" % " ".join(a) for a in argvs))
        f.flush()
        for argv in argvs:
            procs.append(subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          cwd="/tmp"))
        codes, timed_out = [], False
        for p in procs:
            left = max(1.0, timeout_of(cell) - (time.time() - start))
            try:
                codes.append(p.wait(timeout=left))
            except subprocess.TimeoutExpired:
                timed_out = True
                for q in procs:
                    try:
                        os.killpg(q.pid, signal.SIGKILL)
                    except OSError:
                        pass
                codes.append(p.wait())
    secs = time.time() - start
    # What a launcher leaves behind is found by the marker; given a moment to go.
    left = marked(marker)
    for _ in range(20):
        if not left:
            break
        time.sleep(0.5)
        left = marked(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # Each rank's report is a file of its own (ML_REPORT_DIR/rank.R): the ranks share the
    # launcher's standard output, where their lines may interleave.
    text = ""
    for name in sorted(os.listdir(reports)):
        with open(os.path.join(reports, name), errors="replace") as f:
            text += f.read()
    oks = set()
    envs = {}
    for line in text.splitlines():
        w = line.split()
        if line.startswith("OK ") and len(w) >= 6 and w[3].isdigit():
            oks.add(int(w[3]))
        elif line.startswith("ENV "):
            kv = dict(x.split("=", 1) for x in w[1:] if "=" in x)
            if kv.get("RANK", "").isdigit():
                envs[int(kv["RANK"])] = kv
    why = []
    if timed_out:
        why.append("timed out after %d s" % timeout_of(cell))
    elif any(codes):
        why.append("exit status %s" % ",".join(str(c) for c in codes))
    missing = sorted(set(range(NP)) - oks)
    if missing:
        why.append("no OK line from rank(s) %s" % ",".join(map(str, missing)))
    if left:
        why.append("left behind: pid(s) %s" % ",".join(map(str, left)))
    return dict(cell, result="fail" if why else "pass", secs="%.1f" % secs,
                detail="; ".join(why), envs=envs, log=log)


def env_differences(ref, got):
    """How kauri's torchrun variables differ from torchrun's, rank by rank, beyond the rules
    above (an empty list when they agree)."""
    diffs = []
    for rank in sorted(set(ref) | set(got)):
        a, b = ref.get(rank), got.get(rank)
        if a is None or b is None:
            diffs.append("rank %d: variables printed under one launcher only" % rank)
            continue
        for k in sorted(set(a) | set(b)):
            va, vb = a.get(k, "<unset>"), b.get(k, "<unset>")
            if k in PER_JOB:
                if (va == "<unset>") != (vb == "<unset>"):
                    diffs.append("rank %d: %s is %s under torchrun, %s under kauri" % (rank, k, va, vb))
            elif k in BY_DESIGN:
                if (va, vb) != BY_DESIGN[k]:
                    diffs.append("rank %d: %s=%s under kauri (expected %s)" % (rank, k, vb, BY_DESIGN[k][1]))
            elif va != vb:
                diffs.append("rank %d: %s=%s under torchrun, %s under kauri" % (rank, k, va, vb))
    return diffs


def compare(results):
    """(lines, regressions): a line per (framework, hosts) and what fails the run."""
    by = {(r["fw"], r["hosts"], r["launcher"]): r for r in results}
    lines, regressions = [], []
    for fw in FRAMEWORKS:
        for hosts in hosts_of(fw):
            ref, k = by.get((fw, hosts, "reference")), by.get((fw, hosts, "kauri"))
            if k is None:
                continue
            what = "%s on %d host%s" % (fw, hosts, "s" if hosts > 1 else "")
            verdict = "ok"
            if k["result"] != "pass":
                if ref is None or ref["result"] == "pass" or fw in KAURI_MUST_PASS:
                    verdict = "REGRESSION: kauri failed (%s)" % k["detail"]
                    regressions.append(what)
                else:
                    verdict = "both failed (reference: %s)" % ref["detail"]
            elif ref is not None and ref["result"] == "pass" and fw.startswith("torch"):
                diffs = env_differences(ref["envs"], k["envs"])
                if diffs:
                    verdict = "REGRESSION: torchrun variables differ: " + "; ".join(diffs[:6])
                    regressions.append(what)
            lines.append((what, ref and ref["result"], ref and ref["secs"], k["result"], k["secs"], verdict))
    return lines, regressions


def write(out, results):
    with open(os.path.join(out, "results.tsv"), "w") as f:
        f.write("cell\tresult\tsecs\tdetail\n")
        for r in results:
            f.write("%s\t%s\t%s\t%s\n" % (r["name"], r["result"], r["secs"], r["detail"]))
    lines, regressions = compare(results)
    md = ["# PyTorch and JAX under their own start and under kauri -ml-env", "",
          "| cell | reference | s | kauri | s | verdict |", "|---|---|---|---|---|---|"]
    md += ["| %s | %s | %s | %s | %s | %s |" % l for l in lines]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return regressions


def selftest():
    ref = {0: {"RANK": "0", "GROUP_RANK": "0", "MASTER_PORT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
               "OMP_NUM_THREADS": "1"}}
    same = {0: dict(ref[0], MASTER_PORT="2", TORCHELASTIC_USE_AGENT_STORE="False")}
    assert env_differences(ref, same) == [], env_differences(ref, same)
    assert env_differences(ref, {0: dict(same[0], OMP_NUM_THREADS="<unset>")})
    assert env_differences(ref, {0: dict(same[0], TORCHELASTIC_USE_AGENT_STORE="True")})
    assert env_differences(ref, {0: dict(same[0], MASTER_PORT="<unset>")})
    assert env_differences(ref, {})

    def r(fw, hosts, launcher, result, envs=None):
        return {"fw": fw, "hosts": hosts, "launcher": launcher, "result": result, "secs": "1",
                "detail": "x", "envs": envs or {}}
    _, reg = compare([r("jax", 1, "reference", "pass"), r("jax", 1, "kauri", "fail")])
    assert reg == ["jax on 1 host"], reg
    _, reg = compare([r("jax", 1, "reference", "fail"), r("jax", 1, "kauri", "fail")])
    assert reg == [], reg
    # the restart cell must pass under kauri even where torchrun's fails
    _, reg = compare([r("torch-restart", 1, "reference", "fail"),
                      r("torch-restart", 1, "kauri", "fail")])
    assert reg == ["torch-restart on 1 host"], reg
    _, reg = compare([r("torch-restart", 1, "reference", "fail"),
                      r("torch-restart", 1, "kauri", "pass")])
    assert reg == [], reg
    _, reg = compare([r("torch", 2, "reference", "pass", ref), r("torch", 2, "kauri", "pass", same)])
    assert reg == [], reg
    _, reg = compare([r("torch", 2, "reference", "pass", ref), r("torch", 2, "kauri", "pass", {})])
    assert reg == ["torch on 2 hosts"], reg
    assert len(cells()) == 10 and len(commands(cells()[0], "k")) == 1
    assert timeout_of(dict(fw="torch-restart", launcher="reference")) == 60
    assert timeout_of(dict(fw="torch-restart", launcher="kauri")) == TIMEOUT
    assert "-max-restarts" in commands(dict(fw="torch-restart", hosts=1, launcher="kauri"), "k")[0]
    assert len(commands(dict(fw="torch", hosts=2, launcher="reference"), "k")) == 2
    assert len(commands(dict(fw="jax", hosts=1, launcher="reference"), "k")) == NP
    print("ml.py selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["all", "run", "plan", "selftest"])
    ap.add_argument("--kauri", default="target/debug/kauri")
    ap.add_argument("--out", default="target/ml-frameworks")
    ap.add_argument("--cells", default="*", help="fnmatch pattern on cell names")
    a = ap.parse_args()
    if a.what == "selftest":
        return selftest()
    if a.what == "plan":
        for c in cells():
            print(c["name"])
        return 0
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    if not os.path.exists(os.path.join(VENV, "bin", "python3")):
        sys.exit("ml.py: no venv at %s: run compat-tests/ml/setup.sh" % VENV)
    kauri = os.path.abspath(a.kauri)
    results = []
    for c in cells():
        if not fnmatch.fnmatch(c["name"], a.cells):
            continue
        r = run_cell(c, kauri, out)
        print("ml: %-22s %s %6ss %s" % (c["name"], r["result"], r["secs"], r["detail"]), flush=True)
        results.append(r)
    regressions = write(out, results)
    passed = sum(r["result"] == "pass" for r in results)
    print("ml: %d passed, %d failed" % (passed, len(results) - passed))
    if regressions:
        print("ml: regressions: %s (logs in %s/logs)" % (", ".join(regressions), out))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
