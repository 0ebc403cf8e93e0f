"""The Slurm testbed (scripts/slurm-testbed): the slurm_testbed fixture, sb (an empty queue and the
partition), and whether a job is in the queue."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import wait_for


SLURM_DIR = os.environ.get("RUNWARD_SLURM") or "/tmp/runward-slurm"


def slurm_testbed() -> dict:
    """slurm.json of scripts/slurm-testbed, or a skip that says why there is none."""
    try:
        with open(os.path.join(SLURM_DIR, "slurm.json")) as f:
            sb = json.load(f)
    except (OSError, ValueError):
        pytest.skip(f"no Slurm testbed ({SLURM_DIR}/slurm.json): run `scripts/slurm-testbed up` as root")
    if os.geteuid() != 0:
        pytest.skip("the Slurm testbed's jobs run as root: run the tests as root")
    p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                       env=dict(os.environ, SLURM_CONF=sb["conf"]))
    if "UP" not in p.stdout:
        pytest.skip(f"the Slurm testbed's slurmctld does not answer: {p.stdout.strip()} {p.stderr.strip()}")
    return sb


@pytest.fixture
def sb(tmp_path):
    """The Slurm testbed, its queue empty: a job still COMPLETING from the test before holds
    the node's CPUs, and a start would then (rightly) report PENDING."""
    sb = slurm_testbed()
    wait_for(lambda: not subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.strip(),
             timeout=90, what="an empty Slurm queue")
    yield sb
    # a failed test may leave its job: cancelled, so that the next test finds the node free.
    # Only this test's jobs (their batch script under its tmp_path): the Slurm is shared, and
    # every job of the user (scancel -u) would be others' too
    out = subprocess.run(["squeue", "-h", "-o", "%i|%o"], capture_output=True, text=True).stdout
    mine = [i for i, _, cmd in (ln.partition("|") for ln in out.splitlines()) if cmd.startswith(str(tmp_path) + "/")]
    if mine:
        subprocess.run(["scancel", *mine], capture_output=True)


def in_queue(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i"], capture_output=True, text=True).stdout
    return out.strip() == job_id
