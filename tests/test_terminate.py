"""terminate.py on real process trees: the pidfd fallback when descriptors run out, and one
stop signal per process. Each case runs the agent's code in a subprocess of its own, so a
lowered RLIMIT_NOFILE binds only that stop."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, alive

# A tree of N sleeps in a session of its own; the watcher then lowers its own descriptor
# limit to a few above what it holds, so pidfd_open fails with EMFILE part way through.
LOW_FD_STOP = r"""
import json, os, resource, signal, subprocess, sys, time
from runward.agent.core import procfs
from runward.agent.proc import terminate
n = int(sys.argv[1])
tree = subprocess.Popen(["bash", "-c", "for i in $(seq %d); do sleep 300 & done; wait" % n],
                        start_new_session=True)

def session():
    return {pid: p for pid, p in procfs.scan().items() if p.sid == tree.pid and not p.dead}

deadline = time.monotonic() + 20
while len(session()) < n + 1 and time.monotonic() < deadline:
    time.sleep(0.02)
members = session()
idents = {pid: p.start for pid, p in members.items()}
held = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (held + 12, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
probe = terminate.PidWatch()
added = sum(probe.add(p) for p in members.values())
shape = {"added": added, "pidfds": len(probe.fds), "polled": len(probe.polled), "short": probe.fds_short}
probe.close()
fates = terminate.terminate(members, procfs.scan(), signal.SIGTERM, 10.0, find_more=session, group=tree.pid)
tree.wait()
print(json.dumps({"members": idents, "shape": shape, "fates": fates}))
"""


def _run(code: str, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_out_of_descriptors_the_rest_are_watched_through_proc_and_seen_dead():
    """pidfd_open's EMFILE is not "gone": those processes are signalled, watched by (pid,
    start time) and reported dead only once /proc shows them gone."""
    n = 30
    doc = _run(LOW_FD_STOP, str(n))
    members = {int(pid): start for pid, start in doc["members"].items()}
    assert len(members) == n + 1, doc["members"]
    shape = doc["shape"]
    assert shape["added"] == n + 1 and shape["short"], shape
    assert shape["polled"] >= n // 2 and shape["pidfds"] >= 1, shape  # both ways, interleaved
    assert not [pid for pid, start in members.items() if alive(pid, start)]
    fates = {f["pid"]: f for f in doc["fates"]}
    assert set(fates) == set(members)
    for f in fates.values():
        assert f["fate"] == "exited_after_SIGTERM" and f["signals"] == ["SIGTERM"], f


# A job whose TERM handler forks an heir and exits; the heir needs 1.5 s to end on its own TERM.
# The stopper is made slow right after each signal it sends (as when the job it woke takes its
# CPU): the heir is forked while the stop is still busy with its own signal.
SLOW_STOPPER = r"""
import json, os, signal, subprocess, sys, time
from runward.agent.core import procfs
from runward.agent.proc import terminate
HEIR = '''
import os, signal, sys, time
def on_term(*_):
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), os._exit(0)))
        return
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
'''
job = subprocess.Popen([sys.executable, "-c", HEIR], stdout=subprocess.PIPE, start_new_session=True)
assert job.stdout.readline().strip() == b"ready"

def slowly(send):
    def sent(*a):
        r = send(*a)
        time.sleep(0.3)
        return r
    return sent

os.killpg, os.kill = slowly(os.killpg), slowly(os.kill)
if hasattr(terminate.signal, "pidfd_send_signal"):  # terminate's signal module is _signal
    terminate.signal.pidfd_send_signal = slowly(terminate.signal.pidfd_send_signal)

def session():
    return {pid: p for pid, p in procfs.scan().items() if p.sid == job.pid and not p.dead}

members = session()
fates = terminate.terminate(members, procfs.scan(), signal.SIGTERM, 6.0, find_more=session, group=job.pid)
job.wait()
print(json.dumps({"fates": fates, "left": list(session())}))
"""


def test_an_heir_forked_while_the_stopper_is_slow_after_its_signal_gets_one_term_of_its_own():
    """Whatever the stopper is doing when a TERM handler forks a child, that child's record
    says what it was sent, and it gets the stop signal: once, from the stop, then the grace."""
    doc = _run(SLOW_STOPPER)
    assert not doc["left"], doc
    fates = doc["fates"]
    assert len(fates) == 2, fates
    for f in fates:
        assert f["fate"] == "exited_after_SIGTERM" and f["signals"] == ["SIGTERM"], fates
    heir = max(fates, key=lambda f: f["pid"])
    assert 1.5 <= heir["exited_after"] < 6.0, fates


def test_a_marker_behind_a_large_environment_is_found():
    """/proc/PID/environ is read to its end: a process whose run marker sits behind 300 KB
    of other variables (several reads' worth) is still found as the run's."""
    sys.path.insert(0, str(ROOT / "src"))
    from runward.agent.core import procfs
    env = {f"FILLER_{i:04d}": "x" * 1000 for i in range(300)}
    env.update(PATH="/usr/bin:/bin", RUNWARD_RUN="bigenv.1", RUNWARD_HOME_ID="h-big")
    p = subprocess.Popen(["sleep", "30"], env=env)
    try:
        procs = procfs.scan()
        assert len(procfs.leaf_bytes(p.pid, "environ")) > 300_000
        assert (p.pid, "h-big") in procs.markers().get("bigenv", []), procs.markers().get("bigenv")
    finally:
        p.kill()
        p.wait()
