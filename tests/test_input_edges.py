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


# 3. `watch --drop nan` and `--straggler-ratio nan` (and inf, and a drop outside (0, 1]) were taken,
#    and judged nothing (a comparison with nan is always False). Both are declared options now
#    (spec/options.py: kinds fraction and ratio), refused as the seconds options are: exit 2 naming the flag.
@pytest.mark.parametrize("words, flag", [
    (["watch", "x", "--drop", "nan"], "--drop"), (["watch", "x", "--drop", "inf"], "--drop"),
    (["watch", "x", "--drop", "-0.5"], "--drop"), (["watch", "x", "--drop", "0"], "--drop"),
    (["watch", "x", "--drop", "2"], "--drop"),
    (["watch", "x", "--straggler-ratio", "nan"], "--straggler-ratio"),
    (["watch", "x", "--straggler-ratio", "inf"], "--straggler-ratio"),
    (["watch", "x", "--straggler-ratio", "-2"], "--straggler-ratio"),
    (["start", "x", "--straggler-ratio", "nan", "--", "sleep", "5"], "--straggler-ratio"),
])
def test_nan_inf_and_meaningless_ratios_are_exit_2_naming_the_flag(cli, words, flag):
    rc, doc = cli.json(*words)
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert doc["error"]["message"].startswith(f"argument {flag}: invalid "), doc
    assert doc["error"].get("hint", "").startswith("give "), doc
    assert not (cli.home / "runs" / "x").exists()


def test_the_api_and_runward_toml_refuse_them_too(cli, lib):
    from runward.errors import BadInput
    from runward.operations import watch as w
    for kw in ({"drop": float("nan")}, {"straggler_ratio": float("inf")}, {"drop": 3}):
        with pytest.raises(BadInput):
            w.watch(w.WatchOptions(name="x", **kw))
    for table in ("drop_fraction = nan", "straggler_ratio = nan", "straggler_ratio = inf"):
        (cli.cwd / "runward.toml").write_text(f'[runs.x]\ncommand = ["sleep", "5"]\n[runs.x.health]\n{table}\n')
        rc, doc = cli.json("watch", "x", "--for", "1")
        assert rc == 2 and table.split(" =")[0] in doc["error"]["message"], (table, doc)
    assert not (cli.home / "runs" / "x").exists()
