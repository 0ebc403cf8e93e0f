"""What is a live member of a run (issue 25, items 3 and 8), with real processes and /proc as
the ground truth:

- a lost run (its shim and its job killed) whose children live is searched like any other:
  status lists them, rm and prune refuse to remove its records, stop ends them;
- an escapee that clears its environment and leaves the job's session (`env -i setsid sh -c
  "(sleep N &)"`) is reparented to the shim, a child subreaper: where runward has no cgroup
  (an ordinary user here, a podman container behind ssh) that adoption is all that finds it,
  and status counts it, stop ends it before it says verified; as root here, with a cgroup,
  the same run keeps working."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, wait_for
from helpers_membership import kill_all, ordinary, procs_with, record, stat_fields  # noqa: F401  (ordinary: fixture)


# --- a lost run's live children keep it ----------------------------------------------------

def test_a_lost_run_whose_children_live_is_listed_and_never_removed(cli):
    token = f"9{os.getpid() % 100000:05d}1"
    rc, doc = cli.json("start", "lostkids", "--settle", "0.2", "--sh", f"sleep {token} & exec sleep 600")
    assert rc == 0, doc
    try:
        child = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode()), what="the job's child")[0]
        att = record(cli.home, "lostkids")
        shim, job = att["shim"], att["job"]
        os.kill(shim["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
        os.kill(job["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(job["pid"], job["start"]), what="the job gone")
        assert alive(child)
        st = cli.status("lostkids")
        assert st["state"] == "lost", st
        assert st.get("stray_processes") == [child], st
        assert "1 of its processes are still alive" in st["note"], st
        human = cli.run("status", "lostkids").stdout
        assert "lostkids         lost" in human and str(child) in human, human
        rc, doc = cli.json("rm", "lostkids")
        assert rc == 1 and doc["error"]["type"] == "RunAlive" and str(child) in doc["error"]["message"], doc
        assert (cli.home / "runs" / "lostkids" / "attempts" / "1.json").exists()
        rc, doc = cli.json("prune", "--older-than", "0s")
        assert rc == 0 and [k["name"] for k in doc["result"]["kept"]] == ["lostkids"], doc
        assert (cli.home / "runs" / "lostkids").is_dir()
        rc, doc = cli.json("stop", "lostkids", "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"] and not doc["result"]["already_stopped"], doc
        assert not alive(child)
        rc, doc = cli.json("rm", "lostkids")
        assert rc == 0, doc
    finally:  # whatever failed: nothing of the test outlives it
        kill_all(procs_with(f"sleep\0{token}\0".encode()))


# --- an escapee where runward has no cgroup: the shim adopted it ----------------------------

def escape_line(token: str) -> str:
    """A job whose child clears its environment, takes a session of its own and double-forks
    `sleep TOKEN` (then gone from the job's tree, its session and its marker), then execs."""
    return f'env -i setsid sh -c "(sleep {token} &); exit 0"; exec sleep 600'


def check_escapee(pid: int, job: int, shim: int) -> None:
    """The escapee is what the test means: no marker, not in the job's session or group,
    the shim's child by adoption."""
    assert b"RUNWARD_RUN=" not in Path(f"/proc/{pid}/environ").read_bytes()
    f = stat_fields(pid)
    assert int(f[1]) == shim and int(f[2]) != job and int(f[3]) != job, f


def test_the_shim_adopted_escapee_is_a_member_as_root_with_a_cgroup(cli):
    """The same escapee as root here, where the run has a cgroup: counted and ended as before."""
    token = f"7{os.getpid() % 100000:05d}2"
    rc, doc = cli.json("start", "escroot", "--settle", "0.2", "--sh", escape_line(token))
    assert rc == 0, doc
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode()), what="the escapee")
        att = record(cli.home, "escroot")
        check_escapee(esc[0], att["job"]["pid"], att["shim"]["pid"])
        st = cli.status("escroot")
        assert st["state"] == "running" and esc[0] in st["tree"]["pids"] and st["tree"]["processes"] == 2, st
        rc, doc = cli.json("stop", "escroot", "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert esc[0] in [f["pid"] for f in doc["result"]["processes"]], doc
        assert not procs_with(f"sleep\0{token}\0".encode())
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode()))


