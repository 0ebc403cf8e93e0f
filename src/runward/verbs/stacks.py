"""runward stacks NAME [--on T]... [--native]: the Python stacks of every process of the run,
grouped by frame and named by rank (docs/diagnosis.md). Exit 0 when stacks were read, 1 when
none could be (py-spy missing, ptrace denied: the hint says what to do), 3 unreachable,
4 no such run."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_OK
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name", help="the run")
    p.add_argument("--native", action="store_true", help="native (C/C++) frames too, where py-spy can (py-spy --native)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long py-spy may take per process (default 10)")
    p.add_argument("--bring-py-spy", action="store_true",
                   help="where the target has no py-spy, push this machine's (runward[stacks]; same architecture "
                        "only), sha256-checked, kept under runward's home there; runward.toml [stacks] bring = true "
                        "makes it the default")


def run(args, out) -> int:
    from .. import api, stacksview
    cfg = load_config(args)
    targets = _nodes(args, cfg)
    bring = args.bring_py_spy or cfg.stacks_bring
    res = api.stacks(targets, args.name, native=args.native, timeout=args.timeout, bring=bring)
    if len(targets) == 1 and res.get("node") is not None:
        # one node of a multi-node run (--on names it): every node, found as status finds
        # them, from that node's record
        from .. import multinode
        found = api.status(targets[0], [args.name]).get("runs") or [None]
        nodes = multinode.nodes_from_record(found[0])
        if nodes:
            targets = nodes
            res = api.stacks(nodes, args.name, native=args.native, timeout=args.timeout, bring=bring)
    return emit(out, "stacks", targets[0], res, stacksview.render(res), EXIT_OK if res.get("ok") else EXIT_FAILED)


def _nodes(args, cfg) -> list:
    """--on given more than once, else runward.toml's [runs.NAME] nodes, else the one target."""
    from .. import multinode
    if getattr(args, "nodes", None) is None:  # the Python API's parser has no --on action
        args.nodes = [args.on] if getattr(args, "on", None) else []
    return multinode.nodes_of(args, cfg, args.name) or [target_of(args, cfg, args.name)]
