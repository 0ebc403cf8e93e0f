"""The Python API (`import runward`, issue 15): the seed story in ssh://rw1/pct:200 through
runward.push/start/status/watch/restart/stop in this process, its documents the CLI's, the
stable names, and docs/api.md's example run as written."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

import testbed
from conftest import EXAMPLE, ROOT

CT = "ssh://rw1/pct:200"


@pytest.fixture
def on_ct(tmp_path, monkeypatch):
    tb = testbed.require("ssh")
    testbed.require("pct")
    for k, v in testbed.env(tb, dict(RUNWARD_HOME=str(tmp_path / "home"), RUNWARD_SSH_CONFIG=tb["ssh_config"],
                                     PATH=os.environ["PATH"])).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RUNWARD_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no runward.toml here or above: targets are strings
    tag = "api%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    yield tag, f"/root/rw-{tag}/train.py"
    import runward
    runward.stop(tag, on=CT, grace=1)
    subprocess.run([sys.executable, "-m", "runward", "rm", tag, "--logs", "--on", CT], capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=120)
    subprocess.run(["pct", "exec", "200", "--", "rm", "-rf", f"/root/rw-{tag}"], capture_output=True, timeout=60)


def _cli(*args) -> dict:
    p = subprocess.run([sys.executable, "-m", "runward", *args, "--json"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=120)
    return json.loads(p.stdout)


def test_the_seed_story_through_the_python_api(on_ct):
    import runward
    tag, remote = on_ct
    ct = runward.Target(CT)
    res = runward.push({str(EXAMPLE): remote}, on=ct).check()
    assert res.result["files"][0]["sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()

    st = runward.start(tag, ["python3", remote], on=ct, settle=1.0, env={"TRAIN_STEP_SECONDS": "0.1"})
    assert isinstance(st, runward.StartResult) and st.ok, st.to_json()
    assert st.attempt == 1 and isinstance(st.pid, int) and "alive_after_settle" in st.verified

    s = runward.status(tag, on=ct)
    assert s.ok and s.runs[0]["state"] == "running" and s.runs[0]["pid"] == st.pid
    cli = _cli("status", tag, "--on", CT)
    assert s.to_json()["result"]["runs"][0].keys() == cli["result"]["runs"][0].keys()

    w = runward.watch(tag, on=ct, for_s=2)
    assert w.ok and w.healthy, w.to_json()

    r = runward.restart(tag, on=ct, env={"TRAIN_NAN_AT": "8"}, settle=0.5)
    assert r.ok and r.attempt == 2, r.to_json()

    w = runward.watch(tag, on=ct, for_s=60)
    assert not w.ok and w.exit_code == 1 and w.alert["kind"] == "nan", w.to_json()
    with pytest.raises(runward.Failed) as e:
        w.check()
    assert e.value.result is w and "Alert" in str(e.value)

    stop = runward.stop(tag, on=ct, grace=10)
    assert stop.ok and stop.verified_dead and not stop.survivors
    assert runward.ps(remote, on=ct).result["processes"] == []
    assert runward.status(tag, on=ct).runs[0]["state"] != "running"


def test_a_bad_target_is_the_clis_error_document(on_ct):
    import runward
    res = runward.status(on="ssh://rw1/pct:201")
    assert not res.ok and res.exit_code == 3 and res.error["hop"] == "pct:201"
    assert res.to_json() == _cli("status", "--on", "ssh://rw1/pct:201")
    bad = runward.start("x", ["true"], on="local", settle=-1)
    # start is an operation (issue 27): its declared options are checked without argv, as stop's
    assert bad.exit_code == 2 and bad.error["type"] == "BadInput" and "invalid settle -1" in bad.error["message"] \
        and "--settle" in bad.error["hint"], bad.to_json()


def test_stable_names_are_lazy_and_never_a_submodule():
    import runward
    for name in runward.__all__:
        assert not (ROOT / "src" / "runward" / name).exists() and not (ROOT / "src" / "runward" / f"{name}.py").exists()
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import runward"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=60)
    mods = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "runward" in mods and not {m for m in mods if m.startswith("runward.")}, mods  # light until used
    with pytest.raises(AttributeError):
        runward.no_such_thing  # noqa: B018


def test_the_example_in_docs_api_md_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S).group(1)
    (tmp_path / "example.py").write_text(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), RUNWARD_HOME=str(tmp_path / "home"),
               RUNWARD_EXAMPLE=str(EXAMPLE))
    env.pop("RUNWARD_CONFIG", None)
    p = subprocess.run([sys.executable, str(tmp_path / "example.py")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "started attempt 1" in p.stdout and "state: running" in p.stdout and "alert: nan" in p.stdout
    assert p.stdout.rstrip().endswith("True")  # verified dead


def test_logs_pages_by_offset_and_says_a_rewritten_log(cli):
    """`logs --offset` (the MCP tool's and runward.logs' bounded read): complete lines after
    the offset, the offset to go on from, `more` while lines remain."""
    rc, doc = cli.json("start", "pg", "--settle", "0.3", "--sh", "for i in $(seq 1 9); do echo line $i; done")
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    rc, doc = cli.json("logs", "pg", "-n", "1")
    end = doc["result"]["offset"]
    log = doc["result"]["log"]
    header = len(open(log, "rb").readline())
    rc, page = cli.json("logs", "pg", "--offset", str(header), "-n", "4")
    assert rc == 0 and page["result"]["lines"] == [f"line {i}" for i in range(1, 5)] and page["result"]["more"]
    rc, rest = cli.json("logs", "pg", "--offset", str(page["result"]["offset"]), "-n", "100")
    assert rest["result"]["lines"] == [f"line {i}" for i in range(5, 10)] and not rest["result"]["more"]
    assert rest["result"]["offset"] == end
    rc, again = cli.json("logs", "pg", "--offset", str(end + 100))
    assert again["result"]["restarted"] and again["result"]["lines"][-1] == "line 9"
    rc, doc = cli.json("logs", "pg", "--offset", "0", "-f")
    assert rc == 2 and "--offset" in doc["error"]["message"]


def test_no_other_verb_imports_the_sdk(tmp_path):
    """The base install stays light: `--help` and a verb never load mcp (or pydantic)."""
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    for argv in (["--help"], ["status", "--json"], ["mcp", "--help"]):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "runward", *argv], env=env, capture_output=True,
                           text=True, timeout=60)
        mods = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
        assert "runward.cli" in mods, p.stderr[-500:]
        assert not {m for m in mods if m.split(".")[0] in ("mcp", "pydantic", "anyio")}, argv
        assert "runward.library" not in mods and "runward.mcp.server" not in mods, argv


def test_a_wrong_mcp_section_is_bad_config(cli):
    (cli.cwd / "runward.toml").write_text('[mcp]\nalow = ["exec"]\n')
    rc, doc = cli.json("status")
    assert rc == 2 and "[mcp] unknown key(s) alow" in doc["error"]["message"], doc
    (cli.cwd / "runward.toml").write_text('[mcp]\nallow = "exec"\ntargets = [1]\n')
    rc, doc = cli.json("status")
    assert rc == 2 and "[mcp] targets must be a list of strings" in doc["error"]["message"], doc


def test_parallel_keeps_order_bounds_threads_and_raises_after_all_ended():
    """transport.fanout.parallel (fan-out over hosts and runs): results in the order given, at most LIMIT
    at once, and an item's failure raised only once every other item ran to its end."""
    import threading
    import time

    from runward.transport.fanout import parallel
    live, most, lock, ended = [0], [0], threading.Lock(), []

    def fn(x):
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        if x == 3:
            raise ValueError("item 3")
        ended.append(x)
        return x * 10
    assert parallel(fn, [0, 1, 2, 4, 5, 6], limit=3) == [0, 10, 20, 40, 50, 60] and most[0] == 3
    ended.clear()
    try:
        parallel(fn, list(range(8)), limit=2)
        raise AssertionError("not raised")
    except ValueError as e:
        assert str(e) == "item 3" and sorted(ended) == [0, 1, 2, 4, 5, 6, 7]
