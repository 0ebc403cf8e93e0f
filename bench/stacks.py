#!/usr/bin/env python3
"""`runward stacks` over ssh: the Python stacks of a run of 8 processes on a testbed host,
against the shell way measured in the same run, interleaved round by round: 8 sequential
`ssh HOST py-spy dump --pid P` through the same warm control master (nothing grouped, no
ranks, nothing kept).

Goal (issue 28): the capture of 8 processes over ssh <= 2 s.

runward's own py-spy is brought to the host once (`--bring-py-spy`: pushed, sha256-checked,
kept under runward's home there), and both sides run that same binary afterwards.

Needs root and `scripts/testbed up`, and py-spy here (pip install 'runward[stacks]').
Usage: python bench/stacks.py [--rounds N] [--host rw1|rw1-slow]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TB = Path(os.environ.get("RUNWARD_TESTBED", "/tmp/runward-testbed"))

# 8 Python processes: the job and 7 children, each blocked in a function with its own name
JOB = """\
import subprocess, sys, time
CHILD = "import time\\ndef child_waits():\\n    while True:\\n        time.sleep(0.5)\\nchild_waits()\\n"
kids = [subprocess.Popen([sys.executable, "-c", CHILD]) for _ in range(7)]
def parent_waits():
    print("ready", flush=True)
    while True:
        time.sleep(0.5)
parent_waits()
"""


def run(argv, env, ok=(0,)):
    s = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    d = time.perf_counter() - s
    if p.returncode not in ok:
        raise SystemExit(f"{argv[:6]} failed ({p.returncode}): {(p.stderr or p.stdout).decode()[-600:]}")
    return d, p.stdout.decode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--host", default="rw1")
    a = ap.parse_args()
    tbj = TB / "testbed.json"
    if not tbj.exists():
        print("needs the testbed: sudo python3 scripts/testbed up")
        return 2
    cfg = json.loads(tbj.read_text())["ssh_config"]
    scratch = Path(tempfile.mkdtemp(prefix="rwb-stacks-"))
    remote_home = f"/tmp/rwb-stacks-remote-{os.getpid()}"
    (scratch / "runward.toml").write_text(
        f'[targets.h]\non = "ssh://{a.host}"\nhome = "{remote_home}"\npython = "/usr/bin/python3"\n')
    env = dict(os.environ, RUNWARD_SSH_CONFIG=cfg, PYTHONPATH=str(ROOT / "src"),
               RUNWARD_CONFIG=str(scratch / "runward.toml"), RUNWARD_HOME=str(scratch / "home"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    script = Path(sys.executable).with_name("runward")
    rw = [str(script)] if script.exists() else [sys.executable, "-m", "runward"]
    name = f"bstk{os.getpid()}"
    run(rw + ["start", name, "--on", "h", "--settle", "0.2", "--ready", "ready", "--",
              "/usr/bin/python3", "-c", JOB], env)
    try:
        return measure(a, rw, env, cfg, name)
    finally:
        run(rw + ["stop", name, "--on", "h", "--grace", "2"], env, ok=(0, 1, 4, 5))
        subprocess.run(["ssh", "-F", cfg, a.host, "rm", "-rf", remote_home], env=env)
        shutil.rmtree(scratch, ignore_errors=True)


def measure(a, rw, env, cfg, name) -> int:
    cold, out = run(rw + ["stacks", name, "--on", "h", "--bring-py-spy", "--json"], env)
    res = json.loads(out)["result"]
    pids = [p["pid"] for p in res["procs"]]
    if len(pids) != 8 or len(res.get("groups") or ()) < 2:
        raise SystemExit(f"expected 8 processes in 2 frames: {res.get('summary')}")
    spy = res["py_spy"]
    print(f"first call (py-spy {'brought to ' + res['brought'] if res.get('brought') else 'found at ' + spy}): "
          f"{cold:.2f} s\n  {res['summary']}")
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.update(env)
    from runward.transport.agentcall import control_dir
    mux = ["ssh", "-F", cfg, "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
           "-o", f"ControlPath={control_dir()}/%C", "-o", "ControlPersist=300", a.host]
    ours, shell = [], []
    for _ in range(a.rounds):
        d, out = run(rw + ["stacks", name, "--on", "h", "--json"], env)
        if not json.loads(out)["result"].get("ok"):
            raise SystemExit(f"runward stacks did not read the stacks: {out[-600:]}")
        ours.append(d)
        s = time.perf_counter()
        for pid in pids:
            run(mux + [spy, "dump", "--pid", str(pid)], env)
        shell.append(time.perf_counter() - s)
    m_ours, m_shell = statistics.median(ours), statistics.median(shell)
    print(f"runward stacks, 8 processes over ssh ({a.host}), warm: median {m_ours:.2f} s "
          f"(min {min(ours):.2f}, max {max(ours):.2f}; {a.rounds} rounds)")
    print(f"8 sequential `ssh {a.host} py-spy dump --pid P` (warm master): median {m_shell:.2f} s "
          f"(min {min(shell):.2f}, max {max(shell):.2f})")
    print(f"ratio {m_ours / m_shell:.2f}x; goal <= 2 s: {'met' if m_ours <= 2.0 else 'NOT met'}")
    return 0 if m_ours <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
