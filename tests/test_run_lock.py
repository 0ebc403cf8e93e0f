"""The run's lock: a verb waiting behind another names the holder and gives up after
--lock-timeout; the start watching its job settle does not hold it, so a stop then cancels it."""

from __future__ import annotations

import json
import subprocess
import time

from conftest import alive, attempt_record, wait_for


# --- records and locks ----------------------------------------------------------------------

def test_a_verb_waiting_for_the_run_lock_names_the_holder_and_gives_up(cli):
    """A verb behind another's lock used to wait silently and forever. Now it says, within a
    second, which verb holds it (verb, pid, since when), and gives up after --lock-timeout."""
    rc, doc = cli.json("start", "lk", "--settle", "0.2", "--sh", "trap '' TERM; while :; do sleep 0.1; done")
    assert rc == 0, doc
    first = cli.popen("stop", "lk", "--grace", "8", "--json")  # holds the lock through its grace
    try:
        lock = cli.home / "runs" / ".lk.lock"
        wait_for(lambda: lock.stat().st_size > 0, what="the first stop's name in the lock file")
        t0 = time.monotonic()
        p = subprocess.Popen(cli.argv("stop", "lk", "--lock-timeout", "2", "--json"), cwd=cli.cwd, env=cli.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = p.stderr.readline()
        said_after = time.monotonic() - t0
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
        assert said_after < 1.9 and "lock" in said and "stop" in said, said
        assert "pid" in said and "since" in said, said
        assert p.returncode == 1, (out, said + err)
        assert 1.5 < took < 10, took
        assert "lock" in json.loads(out)["error"]["message"]
    finally:
        out, _ = first.communicate(timeout=60)
    assert json.loads(out)["result"]["verified_dead"], out


def test_a_stop_during_the_settle_period_cancels_the_start(cli):
    """The start watching its job settle no longer holds the lock: a stop then is no early
    exit of the job but a cancelled start (exit 1, type Cancelled), said as such at once."""
    pop = cli.popen("start", "sc", "--settle", "30", "--json", "--", "sleep", "600")
    try:
        job = wait_for(lambda: attempt_record(cli, "sc").get("job"), what="the job's record")
        rc, doc = cli.json("stop", "sc", "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        t0 = time.monotonic()
        out, err = pop.communicate(timeout=20)
        assert time.monotonic() - t0 < 10
    finally:
        if pop.poll() is None:
            pop.kill()
            pop.wait()
    doc = json.loads(out)
    assert pop.returncode == 1 and doc["error"]["type"] == "Cancelled", doc
    assert "stopped by `runward stop` during the settle period" in doc["error"]["message"], doc
    assert "exited during the settle period" not in json.dumps(doc)
    assert not alive(job["pid"], job["start"])
    assert attempt_record(cli, "sc").get("stop_requested"), attempt_record(cli, "sc")
    assert cli.status("sc")["state"] == "exited"
