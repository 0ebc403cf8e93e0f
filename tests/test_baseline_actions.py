"""Baseline rules in the shim's health actions (issue 30): `tok_s = { min_ratio = 0.95,
baseline = "best" }` with `actions = { below_baseline = "stop" }` is judged by the shim, with
nobody connected, at the steps both attempts reached. Ground truth: the example job's own
speed (TRAIN_TOKS), the attempt record the shim wrote, and whether the job was stopped."""

from __future__ import annotations

import re
import uuid

import pytest

from conftest import CLI, EXAMPLE, wait_for

FAST = {"TRAIN_STEP_SECONDS": "0.05", "TRAIN_WORKERS": "0", "TRAIN_ESCAPEE": "0"}


def _toml(cli: CLI, name: str) -> None:
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    env = ", ".join(f'{k} = "{v}"' for k, v in FAST.items())
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "train.py"]\ncwd = "{cli.cwd}"\nsettle = 0.3\nenv = {{ {env} }}\n\n'
        f'[runs.{name}.health]\ninterval = 0.5\ntok_s = {{ min_ratio = 0.95, baseline = "best" }}\n'
        f'actions = {{ below_baseline = "stop" }}\n')


def _steps(cli: CLI, name: str, n: int) -> int:
    rc, doc = cli.json("logs", name, "--attempt", str(n))
    assert rc == 0, doc
    return max([int(m.group(1)) for ln in doc["result"]["lines"] for m in [re.match(r"step (\d+) ", ln)] if m] or [0])


def test_a_slower_attempt_fires_the_shims_baseline_action_and_an_equal_one_does_not(cli):
    name = f"ba{uuid.uuid4().hex[:6]}"
    _toml(cli, name)
    rc, doc = cli.json("start", name, "--env", "TRAIN_TOKS=14500", "--env", "TRAIN_STEPS=40")
    assert rc == 0, doc
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=60, what="attempt 1 (the baseline) to end")
    try:
        # slower (9000 tok/s), running on: the shim's judge stops it, with its evidence
        rc, doc = cli.json("restart", name, "--env", "TRAIN_TOKS=9000", "--env", "TRAIN_STEPS=0")
        assert rc == 0, doc
        st = wait_for(lambda: (lambda s: s if s["attempt"] == 2 and s["state"] == "exited" else None)(cli.status(name)),
                      timeout=60, what="the shim to stop the slower attempt 2")
        act = st["actions"][0]
        assert (act["kind"], act["action"], act["metric"]) == ("below_baseline", "stop", "tok_s"), act
        assert "of attempt 1's" in act["detail"] and act["value"] == pytest.approx(9000, rel=0.05), act
        assert [a["kind"] for a in st["actions"]] == ["below_baseline"], st["actions"]  # said once
        # equal (14500 again): judged at comparable steps well past the baseline's 40, never acted on
        rc, doc = cli.json("restart", name, "--env", "TRAIN_TOKS=14500", "--env", "TRAIN_STEPS=0")
        assert rc == 0, doc
        wait_for(lambda: _steps(cli, name, 3) >= 90, timeout=60, what="attempt 3 to run past step 90")
        st = cli.status(name)
        assert st["attempt"] == 3 and st["state"] == "running" and not st.get("actions"), st
    finally:
        cli.json("stop", name, "--grace", "2")
