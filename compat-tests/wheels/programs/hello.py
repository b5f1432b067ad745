"""mpi4py hello: one line per rank (rank, size, library), after an allreduce."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
assert comm.allreduce(rank) == size * (size - 1) // 2
lib = MPI.Get_library_version().splitlines()[0][:60]
print("OK hello rank %d of %d: %s" % (rank, size, lib), flush=True)
