"""runward gpus [--on TARGET | --all]: each GPU, and the processes on it mapped to their runs.
The work and its rendering: operations/gpus.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("--all", action="store_true", help="every named target in runward.toml, in parallel")
    p.add_argument("--map", choices=("auto", "memory"), default="auto",
                   help="inside a container: auto reads the host's NSpid lines through the host hop; "
                        "memory attributes by the runs recorded on each GPU")


def run(args, out) -> int:
    from ..operations.gpus import GpusOptions, gpus
    return show(out, gpus(GpusOptions.from_args(args)))
