"""health and watch: the run's log scanned where it lives, incrementally (logmetrics.scan),
with the parser's state, a bounded series of points and the alerts kept beside the run's
records (health.json)."""

import fcntl
import os
import time

from .. import logmetrics
from ..procfs import live
from ..store import RunStore, read_json, write_json
from ..wire import AgentFailure, json_dumps

POINTS = 2000
ALERTS = 200


def rules(req_rules, att):
    out = {"drop_fraction": 0.5, "drop_points": 3, "early_points": 10, "stall_seconds": None,
           "max_bytes": 32 << 20, "max_points": POINTS}
    for k, v in (req_rules or {}).items():
        if v is not None:
            out[k] = v
    job = att.get("job")
    out["alive"] = bool(job) and live(job) is not None
    out["exit"] = att.get("exit") if att.get("exit") else None
    return out


def scan(store, att, req_rules):
    """One incremental scan of the current attempt's part of the log; returns
    (saved record, new alerts, new points)."""
    path = os.path.join(store.dir, "health.json")
    lock = os.open(os.path.join(store.home.path, "runs", "." + store.name + ".health.lock"),
                   os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        saved = read_json(path) or {}
        if saved.get("attempt") != att.get("attempt"):
            # a new attempt: its part of the (appended) log starts after its header
            saved = {"attempt": att.get("attempt"), "lm": _start_of(att), "points": [], "alerts": []}
        before = json_dumps(saved, sort_keys=True)
        r = rules(req_rules, att)
        res = logmetrics.scan(att["log"], saved.get("lm") or {}, r, time.time())
        saved["lm"] = res["state"]
        saved["points"] = (saved.get("points", []) + res["points"])[-POINTS:]
        saved["alerts"] = (saved.get("alerts", []) + res["alerts"])[-ALERTS:]
        saved["last_line"] = res.get("last_line") or saved.get("last_line", "")
        saved["alive"] = r["alive"]
        if json_dumps(saved, sort_keys=True) != before:  # a quiet log changes nothing: no write, no fsync
            write_json(path, saved)
        return saved, res["alerts"], res["points"]
    finally:
        os.close(lock)


def _start_of(att):
    """The parser's first cursor for an attempt: its offset in the file it began in, which
    a rotation by size may since have renamed (the parser follows it there)."""
    lm = {"offset": int(att.get("log_offset") or 0)}
    if att.get("log_file"):
        lm["ino"], lm["dev"] = att["log_file"]
    return lm


def summary(saved, series_len=60):
    points = saved.get("points") or []
    names = []
    for p in points:
        for k in p.get("metrics", {}):
            if k not in names:
                names.append(k)
    tp = logmetrics.throughput_metric(names)
    last = {}
    for p in points:
        last.update(p.get("metrics", {}))
    main = [n for n in names if n in ("step", "iteration", "iter", "epoch") or logmetrics.is_loss(n) or n == tp][:6]
    series = [p["metrics"][tp] for p in points if tp and tp in p.get("metrics", {})][-series_len:]
    return {"metrics": {k: last[k] for k in main if k in last}, "throughput_metric": tp,
            "throughput_series": series, "alerts": (saved.get("alerts") or [])[-5:],
            "points": len(points)}


def _latest(req, home):
    store = RunStore.existing(home, req.get("name"))
    att = store.latest()
    if not att or not att.get("log"):
        raise AgentFailure("RunNotFound", "run %s has no attempt yet" % store.name, "start it first")
    return store, att


def health(req, home):
    store, att = _latest(req, home)
    saved, new_alerts, _ = scan(store, att, req.get("rules"))
    out = summary(saved)
    out.update({"name": store.name, "attempt": att.get("attempt"), "new_alerts": new_alerts})
    if req.get("points"):
        out["series"] = saved.get("points") or []
        out["all_alerts"] = saved.get("alerts") or []
    return out


def watch(req, home, emit):
    """Follow health for for_s seconds: return at the first alert, or healthy at the end.
    The log is polled every 0.5 s (no inotify in the stdlib); each poll reads only new bytes."""
    store, att = _latest(req, home)
    window = float(req.get("for_s") or 60.0)
    t0 = time.monotonic()
    seen_before = None
    while True:
        att = store.latest() or att
        saved, new_alerts, new_points = scan(store, att, req.get("rules"))
        if seen_before is None:
            # alerts raised before this watch began still count: the run is not healthy now
            new_alerts = [a for a in saved.get("alerts") or [] if a.get("kind") != "stall"] or new_alerts
            seen_before = True
        if new_points:
            emit({"points": new_points[-20:]})
        if new_alerts:
            out = summary(saved)
            out.update({"name": store.name, "attempt": att.get("attempt"), "healthy": False,
                        "alert": new_alerts[0], "alerts": new_alerts, "watched_s": round(time.monotonic() - t0, 2)})
            return out
        if time.monotonic() - t0 >= window:
            out = summary(saved)
            out.update({"name": store.name, "attempt": att.get("attempt"), "healthy": True,
                        "watched_s": round(time.monotonic() - t0, 2)})
            return out
        time.sleep(min(0.5, max(0.0, window - (time.monotonic() - t0))))
