"""Fault points: RUNWARD_FAULT=STEP makes the agent (or the shim) SIGKILL itself on reaching
STEP, so tests/faults can kill it at exactly that step and check that `status` is true
afterwards, nothing is lost and nothing is duplicated. RUNWARD_FAULT=pause:STEP makes it wait
at STEP instead, while the file $RUNWARD_HOME/fault-pause exists (it writes its pid there),
so a test can make another verb race that step (a stop racing a crash's restart).
RUNWARD_FAULT=raise:STEP makes it raise an exception there: a failure of its own code, which
the shim records as such (shim.failed). Unset in normal use: one getenv a step. The steps are
listed in docs/faults.md."""

import os
import time

STEPS = ("start:recorded", "start:spawned", "start:settled", "stop:signalled", "stop:dead",
         "shim:job-recorded", "shim:exited", "shim:recording-exit",
         "supervise:backoff", "supervise:decided", "health:tick")
PAUSE_MAX_S = 120.0


def point(step):
    f = os.environ.get("RUNWARD_FAULT")
    if f == step:
        os.kill(os.getpid(), 9)
    if f == "pause:" + step:
        _pause()
    if f == "raise:" + step:
        raise RuntimeError("RUNWARD_FAULT: raised at " + step)


def _pause():
    path = os.path.join(os.environ.get("RUNWARD_HOME") or os.path.expanduser("~/.runward"), "fault-pause")
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_MAX_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)  # test machinery only: the test removes the file when its racer is in place
