"""runward prune --older-than 7d [--on TARGET] [--dry-run]: stopped runs that ended long ago removed."""

from __future__ import annotations

import time

from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("--older-than", required=True, metavar="DURATION",
                   help="remove the stopped runs whose last attempt ended longer ago than this "
                        "(7d, 12h, 10m, 90s, 1h30m; a live run is never removed)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument("--logs", action="store_true",
                   help="remove their log files too (default: kept, as `runward rm` keeps them)")


def run(args, out) -> int:
    from .. import api
    older = api.parse_duration(args.older_than, "--older-than")
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = api.prune(target, older, dry_run=args.dry_run, logs=args.logs)
    return emit(out, "prune", target, res, render_prune(res, str(target), args.older_than))


def render_prune(res: dict, where: str, older: str) -> str:
    now = time.time()
    verb = "would remove" if res.get("dry_run") else "removed"
    lines = [f"{verb} {len(res['removed'])} run(s) on {where} that ended more than {older} ago"]
    for r in res["removed"]:
        ago = f"ended {_ago(now - r['ended_at'])} ago" if r.get("ended_at") else "never started"
        kept = [lg.get("moved_to") or lg["path"] for lg in r.get("logs") or () if lg.get("kept")]
        lines.append(f"  {r['name']}  ({ago})" + (f"  log kept at {', '.join(kept)}" if kept else ""))
        if r.get("blind_spot"):
            lines.append(f"    note: {r['blind_spot']}")
    for k in res.get("kept") or ():
        if not k["why"].startswith("ended"):
            lines.append(f"  kept {k['name']}: {k['why']}")
    return "\n".join(lines)


def _ago(s: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s / n:.1f}{unit}"
    return f"{s:.0f}s"
