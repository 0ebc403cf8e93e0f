"""`runward mcp` through the MCP SDK's own client over stdio (issue 15): the tools and their
schemas, then the seed story on the testbed's Proxmox-like container (push, start, status,
watch, restart into a NaN, watch, stop), a refused tool and a bad target's diagnosis. Real
processes end to end: the server is `python -m runward mcp`, the job runs in ssh://rw1/pct:200.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid

import pytest

import testbed
from conftest import EXAMPLE, ROOT

mcp = pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
import anyio  # noqa: E402  (installed with mcp)
from helpers_mcp import _call, _session  # noqa: E402

TOOLS = {"start", "stop", "restart", "status", "logs", "watch", "push", "deploy", "gpus", "ps", "kill", "exec",
         "lint", "doctor", "targets", "history", "compare", "stacks"}
CT = "ssh://rw1/pct:200"


@pytest.fixture
def story(tmp_path):
    """runward.toml naming the container and a run whose files the push will deliver; the
    environment the server (and the CLI, to compare) runs in; the container's files removed after."""
    tb = testbed.require("ssh")
    testbed.require("pct")
    tag = "mcp%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    remote = f"/root/rw-{tag}/train.py"
    (tmp_path / "runward.toml").write_text(
        f'[targets.ct]\non = "{CT}"\n\n[runs.{tag}]\non = "ct"\ncommand = ["python3", "{remote}"]\n'
        f'files = ["{EXAMPLE}:{remote}"]\nenv = {{ TRAIN_STEP_SECONDS = "0.1", TRAIN_RUN_TAG = "{tag}" }}\n')
    env = testbed.env(tb, dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"),
                               RUNWARD_SSH_CONFIG=tb["ssh_config"]))
    env.pop("RUNWARD_CONFIG", None)
    yield {"tb": tb, "tag": tag, "remote": remote, "env": env, "dir": tmp_path}
    subprocess.run([sys.executable, "-m", "runward", "stop", tag, "--grace", "1"], cwd=tmp_path, env=env,
                   capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "runward", "rm", tag, "--logs"], cwd=tmp_path, env=env,
                   capture_output=True, timeout=120)
    subprocess.run(["pct", "exec", "200", "--", "rm", "-rf", os.path.dirname(remote)], env=env,
                   capture_output=True, timeout=60)


def _cli_json(story, *args) -> dict:
    p = subprocess.run([sys.executable, "-m", "runward", *args, "--json"], cwd=story["dir"], env=story["env"],
                       capture_output=True, text=True, timeout=120)
    return json.loads(p.stdout)


def _toolless(doc):
    """DOC without what the far tool wrote on stderr (details' stderr_tail, its probe's too)."""
    doc = json.loads(json.dumps(doc))
    details = (doc.get("error") or {}).get("details") or {}
    for d in (details, details.get("probe") or {}):
        d.pop("stderr_tail", None)
    return doc


