"""status: the state of one run or of every run on a target (running, exited, stray, lost,
orphaned, and why); of every node of a multi-node run; or of every target runward.toml
names (--all, or a project's runs where they live)."""

from __future__ import annotations

from ..errors import EXIT_OK, RunwardError
from ..targets import engine_of
from . import Outcome, Targeted, single
from .common import config_dir, config_targets, load_config, on_all, target_of


class StatusOptions(Targeted):
    """What `runward status` takes (verbs/status.py's flags)."""
    name: str | None = None
    all: bool = False
    since: str | None = None


def status(opts: StatusOptions) -> Outcome:
    from .. import api
    from ..multinode import nodes as multinode
    from ..views.render import render_status
    cfg = load_config(opts)
    since = api.parse_duration(opts.since, "--since")
    if opts.all:
        names = [opts.name] if opts.name else None
        return on_all(cfg, "status", lambda t: api.status(t, names, since),
                      lambda r: render_status(r["result"], r["target"]), failed=_failed, exit_code=_all_code)
    if opts.name is None and opts.on is None and cfg.path:
        # in a project: its runs live on runward.toml's targets, not necessarily here
        targets = config_targets(cfg)
        if cfg.bad_targets or (targets and targets != [target_of(opts, cfg)]):
            return on_all(cfg, "status", lambda t: api.status(t), lambda r: render_status(r["result"], r["target"]),
                          failed=_failed, exit_code=_all_code, targets=targets)
    if opts.name:  # here, not at the top: a plain `status` (the start-up budget) imports none of it
        from . import nodes as on_nodes
        nodes = on_nodes.nodes_of(opts, cfg, opts.name)
        if nodes:
            return on_nodes.outcome("status", *multinode.status(nodes, opts.name))
    target = target_of(opts, cfg, opts.name)
    res = api.status(target, [opts.name] if opts.name else None, since)
    nodes = multinode.nodes_from_record(res["runs"][0]) if opts.name and res.get("runs") else None
    if nodes:  # one node of a multi-node run: every node, and the aggregate
        from . import nodes as on_nodes
        return on_nodes.outcome("status", *multinode.status(nodes, opts.name))
    files = cfg.runs.value(opts.name, "files") if opts.name else None
    if files and res.get("runs"):
        from .. import files as _files
        d = _files.local_drift(res["runs"][0], files, base=config_dir(cfg))
        try:  # files runward never deployed: against the target's copy (one more round trip, only then)
            d += _files.undeployed_drift(target, res["runs"][0], files, base=config_dir(cfg))
        except RunwardError as e:  # the status stands; what was not read is said as not read
            res["runs"][0]["local_drift_unknown"] = e.message
        if d:
            res["runs"][0]["local_drift"] = d
    shown = _attempt_target(target, res["runs"][0]) if opts.name and res.get("runs") else str(target)
    return single("status", shown, res, lambda: render_status(res, shown))


def _attempt_target(target, run: dict) -> str:
    """The target the run's attempt lives on: an engine's run asked on this host without --on is
    said as its scheme names this host (targets/NAME.py's HERE, where the scheme needs no more
    than the host), as its start said, not the bare host "local"."""
    engine = engine_of(run) if str(target) == "local" else None
    return getattr(engine, "HERE", None) or str(target)


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
