"""`runward restart`'s own GPU gate (issue 29, docs/supervision.md "restart: blocked"), with
real processes and the nvidia-smi stand-in: the stop verifies the old attempt dead, but
another process still holds the run's GPU; the new attempt is then blocked (exit 5, the
holder named), waits on the target, and starts by itself once the GPU is released. A stop
meanwhile cancels it, and nothing starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import fakegpu
from conftest import EXAMPLE, alive, marked, wait_for
from supervised import end_shims, rec, records, shim_gone
from helpers_progress import FAST, _events

PY = sys.executable


@pytest.fixture
def g(cli, tmp_path):
    cli.state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    cli.env = fakegpu.env_with_standin(cli.state, cli.env)
    yield cli
    end_shims(cli.home)


@pytest.fixture
def holder(g):
    """Another process that holds 2000 MiB on GPU 1 (a leaked worker, another user's job)."""
    p = subprocess.Popen(["sleep", "300"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _started(c, name: str, gpus: str = "1", *extra: str):
    rc, doc = c.json("start", name, "--settle", "0.3", "--cwd", str(c.cwd), "--gpus", gpus, *FAST, *extra,
                     "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    return doc["result"]


def test_restart_blocked_on_a_held_gpu_names_the_holder_then_starts_by_itself(g, holder, tmp_path):
    got = tmp_path / "events.jsonl"
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')\n")
    first = _started(g, "rg", "1", "--notify", f"{PY} {recorder} {got}")
    fakegpu.attach(g.state, 1, holder.pid, 2000)
    rc, doc = g.json("restart", "rg", "--gpu-release-timeout", "0.5")
    assert rc == 5, doc
    msg = doc["error"]["message"]
    assert "rg: blocked: GPU 1" in msg and "2,000 MiB" in msg and str(holder.pid) in msg, msg
    assert "the run starts by itself when released; `runward stop rg` cancels" in msg, msg
    res = doc["result"]
    assert res["state"] == "blocked" and res["attempt"] == 2, res
    assert [(h["pid"], h["used_mib"], h["gpu"]) for h in res["blocked"]["holders"]] == [(holder.pid, 2000, 1)], res
    assert "sleep 300" in res["blocked"]["holders"][0]["cmd"], res["blocked"]
    assert not alive(first["pid"]), "the old attempt outlived the restart's stop"
    st = g.status("rg")
    assert st["state"] == "blocked" and st["attempt"] == 2 and "pid" not in st, st
    text = g.run("status", "rg").stdout
    assert "blocked: this attempt starts by itself once the GPUs are released: GPU 1" in text, text
    assert not rec(g.home, "rg", 2).get("job"), "the new attempt started while the GPU was held"
    ev = wait_for(lambda: [e for e in _events(got) if e["event"] == "blocked"], what="the blocked notification")[0]
    assert ev["attempt"] == 2 and ev["holders"][0]["pid"] == holder.pid, ev
    holder.kill()
    holder.wait()
    freed = time.time()
    st = wait_for(lambda: (lambda s: s if s["state"] == "running" else None)(g.status("rg")), timeout=30,
                  what="the blocked attempt to start by itself")
    a2 = rec(g.home, "rg", 2)
    assert st["attempt"] == 2 and alive(st["pid"]) and a2["started_at"] >= freed, (st, a2)
    assert a2["blocked"]["released_at"] >= freed and "error" not in a2, a2["blocked"]
    assert g.json("stop", "rg")[0] == 0


def test_stop_of_a_blocked_restart_cancels_it_and_nothing_starts(g, holder):
    _started(g, "rc", "0")
    fakegpu.attach(g.state, 0, holder.pid, 1500)
    rc, doc = g.json("restart", "rc", "--gpu-release-timeout", "0.3")
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    a2 = rec(g.home, "rc", 2)
    t0 = time.monotonic()
    rc, doc = g.json("stop", "rc")
    assert rc == 0 and doc["result"]["restart_cancelled"] and doc["result"]["verified_dead"], doc
    assert time.monotonic() - t0 < 10, "the stop waited for the GPU it never used"
    assert shim_gone(g.home, "rc") and not alive(a2["shim"]["pid"]), "the waiter outlived the stop"
    holder.kill()
    holder.wait()  # released now: nothing may start any more
    st = g.status("rc")
    assert st["state"] == "failed" and "cancelled" in st["error"], st
    assert len(records(g.home, "rc")) == 2 and not rec(g.home, "rc", 2).get("job")


def test_restart_with_the_gpus_free_starts_at_once(g):
    _started(g, "rf", "1")
    rc, doc = g.json("restart", "rf", "--gpu-release-timeout", "0.5")
    assert rc == 0 and doc["result"]["attempt"] == 2 and alive(doc["result"]["pid"]), doc
    assert "blocked" not in rec(g.home, "rf", 2)
    assert g.json("stop", "rf")[0] == 0


def test_restart_waits_the_runs_own_gpu_release_timeout_not_60s(g, holder):
    """A run started with --gpu-release-timeout 0.5: `restart` without the flag is blocked after
    the run's own timeout (the stop's wait said as 0.5 s), not after the 60 s default."""
    _started(g, "rt", "1", "--restart", "on-failure", "--gpu-release-timeout", "0.5s")
    fakegpu.attach(g.state, 1, holder.pid, 2000)
    t0 = time.monotonic()
    rc, doc = g.json("restart", "rt", timeout=90)
    took = time.monotonic() - t0
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    assert "after 0.5s" in doc["error"]["message"], doc["error"]["message"]
    assert took < 30, f"restart took {took:.1f}s: the 60 s default, not the run's 0.5 s"
    assert g.json("stop", "rt")[0] == 0


def test_stop_of_a_blocked_restart_whose_shim_does_not_end_is_not_verified(g, holder):
    """The waiting shim frozen (SIGSTOP): the stop cannot see it end within the agent's 10 s
    (gatewait.CANCEL_WAIT_S), so it must not say exit 0; once thawed it reads the mark and ends."""
    import signal
    import os
    _started(g, "rf", "0")
    fakegpu.attach(g.state, 0, holder.pid, 1500)
    rc, doc = g.json("restart", "rf", "--gpu-release-timeout", "0.3")
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    shim = rec(g.home, "rf", 2)["shim"]["pid"]
    os.kill(shim, signal.SIGSTOP)
    try:
        rc, doc = g.json("stop", "rf", timeout=60)
        assert alive(shim), "the frozen shim ended: the test froze nothing"
    finally:
        os.kill(shim, signal.SIGCONT)
    assert rc == 5 and doc["error"]["type"] == "NotVerified" and "did not end" in doc["error"]["message"], doc
    wait_for(lambda: not alive(shim), timeout=15, what="the thawed shim to read the stop mark and end")
    holder.kill()
    holder.wait()
    assert not rec(g.home, "rf", 2).get("job"), "the cancelled attempt started"


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


def test_a_stop_as_the_gpu_is_released_cancels_the_blocked_restart_at_once(g, holder):
    """The holder ends and `stop` comes at the same moment: the waiter's poll sees the GPU
    free and asks for the run lock, which the stop holds while it waits for that very waiter
    to end. Ground truth: nothing starts, the waiter ends; the stop must say cancelled, not
    wait out its 10 s and answer `blocked`."""
    import time
    _started(g, "rs", "1")
    fakegpu.attach(g.state, 1, holder.pid, 2000)
    rc, doc = g.json("restart", "rs", "--gpu-release-timeout", "0.3")
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    a2 = rec(g.home, "rs", 2)
    holder.kill()
    holder.wait()
    t0 = time.monotonic()
    rc, doc = g.json("stop", "rs")
    took = time.monotonic() - t0
    wait_for(lambda: not alive(a2["shim"]["pid"], a2["shim"]["start"]), what="the waiter to end")
    assert not _live_jobs("rs"), _live_jobs("rs")
    assert rc == 0 and doc["result"]["state"] == "failed" and doc["result"]["restart_cancelled"], (took, doc)
    assert took < 5, f"the stop took {took:.1f}s"


def test_rm_of_a_blocked_restart_says_blocked_as_status_does(g, holder):
    """rm of a run whose restart waits for its GPUs is refused (its waiter would start the job
    later: right), but it said `run rb is starting (attempt 2, pid None)` while status says
    blocked and no job was ever forked."""
    _started(g, "rb", "1")
    fakegpu.attach(g.state, 1, holder.pid, 2000)
    rc, doc = g.json("restart", "rb", "--gpu-release-timeout", "0.3")
    assert rc == 5 and g.status("rb")["state"] == "blocked", doc
    rc, doc = g.json("rm", "rb")
    assert rc == 1 and doc["error"]["type"] == "RunAlive", doc
    assert "is blocked" in doc["error"]["message"] and "starting" not in doc["error"]["message"], doc["error"]
    assert (g.home / "runs" / "rb").is_dir() and not _live_jobs("rb")
    assert g.json("stop", "rb")[0] == 0
