"""Stacks of real jobs: py-spy (SPY, needs_spy), a job blocked where its stack shows it (BLOCKED),
and starting, reaching and stopping it."""

from __future__ import annotations

import os
import shutil
import sys

import pytest


SPY = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
needs_spy = pytest.mark.skipif(not os.path.exists(SPY), reason="py-spy is not installed (pip install -e '.[stacks]')")

BLOCKED = """\
import time
def wait_for_the_lock_forever():
    print("ready", flush=True)
    while True:
        time.sleep(0.5)
wait_for_the_lock_forever()
"""


def _start(cli, tmp_path, name, *argv):
    rc, doc = cli.json("start", name, "--settle", "0.2", "--ready", "ready", "--", *argv, timeout=120)
    assert rc == 0, doc
    return doc


BLOCKED_C = ("import time\ndef wait_for_the_lock_forever():\n    print('ready', flush=True)\n"
             "    while True:\n        time.sleep(0.5)\nwait_for_the_lock_forever()\n")


def _remote(cli, tmp_path, feature, on, tag):
    """A run of BLOCKED_C on ON, as target `t` whose runward home is this test's own (so a
    py-spy brought there is this test's, found missing first)."""
    import testbed
    tb = testbed.require(feature)
    cli.env.update(testbed.env(tb, cli.env), RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = f"stk{tag}{os.getpid()}"
    home = f"/tmp/rwstk-{tag}-{os.getpid()}"
    (cli.cwd / "runward.toml").write_text(f'[targets.t]\non = "{on}"\nhome = "{home}"\n')
    rc, doc = cli.json("start", name, "--on", "t", "--settle", "0.2", "--ready", "ready", "--",
                       "python3", "-c", BLOCKED_C, timeout=120)
    assert rc == 0, doc
    return name


def _stop(cli, name, on):
    cli.run("stop", name, "--on", "t", "--grace", "2")
    cli.run("exec", "--on", "t", "--", "rm", "-rf", f"/tmp/rwstk-{name[3:6]}-{os.getpid()}")
