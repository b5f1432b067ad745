"""One rank of an mpi4py test run: the suite's runtests.py with this rank's output in a
file of its own. Started by suite.py under a launcher:

    LAUNCHER -n N python3 rank.py OUTDIR RUNTESTS [runtests options...]

Imports the installed mpi4py (MPI_Init happens here, as in any mpi4py program), writes
OUTDIR/rank<R>-of-<N>-pid<PID>.log (a process that ran alone writes rank0-of-1: the
runner sees that the world was not the N it asked for), with a first line naming the
mpi4py it runs (the runner checks that it is not the source tree's), then runs runtests.py
with stdout and stderr in that file: unittest's `-v` lines of two ranks never mix.
"""
import os
import runpy
import sys

out, runtests = sys.argv[1], sys.argv[2]
import mpi4py  # noqa: E402  (the installed package: the test directory is not on sys.path yet)
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
path = os.path.join(out, "rank%d-of-%d-pid%d.log" % (rank, size, os.getpid()))
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, ("rank.py: mpi4py %s from %s, %s\n" % (
    mpi4py.__version__, os.path.dirname(mpi4py.__file__),
    MPI.Get_library_version().splitlines()[0])).encode())
sys.stdout.flush()
sys.stderr.flush()
os.dup2(fd, 1)
os.dup2(fd, 2)
os.close(fd)
sys.argv = [runtests] + sys.argv[3:]
# As `python3 runtests.py` would: the script's directory first on sys.path (mpi4py 4's
# runtests.py imports its `main` module from there).
sys.path.insert(0, os.path.dirname(os.path.abspath(runtests)))
runpy.run_path(runtests, run_name="__main__")
