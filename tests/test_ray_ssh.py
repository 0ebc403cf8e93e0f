"""`ray://[user@]head[:sshport]`: the Ray target through an ssh hop to the head, against the
real test cluster (scripts/ray-testbed: its sshd in the namespace at 127.0.0.1 and 127.0.0.2,
port 2290, the testbed's keys). The CLI runs in the cluster's namespace, as an ssh client
there; ground truth from /proc and Ray's REST API (docs/ray.md)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import alive, marked
from helpers_ray import ESCAPING, escapee, ray_job, ray_jobs, rcli, tb  # noqa: F401 (rcli, tb: the fixtures)


@pytest.fixture
def scli(rcli, tb, tmp_path):
    """The namespace's CLI with the testbed sshd's ssh config; runward.toml's `head` is the
    cluster's head through ssh (`ray://root@127.0.0.1:2290`), with a home of the test's own
    there. The runs' marked processes are killed by pid and start time after the test."""
    ssh = tb.get("ssh") or pytest.skip("no sshd in the Ray testbed's namespace: `scripts/testbed up`, "
                                       "then `scripts/ray-testbed up` (ray.json has no `ssh`)")
    rcli.env["RUNWARD_SSH_CONFIG"] = ssh["ssh_config"]
    rcli.head = f"ray://root@127.0.0.1:{ssh['port']}"
    rcli.ssh = ssh
    rcli.remote_home = tmp_path / "remote"
    (rcli.cwd / "runward.toml").write_text(f'[targets.head]\non = "{rcli.head}"\nhome = "{rcli.remote_home}"\n')
    yield rcli
    runs = rcli.remote_home / "runs"
    names = [n.name + "." for n in runs.iterdir() if not n.name.startswith(".")] if runs.is_dir() else []
    for pid, start in (marked(*names) if names else {}).items():
        if alive(pid, start):
            subprocess.run(["kill", "-KILL", str(pid)])


def test_start_status_logs_stop_history_through_the_ssh_hop_to_the_head(scli, tb):
    rc, doc = scli.json("start", "s1", "--on", "head", "--settle", "1", "--", "sh", "-c", ESCAPING)
    assert rc == 0, doc
    assert doc["target"] == scli.head, doc
    r = doc["result"]
    driver = r["driver"]["pid"]
    assert ray_job(tb, r["submission_id"])["status"] == "RUNNING"
    assert alive(driver, r["driver"]["start"]) and driver in marked("s1.1"), "the driver lives, by the marker"
    esc = escapee("s1.1")
    tree = marked("s1.1")

    rc, doc = scli.json("status", "s1", "--on", "head")
    assert rc == 0 and doc["target"] == scli.head, doc
    run = doc["result"]["runs"][0]
    assert (run["state"], run["ray_state"], run["pid"]) == ("running", "RUNNING", driver), run
    p = scli.run("logs", "s1", "--on", "head")
    assert p.returncode == 0 and "hello" in p.stdout.splitlines(), p

    rc, doc = scli.json("stop", "s1", "--on", "head")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert {q["pid"] for q in doc["result"]["processes"]} >= {driver, esc}, doc["result"]["processes"]
    assert not any(alive(q, s) for q, s in tree.items()) and marked("s1.1") == {}, "ground truth: none left"
    assert ray_job(tb, r["submission_id"])["status"] in ("FAILED", "STOPPED", "SUCCEEDED")

    rc, doc = scli.json("history", "s1", "--on", "head")
    assert rc == 0, doc
    row = doc["result"]["attempts"][0]
    assert row["state"] == "stopped" and row["ray"]["submission_id"] == r["submission_id"], row
    assert row["ray"]["stopped_by"] == "runward", row


@pytest.mark.parametrize("verb", ["start", "status", "stop"])
def test_an_ssh_hop_that_cannot_connect_is_exit_3_naming_the_hop_not_rays(scli, tb, verb):
    """Nothing listens at 127.0.0.1:2291 in the namespace: the hop is named, not the
    dashboard, and nothing is submitted."""
    before = {j["submission_id"] for j in ray_jobs(tb)}
    words = {"start": ["start", "s2", "--on", "ray://root@127.0.0.1:2291", "--", "sleep", "60"],
             "status": ["status", "--on", "ray://root@127.0.0.1:2291"],
             "stop": ["stop", "s2", "--on", "ray://root@127.0.0.1:2291"]}[verb]
    rc, doc = scli.json(*words)
    assert rc == 3, doc
    err = json.dumps(doc["error"])
    assert "ssh://root@127.0.0.1:2291" in err and "refused" in err, doc
    assert "8265" not in err and "dashboard" not in err.lower(), "the ssh hop failed, not Ray's"
    assert {j["submission_id"] for j in ray_jobs(tb)} == before, "nothing submitted"

