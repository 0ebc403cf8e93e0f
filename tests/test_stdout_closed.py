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

_SPAWNED = ("import sys; from runward.transport import inprocess; from runward import cli; inprocess.wanted = lambda *a, **k: False; "
            "sys.exit(cli.main(sys.argv[1:]))")


@pytest.mark.parametrize("json_mode", [False, True])
def test_status_with_stdout_closed_says_nothing_and_keeps_its_exit_code(cli, json_mode):
    words = ["status", "--json"] if json_mode else ["status"]
    for argv, code in ((cli.argv(*words), 0), (cli.argv(*words, "no-such-run-closed"), 4),
                       ([sys.executable, "-c", _SPAWNED, *words], 0)):
        p = subprocess.run(argv, cwd=cli.cwd, env=cli.env, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=lambda: os.close(1))
        assert p.returncode == code and b"Traceback" not in p.stderr, (argv, p.returncode, p.stderr[-400:])


# `runward status > /dev/full`: a stdout whose write fails (ENOSPC; a full disk, EIO, a quota)
# was an OSError traceback, exit 1, and nothing said what the verb had done. Now: one line on
# stderr naming the failure and the verb's own exit code, and exit 74 (README, exit codes);
# stdout is never tried a second time (no second document).
@pytest.mark.parametrize("words, had", [
    (["status"], 0), (["status", "--json"], 0), (["status", "--json", "no-such-run-full"], 4),
    (["status", "--bogus-flag", "--json"], 2), (["completion", "bash"], None),
])
def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_74(cli, words, had):
    with open("/dev/full", "w") as full:
        p = subprocess.run(cli.argv(*words), cwd=cli.cwd, env=cli.env, stdout=full, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 74 and "Traceback" not in err, (p.returncode, err[-600:])
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"runward {words[0]}: error: could not write the output to stdout: No space left on device"), err
    assert (f"itself ended with exit code {had}" in last) == (had is not None), last


def test_a_long_logs_and_a_stop_into_a_full_disk(cli):
    rc, doc = cli.json("start", "fulllog", "--settle", "0.3", "--", "sh", "-c", "seq 1 200000; exec sleep 60")
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    for words in (["logs", "fulllog", "-n", "200000"], ["logs", "fulllog", "-n", "200000", "--json"],
                  ["logs", "fulllog", "-f", "--for", "1"], ["stop", "fulllog"]):
        with open("/dev/full", "w") as full:
            p = subprocess.run(cli.argv(*words), cwd=cli.cwd, env=cli.env, stdout=full, stderr=subprocess.PIPE, timeout=60)
        err = p.stderr.decode()
        assert p.returncode == 74 and "Traceback" not in err and "could not write the output to stdout" in err, (words, err)
    # the stop was done although its output was lost: the job is gone (ground truth: /proc)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"
    assert "ended with exit code 0" in err


def test_exec_and_completion_with_stdout_closed_say_nothing(cli):
    """exec wrote the command's output with sys.stdout.write, which met None (an AttributeError
    traceback) when fd 1 was closed at start; now it says nothing there, as print() does."""
    for words in (["exec", "--", "echo", "hi"], ["completion", "bash"]):
        p = subprocess.run(cli.argv(*words), cwd=cli.cwd, env=cli.env, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=lambda: os.close(1))
        assert p.returncode == 0 and b"Traceback" not in p.stderr, (words, p.stderr[-400:])
