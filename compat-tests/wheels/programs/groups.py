"""mpi4py create-from-group (MPI 4): a communicator made from a group without a parent
communicator (MPI.Intracomm.Create_from_group, of the world's group and of a session's
mpi://WORLD), and an intercommunicator between the even and the odd ranks
(MPI.Intercomm.Create_from_groups; from 2 ranks)."""
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
group = world.Get_group()
comm = MPI.Intracomm.Create_from_group(group, "kauri.matrix.world")
assert comm.Get_size() == size and comm.Get_rank() == rank
assert comm.allreduce(1) == size
comm.Free()

session = MPI.Session.Init()
sgroup = session.Create_group("mpi://WORLD")
scomm = MPI.Intracomm.Create_from_group(sgroup, "kauri.matrix.session")
assert scomm.Get_size() == size
assert scomm.allreduce(rank) == size * (size - 1) // 2
what = "intracomm (world and session)"
if size >= 2:
    evens = sgroup.Incl(list(range(0, size, 2)))
    odds = sgroup.Incl(list(range(1, size, 2)))
    mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
    inter = MPI.Intercomm.Create_from_groups(mine, 0, other, 0, "kauri.matrix.inter")
    assert inter.Get_remote_size() == other.Get_size()
    local = inter.Get_rank()
    peer = inter.sendrecv(rank, dest=0, source=0) if local == 0 else None
    if local == 0:
        assert peer % 2 != rank % 2, peer
    inter.Free()
    evens.Free()
    odds.Free()
    what += " and intercomm"
scomm.Free()
sgroup.Free()
session.Finalize()
group.Free()
print("OK groups rank %d of %d: %s" % (rank, size, what), flush=True)
