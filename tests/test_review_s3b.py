"""Hostile review of session 3's landings (issues 28, 29, 31), from the outside: ground truth
from /proc, the records and the nvidia-smi stand-in's state, never runward's own answers."""

from __future__ import annotations

import os
import signal

import pytest

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


MEGATRON = (" [2026-12-04 20:00:00] iteration {:>8d}/  500000 | consumed samples: {:>12d} | elapsed time per "
            "iteration (ms): 2000.0 | learning rate: 3.0E-04 | lm loss: 2.3E+00 |\n")


def test_a_step_printed_every_100_iterations_is_not_a_stall_between_two_prints(tmp_path):
    """Megatron's default --log-interval 100: one line per 100 iterations. At 2 s an
    iteration the log gains a line every 200 s, and the job is healthy throughout. The
    derived stall_after was 10 x the per-iteration time (20 s), floored at 120 s: a false
    `stall` 130 s after each print, before the next one is even due. A real log file, the
    agent's own store; time is the log's mtime, as the agent reads it."""
    from runward.agent import stall
    from runward.agent.store import Home, RunStore
    home = Home(str(tmp_path / "home"))
    store = RunStore(home, "mega")
    os.makedirs(store.dir, exist_ok=True)
    log = tmp_path / "train.log"
    t0 = 1_800_000_000.0
    att = {"attempt": 1, "log": str(log), "started_at": t0, "log_offset": 0}
    alerts = []
    with open(log, "a") as f:
        for k in range(1, 6):  # prints at t0+200, +400, ... each read when written
            f.write(MEGATRON.format(100 * k, 12800 * k))
            f.flush()
            os.utime(log, (t0 + 200 * k, t0 + 200 * k))
            res = stall.check(store, att, now=t0 + 200 * k, capture=False)
            alerts += res["alerts"]
            # halfway to the next print (100 s) and just before it (190 s): still healthy
            for dt in (100, 190):
                alerts += stall.check(store, att, now=t0 + 200 * k + dt, capture=False)["alerts"]
    assert not alerts, (f"a false stall on a healthy run printing every 200 s: stall_after "
                        f"{res['stall_after']} ({res['stall_after_from']}): {alerts[0]['detail']}")
    assert res["stall_after"] >= 1000, res  # >= 10 x the 200 s between its step lines
    # and a real stall is still found: no new line for 10 x the interval and more
    late = stall.check(store, att, now=t0 + 1000 + res["stall_after"] + 5, capture=False)
    assert [a["kind"] for a in late["alerts"]] == ["stall"], late


@pytest.mark.parametrize("script", ['trap "rm -f /tmp/lock" EXIT; pkill -f {p}', "time pkill -f {p}",
                                    'trap "echo bye" INT; true; pkill -f {p}'])
def test_lint_calls_a_bash_c_that_does_not_exec_its_pkill_an_error(cli, script):
    """bash 5.2 execs a -c string's last simple command, unless a trap is set (it must run it)
    or the command is timed (the shell must report the time): then bash stays, carries the
    pattern in its argv and pkill -f kills it. Checked here with real bash first; lint said only
    `self-kill-fragile` (a warning, exit 0) for these."""
    import shutil
    import subprocess
    import uuid
    if not shutil.which("bash"):
        pytest.skip("no bash here to check what it does")
    pat = "rv2" + uuid.uuid4().hex[:8]  # this test's own argv never carries it
    real = subprocess.run(["bash", "-c", script.format(p=pat)], capture_output=True, timeout=20)
    assert real.returncode == -signal.SIGTERM, f"bash was not killed by its own pkill here: {real}"
    rc, doc = cli.json("lint", "bash -c '%s'" % script.format(p="train.py").replace("'", "'\\''"))
    kinds = [(f["rule"], f["severity"]) for f in doc["result"]["findings"]]
    assert ("self-kill", "error") in kinds and rc != 0, (rc, kinds)


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


def test_a_block_buffered_log_is_not_a_stall_between_two_flushes(tmp_path):
    """print() to a file is block-buffered (8 KiB): at 2 s a step and ~80-byte lines the log
    gains 100 lines every 200 s. A watch reading every 10 s sees the step advance by 100 at
    each flush; 130 s after one the run was called stalled (stall_after 120 s derived from
    2 s a step), though the next flush was 70 s away and the job healthy."""
    from runward.agent import stall
    from runward.agent.store import Home, RunStore
    home = Home(str(tmp_path / "home"))
    store = RunStore(home, "buf")
    os.makedirs(store.dir, exist_ok=True)
    log = tmp_path / "train.log"
    t0 = 1_800_000_000.0
    att = {"attempt": 1, "log": str(log), "started_at": t0, "log_offset": 0}
    alerts, step = [], 0
    with open(log, "a") as f:
        for k in range(1, 6):
            f.write("".join(f"step {step + i} loss 2.{i:04d} tok/s 14500.0 lr 3.0e-04\n" for i in range(1, 101)))
            step += 100
            f.flush()
            os.utime(log, (t0 + 200 * k, t0 + 200 * k))
            for dt in range(0, 200, 10):  # a watch's reads
                alerts += stall.check(store, att, now=t0 + 200 * k + dt, capture=False)["alerts"]
    assert not alerts, alerts[0]["detail"]


def test_lint_calls_a_pkill_under_bash_c_eval_an_error(cli):
    """`bash -c 'eval pkill -f X'`: eval runs the words in the same shell, which stays (bash 5.2
    execs no command from an eval), so pkill -f kills it; lint said a warning, as for a lone
    pkill that bash execs."""
    import subprocess
    import uuid
    pat = "rv2" + uuid.uuid4().hex[:8]
    real = subprocess.run(["bash", "-c", f"eval pkill -f {pat}"], capture_output=True, timeout=20)
    assert real.returncode == -signal.SIGTERM, f"bash was not killed by its own pkill here: {real}"
    rc, doc = cli.json("lint", "bash -c 'eval pkill -f train.py'")
    kinds = [(f["rule"], f["severity"]) for f in doc["result"]["findings"]]
    assert ("self-kill", "error") in kinds and rc != 0, (rc, kinds)
