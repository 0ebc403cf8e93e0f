"""`ray://[user@]head[:sshport]`: the Ray target through an ssh hop to the head, against the
real test cluster (scripts/ray-testbed: its sshd in the namespace at 127.0.0.1 and 127.0.0.2,
port 2290, the testbed's keys). The CLI runs in the cluster's namespace, as an ssh client
there; ground truth from /proc and Ray's REST API (docs/ray.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from conftest import alive, marked, read_stat, wait_for
from helpers_ray import ESCAPING, escapee, ray_job, ray_jobs, rcli, tb  # noqa: F401 (rcli, tb: the fixtures)
from helpers_raynodes import DRIVER, environ, far_job, far_node, far_orphan_job, ray_state, scli, sleep_of  # noqa: F401 (far_node, scli: the fixtures)




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





def test_a_worker_on_another_node_is_stopped_by_the_agent_there_through_its_ssh_hop(scli, tb, far_node):
    """The head's agent names the actor at 127.0.0.2 unchecked; the CLI asks the agent on that
    node (ssh://root@127.0.0.2, the default: the head's user at the node's address), which
    ends it, or finds no such worker of its raylet left (Ray ends a job's actors once the
    driver has ended, often first): the stop is verified, exit 0."""
    pid, start, sid = far_job(scli, tb, far_node, "n1")
    rc, doc = scli.json("stop", "n1", "--on", "head")
    assert rc == 0 and doc["ok"], doc
    r = doc["result"]
    assert not alive(pid, start), "ground truth: the worker on the other node is dead when the stop answers"
    assert r["verified_dead"] and r["unchecked"] == [] and "no_process_of_run_alive" in r["verified"], r
    assert r["nodes"] == [{"node_ip": "127.0.0.2", "via": "ssh://root@127.0.0.2", "checked": True,
                           "processes": r["nodes"][0]["processes"], "survivors": 0}], r["nodes"]
    worker = next(w for w in r["workers"] if w["pid"] == pid)
    assert worker["node_id"] == far_node and worker["fate"] in ("exited_after_SIGTERM", "killed", "not_found"), worker
    from runward.views import rayview
    assert "node 127.0.0.2 via ssh://root@127.0.0.2: " in rayview.stop(r), rayview.stop(r)


def test_a_node_whose_agent_cannot_be_reached_is_exit_3_naming_the_hop_and_stays_unchecked(scli, tb, far_node):
    """runward.toml maps the node's address to a closed port: exit 3 naming that hop, the
    worker there `unchecked` (never counted dead, never signalled)."""
    toml = scli.cwd / "runward.toml"
    toml.write_text(toml.read_text() + 'node_ssh = {"127.0.0.2" = "ssh://root@127.0.0.2:2291"}\n')
    pid, start, sid = far_job(scli, tb, far_node, "n2")
    rc, doc = scli.json("stop", "n2", "--on", "head")
    assert rc == 3 and not doc["ok"], doc
    err, r = doc["error"], doc["result"]
    assert err["hop"] == "ssh://root@127.0.0.2:2291" and "127.0.0.2" in err["message"], err
    assert f"pid {pid}" in err["message"] and "node_ssh = " in err["hint"], err
    far = [u for u in r["unchecked"] if u["pid"] == pid]
    assert far and far[0]["fate"] == "unchecked" and far[0]["node_ip"] == "127.0.0.2", r["unchecked"]
    assert pid not in {p["pid"] for p in r["processes"]}, "never counted dead: never signalled"
    assert r["nodes"][0]["checked"] is False, r["nodes"]
    assert marked("n2.1") == {}, "the head's own processes of the run are gone"
    wait_for(lambda: not alive(pid, start), timeout=60, what="Ray ended the far actor")


NODE_CHECK = """
import json, sys
from runward.errors import NotVerified
from runward.transport import nodeagents
from runward.targets import parse_target
t = parse_target(sys.argv[1], home=sys.argv[2])
try:
    print(json.dumps({"code": 0, "res": nodeagents.stop(t, "nc", NotVerified("unchecked", result=json.loads(sys.argv[3])))}))
except Exception as e:
    print(json.dumps({"code": e.exit_code, "res": e.result, "message": e.message}))
"""


def test_the_agent_on_a_node_signals_the_ray_workers_of_that_nodes_raylet_only(scli, tb):
    """The node agent's own signals, seen where Ray's end of the job does not come first: a
    process titled as Ray titles its workers, child of a process whose command line carries
    `--node_id=ID` as a raylet's does. A worker that ends on TERM exits after it; one ignoring
    TERM is killed after the grace; a listed pid whose raylet serves another node is not
    signalled (`not_found`)."""
    node = uuid.uuid4().hex
    raylet = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "ps = [subprocess.Popen(['bash', '-c', c]) for c in sys.argv[2:]]\n"
         "print(' '.join(str(p.pid) for p in ps), flush=True); time.sleep(300)", f"--node_id={node}",
         "exec -a ray::Holder sleep 300", "trap '' TERM; exec -a ray::Stubborn sleep 300"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        polite, stubborn = map(int, raylet.stdout.readline().split())
        wait_for(lambda: all(open(f"/proc/{p}/cmdline", "rb").read().startswith(b"ray::") for p in (polite, stubborn)),
                 what="the workers' titles")
        starts = {p: read_stat(p)[1] for p in (polite, stubborn, raylet.pid)}
        ws = [{"pid": polite, "node_id": node, "node_ip": "127.0.0.2", "kind": "actor", "fate": "unchecked"},
              {"pid": stubborn, "node_id": node, "node_ip": "127.0.0.2", "kind": "task worker", "fate": "unchecked"},
              {"pid": raylet.pid, "node_id": "another", "node_ip": "127.0.0.2", "kind": "actor", "fate": "unchecked"}]
        res = {"name": "nc", "submission_id": "none", "signal": "SIGTERM", "grace_s": 1.0, "ray_state": "FAILED",
               "processes": [], "survivors": [], "verified": [], "workers": [dict(w) for w in ws], "unchecked": ws,
               "node_check": {"marker": "nc-" + node + ".1", "home_id": None}}
        p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", NODE_CHECK, scli.head,
                            str(scli.remote_home), json.dumps(res)], env=scli.env, capture_output=True, text=True,
                           timeout=120)
        out = json.loads(p.stdout or "null") or {}
        assert out.get("code") == 0, (out, p.stderr)
        r = out["res"]
        assert not alive(polite, starts[polite]) and not alive(stubborn, starts[stubborn]), "ground truth: both ended"
        assert alive(raylet.pid, starts[raylet.pid]), "a pid not a worker of that node's raylet is never signalled"
        fates = {q["pid"]: (q["fate"], q["node_ip"]) for q in r["processes"]}
        assert fates == {polite: ("exited_after_SIGTERM", "127.0.0.2"), stubborn: ("killed", "127.0.0.2")}, r
        assert {w["pid"]: w["fate"] for w in r["workers"]}[raylet.pid] == "not_found", r["workers"]
        assert r["verified_dead"] and r["unchecked"] == [] and r["nodes"][0]["via"] == "ssh://root@127.0.0.2", r
    finally:
        raylet.kill()
        raylet.wait()
        for q in (polite, stubborn):
            if alive(q):
                subprocess.run(["kill", "-KILL", str(q)])




def test_what_the_jobs_actor_on_another_node_orphaned_is_ended_by_the_agent_there(scli, tb, far_node):
    """The node's agent matches by the job's RAY_JOB_ID as the head's does (the head gives the
    job's id, its start, the node's id): the orphan is dead when the stop answers, exit 0, and
    the node's row names it."""
    orphan, start, job_id = far_orphan_job(scli, tb, "n8", 9361)
    try:
        rc, doc = scli.json("stop", "n8", "--on", "head")
        assert rc == 0 and doc["ok"], doc
        assert not alive(orphan, start), "ground truth: the orphan on the other node is dead"
        row = doc["result"]["nodes"][0]
        assert row["node_ip"] == "127.0.0.2" and row["checked"], row
        said = {p["pid"]: p for p in row["job_id_processes"]}
        assert said[orphan]["fate"].startswith(("exited_after_SIG", "killed")), row
        from runward.views import rayview
        text = rayview.stop(doc["result"])
        assert f"by the job's RAY_JOB_ID there: pid {orphan} " in text, text
    finally:
        if alive(orphan, start):
            subprocess.run(["kill", "-KILL", str(orphan)])
