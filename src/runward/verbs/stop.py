"""runward stop NAME [--on TARGET]: the whole tree verified dead (and its GPUs released)."""

from __future__ import annotations

from ..render import render_stop
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--grace", type=float, metavar="SECONDS",
                   help="how long to wait after the stop signal before KILL (default: the run's, 30)")
    p.add_argument("--signal", metavar="SIG", help="the stop signal (default: the run's, TERM)")
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="give up after this long if another verb holds the run (default 30)")
    p.add_argument("--gpu-timeout", type=float, metavar="S", help="how long to wait for GPU memory release (default 60)")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.stop(target, args.name, grace=args.grace, signal=args.signal, gpu_timeout=args.gpu_timeout,
                   lock_timeout=args.lock_timeout)
    return emit(out, "stop", target, res, render_stop(res))
