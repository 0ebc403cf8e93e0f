#!/usr/bin/env python3
"""A torchrun worker for runward's multi-node test (docs/multinode.md): gloo on the CPU, an
all-reduce of the step counter across every rank of every node each step, printed as
`gloo step N sum S world W`. Stops cleanly on TERM/INT (torchrun forwards them).

    runward start ddp --on ssh://a --on ssh://b -- torchrun --nnodes={nnodes} \
        --node_rank={node_rank} --nproc_per_node=1 --master_addr={master_addr} \
        --master_port={master_port} examples/gloo_allreduce.py
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main():
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _f: stop.append(signum))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"gloo rank {rank} of {world} node {os.environ.get('GROUP_RANK')}", flush=True)
    step = 0
    while not stop:
        step += 1
        t = torch.tensor([step], dtype=torch.int64)
        dist.all_reduce(t)
        if rank == 0 or os.environ.get("LOCAL_RANK") == "0":
            print(f"gloo step {step} sum {int(t.item())} world {world}", flush=True)
        time.sleep(float(os.environ.get("GLOO_STEP_SECONDS", "0.2")))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
