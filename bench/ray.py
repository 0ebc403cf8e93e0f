#!/usr/bin/env python3
"""Ray: runward against Ray's own CLI, interleaved round by round, in one run.

- submit to verified running: `runward start --on ray://local --settle 0` (POST /api/jobs/,
  then the job polled until RUNNING and its driver found alive in /proc) against `ray job
  submit --no-wait` then `ray job status` polled every 0.1 s until it says RUNNING.
- stop to verified dead: `runward stop` (Ray's stop and runward's own, every marked process
  verified gone) against `ray job stop` (which waits for STOPPED); after each, the processes
  of the job left alive are counted from /proc (the marker).
The job answers TERM and leaves a double-forked setsid child (the scenario of bench/peers).
Every command runs in the test cluster's network namespace, as tests/test_ray.py's do.
Both runward figures include the CLI's start-up and exit: they are what a script sees.
Needs root and `scripts/ray-testbed up`.

Usage: python bench/ray.py [--rounds N]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.1
JOB = "trap 'exit 0' TERM; setsid sh -c '(exec sleep 901 &)'; while :; do sleep 0.1; done"


def marked(value: str) -> list[int]:
    """Live processes whose RUNWARD_RUN is value, from /proc."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"RUNWARD_RUN=" + value.encode() in env and state not in ("Z", "X"):
            out.append(int(d))
    return out


def clean(value: str) -> None:
    for pid in marked(value):
        os.kill(pid, signal.SIGKILL)


def raw_round(tb: dict) -> tuple[float, float, int]:
    ns = ["ip", "netns", "exec", tb["netns"]]
    ray = ns + [tb["ray"], "job"]
    addr = ["--address", tb["dashboard"]]
    sid, marker = f"rwbench-{uuid.uuid4().hex[:8]}", f"rwbenchraw{uuid.uuid4().hex[:6]}.1"
    t0 = time.monotonic()
    subprocess.run(ray + ["submit", *addr, "--no-wait", "--submission-id", sid, "--", "env",
                          f"RUNWARD_RUN={marker}", "/bin/sh", "-c", JOB], check=True, capture_output=True)
    while "RUNNING" not in subprocess.run(ray + ["status", *addr, sid], capture_output=True, text=True).stdout:
        time.sleep(POLL_S)
    t1 = time.monotonic()
    subprocess.run(ray + ["stop", *addr, sid], check=True, capture_output=True)
    t2 = time.monotonic()
    left = len(marked(marker))
    clean(marker)
    return t1 - t0, t2 - t1, left


def runward_round(tb: dict, env: dict, n: int) -> tuple[float, float, int]:
    cli = ["ip", "netns", "exec", tb["netns"], sys.executable, "-m", "runward"]
    name = f"bench{n}"
    t0 = time.monotonic()
    subprocess.run(cli + ["start", name, "--on", "ray://local", "--settle", "0", "--", "/bin/sh", "-c", JOB],
                   env=env, check=True, capture_output=True)
    t1 = time.monotonic()
    subprocess.run(cli + ["stop", name, "--grace", "10"], env=env, check=True, capture_output=True)
    t2 = time.monotonic()
    left = len(marked(f"{name}.1"))
    clean(f"{name}.1")
    return t1 - t0, t2 - t1, left


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    try:
        tb = json.loads(Path(os.environ.get("RUNWARD_RAY", "/tmp/runward-ray"), "ray.json").read_text())
    except OSError:
        sys.exit("no Ray testbed: run `scripts/ray-testbed up` as root")
    home = tempfile.mkdtemp(prefix="rwbench-ray-")
    env = dict(os.environ, RUNWARD_HOME=home, PYTHONPATH=str(ROOT / "src"))
    raw, ours = [], []
    for n in range(args.rounds):  # interleaved: the load of the moment falls on both
        raw.append(raw_round(tb))
        ours.append(runward_round(tb, env, n))
        print(f"round {n}: ray submit+poll {raw[-1][0]:.2f}s stop {raw[-1][1]:.2f}s left {raw[-1][2]} | "
              f"runward start {ours[-1][0]:.2f}s stop {ours[-1][1]:.2f}s left {ours[-1][2]}", flush=True)
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"submit to verified running (median of {args.rounds}): ray {med(raw, 0):.2f}s, runward {med(ours, 0):.2f}s "
          f"({med(ours, 0) / med(raw, 0):.2f}x)")
    print(f"stop (median): ray job stop {med(raw, 1):.2f}s leaving {sum(r[2] for r in raw)} process(es) in all; "
          f"runward stop {med(ours, 1):.2f}s leaving {sum(r[2] for r in ours)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
