"""logs: the run's log, bounded (the last lines, a page after an offset, an attempt's
section, a look-back, a grep), or followed across restarts; node R's of a multi-node run, or
every node's. The follow's lines reach the caller as they come (ON_LINE); printing them is
the CLI's (verbs/logs.py)."""

from __future__ import annotations

from ..errors import BadInput
from . import Outcome, Targeted, single
from .common import load_config


class LogsOptions(Targeted):
    """What `runward logs` takes (verbs/logs.py's flags; n is -n/--lines)."""
    name: str | None = None
    n: int | None = None
    follow: bool = False
    for_s: float | None = None
    attempt: int | None = None
    since: str | None = None
    offset: int | None = None
    grep: str | None = None
    node: int | None = None
    all_nodes: bool = False


def logs(opts: LogsOptions, on_line=None) -> Outcome:
    """ON_LINE(event) gets a follow's events as they come: {"line": ...} or {"switch": PATH}
    (the log rotated or a restart began a new one); the document holds every line either way."""
    from .. import api
    from . import nodes as on_nodes
    _check(opts)
    cfg = load_config(opts)
    since = api.parse_duration(opts.since, "--since") if opts.since is not None else None
    pick = {"attempt": opts.attempt, "since_s": since, "grep": opts.grep}
    if opts.offset is not None:
        if opts.follow or any(v is not None for v in pick.values()):
            raise BadInput("--offset with -f, --attempt, --since or --grep", "--offset reads on from a previous call alone")
        pick["offset"] = opts.offset
    target, nodes = on_nodes.pick_node(opts, cfg, opts.name, opts.node, opts.all_nodes)
    if nodes and opts.offset is not None:
        raise BadInput("--offset with --all-nodes", "page one node's log: --node R --offset BYTES")
    if nodes:
        return on_nodes.logs_all(nodes, opts.name, lines=opts.n, follow=opts.follow, for_s=opts.for_s,
                                  on_line=on_line, **pick)
    if opts.follow:
        got: list[str] = []

        def seen(ev: dict) -> None:
            if "line" in ev:
                got.append(ev["line"])
            if on_line is not None:
                on_line(ev)
        res = api.logs(target, opts.name, lines=opts.n, follow=True, on_line=seen, for_s=opts.for_s, **pick)
        res["lines"] = got
        return single("logs", target, res, None)  # every line was shown as it came
    res = api.logs(target, opts.name, lines=opts.n, **pick)
    note = (f"runward: more lines matched; showing the last {len(res['lines'])} (-n sets how many)"
            if res.get("truncated") else None)
    return single("logs", target, res, lambda: "\n".join(res["lines"]), notes=note)


def _check(opts) -> None:
    """--node, as argparse checks it, for a caller without argv: the declared options (-n,
    --offset, --attempt, --for, --grep, --since) are checked before any operation is called
    (spec/options.py; library._operate)."""
    if opts.node is not None and (isinstance(opts.node, bool) or not isinstance(opts.node, int)):
        raise BadInput(f"invalid --node {opts.node!r}: not a whole number", "give --node a whole number")
