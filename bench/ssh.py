#!/usr/bin/env python3
"""runward over ssh with 20 ms of delay each way (the testbed's rwN-slow hosts: a delaying
TCP relay in front of a real sshd; the kernel here has no netem), against plain OpenSSH
measured in the same run, interleaved round by round.

Goals (issue: targets):
  status on one run, warm           <= 1.3x a multiplexed `ssh host true`
  the cold first operation          <= 1.3x a cold `ssh host true`
  status --all over 8 hosts (warm)  <= 1.5x status on one host

Needs root and `scripts/testbed up`. Usage: python bench/ssh.py [--rounds N]
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


def t(argv, env, ok=(0,)):
    s = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    d = time.perf_counter() - s
    if p.returncode not in ok:
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stderr.decode()[-400:]}")
    return d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    tbj = TB / "testbed.json"
    if not tbj.exists():
        print("needs the testbed: sudo python3 scripts/testbed up")
        return 2
    tb = json.loads(tbj.read_text())
    cfg = tb["ssh_config"]
    scratch = Path(tempfile.mkdtemp(prefix="rwb-"))
    remote_home = f"/tmp/rwb-remote-{os.getpid()}"
    (scratch / "runward.toml").write_text("".join(
        f'[targets.h{i}]\non = "ssh://rw{i}-slow"\nhome = "{remote_home}"\npython = "/usr/bin/python3"\n'
        for i in range(1, 9)))
    base = dict(os.environ, RUNWARD_SSH_CONFIG=cfg, PYTHONPATH=str(ROOT / "src"),
                RUNWARD_CONFIG=str(scratch / "runward.toml"))
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    env = dict(base, RUNWARD_HOME=str(scratch / "home"))
    # the console script, as users run it (as bench/startup.py); `python -m runward` where
    # it is not installed
    script = Path(sys.executable).with_name("runward")
    rw = [str(script)] if script.exists() else [sys.executable, "-m", "runward"]
    t(rw + ["start", "b1", "--on", "h1", "--settle", "0.2", "--", "sleep", "600"], env)
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.update(env)
    from runward.transport.agentcall import control_dir
    ctl = control_dir()
    mux = ["ssh", "-F", cfg, "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", f"ControlPath={ctl}/%C",
           "-o", "ControlPersist=300", "rw1-slow", "true"]
    t(mux, env)
    muxes = [mux[:-2] + [f"rw{i}-slow", "true"] for i in range(1, 9)]

    def par(argvs):
        """All at once, as the shell way's `for h in ...; do ssh $h true & done; wait`."""
        s = time.perf_counter()
        procs = [subprocess.Popen(a, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for a in argvs]
        if any(p.wait() for p in procs):
            raise SystemExit("a parallel ssh failed")
        return time.perf_counter() - s

    par(muxes)
    # warm, as a person polling is: the first call starts the resident (the ordinary way), the
    # second reaches it through the master's forward and hands its connection to a relay
    for _ in range(2):
        t(rw + ["status", "b1", "--on", "h1"], env)
        t(rw + ["status", "--all"], env)
    warm = {"mux ssh true": [], "status (1 run, warm)": [], "status --all (8 hosts)": [],
            "mux ssh true, 8 hosts": []}
    cold = {"cold ssh true": [], "cold status": []}
    for i in range(a.rounds):
        warm["mux ssh true"].append(t(mux, env))
        warm["status (1 run, warm)"].append(t(rw + ["status", "b1", "--on", "h1"], env))
        warm["status --all (8 hosts)"].append(t(rw + ["status", "--all"], env))
        warm["mux ssh true, 8 hosts"].append(par(muxes))
        cold["cold ssh true"].append(t(["ssh", "-F", cfg, "-o", "BatchMode=yes", "-o", "ControlPath=none",
                                        "rw1-slow", "true"], env))
        # a fresh home: no control socket, no agent code cache on the far side is reused?
        # (the far side's cache lives in the remote home: keep it, a first op on a known host)
        cenv = dict(base, RUNWARD_HOME=str(scratch / f"cold{i}"))
        cold["cold status"].append(t(rw + ["status", "--on", "h1"], cenv))
        # close that master so the next cold round is cold too
        os.environ["RUNWARD_HOME"] = cenv["RUNWARD_HOME"]
        from runward.targets import parse_target
        from runward.transport.agentcall import ssh_base
        os.environ["RUNWARD_SSH_CONFIG"] = cfg  # the socket's name, as runward gives it (targets/ssh.py)
        subprocess.run(parse_target("ssh://rw1-slow").hops[0].ssh_argv(ssh_base(), ["-O", "exit"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["RUNWARD_HOME"] = env["RUNWARD_HOME"]
    t(rw + ["stop", "b1", "--on", "h1"], env)
    subprocess.run(["ssh", "-F", cfg, "rw1", "rm", "-rf", remote_home], stdout=subprocess.DEVNULL)
    med = {k: statistics.median(v) for d in (warm, cold) for k, v in d.items()}
    spread = {k: statistics.quantiles(v, n=10) for d in (warm, cold) for k, v in d.items()}
    print(f"delay: {tb.get('delay_ms_each_way')} ms each way; rounds: {a.rounds}")
    print(f"{'case':<26} {'median ms':>10} {'p10-p90 ms':>16}")
    for k in med:
        print(f"{k:<26} {med[k]*1000:>10.1f} {spread[k][0]*1000:>7.1f}-{spread[k][-1]*1000:<8.1f}")
    rows = [("status warm / mux ssh true", med["status (1 run, warm)"] / med["mux ssh true"], 1.3),
            ("cold status / cold ssh true", med["cold status"] / med["cold ssh true"], 1.3),
            ("status --all 8 / status 1", med["status --all (8 hosts)"] / med["status (1 run, warm)"], 1.5)]
    ok = True
    for name, r, goal in rows:
        ok &= r <= goal
        print(f"{name:<30} ratio {r:5.2f}  goal <= {goal}  {'ok' if r <= goal else 'MISSED'}")
    # The same fan-out for plain ssh, as a floor: the testbed's hosts share this machine's
    # cores, so 8 far sides at once cost more than one even for `true`.
    print(f"{'peer: ssh true 8 hosts / 1':<30} ratio "
          f"{med['mux ssh true, 8 hosts'] / med['mux ssh true']:5.2f}  (no goal: the testbed's own floor)")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
