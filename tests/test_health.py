"""runward.views.health: what a person sees of the health op's answer (fixture logs, real scans)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from runward.views import health  # noqa: E402
from runward.agent import logmetrics as lm  # noqa: E402  (the parser, as the agent runs it)

LOGS = ROOT / "tests" / "fixtures" / "logs"


def scan(name, **rules):
    return lm.scan(str(LOGS / name), {}, rules, time.time())


def test_sparkline_scales_lowest_to_highest():
    assert health.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert health.sparkline([5, 5, 5]) == "▄▄▄"
    assert health.sparkline([]) == ""
    assert health.sparkline([3, None, 1]) == "█▁"  # not-a-number values are skipped


def test_sparkline_shows_nan_and_inf_as_bang():
    assert health.sparkline([1.0, float("nan"), 3.0, float("inf")]) == "▁!█!"
    assert health.sparkline([1, "nan", 2, "-inf"]) == "▁!█!"  # as the agent's JSON says them
    assert health.sparkline(["nan", "nan"]) == "!!"


def test_sparkline_buckets_to_width_without_hiding_a_nan():
    values = list(range(300))
    line = health.sparkline(values, width=30)
    assert len(line) == 30 and line[0] == "▁" and line[-1] == "█"
    values[150] = math.nan
    line = health.sparkline(values, width=30)
    assert line.count("!") == 1 and len(line) == 30
    assert len(health.sparkline(range(10), width=30)) == 10


def test_format_alert_nan():
    res = scan("nanogpt_nan.log")
    text = health.format_alert(res["alerts"][0])
    assert "\n" not in text
    assert "NaN: loss is NaN" in text
    assert "line 5" in text and "iter 3010: loss nan" in text
    assert text.startswith("2023-03-22 09:32:52")  # the log's own time, with its date


def test_format_alert_events():
    oom = health.format_alert(scan("cuda_oom.log")["alerts"][0])
    assert "CUDA OOM" in oom and "torch.OutOfMemoryError: CUDA out of memory" in oom
    assert "line 10" in oom
    nccl = health.format_alert(scan("nccl_watchdog.log")["alerts"][0])
    assert "NCCL" in nccl and "+1 more like it" in nccl
    stall = {"kind": "stall", "t": time.time(), "line_no": None, "line": None,
             "detail": "no new log output for 412 s (stall limit 300 s) while the job is alive"}
    text = health.format_alert(stall)
    assert "stall: no new log output for 412 s" in text and "line" not in text.split(":", 3)[-1]
    drop = health.format_alert({"kind": "drop", "t": None, "line_no": 12, "line": "tok/s 7000",
                                "detail": "tok_s = 7000 for 3 points in a row"})
    assert drop == "--:--:-- throughput drop: tok_s = 7000 for 3 points in a row " \
                   "(line 12: tok/s 7000)"


def test_summarize_the_main_metrics():
    # Megatron-LM's throughput is its time per iteration (read inversely by the rules).
    assert health.summarize(scan("megatron.log")["points"]) == pytest.approx(
        {"iteration": 124.0, "lm_loss": 2.55952, "elapsed_time_per_iteration_ms": 89474.8,
         "learning_rate": 9.337e-06, "grad_norm": 0.279})
    s = health.summarize(scan("cuda_oom.log")["points"])
    assert list(s) == ["step", "loss", "tok_s", "lr"]
    assert s["tok_s"] == 14488.0
    s = health.summarize(scan("nanogpt_nan.log")["points"])
    assert s == {"iter": 3020.0, "loss": "nan"}  # the last value, NaN as the agent says it
    s = health.summarize(scan("fairseq_legacy.log")["points"])
    assert list(s) == ["num_updates", "loss", "wps", "lr", "gnorm"]
    assert health.summarize([]) == {}


def test_series_carries_the_step_forward():
    points = [{"line": 1, "t": 1.0, "metrics": {"step": 10, "loss": 2.0}},
              {"line": 2, "t": 2.0, "metrics": {"tok_s": 14000}},
              {"line": 3, "t": 3.0, "metrics": {"step": 11, "loss": "nan"}}]
    assert health.series(points, "tok_s") == ([10.0], [14000.0])
    xs, ys = health.series(points, "loss")
    assert xs == [10.0, 11.0] and ys[0] == 2.0 and math.isnan(ys[1])
    assert health.series(points, "loss", x="time")[0] == [1.0, 3.0]
    with pytest.raises(ValueError):
        health.series(points, "loss", x="bogus")


def test_plot_writes_a_png_with_a_panel_per_metric(tmp_path):
    pytest.importorskip("matplotlib")
    res = scan("nanogpt_nan.log")
    out = health.plot(res["points"], res["alerts"], ["loss", "mfu"], str(tmp_path / "h.png"))
    data = Path(out).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    res = scan("megatron.log")
    out = health.plot(res["points"], res["alerts"], None, str(tmp_path / "t.png"), x="time")
    assert Path(out).stat().st_size > 10_000
    with pytest.raises(ValueError, match="no metric"):
        health.plot([], [], None, str(tmp_path / "none.png"))


def test_plot_without_matplotlib_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(ImportError, match="pip install matplotlib"):
        health.plot([{"line": 1, "t": 0, "metrics": {"loss": 1.0}}], [], None,
                    str(tmp_path / "x.png"))


def test_health_imports_the_parser_in_one_place():
    """The parser lives in runward.agent.logmetrics (shipped to targets); health.py imports
    it once."""
    src = (ROOT / "src" / "runward" / "views" / "health.py").read_text()
    assert src.count("from ..agent import logmetrics as _lm") == 1


JOB_OOM = ("import sys, time; print('step 1 loss 2.0', flush=True); time.sleep(0.3); "
           "print('step 2 loss nan', flush=True); "
           "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', flush=True); sys.exit(1)")


def test_an_alert_carries_the_time_its_line_was_written_not_the_time_it_was_read(cli):
    """A CUDA OOM line without a timestamp was stamped with the time a read noticed it: 5 s
    after the job's exit, so the view showed the cause after its effect. Each alert of an
    untimed line carries the time its log was last written (the file's mtime, read here),
    which is before the exit the shim recorded, however late the read comes."""
    import json
    import os
    assert cli.run("start", "oom", "--settle", "0", "--", sys.executable, "-c", JOB_OOM).returncode == 0
    record = cli.home / "runs" / "oom" / "attempts" / "1.json"
    deadline = time.time() + 20
    while "exit" not in json.loads(record.read_text()) or json.loads(record.read_text())["exit"] is None:
        assert time.time() < deadline, "the job's exit was never recorded"
        time.sleep(0.1)
    exited_at = json.loads(record.read_text())["exit"]["at"]
    time.sleep(3)  # the read comes late, as a person's status does
    rc, doc = cli.json("status", "oom")
    assert rc == 0, doc
    run = doc["result"]["runs"][0]
    written = os.stat(run["log"]["path"]).st_mtime
    alerts = {a["kind"]: a for a in run["health"]["alerts"]}
    assert {"cuda_oom", "nan", "exited"} <= set(alerts), alerts
    for kind in ("cuda_oom", "nan"):
        assert abs(alerts[kind]["t"] - written) < 0.01 and alerts[kind]["t"] <= exited_at, (kind, alerts, exited_at)
    assert alerts["exited"]["t"] == exited_at
    assert doc["result"]["time"] - alerts["cuda_oom"]["t"] > 2.5
