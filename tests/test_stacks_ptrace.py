"""`runward stacks` where ptrace is refused: a real job that made itself non-dumpable
(prctl PR_SET_DUMPABLE 0, as some hardened launchers do), read by its own unprivileged user,
so the kernel refuses py-spy's attach. The answer says so per process with the ptrace hint,
exit 1, never a traceback. Runs runward as `nobody` (setpriv), so it needs root here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers_stacks import SPY, needs_spy

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
PY = "/usr/bin/python3"  # nobody cannot run a python under /root (pyenv, the venv)

JOB = """\
import ctypes, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not traceable by its own user
def undumpable_waits():
    print("ready", flush=True)
    while True:
        time.sleep(0.5)
undumpable_waits()
"""


@needs_spy
def test_ptrace_refused_is_said_per_process_with_the_hint():
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(PY):
        pytest.skip("needs root, setpriv and /usr/bin/python3 (runward runs as nobody here)")
    d = Path(tempfile.mkdtemp(prefix="rw-stk-ptrace-"))
    try:
        (d / "bin").mkdir()
        shutil.copy(SPY, d / "bin" / "py-spy")  # where nobody can run it
        (d / "job.py").write_text(JOB)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(d)], check=True)
        os.chmod(d, 0o755)
        env = {"HOME": str(d), "PATH": f"{d}/bin:/usr/bin:/bin", "RUNWARD_HOME": f"{d}/home",
               "PYTHONPATH": str(ROOT / "src")}
        rw = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", PY, "-m", "runward"]
        name = f"stkpt{os.getpid()}"
        p = subprocess.run(rw + ["start", name, "--settle", "0.2", "--ready", "ready", "--", PY, str(d / "job.py")],
                           env=env, capture_output=True, text=True, timeout=60, cwd=d)
        if p.returncode != 0 and "No module named" in p.stderr:
            pytest.skip(f"{PY} lacks a module runward's CLI needs: {p.stderr.strip().splitlines()[-1]}")
        assert p.returncode == 0, p.stdout + p.stderr
        try:
            p = subprocess.run(rw + ["stacks", name, "--json"], env=env, capture_output=True, text=True,
                               timeout=60, cwd=d)
            assert p.returncode == 1, p.stdout + p.stderr
            assert "Traceback" not in p.stderr, p.stderr
            res = json.loads(p.stdout)["result"]
            assert not res["ok"] and res["error"] == "ptrace denied", res
            [proc] = res["procs"]
            assert proc["error"] == "ptrace denied" and "non-dumpable process: as root" in proc["hint"], proc
            assert res["summary"].startswith("stacks not read: ptrace denied"), res["summary"]
            human = subprocess.run(rw + ["stacks", name], env=env, capture_output=True, text=True, timeout=60, cwd=d)
            assert human.returncode == 1 and "ptrace denied" in human.stdout, human.stdout + human.stderr
        finally:
            subprocess.run(rw + ["stop", name, "--grace", "2"], env=env, capture_output=True, timeout=60, cwd=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
