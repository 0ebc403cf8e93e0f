"""The flags push and deploy share (sync.py does the work; this stays light for --help)."""

from __future__ import annotations

from ..spec import options


def add_arguments(p) -> None:
    """push's and deploy's shared flags."""
    p.add_argument("--delete", action="store_true",
                   help="remove files under a pushed directory that the source does not have (never / or ~)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="leave out paths matching PATTERN (gitignore syntax; repeatable)")
    p.add_argument("--no-ignore-files", action="store_true",
                   help="do not read .gitignore / .runwardignore in the pushed directories")
    options.add(p, "dry_run", also=("-n",))

