#!/usr/bin/env python3
"""`runward stacks` of a run of 8 Python processes over ssh, against the shell way measured in
the same run: 8 sequential `ssh HOST py-spy dump --pid P` (the same py-spy, the same host).

Goal (issue 28): stack capture of 8 processes over ssh <= 2 s.

Needs root and `scripts/testbed up`. Usage: python bench/stacks.py [--host rw1] [--rounds N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# one parent and 7 children, each blocked in a function with a known name
JOB = ("import os, time\nfor _ in range(7):\n    if os.fork() == 0:\n        break\n"
       "def wait_here():\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.5)\nwait_here()\n")




def main() -> int:
    import testbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="rw1")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    tb = testbed.load()
    if not tb:
        raise SystemExit("the testbed is not up (scripts/testbed up, as root)")
    home = tempfile.mkdtemp(prefix="rwbench-stacks-")
    remote_home = f"/tmp/rwbench-stacks-{os.getpid()}"
    work = Path(home) / "work"
    work.mkdir()
    (work / "runward.toml").write_text(f'[targets.t]\non = "ssh://{a.host}"\nhome = "{remote_home}"\n')
    env = testbed.env(tb, dict(os.environ, RUNWARD_HOME=home, RUNWARD_SSH_CONFIG=tb["ssh_config"],
                               PYTHONPATH=str(ROOT / "src")))
    rw = [sys.executable, "-m", "runward"]
    name = f"bstk{os.getpid()}"

    def run(*args):
        return subprocess.run([*rw, *args], env=env, cwd=work, capture_output=True, text=True)

    p = run("start", name, "--on", "t", "--settle", "0.3", "--ready", "ready", "--json", "--", "python3", "-c", JOB)
    if p.returncode:
        raise SystemExit(f"start failed: {p.stdout[-800:]} {p.stderr[-800:]}")
    try:
        p = run("stacks", name, "--on", "t", "--bring-py-spy", "--json")  # brings py-spy once; warms ssh
        doc = json.loads(p.stdout)["result"]
        pids = [q["pid"] for q in doc["procs"]]
        spy = doc["py_spy"]
        assert len(pids) == 8 and doc["ok"], doc
        ssh = ["ssh", "-F", tb["ssh_config"], a.host]
        ours, base = [], []
        for _ in range(a.rounds):  # interleaved, round by round
            s = time.perf_counter()
            p = run("stacks", name, "--on", "t", "--json")
            ours.append(time.perf_counter() - s)
            assert p.returncode == 0, p.stdout[-500:]
            s = time.perf_counter()
            for pid in pids:
                q = subprocess.run([*ssh, spy, "dump", "--pid", str(pid)], env=env, capture_output=True, text=True)
                assert "wait_here" in q.stdout, q.stderr
            base.append(time.perf_counter() - s)
        m, b = statistics.median(ours), statistics.median(base)
        print(f"runward stacks, 8 processes over ssh://{a.host}: median {m:.3f} s "
              f"(min {min(ours):.3f}, max {max(ours):.3f}; goal <= 2 s: {'met' if m <= 2 else 'NOT met'})")
        print(f"8 sequential `ssh {a.host} py-spy dump --pid P`: median {b:.3f} s")
        print(f"ratio runward / sequential ssh: {m / b:.2f}x   summary: {doc['summary']}")
    finally:
        run("stop", name, "--on", "t", "--grace", "2")
        subprocess.run(["ssh", "-F", tb["ssh_config"], a.host, "rm", "-rf", remote_home], env=env)
        subprocess.run(["rm", "-rf", home])
    return 0


if __name__ == "__main__":
    sys.exit(main())
