"""Human rendering shared by several verbs, and of errors (a verb's own rendering lives in
its module under verbs/). JSON output needs none of this."""

from __future__ import annotations

import time

from . import rayview, slurmview

# The engines' views (docs/architecture.md, "a new engine"): each module's ENGINE is the key of
# the results and history rows it renders.
ENGINE_VIEWS = {v.ENGINE: v for v in (slurmview, rayview)}


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def describe_exit(ex: dict | None) -> str:
    if not ex or ex.get("unknown") or (ex.get("code") is None and not ex.get("signal")):
        # e.g. an orphan's stop: it sent TERM, but how the job ended nobody saw
        return "exit status unknown"
    if ex.get("signal"):
        return f"killed by {ex['signal']}"
    return f"exit code {ex.get('code')}"


def fmt_num(v) -> str:
    if isinstance(v, float):
        return f"{v:g}" if abs(v) < 1e6 else f"{v:.4g}"
    return str(v)


def render_error(cmd: str, e) -> str:
    lines = [f"runward {cmd}: error: {e.message}"]
    if e.hop:
        lines.append(f"  at hop: {e.hop}")
    d = e.details or {}
    if d.get("stderr_tail"):
        lines.append("  stderr: " + d["stderr_tail"].replace("\n", "\n          "))
    if d.get("failed_step"):
        lines.append(f"  failed step: {d['failed_step']}")
    res = e.result or {}
    if res.get("exit"):
        lines.append(f"  the job ended: {describe_exit(res['exit'])}")
    if res.get("last_lines"):
        lines.append("  last log lines:")
        lines += ["    | " + ln for ln in res["last_lines"]]
    for s in res.get("survivors") or []:
        lines.append(f"  survivor: pid {s['pid']} state {s.get('state', '?')} {s.get('note', '')} {s.get('cmd', '')}")
    for g in res.get("gpus_held") or []:
        lines.append(f"  {g}")
    if d.get("remote_traceback"):
        lines.append("  remote traceback:\n" + d["remote_traceback"])
    if e.hint:
        lines.append(f"  hint: {e.hint}")
    return "\n".join(lines)


def engine_view(r: dict):
    """The view of an engine's result or history row (its key: the engine's name); None for
    a run the shim forked."""
    return next((v for k, v in ENGINE_VIEWS.items() if r.get(k)), None)


def engine_job(d: dict):
    """The id of an engine's job a result or a started event says (each view's job; the event
    carries the launcher's own fields, not its entry, so every view is asked); None for none."""
    return next(filter(None, (v.job(d) for v in ENGINE_VIEWS.values())), None)


def render_start(r: dict) -> str:
    view = engine_view(r)
    if view is not None:
        return view.start(r)
    lines = [f"started {r['name']} attempt {r['attempt']}: pid {r['pid']}, alive after {r['settle_s']:g}s settle"
             + (f", ready: {r['ready_line']!r}" if r.get("ready_line") else "")]
    if r.get("replaced") and not r["replaced"].get("already_stopped"):
        lines.insert(0, f"stopped attempt {r['replaced'].get('attempt')} first (verified dead)")
    if (r.get("replaced") or {}).get("blind_spot"):  # what that stop could not see, as stop says it
        lines.insert(1, f"  note: {r['replaced']['blind_spot']}")
    if r.get("gpus") is not None:
        lines.append(f"  gpus: {','.join(map(str, r['gpus']))}"
                     + (f" (free after waiting {r['gpu_wait']['waited_s']:.1f}s)" if r.get("gpu_wait") else ""))
    lines.append(f"  log: {r['log']}")
    for ln in r.get("first_lines") or []:
        lines.append("    | " + ln)
    return "\n".join(lines)


def render_stop(r: dict) -> str:
    view = engine_view(r)
    if view is not None:
        return view.stop(r)
    if r.get("checkpoint"):
        return "\n".join([checkpoint_line(r["checkpoint"]), _render_stop(r)])
    return _render_stop(r)


