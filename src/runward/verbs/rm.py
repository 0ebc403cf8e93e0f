"""runward rm NAME [--on TARGET] [--logs]: a stopped run's records removed (exit 1 if it lives)."""

from __future__ import annotations

from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name", help="the run to remove; it must be stopped (`runward stop NAME` first)")
    p.add_argument("--logs", action="store_true",
                   help="remove its log files too (default: kept; a log in the run's directory is moved "
                        "to <home>/removed/, one elsewhere stays where it is)")
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="give up after this long if another verb holds the run (default 30)")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.rm(target, args.name, logs=args.logs, lock_timeout=args.lock_timeout)
    return emit(out, "rm", target, res, render_removed(res, str(target)))


def render_removed(res: dict, where: str) -> str:
    lines = [f"removed {res['name']} ({res['attempts']} attempt(s)) from {where}"]
    for log in res.get("logs") or []:
        if log.get("moved_to"):
            lines.append(f"  its log is kept at {log['moved_to']}")
        elif log.get("kept"):
            lines.append(f"  its log is kept at {log['path']} ({log.get('why')})")
        elif log.get("exists"):
            lines.append(f"  its log {log['path']} was removed")
    return "\n".join(lines)
