"""runward stop NAME [--on TARGET]: the whole tree verified dead (and its GPUs released)."""

from __future__ import annotations

from .. import options
from ..errors import BadInput, RunNotFound
from ..render import render_stop
from ._common import emit, load_config, old_spelling, on_runs, signal_arg, target_of


# Ctrl-C (cli.main) of a stop over several targets (--all, a multi-node run); one target's stop
# says more itself (interrupted(), below)
INTERRUPTED = ("interrupted: each target's stop that had begun goes on there to its verified end "
               "(its agent outlives the caller) and is recorded; `runward status` shows each")


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    options.add(p, "grace")
    options.add(p, "stop_signal")
    old_spelling(p, "--signal", "stop_signal", type=signal_arg)
    options.add(p, "lock_timeout")
    p.add_argument("--gpu-release-timeout", type=float, metavar="SECONDS",
                   help="how long to wait for the run's GPU memory to be released (default: the run's "
                        "gpu_release_timeout, else 60)")
    old_spelling(p, "--gpu-timeout", "gpu_release_timeout", type=float)
    add_checkpoint_args(p, "stop as usual")


def add_checkpoint_args(p, then: str) -> None:
    """stop's and restart's checkpoint before the stop (runward.toml's stop_checkpoint)."""
    p.add_argument("--checkpoint", action="store_true",
                   help="first send the checkpoint signal and wait for the checkpoint (runward.toml's "
                        f"stop_checkpoint, or the flags below), then {then}")
    p.add_argument("--no-checkpoint", action="store_true", help="stop at once, even with stop_checkpoint")
    p.add_argument("--checkpoint-signal", metavar="SIG", type=signal_arg, help="the checkpoint signal (default USR1)")
    p.add_argument("--checkpoint-wait-for", metavar="REGEX",
                   help="the log line that says the checkpoint is saved (default: a newer complete --checkpoint)")
    p.add_argument("--checkpoint-timeout", type=float, metavar="SECONDS", help="wait at most this long (default 600)")


def run(args, out) -> int:
    cfg = load_config(args)
    if args.all:
        return on_runs(args, cfg, out, "stop", lambda name, t: _stop_any(args, cfg, name, t), _render_any)
    if not args.name:
        raise BadInput("no run named", "runward stop NAME, or --all for every run in runward.toml")
    from .. import multinode
    nodes = multinode.nodes_of(args, cfg, args.name)
    if nodes is None:
        target = target_of(args, cfg, args.name)
        began: list[bool] = []
        try:
            res = _stop(args, args.name, target, on_begun=lambda: began.append(True), cfg=cfg)
        except KeyboardInterrupt:
            return interrupted(out, target, args.name, bool(began), args.on)
        nodes = multinode.nodes_from_record(res)  # one node of a multi-node run: stop them all
        if nodes is None:
            return emit(out, "stop", target, res, render_stop(res))
    res, code = multinode.stop(nodes, args.name, grace=args.grace, signal=args.stop_signal,
                               gpu_timeout=args.gpu_release_timeout, lock_timeout=args.lock_timeout,
                               checkpoint=checkpoint_of(args, cfg, args.name))
    return multinode.emit(out, "stop", res, code)


def _stop(args, name, target, on_begun=None, cfg=None):
    from .. import api
    return api.stop(target, name, grace=args.grace, signal=args.stop_signal, gpu_timeout=args.gpu_release_timeout,
                    lock_timeout=args.lock_timeout, on_begun=on_begun, checkpoint=checkpoint_of(args, cfg, name))


def checkpoint_of(args, cfg, name) -> dict | None:
    """stop --checkpoint's table: runward.toml's stop_checkpoint (which makes every stop and
    restart of the run checkpoint first), the flags over it; None for a plain stop."""
    base = ((cfg.runs.get(name) if cfg is not None else None) or {}).get("stop_checkpoint")
    flags = {k: v for k, v in (("signal", args.checkpoint_signal), ("wait_for", args.checkpoint_wait_for),
                               ("timeout", args.checkpoint_timeout)) if v is not None}
    if args.no_checkpoint or not (base is not None or args.checkpoint or flags):
        return None
    if base is not None and not isinstance(base, dict):
        raise BadInput(f"invalid stop_checkpoint {base!r}", 'stop_checkpoint = { signal = "USR1", wait_for = "REGEX", timeout = 600 }')
    bad = set(base or {}) - {"signal", "wait_for", "timeout"}
    if bad:
        raise BadInput(f"stop_checkpoint: unknown key(s) {', '.join(sorted(bad))}", "keys: signal, wait_for, timeout")
    return {**(base or {}), **flags}


def interrupted(out, target, name: str, began: bool, on) -> int:
    """Ctrl-C while a stop waited: the target's agent, once it said the stop had begun, takes
    no signal from us and goes on to the verified end (KILL after the grace included), which
    it records for `status`. Said so, exit 130."""
    import sys
    where = f" --on {on}" if isinstance(on, str) else ""
    if began:
        msg = f"interrupted; the stop goes on on the target; `runward status {name}{where}` shows its end"
    else:
        msg = (f"interrupted before the target said the stop of {name} had begun: it may not have started; "
               f"`runward status {name}{where}` shows the run, `runward stop {name}{where}` stops it")
    out.doc({"ok": False, "command": "stop", "target": str(target), "result": {"name": name, "stop_goes_on": began},
             "error": {"type": "Interrupted", "message": msg, "exit_code": 130}})
    if not out.json:
        print(f"runward stop: {msg}", file=sys.stderr)
    return 130


def _render_any(res: dict) -> str:
    from .. import multinode
    return multinode.render(res, "stop") if "nnodes" in res else render_stop(res)


def _stop_any(args, cfg, name, target):
    """stop --all: a run of runward.toml never started on its target has nothing running
    there (no record, so nothing runward started): stopped, verified, not a failure. A run
    with nodes: every node (a node never started counts the same way)."""
    if cfg.runs.get(name, {}).get("nodes"):
        from .. import multinode
        from ..errors import OperationFailed
        res, code = multinode.stop([cfg.target(t) for t in cfg.runs[name]["nodes"]], name, grace=args.grace,
                                   signal=args.stop_signal, gpu_timeout=args.gpu_release_timeout,
                                   lock_timeout=args.lock_timeout, checkpoint=checkpoint_of(args, cfg, name))
        if code:
            e = OperationFailed(f"{name}: not every node's stop was verified", result=res)
            e.exit_code = code
            raise e
        return res
    try:
        return _stop(args, name, target)
    except RunNotFound:
        return {"name": name, "already_stopped": True, "never_started": True, "verified_dead": True,
                "state": "never started", "processes": [], "verified": ["no_record_on_target"]}
