"""ray:// targets against a real Ray cluster (scripts/ray-testbed up: a head and a second
node of ray[default] 2.60.0 in the loopback-only network namespace rwray). runward runs in
that namespace too (ray://local on the head, docs/testbed.md). Ground truth comes from /proc
(the marker) and from Ray's own API, never from runward's answers. Skipped, with the reason,
when that cluster is not up."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import alive, marked, wait_for
from helpers_ray import (ESCAPING, _shape, escapee, mcp_calls, rcli, ray_cli, ray_job, ray_jobs,  # noqa: F401 (rcli, tb: the fixtures)
                         recorded, second_node, tb)

def test_the_ray_target_reads_its_head_and_options():
    """Without a cluster: the scheme's grammar, its runward.toml options, and what they refuse."""
    from runward.errors import BadInput
    from runward.targets import parse_target, ray
    t = parse_target("ray://alice@head1:2222", label="c", engine_options={"resources": {"fake_gpu": 1}})
    assert (str(t), t.hops[0].kind, t.hops[0].name, t.hops[0].user, t.hops[0].port) == (
        "ray://alice@head1:2222", "ssh", "head1", "alice", 2222)
    assert t.engine_spec == {"dashboard": ray.DASHBOARD, "resources": {"fake_gpu": 1}}
    assert parse_target("ray://local").hops == () and str(parse_target("ray://local")) == "ray://local"
    for bad, opts, word in (("ray://", None, "invalid Ray target"), ("ray://h/x", None, "invalid Ray target"),
                            ("ray://h", {"dashboard": "8265"}, "invalid dashboard"),
                            ("ray://h", {"resources": {"GPU": 0}}, "invalid resources"),
                            ("ray://h", {"resources": {"GPU": True}}, "invalid resources"),
                            ("ray://h", {"resources": {"CPU": 1}}, "no CPU, GPU or memory"),
                            ("ray://h", {"pending_timeout": "5x"}, "invalid pending_timeout"),
                            ("ray://h", {"pending_timeout": -1}, "invalid pending_timeout"),
                            ("ray://h", {"pending_timeout": True}, "invalid pending_timeout")):
        with pytest.raises(BadInput, match=word):
            parse_target(bad, label="c", engine_options=opts)
    assert parse_target("ray://h", engine_options={"pending_timeout": 0.5}).engine_spec["pending_timeout"] == 0.5


def test_pending_timeout_takes_a_duration_as_every_duration_key(tmp_path):
    from runward.spec.config import load
    for given, said in (('"5m"', 300.0), ("90", 90.0), ('"1h30m"', 5400.0), ("0.5", 0.5)):
        (tmp_path / "runward.toml").write_text(f'[targets.c]\non = "ray://h"\npending_timeout = {given}\n')
        assert load(tmp_path / "runward.toml").target("c").engine_spec["pending_timeout"] == said, given


def test_a_bad_pending_timeout_in_runward_toml_names_the_file_the_table_and_the_key(cli):
    """As every duration key: exit 2 where the target is used, before anything is asked (no
    dashboard answers here), naming the file, [targets.X] and pending_timeout."""
    (cli.cwd / "runward.toml").write_text('[targets.c]\non = "ray://local"\npending_timeout = "soon"\n')
    rc, doc = cli.json("start", "r20", "--on", "c", "--", "sleep", "30")
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    msg = doc["error"]["message"]
    assert msg.startswith(str(cli.cwd / "runward.toml") + ": [targets.c] invalid pending_timeout 'soon'"), msg
    assert 'pending_timeout = "5m"' in doc["error"]["hint"], doc
    assert not (cli.home / "runs" / "r20").exists()