def _shape(doc):
    """The document's structure (keys, recursively; list items by their first): what must be
    the CLI's, where values (times, pids) differ between two calls."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return type(doc).__name__


def test_tools_and_their_schemas(story):
    async def main():
        async with _session(story["env"], story["dir"]) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():
                assert t.description and t.input_schema["type"] == "object", t.name
                for p, sch in t.input_schema["properties"].items():
                    assert sch.get("description"), (t.name, p)  # every input documented
            start = tools["start"].input_schema
            assert start["required"] == ["name"]
            assert {"type": "array", "items": {"type": "string"}} in start["properties"]["command"]["anyOf"]
            assert start["properties"]["env"]["anyOf"][0]["additionalProperties"] == {"type": "string"}
            watch = tools["watch"].input_schema["properties"]["for_s"]
            assert watch["maximum"] == 600 and watch["exclusiveMinimum"] == 0  # bounded
            kill = tools["kill"].input_schema["properties"]["confirm"]
            assert kill == {**kill, "type": "boolean", "default": False}  # a dry run unless confirm
            assert "NOT ALLOWED" in tools["exec"].description and "NOT ALLOWED" not in tools["stop"].description
            assert tools["status"].annotations.read_only_hint and not tools["stop"].annotations.read_only_hint
    anyio.run(main)


def test_the_seed_story_through_mcp(story):
    tag, remote = story["tag"], story["remote"]

    async def main():
        async with _session(story["env"], story["dir"]) as s:
            err, doc = await _call(s, "push", {"files": {str(EXAMPLE): remote}, "on": CT})
            assert not err, doc
            assert doc["result"]["files"][0]["sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
            # a file that is no run's: refused by default, naming the key that would allow it
            err, doc = await _call(s, "push", {"files": {str(EXAMPLE): "/root/elsewhere.py"}, "on": CT})
            assert err and doc["error"]["type"] == "Refused" and doc["error"]["details"]["config_key"] == "mcp.allow"

            progress: list = []
            # the run as runward.toml defines it (its own command and env are exec's: a person's switch)
            err, doc = await _call(s, "start", {"name": tag, "on": "ct", "settle": 2.5}, progress)
            assert not err, doc
            assert doc["command"] == "start" and "alive_after_settle" in doc["result"]["verified"]
            assert progress and progress[0][1] == 2.5, progress  # the settle reported while it lasted

            err, doc = await _call(s, "status", {"name": tag})
            assert not err and doc["result"]["runs"][0]["state"] == "running", doc
            assert _shape(doc) == _shape(_cli_json(story, "status", tag))  # the CLI's --json document

            progress = []
            err, doc = await _call(s, "watch", {"name": tag, "for_s": 3}, progress)
            assert not err and doc["result"]["healthy"], doc
            assert progress and all(total == 3 for _, total, _ in progress)

            err, doc = await _call(s, "logs", {"name": tag, "lines": 5})
            assert not err and len(doc["result"]["lines"]) == 5 and doc["result"]["offset"] > 0, doc
            err, more = await _call(s, "logs", {"name": tag, "offset": doc["result"]["offset"], "lines": 3})
            assert not err and 0 < len(more["result"]["lines"]) <= 3, more  # only what came since

        async with _session(story["env"], story["dir"], ["--allow", "all"]) as s:  # env overrides: exec's switch
            err, doc = await _call(s, "restart", {"name": tag, "env": {"TRAIN_NAN_AT": "8"}, "settle": 0.5})
            assert not err and doc["result"]["attempt"] == 2, doc
            assert doc["result"]["verified"] == ["stopped_dead", "alive_after_settle"]

            err, doc = await _call(s, "watch", {"name": tag, "for_s": 60})
            assert err and doc["error"]["type"] == "Alert" and doc["result"]["alert"]["kind"] == "nan", doc

            err, doc = await _call(s, "stop", {"name": tag, "grace": 10})
            assert not err and doc["result"]["verified_dead"] and not doc["result"].get("survivors"), doc
            err, doc = await _call(s, "ps", {"pattern": remote, "on": CT})
            # nothing of it left in the container; no match is exit 1 as pgrep's, so an error
            assert err and doc["result"]["processes"] == [] and "error" not in doc, doc
    anyio.run(main)


def test_refused_tool_and_a_bad_target_diagnosed(story):
    async def main():
        async with _session(story["env"], story["dir"]) as s:
            err, doc = await _call(s, "exec", {"command": ["true"], "on": CT})
            assert err and doc["error"]["type"] == "Refused", doc
            assert doc["error"]["details"]["config_key"] == "mcp.allow" and "exec" in doc["error"]["hint"]
            err, doc = await _call(s, "kill", {"pattern": "train", "on": CT, "confirm": True})
            assert err and doc["error"]["type"] == "Refused", doc
            # a stopped container: the hop that failed, and what to do about it
            err, doc = await _call(s, "status", {"on": "ssh://rw1/pct:201"})
            assert err and doc["error"]["type"] == "HopFailed" and doc["error"]["hop"] == "pct:201", doc
            assert "pct start 201" in doc["error"]["hint"]
            # two calls of the real lxc-attach: its own words (stderr) may differ between them
            assert _toolless(doc) == _toolless(_cli_json(story, "status", "--on", "ssh://rw1/pct:201"))
        # --allow / --targets: exec allowed, but only on the container
        async with _session(story["env"], story["dir"], ["--allow", "exec,status", "--targets", "ct"]) as s:
            err, doc = await _call(s, "exec", {"command": ["uname", "-n"], "on": CT})
            assert not err and doc["result"]["stdout"].strip() == "rwlxc", doc
            err, doc = await _call(s, "status", {"on": "local"})
            assert err and doc["error"]["details"]["config_key"] == "mcp.targets", doc
            err, doc = await _call(s, "stop", {"name": "x", "on": CT})
            assert err and doc["error"]["type"] == "Refused", doc
    anyio.run(main)


def test_docs_agents_snippets_register_runward_mcp():
    """Each client snippet in docs/agents.md is valid JSON that starts `runward mcp`, and its
    [mcp] example is a policy runward.toml accepts."""
    import re
    text = (ROOT / "docs" / "agents.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"mcpServers"' in b]
    assert len(blocks) == 3
    for b in blocks:
        srv = b["mcpServers"]["runward"]
        assert srv["command"].endswith("runward") and srv["args"][0] == "mcp"
    toml = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    import tomllib
    from runward.spec import config
    from runward.mcp import server as mcpserver
    cfg = config._validate("runward.toml", {**tomllib.loads(toml), "targets": {"gpu1": {"on": "ssh://gpu1"}}})
    pol = mcpserver.policy_from(cfg)
    assert "exec" not in pol.verbs and "deploy" in pol.verbs and pol.targets == ("ssh://gpu1", "ssh://gpu2/pct:200")


def test_an_unknown_tool_in_allow_is_refused_before_serving(tmp_path):
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, "-m", "runward", "mcp", "--allow", "status,exce"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "--allow: unknown tool(s) exce" in p.stderr and p.stdout == "", p.stderr


def test_push_sends_only_the_local_file_runward_toml_pairs_with_that_remote(tmp_path):
    """By default an agent pushes a run's own files: the REMOTE a run deploys, and the LOCAL
    runward.toml pairs with it. Another local file onto that remote (a 0600 file of this
    machine, or a link to it named like the run's file) is refused and nothing is written;
    the run's own file, by a relative or absolute path, lands with its bytes."""
    work, there = tmp_path / "proj", tmp_path / "target"
    work.mkdir()
    there.mkdir()
    dest = there / "train.py"
    (work / "train.py").write_text("print('the run file')\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for agents\n")
    secret.chmod(0o600)
    (work / "link.py").symlink_to(secret)
    (work / "runward.toml").write_text(f'[runs.r]\ncommand = ["python3", "{dest}"]\nfiles = ["train.py:{dest}"]\n')
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"))
    env.pop("RUNWARD_CONFIG", None)

    async def main():
        async with _session(env, work) as s:
            for local in (str(secret), str(work / "link.py"), "link.py"):
                err, doc = await _call(s, "push", {"files": {local: str(dest)}})
                assert err and doc["error"]["type"] == "Refused", doc
                assert doc["error"]["details"]["config_key"] == "mcp.allow" and doc["error"]["exit_code"] == 2, doc
                assert local in doc["error"]["message"] and str(work / "train.py") in doc["error"]["message"], doc
                assert not dest.exists() and os.listdir(there) == [], "a refused push wrote on the target"
            for local in ("train.py", str(work / "train.py")):
                err, doc = await _call(s, "push", {"files": {local: str(dest)}})
                assert not err, doc
                assert dest.read_bytes() == (work / "train.py").read_bytes()
    anyio.run(main)


def _environ(pid: int) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)


