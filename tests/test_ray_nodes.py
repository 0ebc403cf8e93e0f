"""Every verb that ends a Ray job reaches the agents on the job's other nodes, as `stop` does
(transport/nodeagents.py, through api.stop and start --replace): restart, stop --all,
start --replace, the Python API's stop, and MCP's restart. The job's actor sits on the third
node at 127.0.0.2, reached through the testbed's sshd listening there (tests/test_ray_ssh.py);
ground truth from /proc."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import alive, marked, read_stat, wait_for
from helpers_ray import mcp_calls, ray_job, ray_jobs, rcli, tb  # noqa: F401 (rcli, tb: the fixtures)
from helpers_raynodes import DRIVER, environ, far_job, far_node, far_orphan_job, ray_state, scli, sleep_of  # noqa: F401 (far_node, scli: the fixtures)


def _far_actor(tb, sid, far_node):
    """The job's live actor on the node at 127.0.0.2 (its pid), once Ray has placed it."""
    def find():
        job = ray_job(tb, sid)
        return job and next((a["pid"] for a in ray_state(tb, "actors", job["job_id"])
                             if a["state"] == "ALIVE" and a["node_id"] == far_node), None)
    return wait_for(find, timeout=120, what="the new attempt's actor on 127.0.0.2")


def _stopped_on_the_node(r, pid):
    """The old attempt's stop as restart and start --replace carry it: the node's agent asked."""
    assert r["verified_dead"] and r["unchecked"] == [], r
    assert [(n["node_ip"], n["via"], n["checked"]) for n in r["nodes"]] == [("127.0.0.2", "ssh://root@127.0.0.2", True)], r
    assert next(w for w in r["workers"] if w["pid"] == pid)["fate"] in ("exited_after_SIGTERM", "killed", "not_found")


def test_restart_stops_the_worker_on_the_other_node_through_its_agent_then_starts(scli, tb, far_node):
    pid, start, sid = far_job(scli, tb, far_node, "r1")
    rc, doc = scli.json("restart", "r1", "--on", "head", "--settle", "1")
    assert rc == 0 and doc["ok"], doc
    assert not alive(pid, start), "ground truth: the old attempt's worker on the other node is dead"
    steps = {s["step"]: s["result"] for s in doc["result"]["steps"]}
    _stopped_on_the_node(steps["stop"], pid)
    assert doc["result"]["attempt"] == 2 and ray_job(tb, steps["start"]["submission_id"])["status"] == "RUNNING"
    assert _far_actor(tb, steps["start"]["submission_id"], far_node) != pid


def test_restart_starts_nothing_while_the_other_nodes_agent_cannot_be_reached(scli, tb, far_node):
    """The node's agent behind a closed port: the old attempt's worker there is not verified
    dead, so no new attempt (exit 3 naming the hop, as stop's), as a restart whose local stop
    is not verified starts none."""
    toml = scli.cwd / "runward.toml"
    toml.write_text(toml.read_text() + 'node_ssh = {"127.0.0.2" = "ssh://root@127.0.0.2:2291"}\n')
    pid, start, sid = far_job(scli, tb, far_node, "r2")
    before = {j["submission_id"] for j in ray_jobs(tb)}
    rc, doc = scli.json("restart", "r2", "--on", "head", "--settle", "1")
    assert rc == 3 and not doc["ok"], doc
    err = doc["error"]
    assert err["hop"] == "ssh://root@127.0.0.2:2291" and f"pid {pid}" in err["message"], err
    assert "restart stopped at step 'stop'" in err["message"] and "nothing was started" in err["message"], err
    assert {j["submission_id"] for j in ray_jobs(tb)} == before, "no new attempt submitted"
    assert not (scli.remote_home / "runs" / "r2" / "attempts" / "2.json").exists(), "no attempt 2 recorded"
    wait_for(lambda: not alive(pid, start), timeout=60, what="Ray ended the far actor")