def test_start_is_verified_running_and_stop_leaves_no_process_where_rays_own_leaves_one(rcli, tb):
    rc, doc = rcli.json("start", "r1", "--on", "ray://local", "--settle", "1", "--", "/bin/sh", "-c", ESCAPING)
    assert rc == 0, doc
    r = doc["result"]
    info = ray_job(tb, r["submission_id"])
    assert info["status"] == "RUNNING" and r["ray_state"] == "RUNNING", (info, r)
    drv = r["driver"]
    assert alive(drv["pid"], drv["start"]) and drv["pid"] in marked("r1.1"), "the driver reported lives, by /proc"
    # the job's parent is the entry's subreaper, whose parent is the entry, Ray's child (core/rayreaper.py)
    up = [drv["pid"]]
    for _ in range(3):
        up.append(int(open(f"/proc/{up[-1]}/stat").read().rsplit(")", 1)[1].split()[1]))
    assert open(f"/proc/{up[1]}/comm").read().strip() == "rw-reaper" and up[2] == drv["session"]["pid"], up
    assert open(f"/proc/{up[3]}/cmdline", "rb").read().startswith(b"ray::JobSupervisor"), "Ray's entry, the job under it"
    assert open(f"/proc/{drv['pid']}/cmdline", "rb").read() == b"sleep\x00300\x00", "the command (exec'd) itself"
    assert drv["node_id"] == info["driver_node_id"]
    gone = escapee("r1.1")
    rc, doc = rcli.json("status", "r1")
    st = doc["result"]["runs"][0]
    assert (rc, st["state"], st["ray_state"], st["pid"]) == (0, "running", "RUNNING", drv["pid"]), st
    rc, doc = rcli.json("logs", "r1", "-n", "5")
    assert "hello" in doc["result"]["lines"], doc
    rc, doc = rcli.json("stop", "r1")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert marked("r1.1") == {}, "no process of the run is left, the escaped child included"
    assert not alive(gone)
    # runward's SIGTERM ended the driver (Ray's stop, which would TERM and KILL 3 s later, is
    # left for a job still active after it): Ray's record says so, runward calls it stopped
    info = ray_job(tb, r["submission_id"])
    assert (info["status"], info["driver_exit_code"]) == ("FAILED", -15), info
    st = rcli.status("r1")
    assert (st["state"], st["exit"]["stopped_by"]) == ("stopped", "runward"), st
    # its alerts say what is known of the end (Ray's word), not that nobody saw it end
    said = json.dumps((st.get("health") or {}).get("alerts") or [])
    assert "nobody saw it end" not in said and "killed by SIGTERM" in said, said

    # the same job under Ray's own submit and stop: the escaped child lives on
    marker = f"rwcmp{uuid.uuid4().hex[:8]}.1"
    sid = f"rwcmp-{uuid.uuid4().hex[:8]}"
    p = ray_cli(tb, "submit", "--no-wait", "--submission-id", sid, "--", "env", f"RUNWARD_RUN={marker}",
                "/bin/sh", "-c", ESCAPING)
    assert p.returncode == 0, p.stderr
    left = escapee(marker)
    try:
        assert ray_cli(tb, "stop", sid).returncode == 0
        wait_for(lambda: ray_job(tb, sid)["status"] == "STOPPED", timeout=20, what="Ray's STOPPED")
        assert alive(left), "Ray's stop leaves the double-forked child"
    finally:
        for pid in marked(marker):
            os.kill(pid, 9)


def test_a_missing_program_is_exited_early_with_rays_exit_code(rcli, tb):
    rc, doc = rcli.json("start", "r2", "--on", "ray://local", "--settle", "2", "--sh",
                        "echo about to fail; exec /nonexistent/prog")
    assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
    r = doc["result"]
    assert ray_job(tb, r["ray"]["submission_id"])["driver_exit_code"] == 127
    assert r["exit"]["code"] == 127 and r["ray_state"] == "FAILED", r
    assert any("/nonexistent/prog" in ln for ln in r["last_lines"]), r["last_lines"]


