"""runward pull --on TARGET REMOTE:LOCAL...: files back through the hop chain, sha256-checked here.
The work: operations/pull.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("specs", nargs="+", metavar="REMOTE:LOCAL",
                   help="a remote file or directory (recursive) and where it goes here; "
                        "into an existing directory or a LOCAL ending in / it keeps its name "
                        "(DIR/:LOCAL copies what is in DIR, as rsync)")


def run(args, out) -> int:
    from ..operations.pull import PullOptions, pull
    return show(out, pull(PullOptions.from_args(args)))
