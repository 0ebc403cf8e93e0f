"""restart never stops a run it cannot restart, and never silently runs old code (issue 25,
items 10 and 11). Ground truth: the job's (pid, start time) in /proc, found by its marker, and
the sha256 of the deployed file where the job reads it (in the container for a container)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, marked, sha, wait_for
from podjob import JOB, only, pod, sha_in_pod  # noqa: F401 (pod: the fixture)


def _project(cli: CLI, name: str, dest: str, on: str | None = None, extra: str = "") -> None:
    """A run of runward.toml whose code is job.py, deployed to dest."""
    (cli.cwd / "job.py").write_text(JOB.format(v="v1"))
    (cli.cwd / "conf").mkdir(exist_ok=True)
    (cli.cwd / "conf" / "a.yaml").write_text("lr: 1\n")
    (cli.cwd / "runward.toml").write_text(
        (cli.toml_head if hasattr(cli, "toml_head") else "")
        + f'[runs.{name}]\n' + (f'on = "{on}"\n' if on else "")
        + f'command = ["{sys.executable if on is None else "python3"}", "{dest}/job.py"]\nfiles = ["job.py:{dest}/job.py", "conf:{dest}/conf"]\n'
        f'settle = 0.3\n{extra}')


def _deploy_and_start(cli: CLI, name: str) -> tuple[int, int]:
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    return only(marked(f"{name}.{doc['result']['attempt']}"))


def _refused(cli: CLI, name: str, job: tuple[int, int], *args: str) -> dict:
    """restart NAME ARGS is bad input, and the job it would have stopped still runs, untouched."""
    before = cli.status(name)["attempt"]
    rc, doc = cli.json("restart", name, *args)
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert alive(*job), f"restart {args} refused with exit 2 but stopped the run first: {doc['error']}"
    assert cli.status(name)["attempt"] == before, "no new attempt may follow a refused restart"
    return doc["error"]


def test_restart_checks_every_local_input_before_it_stops_the_run(cli, tmp_path):
    name = f"rti{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "deployed"
    _project(cli, name, str(dest))
    (cli.cwd / "secret.env").write_text("TOKEN_A=one\n")
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name, "--env-file", "secret.env")
    assert rc == 0, doc
    job = only(marked(f"{name}.1"))
    toml = (cli.cwd / "runward.toml").read_text()

    # a file --deploy would send is gone
    (cli.cwd / "job.py").rename(cli.cwd / "job.py.away")
    err = _refused(cli, name, job, "--deploy")
    assert "job.py" in err["message"], err
    (cli.cwd / "job.py.away").rename(cli.cwd / "job.py")
    # a pushed directory is gone
    (cli.cwd / "conf").rename(cli.cwd / "conf.away")
    assert "conf" in _refused(cli, name, job, "--deploy")["message"]
    (cli.cwd / "conf.away").rename(cli.cwd / "conf")
    # env inputs: a missing --env-file, an unset --env NAME, the start's env file gone
    assert "nope.env" in _refused(cli, name, job, "--env-file", "nope.env")["message"]
    assert "RT_UNSET_VAR" in _refused(cli, name, job, "--env", "RT_UNSET_VAR")["message"]
    (cli.cwd / "secret.env").rename(cli.cwd / "secret.env.away")
    assert "secret.env" in _refused(cli, name, job)["message"]
    (cli.cwd / "secret.env.away").rename(cli.cwd / "secret.env")
    # runward.toml's run entry as the new attempt would take it, and restart's own flags
    for bad, word in (("settle = -1\n", "settle"), ('stop_signal = "TERMM"\n', "TERMM"),
                      ('ready = "step ("\n', "ready"), ('log_max = "2K"\nlog_keep = 0\n', "log_keep")):
        (cli.cwd / "runward.toml").write_text(toml.replace("settle = 0.3\n", bad if "settle" in bad else
                                                           "settle = 0.3\n" + bad))
        assert word in _refused(cli, name, job)["message"], bad
    (cli.cwd / "runward.toml").write_text(toml.replace(f'command = ["{sys.executable}", "{dest}/job.py"]\n', ""))
    assert "command" in _refused(cli, name, job)["message"]
    (cli.cwd / "runward.toml").write_text(toml)
    assert "settle" in _refused(cli, name, job, "--settle", "-1")["message"]
    assert "ready" in _refused(cli, name, job, "--ready", "(")["message"]
    assert "no target" in _refused(cli, name, job, "--on", "nosuchtarget")["message"]
    # all inputs good again: the restart goes through
    rc, doc = cli.json("restart", name, "--deploy")
    assert rc == 0, doc
    assert not alive(*job)
    cli.json("stop", name, "--grace", "2")


def test_restart_refuses_to_run_old_code_when_the_files_drift_locally(cli, tmp_path):
    name = f"rtd{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "deployed"
    _project(cli, name, str(dest))
    job = _deploy_and_start(cli, name)
    v1 = sha((cli.cwd / "job.py").read_bytes())
    (cli.cwd / "job.py").write_text(JOB.format(v="v2"))
    v2 = sha((cli.cwd / "job.py").read_bytes())
    err = _refused(cli, name, job)
    assert "job.py" in err["message"] and "--deploy" in err["hint"] and "--no-deploy" in err["hint"], err
    assert sha((dest / "job.py").read_bytes()) == v1
    # --no-deploy: restarted on what is there, knowingly, and it says what it left
    rc, doc = cli.json("restart", name, "--no-deploy")
    assert rc == 0, doc
    assert [s["step"] for s in doc["result"]["steps"]] == ["stop", "start"]
    assert [d["remote"] for d in doc["result"]["local_drift"]] == [f"{dest}/job.py"], doc["result"]
    assert not alive(*job) and sha((dest / "job.py").read_bytes()) == v1
    job = only(marked(f"{name}.2"))
    rc, doc = cli.json("restart", name, "--deploy", "--no-deploy")
    assert rc == 2 and alive(*job), doc
    _refused(cli, name, job)  # the drift is still there: a plain restart still refuses
    # runward.toml says the run deploys on restart: a plain restart deploys first
    text = (cli.cwd / "runward.toml").read_text()
    (cli.cwd / "runward.toml").write_text(text + "deploy_on_restart = true\n")
    rc, doc = cli.json("restart", name)
    assert rc == 0 and [s["step"] for s in doc["result"]["steps"]] == ["stop", "deploy", "start"], doc
    assert not alive(*job) and sha((dest / "job.py").read_bytes()) == v2
    log = Path(doc["result"]["steps"][-1]["result"]["log"])
    wait_for(lambda: "job v2" in log.read_text(), what="the new code's first line in the log")
    cli.json("stop", name, "--grace", "2")


def test_deploy_on_restart_is_checked_when_runward_toml_is_read(cli):
    for body, word in (('files = ["a:/tmp/a"]\ndeploy_on_restart = "yes"\n', "true or false"),
                       ("deploy_on_restart = true\n", "no files")):
        (cli.cwd / "runward.toml").write_text('[runs.dor]\ncommand = ["true"]\n' + body)
        rc, doc = cli.json("restart", "dor")
        assert rc == 2 and "deploy_on_restart" in doc["error"]["message"] and word in doc["error"]["message"], doc


def test_the_python_api_and_the_mcp_tool_offer_the_same_choice(cli, tmp_path, monkeypatch):
    """runward.restart(deploy=None|False|True) and the MCP tool's deploy (unset, false, true)
    are the CLI's plain restart, --no-deploy and --deploy."""
    import runward
    name = f"rta{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "deployed"
    _project(cli, name, str(dest))
    job = _deploy_and_start(cli, name)
    (cli.cwd / "job.py").write_text(JOB.format(v="v2"))
    monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
    cfg = str(cli.cwd / "runward.toml")
    r = runward.restart(name, config=cfg)
    assert not r.ok and r.exit_code == 2 and "job.py" in r.error["message"], r.to_json()
    assert alive(*job)
    r = runward.restart(name, deploy=False, config=cfg, settle=0.3)
    assert r.ok and [s["step"] for s in r.document["result"]["steps"]] == ["stop", "start"], r.to_json()
    assert not alive(*job) and sha((dest / "job.py").read_bytes()) != sha((cli.cwd / "job.py").read_bytes())
    job = only(marked(f"{name}.2"))
    pytest.importorskip("mcp", reason="the MCP half needs the MCP SDK: pip install -e '.[mcp]'")
    from helpers_mcp import _call, _session
    import anyio

    async def main():
        async with _session(cli.env, cli.cwd) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert {"type": "null"} in tools["restart"].input_schema["properties"]["deploy"]["anyOf"]
            err, doc = await _call(s, "restart", {"name": name})
            assert err and doc["error"]["exit_code"] == 2 and alive(*job), doc
            err, doc = await _call(s, "restart", {"name": name, "deploy": True, "settle": 0.3})
            assert not err and [st["step"] for st in doc["result"]["steps"]] == ["stop", "deploy", "start"], doc
    anyio.run(main)
    assert not alive(*job) and sha((dest / "job.py").read_bytes()) == sha((cli.cwd / "job.py").read_bytes())
    cli.json("stop", name, "--grace", "2")


