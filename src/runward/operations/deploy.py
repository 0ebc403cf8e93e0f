"""deploy: a run's files (runward.toml) pushed where it runs, every node of a multi-node run
(multinode/deploy.py)."""

from __future__ import annotations

from ..errors import BadInput
from . import Outcome, single
from .common import config_dir, did_you_mean, load_config, target_of
from .push import sync_kwargs, SyncOptions


class DeployOptions(SyncOptions):
    """What `runward deploy` takes (verbs/deploy.py's flags)."""
    name: str | None = None


def deploy(opts: DeployOptions, progress: bool = False) -> Outcome:
    """PROGRESS: as push's."""
    from .. import files as _files
    from ..views.render import describe_sync
    if not opts.name:
        raise BadInput("deploy needs a run name", "name a run of runward.toml that has files = [...]")
    cfg = load_config(opts)
    target = target_of(opts, cfg, opts.name)
    run_cfg = cfg.runs.get(opts.name)
    close = did_you_mean(opts.name, cfg) if run_cfg is None else None
    if close:
        raise BadInput(f"no run {opts.name!r} in runward.toml", close)
    if not run_cfg or not run_cfg.get("files"):
        raise BadInput(f"run {opts.name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{opts.name}]")
    from . import nodes as on_nodes
    nodes = on_nodes.nodes_of(opts, cfg, opts.name)
    if nodes:  # a run over several nodes: its files on every node, each checked there
        from ..multinode import deploy as multideploy
        res, code = multideploy.deploy(nodes, opts.name, run_cfg["files"], base=config_dir(cfg), **sync_kwargs(opts))
        outcome = on_nodes.outcome("deploy", res, code)
        from ..views.nodesview import render_deploy
        outcome.text = lambda: render_deploy(res)
        return outcome
    res = _files.push(target, run_cfg["files"], run=opts.name, progress=progress, base=config_dir(cfg),
                      **sync_kwargs(opts))
    return single("deploy", target, res, lambda: describe_sync(res, target, "deployed"))
