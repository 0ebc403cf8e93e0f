"""gpus: each GPU, and the processes on it mapped to their runs; on one target, on each node
given (--on repeated), or on every named target of runward.toml (--all)."""

from __future__ import annotations

from ..views.render import mib
from . import Outcome, Targeted, single
from .common import load_config, on_all, target_of


class GpusOptions(Targeted):
    """What `runward gpus` takes (verbs/gpus.py's flags)."""
    all: bool = False
    map: str = "auto"


def gpus(opts: GpusOptions) -> Outcome:
    from .. import api
    cfg = load_config(opts)
    if opts.all or len(opts.nodes) > 1:  # every named target, or a multi-node run's nodes: one section each
        return on_all(cfg, "gpus", lambda t: api.gpus(t, mapping=opts.map), lambda r: render_gpus(r["result"]),
                      failed=lambda error: "error",
                      exit_code=lambda failures, _: max(r["error"].get("exit_code", 1) for r in failures),
                      targets=None if opts.all else [cfg.target(t) for t in opts.nodes])
    target = target_of(opts, cfg)
    res = api.gpus(target, mapping=opts.map)
    return single("gpus", target, res, lambda: _asked(opts, cfg, target) + render_gpus(res))


def _asked(opts, cfg, target) -> str:
    """The target a `gpus` without --on asked, where runward.toml names others: "no GPU" said
    of this machine reads as said of the project's GPU host otherwise."""
    if opts.on is not None:
        return ""
    if cfg.targets:
        return (f"{target.display()} (no --on; runward.toml's targets: {', '.join(cfg.targets)}: "
                "--on NAME for one, --all for each):\n")
    where = sorted({str(on) for run in cfg.runs for on in [cfg.runs.placement(run).get("on")] if on})
    return f"{target.display()} (no --on; runward.toml's runs run on {', '.join(where)}: --on TARGET):\n" if where else ""


_MAPPING = {"direct": "pids read in this target's own /proc, by the run marker",
            "nspid": "host pids matched through the host's /proc/PID/status NSpid line",
            "memory": "pids are the host's; each process attributed to the one run recorded on its GPU"}


def render_gpus(res: dict) -> str:
    gpus = res.get("gpus") or []
    if not gpus:
        return res.get("note") or "no GPU listed by nvidia-smi"
    lines = []
    for g in gpus:
        raw = g.get("raw") or {}
        util = f"{g['utilization_pct']}%" if g.get("utilization_pct") is not None else raw.get("utilization_pct", "?")
        lines.append(f"GPU {g.get('index') if g.get('index') is not None else raw.get('index', '?')}  "
                     f"{g.get('name')}  {g.get('uuid')}  {mib(g.get('used_mib'), raw)} / "
                     f"{mib(g.get('total_mib'), raw, 'total_mib')}  util {util}")
        for p in g.get("processes") or []:
            lines.append("    " + _proc_line(p))
        if not g.get("processes"):
            lines.append("    no compute process")
    for p in res.get("unattributed_processes") or []:
        lines.append(f"on {p.get('gpu_uuid')} (not a GPU uuid listed above): " + _proc_line(p))
    m = res.get("mapping")
    lines.append(f"mapping: {m} ({_MAPPING.get(m, '')})")
    if res.get("mapping_note"):
        lines.append(f"  note: {res['mapping_note']}")
    return "\n".join(lines)


def _proc_line(p: dict) -> str:
    raw = p.get("raw") or {}
    if p.get("pid") is not None:
        who = f"pid {p['pid']}" + (f" (host pid {p['host_pid']})" if p.get("host_pid") not in (None, p["pid"]) else "")
    elif p.get("host_pid") is not None:
        who = f"host pid {p['host_pid']}"
    else:
        who = f"pid {raw.get('pid', '?')}"
    run = (f"run {p['run']} attempt {p.get('attempt')}" + (" (by memory)" if p.get("mapped_by") == "memory" else "")
           if p.get("run") else f"run {p['other_home_run']} of another runward home" if p.get("other_home_run")
           else "no run" + (f" (one of {', '.join(p['candidates'])})" if p.get("candidates") else ""))
    tail = f"  [{p['state']}] {p.get('cmd') or ''}".rstrip() if p.get("state") else ""
    note = f"  ({p['note']})" if p.get("note") else ""
    return f"{who:<24} {mib(p.get('used_mib'), raw):>12}  {run}{tail}{note}"