def test_rays_stop_behind_runwards_back_is_said_with_its_survivor(rcli, tb):
    # placed by the target's entrypoint resources on the second node (the only one with fake_gpu)
    (rcli.cwd / "runward.toml").write_text('[targets.node2]\non = "ray://local"\nresources = {fake_gpu = 1}\n')
    # its TERM trap starts a child after Ray's stop took its snapshot of the tree: Ray's stop
    # never sees it. The double-forked child is the entry's reaper's, in that snapshot: Ray's
    # own stop ends it too (core/rayreaper.py)
    late = 'trap "setsid sleep 903 & exit 0" TERM; ' + ESCAPING.replace("exec sleep 300", "while :; do sleep 0.1; done")
    rc, doc = rcli.json("start", "r3", "--on", "node2", "--settle", "1", "--", "/bin/sh", "-c", late)
    assert rc == 0, doc
    assert doc["result"]["driver"]["node_id"] == second_node(tb) == ray_job(tb, doc["result"]["submission_id"])["driver_node_id"]
    caught = escapee("r3.1")
    assert ray_cli(tb, "stop", doc["result"]["submission_id"]).returncode == 0
    wait_for(lambda: ray_job(tb, doc["result"]["submission_id"])["status"] == "STOPPED", timeout=20, what="STOPPED")
    assert not alive(caught), "Ray's stop ends the reaper's orphan with the tree"
    left = wait_for(lambda: next((p for p in marked("r3.1") if open(f"/proc/{p}/cmdline", "rb").read() ==
                                  b"sleep\x00903\x00"), None), timeout=20, what="the child started after Ray's snapshot")
    st = rcli.status("r3")
    assert (st["state"], st["exit"]["stopped_by"]) == ("stopped", "someone else"), st
    assert alive(left) and st["survivors"] == [left], st
    rc, doc = rcli.json("stop", "r3")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert marked("r3.1") == {} and not alive(left)


def test_a_job_no_node_can_ever_hold_is_refused_before_it_is_submitted(rcli, tb):
    """Resources no node has (fake_gpu 5: the second node has 1; a GPU: none has one): exit
    2 naming the resource and the cluster's totals, nothing submitted (Ray would keep the job
    PENDING for ever). Ground truth: Ray's job list, the run's directory."""
    (rcli.cwd / "runward.toml").write_text('[targets.big]\non = "ray://local"\nresources = {fake_gpu = 5}\n')
    for name, flags, said in (("r10", ["--on", "big"], "it asks fake_gpu 5; no node has that much (the "
                                                         "cluster's totals: fake_gpu 1;"),
                              ("r11", ["--on", "ray://local", "--gpus", "0"], "it asks GPU 1; no node has "
                                                                              "that much (the cluster's totals: GPU 0;")):
        rc, doc = rcli.json("start", name, *flags, "--settle", "0.5", "--", "sleep", "1000")
        assert rc == 2 and said in doc["error"]["message"], doc
        assert not (rcli.home / "runs" / name).exists()
        assert not [j for j in ray_jobs(tb) if (j.get("submission_id") or "").startswith(f"runward-{name}-")]
    assert marked("r10.") == {} and marked("r11.") == {}


