"""top shows this attempt's throughput against the best earlier attempt (issue 30), readable
at 80 and 160 columns. Ground truth: the speeds the example job printed (TRAIN_TOKS sets them):
attempt 1 at 14500 tok/s, attempt 2 at 9000, so about -37.9%."""

from __future__ import annotations

import re
import uuid

import pytest

from conftest import EXAMPLE, wait_for
from test_top import PY, Terminal, needs_rich, needs_tmux


@pytest.fixture
def two_attempts(cli):
    name = f"tb{uuid.uuid4().hex[:6]}"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    env = ["TRAIN_STEP_SECONDS=0.05", "TRAIN_WORKERS=0", "TRAIN_ESCAPEE=0"]
    args = [a for kv in (*env, "TRAIN_STEPS=30", "TRAIN_TOKS=14500") for a in ("--env", kv)]
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *args, "--", "python3", "train.py")
    assert rc == 0, doc
    wait_for(lambda: cli.status(name)["state"] == "exited", 60, "attempt 1 to exit")
    rc, doc = cli.json("restart", name, "--env", "TRAIN_TOKS=9000", "--env", "TRAIN_STEPS=100000", "--settle", "0.3")
    assert rc == 0, doc
    yield name
    cli.json("stop", name, "--grace", "2")


@needs_tmux
@needs_rich
@pytest.mark.parametrize("width", [80, 160])
def test_top_shows_the_change_against_the_best_earlier_attempt(cli, tmp_path, two_attempts, width):
    name = two_attempts
    rc, doc = cli.json("history", name)
    assert rc == 0, doc
    best = doc["result"]["attempts"][0]["throughput"]["median"]
    assert best == pytest.approx(14500, rel=0.05)  # what the job printed (test_ledger checks it line by line)
    t = Terminal(tmp_path, cli.env, cli.cwd, [PY, "-m", "runward", "top", "--interval", "0.5"], width=width)
    try:
        screen = t.shows(r"vs best #1 [-+]\d+\.\d%")
        pct = float(re.search(r"vs best #1 ([-+]\d+\.\d)%", screen).group(1))
        assert pct == pytest.approx((9000 / best - 1) * 100, abs=3), screen
        line = next(ln for ln in screen.splitlines() if "vs best #1" in ln)
        assert len(line) <= width, line
        t.keys("q")
        assert t.exit_code() == 0
    finally:
        t.close()
