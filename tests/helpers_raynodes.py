"""What the Ray tests that add a node at 127.0.0.2 share (test_ray_workers, test_ray_ssh,
test_ray_nodes): the driver and spawner jobs, Ray's state API, the far node, the CLI through
the sshd in the cluster's namespace, and /proc readers. Ground truth from /proc and Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import alive, marked, read_stat, wait_for
from helpers_ray import ray_job


# the job: a driver that starts an actor (on the node with RESOURCE, if given), a task and,
# if given a NAME, a detached actor of that name; it prints its workers' pids, then waits
DRIVER = """\
import os, sys, time, ray
ray.init()
@ray.remote
class Holder:
    def pid(self): return os.getpid()
    def hold(self): time.sleep(900)
@ray.remote
def spin(): time.sleep(900)
name, res = sys.argv[1], sys.argv[2]
held = Holder.options(**({"num_cpus": 0, "resources": {res: 1}} if res != "-" else {})).remote()
kept = Holder.options(name=name, lifetime="detached").remote() if name != "-" else None
print("pids", ray.get(held.pid.remote()), kept and ray.get(kept.pid.remote()), flush=True)
held.hold.remote(); task = spin.remote()
time.sleep(900)
"""

def ray_state(tb: dict, kind: str, job_id: str | None = None) -> list:
    """Ray's state API (GET /api/v0/KIND, the job's rows), from inside the namespace."""
    url = tb["dashboard"] + f"/api/v0/{kind}?limit=10000&detail=1"
    if job_id:
        url += f"&filter_keys=job_id&filter_predicates=%3D&filter_values={job_id}"
    code = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    out = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code, url],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["data"]["result"]["result"]

@pytest.fixture
def far_node(tb):
    """A node at 127.0.0.2, with no CPUs and one `far_node`: its processes share this
    machine's /proc, but by its address it is another machine, out of the head's sight.
    Ended by pid after the test (`ray start --block` and every process under it)."""
    p = subprocess.Popen(["ip", "netns", "exec", tb["netns"], tb["ray"], "start", "--address", tb["gcs"],
                          "--node-ip-address=127.0.0.2", "--num-cpus=0", '--resources={"far_node": 1}',
                          "--object-store-memory=100000000", "--disable-usage-stats", "--block"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    try:
        node = wait_for(lambda: next((n["node_id"] for n in ray_state(tb, "nodes") if n["node_ip"] == "127.0.0.2"
                                      and n["state"] == "ALIVE"), None), timeout=90, what="the node at 127.0.0.2")
        yield node
    finally:
        tree = proc_tree(p.pid)
        p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(alive(q) for q in tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        for q in tree:
            if alive(q):
                os.kill(q, signal.SIGKILL)
        p.wait(timeout=10)


def proc_tree(root: int) -> list[int]:
    kids = {}
    for d in os.listdir("/proc"):
        st = d.isdigit() and read_stat(int(d))
        if st:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        q = todo.pop()
        out.append(q)
        todo += kids.get(q, [])
    return out

def environ(pid: int) -> dict:
    return dict(e.split("=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().decode().split("\0") if "=" in e)

def sleep_of(n: int):
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and open(f"/proc/{d}/cmdline", "rb").read() == b"sleep\x00%d\x00" % n:
                return int(d)
        except OSError:
            continue

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

def far_job(scli, tb, far_node, name):
    """A job through the ssh hop to the head whose actor Ray places on the node at 127.0.0.2:
    (the actor's pid and start time, the job's submission id)."""
    drv = scli.cwd / "driver.py"
    drv.write_text(DRIVER)
    rc, doc = scli.json("start", name, "--on", "head", "--settle", "1", "--ready", "^pids", "--ready-timeout", "120",
                        "--", sys.executable, str(drv), "-", "far_node")
    assert rc == 0, doc
    sid = doc["result"]["submission_id"]
    held = next(a for a in ray_state(tb, "actors", ray_job(tb, sid)["job_id"]) if a["state"] == "ALIVE")
    assert held["node_id"] == far_node, held
    return held["pid"], read_stat(held["pid"])[1], sid

# the job's actor on the node at 127.0.0.2 starts a process in a new session that leaves its
# tree (an orphan): only the job's RAY_JOB_ID ties it to the job
FAR_SPAWNER = """\
import os, subprocess, sys, time, ray
ray.init()
@ray.remote(num_cpus=0, resources={"far_node": 1})
class Far:
    def spawn(self, n):
        subprocess.Popen(["sh", "-c", "(sleep %s &)" % n], start_new_session=True).wait()
        return os.getpid()
f = Far.remote()
print("spawned", ray.get(f.spawn.remote(sys.argv[1])), flush=True)
time.sleep(900)
"""


def far_orphan_job(scli, tb, name, n):
    """A job through the ssh hop whose actor on 127.0.0.2 left an orphan `sleep N` there:
    (the orphan's pid, its start time, the job's id)."""
    drv = scli.cwd / "fardrv.py"
    drv.write_text(FAR_SPAWNER)
    rc, doc = scli.json("start", name, "--on", "head", "--settle", "1", "--env", "F1=1", "--ready", "^spawned",
                        "--ready-timeout", "120", "--", sys.executable, str(drv), str(n))
    assert rc == 0, doc
    job_id = ray_job(tb, doc["result"]["submission_id"])["job_id"]
    orphan = wait_for(lambda: sleep_of(n), timeout=30, what="the far actor's orphan")
    env = environ(orphan)
    assert env.get("RAY_JOB_ID") == job_id and "RUNWARD_RUN" not in env, env
    return orphan, read_stat(orphan)[1], job_id