def test_a_job_ray_keeps_pending_is_given_up_and_ended_for_good(rcli, tb):
    """Resources a node has, held by another job: the start gives up after the settle and the
    target's pending_timeout (2 s here) and stops the job; Ray's stop leaves a job it has not
    placed PENDING, so the stop kills its JobSupervisor actor: Ray's own record says it ended,
    and it never runs when the resources free. Ground truth: Ray's API, /proc."""
    (rcli.cwd / "runward.toml").write_text('[targets.node2]\non = "ray://local"\nresources = {fake_gpu = 1}\n'
                                           '[targets.node2soon]\non = "ray://local"\nresources = {fake_gpu = 1}\n'
                                           'pending_timeout = "2s"\n')
    rc, doc = rcli.json("start", "r12", "--on", "node2", "--settle", "0.5", "--", "sleep", "1000")
    assert rc == 0, doc
    rc, doc = rcli.json("start", "r13", "--on", "node2soon", "--settle", "0.5", "--", "sleep", "1000")
    assert rc == 2 and "could not place" in doc["error"]["message"], doc
    assert "still PENDING after 2.5s" in doc["error"]["message"], doc
    assert "it was stopped (verified)" in doc["error"]["message"], doc
    sid = doc["result"]["submission_id"]
    assert doc["result"]["stopped"]["pending_end"] == "its JobSupervisor actor killed", doc["result"]
    assert ray_job(tb, sid)["status"] == "FAILED"
    rc, doc = rcli.json("stop", "r12")
    assert rc == 0, doc
    assert ray_job(tb, sid)["status"] == "FAILED" and marked("r13.") == {}, "not placed once fake_gpu freed"
    rc, doc = rcli.json("rm", "r13")
    assert rc == 0, doc
    assert marked("r12.") == {}


def test_an_unreachable_dashboard_is_exit_3_naming_it(rcli, tb):
    (rcli.cwd / "runward.toml").write_text('[targets.deadray]\non = "ray://local"\ndashboard = "http://127.0.0.1:9"\n')
    rc, doc = rcli.json("start", "r4", "--on", "deadray", "--", "sleep", "30")
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert "http://127.0.0.1:9" in doc["error"]["message"] and "dashboard" in doc["error"]["message"]
    assert not (rcli.home / "runs" / "r4").exists(), "nothing was started"


def test_through_ssh_to_a_host_with_no_ray_head_is_exit_3_naming_the_dashboard(cli, tmp_path):
    """ray://HOST: the agent runs on HOST through the ssh hop and asks the dashboard there;
    rw1 (the ssh testbed) runs no Ray, so nothing answers on its 127.0.0.1:8265."""
    import testbed
    tb = testbed.require("ssh")
    cli.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    (cli.cwd / "runward.toml").write_text(f'[targets.head]\non = "ray://rw1"\nhome = "{tmp_path}/far"\n')
    rc, doc = cli.json("start", "r5", "--on", "head", "--", "sleep", "30")
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert "http://127.0.0.1:8265" in doc["error"]["message"] and "rw1" in doc["error"]["hop"], doc["error"]
    assert not (tmp_path / "far" / "runs" / "r5").exists(), "nothing was started"


def test_after_a_head_restart_the_run_is_still_known_and_its_survivor_stopped(rcli, tb):
    """The head crashes and starts again (scripts/ray-testbed restart-head): Ray's job list is
    empty, the driver ended with the head; runward still has the run's record, log and
    history, says what lives (the escaped child), and its stop ends it, verified."""
    rc, doc = rcli.json("start", "r6", "--on", "ray://local", "--settle", "1", "--", "/bin/sh", "-c", ESCAPING)
    assert rc == 0, doc
    sid, drv = doc["result"]["submission_id"], doc["result"]["driver"]
    left = escapee("r6.1")
    p = subprocess.run(["scripts/ray-testbed", "restart-head"], cwd=os.path.dirname(os.path.dirname(__file__)),
                       env=dict(os.environ, RUNWARD_RAY_BIN=tb["ray"]), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert ray_job(tb, sid) is None, "Ray forgot the job"
    assert not alive(drv["pid"], drv["start"]), "the driver ended with the head"
    st = rcli.status("r6")
    assert st["state"] == "lost" and "no longer knows" in st["note"] and st["survivors"] == [left], st
    rc, doc = rcli.json("logs", "r6", "-n", "5")
    assert "hello" in doc["result"]["lines"], doc
    rc, doc = rcli.json("history", "r6")
    assert rc == 0 and sid in json.dumps(doc["result"]), doc
    assert doc["result"]["attempts"][0]["state"] == st["state"], doc  # history says what status says
    rc, doc = rcli.json("stop", "r6")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert marked("r6.1") == {} and not alive(left)


def test_a_supervision_policy_is_refused_naming_it_before_anything_is_asked(cli):
    """No shim keeps a policy for a Ray job: refused before the dashboard is even asked (none
    answers here), and nothing is recorded."""
    rc, doc = cli.json("start", "r7", "--on", "ray://local", "--restart", "on-failure", "--", "sleep", "30")
    assert rc == 2 and "--restart" in doc["error"]["message"] and "Ray run" in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "r7").exists()


