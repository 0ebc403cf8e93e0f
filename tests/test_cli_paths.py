"""transport.Spawned, the CLI's own process spawner (it replaced subprocess.Popen to keep
five milliseconds of imports off every call), and the parser built for one verb: each
checked against what the thing it replaced guaranteed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from runward import cli as cli_mod
from runward.transport import agentcall as transport
from runward.errors import HopFailed


def _run(argv, stdin=b"", timeout=None):
    return transport.run_call(argv, stdin, None, None, timeout)


def test_the_child_inherits_no_descriptor_but_0_1_2():
    r, w = os.pipe()
    os.set_inheritable(r, True)  # as a descriptor handed down by whoever started the CLI
    try:
        p = transport.Spawned(["sh", "-c", f"[ -e /proc/$$/fd/{r} ] && echo leaked || echo clean"])
        p.stdin.close()
        out = p.stdout.read()
        assert p.wait() == 0 and out == b"clean\n"
        # the same check through Popen without close_fds shows it can see a leak
        q = subprocess.run(["sh", "-c", f"[ -e /proc/$$/fd/{r} ] && echo leaked || echo clean"],
                           close_fds=False, capture_output=True)
        assert q.stdout == b"leaked\n"
    finally:
        os.close(r)
        os.close(w)


def test_a_child_writing_more_than_a_pipe_to_stderr_does_not_stall():
    # stdout is read to its end before stderr; on a pipe the child would block at 64 KiB
    rc, garbage, reply, err = _run(
        ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x >&2; echo done"], timeout=30)
    assert rc == 0 and garbage == [b"done\n"] and len(err) == 300000


def test_sigpipe_is_back_to_default_in_the_child():
    # Python ignores SIGPIPE in itself; a child that inherited that would not die on EPIPE
    rc, garbage, _, _ = _run(["sh", "-c", "grep SigIgn /proc/$$/status"])
    mask = int(garbage[0].split()[1], 16)
    assert rc == 0 and not mask & (1 << (13 - 1))


def test_a_timeout_kills_the_child():
    t = time.monotonic()
    rc, *_ = _run(["sleep", "30"], timeout=0.5)
    assert rc == -9 and time.monotonic() - t < 10


def _gone(pid: int, within: float = 10.0) -> bool:
    """pid no longer runs (gone, or a zombie its new parent has not reaped yet)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_timeout_kills_what_the_child_started_but_not_what_it_detached():
    # an agent killed at its call's timeout left its nvidia-smi (and that one's children)
    # running as orphans: the kill is its whole process group's. A setsid'd child (a start's
    # shim, the resident, an ssh ControlPersist master) left the group on purpose and lives.
    sh = "sleep 60 >/dev/null & echo $!; setsid sleep 61 >/dev/null 2>&1 & echo $!; sleep 62 >/dev/null"
    rc, garbage, _, _ = _run(["sh", "-c", sh], timeout=1.0)
    inner, detached = (int(x) for x in garbage)
    try:
        assert rc == -9
        assert _gone(inner), f"the child's own child {inner} survived the kill at the timeout"
        assert not _gone(detached, within=0.3), "the child's setsid'd child was killed too"
    finally:
        for pid in (inner, detached):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_input_reaches_the_child_and_its_exit_code_comes_back():
    rc, garbage, reply, _ = _run(["sh", "-c", "cat; echo '{\"v\": 1, \"ok\": true, \"result\": {}}'; exit 3"],
                                 stdin=b"hello\n")
    assert rc == 3 and garbage == [b"hello\n"] and reply == {"v": 1, "ok": True, "result": {}}


def test_a_signal_death_is_a_negative_code():
    rc, *_ = _run(["sh", "-c", "kill -TERM $$"])
    assert rc == -15


def test_a_missing_program_is_a_hop_failure_and_leaks_nothing():
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(HopFailed) as e:
        _run(["/nonexistent/runward-no-such-program"])
    assert "cannot run" in str(e.value)
    assert sorted(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("closed", ["0<&-", "2>&-", "0<&- 2>&-"])
def test_the_cli_works_with_standard_descriptors_closed(cli, closed):
    # a pipe may then take descriptor 0 or 2, and must not be lost in the child's dup2
    cmd = " ".join(subprocess.list2cmdline([a]) for a in cli.argv("status", "--json"))
    p = subprocess.run(["sh", "-c", f"exec {cmd} {closed}"], env=cli.env, capture_output=True, timeout=60)
    assert p.returncode == 0, p
    assert b'"ok": true' in p.stdout


def _sub_help(ap, verb):
    sub = next(a for a in ap._actions if a.dest == "cmd")
    return sub.choices[verb].format_help()


def test_a_verb_parsed_alone_is_the_verb_of_the_whole_parser(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    full = cli_mod.build_parser()
    for verb, _, _ in cli_mod.VERBS:
        alone = cli_mod.build_parser(only=verb)
        assert _sub_help(alone, verb) == _sub_help(full, verb)
        assert len(next(a for a in alone._actions if a.dest == "cmd").choices) == 1


def test_the_verb_is_the_first_word_that_is_not_an_option():
    assert cli_mod._verb_in(["status", "--json"]) == "status"
    assert cli_mod._verb_in(["--version"]) is None
    assert cli_mod._verb_in(["nosuchverb", "start"]) is None  # argparse then names the choices
    assert cli_mod._verb_in(["lint", "-"]) == "lint"


def test_top_level_help_still_lists_every_verb(cli):
    p = cli.run("--help")
    assert p.returncode == 0
    for verb, help_, _ in cli_mod.VERBS:
        assert verb in p.stdout
    bad = cli.run("nosuchverb")
    assert bad.returncode == 2 and "invalid choice: 'nosuchverb'" in bad.stderr and "demo" in bad.stderr


# --------------------------------------------------------------------------- launch.entry


def test_entry_flushes_everything_before_it_leaves_without_teardown(cli):
    """entry() ends the process with os._exit: what main() printed must all be out, and its
    exit code kept, for big output, errors and argparse's own exits."""
    big = cli.run("exec", "--json", "--", sys.executable, "-c", "print('x' * 300000)")
    assert big.returncode == 0
    import json
    assert json.loads(big.stdout)["result"]["stdout"] == "x" * 300000 + "\n"
    missing = cli.run("status", "nosuch", "--json")
    assert missing.returncode == 4 and json.loads(missing.stdout)["error"]["type"] == "RunNotFound"
    text = cli.run("status", "nosuch")
    assert text.returncode == 4 and "nosuch" in text.stderr
    bad = cli.run("nosuchverb")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    assert cli.run("--version").stdout.strip() == "runward 0.1.0"


def test_entry_is_the_console_script_and_python_m():
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    with open(root / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["runward"] == "runward.launch:entry"
    assert "entry()" in (root / "src" / "runward" / "__main__.py").read_text()
