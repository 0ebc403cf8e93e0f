"""ps: a safe pgrep -af (never lists itself, its ancestors or its session)."""

from __future__ import annotations

from ..errors import EXIT_FAILED
from . import Outcome, Targeted, single
from .common import load_config, target_of


class PsOptions(Targeted):
    """What `runward ps` takes (verbs/ps.py's arguments)."""
    pattern: str | None = None


def ps(opts: PsOptions) -> Outcome:
    from .. import api
    from ..views.render import PROCS_HEADER, render_procs
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    res = api.ps(target, opts.pattern)
    if not res["processes"]:  # exit 1 as pgrep's: `runward ps X && ...` reads as `pgrep X && ...`
        return single("ps", target, res, lambda: f"no process matches {opts.pattern!r}", code=EXIT_FAILED)
    return single("ps", target, res, lambda: PROCS_HEADER + "\n" + render_procs(res["processes"]))