def test_an_env_value_passed_by_name_is_refused_where_ray_would_show_it(cli):
    """--env NAME promises its value is never stored on the target; Ray keeps runtime_env in
    its job record for every dashboard reader: refused before anything is asked, nothing
    recorded, the value nowhere in the answer."""
    cli.env["RW_SECRET"] = "hunter2-zz9"
    for how in (["--env", "RW_SECRET"], ["--env-file", str(cli.cwd / "s.env")]):
        (cli.cwd / "s.env").write_text("RW_SECRET=hunter2-zz9\n")
        p = cli.run("start", "r11", "--on", "ray://local", "--json", *how, "--", "sleep", "30")
        doc = json.loads(p.stdout)
        assert p.returncode == 2 and "RW_SECRET" in doc["error"]["message"] and "job record" in doc["error"]["message"], doc
        assert "hunter2" not in p.stdout + p.stderr
        assert not (cli.home / "runs" / "r11").exists()


def test_rays_own_job_id_and_raylet_in_the_runs_env_are_refused_from_every_way_in(rcli, tb):
    """RAY_JOB_ID or RAY_RAYLET_PID in the run's env: Ray's supervisor would never start the job,
    and the stop matches processes by the job's id. Refused (exit 2, naming it and why) from the
    flag, runward.toml, the library and MCP, nothing submitted; other RAY_* variables pass."""
    before = {j["submission_id"] for j in ray_jobs(tb)}
    for var in ("RAY_JOB_ID", "RAY_RAYLET_PID"):
        rc, doc = rcli.json("start", "j1", "--on", "ray://local", "--env", f"{var}=02000000", "--", "sleep", "30")
        assert rc == 2 and f"--env {var} on a Ray target" in doc["error"]["message"], doc
        assert "runward and Ray set" in doc["error"]["message"] and var in doc["error"]["hint"], doc
    (rcli.cwd / "runward.toml").write_text('[runs.j2]\non = "ray://local"\ncommand = ["sleep", "30"]\n'
                                           'env = { RAY_JOB_ID = "03000000" }\n')
    rc, doc = rcli.json("start", "j2")
    assert rc == 2 and "--env RAY_JOB_ID on a Ray target" in doc["error"]["message"], doc
    code = ("import json, runward\n"
            "r = runward.start('j3', ['sleep', '30'], on=runward.Target('ray://local'), env={'RAY_RAYLET_PID': '1'})\n"
            "print(json.dumps(r.to_json()))\n")
    p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code], cwd=rcli.cwd, env=rcli.env,
                       capture_output=True, text=True, timeout=120)
    err = json.loads(p.stdout)["error"]
    assert (err["type"], err["exit_code"]) == ("BadInput", 2) and "RAY_RAYLET_PID on a Ray target" in err["message"], err
    if importlib.util.find_spec("mcp"):
        err, doc = mcp_calls(rcli, tb, [("start", {"name": "j2"})])["start"]
        assert err and doc["error"]["type"] == "BadInput" and "RAY_JOB_ID" in doc["error"]["message"], doc
    assert not any((rcli.home / "runs" / n).exists() for n in ("j1", "j2", "j3"))
    assert {j["submission_id"] for j in ray_jobs(tb)} == before, "nothing submitted"
    # another RAY_* variable is Ray's setting: it passes to the job
    rc, doc = rcli.json("start", "j4", "--on", "ray://local", "--settle", "1", "--env", "RAY_DEDUP_LOGS=0", "--",
                        "sh", "-c", "echo dedup=$RAY_DEDUP_LOGS; exec sleep 30")
    assert rc == 0, doc
    wait_for(lambda: "dedup=0" in (rcli.home / "runs" / "j4" / "log").read_text(), what="the job's env in its log")
    rc, doc = rcli.json("stop", "j4")
    assert rc == 0, doc


