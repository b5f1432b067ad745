"""A PyTorch data-parallel start, as a training script does it: torch.distributed with gloo
(CPU) from the variables torchrun sets (env://), an all-reduce, an all-gather of where each
rank thinks it is, and the torchrun contract RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK
that code grouping ranks by node relies on. Prints one `OK torch rank R of N` line; with
ML_REPORT_DIR set, also writes it, after an `ENV name=value ...` line with the torchrun
variables (ml.py compares them across launchers), to ML_REPORT_DIR/rank.R (ml_report.py).
Unmodified under torchrun and under `kauri -ml-env`."""

import datetime
import os
import torch
import torch.distributed as dist
from ml_report import report


def main():
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    group, groups = int(env["GROUP_RANK"]), int(env["GROUP_WORLD_SIZE"])
    local, local_world = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=240))
    assert dist.get_rank() == rank and dist.get_world_size() == world, (dist.get_rank(), rank)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t
    seats = [None] * world
    dist.all_gather_object(seats, (rank, group, local, local_world))
    for r, g, lr, lw in seats:
        # Ranks grouped by node are consecutive, as a device mesh built from them assumes.
        assert r == g * lw + lr, ("RANK != GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK", seats)
    assert len({g for _, g, _, _ in seats}) == groups, seats
    dist.barrier()
    dist.destroy_process_group()
    ok = ("OK torch rank %d of %d (group %d of %d, local %d of %d)"
          % (rank, world, group, groups, local, local_world))
    report(rank, ok)


main()
