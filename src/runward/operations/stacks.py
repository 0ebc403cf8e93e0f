"""stacks: the Python stacks of every process of a run, grouped by frame and named by rank
(docs/diagnosis.md); on every node of a multi-node run. Exit 0 when stacks were read, 1 when
none could be (py-spy missing, ptrace denied: the hint says what to do)."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_OK
from . import Outcome, Targeted, single
from .common import load_config, target_of


class StacksOptions(Targeted):
    """What `runward stacks` takes (verbs/stacks.py's flags)."""
    name: str | None = None
    native: bool = False
    timeout: float = 10.0
    bring_py_spy: bool = False


def stacks(opts: StacksOptions) -> Outcome:
    from .. import api
    from ..views import stacksview
    cfg = load_config(opts)
    targets = _nodes(opts, cfg)
    bring = opts.bring_py_spy or cfg.stacks_bring
    res = api.stacks(targets, opts.name, native=opts.native, timeout=opts.timeout, bring=bring)
    if len(targets) == 1 and res.get("node") is not None:
        # one node of a multi-node run (--on names it): every node, found as status finds
        # them, from that node's record
        from ..multinode import nodes as multinode
        found = api.status(targets[0], [opts.name]).get("runs") or [None]
        nodes = multinode.nodes_from_record(found[0])
        if nodes:
            targets = nodes
            res = api.stacks(nodes, opts.name, native=opts.native, timeout=opts.timeout, bring=bring)
    return single("stacks", targets[0], res, lambda: stacksview.render(res), EXIT_OK if res.get("ok") else EXIT_FAILED)


def _nodes(opts, cfg) -> list:
    """--on given more than once, else runward.toml's [runs.NAME] nodes, else the one target."""
    from . import nodes as on_nodes
    if not opts.nodes and opts.on:  # the Python API gives `on` alone, as one --on
        opts.nodes = [opts.on]
    return on_nodes.nodes_of(opts, cfg, opts.name) or [target_of(opts, cfg, opts.name)]
