"""runward deploy NAME: push the run's files (runward.toml) to where it runs (every node of a
multi-node run: multinode/deploy.py)."""

from __future__ import annotations

from ._common import show


# Ctrl-C (cli.main): what an interrupted push leaves on the target (agent/ops/sync.py's Batch)
INTERRUPTED = ("interrupted: each file on the target is its old or its new version, never torn (a file is "
               "renamed into place only once its sha256 matched); those not reached are as they were (with "
               "--delete, some removals may be done); the same command again finishes it, sending only what "
               "still differs")


def add_arguments(p) -> None:
    from ._syncflags import add_arguments as sync_flags
    p.add_argument("name")
    sync_flags(p)


def run(args, out) -> int:
    from ..operations.deploy import DeployOptions, deploy
    # the per-file progress on stderr is for a person only (never with --json)
    return show(out, deploy(DeployOptions.from_args(args), progress=not out.json))
