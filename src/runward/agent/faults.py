"""Fault points: RUNWARD_FAULT=STEP makes the agent (or the shim) SIGKILL itself on reaching
STEP, so tests/faults can kill it at exactly that step and check that `status` is true
afterwards, nothing is lost and nothing is duplicated. Unset in normal use: one getenv a
step. The steps are listed in README.md, "Faults"."""

import os

STEPS = ("start:recorded", "start:spawned", "start:settled", "stop:signalled", "stop:dead", "shim:exited")


def point(step):
    if os.environ.get("RUNWARD_FAULT") == step:
        os.kill(os.getpid(), 9)
