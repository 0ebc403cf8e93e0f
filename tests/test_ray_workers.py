"""A Ray job's own worker processes (its tasks' and actors' workers: children of a raylet,
not of the driver, without the marker) and its detached actors, on the real cluster of
tests/test_ray.py; a node whose address is not the head's is started for the test
(127.0.0.2 in the namespace, no CPUs: only this test's actor goes there). Ground truth from
/proc and from Ray's state API (docs/ray.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import alive, marked, read_stat, wait_for
from helpers_ray import NetnsCLI, _shape, mcp_calls, ray_job, rcli, tb  # noqa: F401 (rcli, tb: the fixtures)
from helpers_raynodes import DRIVER, environ, far_node, ray_state, sleep_of  # noqa: F401 (far_node: the fixture)



# an actor that starts a process in a new session and returns: the process lives on under
# pid 1, without the marker (the actor's worker is the raylet's child, not the driver's)
SPAWNER = """\
import os, subprocess, sys, time, ray
ray.init()
@ray.remote
class Spawner:
    def spawn(self, n):
        subprocess.Popen(["sh", "-c", "(sleep %s &)" % n], start_new_session=True).wait()
        return os.getpid()
s = Spawner.remote()
print("spawned", ray.get(s.spawn.remote(sys.argv[1])), flush=True)
time.sleep(900)
"""




def start_job(rcli, tb, name: str, *args: str) -> tuple[dict, str]:
    drv = rcli.cwd / "driver.py"
    drv.write_text(DRIVER)
    rc, doc = rcli.json("start", name, "--on", "ray://local", "--settle", "1", "--ready", "^pids",
                        "--ready-timeout", "120", "--", sys.executable, str(drv), *args)
    assert rc == 0, doc
    return doc["result"], ray_job(tb, doc["result"]["submission_id"])["job_id"]


def spin_worker(tb: dict, job_id: str) -> tuple[int, str]:
    """The pid and node of the job's running `spin` task, by Ray's word, once it runs."""
    t = wait_for(lambda: next((t for t in ray_state(tb, "tasks", job_id) if t["name"] == "spin"
                               and t["state"] == "RUNNING" and t.get("worker_pid")), None), timeout=60, what="spin")
    return t["worker_pid"], t["node_id"]


def test_stop_ends_the_jobs_ray_workers_and_names_its_detached_actor(rcli, tb):
    keeper = "keep-" + uuid.uuid4().hex[:8]
    res, job_id = start_job(rcli, tb, "w1", keeper, "-")
    actors = {a["is_detached"]: a for a in ray_state(tb, "actors", job_id) if a["state"] == "ALIVE"}
    held, kept = actors[False], actors[True]
    task_pid, _ = spin_worker(tb, job_id)
    starts = {p: read_stat(p)[1] for p in (held["pid"], task_pid, kept["pid"])}
    assert all(alive(p, s) for p, s in starts.items()) and not set(starts) & set(marked("w1.1")), \
        "the job's workers live, and the marker does not find them"
    assert open(f"/proc/{held['pid']}/cmdline", "rb").read().startswith(b"ray::Holder")

    rc, doc = rcli.json("stacks", "w1")
    assert rc == 0, doc
    said = json.dumps(doc["result"])
    for pid in (res["driver"]["pid"], held["pid"], task_pid, kept["pid"]):
        assert f'"pid": {pid},' in said, (pid, said[:2000])
    assert "Ray worker(s) of the job here" in said and '"kind": "task worker"' in said, said[:2000]

    rc, doc = rcli.json("stop", "w1")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    r = doc["result"]
    assert not alive(held["pid"], starts[held["pid"]]) and not alive(task_pid, starts[task_pid])
    fates = {w["pid"]: w["fate"] for w in r["workers"]}
    assert {held["pid"], task_pid} <= set(fates) and "alive" not in fates.values(), r["workers"]
    assert r["unchecked"] == [], r
    # the detached actor: kept by Ray, named by runward with how to end it, never killed
    assert alive(kept["pid"], starts[kept["pid"]]), "runward never kills a detached actor"
    det = r["detached_actors"]
    assert [(d["pid"], d["actor"]["name"], d["alive"], d["node_id"]) for d in det] == [
        (kept["pid"], keeper, True, kept["node_id"])], det
    from runward.views import rayview
    text = rayview.stop(r)
    assert f"detached actor {keeper} (Holder) pid {kept['pid']}" in text and "ray.kill(ray.get_actor(" in text, text
    # its hint ends it
    code = f"import ray; ray.init(address={tb['gcs']!r}); {det[0]['end_with']}"
    subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code], check=True, timeout=120,
                   capture_output=True, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    wait_for(lambda: not alive(kept["pid"], starts[kept["pid"]]), timeout=30, what="the detached actor ended")




def test_a_worker_on_a_node_that_is_not_the_heads_is_named_unchecked_never_dead(rcli, tb, far_node):
    """The head's agent cannot see the node at 127.0.0.2; the agent there is asked over
    ssh://127.0.0.2 (the default way in), where no sshd listens on port 22 in the namespace:
    exit 3 naming that hop, the worker still unchecked (tests/test_ray_ssh.py reaches it)."""
    res, job_id = start_job(rcli, tb, "w2", "-", "far_node")
    held = next(a for a in ray_state(tb, "actors", job_id) if a["state"] == "ALIVE")
    assert held["node_id"] == far_node, held

    rc, doc = rcli.json("stacks", "w2")
    assert rc == 0, doc
    said = json.dumps(doc["result"])
    assert f'"pid": {held["pid"]}, "node_id": "{far_node}", "node_ip": "127.0.0.2"' in said, said[:3000]
    assert "on other nodes not read" in said, said[:3000]

    rc, doc = rcli.json("stop", "w2")
    assert rc == 3 and doc["error"]["type"] == "HopFailed" and doc["error"]["hop"] == "ssh://127.0.0.2", doc
    r = doc["result"]
    far = [u for u in r["unchecked"] if u["pid"] == held["pid"]]
    assert far and far[0]["node_id"] == far_node and far[0]["node_ip"] == "127.0.0.2", r["unchecked"]
    assert held["pid"] not in {p["pid"] for p in r["processes"]}, "never counted dead: never signalled from here"
    assert "127.0.0.2" in doc["error"]["message"] and str(held["pid"]) in doc["error"]["message"], doc
    assert r["verified_dead"], "the head's own processes of the run are verified gone"
    assert marked("w2.1") == {}
    # Ray itself ends the job's actor there (its job is STOPPED)
    wait_for(lambda: not alive(held["pid"]), timeout=60, what="Ray ended the far actor")


def test_gpus_on_ray_answers_from_the_head_naming_the_jobs_driver_and_worker(cli, tb, tmp_path):
    """`gpus --on ray://local` reads the head's nvidia-smi (the stand-in on PATH, as on an ssh
    target): the driver and the job's actor, each holding a fake GPU, are named the run's;
    the library's document has the CLI's shape."""
    import fakegpu
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    rcli = NetnsCLI(cli, tb["netns"])
    rcli.env = fakegpu.env_with_standin(state, rcli.env)
    res, job_id = start_job(rcli, tb, "w3", "-", "-")
    held = next(a for a in ray_state(tb, "actors", job_id) if a["state"] == "ALIVE")
    fakegpu.attach(state, 0, res["driver"]["pid"], 1000)
    fakegpu.attach(state, 1, held["pid"], 2000)
    try:
        rc, doc = rcli.json("gpus", "--on", "ray://local")
        assert rc == 0, doc
        who = {g["index"]: [(p["pid"], p["run"], p["attempt"]) for p in g["processes"]] for g in doc["result"]["gpus"]}
        assert who == {0: [(res["driver"]["pid"], "w3", 1)], 1: [(held["pid"], "w3", 1)]}, doc["result"]
        code = ("import json, runward\n"
                "print(json.dumps(runward.gpus(on=runward.Target('ray://local')).to_json()))")
        p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code], cwd=rcli.cwd,
                           env=rcli.env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert _shape(json.loads(p.stdout)) == _shape(doc)
    finally:
        rc, doc = rcli.json("stop", "w3")
    assert rc == 0 and not alive(held["pid"]), doc


def test_mcp_and_the_library_dump_the_same_stacks_and_gpus_of_a_ray_job_as_the_cli(rcli, tb, tmp_path):
    """MCP's stacks and gpus tools and runward.stacks/gpus, run on the head, answer with the
    CLI's documents: the job's worker is among the stacks of each."""
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import fakegpu
    rcli.env = fakegpu.env_with_standin(fakegpu.create_state(tmp_path / "smi.json", gpus=1), rcli.env)
    res, job_id = start_job(rcli, tb, "w4", "-", "-")
    task_pid, _ = spin_worker(tb, job_id)
    cli = {"stacks": rcli.json("stacks", "w4", "--on", "ray://local")[1], "gpus": rcli.json("gpus", "--on", "ray://local")[1]}
    try:
        docs = mcp_calls(rcli, tb, [("stacks", {"name": "w4", "on": "ray://local"}), ("gpus", {"on": "ray://local"})])
        code = ("import json, sys, runward\nt = runward.Target('ray://local')\n"
                "print(json.dumps({'stacks': runward.stacks('w4', on=t).to_json(), 'gpus': runward.gpus(on=t).to_json()}))")
        p = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code], cwd=rcli.cwd,
                           env=rcli.env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        lib = json.loads(p.stdout)
    finally:
        rcli.json("stop", "w4")
    for verb in ("stacks", "gpus"):
        err, doc = docs[verb]
        assert not err and doc["ok"] and lib[verb]["ok"] and cli[verb]["ok"], (verb, doc, lib[verb], cli[verb])
        assert _shape(doc) == _shape(cli[verb]) == _shape(lib[verb]), verb
    for doc in (docs["stacks"][1], lib["stacks"], cli["stacks"]):
        said = json.dumps(doc["result"])
        assert f'"pid": {task_pid},' in said and f'"pid": {res["driver"]["pid"]},' in said, said[:2000]




def test_a_process_an_actor_started_in_a_new_session_is_ended_by_the_jobs_ray_job_id(rcli, tb):
    """The actor's child left the session and the tree, carries no marker, but carries the
    job's RAY_JOB_ID: the stop ends it and says its fate. --env gives the job a runtime_env,
    so Ray starts the job's workers for it (a worker Ray started before the job, leased to a
    job without one, carries RAY_JOB_ID=ffffffff: docs/ray.md, not caught)."""
    drv = rcli.cwd / "spawner.py"
    drv.write_text(SPAWNER)
    rc, doc = rcli.json("start", "w5", "--on", "ray://local", "--settle", "1", "--env", "W5=1", "--ready", "^spawned",
                        "--ready-timeout", "120", "--", sys.executable, str(drv), "9337")
    assert rc == 0, doc
    res = doc["result"]
    job_id = ray_job(tb, res["submission_id"])["job_id"]

    def find():
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and open(f"/proc/{d}/cmdline", "rb").read() == b"sleep\x009337\x00":
                    return int(d)
            except OSError:
                continue
    left = wait_for(find, timeout=30, what="the actor's child")
    start, env = read_stat(left)[1], environ(left)
    assert env.get("RAY_JOB_ID") == job_id and "RUNWARD_RUN" not in env, env
    assert left not in marked("w5.1") and os.getsid(left) not in (os.getsid(res["driver"]["pid"]), 0)
    rc, doc = rcli.json("stop", "w5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(left, start), "the actor's child in its own session is ended"
    said = {p["pid"]: p for p in doc["result"]["job_id_processes"]}
    assert said[left]["ray_job_id"] == job_id and said[left]["fate"].startswith(("exited_after_SIG", "killed")), said


def test_a_process_is_the_jobs_by_ray_job_id_only_within_its_bounds():
    """No cluster: real processes carrying a RAY_JOB_ID, and the scope a stop builds
    (ray.job_scope): the job's id, this node's raylets, the driver's start, the detached actors
    spared. Each bound excludes a process on its own; one with a marker is never found by id."""
    from runward.agent.core import ray
    from runward.agent.core.procfs import scan
    env = dict(os.environ, RAY_JOB_ID="0a000000", RAY_RAYLET_PID="4242")
    plain = subprocess.Popen(["sleep", "60"], env=env)
    other = subprocess.Popen(["sleep", "60"], env=dict(env, RUNWARD_RUN="other.1"))
    keeper = subprocess.Popen(["sleep", "60"])
    try:
        wait_for(lambda: all(read_stat(p.pid) for p in (plain, other)), what="the sleeps")
        start = read_stat(plain.pid)[1]

        def found(**change):
            scope = ray.make_scope(**dict({"job_id": "0a000000", "raylets": {"4242"}, "since": start}, **change))
            return {plain.pid, other.pid} & set(ray.job_id_processes(scope, scan()))
        assert found() == {plain.pid}, "by the job's id; never one with another run's marker"
        assert found(job_id="0b000000") == set(), "another job's id"
        assert found(raylets={"4243"}) == set(), "under a raylet not of this node (or since restarted)"
        assert found(since=start + 1) == set(), "started before the job's driver: an older job's"
        assert found(spare={plain.pid}) == set(), "a detached actor's (Ray keeps it by design)"
        assert found(raylets={"4242", str(os.getpid())}) == set(), "a raylet's child: a Ray worker, by Ray's word only"
        # a live detached actor here (KEEPER stands for it): the id alone is not enough (the
        # actor carries the same id); in the tree of the job's other workers (this test's) it is
        scope = ray.make_scope("0a000000", start, {"4242"}, spare={keeper.pid}, names=["keeper"])
        assert ray.job_id_processes(scope, scan()) == [] and set(scope["held"]) == {plain.pid}, scope
        assert "may be detached actor keeper's" in scope["held"][plain.pid]["why"], scope
        assert found(spare={keeper.pid}, ours={os.getpid()}) == {plain.pid}, "in a worker's tree: the job's"
        keeper.kill()
        keeper.wait()
        assert found(spare={keeper.pid}) == {plain.pid}, "the detached actor gone: the id ties it again"
    finally:
        for p in (plain, other, keeper):
            p.kill()
            p.wait()


# a detached actor that starts a process in a new session (its child) and one that leaves
# its tree (an orphan under pid 1): both carry the job's RAY_JOB_ID, as the actor does
DETACHED_SPAWNER = """\
import os, subprocess, sys, time, ray
ray.init()
@ray.remote
class Det:
    def spawn(self, n):
        subprocess.Popen(["sleep", str(n)], start_new_session=True)
        subprocess.Popen(["sh", "-c", "(sleep %d &)" % (n + 1)], start_new_session=True).wait()
        return os.getpid()
