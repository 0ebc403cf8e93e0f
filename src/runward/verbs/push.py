"""runward push --on TARGET LOCAL:REMOTE...: only what differs through the hop chain, sha256-checked."""

from __future__ import annotations

from ._common import show


# Ctrl-C (cli.main): what an interrupted push leaves on the target (agent/ops/sync.py's Batch)
INTERRUPTED = ("interrupted: each file on the target is its old or its new version, never torn (a file is "
               "renamed into place only once its sha256 matched); those not reached are as they were (with "
               "--delete, some removals may be done); the same command again finishes it, sending only what "
               "still differs")


def add_arguments(p) -> None:
    from ._syncflags import add_arguments as sync_flags
    p.add_argument("specs", nargs="+", metavar="LOCAL:REMOTE")
    sync_flags(p)


def run(args, out) -> int:
    from ..operations.push import PushOptions, push
    # the per-file progress on stderr is for a person only (never with --json)
    return show(out, push(PushOptions.from_args(args), progress=not out.json))
