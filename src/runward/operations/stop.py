"""stop: a run's whole tree verified dead (and its GPUs released), on one target, on every
node of a multi-node run, or for every run of runward.toml (--all)."""

from __future__ import annotations

from ..errors import BadInput, RunNotFound, RunwardError
from . import Checkpointed, Outcome, Targeted, check, single
from .common import load_config, on_runs, target_of


class StopOptions(Targeted, Checkpointed):
    """What `runward stop` takes (verbs/stop.py's flags; spec/options.py declares the spec ones)."""
    name: str | None = None
    all: bool = False
    grace: float | None = None
    stop_signal: str | None = None
    lock_timeout: float | None = None
    gpu_release_timeout: float | None = None


def stop(opts: StopOptions) -> Outcome:
    from ..views.render import render_stop
    check(opts)
    cfg = load_config(opts)
    if opts.all:
        return on_runs(opts, cfg, "stop", lambda name, t: _stop_any(opts, cfg, name, t), _render_any)
    if not opts.name:
        raise BadInput("no run named", "runward stop NAME, or --all for every run in runward.toml")
    from ..multinode import nodes as multinode
    from . import nodes as on_nodes
    nodes = on_nodes.nodes_of(opts, cfg, opts.name)
    if nodes is None:
        target = target_of(opts, cfg, opts.name)
        began: list[bool] = []
        try:
            res = _stop(opts, opts.name, target, on_begun=lambda: began.append(True), cfg=cfg)
        except KeyboardInterrupt:
            return interrupted(target, opts.name, bool(began), opts.on)
        except RunwardError as e:
            # that node's stop not verified (its blocked shim not seen to end): the other nodes
            # are stopped all the same, and its row says what it said (exit 5 the worst)
            nodes = multinode.nodes_from_record(e.result) if isinstance(e.result, dict) else None
            if nodes is None:
                raise
            done = _done_rank(e.result, nodes, e)
        else:
            nodes = multinode.nodes_from_record(res)  # one node of a multi-node run: stop them all
            if nodes is None:
                return single("stop", target, res, lambda: render_stop(res))
            done = _done_rank(res, nodes)
    else:
        done = None
    res, code = multinode.stop(nodes, opts.name, grace=opts.grace, signal=opts.stop_signal,
                               gpu_timeout=opts.gpu_release_timeout, lock_timeout=opts.lock_timeout,
                               checkpoint=checkpoint_of(opts, cfg, opts.name), done=done)
    return on_nodes.outcome("stop", res, code)


def _done_rank(res: dict, nodes: list, error=None) -> dict | None:
    """The node `stop --on ONE-NODE` just stopped, by its record's rank: its verified result
    (or its ERROR, not verified) stands in the fan-out (docs/multinode.md, "stop --on one node")."""
    rank = (res.get("multinode") or {}).get("rank")
    if not isinstance(rank, int) or not 0 <= rank < len(nodes):
        return None
    return {rank: error if error is not None else res}


def _stop(opts, name, target, on_begun=None, cfg=None):
    from .. import api
    return api.stop(target, name, grace=opts.grace, signal=opts.stop_signal, gpu_timeout=opts.gpu_release_timeout,
                    lock_timeout=opts.lock_timeout, on_begun=on_begun, checkpoint=checkpoint_of(opts, cfg, name))


def checkpoint_of(opts, cfg, name) -> dict | None:
    """stop --checkpoint's table: runward.toml's stop_checkpoint (which makes every stop and
    restart of the run checkpoint first), the flags over it; None for a plain stop."""
    base = cfg.runs.value(name, "stop_checkpoint") if cfg is not None else None
    flags = {k: v for k, v in (("signal", opts.checkpoint_signal), ("wait_for", opts.checkpoint_wait_for),
                               ("timeout", opts.checkpoint_timeout)) if v is not None}
    if opts.no_checkpoint or not (base is not None or opts.checkpoint or flags):
        return None
    if base is not None and not isinstance(base, dict):
        raise BadInput(f"invalid stop_checkpoint {base!r}", 'stop_checkpoint = { signal = "USR1", wait_for = "REGEX", timeout = 600 }')
    bad = set(base or {}) - {"signal", "wait_for", "timeout"}
    if bad:
        raise BadInput(f"stop_checkpoint: unknown key(s) {', '.join(sorted(bad))}", "keys: signal, wait_for, timeout")
    return {**(base or {}), **flags}


def interrupted(target, name: str, began: bool, on) -> Outcome:
    """Ctrl-C while a stop waited: the target's agent, once it said the stop had begun, takes
    no signal from us and goes on to the verified end (KILL after the grace included), which
    it records for `status`. Said so, exit 130."""
    where = f" --on {on}" if isinstance(on, str) else ""
    if began:
        msg = f"interrupted; the stop goes on on the target; `runward status {name}{where}` shows its end"
    else:
        msg = (f"interrupted before the target said the stop of {name} had begun: it may not have started; "
               f"`runward status {name}{where}` shows the run, `runward stop {name}{where}` stops it")
    return Outcome("stop", 130, {"ok": False, "command": "stop", "target": str(target),
                                 "result": {"name": name, "stop_goes_on": began},
                                 "error": {"type": "Interrupted", "message": msg, "exit_code": 130}}, stderr=msg)


def _render_any(res: dict) -> str:
    from ..views import nodesview
    from ..views.render import render_stop
    return nodesview.render(res, "stop") if "nnodes" in res else render_stop(res)


def _stop_any(opts, cfg, name, target):
    """stop --all: a run of runward.toml never started on its target has nothing running
    there (no record, so nothing runward started): stopped, verified, not a failure. A run
    with nodes: every node (a node never started counts the same way)."""
    if cfg.runs.placement(name).get("nodes"):
        from ..multinode import nodes as multinode
        from ..errors import OperationFailed
        res, code = multinode.stop([cfg.target(t) for t in cfg.runs.placement(name)["nodes"]], name, grace=opts.grace,
                                   signal=opts.stop_signal, gpu_timeout=opts.gpu_release_timeout,
                                   lock_timeout=opts.lock_timeout, checkpoint=checkpoint_of(opts, cfg, name))
        if code:
            e = OperationFailed(f"{name}: not every node's stop was verified", result=res)
            e.exit_code = code
            raise e
        return res
    try:
        return _stop(opts, name, target)
    except RunNotFound:
        return {"name": name, "already_stopped": True, "never_started": True, "verified_dead": True,
                "state": "never started", "processes": [], "verified": ["no_record_on_target"]}
