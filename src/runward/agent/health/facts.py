"""An attempt's facts, read where its log lives (for status, health, watch and the shim's health
actions; ops/health.py holds the health and watch ops):

Two kinds of alert, kept apart:
- the attempt's facts (a NaN/Inf loss, CUDA OOM, a traceback, NCCL, the OOM killer, the exit):
  found by one incremental scan of the attempt's part of the log, the same for every caller,
  its state and the facts kept beside the run's records (health.json). The part of a big log
  beyond FULL_BYTES from its end is skimmed (logmetrics/skim.py), so the first read finds
  every fact anywhere in it. status shows them (since_s skips old ones); a watch reports each
  fact once (then marks it "watched").
- a watch's own rules (floors, ceilings, drops: runward.toml's and the flags'): judged by a
  second scan (health/window.py's Judge) held in memory for that call only, over the watch's
  window: from its start, or a look-back since_s. Never stored, so never replayed by a later call.
- stall and straggler (health/stall.py): judged at each poll of a live job from stall.json's shared
  state (the step's progress is a fact of the run, not of the watch's window).
"""

import os
import time

from ..core import launchers
from .. import logmetrics
from ..logmetrics.kinds import FACT_KINDS
from ..core.procfs import live
from ..core.sidelock import side_lock
from ..core.store import read_json, write_atomic, write_json
from ..core.wire import json_dumps

POINTS = 2000
ALERTS = 200
MARKS = 64  # (time, offset, lines) marks: where the log had been read to, and when
FULL_BYTES = 8 << 20  # the newest part of the log parsed line by line in one call
NAMES = 256  # metrics whose last value is kept
VERSION = 2  # health.json: facts only (1 also kept every call's rule alerts)


def fact_rules(att, metrics=None):
    """The rules of the attempt's own scan: events and NaN only. The drop rule runs for its
    early median alone (a watch's drop rule compares with it), and only until it is known;
    its alerts are not facts."""
    out = {"drop_fraction": 0.5, "drop_median_only": True, "max_bytes": FULL_BYTES,
           "max_points": POINTS, "skim": True}
    if metrics:
        out["metrics"] = metrics  # runward.toml's named regexes: what metrics are, not rules
    job = att.get("job")
    out["alive"] = bool(job) and live(job) is not None
    launcher = launchers.named(att)
    if launcher is not None:  # an engine's job: alive while its engine says so (its light module)
        out["alive"] = launchers.queries(launcher).alive(att)
    out["exit"] = att.get("exit") or None
    if out["exit"] and (att.get("stop_requested") or out["exit"].get("by")):
        # a stop (runward's, a peer's, a health action's) ended it: its KILL after the grace
        # is the stop's, not the OOM killer's (logmetrics/job.py)
        out["exit"] = dict(out["exit"], stopped=True)
    return out


def _start_of(att):
    """The parser's first cursor for an attempt: its offset in the file it began in, which
    a rotation by size may since have renamed (the parser follows it there)."""
    lm = {"offset": int(att.get("log_offset") or 0)}
    if att.get("log_file"):
        lm["ino"], lm["dev"] = att["log_file"]
    return lm


def _load(path, att):
    saved = read_json(path) or {}
    if saved.get("attempt") != att.get("attempt"):
        # a new attempt: its part of the (appended) log starts after its header
        return {"attempt": att.get("attempt"), "v": VERSION, "points": [], "alerts": [],
                "lm": _start_of(att), "last": {}, "marks": []}
    if saved.get("v") != VERSION:  # an older record, facts and rules in one list
        saved["alerts"] = [a for a in saved.get("alerts") or [] if a.get("kind") in FACT_KINDS]
        lm = saved.get("lm") or {}
        lm["violating"] = {k: v for k, v in (lm.get("violating") or {}).items()
                           if k.startswith(("nan:", "nancount:"))}
        saved["v"] = VERSION
    return saved


def _mark(saved, now, res):
    """Remember where the log had been read to by NOW (a line start), thinned so that older
    marks are further apart: a look-back finds one near its start."""
    st = res["state"]
    offset = st["offset"] - len(st.get("carry", "").encode("latin-1"))
    marks = saved.setdefault("marks", [])
    if marks and marks[-1][1] == offset:
        return
    marks.append([now, offset, res["lines"]])
    if len(marks) > MARKS:
        half = len(marks) // 2
        marks[:half] = marks[:half:2]


