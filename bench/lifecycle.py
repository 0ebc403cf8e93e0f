#!/usr/bin/env python3
"""Lifecycle latencies, each against the job's own clock, measured in one run.

- stop of a TERM-responsive job: from the job's own exit (it writes time.time() as its last
  act) to `runward stop` returning verified. Goal: within 0.15 s.
- a job that exits at once: from its exit to `runward start` (settle 30 s) reporting it.
  Goal: within 0.2 s, i.e. not after the settle.
Both figures include the CLI's own start-up and exit: they are what a script sees.

Usage: python bench/lifecycle.py [--rounds N]
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

TERM_JOB = r"""
import os, signal, sys, time
def on_term(*_):
    open(sys.argv[1], "w").write(repr(time.time()))
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(3600)
"""
EXIT_JOB = r"""
import sys, time
open(sys.argv[1], "w").write(repr(time.time()))
sys.exit(3)
"""


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "runward", *args], env=env, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rw-bench-life-"))
    env = dict(os.environ, RUNWARD_HOME=str(scratch / "home"), PYTHONPATH=str(ROOT / "src"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure runward, not the bytecode compiler
    stop_lat, early_lat, stop_agent = [], [], []
    for i in range(a.rounds):
        stamp = scratch / f"term-{i}"
        p = cli(env, "start", f"b{i}", "--settle", "0.2", "--", sys.executable, "-c", TERM_JOB, str(stamp))
        assert p.returncode == 0, p.stderr
        p = cli(env, "stop", f"b{i}", "--json")
        t_ret = time.time()
        assert p.returncode == 0, p.stderr
        stop_lat.append(t_ret - float(stamp.read_text()))
        import json
        stop_agent.append(json.loads(p.stdout)["result"]["stop_s"])
        stamp = scratch / f"exit-{i}"
        p = cli(env, "start", f"e{i}", "--settle", "30", "--", sys.executable, "-c", EXIT_JOB, str(stamp))
        t_ret = time.time()
        assert p.returncode == 1, (p.returncode, p.stderr)
        early_lat.append(t_ret - float(stamp.read_text()))

    def row(name, xs, goal):
        q = statistics.quantiles(xs, n=10)
        med = statistics.median(xs)
        print(f"{name:<46} {med*1000:8.1f} {q[0]*1000:7.1f}-{q[-1]*1000:<7.1f} {goal*1000:7.0f}  "
              f"{'ok' if med <= goal else 'MISSED'}")
        return med <= goal
    print(f"{'latency (ms)':<46} {'median':>8} {'p10-p90':>15} {'goal':>7}")
    ok = row("stop: job's exit -> verified stop returns", stop_lat, 0.15)
    row("  (inside the agent: signal -> verified dead)", stop_agent, 0.15)
    ok &= row("start: job's exit -> start reports it", early_lat, 0.2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
