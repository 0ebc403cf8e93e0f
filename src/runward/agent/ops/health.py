"""health and watch: an attempt's facts (health/facts.py's scan of the run's log where it
lives) and a watch's judges (health/window.py's rules, health/stall.py, health/baseline.py's
baseline), asked the same way at each poll."""

import time

from ..health.facts import mark_watched, scan, summary
from ..logmetrics.alerts import alert
from ..core.store import RunStore
from ..core.wire import AgentFailure, caller_gone


def _latest(req, home):
    store = RunStore.existing(home, req.get("name"))
    att = store.latest()
    if not att or not att.get("log"):
        raise AgentFailure("RunNotFound", "run %s has no attempt yet" % store.name, "start it first")
    return store, _adopted(store, att)


def _adopted(store, att):
    """An engine's attempt whose start never saw its driver has it found and kept
    (core/NAME.py's adopt): the watch's clock and paused check need its pid and start."""
    from ..core import launchers
    name = launchers.named(att)
    q = launchers.queries(name) if name else None
    return q.adopt(store, att) if hasattr(q, "adopt") else att


def health(req, home):
    store, att = _latest(req, home)
    saved, new_facts, _ = scan(store, att, (req.get("rules") or {}).get("metrics"))
    out = summary(saved)
    out.update({"name": store.name, "attempt": att.get("attempt"), "new_alerts": new_facts})
    if req.get("points"):
        out["series"] = saved.get("points") or []
        out["all_alerts"] = saved.get("alerts") or []
    return out


def watch(req, home, emit):
    """Follow health for for_s seconds: return at the first alert (a fact not reported to a
    watch yet, or one of this call's rules), or healthy at the end. The log is polled every
    0.5 s (no inotify in the stdlib); each poll reads only new bytes."""
    store, att = _latest(req, home)
    window = float(req.get("for_s") or 60.0)
    rules = req.get("rules") or {}
    t0, start = time.monotonic(), time.time()
    saved, _, new_points = scan(store, att, rules.get("metrics"))
    judges = _judges(store, att, saved, rules, start, req.get("since_s"))
    facts = _unwatched(saved)
    while True:
        if new_points:
            emit({"points": new_points[-20:]})
        # the window's rules read what the log gained at every poll; the other judges are
        # asked only while nothing was found
        alerts = facts + judges[0].poll(att, saved["alive"], time.time())
        for judge in judges[1:]:
            alerts += judge.poll(att, saved["alive"], time.time()) if not alerts else []
        ended = not saved["alive"]
        if alerts or ended or time.monotonic() - t0 >= window:
            break
        if caller_gone(min(0.5, max(0.0, window - (time.monotonic() - t0)))):
            return {"name": store.name, "caller_gone": True}  # nobody reads it: the watch ends
        latest = _adopted(store, store.latest() or att)
        restarted = latest.get("attempt") != att.get("attempt")
        att = latest
        saved, _, new_points = scan(store, att, rules.get("metrics"))
        if restarted:  # restarted meanwhile: judge the new one
            judges = _judges(store, att, saved, rules, time.time(), None)
        facts = _unwatched(saved)
    if not alerts and not saved["alive"]:
        saved = _engine_end(store, att, rules.get("metrics")) or saved
        facts = _unwatched(saved)
    out = _reply(store, att, saved, alerts, facts, judges[0], round(time.monotonic() - t0, 2))
    if rules.get("baseline"):
        out["baseline"] = judges[-1].last  # what the baseline rules saw last (docs/history.md)
    return out


def _engine_end(store, att, metrics):
    """An engine's attempt (agent/core/launchers.py) has its end in its record once its
    launcher asked the engine (status, stop): a watch that saw it end asks the launcher too,
    so that it says the end as status does. The scan's state after, or None where there is nothing to ask."""
    from ..core import launchers
    from . import launcher_ops
    launcher = launchers.named(att)
    if launcher is None or (att.get("exit") or {}).get("state"):
        return None
    try:
        launcher_ops(launcher).status_of(store, att, with_details=False)
    except AgentFailure:  # the engine cannot be asked now: the watch says what it saw
        return None
    return scan(store, store.attempt(att["attempt"]) or att, metrics)[0]


def _unwatched(saved):
    """Every fact of the run's health state that no watch has reported yet, not only those
    this watch's own scan found: another reader (a status, the shim's idle check) may have
    scanned the new lines, or added a fact, first."""
    return [a for a in saved.get("alerts") or [] if not a.get("watched")]


def _judges(store, att, saved, rules, start, since_s):
    """A watch's judges, each asked the same way (poll(att, alive, now) -> alerts): its
    window's rules (floors, ceilings, drop, log silence), stall and straggler, and, where the
    rules have one, the baseline's."""
    from ..health.window import Judge
    from ..health.stall import StallJudge
    out = [Judge(att, saved, rules, start, since_s), StallJudge(store, rules)]
    if rules.get("baseline"):
        from ..health.baseline import BaselineJudge
        out.append(BaselineJudge(store, att, rules["baseline"]))
    return out


def _reply(store, att, saved, alerts, facts, judge, watched_s):
    out = summary(saved)
    del out["alerts"]  # the attempt's facts are status's; a watch says what it saw
    out.update({"name": store.name, "attempt": att.get("attempt"), "watched_s": watched_s,
                "alive": saved["alive"], "window": judge.window()})
    rec = store.attempt(att["attempt"]) or {}
    acts = rec.get("actions")
    if acts:  # what the shim's health actions did (supervise/health_actions.py), with their evidence
        out["actions"] = acts
    if rec.get("idle_unjudged") and saved["alive"]:  # the shim's idle rule could not be judged
        out["idle_unjudged"] = rec["idle_unjudged"]
    if rec.get("shim_failed") and saved["alive"]:
        # the shim's own failure (shim.failed): the job runs on with nothing acting on its
        # alerts or restarting it; a healthy window says nothing of that, so it is said here
        out["shim_failed"] = rec["shim_failed"]
    if facts:
        mark_watched(store, att, facts)
    if not alerts and not saved["alive"]:
        # The job is gone: no window can be healthy. Its end is the answer (the attempt's
        # exit fact, reported before or not), not a replay of its log's alerts.
        ends = [a for a in saved.get("alerts") or [] if a.get("kind") == "exited"]
        alerts = ends[-1:] or [alert(
            "exited", time.time(), "the job is not running (no exit recorded)")]
        out["ended"] = True
    out["healthy"] = not alerts
    if alerts:
        out.update({"alert": alerts[0], "alerts": alerts})
    return out
