"""A JAX multi-process start on CPU: `jax.distributed.initialize()`, then an all-gather of
every process's index across processes (gloo CPU collectives). With no arguments (as under
`kauri -ml-env`) JAX finds the coordinator, the process count and the process id by itself;
with `--coordinator ADDR:PORT --num-processes N --process-id I`, JAX's explicit form (how it
is started without a launcher it knows), they are passed. Prints one `OK jax process I of N`
line, and writes it to ML_REPORT_DIR/rank.I when that is set."""

import argparse
import os

import numpy as np

import jax
from jax.experimental import multihost_utils


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator")
    p.add_argument("--num-processes", type=int)
    p.add_argument("--process-id", type=int)
    a = p.parse_args()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kw = {}
    if a.coordinator:
        kw = dict(coordinator_address=a.coordinator, num_processes=a.num_processes,
                  process_id=a.process_id)
    jax.distributed.initialize(initialization_timeout=240, **kw)
    i, n = jax.process_index(), jax.process_count()
    if "RANK" in os.environ:
        assert i == int(os.environ["RANK"]), (i, os.environ["RANK"])
    got = multihost_utils.process_allgather(np.array([i], dtype=np.int32))
    assert [int(x) for x in np.ravel(got)] == list(range(n)), got
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()
    ok = "OK jax process %d of %d" % (i, n)
    print(ok, flush=True)
    d = os.environ.get("ML_REPORT_DIR")
    if d:  # the shared standard output may interleave the ranks' lines
        with open(os.path.join(d, "rank.%d" % i), "w") as f:
            f.write(ok + "\n")


main()