def checkpoint_line(c: dict) -> str:
    """stop --checkpoint's first step, said before the stop's own lines."""
    if c.get("skipped"):
        return f"checkpoint: {c['skipped']}"
    head = (f"checkpoint: sent {c.get('signal')} through `{c['via']}`, " if c.get("via")  # an engine's command
            else f"checkpoint: sent {c.get('signal')} to pid {c.get('sent_to')}, ")
    if c.get("saw_line"):
        return head + f"saw after {c.get('waited_s', 0):.2f}s: {c['saw_line']}"
    if c.get("checkpoint"):
        return head + f"complete after {c.get('waited_s', 0):.2f}s: {c['checkpoint']}"
    return head + (c.get("note") or "")


def _render_stop(r: dict) -> str:
    c = r.get("cancelled_start")
    if c:  # a start that waited for GPUs under the run's lock (agent/ops/stop.py _cancelled_wait)
        gpus = ",".join(str(g) for g in c.get("gpus") or [])
        said = (f"{r['name']}: the start waiting for GPUs {gpus} (pid {c.get('pid')}) had launched attempt "
                f"{c.get('attempt')} before it saw the cancel; stopped below" if c.get("launched") else
                f"{r['name']}: cancelled the start waiting for GPUs {gpus} (pid {c.get('pid')}): it made no "
                f"attempt {c.get('attempt')}")
        return "\n".join([said, _render_stop(dict(r, cancelled_start=None))])
    if "start_cancelled" in (r.get("verified") or ()):  # a restart blocked on its GPUs (agent/supervise/gatewait.py)
        return f"{r['name']}: cancelled the blocked start of attempt {r.get('attempt')} (it never ran)"
    if r.get("restart_cancelled") and r.get("already_stopped"):
        return "\n".join([f"{r['name']}: cancelled the pending restart (attempt {r.get('attempt')} had ended; "
                          "no process of the run alive)", *_gpu_release_lines(r)])
    if r.get("already_stopped"):
        return "\n".join([f"{r['name']}: already stopped (no process of the run alive; last state: {r.get('state')})",
                          *_gpu_release_lines(r), *([f"  note: {r['blind_spot']}"] if r.get("blind_spot") else [])])
    procs = r.get("processes") or []
    lines = [f"stopped {r['name']} attempt {r.get('attempt')}: {len(procs)} process(es) dead, verified "
             f"({r['signal']}, {r.get('stop_s', 0):.2f}s)"]
    for p in procs:
        resumed = " (was paused: resumed after the signal)" if p.get("resumed") else ""
        lines.append(f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:80]}{resumed}")
    if r.get("restart_cancelled"):  # the attempt had ended; what it left was stopped, and the restart too
        lines.append("  cancelled the pending restart")
    lines += _gpu_release_lines(r)
    if r.get("blind_spot"):
        lines.append(f"  note: {r['blind_spot']}")
    return "\n".join(lines)


def _gpu_release_lines(r: dict) -> list[str]:
    rel = r.get("gpu_release") or {}
    lines = [f"  gpu {g['index']}: {mib(g.get('used_mib'), g.get('raw'))} used, "
             + ("released" if g.get("released") else "NOT released") for g in rel.get("gpus") or []]
    if rel.get("verified"):
        lines.append(f"  gpus released, verified ({rel.get('method')}, waited {rel.get('waited_s', 0):.2f}s)")
    elif rel.get("note") or rel.get("message"):
        lines.append(f"  {rel.get('note') or rel.get('message')}")
    return lines


def _paused_lines(r: dict) -> list[str]:
    """A live run's members paused (SIGSTOP, Ctrl-Z, a debugger): `  paused: 2 of 3
    processes (pids 10, 11), the job among them: ...`."""
    p = r.get("paused")
    if not p:
        return []
    pids = ", ".join(str(pid) for pid in p.get("pids") or ())
    if not p.get("pids"):  # only the run's shim (its note says what that holds up)
        return [f"  paused: {p.get('note')}"]
    return [f"  paused: {len(p.get('pids') or ())} of {p.get('of')} processes (pids {pids})"
            + (", the job among them" if p.get("job") else "")
            + f": {p.get('note')}"]  # a paused shim is said in the note


def _stopping_lines(r: dict, now: float) -> list[str]:
    """A stop under way (its signal sent, its grace running): `  stopping: SIGTERM sent 3s ago
    (stop, pid 123); SIGKILL at 30s if still alive`."""
    s = r.get("stopping")
    if not s:
        return []
    sig, grace = s.get("signal") or "the stop signal", s.get("grace_s")
    waited = now - s["since"] if isinstance(s.get("since"), (int, float)) else None
    when = ago(waited) + " ago" if waited is not None else "(when unknown)"
    line = f"  stopping: {sig} sent {when} (stop, pid {s.get('pid')})"
    if isinstance(grace, (int, float)):
        line += (f"; SIGKILL at {grace:g}s if still alive" if waited is None or waited < grace
                 else f"; its {grace:g}s grace is over: SIGKILL sent, waiting for the processes to end")
    return [line]


