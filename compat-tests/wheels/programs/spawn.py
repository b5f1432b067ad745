"""mpi4py spawn: every rank spawns one child (MPI.COMM_SELF.Spawn of spawn_child.py), sends
it its rank, gets it back plus 1000, and disconnects."""
import os
import sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spawn_child.py")
inter = MPI.COMM_SELF.Spawn(sys.executable, args=[child], maxprocs=1)
assert inter.Get_remote_size() == 1
inter.send(rank, dest=0, tag=1)
got = inter.recv(source=0, tag=2)
assert got == rank + 1000, got
inter.Disconnect()
comm.Barrier()
print("OK spawn rank %d of %d: child answered %d" % (rank, size, got), flush=True)
