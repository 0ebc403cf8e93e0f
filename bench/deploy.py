#!/usr/bin/env python3
"""runward push against rsync and scp over the testbed's rw1-slow (20 ms each way: a
delaying relay in front of a real sshd), measured in the same run, interleaved round by
round. rsync and scp get the same warm, multiplexed ssh connection runward keeps (its control
master), so the ratios compare the copying, not ssh's handshake.

Goals (issue 18):
  no-op redeploy of a 2,000-file tree   <= 1.2x `rsync -ac`
  first push of that tree               <= 1.5x `rsync -a`
  one 1 GiB file                        <= 1.2x `scp`

Needs root, rsync, and `scripts/testbed up`.
Usage: python bench/deploy.py [--rounds N] [--files 2000] [--big-mib 1024] [--host rw1-slow]
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


def t(argv, env, cwd=None):
    s = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    d = time.perf_counter() - s
    if p.returncode:
        raise SystemExit(f"{argv[:6]} failed ({p.returncode}): {p.stderr.decode()[-600:]}")
    return d


def make_tree(root: Path, n: int) -> None:
    """n files of 1-16 KiB in n/50 directories, as a code tree with its configs."""
    for i in range(n):
        d = root / f"pkg{i // 50:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i:04d}.py").write_bytes(os.urandom(1024 * (1 + i % 16)))


def make_big(path: Path, mib: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(mib):
            f.write(block[i % 7:] + block[:i % 7])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--host", default="rw1-slow")
    a = ap.parse_args()
    if not (TB / "testbed.json").exists() or not shutil.which("rsync"):
        print("needs the testbed (sudo scripts/testbed up) and rsync (scripts/ci-install.sh)")
        return 2
    tb = json.loads((TB / "testbed.json").read_text())
    cfg = tb["ssh_config"]
    scratch = Path(tempfile.mkdtemp(prefix="rwdeploy-"))
    far = Path(f"/tmp/rwdeploy-far-{os.getpid()}")  # the test hosts share this filesystem
    far.mkdir()
    (scratch / "runward.toml").write_text(
        f'[targets.b]\non = "ssh://{a.host}"\nhome = "{far}/home"\npython = "/usr/bin/python3"\n')
    env = dict(os.environ, RUNWARD_SSH_CONFIG=cfg, PYTHONPATH=str(ROOT / "src"),
               RUNWARD_CONFIG=str(scratch / "runward.toml"), RUNWARD_HOME=str(scratch / "home"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    script = Path(sys.executable).with_name("runward")
    rw = [str(script)] if script.exists() else [sys.executable, "-m", "runward"]
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.update(env)
    from runward.transport.agentcall import control_dir
    ssh = f"ssh -F {cfg} -o BatchMode=yes -o ControlMaster=auto -o ControlPath={control_dir()}/%C -o ControlPersist=300"
    tree, big = scratch / "tree", scratch / "big.bin"
    make_tree(tree, a.files)
    make_big(big, a.big_mib)
    t(rw + ["status", "--on", "b", "--json"], env)  # the control master and the cached agent, warm
    t(ssh.split() + [a.host, "true"], env)
    res: dict[str, list[float]] = {k: [] for k in ("rw_first", "rsync_a", "rw_noop", "rsync_ac", "rw_big", "scp")}
    for r in range(a.rounds):
        d = far / f"r{r}"
        res["rw_first"].append(t(rw + ["push", "--on", "b", "--json", f"{tree}:{d}/rw"], env))
        res["rsync_a"].append(t(["rsync", "-a", "-e", ssh, f"{tree}/", f"{a.host}:{d}/rs/"], env))
        res["rw_noop"].append(t(rw + ["push", "--on", "b", "--json", f"{tree}:{d}/rw"], env))
        res["rsync_ac"].append(t(["rsync", "-ac", "-e", ssh, f"{tree}/", f"{a.host}:{d}/rs/"], env))
        res["rw_big"].append(t(rw + ["push", "--on", "b", "--json", f"{big}:{d}/big-rw.bin"], env))
        res["scp"].append(t(["scp", "-q", "-o", f"ControlPath={control_dir()}/%C", "-F", cfg, str(big),
                             f"{a.host}:{d}/big-scp.bin"], env))
        shutil.rmtree(d)
    shutil.rmtree(far, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{a.rounds} rounds, {a.files} files, {a.big_mib} MiB, over {a.host} (medians, s)")
    for what, ours, peer, goal in (("first push", "rw_first", "rsync_a", 1.5), ("no-op redeploy", "rw_noop", "rsync_ac", 1.2),
                                   ("one big file", "rw_big", "scp", 1.2)):
        ratio = med[ours] / med[peer]
        print(f"  {what:15s} runward {med[ours]:7.3f}  {peer:8s} {med[peer]:7.3f}  {ratio:5.2f}x  "
              f"(goal <= {goal}x: {'met' if ratio <= goal else 'MISSED'}); "
              f"min {min(res[ours]):.3f} / {min(res[peer]):.3f} = {min(res[ours]) / min(res[peer]):.2f}x")
    print("  rounds: " + "; ".join(f"{k} " + " ".join(f"{v:.2f}" for v in vs) for k, vs in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
