"""runward start NAME [--on TARGET] ... -- COMMAND [ARG]...: verified alive after settling."""

from __future__ import annotations

from .. import options
from ._common import old_spelling, show


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    p.add_argument("--env", action="append", metavar="K=V|NAME",
                   help="environment for the job (repeatable); a bare NAME passes NAME from this shell's "
                        "environment, and its value is never stored on the target")
    p.add_argument("--env-file", action="append", metavar="PATH",
                   help="KEY=VALUE lines (docker's format); values are passed, never stored; restart reads the file again")
    for name in ("cwd", "log", "settle", "ready", "ready_timeout"):
        options.add(p, name)
    options.add(p, "replace")
    p.add_argument("--replace-grace", type=float, metavar="SECONDS",
                   help="with --replace: the old attempt's grace (default: the grace it was started with)")
    options.add(p, "lock_timeout")
    p.add_argument("--gpus", metavar="0,1", help="sets CUDA_VISIBLE_DEVICES and records the GPUs")
    options.add(p, "wait_gpus_free")
    p.add_argument("--gpu-wait-timeout", type=float, metavar="SECONDS",
                   help="with --wait-gpus-free: how long to wait for the GPUs (default 300)")
    old_spelling(p, "--timeout", "gpu_wait_timeout", type=float)
    p.add_argument("--log-max", metavar="SIZE",
                   help="rotate the log past SIZE (e.g. 2G), no line lost: log -> log.1 -> ... (runward.toml: log_max)")
    options.add(p, "log_keep")
    p.add_argument("--max-used", type=float, metavar="MiB", help="a GPU using at most this counts as free (default 1024)")
    options.add(p, "stop_signal")
    options.add(p, "grace")
    options.add(p, "sh")
    options.add(p, "master_addr")
    options.add(p, "nproc_per_node")
    p.add_argument("--on-node-failure", choices=("stop", "continue"),
                   help="several nodes: when one node's job fails, stop the others (default) or let them run")
    from ..supervision import add_arguments as supervision_arguments
    supervision_arguments(p)
    from ..stallopts import add_arguments as stall_arguments
    stall_arguments(p)
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]... (everything after --)")


def run(args, out) -> int:
    from ..operations.start import StartOptions, start
    return show(out, start(StartOptions.from_args(args)))
