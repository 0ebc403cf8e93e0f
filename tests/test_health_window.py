"""Health you can gate on: `watch` judges its window and its own rules (never stored, never
replayed); the attempt's facts (NaN, OOM, traceback, NCCL, the OOM killer, the exit) are kept
with the attempt and shown alike by `status` and `watch`, the first read of a big log finding
them anywhere (the skim); every metric's last value in `status --json`; a tree's PSS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import EXAMPLE, wait_for
from runward.agent import logmetrics as lm
from runward.agent.logmetrics import skim as lm_skim

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
PY = sys.executable
FACTS = ("nan", "inf", "cuda_oom", "traceback", "nccl", "oom_killed")


def evidence(alerts):
    return [(a["kind"], a["line_no"], a["line"], a.get("repeats", 0)) for a in alerts]


def filler(step0, n):
    """Training lines of the shapes a long log is made of (no event, no NaN), including the
    near misses the skim's needles must pass over: Megatron's zero NaN count, INFO, memory."""
    out = []
    for s in range(step0, step0 + n):
        out.append("step %d loss %.4f tok/s %.1f lr 3.0e-04 memory: 31.7GiB" % (s, 2.0 + (s % 7) / 10, 14600.0 + s % 13))
        out.append(" iteration %8d/  500000 | elapsed time per iteration (ms): 812.3 | lm loss: 2.345678E+00 | "
                   "number of skipped iterations:   0 | number of nan iterations:   0 |" % s)
        out.append("INFO 05-01 12:00:00 metrics.py:449] Avg generation throughput: 1456.1 tokens/s, informative")
    return "\n".join(out) + "\n"


def events_log(path: Path, blocks: int = 40, block_lines: int = 400) -> None:
    """Filler with every fixture's events, and NaN runs, scattered through it."""
    events = [LOGS / n for n in ("cuda_oom.log", "cuda_error_oom.log", "cublas_alloc.log", "nccl_watchdog.log",
                                 "nccl_internal.log", "nccl_warn_ib.log", "killed.log", "killed_shell.log",
                                 "torchrun_sigkill.log", "nanogpt_nan.log", "megatron_ds_nan.log",
                                 "nemo_nccl_timeout.log", "dreamer_killed.log", "cuda_oom_legacy.log")]
    with open(path, "w") as f:
        step = 0
        for b in range(blocks):
            f.write(filler(step, block_lines // 3))
            step += block_lines // 3
            ev = events[b % len(events)]
            f.write(ev.read_text(errors="replace"))
            if b % 5 == 2:
                f.write("step %d loss nan tok/s 14000.0\nstep %d loss nan tok/s 14000.0\n" % (step, step + 1))
                f.write("Epoch 3: val_loss=inf, NaN seen\n")


def test_the_skim_finds_what_the_full_parse_finds(tmp_path):
    """The same alerts, lines and repeats, whether a log is parsed in full or mostly skimmed;
    and the skim also finds them when its chunks cut the log anywhere."""
    log = tmp_path / "train.log"
    events_log(log)
    size = log.stat().st_size
    now = time.time()
    full = lm.scan(str(log), {}, {"max_bytes": size + 1, "drop_fraction": 0}, now)
    facts = [a for a in full["alerts"] if a["kind"] in FACTS]
    assert {a["kind"] for a in facts} >= {"cuda_oom", "nccl", "oom_killed", "traceback", "nan"}
    old_chunk = lm_skim.CHUNK
    try:
        for chunk in (old_chunk, 4099, 65536):
            lm_skim.CHUNK = chunk
            sk = lm.scan(str(log), {}, {"max_bytes": 20000, "drop_fraction": 0, "skim": True}, now)
            assert sk["bytes_skimmed"] > size - 30000 and sk["more"] is False
            assert sk["lines"] == full["lines"] and sk["bytes"] == size
            assert evidence(sk["alerts"]) == evidence(facts), chunk
    finally:
        lm_skim.CHUNK = old_chunk


def test_every_event_pattern_has_a_needle():
    """Each line the parser calls an event, or a NaN/Inf loss, is hit by the skim's needles."""
    lines = [ln.encode() for n in sorted(os.listdir(LOGS)) if n.endswith(".log")
             for ln in (LOGS / n).read_text(errors="replace").splitlines()]
    lines += [b"loss: NaN", b"loss=nan,", b"lm loss: NAN |", b"loss inf", b"loss -Infinity", b"loss: INF",
              b"number of nan iterations:   3 |", "\u5df2\u6740\u6b7b".encode()]
    for ln in lines:
        if lm.EVENT_RE.search(ln) or (lm.parse_line(ln.decode("utf-8", "replace"))
                                       and any(v != v or v in (float("inf"), float("-inf"))
                                               for v in lm.parse_line(ln.decode("utf-8", "replace")).values())):
            assert lm_skim.hits(ln + b"\n"), ln
    for ln in (b"number of nan iterations:   0 |", b"INFO 05-01 memory: 31.7GiB informative", b"nanotron"):
        assert not lm_skim.hits(ln + b"\n"), ln
