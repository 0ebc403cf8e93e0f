"""`runward restart` starts from the last attempt's spec: a run started with --stall-after and
--straggler-ratio keeps them in its next attempt, as it keeps --grace or --stop-signal (none of
the four is a restart flag). Checked in the attempts' records and in status's stall section. A run of runward.toml takes its
[health] table's as the file says them now, on one node and on every node of a multi-node run.

Found by the review of issue 40: spec/restartspec.py's start keys leave "stall" out (as they did
before the move to SPEC_KEYS), so attempt 2 judges a stall by the 120 s default while history
says "no change"."""
from __future__ import annotations

import json

from conftest import fresh_name
from helpers_multinode import _config, mn  # noqa: F401  (mn: the fixture)

SLEEP = ["python3", "-c", "import time; time.sleep(600)"]


def test_restart_keeps_the_stall_options_the_run_was_started_with(cli):
    name = fresh_name("rks")
    rc, doc = cli.json("start", name, "--settle", "0.3", "--grace", "7", "--stall-after", "10m",
                       "--straggler-ratio", "4", "--", *SLEEP)
    assert rc == 0, doc
    try:
        rc, doc = cli.json("restart", name, "--settle", "0.3", "--no-deploy")
        assert rc == 0, doc
        attempts = cli.home / "runs" / name / "attempts"
        first = json.loads((attempts / "1.json").read_text())
        second = json.loads((attempts / "2.json").read_text())
        assert first["stall"] == {"after": 600.0, "ratio": 4.0}, first.get("stall")
        assert second["grace"] == first["grace"] == 7.0  # the last attempt's spec is kept ...
        assert second["stall"] == first["stall"], (  # ... and its stall options with it
            f"attempt 2's stall {second['stall']!r}, attempt 1's {first['stall']!r}; restart said "
            f"{doc['result'].get('changed')!r}")
        stall = cli.status(name)["stall"]
        assert (stall["stall_after"], stall["straggler_ratio"]) == (600.0, 4.0), stall
    finally:
        cli.run("stop", name, "--grace", "2")


def test_restart_of_a_run_in_runward_toml_takes_its_health_stall_options_as_they_are_now(cli):
    """runward.toml's definition replaces the last spec (docs/runs.md), its [health] stall
    options with the rest: the new attempt judges by the table as it reads now."""
    name = fresh_name("rkt")
    toml = cli.cwd / "runward.toml"
    head = getattr(cli, "toml_head", "") + f'[runs.{name}]\ncommand = {json.dumps(SLEEP)}\nsettle = 0.3\n'
    toml.write_text(head + f'[runs.{name}.health]\nstall_after = "5m"\nstraggler_ratio = 4\n')
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    try:
        toml.write_text(head + f'[runs.{name}.health]\nstall_after = "7m"\n')
        rc, doc = cli.json("restart", name, "--no-deploy")
        assert rc == 0, doc
        attempts = cli.home / "runs" / name / "attempts"
        assert json.loads((attempts / "1.json").read_text())["stall"] == {"after": 300.0, "ratio": 4.0}
        assert json.loads((attempts / "2.json").read_text())["stall"] == {"after": 420.0}
        stall = cli.status(name)["stall"]
        assert stall["stall_after"] == 420.0, stall
    finally:
        cli.run("stop", name, "--grace", "2")


def test_a_multi_node_restart_keeps_runward_tomls_health_stall_options_on_every_node(cli, tmp_path, mn):  # noqa: F811
    """A multi-node restart takes runward.toml's definition (operations/restart.py): its [health]
    stall options reach every node's new attempt as they reached the first (ground truth: each
    node's attempt records, under its home)."""
    _config(tmp_path, ["rw1", "rw2"], mn, f'[runs.{mn}.health]\nstall_after = "5m"\n')
    rc, doc = cli.json("start", mn)
    assert rc == 0, doc
    rc, doc = cli.json("restart", mn)
    assert rc == 0 and [r["result"]["attempt"] for r in doc["result"]["nodes"]] == [2, 2], doc
    for i in (0, 1):
        attempts = tmp_path / f"node{i}" / "runs" / mn / "attempts"
        stalls = [json.loads((attempts / f"{n}.json").read_text())["stall"] for n in (1, 2)]
        assert stalls == [{"after": 300.0}, {"after": 300.0}], (i, stalls)
