"""What the torch programs report to ml.py: their `OK` line, after an `ENV name=value ...` line
of the torchrun variables (ml.py compares them across launchers), in ML_REPORT_DIR/rank.R when
the harness names a directory (the ranks' shared standard output may interleave their lines,
as it did under torchrun)."""

import os

TORCHRUN_VARS = [
    "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
]


def report(rank, ok):
    """Prints `ok`, and writes it with the ENV line to ML_REPORT_DIR/rank.R."""
    print(ok, flush=True)
    d = os.environ.get("ML_REPORT_DIR")
    if d:
        env = " ".join("%s=%s" % (k, os.environ.get(k, "<unset>")) for k in TORCHRUN_VARS)
        with open(os.path.join(d, "rank.%d" % rank), "w") as f:
            f.write("ENV " + env + "\n" + ok + "\n")