def render_status(res: dict, target: str) -> str:
    runs = res.get("runs") or []
    if not runs:
        return f"no runs on {target}"
    now = res.get("time") or time.time()
    lines = []
    for r in runs:
        view = engine_view(r)
        if view is not None:
            lines += view.status_line(r)
            r = {k: v for k, v in r.items() if k not in ("note", "exit", "state")}  # said in its line
        st = r.get("state")
        shown = "paused" if (r.get("paused") or {}).get("job") else st  # alive, but going nowhere
        head = f"{r['name']:<16} {str(shown):<9} attempt {r.get('attempt')}"
        if st == "none" and r.get("gpu_wait"):  # its first start waits for GPUs: no attempt yet
            head = f"{r['name']:<16} {'waiting':<9} attempt -"
        if st in ("running", "orphaned"):
            t = r.get("tree") or {}
            head += (f"  pid {r.get('pid')}  up {ago(t.get('uptime_s'))}  {t.get('processes', 0)} procs"
                     f"  cpu {t.get('cpu_seconds', 0):.1f}s  rss {human_bytes(t.get('rss_bytes'))}"
                     f"  pss {human_bytes(t['pss_bytes']) if t.get('pss_bytes') is not None else 'unknown'}")
        elif st == "blocked" and (r.get("blocked") or {}).get("by") == "restart":  # never ran yet
            # what it waits for: its own GPUs' holders, or (a node of a multi-node run) the others'
            head += f"  restart waiting: {(r.get('blocked') or {}).get('why') or 'for its GPUs'}"
        elif st in ("exited", "stray", "failed", "restarting", "gave_up", "blocked"):
            head += f"  {describe_exit(r.get('exit'))}"
            if r.get("exit", {}) and r["exit"].get("at"):
                head += f"  {ago(now - r['exit']['at'])} ago"
            if r.get("duration_s") is not None:
                head += f"  ran {ago(r['duration_s'])}"
            if r.get("error"):
                head += f"  ({r['error']})"
        if st is not None:
            lines.append(head)
        from ..spec.supervision import status_lines
        lines += status_lines(r, now)
        b = r.get("blocked") or {}
        if b.get("by") == "restart" and st == "blocked":
            lines.append(f"  blocked: this attempt starts by itself once the GPUs are released: {b.get('why')} "
                         f"(`runward stop {r['name']}` cancels)")
        w = r.get("gpu_wait")
        if w:  # a start waiting for its GPUs before it makes its attempt (start --wait-gpus-free)
            gpus = ",".join(str(g) for g in w.get("gpus") or ())
            lines.append(f"  start waiting for GPUs {gpus} to be free: attempt {w.get('attempt')} not made yet, "
                         f"waiting {ago(now - w['since']) if w.get('since') else '?'}"
                         + (f" of {w['timeout_s']:g}s" if isinstance(w.get("timeout_s"), (int, float)) else "")
                         + f" (`runward stop {r['name']}` cancels)")
        lines += _paused_lines(r)
        lines += _stopping_lines(r, now)
        lines += _stopped_lines(r, now)
        if (r.get("attribution") or {}).get("summary"):  # who failed first, and the cascade
            lines.append(f"  {r['attribution']['summary']}")
        if (r.get("stacks") or {}).get("summary"):  # the newest `runward stacks` of this attempt
            at = r["stacks"].get("at")
            lines.append(f"  stacks ({ago(now - at) + ' ago' if at else 'when unknown'}): {r['stacks']['summary']}")
        if r.get("note"):
            lines.append(f"  note: {r['note']}")
        if r.get("blind_spot"):
            lines.append(f"  note: {r['blind_spot']}")
        if r.get("stray_processes"):
            lines.append(f"  warning: processes of this run still alive: {r['stray_processes']} (runward stop {r['name']})")
        for g in r.get("gpu_usage") or []:
            lines.append(f"  gpu {g['index']}: {mib(g.get('used_mib'))} / {mib(g.get('total_mib'))} used"
                         + (f", this run {mib(g['run_mib'])}" if g.get("run_mib") is not None else "")
                         + (f" ({g['note']})" if g.get("note") else ""))
        if r.get("gpu_note"):
            lines.append(f"  gpus: {r['gpu_note']}")
        for d in r.get("drift") or []:
            lines.append(f"  code drift: {d['path']} changed on disk since this attempt started")
        for d in r.get("local_drift") or []:
            lines.append(f"  local drift: {d['local']} " + (f"{d['change']}: {d['remote']}" if d.get("change")
                                                           else f"differs from the deployed {d['remote']}"))
        h = r.get("health") or {}
        if h.get("error"):  # not read this time (its state locked by another process, ...)
            lines.append(f"  health: {h['error']}")
        main = h.get("main_metrics")  # the main ones; --json has every metric
        shown = {k: v for k, v in (h.get("metrics") or {}).items() if main is None or k in main}
        if shown:
            lines.append("  metrics: " + "  ".join(f"{k}={fmt_num(v)}" for k, v in shown.items()))
        if h.get("throughput_series"):
            from .health import sparkline
            lines.append(f"  {h['throughput_metric']}: {sparkline(h['throughput_series'])}")
        if r.get("stall"):
            from .stallview import stall_line
            lines.append(stall_line(r["stall"]))
        facts = h.get("alerts") or []
        if len(facts) > 5:
            lines.append(f"  {len(facts) - 5} earlier alerts (--json lists them; --since 10m skips old ones)")
        for a in facts[-5:]:
            from .health import format_alert
            lines.append(f"  alert: {format_alert(a)}")
        lg = r.get("log") or {}
        if lg.get("exists"):
            lines.append(f"  log {lg['path']} ({human_bytes(lg.get('size'))}): {lg.get('last_line', '')[:100]}")
    return "\n".join(lines)