def test_an_escapee_without_a_cgroup_is_counted_and_stopped_as_an_ordinary_user(ordinary):
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}9"
    p = run("start", "escuser", "--settle", "0.2", "--json", "--sh", escape_line(token))
    assert p.returncode == 0, p.stdout + p.stderr
    assert not record(run.home, "escuser").get("cgroups"), "an ordinary user's run has no cgroup here"
    esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")
    att = record(run.home, "escuser")
    check_escapee(esc[0], att["job"]["pid"], att["shim"]["pid"])
    st = json.loads(run("status", "escuser", "--json").stdout)["result"]["runs"][0]
    assert st["state"] == "running" and esc[0] in st["tree"]["pids"] and st["tree"]["processes"] == 2, st
    assert "2 procs" in run("status", "escuser").stdout
    p = run("stop", "escuser", "--grace", "5", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["result"]["verified_dead"], doc
    assert esc[0] in [f["pid"] for f in doc["result"]["processes"]], doc
    assert not procs_with(f"sleep\0{token}\0".encode(), run.uid), "the escapee outlived a verified stop"


def test_an_escapee_left_by_a_job_that_ended_by_itself_keeps_the_run_stray_until_stopped(ordinary):
    """Without a cgroup: the job exits by itself and its adopted escapee lives on. The shim
    stays its parent (before: the shim exited, the escapee went to pid 1, status said exited
    and stop 'already stopped' while it ran)."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}5"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exit 3'
    p = run("start", "escend", "--settle", "0", "--json", "--sh", line)
    esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")
    att = wait_for(lambda: record(run.home, "escend").get("exit") and record(run.home, "escend"),
                   what="the job's exit recorded")
    assert att["exit"]["code"] == 3 and not att.get("cgroups"), att
    assert int(stat_fields(esc[0])[1]) == att["shim"]["pid"], "the shim must stay the escapee's parent"
    st = json.loads(run("status", "escend", "--json").stdout)["result"]["runs"][0]
    listed = [x if isinstance(x, int) else x.get("pid") for x in st.get("stray_processes") or []]
    assert st["state"] == "stray" and esc[0] in listed + (st.get("tree") or {}).get("pids", []), st
    p = run("rm", "escend", "--json")
    assert p.returncode == 1 and str(esc[0]) in p.stdout, p.stdout
    # a new attempt would not see attempt 1's adopted orphan (hostile review F1): refused
    p = run("start", "escend", "--settle", "0.2", "--json", "--", "sleep", "600")
    assert p.returncode == 1 and str(esc[0]) in p.stdout and "--replace" in p.stdout, p.stdout
    assert not (run.home / "runs" / "escend" / "attempts" / "2.json").exists()
    p = run("stop", "escend", "--grace", "5", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["result"]["verified_dead"], doc
    assert not procs_with(f"sleep\0{token}\0".encode(), run.uid), "the escapee outlived a verified stop"
    wait_for(lambda: not alive(att["shim"]["pid"], att["shim"]["start"]), what="the shim to end with its last orphan")
    st = json.loads(run("status", "escend", "--json").stdout)["result"]["runs"][0]
    assert st["state"] == "exited" and st["exit"]["code"] == 3, st


def test_a_killed_shim_without_a_cgroup_is_a_blind_spot_said_in_status_and_stop(ordinary):
    """No cgroup, the shim SIGKILLed from outside: an adopted escapee goes to pid 1 with
    nothing to tie it to the run. Not findable; so status and stop say what they cannot see
    instead of a bare 'verified' (design rule 11)."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}3"
    p = run("start", "blind", "--settle", "0.2", "--json", "--sh", escape_line(token))
    assert p.returncode == 0, p.stdout + p.stderr
    esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")
    att = record(run.home, "blind")
    try:
        os.kill(att["shim"]["pid"], signal.SIGKILL)
        wait_for(lambda: int(stat_fields(esc[0])[1]) != att["shim"]["pid"], what="the escapee reparented away")
        out = run("status", "blind", "--json").stdout
        st = (json.loads(out)["result"] or {"runs": [out]})["runs"][0]
        assert st["state"] == "orphaned" and "cannot be found" in st.get("blind_spot", ""), st
        p = run("stop", "blind", "--grace", "2", "--json")
        doc = json.loads(p.stdout)
        assert p.returncode == 0 and "cannot be found" in doc["result"].get("blind_spot", ""), doc
        assert "note: this run has no cgroup" in run("status", "blind").stdout + run("stop", "blind").stdout
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))


POD = "ssh://rw1/podman:rwpod"


