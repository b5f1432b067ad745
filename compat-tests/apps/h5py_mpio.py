"""Parallel HDF5 through h5py's mpio driver: every rank writes its own slice of one dataset
in one file (sys.argv[1]), then rank 0 reads it back and prints the world size and the sum."""
import sys
import h5py
from mpi4py import MPI

c = MPI.COMM_WORLD
path = sys.argv[1]
with h5py.File(path, "w", driver="mpio", comm=c) as f:
    d = f.create_dataset("x", (c.size * 4,), dtype="i")
    d[c.rank * 4:(c.rank + 1) * 4] = [c.rank + 1] * 4
c.Barrier()
if c.rank == 0:
    with h5py.File(path, "r") as f:
        x = f["x"][:]
    print("h5py mpio size=%d sum=%d" % (c.size, int(x.sum())), flush=True)
