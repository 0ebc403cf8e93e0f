#!/usr/bin/env python3
"""Slurm: runward against the raw commands, interleaved round by round, in one run.

- submit to verified running: `runward start --on slurm://local/PART --settle 0` (sbatch,
  then squeue until RUNNING, the marker's processes found on the node) against `sbatch
  --parsable` then `squeue -j ID -o %T` polled every 0.1 s until RUNNING.
- stop to verified gone: `runward stop` (scancel --signal=TERM --full, squeue until the job
  left the queue, the node checked for the marker's processes) against `scancel` then
  `squeue -j ID` polled every 0.1 s until the job is no longer listed.
Both runward figures include the CLI's start-up and exit: they are what a script sees.
Needs root and `scripts/slurm-testbed up` (a single-node Slurm).

Usage: python bench/slurm.py [--rounds N] [--partition debug]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.1


def squeue_state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def raw_round(part: str) -> tuple[float, float]:
    t0 = time.monotonic()
    out = subprocess.run(["sbatch", "--parsable", "-p", part, "--output=/dev/null", "--wrap", "exec sleep 300"],
                         capture_output=True, text=True, check=True).stdout
    job = out.strip().split(";")[0]
    while squeue_state(job) != "RUNNING":
        time.sleep(POLL_S)
    t1 = time.monotonic()
    subprocess.run(["scancel", job], check=True)
    while squeue_state(job):
        time.sleep(POLL_S)
    return t1 - t0, time.monotonic() - t1


def runward_round(part: str, env: dict, n: int) -> tuple[float, float]:
    cli = [sys.executable, "-m", "runward"]
    on = ["--on", f"slurm://local/{part}"]
    t0 = time.monotonic()
    subprocess.run(cli + ["start", f"bench{n}", *on, "--settle", "0", "--", "/bin/sleep", "300"],
                   env=env, check=True, capture_output=True)
    t1 = time.monotonic()
    subprocess.run(cli + ["stop", f"bench{n}", *on, "--grace", "10"], env=env, check=True, capture_output=True)
    return t1 - t0, time.monotonic() - t1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partition", default="debug")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="rw-bench-slurm-")
    env = dict(os.environ, RUNWARD_HOME=home, PYTHONPATH=str(ROOT / "src"))
    rw_start, rw_stop, raw_start, raw_stop = [], [], [], []
    for n in range(a.rounds):
        s, t = raw_round(a.partition)
        raw_start.append(s)
        raw_stop.append(t)
        s, t = runward_round(a.partition, env, n)
        rw_start.append(s)
        rw_stop.append(t)
    med = statistics.median
    print(f"{a.rounds} rounds, medians (s), single-node Slurm, partition {a.partition}")
    print(f"submit -> verified running: runward {med(rw_start):.3f}  sbatch+squeue poll {med(raw_start):.3f}"
          f"  ratio {med(rw_start) / med(raw_start):.2f}x")
    print(f"stop -> verified gone:      runward {med(rw_stop):.3f}  scancel+squeue poll {med(raw_stop):.3f}"
          f"  ratio {med(rw_stop) / med(raw_stop):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
