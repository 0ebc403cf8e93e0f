"""Training health end to end: real example-job runs for each alert kind, read by `watch`,
`status` and `plot` through the agent, where the log lives."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, EXAMPLE, marked, wait_for

PY = sys.executable


def start(cli, name, *env, settle="0.3"):
    args = ["start", name, "--settle", settle, "--env", "TRAIN_STEP_SECONDS=0.05", "--env", "TRAIN_WORKERS=0",
            "--env", "TRAIN_ESCAPEE=0"]
    for e in env:
        args += ["--env", e]
    rc, doc = cli.json(*args, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    return doc["result"]


def watch(cli, name, *flags, window="20"):
    return cli.json("watch", name, "--for", window, *flags, timeout=120)


def test_healthy_window_exits_0(cli):
    start(cli, "ok")
    rc, doc = watch(cli, "ok", "--min", "tok_s=10000", window="1.5")
    assert rc == 0 and doc["result"]["healthy"] is True
    assert doc["result"]["throughput_metric"] == "tok_s" and doc["result"]["metrics"]["tok_s"] > 10000


@pytest.mark.parametrize("env,flags,kind", [
    (["TRAIN_NAN_AT=8"], [], "nan"),
    (["TRAIN_OOM_AT=6"], [], "cuda_oom"),
    (["TRAIN_CRASH_AT=6"], [], "traceback"),
    (["TRAIN_STALL_AT=6"], ["--stall", "1"], "stall"),
    ([], ["--min", "tok_s=20000"], "below_min"),
    ([], ["--max", "loss=5"], "above_max"),
    (["TRAIN_SLOW_AFTER=14", "TRAIN_SLOW_FACTOR=0.3"], [], "drop"),
    (["TRAIN_STEPS=5"], [], "exited"),
])
def test_each_alert_kind_from_a_real_run(cli, env, flags, kind):
    name = "a-" + kind.replace("_", "-")
    start(cli, name, *env, settle="0.1")
    rc, doc = watch(cli, name, *flags)
    assert rc == 1, doc
    kinds = [a["kind"] for a in doc["result"]["alerts"]]
    assert kind in kinds, kinds
    alert = next(a for a in doc["result"]["alerts"] if a["kind"] == kind)
    assert alert["detail"] and "t" in alert
    if kind in ("nan", "cuda_oom", "traceback", "below_min", "above_max"):
        assert alert["line"]  # the line that raised it


def test_oom_killer_evidence_when_killed_by_sigkill(cli):
    res = start(cli, "k9", "TRAIN_STEP_SECONDS=0.05")
    os.kill(res["pid"], signal.SIGKILL)
    rc, doc = watch(cli, "k9")
    assert rc == 1
    kinds = {a["kind"] for a in doc["result"]["alerts"]}
    assert {"exited", "oom_killed"} <= kinds
    ev = next(a for a in doc["result"]["alerts"] if a["kind"] == "oom_killed")
    assert ev["evidence"] == "exit by SIGKILL" and ev["certain"] is False


def test_nccl_error_line(cli):
    line = ("[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
            "milliseconds before timing out.")
    rc, doc = cli.json("start", "nccl", "--settle", "0.2", "--sh", f"echo 'step 1 loss 2.0'; echo '{line}'; exec sleep 300")
    assert rc == 0
    rc, doc = watch(cli, "nccl")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "nccl"


def test_status_shows_metrics_and_series(cli):
    start(cli, "st")
    wait_for(lambda: len((cli.status("st").get("health") or {}).get("throughput_series") or []) >= 5,
             what="five throughput points")
    st = cli.status("st")
    h = st["health"]
    assert h["throughput_metric"] == "tok_s" and {"loss", "step", "tok_s"} <= set(h["metrics"])
    p = cli.run("status", "st")
    assert "tok_s: " in p.stdout and any(c in p.stdout for c in "▁▂▃▄▅▆▇█")


def test_watch_rules_from_runward_toml(cli):
    (cli.cwd / "runward.toml").write_text('[runs.cfg]\ncommand = ["%s", "%s"]\nenv = { TRAIN_STEP_SECONDS = "0.05" }\n'
                                          'settle = 0.2\n[runs.cfg.health]\nmin = { tok_s = 99999 }\n' % (PY, EXAMPLE))
    rc, doc = cli.json("start", "cfg")
    assert rc == 0, doc
    rc, doc = watch(cli, "cfg")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "below_min"


def test_watch_bad_input(cli):
    start(cli, "bi")
    rc, doc = cli.json("watch", "bi", "--min", "tok_s")
    assert rc == 2 and "--min" in doc["error"]["message"]
    rc, doc = cli.json("watch", "nope")
    assert rc == 4


def test_plot_writes_a_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    start(cli, "pl", "TRAIN_NAN_AT=15")
    wait_for(lambda: "nan" in Path(cli.status("pl")["log"]["path"]).read_text(), what="NaN lines")
    out = tmp_path / "pl.png"
    rc, doc = cli.json("plot", "pl", "-o", str(out))
    assert rc == 0, doc
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and doc["result"]["alerts"] >= 1


def test_watch_over_ssh(tmp_path):
    tb = testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path)
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    home = f"/tmp/rw-watch-{uuid.uuid4().hex[:8]}"
    (tmp_path / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{home}"\n')
    try:
        rc, doc = c.json("start", "w", "--on", "h", "--settle", "0.2", "--env", "TRAIN_STEP_SECONDS=0.05",
                         "--env", "TRAIN_NAN_AT=6", "--", "python3", str(EXAMPLE))
        assert rc == 0, doc
        rc, doc = c.json("watch", "w", "--on", "h", "--for", "20")
        assert rc == 1 and doc["result"]["alert"]["kind"] == "nan"
        assert c.json("stop", "w", "--on", "h")[0] == 0
    finally:
        for pid in marked("w."):
            os.kill(pid, signal.SIGKILL)


def test_watch_reports_a_fact_a_concurrent_status_stored_between_its_polls(cli, tmp_path):
    """Two readers of one run: a `watch` and a `status`. A NaN written while the watch waits
    between polls, and read first by the status (which stores it in the run's facts), is
    still the watch's alert: a fact is the run's, whichever reader scanned the log first.
    The watch is held between polls by SIGSTOP (its CLI and agent, one process group), so the
    status reads first every time; the log and health.json on disk are the ground truth."""
    import subprocess
    import time
    trigger = tmp_path / "nan-now"
    job = (f'echo "step 1 loss 2.5"; while [ ! -e {trigger} ]; do sleep 0.05; done; '
           'echo "step 2 loss nan"; exec sleep 300')
    rc, doc = cli.json("start", "cw", "--settle", "0.3", "--sh", job)
    assert rc == 0, doc
    health = cli.home / "runs" / "cw" / "health.json"
    assert not health.exists()  # nobody has scanned the log yet: the watch's first scan will
    w = subprocess.Popen(cli.argv("watch", "cw", "--for", "8", "--json"), cwd=cli.cwd, env=cli.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: health.exists() and '"max_step": 1' in health.read_text(), what="the watch's first scan")
        held = _tree(w.pid)  # the CLI and its agent (a process group of its own)
        for pid in held:
            os.kill(pid, signal.SIGSTOP)  # between its polls
        trigger.touch()
        log = cli.home / "runs" / "cw" / "log"
        wait_for(lambda: "loss nan" in log.read_text(), what="the NaN line in the log")
        st = cli.status("cw")  # the other reader: it scans the NaN first and stores it
        assert [a["kind"] for a in st["health"]["alerts"]] == ["nan"], st["health"]
        assert '"kind": "nan"' in health.read_text().replace('"kind":"nan"', '"kind": "nan"')
        t0 = time.monotonic()
        for pid in held:
            os.kill(pid, signal.SIGCONT)
        out, err = w.communicate(timeout=60)
    finally:
        if w.poll() is None:
            for pid in _tree(w.pid):
                os.kill(pid, signal.SIGCONT)
            w.kill()
    assert w.returncode == 1, (out, err)
    assert json.loads(out)["result"]["alert"]["kind"] == "nan", out
    assert time.monotonic() - t0 < 5, "the watch ran out its window instead of reporting the stored fact"
    cli.json("stop", "cw", "--grace", "2")


def _tree(root: int) -> list[int]:
    """root and its descendants, from /proc (each task's children)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out