# --------------------------------------------------------------------------- a container behind ssh


def test_restart_over_ssh_into_a_container_refuses_drift_and_a_missing_file(pod):
    name = f"rtp{uuid.uuid4().hex[:6]}"
    dest = f"{pod.dir}/code"
    _project(pod, name, dest, on="h1pod")
    try:
        job = _deploy_and_start(pod, name)
        assert not Path(dest).exists(), "the files must land in the container, not on this host"
        v1 = sha((pod.cwd / "job.py").read_bytes())
        assert sha_in_pod(pod, f"{dest}/job.py") == v1
        (pod.cwd / "job.py").write_text(JOB.format(v="v2"))
        err = _refused(pod, name, job)
        assert f"{dest}/job.py" in err["message"] and "--no-deploy" in err["hint"], err
        assert sha_in_pod(pod, f"{dest}/job.py") == v1
        (pod.cwd / "conf" / "a.yaml").unlink()
        (pod.cwd / "conf").rmdir()
        err = _refused(pod, name, job, "--deploy")
        assert "conf" in err["message"], err
        assert sha_in_pod(pod, f"{dest}/job.py") == v1
    finally:
        pod.json("stop", name, "--grace", "2")


def test_a_multi_node_restart_with_a_node_down_stops_no_node(tmp_path):
    """A node that does not answer (its container stopped) is found before anything is
    stopped: exit 3 naming it, the other node's job untouched (hostile review F3: it stopped
    the reachable nodes, then failed, leaving the run half down)."""
    import subprocess
    import uuid
    import testbed
    from conftest import CLI, alive
    from helpers_container import IMAGE, OPTS
    tb = testbed.require("podman")
    (tmp_path / "work").mkdir()
    c = CLI(tmp_path / "home", tmp_path / "work")
    c.env = testbed.env(tb, c.env)
    box = f"rwtest-{uuid.uuid4().hex[:8]}"
    p = subprocess.run(["podman", "run", "-d", "--name", box, *OPTS, "--init", IMAGE, "sleep", "infinity"],
                       env=c.env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    name = "mr" + uuid.uuid4().hex[:6]
    (c.cwd / "runward.toml").write_text(f'[runs.{name}]\nnodes = ["podman:{tb["podman"]}", "podman:{box}"]\n'
                                        'command = ["sleep", "300"]\nsettle = 0.3\non_node_failure = "continue"\n')
    try:
        rc, doc = c.json("start", name)
        assert rc == 0, doc
        first = doc["result"]["nodes"][0]["result"]
        subprocess.run(["podman", "stop", "-t", "0", box], env=c.env, capture_output=True, timeout=120, check=True)
        rc, doc = c.json("restart", name, "--no-deploy")
        assert rc == 3 and f"podman:{box}" in doc["error"]["message"], doc
        assert "nothing was stopped" in doc["error"]["message"], doc
        rc, st = c.json("status", name)
        run = st["result"]["nodes"][0]["run"]
        assert run["state"] == "running" and run["attempt"] == 1 and run["pid"] == first["pid"], st
    finally:
        c.run("stop", name, "--grace", "2")
        subprocess.run(["podman", "rm", "-f", "-t", "0", box], env=c.env, capture_output=True, timeout=120)


@pytest.mark.parametrize("dest", ["abs", "home"])
def test_a_file_added_or_deleted_in_a_pushed_directory_is_drift(cli, tmp_path, dest):
    """Hostile review F2: deleting app/override.conf locally (or adding app/new.conf) was no
    drift: status said nothing and restart ran the config the operator had just deleted."""
    import uuid
    name = "dd" + uuid.uuid4().hex[:6]
    far = f"/tmp/rw-dd-{name}/app" if dest == "abs" else f"~/rw-dd-{name}/app"
    app = cli.cwd / "app"
    app.mkdir()
    (app / "base.conf").write_text("lr=1\n")
    (app / "override.conf").write_text("lr=BAD\n")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\nsh = "cat app/*.conf; exec sleep 600"\ncwd = "{far.rsplit("/", 1)[0]}"\n'
        f'files = ["app/:{far}"]\nsettle = 0.3\n')
    try:
        rc, doc = cli.json("deploy", name)
        assert rc == 0, doc
        rc, doc = cli.json("start", name)
        assert rc == 0, doc
        (app / "override.conf").unlink()
        st = cli.status(name)
        changes = {d.get("change", "changed") for d in st.get("local_drift") or []}
        assert any("deleted locally" in c for c in changes), st
        rc, doc = cli.json("restart", name)
        assert rc == 2 and "override.conf" in doc["error"]["message"], doc
        assert cli.status(name)["attempt"] == 1
        rc, doc = cli.json("deploy", name, "--delete")
        assert rc == 0, doc
        (app / "new.conf").write_text("lr=3\n")
        rc, doc = cli.json("restart", name)
        assert rc == 2 and "new.conf" in doc["error"]["message"], doc
        rc, doc = cli.json("restart", name, "--deploy")
        assert rc == 0, doc
        assert not cli.status(name).get("local_drift"), cli.status(name)
    finally:
        cli.run("stop", name, "--grace", "2")
        shutil.rmtree(os.path.expanduser(far.rsplit("/", 1)[0]), ignore_errors=True)


