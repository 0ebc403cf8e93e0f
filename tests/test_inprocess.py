"""The CLI's local status is answered by the agent's code in the CLI's own process
(transport/inprocess.py, issue 27's start-up goal): no second Python starts, and the document is the
one a spawned agent gives."""

from __future__ import annotations

import json
import sys

from runward.agent.main import serve
from runward.transport import inprocess, agentcall as transport
from runward.targets import parse_target


def _agent_caches(home):
    d = home / "cache"
    return sorted(p.name for p in d.iterdir() if p.name.startswith("agent-")) if d.is_dir() else []


def test_the_clis_local_status_starts_no_agent_process(cli):
    rc, doc = cli.json("status")
    assert rc == 0 and doc["result"]["runs"] == [], doc
    # a spawned local agent's bootstrap compiles and caches the agent in the home on its first
    # call: nothing there means no agent process ran
    assert _agent_caches(cli.home) == []
    cli.json("ps", "no-such-process-pattern-inproc")  # not a status: spawned as before
    assert len(_agent_caches(cli.home)) == 1


def _status(name):
    res = transport.call(parse_target("local"), {"op": "status", "names": [name]})
    route = transport.LAST_ROUTE
    res.pop("time")
    return route, res


def test_in_process_and_spawned_agents_give_the_same_document(cli, monkeypatch):
    rc, doc = cli.json("start", "inproc-same", "--settle", "0.2", "--", sys.executable, "-c",
                       "import time; print('step 1 loss 2.0', flush=True); time.sleep(300)")
    assert rc == 0, doc
    monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
    monkeypatch.setattr(inprocess, "ON", [])
    spawned = _status("inproc-same")
    monkeypatch.setattr(inprocess, "ON", [serve])
    here = _status("inproc-same")
    monkeypatch.setattr(inprocess, "ON", [])
    again = _status("inproc-same")
    assert (spawned[0], here[0], again[0]) == ("exec", "in-process", "exec")
    # what moves between two reads of a live run (its age, its CPU) is left out of the comparison
    # (its tree's uptime, CPU and memory), and main_metrics' order follows the hash seed of
    # whichever process parsed the log (two spawned agents differ the same way)
    moving = {"uptime_s", "cpu_seconds", "rss_bytes", "pss_bytes"}

    def still(res):
        runs = [dict(run) for run in res["runs"]]
        for run in runs:
            run["tree"] = {k: v for k, v in run["tree"].items() if k not in moving}
            run["health"] = dict(run["health"], main_metrics=sorted(run["health"]["main_metrics"]))
        return runs
    if still(here[1]) not in (still(spawned[1]), still(again[1])):
        a, b = still(here[1])[0], still(spawned[1])[0]
        raise AssertionError({k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)})
    assert set(here[1]) == set(spawned[1])
    assert here[1]["runs"][0]["state"] == "running"
    cli.json("stop", "inproc-same")


_SPAWNED = ("import sys; from runward.transport import inprocess; from runward import cli; inprocess.wanted = lambda *a, **k: False; "
            "sys.exit(cli.main(sys.argv[1:]))")


