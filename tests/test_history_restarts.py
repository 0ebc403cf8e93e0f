"""Supervised restarts in history (issue 30): an attempt the shim starts is an attempt like
any other -- its cause (restart of which attempt, why) and the files as they were on disk
when the shim started it, with their text kept for compare. Ground truth: a job that edits
its own script and fails, so the shim's next attempt runs other bytes; their sha256."""

from __future__ import annotations

import hashlib
import json
import uuid

from conftest import CLI, wait_for

V1 = b'''import sys
src = open(__file__).read()
if "\\n# " + "v2" not in src:  # the first run edits its own file: the restart runs other bytes
    open(__file__, "a").write("# v2\\n")
sys.exit(3)
'''


def test_a_supervised_restart_is_an_attempt_with_its_cause_and_its_own_files(cli: CLI):
    name = f"hr{uuid.uuid4().hex[:6]}"
    (cli.cwd / "job.py").write_bytes(V1)
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
        f'restart = "on-failure"\nmax_restarts = 1\nbackoff = "0"\n')
    rc, doc = cli.json("start", name)
    assert rc in (0, 1), doc  # the job may already have failed within the settle
    wait_for(lambda: cli.status(name)["state"] == "gave_up", timeout=60, what="two attempts, then gave_up")
    v2 = (cli.cwd / "job.py").read_bytes()
    assert v2 == V1 + b"# v2\n"
    p = cli.run("history", name, "--json")
    assert p.returncode == 0, p.stderr
    a1, a2 = json.loads(p.stdout)["result"]["attempts"]
    assert "restart" not in a1 and a1["exit"]["code"] == 3, a1
    r = a2["restart"]
    assert (r["of"], r["number"], r["by"]) == (1, 1, "shim") and a2["exit"]["code"] == 3, a2
    path = str(cli.cwd / "job.py")
    sha = [hashlib.sha256(b).hexdigest()[:8] for b in (V1, v2)]
    assert a2["changed"]["files"] == {path: sha}, a2["changed"]
    rc, doc = cli.json("compare", name, "1", "2")
    assert rc == 0, doc
    diff = doc["result"]["diffs"][path]
    assert "+# v2" in json.dumps(diff), diff  # the text the shim's attempt really ran
    text = cli.run("history", name).stdout
    assert "restart 1 of #1" in text, text
