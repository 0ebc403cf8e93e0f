"""runward stop NAME [--on TARGET]: the whole tree verified dead (and its GPUs released)."""

from __future__ import annotations

from ..spec import options
from ._common import old_spelling, show, signal_arg


# Ctrl-C (cli.main) of a stop over several targets (--all, a multi-node run); one target's stop
# says more itself (operations/stop.interrupted)
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
    for name in ("no_checkpoint", "checkpoint_signal", "checkpoint_wait_for", "checkpoint_timeout"):
        options.add(p, name)


def run(args, out) -> int:
    from ..operations.stop import StopOptions, stop
    return show(out, stop(StopOptions.from_args(args)))
