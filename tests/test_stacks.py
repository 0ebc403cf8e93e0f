"""`stacks`: the Python stacks of a run's processes, read by py-spy, grouped by frame and named
by rank (agent/health/stacks.py, docs/diagnosis.md). Real processes, real py-spy, real torchrun."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_for
from helpers_stacks import BLOCKED, _remote, _start, _stop, needs_spy

ROOT = Path(__file__).resolve().parents[1]

CAPTURE = """\
import json, os, sys
from runward.agent.health import stacks
from runward.agent.core.store import Home, RunStore
store = RunStore(Home(), sys.argv[1])
rec = store.latest()
doc = stacks.capture(rec, timeout=10.0, home_dir=Home().path)
doc["kept"] = stacks.keep(rec, doc)
print(json.dumps(doc))
"""


def capture(cli, name, python=sys.executable, path=None) -> dict:
    env = dict(cli.env)
    if path is not None:
        env["PATH"] = path
    p = subprocess.run([python, "-c", CAPTURE, name], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@needs_spy
def test_a_blocked_python_job_shows_its_function(cli, tmp_path):
    (tmp_path / "blocked.py").write_text(BLOCKED)
    name = f"stk{os.getpid()}"
    _start(cli, tmp_path, name, sys.executable, str(tmp_path / "blocked.py"))
    try:
        doc = capture(cli, name)
        assert doc["ok"], doc
        assert doc["procs"][0]["frame"]["name"] == "wait_for_the_lock_forever", doc
        assert "in wait_for_the_lock_forever (blocked.py:5)" in doc["summary"], doc["summary"]
        assert os.path.dirname(doc["kept"]).endswith(os.path.join(name, "stacks")), doc["kept"]
        assert json.loads(Path(doc["kept"]).read_text())["summary"] == doc["summary"]
    finally:
        cli.run("stop", name, "--grace", "2")


def test_py_spy_missing_says_how_to_install_it(cli, tmp_path):
    (tmp_path / "blocked.py").write_text(BLOCKED)
    name = f"stkmiss{os.getpid()}"
    python = "/usr/bin/python3"
    if not os.path.exists(python) or os.path.exists("/usr/bin/py-spy") or os.path.exists("/usr/local/bin/py-spy"):
        pytest.skip("needs a system python3 with no py-spy beside it or on PATH")
    _start(cli, tmp_path, name, sys.executable, str(tmp_path / "blocked.py"))
    try:
        doc = capture(cli, name, python=python, path="/usr/bin:/bin")
        assert not doc["ok"] and doc["error"] == "py-spy missing", doc
        assert "pip install py-spy" in doc["hint"] and "--bring-py-spy" in doc["hint"], doc
        assert doc["summary"].startswith("stacks not read: py-spy missing"), doc
    finally:
        cli.run("stop", name, "--grace", "2")


def _torchrun():
    here = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return here if os.path.exists(here) else shutil.which("torchrun")


HANG_JOB = """\
import time, torch, torch.distributed as dist
from datetime import timedelta
dist.init_process_group("gloo", timeout=timedelta(seconds=600))
rank, t = dist.get_rank(), torch.ones(4)

def slow_step():
    while True:
        time.sleep(0.5)

for step in range(10000):
    if rank == 1 and step == 3:
        print("ready", flush=True)
        slow_step()
    dist.all_reduce(t)
