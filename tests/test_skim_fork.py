"""The skim's search over several processes (logmetrics/skimfork.py) answers what one process
does, field for field: the whole lm.scan answer (state, points, alerts, lines, units) of every
fixture log, of the status bench's log with events and NaN put in, and of random logs, with
chunks cut anywhere (the processes' tasks then begin mid-traceback, mid-burst, on a NaN line).
A process that gives no answer has the tasks it took searched by the caller."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runward.agent import logmetrics as lm
from runward.agent.logmetrics import skim as lm_skim
from runward.agent.logmetrics import skimfork

from helpers_skim import log as random_log

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parent.parent
RULES = {"drop_fraction": 0.5, "drop_median_only": True, "max_points": 2000, "skim": True}
NOW = 1796659999.0


@pytest.fixture(autouse=True)
def unthreaded(monkeypatch):
    """The suite's process may run threads other tests left (a watcher, a server), which turn
    the forked way off (skimfork.threaded): here the forked way's answer is what is tested."""
    monkeypatch.setattr(skimfork, "threaded", lambda: False)


def answer(path, chunk, budget, forked, monkeypatch, cores=4):
    """lm.scan of PATH as a first status reads it: chunks of CHUNK bytes, the newest BUDGET
    parsed line by line; FORKED: the search over CORES processes (and that way taken)."""
    monkeypatch.setattr(lm_skim, "CHUNK", chunk)
    monkeypatch.setattr(lm_skim, "FORK_MIN", 0 if forked else 1 << 62)
    monkeypatch.setattr(skimfork, "MIN_CHUNKS", 1)
    monkeypatch.setattr(lm_skim, "cores", lambda: cores)
    spreads = []
    real = skimfork.spread

    def spread(fd, chunks, n, found):
        spreads.append(n)
        return real(fd, chunks, n, found)

    monkeypatch.setattr(skimfork, "spread", spread)
    out = lm.scan(str(path), {}, dict(RULES, max_bytes=budget), NOW)
    return json.dumps(out, sort_keys=True, default=repr), spreads


