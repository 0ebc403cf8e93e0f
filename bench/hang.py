#!/usr/bin/env python3
"""Stall detection and the cost of watching a run (docs/diagnosis.md, "Stalls and stragglers"),
measured in one run on this machine (a local target: the target is this machine):

- detection latency: a job steps every 0.1 s, stamps the time of its last step in a file, then
  hangs alive. `runward watch --stall-after S` runs from the start; its exit on the stall is
  timed from that stamp. Goal: <= S + 5 s. The baseline is S itself (no detector can say it
  sooner): the overhead is printed beside.
- the cost of watching, in CPU seconds per minute on the target, each against its baseline:
  the shim of a run without health actions (the run unwatched) against the shim of the same
  job with actions (it judges stall and straggler every interval: /proc and the log), and a
  `runward watch` (its CLI and agent together: they are both on this machine) against the
  job itself.

Usage: python3 bench/hang.py [--stall-after S] [--window W] [--interval I]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")

JOB = """\
import sys, time
hang_at, stamp = int(sys.argv[1]), sys.argv[2]
step = 0
while True:
    print("step %d loss 1.0" % step, flush=True)
    if step == hang_at:
        open(stamp, "w").write(repr(time.time()))
        time.sleep(86400)
    step += 1
    time.sleep(0.1)
"""


def cli(env, *args, check=True) -> subprocess.CompletedProcess:
    # in the work directory: its runward.toml is the one read
    p = subprocess.run([sys.executable, "-m", "runward", *args], env=env, capture_output=True, text=True,
                       cwd=str(Path(env["RUNWARD_HOME"]).parent))
    if check and p.returncode != 0:
        raise SystemExit(f"runward {' '.join(args)}: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def cpu_of(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def ppid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def latency(env, work, after: float) -> float:
    stamp = work / "last_step"
    job = work / "job.py"
    job.write_text(JOB)
    cli(env, "start", "hang", "--settle", "0.2", "--", sys.executable, str(job), "50", str(stamp))
    try:
        p = cli(env, "watch", "hang", "--for", str(after + 120), "--stall-after", str(after), "--json", check=False)
        t_end = time.time()
        doc = json.loads(p.stdout)
        assert p.returncode == 1 and doc["result"]["alert"]["kind"] == "stall", doc
        return t_end - float(stamp.read_text())
    finally:
        cli(env, "stop", "hang", "--grace", "1")


def shim_cost(env, work, name: str, window: float, toml: str = "") -> tuple[float, float]:
    """(the shim's CPU s/min, the job's CPU s/min) over WINDOW seconds of a job stepping forever."""
    (work / "runward.toml").write_text(toml)
    job = work / "job.py"
    job.write_text(JOB)
    res = json.loads(cli(env, "start", name, "--settle", "0.2", "--json", "--", sys.executable, str(job),
                         "-1", str(work / "never")).stdout)["result"]
    pid = res["pid"]
    shim = ppid_of(pid)
    try:
        s0, j0, t0 = cpu_of(shim), cpu_of(pid), time.monotonic()
        time.sleep(window)  # the measured window itself: nothing is waited for here
        s1, j1, t1 = cpu_of(shim), cpu_of(pid), time.monotonic()
    finally:
        cli(env, "stop", name, "--grace", "1")
        (work / "runward.toml").write_text("")
    per_min = 60.0 / (t1 - t0)
    return (s1 - s0) * per_min, (j1 - j0) * per_min


def watch_cost(env, work, window: float) -> tuple[float, float]:
    """(a watch's CPU s/min, CLI and agent together; the job's CPU s/min meanwhile)."""
    job = work / "job.py"
    res = json.loads(cli(env, "start", "w", "--settle", "0.2", "--json", "--", sys.executable, str(job),
                         "-1", str(work / "never")).stdout)["result"]
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        j0, t0 = cpu_of(res["pid"]), time.monotonic()
        cli(env, "watch", "w", "--for", str(window), "--stall-after", "600")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        j1, t1 = cpu_of(res["pid"]), time.monotonic()
    finally:
        cli(env, "stop", "w", "--grace", "1")
    per_min = 60.0 / (t1 - t0)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return used * per_min, (j1 - j0) * per_min


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stall-after", type=float, default=5.0)
    ap.add_argument("--window", type=float, default=30.0, help="seconds each cost is measured over")
    ap.add_argument("--interval", type=float, default=5.0, help="the health actions' interval")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rw-hang-") as d:
        work = Path(d)
        env = dict(os.environ, RUNWARD_HOME=str(work / "home"), PYTHONPATH=str(ROOT / "src"))
        env.pop("RUNWARD_CONFIG", None)
        lat = latency(env, work, a.stall_after)
        print(f"detection latency after the last step: {lat:.2f} s (stall_after {a.stall_after:g} s: "
              f"+{lat - a.stall_after:.2f} s; goal <= stall_after + 5 s: {'met' if lat <= a.stall_after + 5 else 'NOT met'})")
        base, job = shim_cost(env, work, "plain", a.window)
        acts = (f"[runs.acted.health]\ninterval = {a.interval}\nactions = {{ stall = \"notify\", "
                f"straggler = \"notify\" }}\n")
        judged, job2 = shim_cost(env, work, "acted", a.window, acts)
        assert Path(env["RUNWARD_HOME"], "runs", "acted", "stall.json").exists(), "the shim judged nothing"
        print(f"shim CPU: {base:.3f} s/min unwatched (baseline), {judged:.3f} s/min with health actions every "
              f"{a.interval:g} s (+{judged - base:.3f}); the job itself {job:.2f} / {job2:.2f} s/min")
        w, job3 = watch_cost(env, work, a.window)
        print(f"watch CPU (CLI + agent, polling every 0.5 s): {w:.3f} s/min; the job itself {job3:.2f} s/min "
              f"({100 * w / job3 if job3 else 0:.0f}% of it)")


if __name__ == "__main__":
    main()
