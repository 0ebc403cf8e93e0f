"""runward kill PATTERN: a safe pkill -f; a dry run unless --yes, then verified dead."""

from __future__ import annotations

from ..render import render_procs
from ._common import emit, load_config, old_spelling, signal_arg, target_of


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")
    p.add_argument("--signal", default="TERM", metavar="SIG", type=signal_arg,
                   help="the signal sent first (default TERM), then KILL")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS", help="before KILL (default 10)")
    p.add_argument("--tree", action="store_true", help="also every descendant of a match")
    p.add_argument("--yes", action="store_true", help="signal them (without it: a dry run)")
    p.add_argument("--max-procs", type=int, default=32, metavar="N", help="refuse when more processes match (default 32)")
    old_spelling(p, "--max", "max_procs", type=int, default=32)


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg)
    try:
        res = api.kill(target, args.pattern, signal=args.signal, grace=args.grace, tree=args.tree, yes=args.yes,
                       max_matches=args.max_procs)
    except KeyboardInterrupt:
        if not args.yes:
            raise  # a dry run changed nothing: cli.main's plain "interrupted" is the whole truth
        # the agent outlives its caller once it has sent the signals (agent/ops/pskill.kill)
        import shlex
        from ..errors import Interrupted
        on = f" --on {target}" if not target.is_local else ""
        raise Interrupted("interrupted: a kill whose signals had been sent goes on on the target to its end "
                          "(KILL after the grace to what is left); nothing records that end",
                          f"see what is left: runward ps {shlex.quote(args.pattern)}{on}")
    return emit(out, "kill", target, res, render_kill(res, args.pattern))


def render_kill(res: dict, pattern: str) -> str:
    if res.get("dry_run"):
        return (f"would send {res['signal']} to {len(res['matched'])} process(es) (dry run; add --yes):\n"
                + render_procs(res["matched"])) if res["matched"] else f"no process matches {pattern!r}"
    if not res["processes"]:
        return f"no process matches {pattern!r}"
    return f"killed {len(res['processes'])} process(es), verified dead:\n" + "\n".join(
        f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:90]}" for p in res["processes"])
