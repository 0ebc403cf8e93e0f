"""runward lint 'SHELL COMMAND': self-kill and wrong-filesystem hazards (docs/lint.md). The
work and its rendering: operations/lint.py; `-` (read the command from stdin) is the CLI's."""

from __future__ import annotations

from ..spec import options

import sys

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("command_line", metavar="'SHELL COMMAND'", help="the command, or - for stdin")
    options.add(p, "interactive")


def run(args, out) -> int:
    from ..operations.lint import LintOptions, lint
    opts = LintOptions.from_args(args)
    if opts.command_line == "-":
        opts.command_line = sys.stdin.read()
    return show(out, lint(opts))
