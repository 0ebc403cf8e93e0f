"""What an exited job leaves alive: its session and process group stay part of the run
("stray" in status), a start is refused for them as for a live job, --replace and stop end them. Real
processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import alive, gate, read_stat, wait_for
from helpers_membership import kill_all, procs_with, record, stat_fields

def leaves_a_child(cli) -> str:
    """A job that leaves a sleep behind and exits once the test touches cli.cwd/go (past the
    settle period, however loaded the machine)."""
    return "sleep 300 & " + gate(cli.cwd / "go") + "; exit 0"


def _stray(cli, name: str) -> dict:
    return wait_for(lambda: (lambda s: s if s["state"] == "stray" else None)(cli.status(name)),
                    what=f"{name} to be stray")


def test_an_exited_job_with_processes_alive_is_stray_until_stopped(cli):
    rc, doc = cli.json("start", "left", "--settle", "0.2", "--sh", leaves_a_child(cli))
    assert rc == 0, doc
    (cli.cwd / "go").touch()
    st = _stray(cli, "left")
    assert st["exit"]["code"] == 0 and len(st["stray_processes"]) == 1, st
    assert st["note"] == "the job exited; 1 of its processes are still alive: stop ends them"
    child = st["stray_processes"][0]
    human = cli.run("status", "left")
    assert human.returncode == 0 and "left             stray" in human.stdout, human.stdout
    assert "1 of its processes are still alive" in human.stdout and str(child) in human.stdout
    # a stray attempt refuses a start as a live job does (a new attempt's member search would
    # not see an old attempt's cgroup or adopted orphans: hostile review F1), touching nothing
    rc, doc = cli.json("start", "left", "--settle", "0.2", "--", "sleep", "301")
    assert rc == 1 and str(child) in doc["error"]["message"] and "--replace" in doc["error"]["hint"], doc
    assert alive(child) and cli.status("left")["attempt"] == 1
    rc, doc = cli.json("stop", "left", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert child in [f["pid"] for f in doc["result"]["processes"]]
    assert not alive(child)
    assert cli.status("left")["state"] == "exited"


def test_replace_ends_what_an_exited_job_left_alive(cli):
    rc, doc = cli.json("start", "rep", "--settle", "0.2", "--sh", leaves_a_child(cli))
    assert rc == 0, doc
    (cli.cwd / "go").touch()
    child = _stray(cli, "rep")["stray_processes"][0]
    rc, doc = cli.json("start", "rep", "--settle", "0.2", "--replace", "--grace", "5", "--", "sleep", "302")
    assert rc == 0, doc
    rep = doc["result"]["replaced"]
    assert rep and rep["verified_dead"] and [f["pid"] for f in rep["processes"]] == [child], rep
    assert not alive(child)
    cli.json("stop", "rep", "--grace", "2")


def test_the_job_session_after_its_leader_died_is_guarded_by_boot_and_start_time():
    """runs.job_session on a real session whose leader was killed: its members are the
    job's on this boot; a record of another boot, or a job that started after them, claims
    none (their session number could be another job's)."""
    from runward.agent.core import procfs
    from runward.agent.proc import runs
    leader = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    try:
        wait_for(lambda: len([p for p in procfs.scan().values() if p.sid == leader.pid]) == 3,
                 what="the leader and its two sleeps")
        start = read_stat(leader.pid)[1]
        leader.send_signal(signal.SIGKILL)
        leader.wait()
        procs = procfs.scan()
        kids = sorted(p.pid for p in procs.values() if p.sid == leader.pid)
        assert len(kids) == 2
        att = {"job": {"pid": leader.pid, "start": start}, "boot_id": procfs.boot_id()}
        assert sorted(runs.job_session(att, procs)) == kids
        assert runs.job_session(dict(att, boot_id="another-boot"), procs) == []
        later = {"pid": leader.pid, "start": max(procs[k].start for k in kids) + 1}
        assert runs.job_session(dict(att, job=later), procs) == []
        # the job's recorded end before they started: once the number was free, a session
        # of that number is another program's (pid_max wraps within a long test run here)
        ended = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + start / os.sysconf("SC_CLK_TCK") - 5
        assert runs.job_session(dict(att, exit={"at": ended}), procs) == []
        assert sorted(runs.job_session(dict(att, exit={"at": time.time()}), procs)) == kids
    finally:
        for p in procfs.scan().values():
            if p.sid == leader.pid:
                os.kill(p.pid, signal.SIGKILL)


REUSE = r'''
import os, sys
target, token = int(sys.argv[1]), sys.argv[2]
for _ in range(3000):
    r, w = os.pipe()
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(target - 1))
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if os.getpid() != target:
            os._exit(1)
        os.setsid()  # session and group TARGET, as the lost job's were
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", token])
        os._exit(0)  # the leader goes; its sleep stays in session TARGET
    os.close(w)
    hit = os.read(r, 1) == b"" and os.waitpid(pid, 0)[1] == 0
    os.close(r)
    if hit:
        sys.exit(0)
sys.exit(3)
'''


def test_a_lost_runs_reused_session_number_is_another_programs_and_never_stopped(cli):
    """A lost attempt (shim and job SIGKILLed: no exit record) keeps claiming session/group
    X (its job's pid) with no end bound: once X is free, any program that gets pid X and
    makes a session leaves processes that runward calls the run's. Before: status listed an
    unrelated `sleep` as the run's stray, `start` was refused over it, and `stop` SIGTERMed
    it ('1 process(es) dead, verified'): design rule 2 (pids are reused) and rule 3."""
    if os.geteuid() != 0 or not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("needs root to pick the next pid (ns_last_pid) and make the reuse real")
    rc, doc = cli.json("start", "lostreuse", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0, doc
    att = record(cli.home, "lostreuse")
    shim, job = att["shim"], att["job"]
    token = f"8{os.getpid() % 100000:05d}6"
    try:
        for who in (shim, job):
            os.kill(who["pid"], signal.SIGKILL)
            wait_for(lambda: not alive(who["pid"], who["start"]), what="the run's process gone")
        assert cli.status("lostreuse")["state"] == "lost"
        # an unrelated program (no marker, no cgroup of the run, not adopted) in session X
        p = subprocess.run([sys.executable, "-c", REUSE, str(job["pid"]), token], env={"PATH": "/usr/bin:/bin"})
        if p.returncode != 0:
            pytest.skip("pid %d was not free to take again (a busy machine)" % job["pid"])
        other = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode()), what="the unrelated sleep")[0]
        assert int(stat_fields(other)[3]) == job["pid"] and b"RUNWARD_RUN" not in open(
            f"/proc/{other}/environ", "rb").read()
        st = cli.status("lostreuse")
        assert other not in (st.get("stray_processes") or []), "an unrelated process called the run's: %s" % st
        rc, doc = cli.json("stop", "lostreuse", "--grace", "2")
        assert alive(other), "stop signalled an unrelated process: %s" % doc
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode()))
