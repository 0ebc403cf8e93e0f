"""Failure attribution's inputs: a fixture log's attribution (tests/fixtures/logs), the torchrun
beside this interpreter, and a two-rank job whose rank 1 runs out of memory."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from runward.agent.health.attribution import attribute_log


ROOT = Path(__file__).resolve().parent.parent

LOGS = ROOT / "tests" / "fixtures" / "logs"


def attr(name: str) -> dict:
    res = attribute_log(str(LOGS / name))
    json.dumps(res, allow_nan=False)  # the agent sends it as JSON
    return res


def _torchrun() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return here if os.path.exists(here) else os.environ.get("RUNWARD_TEST_TORCHRUN") or shutil.which("torchrun")


OOM_JOB = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, t = dist.get_rank(), torch.ones(4)
for step in range(10000):
    if rank == 1 and step == 5:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (a stand-in, on CPU)")
    dist.all_reduce(t)
    print("step %d loss 1.0" % step, flush=True)
    time.sleep(0.1)
"""
