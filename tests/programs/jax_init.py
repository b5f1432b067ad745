#!/usr/bin/env python3
"""A JAX rank that calls `jax.distributed.initialize()` with no arguments, as a trainer under
a known launcher does, then checks what JAX found against kauri's RANK and WORLD_SIZE and
sums the ranks across processes (CPU collectives over gloo). Prints one line per rank."""
import os

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402  (after initialize, as JAX asks)
from jax.experimental import multihost_utils  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
count, index = jax.process_count(), jax.process_index()
assert (count, index) == (world, rank), f"JAX says {index}/{count}, kauri {rank}/{world}"
total = int(multihost_utils.process_allgather(jnp.array(index)).sum())
print(f"jax {index}/{count} devices={jax.local_device_count()} sum={total}", flush=True)
jax.distributed.shutdown()
