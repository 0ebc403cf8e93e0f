"""On the local target a run starts where you are (issue 42, item 8): with no --cwd, the job's
working directory is the directory runward is run from, or, for a run defined in runward.toml,
that file's directory; it was the home, so `runward start x -- python3 train.py` in a project
failed with "can't open file". A remote target keeps its user's home; restart keeps the last
attempt's. Ground truth: /proc/PID/cwd of the job."""

from __future__ import annotations

import os
import uuid
import testbed
from conftest import CLI


def _cwd_of(doc: dict) -> str:
    return os.readlink(f"/proc/{doc['result']['pid']}/cwd")


def test_a_local_start_runs_where_runward_is_run_and_restart_keeps_it(cli: CLI, tmp_path):
    proj = cli.cwd / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("import time\nprint('training', flush=True)\ntime.sleep(600)\n")
    cli.cwd = proj
    name = f"lc{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--settle", "0.5", "--", "python3", "train.py")
    try:
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj)
        cli.cwd = tmp_path  # restart from elsewhere: the last attempt's cwd, not this one
        rc, doc = cli.json("restart", name, "--settle", "0.5")
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj)
    finally:
        cli.run("stop", name)


def test_a_run_of_runward_toml_starts_in_that_files_directory(cli: CLI):
    proj = cli.cwd / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "train.py").write_text("import time\ntime.sleep(600)\n")
    name = f"lt{uuid.uuid4().hex[:6]}"
    (proj / "runward.toml").write_text(f'[runs.{name}]\ncommand = ["python3", "train.py"]\nsettle = 0.5\n')
    cli.cwd = proj / "sub"  # runward.toml found in a parent: the run starts beside it
    rc, doc = cli.json("start", name)
    try:
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj)
        rc, doc = cli.json("restart", name)
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj)
    finally:
        cli.run("stop", name)


def test_a_remote_start_keeps_the_remote_home(cli: CLI):
    import subprocess
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = f"lr{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--on", "ssh://rw1", "--settle", "0.3", "--", "sleep", "60")
    try:
        assert rc == 0, doc
        pid = doc["result"]["pid"]
        p = subprocess.run(testbed.ssh_argv("rw1", f'readlink /proc/{pid}/cwd; echo "$HOME"', tb=tb),
                           capture_output=True, text=True, timeout=60, env=testbed.env(tb))
        out = p.stdout.split()
        assert p.returncode == 0 and len(out) == 2 and out[0] == out[1] != str(cli.cwd), (p.stdout, p.stderr)
    finally:
        cli.run("stop", name, "--on", "ssh://rw1")


def test_a_relative_cwd_of_runward_toml_is_read_from_that_files_directory(cli: CLI):
    """cwd = "data" in runward.toml, run from the project's sub/ (which has a data/ of its own):
    the job runs in the project's data/, as the file's local paths and its default cwd are
    read from its directory; the restart too, from sub/. It ran in sub/data, and a restart
    from a directory without data/ stopped the run, then failed its start."""
    proj = cli.cwd / "proj"
    for d in ("data", "sub/data", "other"):
        (proj / d).mkdir(parents=True)
    name = f"lr{uuid.uuid4().hex[:6]}"
    (proj / "runward.toml").write_text(f'[runs.{name}]\ncommand = ["sleep", "600"]\ncwd = "data"\nsettle = 0.3\n')
    cli.cwd = proj / "sub"
    rc, doc = cli.json("start", name)
    try:
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj / "data")
        cli.cwd = proj / "other"  # no data/ here
        rc, doc = cli.json("restart", name)
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj / "data")
        rc, doc = cli.json("start", name, "--replace", "--cwd", "../sub/data")  # a flag's is the shell's
        assert rc == 0, doc
        assert _cwd_of(doc) == str(proj / "sub" / "data")
    finally:
        cli.run("stop", name)


def test_a_restart_whose_cwd_is_gone_refuses_before_it_stops_anything(cli: CLI):
    """restart keeps the last attempt's cwd; that directory removed since, the restart stopped
    the run, then failed its start ('working directory does not exist ... (the old attempt
    was stopped)'): the destructive half begun on an input the target could have checked.
    Now it is refused before the stop, exit 2; the job lives. Ground truth: the job's
    (pid, start time) in /proc."""
    proj = cli.cwd / "proj"
    proj.mkdir()
    cli.cwd = proj
    name = f"lg{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--settle", "0.3", "--", "sleep", "600")
    try:
        assert rc == 0, doc
        pid = doc["result"]["pid"]
        start = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
        cli.cwd = proj.parent
        proj.rmdir()
        rc, doc = cli.json("restart", name)
        assert rc == 2 and "does not exist" in doc["error"]["message"], doc
        assert "nothing was stopped" in doc["error"]["message"], doc
        assert open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19] == start  # the same job lives
        rc, doc = cli.json("restart", name, "--cwd", str(cli.cwd))  # an existing one: restarted
        assert rc == 0 and _cwd_of(doc) == str(cli.cwd), doc
    finally:
        cli.run("stop", name)
