"""cli.py's argparse pieces: its formatter, its parser class (errors raised, not printed),
--on's action. Apart from cli.py so that `runward --help`, `--version` and a bare `runward`
(views/tophelp.py) never import argparse; cli.py imports this module for everything else."""

from __future__ import annotations

import argparse

from .views import tophelp


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse sizes help to the terminal through shutil; tophelp.width is enough (and is
    what the top-level help without argparse uses, so the two agree)."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            width = tophelp.width()
        super().__init__(prog, indent_increment, max_help_position, width)


class BadArguments(Exception):
    """argparse found the command line wrong: raised instead of its print-and-exit, so the
    error is said the way every other one is (one JSON document with --json, exit 2)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*a, **kw)

    def error(self, message: str):
        raise BadArguments(self, message)


class _OnAction(argparse.Action):
    """--on TARGET, repeatable for a multi-node run (docs/multinode.md): args.on is the
    first, args.nodes every one given."""

    def __call__(self, parser, ns, value, option_string=None):
        ns.nodes = [*(getattr(ns, "nodes", None) or []), value]
        ns.on = ns.nodes[0]
