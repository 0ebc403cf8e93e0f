"""runward rm NAME [--on TARGET] [--logs]: a stopped run's records removed (exit 1 if it lives)."""

from __future__ import annotations

from .. import options
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name", help="the run to remove; it must be stopped (`runward stop NAME` first)")
    p.add_argument("--logs", action="store_true",
                   help="remove its log files too (default: kept; a log in the run's directory is moved "
                        "to <home>/removed/, one elsewhere stays where it is)")
    options.add(p, "lock_timeout")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.rm(target, args.name, logs=args.logs, lock_timeout=args.lock_timeout)
    return emit(out, "rm", target, res, render_removed(res, str(target)))


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
