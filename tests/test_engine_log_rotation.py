"""--log-max / --log-keep on an engine's target: the log's rotation is the runward shim's, and a
Slurm or Ray job has none, so a size saved there is never kept (one 7.6 MB log under
--log-max 100K). Refused as a supervision policy is: exit 2 naming the option, nothing
submitted (squeue, Ray's job list), nothing recorded; from runward.toml and the library too;
a restart refuses it before it stops anything. On the real Slurm and Ray testbeds."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from helpers_slurm import in_queue, sb  # noqa: F401  (sb: fixture)
from helpers_ray import NetnsCLI, ray_cli, ray_testbed

SLURM = "slurm://local/debug"


def _queued_named(name: str) -> str:
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout.strip()


def _refused(rc: int, doc: dict, engine: str, *said: str) -> None:
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert all(s in doc["error"]["message"] for s in said) and f"{engine} run" in doc["error"]["message"], doc


def test_log_max_is_refused_on_slurm_from_the_flag_the_toml_and_the_library(cli, sb):
    name = "sl-logmax"
    rc, doc = cli.json("start", name, "--on", SLURM, "--log-max", "100K", "--", "/bin/sleep", "300")
    _refused(rc, doc, "Slurm", "--log-max")
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["/bin/sleep", "300"]\non = "{SLURM}"\nlog_max = "100K"\nlog_keep = 2\n')
    rc, doc = cli.json("start", name)
    _refused(rc, doc, "Slurm", "--log-max and --log-keep")
    lib = subprocess.run([sys.executable, "-c", "import runward, json\nr = runward.start(%r)\n"
                          "print(json.dumps(r.document))" % name],
                         cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=60)
    _refused(2 if '"BadInput"' in lib.stdout else -1, json.loads(lib.stdout), "Slurm", "--log-max")
    assert not _queued_named(name), "nothing may have been submitted"
    assert not (cli.home / "runs" / name).exists()


def test_a_restart_with_log_max_on_slurm_is_refused_before_its_stop(cli, sb):
    """log_max added to runward.toml since the start: the restart refuses it before it stops
    the job (after the stop the start would refuse it, and the run would be left stopped)."""
    name = "sl-logmax-r"
    run = f'[runs.{name}]\ncommand = ["/bin/sleep", "300"]\non = "{SLURM}"\nsettle = 0\n'
    (cli.cwd / "runward.toml").write_text(run)
    rc, doc = cli.json("start", name)
    assert rc == 0, doc
    job = doc["result"]["job_id"]
    try:
        (cli.cwd / "runward.toml").write_text(run + 'log_max = "100K"\n')
        rc, doc = cli.json("restart", name)
        _refused(rc, doc, "Slurm", "--log-max", "nothing was stopped")
        assert in_queue(job), "the job must run on"
    finally:
        (cli.cwd / "runward.toml").write_text(run)
        assert cli.json("stop", name, "--grace", "2")[0] == 0


def test_log_max_is_refused_on_ray_and_nothing_is_submitted(cli):
    tb = ray_testbed()
    rcli = NetnsCLI(cli, tb["netns"])
    name = f"ray-logmax-{uuid.uuid4().hex[:6]}"  # Ray's job list keeps every job: this name is new
    rc, doc = rcli.json("start", name, "--on", "ray://local", "--log-max", "100K", "--log-keep", "2",
                        "--", "sleep", "30")
    _refused(rc, doc, "Ray", "--log-max and --log-keep")
    assert not (cli.home / "runs" / name).exists()
    jobs = ray_cli(tb, "list")
    assert jobs.returncode == 0 and name not in jobs.stdout, "nothing may have been submitted"
