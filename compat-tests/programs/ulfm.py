"""ulfm.py MODE: programs/ompi5_ulfm.c in mpi4py 4.x (Open MPI 5's ULFM through mpi4py).

The last rank dies (MODE `signal`: SIGKILL to itself; `agent`: SIGKILL to its parent, under
`kauri -launcher fork` its host's agent, then to itself); the others try a barrier, revoke
the world, shrink it, agree on the shrunk communicator and print

    ulfm.py: rank R of N: shrunk size S rank NR agree flag=F

then free it and exit 0. Run it with fault tolerance on (`mpirun --with-ft ulfm`, `kauri
-with-ft ulfm`).
"""

import os
import signal
import sys

from mpi4py import MPI

mode = sys.argv[1] if len(sys.argv) > 1 else "signal"
world = MPI.COMM_WORLD
world.Set_errhandler(MPI.ERRORS_RETURN)
rank, size = world.Get_rank(), world.Get_size()
if rank == size - 1:
    if mode == "agent":
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
try:
    world.Barrier()
except MPI.Exception:
    pass
world.Revoke()
shrunk = world.Shrink()
shrunk.Set_errhandler(MPI.ERRORS_RETURN)
flag = shrunk.Agree(1)
print(
    "ulfm.py: rank %d of %d: shrunk size %d rank %d agree flag=%d"
    % (rank, size, shrunk.Get_size(), shrunk.Get_rank(), flag),
    flush=True,
)
shrunk.Free()
