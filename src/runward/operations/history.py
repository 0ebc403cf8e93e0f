"""history: one line per attempt -- started, ran for, state/exit, steps reached, the main
throughput (median after warm-up), the last loss, and what changed against the attempt
before (docs/history.md); over every node of a multi-node run, merged (multinode/history.py)."""

from __future__ import annotations

import os
import time

from . import Outcome, Targeted, single
from .common import load_config, target_of
from ..views.render import engine_view


class HistoryOptions(Targeted):
    """What `runward history` takes (verbs/history.py's flags)."""
    name: str | None = None


def history(opts: HistoryOptions) -> Outcome:
    from .. import api
    from . import nodes as on_nodes
    cfg = load_config(opts)
    nodes = on_nodes.nodes_of(opts, cfg, opts.name)
    if nodes:  # every node's history, merged: per node where they differ (multinode/history.py)
        from ..multinode import history as multihistory
        res, code = multihistory.history(nodes, opts.name)
        outcome = on_nodes.outcome("history", res, code)
        outcome.text = lambda: render_nodes(res)
        return outcome
    target = target_of(opts, cfg, opts.name)
    res = api.history(target, opts.name)
    return single("history", target, res, lambda: render(res))


def render(res: dict) -> str:
    rows = res.get("attempts") or []
    if not rows:
        return f"{res.get('name')}: no attempts"
    return "\n".join(line(r) for r in rows)


def render_nodes(res: dict) -> str:
    """A multi-node history (multinode/history.py): node 0's line, then each node that differs."""
    out = []
    for r in res.get("attempts") or []:
        out.append(line(r) + f"  [node {r.get('rank', 0)}" + ("" if r.get("nodes") else ", every node the same") + "]")
        for rank, diff in (r.get("nodes") or {}).items():
            out.append(f"    node {rank}: " + line({**r, **diff, "changed": diff.get("changed")}).split("  ", 2)[2])
    bad = [f"node {n['rank']} ({n['target']}): {n['error'].get('message')}" for n in res["nodes"] if not n["ok"]]
    return "\n".join(out + bad) or f"{res.get('name')}: no attempts"


def line(r: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"])) if r.get("started_at") else "never started"
    parts = [f"#{r['attempt']}", started, f"ran {duration(r.get('ran_s'))}", ending(r),
             f"step {r['steps']}" if r.get("steps") is not None else "no steps"]
    parts[4:4] = where(r)
    tp = r.get("throughput")
    if tp and tp.get("median") is not None:
        parts.append(f"{tp['metric']} {si(tp['median'])} (median of {tp['points']})")
    elif tp:
        parts.append(f"{tp['metric']} too few points")
    if r.get("loss"):
        parts.append(f"{r['loss']['metric']} {r['loss']['last']}")
    if r.get("log_partial"):
        parts.append(partial(r))
    text = "  ".join(parts)
    if r.get("changed") is not None:
        text += "  | " + (changed(r["changed"]) or "no change")
    return text


def partial(r: dict) -> str:
    """A section too long to parse whole (agent/health/attempts.py): its last step and loss are
    its true last ones, its throughput median stands on the parsed head and tail only."""
    half, size = r["log_partial"] / 2 / (1 << 20), (r.get("log_bytes") or 0) / (1 << 20)
    return f"(log partial: median over its first and last {half:.0f} MiB of {size:.0f} MiB)"


def where(r: dict) -> list[str]:
    """A supervised restart's cause, an engine's job, a node: said only where the attempt has one."""
    out = []
    if r.get("restart"):
        rs = r["restart"]
        out.append(f"restart {rs.get('number')} of #{rs.get('of')} ({rs.get('reason') or 'by the shim'})")
    view = engine_view(r)
    if view is not None:
        out.append(view.history_where(r))
    if r.get("node"):
        out.append(f"node {r['node'].get('rank')} of {r['node'].get('nnodes')}")
    return out


def ending(r: dict) -> str:
    ex = r.get("exit") or {}
    if r.get("state") == "exited" and ex:
        return f"exited {ex['code']}" if ex.get("code") is not None else f"exited by {ex.get('signal')}"
    return r.get("state") or "?"


def duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m"


def si(v) -> str:
    if not isinstance(v, (int, float)):
        return str(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return f"{v / div:.2f}".rstrip("0").rstrip(".") + suffix
    return f"{v:.4g}"


def changed(c: dict) -> str:
    """'train.py 1a2b3c4d->5e6f7a8b, TRAIN_TOKS 14500->9000, +NEW=1, -OLD, command, cwd'."""
    out = [f"{os.path.basename(p)} {a or 'none'}->{b or 'none'}" for p, (a, b) in (c.get("files") or {}).items()]
    env = c.get("env") or {}
    out += [f"{k} {a}->{b}" for k, (a, b) in (env.get("changed") or {}).items()]
    out += [f"+{k}={v}" for k, v in (env.get("added") or {}).items()]
    out += [f"-{k}" for k in env.get("removed") or ()]
    if c.get("command"):
        out.append(f"command: {c['command'][1]}")
    if c.get("cwd"):
        out.append(f"cwd {c['cwd'][0]}->{c['cwd'][1]}")
    return ", ".join(out)
