"""`runward restart` starts from the last attempt's spec: a run started with --stall-after and
--straggler-ratio keeps them in its next attempt, as it keeps --grace or --stop-signal (none of
the four is a restart flag). Checked in the attempts' records and in status's stall section.

Found by the review of issue 40: spec/restartspec.py's start keys leave "stall" out (as they did
before the move to SPEC_KEYS), so attempt 2 judges a stall by the 120 s default while history
says "no change"."""
from __future__ import annotations

import json

from conftest import fresh_name

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
