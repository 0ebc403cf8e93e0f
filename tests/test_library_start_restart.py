"""The operations layer (issue 27), verbs start and restart: `import runward` calls the verb's
operation directly (no argv, nothing captured), and its result's to_json() is the CLI's --json
document, held to the very golden the CLI's is (tests/golden/), for the same run."""

from __future__ import annotations

from helpers_golden import check, job

ENV = {"TRAIN_STEP_SECONDS": "0.1", "TRAIN_SEED": "0"}  # test_golden_json's ENV, as the library takes it


def test_library_start_is_the_clis_start_document(cli, tmp_path, lib):
    res = lib.start("g-start", ["python3", job(cli)], settle=1, ready="^step 1 ", env=ENV)
    assert res.ok and res.result["pid"], res.to_json()
    check("start", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_start_with_a_bad_env_is_the_clis_error_document(cli, tmp_path, lib):
    res = lib.start("g-bad", ["true"], env={"": "x"})
    assert res.exit_code == 2, res.to_json()
    check("err_bad_env", res.exit_code, res.to_json(), cli, tmp_path)


def test_start_operation_answers_the_clis_document_and_text(cli, tmp_path, lib):
    """The operation, typed options in, Outcome out: its document the CLI's golden, its human
    text made only when asked."""
    from runward.operations.start import StartOptions, start
    out = start(StartOptions(name="g-start", settle=1.0, ready="^step 1 ", env=dict(ENV),
                             command=["python3", job(cli)]))
    assert out.code == 0 and "g-start" in out.render(), out.document
    check("start", out.code, out.document, cli, tmp_path)


def test_library_start_checks_its_options_as_the_flags_are_checked(cli, lib):
    """Without argv, nothing parses the values: the operation checks the declared options
    itself (spec/options.py), exit 2 before anything is started."""
    res = lib.start("g-any", ["true"], settle=-1.0)
    assert res.exit_code == 2 and res.error["type"] == "BadInput" and "invalid settle" in res.error["message"], \
        res.to_json()
    assert not (cli.home / "runs" / "g-any").exists()


def test_library_restart_is_the_clis_restart_document(cli, tmp_path, lib):
    from helpers_golden import start as cli_start
    cli_start(cli, "g-restart")
    res = lib.restart("g-restart")
    assert res.ok, res.to_json()
    check("restart", res.exit_code, res.to_json(), cli, tmp_path)


def test_restart_operation_answers_the_clis_document_and_text(cli, tmp_path, lib):
    from runward.operations.restart import RestartOptions, restart
    from helpers_golden import start as cli_start
    cli_start(cli, "g-restart")
    out = restart(RestartOptions(name="g-restart"))
    assert out.code == 0 and "spec from" in out.render(), out.document
    check("restart", out.code, out.document, cli, tmp_path)


def test_library_restart_of_no_such_run_is_the_clis_error_document(cli, lib):
    """No golden holds restart's error: the library's document is the CLI's --json one."""
    res = lib.restart("g-nosuch-restart")
    rc, doc = cli.json("restart", "g-nosuch-restart")
    assert res.exit_code == rc == 4 and res.to_json() == doc, (res.to_json(), doc)
