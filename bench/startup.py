#!/usr/bin/env python3
"""CLI start-up against `python3 -c pass`, measured in the same run (ratios, not seconds).

Goals (issue 27, tightening the verified-lifecycle issue's 2.5x and 4x): `runward --help` at
most 2.0x, `runward status --json` with no runs at most 3.0x; (issue 15) `import runward` at
most 1.5x. Usage: python bench/startup.py [--rounds N]
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


def timed(argv, env, rounds):
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t)
        assert p.returncode == 0, (argv, p.returncode)
    return samples


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="rw-bench-")
    env = dict(os.environ, RUNWARD_HOME=home, PYTHONPATH=str(ROOT / "src"))
    # Installed packages have their bytecode compiled; a session that forbids writing it
    # would measure the compiler instead of runward.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    # the console script, as users run it; `python -m runward` where it is not installed
    script = Path(py).with_name("runward")
    rw = [str(script)] if script.exists() else [py, "-m", "runward"]
    cases = {
        "python3 -c pass": [py, "-c", "pass"],
        "runward --help": [*rw, "--help"],
        "runward status --json": [*rw, "status", "--json"],
        "import runward": [py, "-c", "import runward"],  # the Python API's names load on first use
    }
    for argv in cases.values():  # warm the page cache and the agent's code cache
        timed(argv, env, 3)
    # interleave the cases round by round so machine noise hits them alike
    res = {k: [] for k in cases}
    for _ in range(a.rounds):
        for k, argv in cases.items():
            res[k] += timed(argv, env, 1)
    base = statistics.median(res["python3 -c pass"])
    goals = {"runward --help": 2.0, "runward status --json": 3.0, "import runward": 1.5}
    print(f"{'case':<24} {'median ms':>10} {'p10-p90 ms':>14} {'ratio':>7} {'goal':>6}")
    ok = True
    for k, s in res.items():
        q = statistics.quantiles(s, n=10)
        med = statistics.median(s)
        ratio = med / base
        goal = goals.get(k)
        mark = "" if goal is None else ("ok" if ratio <= goal else "MISSED")
        ok &= mark != "MISSED"
        print(f"{k:<24} {med*1000:>10.1f} {q[0]*1000:>6.1f}-{q[-1]*1000:<7.1f} {ratio:>7.2f} "
              f"{'' if goal is None else f'<={goal}':>6} {mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
