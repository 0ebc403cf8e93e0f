"""rm: a stopped run's records removed (exit 1 if it lives); its logs kept unless asked."""

from __future__ import annotations

from . import Outcome, Targeted, check, single
from .common import load_config, target_of


class RmOptions(Targeted):
    """What `runward rm` takes (verbs/rm.py's flags; spec/options.py declares lock_timeout)."""
    name: str | None = None
    logs: bool = False
    lock_timeout: float | None = None


def rm(opts: RmOptions) -> Outcome:
    from .. import api
    check(opts)
    cfg = load_config(opts)
    target = target_of(opts, cfg, opts.name)
    res = api.rm(target, opts.name, logs=opts.logs, lock_timeout=opts.lock_timeout)
    return single("rm", target, res, lambda: render_removed(res, str(target)))


def render_removed(res: dict, where: str) -> str:
    lines = [f"removed {res['name']} ({res['attempts']} attempt(s)) from {where}"]
    for log in res.get("logs") or []:
        more = _rotated(log)
        if log.get("moved_to"):
            lines.append(f"  its log is kept at {log['moved_to']}{more}")
        elif log.get("kept"):
            lines.append(f"  its log is kept at {log['path']}{more} ({log.get('why')})")
        elif log.get("exists"):
            lines.append(f"  its log {log['path']}{more} was removed")
    if res.get("blind_spot"):
        lines.append(f"  note: {res['blind_spot']}")
    return "\n".join(lines)


def _rotated(log: dict) -> str:
    """ and its rotated files, named by their suffixes (.1 ... .N), which go where the log goes."""
    older = log.get("rotated") or []
    if not older:
        return ""
    suffixes = [p[len(log["path"]):] for p in older]
    return f" with {len(older)} rotated file(s) ({suffixes[0]}" + (f" ... {suffixes[-1]})" if len(older) > 1 else ")")