def _stopped_lines(r: dict, now: float) -> list[str]:
    """The last stop's end, as the target recorded it: also a stop whose CLI was interrupted."""
    s = r.get("stopped")
    if not s:
        return []
    by = "runward stop" if s.get("by") in (None, "cli") else s["by"]  # else a health action's
    return [f"  stopped by {by} {ago(now - s['at'])} ago (signal {s.get('signal')}, grace {s.get('grace_s'):g}s): "
            + ("every process dead, verified" if s.get("verified_dead") else f"{s.get('survivors')} process(es) survived")]


PROCS_HEADER = f"{'PID':>7} {'STARTED':<8} {'USER':<8} {'RUN':<14} COMMAND"


def render_procs(procs: list[dict]) -> str:
    lines = []
    for p in procs:
        started = time.strftime("%H:%M:%S", time.localtime(p["started_at"])) if p.get("started_at") else "?"
        lines.append(f"{p['pid']:>7} {started} {p['user']:<8} {(p.get('run') or '-'):<14} {p['cmd'][:120]}")
    return "\n".join(lines)


def mib(v, raw: dict | None = None, key: str = "used_mib") -> str:
    if v is None:
        return (raw or {}).get(key, "?")
    return f"{v:,.0f} MiB" if isinstance(v, (int, float)) else str(v)


def describe_sync(res: dict, target, word: str) -> str:
    """A push's or deploy's result (sync.py) for people: a line per file sent, link made or path
    deleted, then the counts."""
    would = "would be " if res.get("dry_run") else ""
    lines = [f"{would or ''}{word if not would else 'sent'} {f.get('local', '?')} -> {target}:{f['remote']}"
             + (f"  sha256 {f['sha256'][:12]} verified" if f.get("sha256") else "") for f in res["sent"]]
    lines += [f"{would}linked {target}:{ln['remote']} -> {ln['target']}" for ln in res.get("links", [])]
    lines += [f"{would}deleted {target}:{d['remote']}" for d in res.get("deleted", [])]
    lines.append(f"{len(res['sent'])} {would}sent ({_sync_size(res['bytes_sent'])}), "
                 f"{len(res['unchanged'])} unchanged ({_sync_size(res['bytes_unchanged'])}), "
                 f"{len(res.get('deleted', []))} {would}deleted ({_sync_size(res.get('bytes_deleted', 0))})")
    return "\n".join(lines)


def _sync_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