def same(path, chunk, budget, monkeypatch, cores=4):
    """The forked answer equals one process's; returns how many processes searched."""
    one, spreads = answer(path, chunk, budget, False, monkeypatch)
    assert spreads == []
    many, spreads = answer(path, chunk, budget, True, monkeypatch, cores)
    assert many == one
    return spreads


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_fixture_log_forked_answers_as_one_process(name, monkeypatch):
    path = LOGS / name
    body = path.read_bytes()
    longest = max(len(x) for x in body.split(b"\n")) + 1  # a chunk this long holds a newline
    taken = 0
    for chunk in (97, 256, 1000, 4096, longest, longest + 13):
        for budget in (1, 64, len(body) // 3):
            spreads = same(path, chunk, budget, monkeypatch)
            taken += bool(spreads)
            assert all(n >= 2 for n in spreads)
    assert taken or len(body) < 4 * longest  # the forked way ran, where the log has 2 chunks


def test_the_bench_log_with_events_forked_answers_as_one_process(tmp_path, monkeypatch):
    """bench/status_first.py's rank-prefixed lines (the raw way) with NaN, a traceback, CUDA
    OOM bursts, NCCL and INFO lines (the folded way) put in at random lines."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import status_first
    finally:
        sys.path.remove(str(ROOT / "bench"))
    src = tmp_path / "bench.log"
    status_first.write_log(str(src), 1 << 20, 8)
    lines = src.read_bytes().split(b"\n")
    rng = random.Random(7)
    extra = [b"[rank3]: step 9 | loss nan | tok/s 14,000", b"[rank1]: step 9 | loss inf",
             b"Traceback (most recent call last):", b'  File "train.py", line 3, in <module>',
             b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
             b"[rank2]: NCCL WARN Call to ibv_reg_mr failed", b"INFO 05-01 12:00:00 informative",
             b"[rank0]: number of nan iterations:   2 |", b"Killed"]
    for _ in range(60):
        at = rng.randrange(len(lines))
        lines[at:at] = extra[rng.randrange(len(extra)):][:rng.randrange(1, 4)]
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(lines))
    for chunk in (4093, 16384, 65536 + 17):
        for cores in (2, 3, 8):
            assert same(path, chunk, 8192, monkeypatch, cores)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=random_log(), chunk=st.integers(64, 9000), budget=st.integers(1, 3000), cores=st.integers(2, 6))
def test_random_logs_forked_answer_as_one_process(tmp_path_factory, body, chunk, budget, cores):
    """Lines longer than CARRY_MAX, CRLF, invalid UTF-8, every event and NaN spelling: the
    same answer, whichever way (a long line leaves the forked way to run's loop)."""
    path = tmp_path_factory.mktemp("fork") / "train.log"
    path.write_bytes(body * 3 + b"step 1 | loss 2.0000\n")
    with pytest.MonkeyPatch.context() as mp:
        same(path, chunk, budget, mp, cores)


def test_a_process_that_dies_with_its_tasks_has_them_searched_here(tmp_path):
    """The queue's tasks a process took and never answered (it died) are searched by the
    caller: the answer is every chunk's, in order, as one process's."""
    body = b"".join(b"step %d | loss %s\n" % (i, b"nan" if i % 50 == 7 else b"2.5") for i in range(4000))
    path = tmp_path / "train.log"
    path.write_bytes(body)
    with open(path, "rb") as f:
        fd = f.fileno()
        chunks = [(i, 1000, 1000) for i in range(0, 40000, 1000)]
        runs = skimfork.tasks(chunks)
        q = skimfork.queue(len(runs))
        try:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.read(q, 3 * skimfork.TASK)  # takes three tasks, then dies with nothing written
                os._exit(1)
            os.close(w)
            os.waitpid(pid, 0)  # its tasks are gone from the queue before the rest are taken
            done = skimfork.work(fd, q, chunks, runs, lm_skim.Skim.found)
            lost = skimfork._collect((pid, r))
        finally:
            os.close(q)
        assert lost == {} and sorted(done) == list(range(3, len(runs)))
        got = skimfork.answers(fd, chunks, runs, done, lm_skim.Skim.found)
        assert got == skimfork.search(fd, chunks, lm_skim.Skim.found)
        assert any(hits for hits, _ in got)


def test_the_queue_hands_each_task_once_to_the_process_that_asks_first(tmp_path):
    """A process the scheduler leaves waiting takes fewer chunks: here one stopped before it
    asks takes none, the caller searches them all, and the stopped one, let go, finds the
    queue empty and answers nothing."""
    path = tmp_path / "train.log"
    path.write_bytes(b"step 1 | loss 2.5\n" * 4000)
    with open(path, "rb") as f:
        fd = f.fileno()
        chunks = [(i, 18 * 50, 18 * 50) for i in range(0, 18 * 4000, 18 * 50)]
        runs = skimfork.tasks(chunks)
        q = skimfork.queue(len(runs))
        try:
            def late_worker():  # stopped before it asks the queue for a task
                os.kill(os.getpid(), signal.SIGSTOP)
                return skimfork.work(fd, q, chunks, runs, lm_skim.Skim.found)
            kid = skimfork.forked(late_worker)
            _, status = os.waitpid(kid[0], os.WUNTRACED)
            assert os.WIFSTOPPED(status)
            done = skimfork.work(fd, q, chunks, runs, lm_skim.Skim.found)
            os.kill(kid[0], signal.SIGCONT)
            late = skimfork._collect(kid)
        finally:
            os.close(q)
        assert sorted(done) == list(range(len(runs))) and late == {}
        assert skimfork.answers(fd, chunks, runs, done, lm_skim.Skim.found) == skimfork.search(
            fd, chunks, lm_skim.Skim.found)
    many = [(i, 10, 10) for i in range(0, 10 * 5000, 10)]
    runs = skimfork.tasks(many)
    assert len(runs) == skimfork.MAX_TASKS and runs[0][0] == 0 and runs[-1][1] == len(many)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))


def test_one_core_or_a_small_skim_forks_nothing(tmp_path, monkeypatch):
    assert skimfork.workers(400 << 20, 4 << 20, 1) == 1
    assert skimfork.workers(400 << 20, 4 << 20, 16) == skimfork.MAX_WORKERS
    assert skimfork.workers(lm_skim.CHUNK * skimfork.MIN_CHUNKS - 1, lm_skim.CHUNK, 16) == 1
    path = tmp_path / "train.log"
    path.write_bytes(b"step 1 | loss 2.5\n" * 2000)
    one, spreads = answer(path, 256, 64, True, monkeypatch, cores=1)
    assert spreads == []


def test_a_cgroup_cpu_quota_caps_the_processes():
    """A container's --cpus (cgroup v2 cpu.max) counts as its cores: whole ones, at least 1."""
    assert lm_skim.quota_cores("200000 100000\n") == 2
    assert lm_skim.quota_cores("150000 100000\n") == 1
    assert lm_skim.quota_cores("50000 100000\n") == 1
    assert lm_skim.quota_cores("max 100000\n") is None
    assert lm_skim.quota_cores("") is None
    assert 1 <= lm_skim.cores() <= len(os.sched_getaffinity(0))


def test_a_process_running_threads_forks_nothing(monkeypatch):
    """A fork copies only the calling thread: with another thread running, one process skims."""
    import threading
    monkeypatch.undo()  # the real threaded(), not the module's stand-in
    stop = threading.Event()
    th = threading.Thread(target=stop.wait, daemon=True)
    th.start()
    try:
        assert skimfork.threaded()
        assert skimfork.workers(400 << 20, 4 << 20, 16) == 1
    finally:
        stop.set()
        th.join(5)