def test_start_and_restart_run_an_agents_own_command_or_env_only_where_exec_is_allowed(tmp_path):
    """By default an agent starts what runward.toml defines, as defined: a start's own command,
    shell line, env or cwd, and a restart's env, are exec (refused as exec is, nothing run, the
    run untouched); with exec allowed they run, a shell line linted first as exec's is."""
    proof = tmp_path / "ran"
    (tmp_path / "runward.toml").write_text('[runs.r]\ncommand = ["sleep", "300"]\nsettle = 0.3\n')
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"))
    env.pop("RUNWARD_CONFIG", None)
    home_runs = tmp_path / "home" / "runs"
    own = [{"name": "x", "sh": f"id > {proof}"}, {"name": "x", "command": ["sh", "-c", f"id > {proof}"]},
           {"name": "r", "env": {"LD_PRELOAD": str(tmp_path / "evil.so")}}, {"name": "r", "cwd": "/"}]

    async def main():
        async with _session(env, tmp_path) as s:
            for args in own:
                err, doc = await _call(s, "start", {**args, "settle": 0.3})
                assert err and doc["error"]["type"] == "Refused" and doc["error"]["exit_code"] == 2, doc
                assert doc["error"]["details"]["config_key"] == "mcp.allow" and '"exec"' in doc["error"]["hint"], doc
                assert not proof.exists() and not home_runs.exists(), "a refused start ran something"
            err, doc = await _call(s, "start", {"name": "r"})  # as runward.toml defines it
            assert not err, doc
            pid = doc["result"]["pid"]
            assert open(f"/proc/{pid}/cmdline", "rb").read() == b"sleep\x00300\x00"
            err, doc = await _call(s, "restart", {"name": "r", "env": {"LD_PRELOAD": str(tmp_path / "evil.so")}})
            assert err and doc["error"]["type"] == "Refused", doc
            assert os.path.exists(f"/proc/{pid}") and b"LD_PRELOAD" not in _environ(pid), "a refused restart touched it"
            err, doc = await _call(s, "stop", {"name": "r", "grace": 2})
            assert not err, doc
        async with _session(env, tmp_path, ["--allow", "all"]) as s:
            err, doc = await _call(s, "start", {"name": "y", "sh": "pkill -f sleep; sleep 300", "settle": 0.3})
            assert err and doc["error"]["type"] == "BadInput" and "self-kill" in json.dumps(doc["error"]), doc
            assert not (home_runs / "y").exists()
            err, doc = await _call(s, "start", {"name": "y", "sh": f"id > {proof}; exec sleep 300", "settle": 0.5,
                                                "env": {"RW_AGENT": "1"}})
            assert not err and proof.exists(), doc
            assert _environ(doc["result"]["pid"]).get(b"RW_AGENT") == b"1"
            err, doc = await _call(s, "stop", {"name": "y", "grace": 2})
            assert not err, doc
    try:
        anyio.run(main)
    finally:
        for name in ("r", "y"):
            subprocess.run([sys.executable, "-m", "runward", "stop", name, "--grace", "1"], cwd=tmp_path, env=env,
                           capture_output=True, timeout=60)