def test_stop_all_stops_the_worker_on_the_other_node_through_its_agent(scli, tb, far_node):
    drv = scli.cwd / "driver.py"
    drv.write_text(DRIVER)
    toml = scli.cwd / "runward.toml"
    toml.write_text(toml.read_text() + f'\n[runs.a1]\non = "head"\ncommand = {json.dumps([sys.executable, str(drv), "-", "far_node"])}\n'
                    'settle = 1\nready = "^pids"\nready_timeout = 120\n')
    rc, doc = scli.json("start", "a1")
    assert rc == 0, (rc, doc)
    pid = _far_actor(tb, doc["result"]["submission_id"], far_node)
    start = read_stat(pid)[1]
    rc, doc = scli.json("stop", "--all")
    assert rc == 0 and doc["ok"], doc
    assert not alive(pid, start), "ground truth: the worker on the other node is dead"
    assert marked("a1.1") == {}
    row = next(row for row in doc["runs"] if row["name"] == "a1")
    assert row["ok"], row
    _stopped_on_the_node(row["result"], pid)


def test_start_replace_stops_the_old_attempts_worker_on_the_other_node_first(scli, tb, far_node):
    pid, start, sid = far_job(scli, tb, far_node, "r3")
    rc, doc = scli.json("start", "r3", "--on", "head", "--replace", "--settle", "1", "--ready", "^pids",
                        "--ready-timeout", "120", "--", sys.executable, str(scli.cwd / "driver.py"), "-", "far_node")
    assert rc == 0 and doc["ok"], doc
    assert not alive(pid, start), "ground truth: the old attempt's worker on the other node is dead"
    _stopped_on_the_node(doc["result"]["replaced"], pid)
    assert doc["result"]["attempt"] == 2


LIB_STOP = """
import json, sys
from runward import api
from runward.errors import RunwardError
from runward.targets import parse_target
try:
    print(json.dumps({"code": 0, "res": api.stop(parse_target(sys.argv[1], home=sys.argv[2]), sys.argv[3])}))
except RunwardError as e:
    print(json.dumps({"code": e.exit_code, "res": e.result, "message": e.message}))
"""


def test_the_python_apis_stop_and_mcps_restart_reach_the_other_nodes_agent(scli, tb, far_node):
    pid, start, sid = far_job(scli, tb, far_node, "r4")
    docs = mcp_calls(scli, tb, [("restart", {"name": "r4", "on": "head", "settle": 1})])
    err, doc = docs["restart"]
    assert not err and doc["ok"], doc
    assert not alive(pid, start), "ground truth: MCP's restart ended the worker on the other node"
    steps = {s["step"]: s["result"] for s in doc["result"]["steps"]}
    _stopped_on_the_node(steps["stop"], pid)

    pid2 = _far_actor(tb, steps["start"]["submission_id"], far_node)
    start2 = read_stat(pid2)[1]
    p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", LIB_STOP, scli.head,
                        str(scli.remote_home), "r4"], env=scli.env, capture_output=True, text=True, timeout=180)
    out = json.loads(p.stdout or "null") or {}
    assert out.get("code") == 0, (out, p.stderr)
    assert not alive(pid2, start2), "ground truth: api.stop ended the worker on the other node"
    _stopped_on_the_node(out["res"], pid2)


def test_restart_ends_what_the_jobs_actor_on_the_other_node_orphaned(scli, tb, far_node):
    """restart goes through the same node op as stop: the orphan there, tied to the job by its
    RAY_JOB_ID only, is dead before the new attempt starts."""
    orphan, start, job_id = far_orphan_job(scli, tb, "r8", 9371)
    try:
        rc, doc = scli.json("restart", "r8", "--on", "head", "--settle", "1")
        assert rc == 0 and doc["ok"], doc
        assert not alive(orphan, start), "ground truth: the old attempt's orphan on the other node is dead"
        stop = {s["step"]: s["result"] for s in doc["result"]["steps"]}["stop"]
        assert orphan in {p["pid"] for p in stop["nodes"][0]["job_id_processes"]}, stop["nodes"]
    finally:  # the new attempt's actor left its own orphan: its stop ends it, else its pid
        scli.json("stop", "r8", "--on", "head")
        for pid in {orphan} | ({sleep_of(9371)} - {None}):
            if alive(pid):
                subprocess.run(["kill", "-KILL", str(pid)])
