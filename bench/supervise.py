#!/usr/bin/env python3
"""From a crash to the next attempt alive, with zero backoff: runward's shim against
supervisord (autorestart) and pm2 (autorestart), measured in the same run, interleaved.

The job stamps its own clock: `up T` as its first act, then, 0.2 s later, `down T` as its
last act before `exit 1`. The figure is each `up` minus the `down` before it, i.e. what the
supervisor adds between a crash and the next attempt running. Each tool is set to restart at
once: runward `--restart always --backoff 0 --min-uptime 0`; supervisord `autorestart=true
startsecs=0 startretries=1000`; pm2 `autorestart: true, restart_delay: 0, min_uptime: 0`.

Usage: python bench/supervise.py [--crashes 15] [--rounds 2] [--install-dir DIR] [--gate]
Installs supervisor (pip, a venv) and pm2 (npm --prefix) into DIR (default: a scratch dir,
removed at the end unless --install-dir is given); needs python3 -m venv, node and npm.
Prints the medians and the ratio of runward to the faster peer (goal <= 1.0x).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = 'echo "up $(date +%s.%N)" >> {f}; sleep 0.2; echo "down $(date +%s.%N)" >> {f}; exit 1'


def gaps(path: Path) -> list[float]:
    """Each `up` minus the `down` just before it."""
    out, last_down = [], None
    for ln in path.read_text().splitlines() if path.exists() else []:
        kind, _, t = ln.partition(" ")
        if kind == "down":
            last_down = float(t)
        elif kind == "up" and last_down is not None:
            out.append(float(t) - last_down)
            last_down = None
    return out


def wait_gaps(path: Path, n: int, timeout: float = 120.0) -> list[float]:
    deadline = time.monotonic() + timeout
    while len(gaps(path)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: {len(gaps(path))} restarts of {n} within {timeout}s")
        time.sleep(0.1)
    return gaps(path)[:n]


def install(d: Path) -> tuple[Path, Path]:
    venv, npm = d / "venv", d / "npm"
    if not (venv / "bin" / "supervisord").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "supervisor"], check=True)
    pm2 = npm / "node_modules" / ".bin" / "pm2"
    if not pm2.exists():
        subprocess.run(["npm", "install", "--prefix", str(npm), "--no-audit", "--no-fund", "--silent", "pm2"],
                       check=True)
    return venv, pm2


def run_runward(d: Path, n: int, gate: bool = False) -> list[float]:
    """gate: the run has a GPU (--gpus 0) of the nvidia-smi stand-in (tests/bin), always free:
    each restart passes the GPU gate, which costs one nvidia-smi read (issue 29)."""
    f = d / "rw.times"
    env = dict(os.environ, RUNWARD_HOME=str(d / "rwhome"), PYTHONPATH=str(ROOT / "src"))
    extra = []
    if gate:
        sys.path.insert(0, str(ROOT / "tests"))
        import fakegpu
        env = fakegpu.env_with_standin(fakegpu.create_state(d / "smi.json", gpus=1), env)
        extra = ["--gpus", "0"]
    rw = [sys.executable, "-m", "runward"]
    subprocess.run(rw + ["start", "crash", "--settle", "0", "--restart", "always", "--backoff", "0", *extra,
                         "--min-uptime", "0", "--max-restarts", "100000", "--sh", JOB.format(f=f)],
                   env=env, capture_output=True)
    try:
        return wait_gaps(f, n)
    finally:
        subprocess.run(rw + ["stop", "crash", "--grace", "2"], env=env, capture_output=True)


def run_supervisord(d: Path, venv: Path, n: int) -> list[float]:
    f, conf, sock = d / "sv.times", d / "supervisord.conf", d / "sv.sock"
    conf.write_text(
        f"[unix_http_server]\nfile={sock}\n[supervisord]\nlogfile={d}/supervisord.log\npidfile={d}/sv.pid\n"
        f"childlogdir={d}\n[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
        f"[supervisorctl]\nserverurl=unix://{sock}\n"
        f"[program:crash]\ncommand=/bin/bash -c '{JOB.format(f=f).replace('%', '%%')}'\nautostart=true\nautorestart=true\n"
        f"startsecs=0\nstartretries=100000\nstdout_logfile={d}/crash.log\nredirect_stderr=true\n")
    subprocess.run([str(venv / "bin" / "supervisord"), "-c", str(conf)], check=True)
    try:
        return wait_gaps(f, n)
    finally:
        pid = int((d / "sv.pid").read_text())
        subprocess.run([str(venv / "bin" / "supervisorctl"), "-c", str(conf), "shutdown"], capture_output=True)
        _gone(pid)


def run_pm2(d: Path, pm2: Path, n: int) -> list[float]:
    f, eco = d / "pm2.times", d / "eco.json"
    env = dict(os.environ, PM2_HOME=str(d / "pm2home"))
    eco.write_text(json.dumps({"apps": [{
        "name": "crash", "script": "/bin/bash", "args": ["-c", JOB.format(f=f)], "interpreter": "none",
        "autorestart": True, "restart_delay": 0, "min_uptime": 0, "max_restarts": 100000,
        "out_file": str(d / "pm2-out.log"), "error_file": str(d / "pm2-err.log")}]}))
    subprocess.run([str(pm2), "start", str(eco)], env=env, capture_output=True, check=True)
    try:
        return wait_gaps(f, n)
    finally:
        subprocess.run([str(pm2), "kill"], env=env, capture_output=True)


def _gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.exists(f"/proc/{pid}"):
        os.kill(pid, signal.SIGKILL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crashes", type=int, default=15, help="restarts measured per tool and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--install-dir", help="reuse (or make) the peers' installation here")
    ap.add_argument("--gate", action="store_true",
                    help="also runward with a GPU (the nvidia-smi stand-in, free): the GPU gate's cost per restart")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rw-bench-sup-"))
    inst = Path(args.install_dir) if args.install_dir else scratch / "peers"
    venv, pm2 = install(inst)
    tools = ("runward", "supervisord", "pm2") + (("runward+gate",) if args.gate else ())
    got: dict[str, list[float]] = {t: [] for t in tools}
    try:
        for r in range(args.rounds):
            for tool in tools:
                d = scratch / f"{tool}-{r}"
                d.mkdir()
                fn = {"runward": lambda: run_runward(d, args.crashes),
                      "runward+gate": lambda: run_runward(d, args.crashes, gate=True),
                      "supervisord": lambda: run_supervisord(d, venv, args.crashes),
                      "pm2": lambda: run_pm2(d, pm2, args.crashes)}[tool]
                got[tool] += fn()
    finally:
        if not args.install_dir:
            shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    for k, v in got.items():
        print(f"{k:12s} crash -> next attempt alive: median {med[k] * 1000:7.1f} ms  "
              f"p90 {sorted(v)[int(len(v) * 0.9) - 1] * 1000:7.1f} ms  (n={len(v)})")
    peer = min(("supervisord", "pm2"), key=lambda k: med[k])
    print(f"runward / {peer} (the faster peer): {med['runward'] / med[peer]:.2f}x  (goal <= 1.0x)")
    if args.gate:
        print(f"the GPU gate (GPUs free, one stand-in nvidia-smi read): +{(med['runward+gate'] - med['runward']) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