d = Det.options(name=sys.argv[2], lifetime="detached", namespace="rwtest").remote()
print("spawned", ray.get(d.spawn.remote(int(sys.argv[1]))), flush=True)
time.sleep(900)
"""




def test_what_a_detached_actor_orphaned_is_named_beside_it_never_killed_by_the_job_id_alone(rcli, tb):
    """The orphan carries the job's RAY_JOB_ID and nothing else ties it to the job or to the
    actor: while the job's detached actor lives, it may be the actor's (Ray keeps those by
    design), so the stop leaves it and names it with how to end it; exit 0, as for the actor."""
    name = "det-" + uuid.uuid4().hex[:8]
    drv = rcli.cwd / "det.py"
    drv.write_text(DETACHED_SPAWNER)
    rc, doc = rcli.json("start", "w8", "--on", "ray://local", "--settle", "1", "--env", "W8=1", "--ready", "^spawned",
                        "--ready-timeout", "120", "--", sys.executable, str(drv), "9351", name)
    assert rc == 0, doc
    job_id = ray_job(tb, doc["result"]["submission_id"])["job_id"]
    actor = next(a for a in ray_state(tb, "actors", job_id) if a["is_detached"] and a["state"] == "ALIVE")
    child = wait_for(lambda: sleep_of(9351), timeout=30, what="the actor's child")
    orphan = wait_for(lambda: sleep_of(9352), timeout=30, what="the actor's orphan")
    starts = {p: read_stat(p)[1] for p in (actor["pid"], child, orphan)}
    try:
        assert environ(orphan).get("RAY_JOB_ID") == job_id and "RUNWARD_RUN" not in environ(orphan)
        rc, doc = rcli.json("stop", "w8")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        r = doc["result"]
        assert all(alive(p, s) for p, s in starts.items()), "the actor, its child and its orphan are left"
        held = {p["pid"]: p for p in r["detached_processes"]}
        assert set(held) == {orphan}, r["detached_processes"]
        assert held[orphan]["why"] == f"may be detached actor {name}'s: Ray keeps it by design", held
        assert held[orphan]["end_with"] == f"kill {orphan}" and "sleep 9352" in held[orphan]["cmd"], held
        assert orphan not in {p["pid"] for p in r["processes"]}, "never signalled"
        from runward.views import rayview
        assert f"pid {orphan} (sleep 9352), by the job's RAY_JOB_ID only" in rayview.stop(r), rayview.stop(r)
    finally:
        code = f"import ray; ray.init(address={tb['gcs']!r}); ray.kill(ray.get_actor({name!r}, namespace='rwtest'))"
        subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code], timeout=120,
                       capture_output=True, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
        for p in (child, orphan):
            if alive(p, starts[p]):
                os.kill(p, signal.SIGKILL)
