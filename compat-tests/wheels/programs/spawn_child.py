"""The child of spawn.py: answers its parent's number plus 1000."""
from mpi4py import MPI

parent = MPI.Comm.Get_parent()
assert parent != MPI.COMM_NULL
n = parent.recv(source=0, tag=1)
parent.send(n + 1000, dest=0, tag=2)
parent.Disconnect()
