"""runward deploy NAME: push the run's files (runward.toml) to where it runs (every node of a
multi-node run: multideploy.py)."""

from __future__ import annotations

from ..errors import BadInput
from ._common import config_dir, did_you_mean, emit, load_config, target_of


# Ctrl-C (cli.main): what an interrupted push leaves on the target (agent/ops/sync.py's Batch)
INTERRUPTED = ("interrupted: each file on the target is its old or its new version, never torn (a file is "
               "renamed into place only once its sha256 matched); those not reached are as they were (with "
               "--delete, some removals may be done); the same command again finishes it, sending only what "
               "still differs")


def add_arguments(p) -> None:
    from ._syncflags import add_arguments as sync_flags
    p.add_argument("name")
    sync_flags(p)


def run(args, out) -> int:
    from .. import files as _files
    from ..sync import describe
    from ._syncflags import options
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    run_cfg = cfg.runs.get(args.name)
    close = did_you_mean(args.name, cfg) if run_cfg is None else None
    if close:
        raise BadInput(f"no run {args.name!r} in runward.toml", close)
    if not run_cfg or not run_cfg.get("files"):
        raise BadInput(f"run {args.name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{args.name}]")
    from .. import multinode
    nodes = multinode.nodes_of(args, cfg, args.name)
    if nodes:  # a run over several nodes: its files on every node, each checked there
        from .. import multideploy
        res, code = multideploy.deploy(nodes, args.name, run_cfg["files"], base=config_dir(cfg), **options(args))
        return multideploy.emit(out, "deploy", res, code)
    res = _files.push(target, run_cfg["files"], run=args.name, progress=not out.json, base=config_dir(cfg),
                      **options(args))
    return emit(out, "deploy", target, res, describe(res, target, "deployed"))