def test_restart_deploy_to_a_destination_it_cannot_write_stops_nothing(cli, tmp_path):
    """Hostile review F4: restart --deploy stopped the run, then found a directory where a file
    goes and left it stopped. The deploy's plan now runs before the stop (and a dry run says
    the conflict too)."""
    import uuid
    name = "rd" + uuid.uuid4().hex[:6]
    far = tmp_path / "far"
    (cli.cwd / "app").mkdir()
    (cli.cwd / "app" / "b.conf").write_text("lr=1\n")
    (cli.cwd / "runward.toml").write_text(f'[runs.{name}]\ncommand = ["sleep", "600"]\nsettle = 0.3\n'
                                          f'files = ["app/:{far}/app"]\n')
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    job = (doc["result"]["pid"], doc["result"]["start_time"])
    (far / "app" / "b.conf").unlink()
    (far / "app" / "b.conf" / "x").mkdir(parents=True)
    (cli.cwd / "app" / "b.conf").write_text("lr=2\n")
    rc, doc = cli.json("push", "--dry-run", f"{cli.cwd / 'app'}/:{far}/app")
    assert rc == 1 and "is a directory there" in doc["error"]["message"], doc
    rc, doc = cli.json("restart", name, "--deploy")
    assert rc == 1 and "is a directory there" in doc["error"]["message"], doc
    assert alive(*job) and cli.status(name)["attempt"] == 1, "the run must be untouched"
    cli.run("stop", name, "--grace", "2")
