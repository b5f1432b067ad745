#!/usr/bin/env python3
"""A rank that speaks the PMI wire itself, as MPICH's fault tolerance does: even ranks PMI-1,
odd ranks PMI-2 (one socket serves both). Every rank reads `PMI_dead_processes`, fences, and
then the last rank exits 1 without finalize; the others wait for SIGUSR1 (up to
`DEAD_PROCS_WAIT` seconds; with `DEAD_PROCS_KILL_AGENT` set, the last rank kills
its agent instead; with `DEAD_PROCS_SIGNAL` set, it kills itself with SIGKILL), read the key again (PMI-1 `get`, or PMI-2 `kvs-get` and
`info-getjobattr`), print what they saw and finalize."""
# pylint: disable=invalid-name
import os
import signal
import socket
import sys
import time

rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
v2 = rank % 2 == 1
# The handler is in place before PMI init: kauri signals only ranks in PMI.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
sock = socket.socket(fileno=int(os.environ["PMI_FD"]))
rfile = sock.makefile("rb")


def v1(line, want):
    sock.sendall(line.encode() + b"\n")
    while True:
        got = rfile.readline().decode().strip()
        if not got:
            sys.exit(f"rank {rank}: PMI connection closed waiting for {want}")
        if got.startswith(f"cmd={want}"):
            return dict(f.split("=", 1) for f in got.split(" ") if "=" in f)


def v2_call(body, want):
    data = body.encode()
    sock.sendall(f"{len(data):<6}".encode() + data)
    n = int(rfile.read(6).decode().strip())
    reply = rfile.read(n).decode()
    fields = dict(f.split("=", 1) for f in reply.split(";") if "=" in f)
    assert fields.get("cmd") == want, reply
    return fields


def dead():
    if not v2:
        got = v1(f"cmd=get kvsname={kvsname} key=PMI_dead_processes", "get_result")
        return f"get={got.get('rc')}:{got.get('value')}"
    a = v2_call(f"cmd=kvs-get;jobid={kvsname};key=PMI_dead_processes;", "kvs-get-response")
    b = v2_call("cmd=info-getjobattr;key=PMI_dead_processes;", "info-getjobattr-response")
    return (f"kvs-get={a.get('found')}:{a.get('value')} "
            f"info-getjobattr={b.get('found')}:{b.get('value')}")


if v2:
    v1("cmd=init pmi_version=2 pmi_subversion=0", "response_to_init")
    v2_call(f"cmd=fullinit;pmirank={rank};threaded=FALSE;", "fullinit-response")
    kvsname = v2_call("cmd=job-getid;", "job-getid-response")["jobid"]
else:
    v1("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init")
    kvsname = v1("cmd=get_my_kvsname", "my_kvsname")["kvsname"]
before = dead()
if v2:
    v2_call("cmd=kvs-fence;", "kvs-fence-response")
else:
    v1("cmd=barrier_in", "barrier_out")
if rank == size - 1:
    if os.environ.get("DEAD_PROCS_KILL_AGENT"):
        # Its host is lost: the agent above it dies, and this rank with it.
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(300)
    if os.environ.get("DEAD_PROCS_SIGNAL"):
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(1)
wait = float(os.environ.get("DEAD_PROCS_WAIT", "120"))
if signal.sigtimedwait({signal.SIGUSR1}, wait) is None:
    print(f"rank {rank} no SIGUSR1 in {wait} s; before: {before}; after: {dead()}", flush=True)
else:
    print(f"rank {rank} SIGUSR1; before: {before}; after: {dead()}", flush=True)
if v2:
    v2_call("cmd=finalize;", "finalize-response")
else:
    v1("cmd=finalize", "finalize_ack")
