"""Slurm runs in history (issue 30): what is known of each attempt's job -- its id, its final
state and ExitCode as Slurm reported them, its times. Against the real single-node Slurm of
the testbed (skipped, with the reason, where it is not up)."""

from __future__ import annotations

import json
import subprocess
import uuid

from helpers_slurm import sb  # noqa: F401  (the fixture: an empty queue, the partition)


def test_history_says_each_slurm_attempts_job_state_and_exit(cli, sb):  # noqa: F811
    on, name = "slurm://local/" + sb["partition"], f"hs{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--on", on, "--settle", "5", "--", "/bin/sh", "-c", "echo step 1 loss 2.5; exit 3")
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    job = doc["result"]["job_id"]
    p = cli.run("history", name, "--on", on, "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)["result"]["attempts"]
    sl = row["slurm"]
    assert {k: sl[k] for k in ("job_id", "partition", "state", "exit_code")} == {
        "job_id": job, "partition": sb["partition"], "state": "FAILED", "exit_code": "3:0"}, row
    assert row["steps"] == 1, row
    # Slurm's own word on the job, where it still remembers it (MinJobAge): the same times
    sc = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    if sc:
        assert "JobState=FAILED" in sc and "ExitCode=3:0" in sc, sc
        assert f"StartTime={sl['start']}" in sc and f"EndTime={sl['end']}" in sc, (sl, sc)
    else:
        assert sl["start"] and sl["end"], sl
    text = cli.run("history", name, "--on", on).stdout
    assert f"slurm job {job} FAILED ExitCode 3:0" in text, text