def test_a_symlinked_home_is_left_as_a_spawned_agents_status_leaves_it(tmp_path):
    """RUNWARD_HOME a symlink to a directory of ours that others may read (a shared project
    directory): the CLI never narrows a home through a symlink (cache.make_private_dir), so a
    spawned status leaves the directory 0755 and makes no runs/ in it; the in-process status
    ran the agent's Home.ensure(), which chmod'ed the link's target to 0700 and made runs/."""
    import os
    import stat
    import subprocess

    from conftest import CLI
    seen = {}
    for route in ("in-process", "spawned"):
        real = tmp_path / route / "shared"
        real.mkdir(parents=True)
        real.chmod(0o755)
        c = CLI(tmp_path / route / "home", tmp_path / route)
        c.home.symlink_to(real)
        argv = c.argv("status", "--json") if route == "in-process" else \
            [sys.executable, "-c", _SPAWNED, "status", "--json"]
        p = subprocess.run(argv, cwd=c.cwd, env=c.env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        seen[route] = (oct(stat.S_IMODE(os.lstat(real).st_mode)), (real / "runs").exists())
    assert seen["spawned"] == ("0o755", False)  # the comparison sees what it guards
    assert seen["in-process"] == seen["spawned"]


def test_a_status_with_a_timeout_is_not_answered_in_process(cli, monkeypatch, tmp_path):
    """transport.call's timeout (an interrupted start's look at its run: api.status(...,
    timeout=5.0)) bounds a spawned agent, killed when it is up; the in-process route ignored
    it: a run on a GPU whose nvidia-smi hangs kept that look 15 s (the agent's own nvidia-smi
    limit), and a /proc read of a stuck process would keep it for ever."""
    import os
    import time
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    hang = tmp_path / "hang"
    smi = bin_ / "nvidia-smi"
    # 17 s: past the agent's own 15 s nvidia-smi limit; the agent killed at the timeout leaves
    # its nvidia-smi children running (a leak of the spawned route's, not this test's subject)
    smi.write_text(f'#!/bin/sh\n[ -e "{hang}" ] && exec sleep 17\n'
                   'case "$*" in *query-gpu*) echo "0, GPU-fake-0, Fake GPU, 10, 80000, 0";; esac\n')
    smi.chmod(0o755)
    path = f"{bin_}:{os.environ['PATH']}"
    cli.env["PATH"] = path
    rc, doc = cli.json("start", "inproc-timeout", "--gpus", "0", "--settle", "0.2", "--", "sleep", "120")
    assert rc == 0, doc
    try:
        hang.touch()
        monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
        monkeypatch.setenv("PATH", path)
        monkeypatch.setattr(inprocess, "ON", [serve])  # the CLI's process, its main thread
        t0 = time.monotonic()
        try:
            transport.call(parse_target("local"), {"op": "status", "names": ["inproc-timeout"]}, timeout=1.0)
        except Exception:
            pass  # the spawned agent killed at its timeout: the call says so
        took = time.monotonic() - t0
        assert took < 6, f"a status with timeout=1.0 took {took:.1f}s ({transport.LAST_ROUTE})"
    finally:
        hang.unlink()
        cli.json("stop", "inproc-timeout")


def test_a_module_of_the_agent_missing_is_a_bug_on_both_routes(tmp_path):
    """A module of the agent's own package missing (a half-copied install): the spawned agent,
    where the package is runward_agent, calls it a bug (AgentError with its traceback); the
    in-process one, where it is runward.agent, said 'python3 on the target lacks the standard
    module runward.agent' with apt-get install python3 for a hint (HopFailed)."""
    import os
    import shutil
    import subprocess
    from pathlib import Path
    src = Path(inprocess.__file__).resolve().parent.parent.parent
    copy = tmp_path / "src"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "runward" / "agent" / "health" / "stall.py").unlink()  # status imports it for a live run's stall
    home = tmp_path / "home"
    env = dict(os.environ, PYTHONPATH=str(copy), RUNWARD_HOME=str(home))
    env.pop("RUNWARD_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "runward", "start", "inproc-half", "--settle", "0.2", "--json",
                        "--", "sleep", "60"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        got = {}
        for route, argv in (("in-process", [sys.executable, "-m", "runward"]),
                            ("spawned", [sys.executable, "-c", _SPAWNED])):
            p = subprocess.run([*argv, "status", "inproc-half", "--json"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
            err = json.loads(p.stdout)["error"]
            got[route] = (p.returncode, err["type"], "lacks the standard module" in err["message"])
        assert got["spawned"] == (3, "AgentError", False), got
        assert got["in-process"] == got["spawned"]
    finally:
        subprocess.run([sys.executable, "-m", "runward", "stop", "inproc-half"], env=env, cwd=tmp_path,
                       capture_output=True, timeout=120)
