#!/usr/bin/env python3
"""A rank like torch's on MASTER_ADDR:MASTER_PORT: rank 0 binds the port late (after
`late_master.py TOKEN [SECONDS [GATE]]` sleeps SECONDS, default 3, or, with GATE, once it has
written GATE.TOKEN.up and the file GATE exists), rank 1 connects; they swap TOKEN, the job's
own, and each checks it got its own job's. Rank 0 prints `port PORT token TOKEN`."""
import os
import socket
import sys
import time

token = sys.argv[1]
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
gate = sys.argv[3] if len(sys.argv) > 3 else None
rank = int(os.environ["RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
PATIENCE = 300  # seconds: machines are small and busy; the test's watchdog ends a hang


def swap(conn):
    conn.settimeout(PATIENCE)
    conn.sendall(f"{token}\n".encode())
    got = conn.makefile().readline().strip()
    if got != token:
        raise SystemExit(f"rank {rank}: joined another job's store ({got!r}, not {token!r})")


if rank == 0:
    if gate:
        open(f"{gate}.{token}.up", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.05)
    else:
        time.sleep(delay)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((addr, port))
    except OSError as e:
        raise SystemExit(f"rank 0: cannot bind MASTER_PORT {port}: {e}")
    srv.listen(1)
    srv.settimeout(PATIENCE)
    conn, _ = srv.accept()
    with conn:
        swap(conn)
    print(f"port {port} token {token}")
else:
    start = time.monotonic()
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=PATIENCE)
            break
        except OSError:
            if time.monotonic() - start > PATIENCE:
                raise SystemExit("rank 1: cannot reach the master")
            time.sleep(0.05)
    with c:
        swap(c)
