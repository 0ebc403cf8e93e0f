"""A RUNWARD_HOME this user cannot read (another user's 0700 home, a 0000 one): status died of
the agent's PermissionError, said as a bug with its traceback ("AgentError: PermissionError:
[Errno 13] ... remote traceback: ..."), on both routes. Now it says whose directory it is and
what to do, with no traceback; the exit code (3) is unchanged."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
_SPAWNED = ("import sys; from runward.transport import inprocess; from runward import cli; inprocess.wanted = lambda *a, **k: False; "
            "sys.exit(cli.main(sys.argv[1:]))")


@pytest.mark.skipif(os.geteuid() != 0, reason="runs runward as another user")
def test_a_home_this_user_cannot_read_is_said_without_a_traceback(tmp_path):
    from oracle.world import ordinary_user
    uid, gid = ordinary_user()
    os.chmod(tmp_path, 0o755)
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    os.chmod(home, 0o700)  # root's, 0700: not this user's to read
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "RUNWARD_HOME": str(home), "HOME": "/nonexistent"}
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    for argv in ([py, "-m", "runward"], [py, "-c", _SPAWNED]):
        p = subprocess.run([*argv, "status", "--json"], env=env, cwd="/", capture_output=True, text=True,
                           timeout=60, user=uid, group=gid, extra_groups=[])
        err = json.loads(p.stdout)["error"]
        assert p.returncode == 3 and "traceback" not in json.dumps(err), (argv, err)
        assert str(home) in err["message"] and "not readable" in err["message"], err
        assert "RUNWARD_HOME" in err["hint"], err


def test_a_home_that_is_a_file_is_said_without_a_traceback(tmp_path):
    """RUNWARD_HOME naming a regular file: status and start say so (exit 3, naming it), a verb
    on a run answers that there is no such run (exit 4); never a NotADirectoryError traceback."""
    home = tmp_path / "home"
    home.write_text("not a directory\n")
    env = dict(os.environ, PYTHONPATH=str(SRC), RUNWARD_HOME=str(home))
    env.pop("RUNWARD_CONFIG", None)
    for argv in ([sys.executable, "-m", "runward"], [sys.executable, "-c", _SPAWNED]):
        for verb, code in ((["status"], 3), (["start", "hf", "--json", "--", "true"], 3), (["stop", "hf"], 4),
                           (["logs", "hf"], 4), (["rm", "hf"], 4)):
            p = subprocess.run([*argv, *verb, *([] if "--" in verb else ["--json"])], env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=60)
            err = json.loads(p.stdout)["error"]
            assert p.returncode == code and "Traceback" not in json.dumps(err), (argv, verb, err)
            if code == 3:
                assert str(home) in err["message"] and "not a directory" in err["message"], err
    assert home.read_text() == "not a directory\n"
