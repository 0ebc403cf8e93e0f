"""A dead shim is not a dead job: a shim killed during or after the settle period leaves an
orphaned run that status says is orphaned and stop ends, never an early exit."""

from __future__ import annotations

import json
import os
import signal

from conftest import alive, attempt_record, wait_for


# --- a dead shim is not a dead job --------------------------------------------------------

def _kill_shim_when_recorded(cli, name):
    shim = wait_for(lambda: attempt_record(cli, name).get("shim"), what="the shim's record")
    job = wait_for(lambda: attempt_record(cli, name).get("job"), what="the job's record")
    os.kill(shim["pid"], signal.SIGKILL)
    return shim, job


def test_shim_killed_during_settle_is_not_an_early_exit(cli):
    pop = cli.popen("start", "sh1", "--settle", "3", "--json", "--", "sleep", "600")
    shim, job = _kill_shim_when_recorded(cli, "sh1")
    out, err = pop.communicate(timeout=60)
    doc = json.loads(out)
    assert alive(job["pid"], job["start"])
    assert pop.returncode == 5, doc  # done, not verified: the job lives, unsupervised
    assert doc["ok"] is False or doc["result"].get("alive_after_settle") is not False, doc
    text = json.dumps(doc)
    assert "exited during the settle period" not in text
    assert "orphan" in text, doc
    st = cli.status("sh1")
    assert st["state"] == "orphaned" and st["pid"] == job["pid"]
    rc, doc = cli.json("stop", "sh1", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(job["pid"], job["start"])
    st = cli.status("sh1")
    assert st["state"] not in ("lost", "running", "orphaned"), st


def test_shim_killed_after_settle_is_an_orphan_not_an_exit(cli):
    rc, doc = cli.json("start", "sh2", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0, doc
    shim, job = _kill_shim_when_recorded(cli, "sh2")
    wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
    st = cli.status("sh2")
    assert st["state"] == "orphaned" and "exit" not in st, st
    assert alive(job["pid"], job["start"])
    rc, doc = cli.json("stop", "sh2", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    st = cli.status("sh2")
    # stop sent TERM; how the job ended only its (dead) shim could have seen: unknown
    assert st["state"] == "exited" and st["exit"]["unknown"] and st["exit"]["signal"] is None, st
    assert st["exit"]["signals_sent"] == ["SIGTERM"], st
