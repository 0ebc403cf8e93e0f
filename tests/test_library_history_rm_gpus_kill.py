"""The operations layer (issue 27), second batch: history, compare, rm, prune, gpus, ps and
kill. `import runward` calls each one's operation directly (no argv, nothing captured), and
its result's to_json() is the very golden the CLI's --json document is held to
(tests/golden/), for the same run; the operation's human text is the CLI's, to the byte."""

from __future__ import annotations

import pytest

from conftest import marked, wait_for
from helpers_golden import JOB, check, restarted, start, stepped


def _cli_text(cli, *args: str) -> str:
    p = cli.run(*args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_library_history_and_compare_are_the_clis_documents_and_text(cli, tmp_path, lib):
    start(cli, "g-hist")
    stepped(cli, "g-hist")
    assert cli.json("restart", "g-hist")[0] == 0
    restarted(cli, "g-hist")
    res = lib.history("g-hist")
    assert res.ok and len(res.result["attempts"]) == 2, res.to_json()
    check("history", res.exit_code, res.to_json(), cli, tmp_path)
    res = lib.compare("g-hist", 1, 2)
    assert res.ok and (res.result["a"], res.result["b"]) == (1, 2), res.to_json()
    check("compare", res.exit_code, res.to_json(), cli, tmp_path)
    # the human text, once nothing moves any more (a live attempt's "ran" grows)
    assert cli.json("stop", "g-hist")[0] == 0
    from runward.operations.compare import CompareOptions, compare
    from runward.operations.history import HistoryOptions, history
    assert history(HistoryOptions(name="g-hist")).render() + "\n" == _cli_text(cli, "history", "g-hist")
    assert (compare(CompareOptions(name="g-hist", a=1, b=2)).render() + "\n"
            == _cli_text(cli, "compare", "g-hist", "1", "2"))


def test_library_history_of_no_such_run_is_the_clis_error_document(cli, tmp_path, lib):
    res = lib.history("g-nosuch")
    check("err_unknown_run_history", res.exit_code, res.to_json(), cli, tmp_path)
    from runward.operations.history import HistoryOptions, history
    with pytest.raises(Exception) as e:  # the operation raises; the API and the CLI say it
        history(HistoryOptions(name="g-nosuch"))
    assert type(e.value).__name__ == "RunNotFound" and e.value.exit_code == 4


def test_library_compare_of_one_attempt_says_two_are_needed(cli, lib):
    """compare(NAME, 3) asked the CLI's parser for attempt B "None": an argparse error. The
    operation's own check answers, as `runward compare NAME 3` does."""
    res = lib.compare("g-any", 3)
    assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
    assert res.error["message"] == "compare g-any 3: one attempt named, two needed", res.to_json()
    assert cli.json("compare", "g-any", "3")[1]["error"] == res.error


def test_library_rm_is_the_clis_rm_document_and_refuses_a_live_run(cli, tmp_path, lib):
    start(cli, "g-rm")
    pids = marked("g-rm.")
    res = lib.rm("g-rm")  # it lives: refused, nothing removed, nothing signalled
    assert res.exit_code == 1 and res.error["type"] == "RunAlive", res.to_json()
    assert marked("g-rm.") == pids and (cli.home / "runs" / "g-rm").is_dir()
    assert cli.json("stop", "g-rm")[0] == 0
    res = lib.rm("g-rm")
    check("rm", res.exit_code, res.to_json(), cli, tmp_path)
    assert not (cli.home / "runs" / "g-rm").exists()


def test_library_rm_checks_lock_timeout_as_the_flag_is_checked(cli, lib):
    res = lib.rm("g-any", lock_timeout=-1.0)
    assert res.exit_code == 2 and "invalid lock_timeout -1.0" in res.error["message"], res.to_json()


def test_library_prune_is_the_clis_prune_document(cli, tmp_path, lib):
    start(cli, "g-prune")
    assert cli.json("stop", "g-prune")[0] == 0
    res = lib.prune("0s", dry_run=True)
    check("prune", res.exit_code, res.to_json(), cli, tmp_path)
    res = lib.prune("fortnight")
    check("err_bad_prune_duration", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_ps_and_kill_are_the_clis_documents(cli, tmp_path, lib):
    start(cli, "g-ps")
    wait_for(lambda: len(marked("g-ps.")) == 4, 20, "the job's four processes")
    check("ps", *_code_doc(lib.ps(JOB)), cli, tmp_path)
    check("kill_dry_run", *_code_doc(lib.kill(JOB)), cli, tmp_path)
    from runward.operations.kill import KillOptions, kill
    from runward.operations.ps import PsOptions, ps
    assert ps(PsOptions(pattern=JOB)).render() + "\n" == _cli_text(cli, "ps", JOB)
    assert kill(KillOptions(pattern=JOB)).render() + "\n" == _cli_text(cli, "kill", JOB)
    check("kill", *_code_doc(lib.kill(JOB, confirm=True)), cli, tmp_path)


def test_library_kill_checks_its_signal_with_the_clis_hint(cli, lib):
    """The CLI's --signal refuses an unknown signal as it reads it, with signals.HINT; the
    API, without argv, is refused by the operation, with the same fix (it was argparse's
    "see `runward kill --help`")."""
    from runward.spec.signals import HINT
    res = lib.kill("rw-no-such-pattern", signal="SIGFOO")
    assert res.exit_code == 2 and res.error["type"] == "BadInput" and res.error["hint"] == HINT, res.to_json()
    assert cli.json("kill", "rw-no-such-pattern", "--signal", "SIGFOO")[1]["error"]["hint"] == HINT


def test_library_gpus_with_stand_in_is_the_clis_document(cli, tmp_path, lib, monkeypatch):
    import fakegpu
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    for k, v in fakegpu.env_with_standin(state, {"PATH": cli.env.get("PATH", "")}).items():
        monkeypatch.setenv(k, v)
    check("gpus", *_code_doc(lib.gpus()), cli, tmp_path)


def _code_doc(res) -> tuple[int, dict]:
    return res.exit_code, res.to_json()
