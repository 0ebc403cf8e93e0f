"""runward stop NAME [--on TARGET]: the whole tree verified dead (and its GPUs released)."""

from __future__ import annotations

from ..render import render_stop
from ._common import emit, load_config, old_spelling, target_of


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--grace", type=float, metavar="SECONDS",
                   help="how long to wait after the stop signal before KILL (default: the run's, 30)")
    p.add_argument("--stop-signal", metavar="SIG", help="the signal sent first (default: the run's, TERM)")
    old_spelling(p, "--signal", "stop_signal")
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="give up after this long if another verb holds the run (default 30)")
    p.add_argument("--gpu-release-timeout", type=float, metavar="SECONDS",
                   help="how long to wait for the run's GPU memory to be released (default 60)")
    old_spelling(p, "--gpu-timeout", "gpu_release_timeout", type=float)


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.stop(target, args.name, grace=args.grace, signal=args.stop_signal, gpu_timeout=args.gpu_release_timeout,
                   lock_timeout=args.lock_timeout)
    return emit(out, "stop", target, res, render_stop(res))
