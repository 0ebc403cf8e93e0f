#!/usr/bin/env python3
"""A multi-node run's start and stop (docs/multinode.md), measured in one run, interleaved:

- start + stop of a 4-node run against the same of a 1-node run (goal: <= 1.3x each): the
  nodes are reached in parallel, so four cost about what one does;
- against the shell way: one `ssh HOST 'nohup CMD & echo $!'` per node in sequence to start,
  one `ssh HOST kill PID` per node to stop (nothing verified, no settle);
- two floors: `ssh HOST true` on 4 hosts at once against 1, fresh connections and through
  open control masters (runward's way): on the testbed the 4 "hosts" share this machine's
  cores, so what one session costs there (the login shell, root's rc files) is paid 4 times
  on the same cores, which 4 real machines would not.

Over the testbed's rwN-slow hosts (20 ms each way, a delaying relay in front of a real sshd),
as root after `scripts/testbed up`. runward's start includes its settle (--settle, 0.2 s
here) and verifies each node alive; its stop verifies each node dead.

Usage: sudo python3 bench/multinode.py [--rounds N] [--settle S] [--fast]   (--fast: rwN)
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import testbed  # noqa: E402


def timed(argv, env, cwd) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{p.stdout}\n{p.stderr}")
    return dt


def shell_way(tb, hosts, env) -> tuple[float, float]:
    """One ssh per node in sequence, as a script would do it."""
    base = ["ssh", "-F", tb["ssh_config"]]
    t0 = time.perf_counter()
    pids = [subprocess.run(base + [h, "nohup sleep 300 >/dev/null 2>&1 & echo $!"], env=env, capture_output=True,
                           text=True, check=True).stdout.strip() for h in hosts]
    t1 = time.perf_counter()
    for h, pid in zip(hosts, pids):
        subprocess.run(base + [h, "kill " + pid], env=env, capture_output=True, check=True)
    return t1 - t0, time.perf_counter() - t1


def parallel_ssh(tb, hosts, env, sockdir=None) -> float:
    """The floor: `ssh HOST true` on every host at once (what 4 parallel calls cost on this
    machine, where the 4 hosts share its cores and each session runs root's .bashrc). With
    SOCKDIR, through an open control master each (as runward's calls go): the floor its start
    and stop face, each still paying the far side's session, login shell and rc files, but
    no key exchange."""
    opts = [] if sockdir is None else ["-o", "ControlMaster=auto", "-o", f"ControlPath={sockdir}/%C",
                                       "-o", "ControlPersist=60"]
    t0 = time.perf_counter()
    ps = [subprocess.Popen(["ssh", "-F", tb["ssh_config"], *opts, h, "true"], env=env) for h in hosts]
    for p in ps:
        p.wait()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", default="0.2")
    ap.add_argument("--fast", action="store_true", help="rw1..rw4 instead of the 20 ms rwN-slow hosts")
    a = ap.parse_args()
    tb = testbed.load()
    if tb is None:
        raise SystemExit("needs root and `scripts/testbed up`")
    hosts = [f"rw{i}" if a.fast else f"rw{i}-slow" for i in range(1, 5)]
    scratch = Path(tempfile.mkdtemp(prefix="rw-bench-mn-"))
    toml = []
    for i, h in enumerate(hosts):
        toml += [f"[targets.n{i}]", f'on = "ssh://{h}"', f'home = "{scratch}/node{i}"', 'python = "/usr/bin/python3"', ""]
    (scratch / "runward.toml").write_text("\n".join(toml))
    env = dict(os.environ, RUNWARD_HOME=str(scratch / "home"), PYTHONPATH=str(ROOT / "src"),
               RUNWARD_SSH_CONFIG=tb["ssh_config"])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    rw = [sys.executable, "-m", "runward"]
    one, four, shell = {"start": [], "stop": []}, {"start": [], "stop": []}, {"start": [], "stop": []}
    floor = {"one": [], "four": []}
    warm = {"one": [], "four": []}
    sockdir = tempfile.mkdtemp(prefix="rwbm-")  # short: a control socket path fits 108 bytes
    try:
        for r in range(a.rounds + 1):  # round 0 warms the control masters and the agents' caches
            for label, nodes, into in (("one", ["n0"], one), ("four", ["n0", "n1", "n2", "n3"], four)):
                on = [w for n in nodes for w in ("--on", n)]
                if len(nodes) == 1:
                    on = ["--on", nodes[0]]
                s = timed(rw + ["start", f"b{label}{r}", *on, "--settle", a.settle, "--", "sleep", "300"], env, scratch)
                t = timed(rw + ["stop", f"b{label}{r}", *on], env, scratch)
                if r:
                    into["start"].append(s)
                    into["stop"].append(t)
            s, t = shell_way(tb, hosts, env)
            p1, p4 = parallel_ssh(tb, hosts[:1], env), parallel_ssh(tb, hosts, env)
            w1, w4 = parallel_ssh(tb, hosts[:1], env, sockdir), parallel_ssh(tb, hosts, env, sockdir)
            if r:
                warm["one"].append(w1)
                warm["four"].append(w4)
                shell["start"].append(s)
                shell["stop"].append(t)
                floor["one"].append(p1)
                floor["four"].append(p4)
    finally:
        for h in hosts:
            subprocess.run(["ssh", "-F", tb["ssh_config"], "-o", f"ControlPath={sockdir}/%C", "-O", "exit", h],
                           env=env, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(sockdir, ignore_errors=True)
    med = {k: {v: statistics.median(d[v]) for v in d} for k, d in (("one", one), ("four", four), ("shell", shell))}
    print(f"hosts: {', '.join(hosts)}; {a.rounds} rounds; runward --settle {a.settle}; medians")
    for verb in ("start", "stop"):
        print(f"{verb:5}  4 nodes {med['four'][verb]:.3f}s  1 node {med['one'][verb]:.3f}s  "
              f"ratio {med['four'][verb] / med['one'][verb]:.2f}x (goal <= 1.3x)  |  shell way, 4 ssh in sequence "
              f"{med['shell'][verb]:.3f}s: runward/shell {med['four'][verb] / med['shell'][verb]:.2f}x")
    f1, f4 = statistics.median(floor["one"]), statistics.median(floor["four"])
    print(f"floor  `ssh HOST true` on 4 hosts at once {f4:.3f}s  on 1 {f1:.3f}s  ratio {f4 / f1:.2f}x "
          f"(the same cores serve every host here)")
    w1, w4 = statistics.median(warm["one"]), statistics.median(warm["four"])
    print(f"floor  the same through open control masters {w4:.3f}s  on 1 {w1:.3f}s  ratio {w4 / w1:.2f}x "
          f"(each session still runs the far login shell and its rc files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
