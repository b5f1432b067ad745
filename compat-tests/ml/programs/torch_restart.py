"""A PyTorch trainer that survives a failure as torchrun's users write one: it checkpoints
after every step and resumes from the last checkpoint when it is started again. In its first
attempt (TORCHELASTIC_RESTART_COUNT 0) rank 1 dies at step 2, as a crashed worker does; the
launcher (`torchrun --max-restarts 2`, `kauri -ml-env -max-restarts 2`) must end the others
and start every rank again with TORCHELASTIC_RESTART_COUNT 1, which resumes at step 2 and
checks the sum of every step's all-reduce. Prints one `OK torch rank R of N` line; with
ML_REPORT_DIR set, also writes it, after the `ENV` line of the torchrun variables, to
ML_REPORT_DIR/rank.R (the checkpoint is ML_REPORT_DIR.ckpt). Unmodified under both."""

import datetime
import json
import os
import torch
import torch.distributed as dist
from ml_report import report

STEPS = 5


def main():
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    restart = int(env["TORCHELASTIC_RESTART_COUNT"])
    ckpt = (env.get("ML_REPORT_DIR") or "/tmp/torch_restart") + ".ckpt"
    state = {"step": 0, "total": 0.0}
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=240))
    for step in range(state["step"], STEPS):
        if restart == 0 and rank == 1 and step == 2:
            os._exit(1)  # a worker crashes
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        state = {"step": step + 1, "total": state["total"] + t.item()}
        dist.barrier()
        if rank == 0:
            with open(ckpt + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(ckpt + ".tmp", ckpt)
    assert state["total"] == STEPS * world * (world + 1) / 2, state
    assert restart == 1, "resumed in the second attempt, not attempt %d" % restart
    dist.barrier()
    dist.destroy_process_group()
    ok = "OK torch rank %d of %d (resumed at restart %d)" % (rank, world, restart)
    report(rank, ok)


main()