def test_mcp_starts_reads_and_stops_a_ray_job_with_the_clis_documents(rcli, tb):
    """The MCP server, run on the head (in the namespace), starts a run runward.toml defines on
    ray://local, reads its status and stops it; each document has the CLI's shape."""
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    cmd = json.dumps(["/bin/sh", "-c", ESCAPING])
    (rcli.cwd / "runward.toml").write_text(
        f'[runs.m1]\non = "ray://local"\ncommand = {cmd}\nsettle = 1\n\n'
        f'[runs.c1]\non = "ray://local"\ncommand = {cmd}\nsettle = 1\n')
    cli = {"start": rcli.json("start", "c1")}
    assert cli["start"][0] == 0, cli
    cli["status"] = rcli.json("status", "c1")

    def after(verb, docs):
        if verb == "status":  # the driver MCP reported lives, by /proc and by Ray
            drv = docs["start"][1]["result"]["driver"]
            assert alive(drv["pid"], drv["start"]) and drv["pid"] in marked("m1.1")
            assert ray_job(tb, docs["start"][1]["result"]["submission_id"])["status"] == "RUNNING"
    docs = mcp_calls(rcli, tb, [(verb, {"name": "m1"}) for verb in ("start", "status", "stop")], after)
    cli["stop"] = rcli.json("stop", "c1")
    for verb in ("start", "status", "stop"):
        err, doc = docs[verb]
        assert not err and doc["ok"], (verb, doc)
        assert _shape(doc) == _shape(cli[verb][1]), verb
    assert docs["status"][1]["result"]["runs"][0]["state"] == "running"
    assert docs["stop"][1]["result"]["verified_dead"]
    assert marked("m1.1") == {} and marked("c1.1") == {}, "the escaped children too"
    assert ray_job(tb, docs["start"][1]["result"]["submission_id"])["status"] not in ("PENDING", "RUNNING")


def test_the_python_api_starts_reads_and_stops_a_ray_job_with_the_clis_documents(rcli, tb):
    """runward.start/status/stop, each in its own process on the head: the CLI's documents."""
    code = ("import json, sys, runward\n"
            "t, verb = runward.Target('ray://local'), sys.argv[1]\n"
            "res = (runward.start('l1', ['/bin/sh', '-c', sys.argv[2]], on=t, settle=1.0) if verb == 'start'\n"
            "       else getattr(runward, verb)('l1', on=t))\n"
            "print(json.dumps(res.to_json()))")

    def api(verb):
        p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code, verb, ESCAPING],
                           cwd=rcli.cwd, env=rcli.env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    start = api("start")
    assert start["ok"], start
    drv, sid = start["result"]["driver"], start["result"]["submission_id"]
    assert alive(drv["pid"], drv["start"]) and drv["pid"] in marked("l1.1")
    assert ray_job(tb, sid)["status"] == "RUNNING"
    status = api("status")
    assert status["result"]["runs"][0]["state"] == "running" and status["result"]["runs"][0]["pid"] == drv["pid"]
    assert _shape(status) == _shape(rcli.json("status", "l1")[1])
    stop = api("stop")
    assert stop["ok"] and stop["result"]["verified_dead"], stop
    assert marked("l1.1") == {} and ray_job(tb, sid)["status"] not in ("PENDING", "RUNNING")


