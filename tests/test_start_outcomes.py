"""What a start says when it did not start the job as asked: a run whose files were never
deployed points to `runward deploy` (issue 42, item 6). Ground truth: the target's files and
directories, and the job's processes in /proc by their marker."""

from __future__ import annotations

import uuid

from conftest import alive, marked, wait_for

JOB = "import time\nprint('job up', flush=True)\ntime.sleep(600)\n"


def _undeployed_project(cli, name: str, dest) -> None:
    (cli.cwd / "job.py").write_text(JOB)
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "job.py"]\ncwd = "{dest}"\n'
        f'files = ["job.py:{dest}/job.py"]\nsettle = 5\n')


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


def test_a_launcher_that_backgrounds_the_job_is_not_called_exited(cli):
    """`nohup python3 job.py &` (the seed's `nohup ./run.sh &` where run.sh backgrounds
    python): the shell exits 0 at once while job.py runs on. The start names the processes
    left running (ground truth: /proc, by the run's marker) and says what to do; exit 5."""
    name = f"bg{uuid.uuid4().hex[:6]}"
    (cli.cwd / "job.py").write_text(JOB)
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "1",
                       "--sh", "nohup python3 job.py > /dev/null 2>&1 &")
    try:
        assert rc == 5 and doc["error"]["type"] == "NotVerified", doc
        err = doc["error"]
        running = marked(f"{name}.1")
        assert running and all(alive(p, s) for p, s in running.items()), running
        children = {c["pid"] for c in doc["result"]["children"]}
        assert children == set(running), (children, running)
        assert "exited during the settle period" not in err["message"] or "run on" in err["message"], err
        assert "launcher" in err["message"] and "job.py" in err["message"] and "exit code 0" in err["message"], err
        assert "exec" in err["hint"] and f"runward stop {name}" in err["hint"], err
    finally:
        cli.json("stop", name, "--grace", "2")
    assert not marked(f"{name}.1")


def test_a_launcher_whose_children_end_within_the_settle_period_exited_early(cli):
    name = f"bge{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--settle", "1.5", "--sh", "sleep 0.3 &")
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    assert not marked(f"{name}.1")


def test_a_supervised_launcher_that_backgrounds_leaves_one_copy_of_the_job_not_one_per_restart(cli):
    """restart = "always" with a launcher that backgrounds its job: each launcher exits 0 at
    once, the shim restarted it, and each restart ran one more copy beside the last (three
    job.py alive after max_restarts 2), on a run without gpus where no gate ended what an
    attempt left. What an ended attempt left is now ended before the next attempt, GPUs or
    none; the start still says the launcher backgrounds (exit 5) and names the one left.
    Ground truth: /proc, by the run's marker."""
    name = f"bgr{uuid.uuid4().hex[:6]}"
    (cli.cwd / "job.py").write_text(JOB)
    rc, doc = cli.json("start", name, "--cwd", str(cli.cwd), "--settle", "4", "--restart", "always",
                       "--max-restarts", "2", "--backoff", "0", "--grace", "2",
                       "--sh", "nohup python3 job.py > /dev/null 2>&1 &")
    try:
        assert rc == 5 and doc["error"]["type"] == "NotVerified", doc
        wait_for(lambda: cli.status(name)["state"] == "gave_up", timeout=60, what="the policy's restarts")
        running = {p: s for p, s in marked(f"{name}.").items() if alive(p, s)}
        jobs = {p for p in running if "job.py" in open(f"/proc/{p}/cmdline").read()}
        assert len(jobs) == 1, running  # one copy, the last attempt's
        assert {c["pid"] for c in doc["result"]["children"]} == jobs, (doc["result"]["children"], jobs)
    finally:
        cli.json("stop", name, "--grace", "2")
    assert not [p for p, s in marked(f"{name}.").items() if alive(p, s)]
