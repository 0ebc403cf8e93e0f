"""A first status of a big log judges the stall in a forked process while it scans the log
(agent/ops/status.py, _stall_beside): the judgement is the one this process makes, its
stall.json written as it writes it, a held lock said as it says it, and a process that
gives no answer has the stall judged here."""

from __future__ import annotations

import json
import os
import time

import pytest

from runward.agent.core.sidelock import side_lock
from runward.agent.core.store import Home, RunStore
from runward.agent.logmetrics import skim, skimfork
from runward.agent.ops import status as ops_status



def _run(tmp_path, name, t=None):
    """A running attempt's store and record, its log 8 ranks' rank-prefixed step lines
    written at T (the log's mtime: when the stall read says they were written; a moment ago
    by default: no stall yet, the same times for every judgement)."""
    t = float(int(time.time()) - 5) if t is None else t
    home = Home(str(tmp_path / name / "home"))
    store = RunStore(home, name)
    os.makedirs(store.dir, exist_ok=True)
    log = tmp_path / name / "train.log"
    log.write_text("".join(f"[rank{r}]: step {s} | loss 2.{s % 10} | tok/s 14,512\n"
                           for s in range(400) for r in range(8) if not (r == 5 and s > 300)))
    os.utime(log, (t, t))
    return store, {"attempt": 1, "log": str(log), "started_at": t - 60, "log_offset": 0}


@pytest.fixture
def forking(monkeypatch):
    """The forked way taken for any log (a log this small is judged here otherwise), on two
    cores, whatever threads the suite's process runs."""
    monkeypatch.setattr(skim, "FORK_MIN", 0)
    monkeypatch.setattr(skim, "cores", lambda: 2)
    monkeypatch.setattr(skimfork, "threaded", lambda: False)


def test_the_forked_judgement_is_this_processs(tmp_path, forking):
    t = float(int(time.time()) - 5)
    store, att = _run(tmp_path, "a", t)
    kid = ops_status._stall_beside(store, att)
    assert kid is not None
    forked = ops_status._stall_collect(kid)
    here = ops_status._judge_stall(*_run(tmp_path, "b", t))
    assert forked[0] == here[0] == "ok", (forked, here)
    assert json.dumps(forked[1], sort_keys=True) == json.dumps(here[1], sort_keys=True)
    assert forked[1]["ranks"]["rank 5"]["step"] == 300 and forked[1]["step"] == 399
    assert os.path.exists(os.path.join(store.dir, "stall.json"))  # its state kept, as here


def test_a_held_stall_lock_is_said_by_the_forked_judgement(tmp_path, forking, monkeypatch):
    monkeypatch.setattr(ops_status, "SIDE_WAIT_S", 0.3)
    store, att = _run(tmp_path, "a")
    with side_lock(store, "stall"):
        kid = ops_status._stall_beside(store, att)
        judged = ops_status._stall_collect(kid)
    assert judged[0] == "locked" and judged[2]["pid"] == os.getpid(), judged
    out = {"health": {"alerts": []}}
    ops_status._stall(out, store, att, judged)
    assert out["stall"]["locked_by"]["pid"] == os.getpid() and "locked by pid" in out["stall"]["error"]


def test_a_process_without_an_answer_has_the_stall_judged_here(tmp_path):
    store, att = _run(tmp_path, "a")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os._exit(1)  # dies with nothing written
    os.close(w)
    assert ops_status._stall_collect((pid, r)) is None
    out = {"health": {"alerts": []}}
    ops_status._stall(out, store, att, None)
    assert out["stall"]["step"] == 399 and "error" not in out["stall"]


def test_a_read_that_is_not_a_big_first_one_is_judged_here(tmp_path, forking, monkeypatch):
    store, att = _run(tmp_path, "a")
    with open(os.path.join(store.dir, "health.json"), "w") as f:
        f.write("{}")  # read before: the scan goes on from where it stopped
    assert ops_status._stall_beside(store, att) is None
    os.unlink(os.path.join(store.dir, "health.json"))
    monkeypatch.setattr(skim, "FORK_MIN", os.path.getsize(att["log"]) + 1)
    assert ops_status._stall_beside(store, att) is None
    monkeypatch.setattr(skim, "FORK_MIN", 0)
    monkeypatch.setattr(skim, "cores", lambda: 1)
    assert ops_status._stall_beside(store, att) is None
    monkeypatch.setattr(skim, "cores", lambda: 2)
    monkeypatch.setattr(skimfork, "threaded", lambda: True)
    assert ops_status._stall_beside(store, att) is None
