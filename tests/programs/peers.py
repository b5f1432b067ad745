#!/usr/bin/env python3
"""A rank that knows its place only from KAURI_* variables: it listens on a loopback port,
publishes it with `kauri kvs`, fences, then connects to every peer and exchanges ranks."""
# pylint: disable=invalid-name
import os
import socket
import subprocess
import sys

kauri = sys.argv[1]
# `kauri kvs` talks over this rank's PMI socket: the child must inherit it.
keep = [int(os.environ["PMI_FD"])] if "PMI_FD" in os.environ else []


def kvs(*args):
    return subprocess.run([kauri, "kvs", *args], check=True, capture_output=True,
                          text=True, pass_fds=keep).stdout.strip()


rank, size = int(os.environ["KAURI_RANK"]), int(os.environ["KAURI_SIZE"])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(size)
port = srv.getsockname()[1]
kvs("put", f"port-{rank}", str(port))
kvs("fence")
peers = {}
for p in range(size):
    if p != rank:
        peers[p] = int(kvs("get", f"port-{p}"))
# Everyone connects to everyone: send our rank to each peer, read each peer's rank.
heard = set()
for p, pport in sorted(peers.items()):
    with socket.create_connection(("127.0.0.1", pport)) as c:
        c.sendall(f"{rank}\n".encode())
for _ in peers:
    conn, _ = srv.accept()
    with conn:
        heard.add(int(conn.makefile().readline()))
assert heard == set(peers), (heard, peers)
print(f"peers rank={rank} size={size} node={os.environ['KAURI_NODE']}/{os.environ['KAURI_NODES']} heard={len(heard)}")
