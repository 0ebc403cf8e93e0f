"""A two-rank torchrun job whose rank 1 hangs before a collective: the stall tests' job, on one
host or two."""

from __future__ import annotations


HANG_JOB = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, t = dist.get_rank(), torch.ones(4)
for step in range(100000):
    if rank == 1 and step == 8:
        time.sleep(3600)  # rank 1 stops in its loop; rank 0 waits for it in all_reduce
    print("step %d loss 1.0" % step, flush=True)
    dist.all_reduce(t)
    time.sleep(0.2)
"""