def scan(store, att, metrics=None, lock_wait=None):
    """One incremental scan of the current attempt's part of the log for its facts; returns
    (saved record, new facts, new points). lock_wait: as stall.check's."""
    path = os.path.join(store.dir, "health.json")
    with side_lock(store, "health", lock_wait):
        saved = _load(path, att)
        before = json_dumps(saved, sort_keys=True)
        r = fact_rules(att, metrics)
        now = time.time()
        res = logmetrics.scan(att["log"], saved.get("lm") or {}, r, now)
        saved["lm"] = res["state"]
        saved["points"] = (saved.get("points", []) + res["points"])[-POINTS:]
        facts = [a for a in res["alerts"] if a["kind"] in FACT_KINDS]
        saved["alerts"] = (saved.get("alerts", []) + facts)[-ALERTS:]
        last = saved.setdefault("last", {})
        for p in res["points"]:
            for k, v in p["metrics"].items():
                if k in last or len(last) < NAMES:
                    last[k] = v
        _furthest(saved, res["points"])
        _mark(saved, now, res)
        saved["last_line"] = res.get("last_line") or saved.get("last_line", "")
        saved["alive"] = r["alive"]
        after = json_dumps(saved, sort_keys=True)
        if after != before:  # a quiet log: no write, no fsync
            # one line, the text just compared: indenting its ~2000 points for people
            # (write_json) cost a first status of a big log ~0.15 s more
            write_atomic(path, after + "\n")
        return saved, facts, res["points"]


STEP_NAMES = ("step", "global_step", "iteration", "iter", "num_updates", "train_step")


def _furthest(saved, points):
    """The furthest step the attempt's log showed (a supervised run's progress: supervise/progress.py);
    the last value is not it: an eval line or a resumed count may go back."""
    best = saved.get("max_step")
    for p in points:
        for k in STEP_NAMES:
            v = p["metrics"].get(k)
            if isinstance(v, (int, float)) and abs(v) < 1e18 and (best is None or v > best):
                best = int(v) if v == int(v) else v
    if best is not None:
        saved["max_step"] = best


def add_fact(store, att, a):
    """A fact the shim found outside the log (idle: nvidia-smi's utilization), kept with the
    log's facts: status, top, MCP and watch show it and a watch fails on it, as on a NaN."""
    path = os.path.join(store.dir, "health.json")
    with side_lock(store, "health"):
        saved = _load(path, att)
        saved["alerts"] = (saved.get("alerts", []) + [a])[-ALERTS:]
        write_json(path, saved)


def mark_watched(store, att, alerts):
    """The facts a watch reported are not reported by the next one."""
    keys = set((a.get("kind"), a.get("line_no"), a.get("t")) for a in alerts)
    path = os.path.join(store.dir, "health.json")
    with side_lock(store, "health"):
        saved = _load(path, att)
        for a in saved.get("alerts") or []:
            if (a.get("kind"), a.get("line_no"), a.get("t")) in keys:
                a["watched"] = True
        write_json(path, saved)


def summary(saved, series_len=60, since=None):
    """Every metric's last value, the main ones named (a step, the losses, the throughput),
    the throughput's series, and the attempt's facts (those of the last SINCE seconds)."""
    points = saved.get("points") or []
    last = dict(saved.get("last") or {})
    if not last:  # an older record, without "last"
        for p in points:
            last.update(p.get("metrics", {}))
    names = list(last)
    tp = logmetrics.throughput_metric(names)
    main = [n for n in names if n in ("step", "iteration", "iter", "epoch")
            or logmetrics.is_loss(n) or n == tp][:6]
    series = [p["metrics"][tp] for p in points if tp and tp in p.get("metrics", {})][-series_len:]
    facts = saved.get("alerts") or []
    if since is not None:
        cut = time.time() - float(since)
        facts = [a for a in facts if (a.get("t") or 0) >= cut]
    return {"metrics": last, "main_metrics": main, "throughput_metric": tp,
            "throughput_series": series, "alerts": facts, "points": len(points)}
