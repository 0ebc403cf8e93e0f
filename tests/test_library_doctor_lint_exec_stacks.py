"""The operations layer (issue 27), verbs doctor, lint, exec, stacks, logs and watch: `import
runward` calls the verb's operation directly (no argv, nothing captured), and its result's
to_json() is the CLI's --json document, held to the very golden the CLI's is (tests/golden/),
for the same call."""

from __future__ import annotations

import pytest

from helpers_golden import check


def _pid1_is_the_machines(doc: dict) -> dict:
    """test_golden_json.test_doctor's own normalising: whether pid 1 reaps follows the zombies
    other processes leave at that moment."""
    for hop in doc["result"]["hops"]:
        hop["checks"]["pid1"].update(reaps="<bool>", hint="<str or absent>")
    return doc


def test_library_doctor_is_the_clis_doctor_document(cli, tmp_path, lib, no_verb):
    no_verb("doctor")
    res = lib.doctor()
    assert res.ok and res.result["hops"], res.to_json()
    check("doctor", res.exit_code, _pid1_is_the_machines(res.to_json()), cli, tmp_path)


def test_doctor_operation_answers_the_clis_document_and_text(cli, tmp_path, lib):
    from runward.operations.doctor import DoctorOptions, doctor
    out = doctor(DoctorOptions())
    assert out.code == 0 and out.render().startswith("doctor local"), out.document
    check("doctor", out.code, _pid1_is_the_machines(out.document), cli, tmp_path)


def test_library_doctor_of_a_bad_target_is_the_clis_error_document(cli, lib, no_verb):
    """No golden holds doctor's error: the library's document is the CLI's --json one."""
    no_verb("doctor")
    res = lib.doctor(on="nosuchkind:x")
    rc, doc = cli.json("doctor", "--on", "nosuchkind:x")
    assert res.exit_code == rc == 2 and res.to_json() == doc, (res.to_json(), doc)


LINTED = "ssh h 'pkill -f train.py; nohup ./run.sh &'"  # test_golden_json.test_lint's line


def test_library_lint_is_the_clis_lint_document(cli, tmp_path, lib, no_verb):
    no_verb("lint")
    res = lib.lint_command(LINTED)
    assert res.exit_code == 1 and res.result["findings"], res.to_json()
    check("lint", res.exit_code, res.to_json(), cli, tmp_path)


def test_lint_operation_answers_the_clis_document_and_text(cli, tmp_path):
    from runward.operations.lint import LintOptions, lint
    out = lint(LintOptions(command_line=LINTED))
    assert out.code == 1 and "pkill" in out.render(), out.document
    check("lint", out.code, out.document, cli, tmp_path)
    assert lint(LintOptions(command_line="ls -l", interactive=True)).render() == "no findings"


def test_library_lint_of_a_clean_line_is_the_clis_document(cli, lib, no_verb):
    """No golden holds a clean line: the library's document is the CLI's --json one."""
    no_verb("lint")
    res = lib.lint_command("echo hi", interactive=True)
    rc, doc = cli.json("lint", "--interactive", "echo hi")
    assert res.exit_code == rc == 0 and res.to_json() == doc, (res.to_json(), doc)


EXECUTED = ["sh", "-c", "echo out; echo err >&2; exit 3"]  # test_golden_json.test_exec's command


def test_library_exec_is_the_clis_exec_document(cli, tmp_path, lib, no_verb):
    no_verb("exec")
    res = lib.exec(EXECUTED, on="local")
    assert res.exit_code == 3 and res.result["stdout"] == "out\n", res.to_json()
    check("exec", res.exit_code, res.to_json(), cli, tmp_path)


def test_exec_operation_answers_the_clis_document_and_text(cli, tmp_path):
    """The text is what runward says of the failed command, as the CLI prints it on stderr after
    the command's own output."""
    from runward.operations.exec import ExecOptions, exec as exec_op
    out = exec_op(ExecOptions(on="local", command=EXECUTED))
    check("exec", out.code, out.document, cli, tmp_path)
    p = cli.run("exec", "--on", "local", "--", *EXECUTED)
    assert p.returncode == out.code == 3 and p.stdout == "out\n", (p.returncode, p.stdout)
    assert p.stderr.startswith("err\nrunward exec: exit code 3 after ") and out.render().startswith(
        "runward exec: exit code 3 after "), (p.stderr, out.render())


def test_library_exec_refused_by_the_linter_is_the_clis_error_document(cli, lib, no_verb):
    """No golden holds exec's refusal: the library's document is the CLI's --json one."""
    no_verb("exec")
    res = lib.exec(on="local", sh="pkill -f rwc_nothing; echo after")
    rc, doc = cli.json("exec", "--on", "local", "--sh", "pkill -f rwc_nothing; echo after")
    assert res.exit_code == rc == 2 and res.to_json() == doc, (res.to_json(), doc)
    assert doc["error"]["details"]["findings"], doc


def _py_spy() -> None:
    import os
    import shutil
    import sys
    if not (shutil.which("py-spy") or os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy"))):
        pytest.skip("py-spy is not installed (pip install -e '.[stacks]'): no stacks document to compare")


def test_library_stacks_is_the_clis_stacks_document(cli, tmp_path, lib, no_verb):
    from helpers_golden import start
    _py_spy()
    start(cli, "g-stacks")
    no_verb("stacks")
    res = lib.stacks("g-stacks")
    assert res.ok, res.to_json()
    check("stacks", res.exit_code, res.to_json(), cli, tmp_path)


def test_stacks_operation_answers_the_clis_document_and_text(cli, tmp_path, lib):
    from runward.operations.stacks import StacksOptions, stacks
    from helpers_golden import start
    _py_spy()
    start(cli, "g-stacks")
    out = stacks(StacksOptions(name="g-stacks"))
    assert out.code == 0 and out.render(), out.document
    check("stacks", out.code, out.document, cli, tmp_path)


def test_library_stacks_of_no_such_run_is_the_clis_error_document(cli, lib, no_verb):
    """No golden holds stacks' error: the library's document is the CLI's --json one."""
    no_verb("stacks")
    res = lib.stacks("g-nosuch-stacks")
    rc, doc = cli.json("stacks", "g-nosuch-stacks")
    assert res.exit_code == rc == 4 and res.to_json() == doc, (res.to_json(), doc)
