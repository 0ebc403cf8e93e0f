"""kill: a safe pkill -f; a dry run unless yes, then verified dead."""

from __future__ import annotations

from ..views.render import render_procs
from . import Outcome, Targeted, single
from .common import load_config, target_of


class KillOptions(Targeted):
    """What `runward kill` takes (verbs/kill.py's flags). Not check()ed: its --grace and
    --signal are its own flags, not spec/options.py's (the CLI checks --signal as it reads it;
    kill() checks it for the callers without argv)."""
    pattern: str | None = None
    signal: str = "TERM"
    grace: float = 10.0
    tree: bool = False
    yes: bool = False
    max_procs: int = 32


def kill(opts: KillOptions) -> Outcome:
    from .. import api
    from ..spec.signals import HINT, known
    if not known(opts.signal):  # the CLI's --signal refuses it as it is read; the API's is checked here
        from ..errors import BadInput
        raise BadInput(f"invalid signal {opts.signal!r}", HINT)
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    try:
        res = api.kill(target, opts.pattern, signal=opts.signal, grace=opts.grace, tree=opts.tree, yes=opts.yes,
                       max_matches=opts.max_procs)
    except KeyboardInterrupt:
        if not opts.yes:
            raise  # a dry run changed nothing: cli.main's plain "interrupted" is the whole truth
        # the agent outlives its caller once it has sent the signals (agent/ops/pskill.kill)
        import shlex
        from ..errors import Interrupted
        on = f" --on {target}" if not target.is_local else ""
        raise Interrupted("interrupted: a kill whose signals had been sent goes on on the target to its end "
                          "(KILL after the grace to what is left); nothing records that end",
                          f"see what is left: runward ps {shlex.quote(opts.pattern)}{on}")
    return single("kill", target, res, lambda: render_kill(res, opts.pattern))


def render_kill(res: dict, pattern: str) -> str:
    if res.get("dry_run"):
        return (f"would send {res['signal']} to {len(res['matched'])} process(es) (dry run; add --yes):\n"
                + render_procs(res["matched"])) if res["matched"] else f"no process matches {pattern!r}"
    if not res["processes"]:
        return f"no process matches {pattern!r}"
    return f"killed {len(res['processes'])} process(es), verified dead:\n" + "\n".join(
        f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:90]}" for p in res["processes"])