@pytest.fixture
def pod(tmp_path):
    tb = testbed.require("podman")
    testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]

    def ps():
        """(pid, ppid, sid, args) of every process in the container, read there."""
        p = subprocess.run(["podman", "exec", tb["podman"], "ps", "-eo", "pid=,ppid=,sid=,args="], env=c.env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        rows = [ln.split(None, 3) for ln in p.stdout.splitlines() if ln.strip()]
        return [(int(a), int(b), int(s), rest) for a, b, s, rest in rows]
    c.ps = ps
    c.pod = tb["podman"]
    yield c


def test_an_escapee_in_a_container_behind_ssh_is_counted_and_stopped(pod):
    name = f"escpod-{uuid.uuid4().hex[:6]}"
    token = f"7{os.getpid() % 100000:05d}7"
    rc, doc = pod.json("doctor", "--on", POD)
    cg = doc["result"]["hops"][-1]["checks"]["cgroups"]
    assert rc == 0 and not cg["can_create"], "no cgroup there"
    # doctor says what "cgroups no" costs and what still finds an escapee
    assert cg["subreaper"] is True and "subreaper" in cg["without"] and "escapes" in cg["without"], cg
    human = pod.run("doctor", "--on", POD).stdout
    assert "cgroups no" in human and "without cgroups: " in human and "NO SUBREAPER" not in human, human
    rc, doc = pod.json("start", name, "--on", POD, "--settle", "0.2", "--sh", escape_line(token))
    assert rc == 0, doc
    job = doc["result"]["pid"]

    def escapee():
        return [r for r in pod.ps() if r[3] == f"sleep {token}"]
    try:
        esc = wait_for(escapee, what="the escapee in the container")[0]
        shim = [r for r in pod.ps() if r[0] == esc[1]][0]
        assert "runward-shim" in shim[3] and esc[2] != job, (esc, shim)  # adopted; left the session
        rc, doc = pod.json("status", name, "--on", POD)
        st = doc["result"]["runs"][0]
        assert rc == 0 and st["state"] == "running" and esc[0] in st["tree"]["pids"], st
        assert st["tree"]["processes"] == 2, st
        rc, doc = pod.json("stop", name, "--on", POD, "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert esc[0] in [f["pid"] for f in doc["result"]["processes"]], doc
        assert not escapee(), "sleep %s outlived a verified stop: %s" % (token, pod.ps())
    finally:
        for pid, *_ in escapee():
            subprocess.run(["podman", "exec", pod.pod, "kill", "-9", str(pid)], env=pod.env, capture_output=True)
        pod.json("stop", name, "--on", POD, "--grace", "1")
        pod.json("rm", name, "--on", POD, "--logs")


# --- the shim's own helpers are not the run's -----------------------------------------------

def test_a_notify_hook_still_running_is_not_a_member_of_the_next_attempt(cli, tmp_path):
    """The shim's children include its notify commands: they stay in its session (a group of
    their own), so the adoption rule never counts them nor a stop ends them."""
    gate, pids = tmp_path / "hooks-go", tmp_path / "hook-pids"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"cat >/dev/null; echo $$ >> {pids}; until [ -e {gate} ]; do sleep 0.05; done\n")
    (cli.cwd / "runward.toml").write_text(
        "[runs.hooked]\nsh = 'n=${RUNWARD_RUN##*.}; [ $n = 1 ] && exit 3; exec sleep 600'\n"
        f'restart = "on-failure"\nmax_restarts = 1\nbackoff = "0"\nnotify = ["sh {hook}"]\n')
    rc, doc = cli.json("start", "hooked", "--settle", "0")
    try:
        live_hooks = wait_for(lambda: (lambda ps: ps if len(ps) == 2 else None)(
            [int(x) for x in (pids.read_text().split() if pids.exists() else []) if alive(int(x))]),
            what=f"the exited and restarted hooks running (pids file: {pids.read_text() if pids.exists() else None!r})")
        st = wait_for(lambda: (lambda s: s if s["state"] == "running" and s["attempt"] == 2 else None)(
            cli.status("hooked")), what="attempt 2 running")
        assert st["tree"]["pids"] == [st["pid"]] and not set(live_hooks) & set(st["tree"]["pids"]), st
        gate.touch()
        wait_for(lambda: not any(alive(p) for p in live_hooks), what="the hooks ended")
        rc, doc = cli.json("stop", "hooked", "--grace", "5")
        assert rc == 0 and doc["result"]["verified_dead"], doc
    finally:
        gate.touch()
        for s in [r.get("shim") for r in (record(cli.home, "hooked", n) for n in (1, 2))]:
            if s and alive(s["pid"], s["start"]):
                os.kill(s["pid"], signal.SIGKILL)
