"""What `runward top` draws (rich renderables) from its state: a header, the runs' table, the
selected run's log (when open), the GPUs' table and the message line. Imported by top.loop
only, after rich was found."""

from __future__ import annotations

import time

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..views.health import format_alert, sparkline
from ..views.render import _num, mib

SPARK = 16
STATE_STYLE = {"running": "green", "exited": "dim", "stray": "red", "lost": "red", "orphaned": "yellow",
               "restarting": "yellow", "gave_up": "red", "blocked": "yellow"}
KEYS = "q quit  ↑/↓ select  l log  s stop"


def view(top) -> Group:
    when = time.strftime("%H:%M:%S", time.localtime(top.taken_at)) if top.taken_at else "reading ..."
    head = Text(f"runward top  {', '.join(t.display() for t in top.targets)}  {when}   {KEYS}", style="bold")
    parts = [head, runs_table(top)]
    if top.log_for:
        lines = top.log_lines if isinstance(top.log_lines, list) else [top.log_lines]
        parts.append(Panel(Text("\n".join(lines) or "(empty log)", no_wrap=True, overflow="ellipsis"),
                           title=f"log of {top.log_for[1]} on {top.log_for[0]} (l or Esc closes)"))
    parts.append(gpus_table(top))
    if top.message:
        parts.append(Text(top.message, style="bold yellow" if top.confirm else "bold"))
    return Group(*parts)


TARGET_WIDTH, ALERT_WIDTH = 28, 36  # at 160 columns an alert keeps a line of its own words


def runs_table(top) -> Table:
    many = len(top.targets) > 1
    t = Table(expand=True, title="runs", title_justify="left")
    if many:  # a long target (`name (ssh://user@host:port/pct:ID)`) folds, not the alert
        t.add_column("TARGET", overflow="fold", max_width=TARGET_WIDTH)
    for name in ("RUN", "STATE", "UP", "ATTEMPT", "RESTARTS", "PID"):
        t.add_column(name, no_wrap=True)
    t.add_column("METRICS", no_wrap=True)
    t.add_column("LAST ALERT", overflow="fold", ratio=1, min_width=ALERT_WIDTH)
    for part in top.snapshot:
        if part["error"]:
            t.add_row(*([part["target"]] if many else []), Text(part["error"], style="red"))
        for r in part["runs"]:
            key = (part["target"], r["name"])
            cells = [r["name"], Text(r.get("state", "?"), style=STATE_STYLE.get(r.get("state"), "")),
                     _uptime(r), str(r.get("attempt", "?")), _restarts(r), str(r.get("pid") or "-"),
                     _metrics(top, part["target"], r), _last_alert(r)]
            t.add_row(*([part["target"]] if many else []), *cells,
                      style="reverse" if key == top.selected else None)
    if not top.rows():
        t.add_row(*([""] if many else []), "no runs" if top.taken_at else "reading ...")
    return t


def _restarts(r: dict) -> str:
    """Restarts by the run's policy (docs/supervision.md); "-" for a run without one."""
    if "restarts" not in r:
        return "-"
    return str(r["restarts"]) + (f"/{r['policy']['max_restarts']}" if (r.get("policy") or {}).get("max_restarts") else "")


def _uptime(r: dict) -> str:
    s = (r.get("tree") or {}).get("uptime_s")
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 86400}d{s % 86400 // 3600:02d}h" if s >= 86400 else (
        f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s")


def _metrics(top, target: str, r: dict) -> Text:
    """The main metrics, each with its sparkline: the throughput's from the log's series,
    the others' from the values earlier refreshes saw."""
    h = r.get("health") or {}
    values = h.get("metrics") or {}
    lines = []
    steps = ("step", "iteration", "iter", "epoch")
    for m in sorted(h.get("main_metrics") or [], key=lambda m: m not in steps):
        if m in steps:
            lines.append(f"{m} {_num(values.get(m))}")
            continue
        series = (h.get("throughput_series") if m == h.get("throughput_metric")
                  else top.history.get((target, r["name"], r.get("attempt"), m)))
        lines.append(f"{m} {_num(values.get(m))} {sparkline(series or [], SPARK)}")
    from ._topbase import change
    vs = change(r)  # a line of the cell, not a column: the table stays readable at 80 columns
    if vs:
        lines.append(vs)
    if h.get("error"):
        lines.append(h["error"])
    return Text("\n".join(lines) or "-")


def _last_alert(r: dict) -> Text:
    alerts = (r.get("health") or {}).get("alerts") or []
    return Text(format_alert(alerts[-1]), style="red") if alerts else Text("-")


def gpus_table(top) -> Table:
    t = Table(expand=True, title="gpus", title_justify="left")
    for name in ("TARGET", "GPU", "NAME", "MEMORY", "UTIL"):
        t.add_column(name, no_wrap=True)
    t.add_column("HOLDERS", ratio=1, overflow="fold")
    for part in top.snapshot:
        res = part.get("gpus") or {}
        if part.get("gpu_error") or not res.get("gpus"):
            note = part.get("gpu_error") or res.get("note") or ("no GPU listed by nvidia-smi" if res else "")
            if note:
                t.add_row(part["target"], "-", Text(note, style="dim"))
            continue
        for g in res["gpus"]:
            raw = g.get("raw") or {}
            util = f"{g['utilization_pct']}%" if g.get("utilization_pct") is not None else raw.get("utilization_pct", "?")
            t.add_row(part["target"], str(g.get("index", "?")), str(g.get("name") or "?"),
                      f"{mib(g.get('used_mib'), raw)} / {mib(g.get('total_mib'), raw, 'total_mib')}", str(util),
                      _holders(g.get("processes") or []))
    return t


def _holders(procs: list[dict]) -> str:
    """Each holder as its run (and attempt) with its memory; a process of no run by pid."""
    if not procs:
        return "-"
    out = []
    for p in procs:
        who = (f"{p['run']}#{p.get('attempt')}" if p.get("run")
               else f"pid {p.get('pid') or p.get('host_pid') or '?'} (no run)")
        out.append(f"{who} {mib(p.get('used_mib'), p.get('raw'))}")
    return ", ".join(out)
