"""mpi4py's own spawn tests (test/test_spawn.py of its source), the classes that spawn with
MPI_Comm_spawn_multiple, run again and again in one job: each test spawns children, which
connect, disconnect and exit while the next spawn's children connect. Prints one line per
rank: `rank R ok`, or `rank R FAILED` and what failed.

    python3 spawn_in_a_row.py MPI4PY_TEST_DIR REPEATS
"""

import sys
import unittest

sys.path.insert(0, sys.argv[1])
import test_spawn  # noqa: E402
from mpi4py import MPI  # noqa: E402

CLASSES = [
    "TestSpawnMultipleSelf",
    "TestSpawnMultipleWorld",
    "TestSpawnMultipleSelfMany",
    "TestSpawnMultipleWorldMany",
]

failed = []
with open("/dev/null", "w") as quiet:
    for _ in range(int(sys.argv[2])):
        load = unittest.TestLoader().loadTestsFromTestCase
        suite = unittest.TestSuite(load(getattr(test_spawn, c)) for c in CLASSES)
        result = unittest.TextTestRunner(stream=quiet, verbosity=0).run(suite)
        failed += [str(t) for t, _ in result.failures + result.errors]
rank = MPI.COMM_WORLD.Get_rank()
print("rank", rank, "FAILED " + ", ".join(failed) if failed else "ok", flush=True)
