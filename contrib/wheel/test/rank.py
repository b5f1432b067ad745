"""A rank of contrib/wheel/test.sh, run by the venv's python under the venv's kauri.

    rank.py world N LIBRARY    every rank: checks itself (below), prints
                               `OK world rank R of N: LIBRARY`
    rank.py spawn N LIBRARY    every rank: checks itself, spawns 2 children
                               (MPI.COMM_SELF.Spawn of this file, `child`), which check
                               themselves and report back over the intercommunicator; prints
                               `OK spawn rank R of N: children 0,1 of 2`
    rank.py child 2 LIBRARY    (a spawned child)

A rank checks that its world has N ranks (a rank started as a singleton has 1), that
MPI.Get_library_version()'s first line, runs of blanks made one space, starts with LIBRARY (the
wheel's MPI and version: Debian's Open MPI is 4.1, its MPICH 4.0), that every MPI or PMI library mapped into it lies in the venv
(sys.prefix), and that the kauri above it is the venv's bin/kauri, with every MPI or PMI
library it loaded (the OpenPMIx it serves Open MPI with) in the venv too. A failed check
raises: the rank exits non-zero, and so does kauri.
"""
import os
import re
import sys

from mpi4py import MPI

# The libraries of an MPI or a process manager: MPICH's and Open MPI's, OpenPMIx, PRRTE,
# Slurm's and kauri's libpmi.
MPI_LIB = re.compile(r"/lib(mpi|mpich|open-pal|open-rte|pmix|prrte|pmi)[^/]*\.so")


def mapped(pid):
    """The files mapped into process `pid` that are an MPI or PMI library."""
    with open("/proc/%s/maps" % pid) as f:
        files = {line.split(None, 5)[-1].strip() for line in f if "/" in line}
    return sorted(p for p in files if MPI_LIB.search(p))


def outside_venv(paths):
    prefix = os.path.realpath(sys.prefix) + os.sep
    return [p for p in paths if not os.path.realpath(p).startswith(prefix)]


def kauri_above():
    """The pid of the nearest ancestor whose executable is named kauri, and its executable."""
    pid = os.getppid()
    while pid > 1:
        exe = os.readlink("/proc/%d/exe" % pid)
        if os.path.basename(exe) == "kauri":
            return pid, exe
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise AssertionError("no kauri process above this rank")


def check(comm, size, library):
    """Checks this rank (module docstring); returns its library version's first line."""
    rank = comm.Get_rank()
    got = comm.Get_size()
    assert got == size, "rank %d: a world of %d, not %d (a singleton?)" % (rank, got, size)
    lib = " ".join(MPI.Get_library_version().splitlines()[0].split())
    assert lib.startswith(library), "rank %d: library %r, not %r" % (rank, lib, library)
    mine = mapped("self")
    assert any("/libmpi" in p for p in mine), "rank %d: no libmpi mapped: %s" % (rank, mine)
    assert not outside_venv(mine), "rank %d: not the venv's: %s" % (rank, outside_venv(mine))
    pid, exe = kauri_above()
    venv_kauri = os.path.realpath(os.path.join(sys.prefix, "bin", "kauri"))
    assert exe == venv_kauri, "rank %d: kauri %s, not the venv's %s" % (rank, exe, venv_kauri)
    theirs = mapped(pid)
    assert not outside_venv(theirs), "kauri loaded: %s" % outside_venv(theirs)
    if lib.startswith("Open MPI"):
        assert any("/libpmix" in p for p in theirs), "kauri loaded no libpmix: %s" % theirs
    assert comm.allreduce(rank) == size * (size - 1) // 2
    return lib


def main():
    mode, size, library = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "child":
        parent = MPI.Comm.Get_parent()
        assert parent != MPI.COMM_NULL, "a child with no parent"
        check(MPI.COMM_WORLD, size, library)
        rank = MPI.COMM_WORLD.Get_rank()
        parent.send((rank, MPI.COMM_WORLD.Get_size()), dest=0, tag=7)
        parent.Disconnect()
        return
    world = MPI.COMM_WORLD
    lib = check(world, size, library)
    rank = world.Get_rank()
    if mode == "world":
        print("OK world rank %d of %d: %s" % (rank, size, lib), flush=True)
        return
    assert mode == "spawn", mode
    argv = [os.path.abspath(__file__), "child", "2", library]
    inter = MPI.COMM_SELF.Spawn(sys.executable, args=argv, maxprocs=2)
    assert inter.Get_remote_size() == 2, inter.Get_remote_size()
    got = sorted(inter.recv(source=r, tag=7) for r in range(2))
    assert got == [(0, 2), (1, 2)], "rank %d: children reported %s" % (rank, got)
    inter.Disconnect()
    world.Barrier()
    print("OK spawn rank %d of %d: children 0,1 of 2" % (rank, size), flush=True)


main()
