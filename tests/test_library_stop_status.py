"""The operations layer (issue 27): `import runward` calls a moved verb's operation directly
(no argv, nothing captured), and its result's to_json() is the CLI's --json document: the
very golden the CLI's document is held to (tests/golden/), for the same run."""

from __future__ import annotations

import pytest

from helpers_golden import check, start


def test_library_stop_is_the_clis_stop_document(cli, tmp_path, lib):
    start(cli, "g-stop")
    res = lib.stop("g-stop", grace=5)
    assert res.ok and res.verified_dead and res.result["processes"], res.to_json()
    check("stop", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_stop_of_no_such_run_is_the_clis_error_document(cli, tmp_path, lib):
    res = lib.stop("g-nosuch")
    assert not res.ok and res.exit_code == 4, res.to_json()
    check("err_unknown_run_stop", res.exit_code, res.to_json(), cli, tmp_path)


@pytest.mark.parametrize("kw, says", [({"grace": -1.0}, "invalid grace -1.0"), ({"stop_signal": "SIGFOO"}, "invalid stop_signal"),
                                      ({"grace": float("nan")}, "invalid grace nan")])
def test_library_stop_checks_its_options_as_the_flags_are_checked(cli, lib, kw, says):
    """Without argv, nothing parses the values: the operation checks the declared options
    itself (spec/options.py), exit 2 before anything is looked up."""
    res = lib.stop("g-any", **kw)
    assert res.exit_code == 2 and res.error["type"] == "BadInput" and says in res.error["message"], res.to_json()


def test_library_status_is_the_clis_status_document(cli, tmp_path, lib):
    from helpers_golden import stepped
    start(cli, "g-status")
    stepped(cli, "g-status")
    res = lib.status("g-status")
    assert res.ok and res.runs[0]["state"] == "running", res.to_json()
    check("status", res.exit_code, res.to_json(), cli, tmp_path)


def test_library_status_of_no_such_run_is_the_clis_error_document(cli, tmp_path, lib):
    res = lib.status("g-nosuch")
    check("err_unknown_run_status", res.exit_code, res.to_json(), cli, tmp_path)
