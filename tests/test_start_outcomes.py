"""What a start says when it did not start the job as asked: a run whose files were never
deployed points to `runward deploy` (issue 42, item 6). Ground truth: the target's files and
directories, and the job's processes in /proc by their marker."""

from __future__ import annotations

import uuid

from conftest import alive, marked

JOB = "import time\nprint('job up', flush=True)\ntime.sleep(600)\n"


def _undeployed_project(cli, name: str, dest) -> None:
    (cli.cwd / "job.py").write_text(JOB)
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{dest}"\n'
        f'files = ["job.py:{dest}/job.py"]\nsettle = 0.5\n')


def test_the_first_start_of_an_undeployed_run_points_to_deploy(cli, tmp_path):
    name = f"und{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "proj"
    _undeployed_project(cli, name, dest)
    # its cwd does not exist yet: refused, nothing made there, and the way out is deploy
    rc, doc = cli.json("start", name)
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert f"{dest}/job.py" in doc["error"]["message"] and "never deployed" in doc["error"]["message"], doc
    assert f"runward deploy {name}" in doc["error"]["hint"], doc
    assert not dest.exists() and not marked(f"{name}.")
    # the cwd exists, the script does not: the job exits at once ("can't open file"); the same pointer
    dest.mkdir()
    rc, doc = cli.json("start", name)
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    assert "never deployed" in doc["error"]["message"] and f"runward deploy {name}" in doc["error"]["hint"], doc
    assert not marked(f"{name}.")
    # after the deploy it pointed to, the start runs the job
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    jobs = marked(f"{name}.{doc['result']['attempt']}")
    assert len(jobs) == 1 and all(alive(p, s) for p, s in jobs.items()), jobs
    cli.json("stop", name, "--grace", "2")


def test_a_start_that_fails_with_its_files_in_place_does_not_blame_deploy(cli, tmp_path):
    name = f"dep{uuid.uuid4().hex[:6]}"
    dest = tmp_path / "proj"
    _undeployed_project(cli, name, dest)
    (cli.cwd / "job.py").write_text("raise SystemExit(3)\n")
    rc, doc = cli.json("deploy", name)
    assert rc == 0, doc
    rc, doc = cli.json("start", name)
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    assert "deploy" not in doc["error"]["message"] + doc["error"].get("hint", ""), doc
