"""top shows this attempt's throughput against the best earlier attempt (issue 30), readable
at 80 and 160 columns. Ground truth: the speeds the example job printed (TRAIN_TOKS sets them):
attempt 1 at 14500 tok/s, attempt 2 at 9000, so about -37.9%."""

from __future__ import annotations

import re
import uuid

import pytest

from conftest import EXAMPLE, wait_for
from helpers_top import PY, Terminal, needs_rich, needs_tmux


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


def test_top_compares_with_the_rules_attempt_n_not_the_best(cli, two_attempts):
    """A run whose health rule says baseline = "attempt:2" (runward.toml): top's change is
    against attempt 2, as watch and the shim judge it, not against the fastest attempt."""
    import json
    import subprocess
    import sys
    name = two_attempts

    def a2_median():
        rows = cli.json("history", name)[1]["result"]["attempts"]
        tp = (rows[1].get("throughput") or {}) if len(rows) > 1 else {}
        return tp.get("median")
    wait_for(a2_median, 60, "attempt 2's median throughput")
    rc, doc = cli.json("restart", name, "--env", "TRAIN_TOKS=12000", "--settle", "0.3")
    assert rc == 0, doc
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "train.py"]\n'
        f'[runs.{name}.health]\ntok_s = {{ min_ratio = 0.9, baseline = "attempt:2" }}\n')
    probe = ("import json, sys\nfrom runward.verbs import top\nfrom runward.spec.config import load as load_config\n"
             "from runward.targets import parse_target\n"
             "cfg = load_config()\nwhich = top.baseline_rules(cfg)\n"
             "part = top.collect_target(parse_target('local'), which)\n"
             "r = [r for r in part['runs'] if r['name'] == sys.argv[1]][0]\n"
             "print(json.dumps({'which': which, 'baseline': r['baseline']}))\n")
    p = subprocess.run([sys.executable, "-c", probe, name], cwd=cli.cwd, env=cli.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["which"] == {name: "attempt:2"}, got
    base = got["baseline"]
    assert base["attempt"] == 2 and base["which"] == "attempt", base
    assert base["median"] == pytest.approx(9000, rel=0.05), base   # what attempt 2 printed, not the best 14500
    from runward.verbs._topbase import change
    s = change({"baseline": base, "health": {"throughput_metric": base["metric"], "throughput_series": [12000.0]}})
    assert s == f"vs #2 {(12000 / base['median'] - 1) * 100:+.1f}%", s
