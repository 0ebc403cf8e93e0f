"""`runward --help`, `-h`, `--version` and a bare `runward` are said without argparse
(views/tophelp.py, issue 27's start-up goal): the text must be argparse's own at every width, and
argparse must really be left out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runward import cli
from runward.views import tophelp

SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.mark.parametrize("columns", list(range(20, 130)) + [200, 400])
def test_the_top_level_help_is_argparses_own_at_every_width(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    ours = tophelp.text(cli.VERBS)
    if columns - 2 < tophelp.MIN_WIDTH or sys.version_info >= (3, 14):
        assert ours is None  # argparse lays it out there
        return
    assert ours == cli.build_parser(bare=True).format_help()


def _run(*args, columns="100"):
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=columns)
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "runward", *args], capture_output=True,
                       text=True, timeout=60, env=env)
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    return p, imported


@pytest.mark.parametrize("args,code", [(["--help"], 0), (["-h"], 0), (["--version"], 0), ([], 2)])
def test_help_and_version_import_no_argparse(args, code):
    p, imported = _run(*args)
    assert p.returncode == code
    assert "runward.cli" in imported  # the check sees the path it guards
    assert "argparse" not in imported and "re" not in imported, sorted(imported)
    if args == ["--version"]:
        assert p.stdout == "runward 0.1.0\n"
    else:
        assert p.stdout.startswith("usage: runward [-h] [--version] [COMMAND]\n") and "completion" in p.stdout


def test_a_narrow_terminal_and_anything_else_go_through_argparse():
    p, imported = _run("--help", columns="40")
    assert p.returncode == 0 and "argparse" in imported and "usage: runward" in p.stdout
    p, imported = _run("--hel")  # argparse's own abbreviation of --help
    assert p.returncode == 0 and "argparse" in imported and "commands:" in p.stdout
    p, imported = _run("--")
    assert p.returncode == 2 and "takes no command after --" in p.stderr


_ARGPARSE_ONLY = ("import sys; from runward import cli; cli._answered_without_argparse = lambda argv: False; "
                  "sys.exit(cli.main(sys.argv[1:]))")


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--version"], []])
def test_with_stdout_closed_the_words_go_where_argparses_go(args):
    """With fd 1 closed, sys.stdout is None and argparse writes its help and version to
    stderr (ArgumentParser._print_message: `file or sys.stderr`); the text said without
    argparse went nowhere, so `runward --help >&-` printed nothing at all."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100")

    def closed(argv):
        return subprocess.run(argv, stdout=None, stderr=subprocess.PIPE, timeout=60, env=env,
                              preexec_fn=lambda: os.close(1))
    fast = closed([sys.executable, "-m", "runward", *args])
    slow = closed([sys.executable, "-c", _ARGPARSE_ONLY, *args])
    assert slow.stderr.startswith(b"usage: runward" if args != ["--version"] else b"runward 0.1.0")
    assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr)
