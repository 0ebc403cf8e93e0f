"""Input and edge defects: each was a traceback (or a wrong word) where a clear refusal or a
true message belongs.

1. A start whose command, --env value, --cwd or --sh holds a byte that is not UTF-8 (a Linux
   argv is bytes: `runward start x -- sh -c $'echo \\xff'`) reached the agent, which died
   writing the attempt's record (UnicodeEncodeError, exit 3 with a remote traceback). The
   request, the records and the log's header are UTF-8 text: refused, exit 2, naming the
   argument, before anything is written on the target."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(cli, *args, env=None):
    argv = [os.fsencode(sys.executable), b"-m", b"runward", *[a if isinstance(a, bytes) else a.encode() for a in args]]
    return subprocess.run(argv, cwd=cli.cwd, env=env or cli.env, capture_output=True, timeout=60)


@pytest.mark.parametrize("words, named", [
    ((b"start", b"nonutf1", b"--", b"sh", b"-c", b"echo \xff"), b"argument 3 of the command, 'echo \\xff'"),
    ((b"start", b"nonutf2", b"--env", b"K=\xff", b"--", b"sleep", b"30"), b"--env K: its value is not UTF-8"),
    ((b"start", b"nonutf3", b"--cwd", b"/tmp/\xff", b"--", b"sleep", b"30"), b"--cwd '/tmp/\\xff'"),
    ((b"start", b"nonutf4", b"--sh", b"echo \xff"), b"--sh 'echo \\xff'"),
    ((b"exec", b"--", b"echo", b"\xff"), b"argument 2 of the command, '\\xff'"),
])
def test_a_byte_that_is_not_utf8_is_bad_input_naming_the_argument(cli, words, named):
    p = _run(cli, *words)
    assert p.returncode == 2 and b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")
    assert named in p.stderr and b"not UTF-8 text" in p.stderr and b"hint:" in p.stderr, p.stderr
    assert not (cli.home / "runs" / words[1].decode()).exists()  # nothing written on the target


def test_an_inherited_env_value_that_is_not_utf8_is_refused_without_showing_it(cli):
    env = {os.fsencode(k): os.fsencode(v) for k, v in cli.env.items()}
    env[b"SECRETISH"] = b"s3cr\xfft"
    p = _run(cli, "start", "nonutf5", "--env", "SECRETISH", "--json", "--", "sleep", "30", env=env)
    import json
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and doc["error"]["type"] == "BadInput", doc
    assert doc["error"]["message"] == "--env SECRETISH: its value is not UTF-8 text"
    assert b"s3cr" not in p.stdout + p.stderr
    assert not (cli.home / "runs" / "nonutf5").exists()


def test_restart_refuses_it_before_stopping_the_run(cli):
    rc, doc = cli.json("start", "nonutf6", "--settle", "0.3", "--", "sleep", "60")
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    p = _run(cli, "restart", "nonutf6", "--cwd", b"/tmp/\xff")
    assert p.returncode == 2 and b"--cwd '/tmp/\\xff' is not UTF-8 text" in p.stderr, p.stderr
    assert os.path.exists(f"/proc/{pid}") and cli.status("nonutf6")["pid"] == pid  # untouched
    cli.run("stop", "nonutf6")


def test_the_library_refuses_it_too(lib):
    res = lib.start("nonutf7", command=["echo", "a\udcffb"])
    doc = res.to_json()
    assert not res.ok and doc["error"]["exit_code"] == 2, doc
    assert "argument 2 of the command, 'a\\xffb'" in doc["error"]["message"], doc