def test_the_worker_node_killed_mid_run_is_said_naming_the_node(rcli, tb):
    """The second node's raylet KILLed under a job placed there (a machine lost): status says
    the driver is gone, naming its node, then Ray's FAILED; the escaped child is named and
    stopped. The node is started again after (scripts/ray-testbed restart-node2)."""
    (rcli.cwd / "runward.toml").write_text('[targets.node2]\non = "ray://local"\nresources = {fake_gpu = 1}\n')
    rc, doc = rcli.json("start", "r8", "--on", "node2", "--settle", "1", "--", "/bin/sh", "-c", ESCAPING)
    assert rc == 0, doc
    sid, drv, node = doc["result"]["submission_id"], doc["result"]["driver"], second_node(tb)
    assert drv["node_id"] == node == ray_job(tb, sid)["driver_node_id"]
    left = escapee("r8.1")
    raylet = [pid for pid, start in recorded(os.path.join(tb["dir"], "node2.pids"))
              if alive(pid, start) and open(f"/proc/{pid}/comm").read().strip() == "raylet"]
    assert len(raylet) == 1
    again = None  # the node's restart, begun as soon as Ray has said its verdict

    def restart_node2():
        return subprocess.Popen(["scripts/ray-testbed", "restart-node2"], cwd=os.path.dirname(os.path.dirname(__file__)),
                                env=dict(os.environ, RUNWARD_RAY_BIN=tb["ray"]), stderr=subprocess.PIPE, text=True)
    try:
        os.kill(raylet[0], 9)
        wait_for(lambda: not alive(drv["pid"], drv["start"]), timeout=30, what="the driver's end with its node")
        st = rcli.status("r8")
        assert st["state"] in ("lost", "exited") and node[:12] in json.dumps(st.get("note") or st.get("exit")), st
        wait_for(lambda: ray_job(tb, sid)["status"] == "FAILED", timeout=60, what="Ray's FAILED")
        again = restart_node2()
        st = rcli.status("r8")
        # ended, with its escaped child alive: stray, as on every target
        assert (st["state"], st["ray_state"]) == ("stray", "FAILED"), st
        assert st["note"].endswith("; 1 of its processes are still alive: stop ends them"), st
        assert (st["exit"]["node_id"], st["exit"]["error_type"], st["exit"].get("stopped_by")) == (
            node, ray_job(tb, sid)["error_type"], None), st
        assert node[:12] in st["note"] and "exit status is unknown" in st["note"], st
        assert alive(left) and st["survivors"] == [left], "the escaped child outlives its node's raylet"
        rc, doc = rcli.json("stop", "r8")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert marked("r8.1") == {} and not alive(left)
    finally:
        again = again or restart_node2()
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err


# a dashboard that answers Ray's version and then an HTTP error for the Jobs API
ERRING = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        ok = self.path == "/api/version"
        body = json.dumps({"version": "4", "ray_version": "2.60.0"}).encode() if ok else b"boom: the jobs manager failed"
        self.send_response(200 if ok else int(sys.argv[2]))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
srv.serve_forever()
"""


@pytest.mark.parametrize("code, rc, kind, word", [(500, 3, "HopFailed", "HTTP 500"),
                                                  (404, 2, "BadInput", "no Jobs API")])
def test_a_dashboard_answering_an_error_is_said_naming_its_url_and_nothing_is_recorded(rcli, tb, code, rc, kind, word):
    port = 20000 + os.getpid() % 10000
    srv = subprocess.Popen(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", ERRING, str(port), str(code)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline() == "ready\n"
        url = f"http://127.0.0.1:{port}"
        (rcli.cwd / "runward.toml").write_text(f'[targets.erring]\non = "ray://local"\ndashboard = "{url}"\n')
        got, doc = rcli.json("start", "r9", "--on", "erring", "--", "sleep", "30")
        assert (got, doc["error"]["type"]) == (rc, kind), doc
        assert url in doc["error"]["message"] and word in doc["error"]["message"], doc["error"]
        assert "dashboard" in doc["error"]["hint"], doc["error"]
        assert not (rcli.home / "runs" / "r9").exists(), "nothing was recorded"
        assert marked("r9.1") == {}
    finally:
        srv.kill()
        srv.wait()
