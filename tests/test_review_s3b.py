"""Hostile review of session 3's landings (issues 28, 29, 31), from the outside: ground truth
from /proc, the records and the nvidia-smi stand-in's state, never runward's own answers."""

from __future__ import annotations

import fakegpu
from conftest import alive, marked, wait_for
from test_restart_gate import _started, g, holder  # noqa: F401 (fixtures)
from test_supervise import rec


def _live_jobs(name):
    """Ground truth: the live processes carrying the run's marker, by attempt."""
    out = {}
    for pid, start in marked(name + ".").items():
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"RUNWARD_RUN="):
                out.setdefault(kv.split(b"=", 1)[1].decode(), []).append(pid)
    return out


def _held_mib(state, gpu):
    """Ground truth from the stand-in's state: MiB held on GPU by live processes."""
    st = fakegpu.read_state(state)
    return sum(p.get("mib", 0) for p in st["procs"] if p.get("gpu") == gpu and alive(p["pid"]))


def test_a_second_restart_while_blocked_does_not_start_on_the_held_gpu(g, holder):
    """The first restart is blocked on GPU 1 (held by another process). A second restart's
    stop cancels the blocked attempt, which never ran, and so checked no GPU: the third
    attempt started at once, exit 0, on a GPU still holding 2,000 MiB (an OOM at once on a
    real one). It must pass the gate as the first restart did: blocked, nothing forked."""
    _started(g, "r2", "1")
    fakegpu.attach(g.state, 1, holder.pid, 2000)
    rc, doc = g.json("restart", "r2", "--gpu-release-timeout", "0.3")
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    rc, doc = g.json("restart", "r2", "--gpu-release-timeout", "0.3")
    assert _held_mib(g.state, 1) == 2000, fakegpu.dump(g.state)
    jobs = _live_jobs("r2")
    assert not jobs, f"an attempt started while GPU 1 held 2,000 MiB: {jobs}, restart said rc={rc} {doc}"
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    assert not rec(g.home, "r2", 3).get("job"), rec(g.home, "r2", 3)
    holder.kill()
    holder.wait()
    st = wait_for(lambda: (lambda s: s if s["state"] == "running" else None)(g.status("r2")), timeout=30,
                  what="the blocked attempt to start by itself")
    assert list(_live_jobs("r2")) == [f"r2.{st['attempt']}"], _live_jobs("r2")
    assert g.json("stop", "r2")[0] == 0
