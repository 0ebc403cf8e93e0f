"""prune: the stopped runs whose last attempt ended longer ago than --older-than removed (a
live run never), or listed (dry run)."""

from __future__ import annotations

import time

from . import Outcome, Targeted, single
from .common import load_config, target_of


class PruneOptions(Targeted):
    """What `runward prune` takes (verbs/prune.py's flags)."""
    older_than: str | None = None
    dry_run: bool = False
    logs: bool = False


def prune(opts: PruneOptions) -> Outcome:
    from .. import api
    older = api.parse_duration(opts.older_than, "--older-than")
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    res = api.prune(target, older, dry_run=opts.dry_run, logs=opts.logs)
    return single("prune", target, res, lambda: render_prune(res, str(target), opts.older_than))


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
