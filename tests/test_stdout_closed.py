"""`runward status >&-` (fd 1 closed at start: sys.stdout is None). launch.py already flushes
around a None stdout, but Out() read sys.stdout.isatty() and the command died of an
AttributeError traceback (exit 1) before it asked anything; its JSON document then met
None.write. Now it writes nothing, as print() does with no stdout, and exits with the verb's
code: the same on the in-process route and the spawned one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SPAWNED = ("import sys; from runward import inprocess, cli; inprocess.wanted = lambda *a, **k: False; "
            "sys.exit(cli.main(sys.argv[1:]))")


@pytest.mark.parametrize("json_mode", [False, True])
def test_status_with_stdout_closed_says_nothing_and_keeps_its_exit_code(cli, json_mode):
    words = ["status", "--json"] if json_mode else ["status"]
    for argv, code in ((cli.argv(*words), 0), (cli.argv(*words, "no-such-run-closed"), 4),
                       ([sys.executable, "-c", _SPAWNED, *words], 0)):
        p = subprocess.run(argv, cwd=cli.cwd, env=cli.env, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=lambda: os.close(1))
        assert p.returncode == code and b"Traceback" not in p.stderr, (argv, p.returncode, p.stderr[-400:])
