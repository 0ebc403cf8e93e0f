"""`runward --help`, `runward --version` and a bare `runward`, said without argparse.

Importing argparse (and with it re, gettext, enum, functools, ...) costs more than the rest of
`runward --help` together (bench/startup.py, python -X importtime). The top-level help is a
fixed text: the verb table's lines (cli.VERBS), two options and one positional, laid out as
argparse lays them out. It is used only where that layout is known to be argparse's own
(tests/test_tophelp.py compares the two at every width): a terminal wide enough that no help
line wraps, and an argparse that does not colour its help (3.14 does). Elsewhere, and for
anything else on the command line, cli.py's argparse parser answers.
"""

from __future__ import annotations

import os
import sys

# argparse puts the options' help at column 14 (the longest flag, "-h, --help", plus 4); the
# longest help line below is 49 characters: narrower, argparse wraps it, and it answers itself
MIN_WIDTH = 14 + 49
USAGE = "usage: runward [-h] [--version] [COMMAND]"
VERSION = "runward 0.1.0"
DESCRIPTION = ("Start, stop, restart and watch named runs on local, SSH and container targets. "
               "Every answer is verified.")
EXIT_CODES = """exit codes:
  0  done and verified          3  target unreachable (a hop failed)
  1  the operation failed       4  no such run
  2  bad input or config        5  done but not verified
"""
EPILOG = "`runward COMMAND --help` shows a command's options.\n\n" + EXIT_CODES
COMMAND_HELP = "one of the commands above, then its own arguments"


def width() -> int:
    """The width argparse formats to (cli's formatter uses this too): $COLUMNS, else the
    terminal's, else 80, less 2. os.get_terminal_size, not shutil's: shutil (with its
    compression modules) costs --help more than argparse itself."""
    try:
        w = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (ValueError, OSError, AttributeError):
        w = 80
    return w - 2


def commands(verbs) -> str:
    """The description with its list of commands (the bare parser's description too)."""
    w = max(len(name) for name, _, _ in verbs)
    return DESCRIPTION + "\n\ncommands:\n" + "\n".join(f"  {name:<{w}}  {help_}" for name, help_, _ in verbs)


def text(verbs) -> str | None:
    """The top-level help as argparse prints it, or None where argparse must lay it out."""
    if width() < MIN_WIDTH or sys.version_info >= (3, 14):
        return None
    return (f"{USAGE}\n\n{commands(verbs)}\n\n"
            f"positional arguments:\n  COMMAND     {COMMAND_HELP}\n\n"
            "options:\n  -h, --help  show this help message and exit\n"
            "  --version   show program's version number and exit\n\n"
            f"{EPILOG.strip()}\n")
