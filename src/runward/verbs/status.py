"""runward status [NAME] [--on TARGET | --all]: running, exited, stray, lost or orphaned, and why."""

from __future__ import annotations

from ..errors import EXIT_OK
from ..render import render_status
from ._common import config_dir, config_targets, emit, load_config, on_all, target_of


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every named target in runward.toml, in parallel")
    p.add_argument("--since", metavar="DURATION", help="only health alerts of this last while, e.g. 10m")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    since = api.parse_duration(args.since, "--since")
    if args.all:
        names = [args.name] if args.name else None
        return on_all(cfg, out, "status", lambda t: api.status(t, names, since),
                      lambda r: render_status(r["result"], r["target"]), failed=_failed,
                      exit_code=_all_code)
    if args.name is None and args.on is None and cfg.path:
        # in a project: its runs live on runward.toml's targets, not necessarily here
        targets = config_targets(cfg)
        if targets and targets != [target_of(args, cfg)]:
            return on_all(cfg, out, "status", lambda t: api.status(t), lambda r: render_status(r["result"], r["target"]),
                          failed=_failed, exit_code=_all_code, targets=targets)
    from .. import multinode
    nodes = multinode.nodes_of(args, cfg, args.name) if args.name else None
    if nodes:
        return multinode.emit(out, "status", *multinode.status(nodes, args.name))
    target = target_of(args, cfg, args.name)
    res = api.status(target, [args.name] if args.name else None, since)
    nodes = multinode.nodes_from_record(res["runs"][0]) if args.name and res.get("runs") else None
    if nodes:  # one node of a multi-node run: every node, and the aggregate
        return multinode.emit(out, "status", *multinode.status(nodes, args.name))
    run_cfg = cfg.runs.get(args.name) if args.name else None
    if run_cfg and run_cfg.get("files") and res.get("runs"):
        from .. import files as _files
        d = _files.local_drift(res["runs"][0], run_cfg["files"], base=config_dir(cfg))
        if d:
            res["runs"][0]["local_drift"] = d
    return emit(out, "status", target, res, render_status(res, str(target)))


def _failed(error: dict) -> str:
    if error["type"] == "RunNotFound":
        return "not here"
    return "unreachable" if error.get("exit_code") == 3 else "error"


def _all_code(failures: list[dict], results: list[dict]) -> int:
    """`status NAME --all` asks where NAME is: a target without it is an answer, not a
    failure, unless no target has it (4, as on one target). Any other failure decides."""
    others = [r["error"].get("exit_code", 1) for r in failures if r["error"]["type"] != "RunNotFound"]
    if others:
        return max(others)
    return 4 if len(failures) == len(results) else EXIT_OK