"""


@needs_spy
def test_torchrun_rank_0_in_all_reduce_and_rank_1_asleep(cli, tmp_path):
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    (tmp_path / "hang.py").write_text(HANG_JOB)
    name = f"stktr{os.getpid()}"
    _start(cli, tmp_path, name, torchrun, "--standalone", "--nproc_per_node=2", str(tmp_path / "hang.py"))
    try:
        def both():
            d = capture(cli, name)
            ranks = {p.get("rank"): p.get("frame") or {} for p in d["procs"]}
            ok = ranks.get(0, {}).get("name") == "all_reduce" and ranks.get(1, {}).get("name") == "slow_step"
            return d if ok else None
        doc = wait_for(both, 60, "rank 0 in all_reduce and rank 1 in slow_step")
        s = doc["summary"]
        assert "rank 0 in all_reduce (" in s and "rank 1 in slow_step (hang.py:" in s, s
        assert "1 other process" in s, s  # torchrun's agent: no RANK in its environment
    finally:
        cli.run("stop", name, "--grace", "5", "--signal", "INT")


@needs_spy
def test_the_stacks_verb_names_the_frame_and_keeps_the_capture(cli, tmp_path):
    (tmp_path / "blocked.py").write_text(BLOCKED)
    name = f"stkcli{os.getpid()}"
    _start(cli, tmp_path, name, sys.executable, str(tmp_path / "blocked.py"))
    try:
        rc, doc = cli.json("stacks", name)
        assert rc == 0, doc
        assert "in wait_for_the_lock_forever (blocked.py:5)" in doc["result"]["summary"], doc
        assert Path(doc["result"]["kept"]).is_file(), doc
        st = cli.status(name)
        assert st["stacks"]["summary"] == doc["result"]["summary"], st
        shown = cli.run("status", name).stdout
        assert " ago): 1 other process (python" in shown and "wait_for_the_lock_forever (blocked.py:5)" in shown, shown
        human = cli.run("stacks", name).stdout
        assert "wait_for_the_lock_forever (blocked.py:5)" in human, human
        api = subprocess.run([sys.executable, "-c", "import runward, sys; r = runward.stacks(sys.argv[1]); "
                              "print(r.exit_code); print(r.to_json()['result']['summary'])", name],
                             env=cli.env, capture_output=True, text=True, timeout=60)
        assert api.stdout.splitlines()[0] == "0" and "wait_for_the_lock_forever" in api.stdout, api
    finally:
        cli.run("stop", name, "--grace", "2")
    p = cli.run("stacks", f"nosuch{os.getpid()}")
    assert p.returncode == 4, (p.returncode, p.stdout, p.stderr)


@needs_spy
def test_over_ssh_missing_then_brought_with_its_hash_checked(cli, tmp_path):
    on = "ssh://rw1"
    name = _remote(cli, tmp_path, "ssh", on, "ssh")
    try:
        rc, doc = cli.json("stacks", name, "--on", "t")
        if shutil.which("py-spy", path="/usr/local/bin:/usr/bin:/bin"):
            pytest.skip("the testbed host has a py-spy of its own: nothing to bring")
        assert rc == 1 and doc["result"]["error"] == "py-spy missing", doc
        assert "pip install py-spy" in doc["result"]["hint"], doc
        rc, doc = cli.json("stacks", name, "--on", "t", "--bring-py-spy")
        assert rc == 0, doc
        assert "wait_for_the_lock_forever (<string>:5)" in doc["result"]["summary"], doc
        res = doc["result"]
        # pushed, then run only after the agent checked its sha256
        assert res["py_spy"] == res["brought"] == f"/tmp/rwstk-ssh-{os.getpid()}/tools/py-spy", res
        # the kept copy changed behind runward's back (rw1 shares this filesystem): never run
        with open(res["brought"], "ab") as f:
            f.write(b"\0")
        rc, doc = cli.json("stacks", name, "--on", "t")
        assert rc == 1 and doc["result"]["error"] == "py-spy missing", doc
        rc, doc = cli.json("stacks", name, "--on", "t", "--bring-py-spy")  # pushed again, checked again
        assert rc == 0 and doc["result"]["brought"], doc
    finally:
        _stop(cli, name, on)


@needs_spy
def test_in_a_podman_container_over_ssh(cli, tmp_path):
    on = "ssh://rw1/podman:rwpod"
    name = _remote(cli, tmp_path, "podman", on, "pod")
    try:
        rc, doc = cli.json("stacks", name, "--on", "t", "--bring-py-spy")
        res = doc.get("result") or {}
        # root in the container reads its own processes: ptrace of the same user needs no
        # CAP_SYS_PTRACE (podman's default seccomp allows it); py-spy is brought in
        assert rc == 0, doc
        assert "wait_for_the_lock_forever (<string>:5)" in res["summary"], doc
        assert res["brought"] == f"/tmp/rwstk-pod-{os.getpid()}/tools/py-spy" == res["py_spy"], res
    finally:
        _stop(cli, name, on)
