"""The alert-kind table (agent/logmetrics/kinds.py) is the one place a kind is described: a new log
event is its pattern (logmetrics/patterns.py) and its row, and every reader of kinds, on the
agent and in the CLI, follows from those two files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

from conftest import CLI, ROOT

from runward.views import health
from runward.agent.logmetrics import kinds as alertkinds
from runward.agent.health import facts as health_op, window

# a kind the tree does not have: ENOSPC, as Python says it
LINE = "OSError: [Errno 28] No space left on device: '/ckpt/step_400.pt'"


def _with_disk_full(tmp_path):
    """A copy of src/ with one new log event: a named group of EVENT_RE (and a hint word,
    which every event pattern holds), and a row of the table. Nothing else is edited."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    pats = src / "runward" / "agent" / "logmetrics" / "patterns.py"
    text = pats.read_text()
    anchor = '    .encode("utf-8"),\n)\nEVENT_HINTS = tuple(s.encode("utf-8") for s in (\n'
    assert text.count(anchor) == 1
    pats.write_text(text.replace(anchor, '    "|(?P<disk_full>No space left on device)"\n' + anchor + '    "space",\n'))
    table = src / "runward" / "agent" / "logmetrics" / "kinds.py"
    text = table.read_text()
    anchor = '    Kind("exited", "exited", FACT, actionable=False),\n'
    assert text.count(anchor) == 1
    table.write_text(text.replace(anchor, anchor + '    Kind("disk_full", "disk full", FACT, "red", "disk full"),\n'))
    return src


def test_a_new_log_event_is_a_pattern_and_a_row(tmp_path):
    src = _with_disk_full(tmp_path)
    (tmp_path / "work").mkdir()
    cli = CLI(tmp_path / "home", tmp_path / "work")
    cli.env["PYTHONPATH"] = str(src)
    # the job ends once the start has answered (a gate file, not a sleep a loaded machine outlasts)
    gate = tmp_path / "gate"
    job = ("import os, sys, time; print('step 1 loss 2.0', flush=True); print(%r, flush=True)\n"
           "while not os.path.exists(%r): time.sleep(0.02)\nsys.exit(1)") % (LINE, str(gate))
    assert cli.run("start", "ckpt", "--settle", "0", "--", sys.executable, "-c", job).returncode == 0
    gate.touch()
    record = cli.home / "runs" / "ckpt" / "attempts" / "1.json"
    deadline = time.time() + 30
    while (json.loads(record.read_text()).get("exit") or None) is None:
        assert time.time() < deadline, "the job's exit was never recorded"
        time.sleep(0.1)
    # the agent found it, said it with its row's words, and kept it as a fact of the attempt
    rc, doc = cli.json("status", "ckpt")
    assert rc == 0, doc
    alerts = {a["kind"]: a for a in doc["result"]["runs"][0]["health"]["alerts"]}
    assert alerts["disk_full"]["detail"] == "disk full: " + LINE and alerts["disk_full"]["line_no"] == 2, alerts
    saved = json.loads((cli.home / "runs" / "ckpt" / "health.json").read_text())
    assert "disk_full" in {a["kind"] for a in saved["alerts"]}, saved
    # the CLI reads it with its label, and [health] actions take it
    said = subprocess.run([sys.executable, "-c", (
        "import json, sys; from runward.views import health; from runward.spec import supervision; "
        "a = json.loads(sys.stdin.read()); print(health.format_alert(a)); "
        "print(supervision.health_policy({'actions': {'disk_full': 'stop'}})['actions'])")],
        input=json.dumps(alerts["disk_full"]), capture_output=True, text=True, timeout=60,
        env=dict(cli.env), cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    rendered, actions = said.stdout.splitlines()
    assert " disk full: disk full: OSError" in rendered and "(line 2)" in rendered, rendered
    assert actions == "{'disk_full': 'stop'}", actions
    assert "disk_full" not in alertkinds.KINDS  # this tree's own table: the copy's row did it


def test_every_reader_of_kinds_reads_the_table():
    """The kind lists both sides use are the table's: what is stored, what a watch's window
    keeps, how a person reads a kind ([health] actions: the test above)."""
    assert health_op.FACT_KINDS is alertkinds.FACT_KINDS and window.RULE_KINDS is alertkinds.RULE_KINDS
    assert "exited" not in alertkinds.ACTION_KINDS and set(alertkinds.ACTION_ALIASES.values()) <= set(alertkinds.ACTION_KINDS)
    assert not alertkinds.FACT_KINDS & alertkinds.RULE_KINDS
    for kind, row in alertkinds.KINDS.items():
        assert health.format_alert({"kind": kind, "t": None, "detail": "x"}) == f"--:--:-- {row.label}: x"
