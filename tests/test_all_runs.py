"""start/stop/restart --all over the runs of runward.toml: two runs here and one over a real
ssh host of the testbed, in parallel, one result per run, and the exit code rule."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

import testbed
from conftest import alive
from runward.transport.fanout import worst_code


def _config(cli, tmp_path, far_home: str, extra: str = "") -> None:
    (tmp_path / "runward.toml").write_text(
        f'[targets.h1]\non = "ssh://rw1"\nhome = "{far_home}"\n\n'
        '[runs.a]\ncommand = ["sleep", "300"]\nsettle = 0.3\n\n'
        '[runs.b]\nsh = "echo b-here; exec sleep 300"\nsettle = 0.3\n\n'
        '[runs.far]\non = "h1"\ncommand = ["sleep", "300"]\nsettle = 0.3\n' + extra)


@pytest.fixture
def far(cli, tmp_path):
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    far_home = f"/tmp/rw-all-{uuid.uuid4().hex[:8]}"  # tmp_path's name repeats across sessions
    yield far_home
    cli.run("stop", "--all")  # whatever a failed assertion left running, here and on rw1
    shutil.rmtree(far_home, ignore_errors=True)


def test_start_restart_stop_all_local_and_over_ssh(cli, tmp_path, far):
    _config(cli, tmp_path, far)
    rc, doc = cli.json("start", "--all")
    assert rc == 0 and doc["ok"], doc
    runs = {r["name"]: r for r in doc["runs"]}
    assert list(runs) == ["a", "b", "far"] and all(r["ok"] for r in runs.values())
    assert runs["a"]["target"] == "local" and runs["far"]["target"] == "h1 (ssh://rw1)"
    # the test hosts share this machine's pid namespace: each job is seen here
    pids = {n: (r["result"]["pid"], r["result"]["start_time"]) for n, r in runs.items()}
    assert all(alive(*p) for p in pids.values())

    rc, doc = cli.json("restart", "--all")
    assert rc == 0, doc
    assert [(r["name"], r["result"]["attempt"]) for r in doc["runs"]] == [("a", 2), ("b", 2), ("far", 2)]
    assert not any(alive(*p) for p in pids.values())

    p = cli.run("stop", "--all")
    assert p.returncode == 0, p.stderr
    sections = [ln for ln in p.stdout.splitlines() if ln.startswith("== ")]
    assert sections == ["== a on local", "== b on local", "== far on h1 (ssh://rw1)"]
    for name in ("a", "b"):
        assert cli.status(name)["state"] == "exited"
    rc, doc = cli.json("status", "far", "--on", "h1")
    assert doc["result"]["runs"][0]["state"] == "exited"


def test_all_reports_each_run_and_exits_with_the_worst(cli, tmp_path, far):
    """One run exits at once (1), one target refuses connections (3): both are reported, the
    others started; 3 wins. stop --all then stops what runs and counts the never-started
    runs as stopped."""
    _config(cli, tmp_path, far, '\n[targets.nowhere]\non = "ssh://127.0.0.1:1"\n\n'
                                '[runs.dies]\nsh = "exit 7"\nsettle = 2\n\n'
                                '[runs.lost]\non = "nowhere"\ncommand = ["sleep", "300"]\n')
    rc, doc = cli.json("start", "--all")
    runs = {r["name"]: r for r in doc["runs"]}
    assert rc == 3 and not doc["ok"]
    assert [n for n, r in runs.items() if r["ok"]] == ["a", "b", "far"]
    assert runs["dies"]["error"]["type"] == "ExitedEarly" and runs["dies"]["result"]["exit"]["code"] == 7
    assert runs["lost"]["error"]["exit_code"] == 3
    rc, doc = cli.json("stop", "--all")
    runs = {r["name"]: r for r in doc["runs"]}
    assert rc == 3 and [n for n, r in runs.items() if not r["ok"]] == ["lost"]
    assert runs["a"]["result"]["verified_dead"] and not runs["a"]["result"]["already_stopped"]


def test_all_needs_runs_and_takes_no_name_target_or_command(cli, tmp_path):
    rc, doc = cli.json("stop", "--all")
    assert rc == 2 and "no [runs]" in doc["error"]["message"]
    (tmp_path / "runward.toml").write_text('[runs.a]\ncommand = ["sleep", "300"]\n')
    for args in (["stop", "a", "--all"], ["start", "--all", "--on", "local"], ["start", "--all", "--", "sleep", "1"],
                 ["restart"]):
        rc, doc = cli.json(*args)
        assert rc == 2 and doc["error"]["type"] == "BadInput", (args, doc)


@pytest.mark.parametrize("codes, worst", [
    ([], 0), ([4, 2], 2), ([1, 2, 4], 1), ([1, 3], 3), ([3, 5, 1], 5), ([4], 4)])
def test_the_worst_code_rule(codes, worst):
    results = [{"ok": True}] + [{"ok": False, "error": {"exit_code": c}} for c in codes]
    assert worst_code(results) == worst


def test_status_all_and_a_project_status_honour_runward_toml_ssh_config(cli, tmp_path):
    """[ssh] config in runward.toml, no RUNWARD_SSH_CONFIG: the testbed's host names resolve
    only through that file, so a target reached without it fails (exit 3)."""
    tb = testbed.require("ssh")
    cli.env.pop("RUNWARD_SSH_CONFIG", None)
    (tmp_path / "runward.toml").write_text(
        f'[ssh]\nconfig = "{tb["ssh_config"]}"\n\n[targets.h1]\non = "ssh://rw1"\n\n'
        '[runs.far]\non = "h1"\ncommand = ["sleep", "300"]\n')
    for args in (("status", "--all"), ("status",), ("gpus", "--all")):
        rc, doc = cli.json(*args)
        assert rc in (0, 5) and "Unreachable" not in json.dumps(doc), (args, doc)
        assert "rw1" in json.dumps(doc), (args, doc)
