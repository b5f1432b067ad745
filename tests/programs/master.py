#!/usr/bin/env python3
"""An ML-style rank: rank 0 listens on MASTER_ADDR:MASTER_PORT, the others connect and report
RANK, LOCAL_RANK and LOCAL_WORLD_SIZE; rank 0 checks them all."""
import os
import socket
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(world)
    seen = {0: (local, local_world)}
    while len(seen) < world:
        conn, _ = srv.accept()
        with conn:
            r, lr, lw = map(int, conn.makefile().readline().split())
            seen[r] = (lr, lw)
    print("master " + " ".join(f"{r}:{lr}/{lw}" for r, (lr, lw) in sorted(seen.items())))
else:
    for attempt in range(600):
        try:
            c = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit("cannot reach the master")
    with c:
        c.sendall(f"{rank} {local} {local_world}\n".encode())
