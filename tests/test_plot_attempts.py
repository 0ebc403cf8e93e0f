"""`runward plot NAME --attempts 1,2` (issue 30): x = step, one line per attempt, labelled.
Ground truth: the tok/s and loss the example job itself printed in each attempt's log; the
figure's data is what matplotlib drew (read back from its lines), and the PNG is really written."""

from __future__ import annotations

import re
import uuid

import pytest

from conftest import EXAMPLE, env_flags, exited_attempt

pytest.importorskip("matplotlib", reason="plot needs matplotlib (the `plot` extra)")

FAST = ["TRAIN_STEP_SECONDS=0.05", "TRAIN_STEPS=30", "TRAIN_WORKERS=0", "TRAIN_ESCAPEE=0"]


def _printed(cli, name, n):
    """[(step, tok_s, loss)] as the job printed them in attempt N's log."""
    rc, doc = cli.json("logs", name, "--attempt", str(n))
    assert rc == 0, doc
    out = []
    for ln in doc["result"]["lines"]:
        m = re.search(r"step (\d+)\b.*", ln)
        t, lo = re.search(r"tok/s ([0-9.]+)", ln), re.search(r"loss ([0-9.]+)", ln)
        if m and t and lo:
            out.append((int(m.group(1)), float(t.group(1)), float(lo.group(1))))
    assert len(out) == 30, doc["result"]["lines"][-5:]
    return out


def test_plot_attempts_overlays_what_each_attempt_printed(cli):
    name = f"po{uuid.uuid4().hex[:6]}"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *env_flags(*FAST, "TRAIN_TOKS=14500"),
                       "--", "python3", "train.py")
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    rc, doc = cli.json("restart", name, *env_flags("TRAIN_TOKS=9000"))
    assert rc == 0, doc
    exited_attempt(cli, name, 2)
    png = cli.cwd / "over.png"
    rc, doc = cli.json("plot", name, "--attempts", "1,2", "-o", str(png))
    assert rc == 0, doc
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = doc["result"]
    assert res["attempts"] == [1, 2] and set(res["panels"]) == {"tok_s", "loss"}, res
    for n in (1, 2):
        printed = _printed(cli, name, n)
        (tp,) = [ln for ln in res["panels"]["tok_s"] if ln["attempt"] == n]
        (loss,) = [ln for ln in res["panels"]["loss"] if ln["attempt"] == n]
        assert tp["label"] == f"#{n}" and tp["x"] == [s for s, _, _ in printed], tp["x"]
        assert tp["y"] == pytest.approx([t for _, t, _ in printed], rel=1e-6)
        assert loss["y"] == pytest.approx([lo for _, _, lo in printed], rel=1e-3)
    slow, fast = (sorted(ln["y"])[15] for ln in sorted(res["panels"]["tok_s"], key=lambda ln: -ln["attempt"]))
    assert slow / fast == pytest.approx(9000 / 14500, rel=0.05)  # the two lines are the two speeds


def test_plot_attempts_names_a_missing_attempt_and_one_without_metrics(cli):
    name = f"pm{uuid.uuid4().hex[:6]}"
    (cli.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "0.3", *env_flags(*FAST), "--", "python3", "train.py")
    assert rc == 0, doc
    exited_attempt(cli, name, 1)
    quiet = cli.cwd / "quiet"
    quiet.mkdir()
    (quiet / "train.py").write_text("import time\nprint('hello, no metrics here', flush=True)\ntime.sleep(1)\n")
    rc, doc = cli.json("restart", name, "--cwd", str(quiet), "--settle", "0.3")
    assert rc == 0, doc
    exited_attempt(cli, name, 2)
    out = str(cli.cwd / "x.png")
    p = cli.run("plot", name, "--attempts", "1,7", "-o", out)
    assert p.returncode == 4 and "no attempt 7" in p.stderr and "1-2" in p.stderr, p.stderr
    p = cli.run("plot", name, "--attempts", "1,2", "-o", out)
    assert p.returncode == 2 and "attempt 2" in p.stderr and "no metrics" in p.stderr, p.stderr
    p = cli.run("plot", name, "--attempts", "1,x", "-o", out)
    assert p.returncode == 2 and "--attempts" in p.stderr and "'x'" in p.stderr, p.stderr
    assert not (cli.cwd / "x.png").exists()
