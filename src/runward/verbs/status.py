"""runward status [NAME] [--on TARGET | --all]: running, exited, stray, lost or orphaned, and why."""

from __future__ import annotations

from ..spec import options

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every named target in runward.toml, in parallel")
    options.add(p, "since")


def run(args, out) -> int:
    from ..operations.status import StatusOptions, status
    return show(out, status(StatusOptions.from_args(args)))
