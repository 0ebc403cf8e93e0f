"""examples/train.py as a real process tree: its lines, its workers, its checkpoint on TERM,
each failure mode, and the escaped worker that outlives it. Nothing here is mocked.

Every process a test starts carries TRAIN_RUN_TAG=<unique> in its environment; the
`job` fixture finds them all through /proc/*/environ afterwards (the escapee included)
and SIGKILLs what is left, by pidfd after checking the start time, so pids are never
signalled blind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fakegpu
from conftest import EXAMPLE, alive, read_stat, wait_for

STEP = re.compile(r"^step (\d+) loss (nan|\d+\.\d{4}) tok/s (\d+\.\d) lr (\d\.\de-\d\d)$")
PROFILE = re.compile(r"^profile: step (\d+) fwd_ms (\d+\.\d) bwd_ms (\d+\.\d)$")
INIT = re.compile(r"^init pid=(\d+) workers=(\d+) worker_pids=(\S+) escapee_pid=(\S+) argv=")


def proc_fields(pid):
    """(state, ppid, pgrp, session, start time) from /proc/PID/stat, or None."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])


def tagged(tag):
    """pid -> start time of every live process whose environment holds TRAIN_RUN_TAG=tag."""
    needle = f"TRAIN_RUN_TAG={tag}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        st = read_stat(int(entry)) if needle in env else None
        if st and st[0] not in "ZX":
            found[int(entry)] = st[1]
    return found


def kill_verified(pid, start):
    """SIGKILL pid only if it is still the process that had this start time (pidfd: the
    check and the signal refer to the same process even if the pid is reused between)."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, AttributeError):
        if alive(pid, start):  # no pidfd (old kernel or Python < 3.9): check, then signal
            os.kill(pid, signal.SIGKILL)
        return
    try:
        if alive(pid, start):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


class Job:
    """One run of examples/train.py, output in files (never a pipe: the escapee keeps it)."""

    def __init__(self, tmp_path: Path, env: dict):
        self.tag = f"rwtest-{uuid.uuid4().hex[:12]}"
        self.dir = tmp_path / self.tag
        self.dir.mkdir()
        self.out_path, self.err_path = self.dir / "out.log", self.dir / "err.log"
        full = {**os.environ, "TRAIN_STEP_SECONDS": "0.05", "TRAIN_RUN_TAG": self.tag,
                "TRAIN_LINGER_MAX_SECONDS": "60", **env}
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            # its own session, as runward launches it: a group to signal, apart from pytest's
            self.proc = subprocess.Popen([sys.executable, str(EXAMPLE)], cwd=self.dir, env=full,
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def lines(self, pattern=None):
        lines = self.out.splitlines()
        return [l for l in lines if pattern.match(l)] if pattern else lines

    def wait_line(self, pattern: str, timeout: float = 15.0) -> re.Match:
        rx = re.compile(pattern, re.M)
        return wait_for(lambda: rx.search(self.out), timeout, f"a line /{pattern}/ in\n{self.out}")

    def tree(self):
        """(main pid, worker pids, escapee pid or None) from the init line."""
        # the init line: first but for an escapee's `gpu:` line (it holds its memory before main goes on)
        m = next(filter(None, map(INIT.match, self.wait_line(r"^init ").string.splitlines())))
        workers = [int(p) for p in m.group(3).split(",")] if m.group(3) != "-" else []
        return int(m.group(1)), workers, None if m.group(4) == "-" else int(m.group(4))

    def exit_code(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)

    def cleanup(self):
        for pid, start in tagged(self.tag).items():
            kill_verified(pid, start)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        wait_for(lambda: not tagged(self.tag), 10, f"every process tagged {self.tag} gone")


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(**env):
        jobs.append(Job(tmp_path, {k: str(v) for k, v in env.items()}))
        return jobs[-1]

    yield start
    for j in jobs:
        j.cleanup()


def test_logs_steps_profile_and_done(job):
    j = job(TRAIN_STEP_SECONDS=0.01, TRAIN_STEPS=60, TRAIN_PROFILE_INTERVAL=20)
    assert j.exit_code() == 0, j.err
    lines = j.lines()
    assert lines[0].startswith(f"init pid={j.proc.pid} workers=2 ") and lines[1] == "ready"
    assert "TRAIN_STEPS=60" in lines[0] and f"TRAIN_RUN_TAG={j.tag}" in lines[0]
    steps = [STEP.match(l) for l in lines if l.startswith("step ")]
    assert all(steps) and [int(m.group(1)) for m in steps] == list(range(1, 61))
    losses = [float(m.group(2)) for m in steps]
    assert sum(losses[:10]) > sum(losses[-10:]), "loss should go down, noisily"
    assert len(set(losses)) > 50, "loss should be noisy"
    rates = [float(m.group(3)) for m in steps]
    assert all(14500 * 0.85 < r < 14500 * 1.15 for r in rates) and len(set(rates)) > 50
    assert steps[-1].group(4) == "3.0e-04"
    assert [int(m.group(1)) for m in map(PROFILE.match, lines) if m] == [20, 40, 60]
    assert lines[-1] == "done step=60"
    wait_for(lambda: not tagged(j.tag), 10, "workers and escapee gone after a clean exit")


def test_workers_are_real_processes_and_follow_main_out(job):
    j = job()
    j.wait_line("^ready$")
    main, workers, escapee = j.tree()
    assert main == j.proc.pid and len(workers) == 2 and escapee
    assert set(tagged(j.tag)) == {main, *workers, escapee}
    _, _, main_pgrp, main_sid, _ = proc_fields(main)
    for pid in workers:
        state, ppid, pgrp, sid, _ = proc_fields(pid)
        assert (ppid, pgrp, sid) == (main, main_pgrp, main_sid)
        assert b"--worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    state, ppid, pgrp, sid, _ = proc_fields(escapee)
    assert ppid != main, "double fork: the escapee's parent is init (or a subreaper)"
    assert sid != main_sid and pgrp != main_pgrp, "setsid: a session of its own"
    os.kill(main, signal.SIGKILL)  # no goodbye: the workers must notice on their own
    assert j.exit_code() == -signal.SIGKILL
    wait_for(lambda: not tagged(j.tag), 10, "workers and escapee exit when main is gone")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_writes_checkpoint_and_exits_0(job, sig):
    j = job(TRAIN_CHECKPOINT_SECONDS=0.2)
    j.wait_line(r"^step 3 ")
    os.killpg(j.proc.pid, sig)  # as a terminal or runward would: the whole process group
    assert j.exit_code() == 0, j.err
    m = re.search(r"^checkpoint saved step=(\d+) path=(\S+) signal=(\w+)$", j.out, re.M)
    assert m and m.group(3) == sig.name, j.out
    step, path = int(m.group(1)), Path(m.group(2))
    assert path == j.dir / "checkpoints" / f"ckpt-step{step}.json"
    assert json.loads(path.read_text())["step"] == step >= 3
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temp file left"
    last_step = int(STEP.match(j.lines(STEP)[-1]).group(1))
    assert step == last_step
    wait_for(lambda: not tagged(j.tag), 10, "workers and escapee gone after the checkpoint")


@pytest.mark.parametrize("env, code, stderr_end, last_step", [
    ({"TRAIN_CRASH_AT": 3}, 1,
     "RuntimeError: simulated failure in forward pass at step 3 (TRAIN_CRASH_AT)", 2),
    ({"TRAIN_OOM_AT": 3}, 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
     "2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.23 GiB is free. Including "
     "non-PyTorch memory, this process has 77.86 GiB memory in use.", 2),
    ({"TRAIN_EXIT_AT": 3, "TRAIN_EXIT_CODE": 42}, 42,
     "exit: step 3, exiting with code 42 (TRAIN_EXIT_AT)", 2),
])
def test_failure_modes_exit_codes_and_output(job, env, code, stderr_end, last_step):
    j = job(TRAIN_STEP_SECONDS=0.02, **env)
    assert j.exit_code() == code
    err = j.err.rstrip("\n").splitlines()
    assert err[-1].startswith(stderr_end), j.err
    if code == 1:  # a real Python traceback, as an uncaught exception prints it
        assert err[0] == "Traceback (most recent call last):"
        assert any('train.py", line' in l for l in err)
    assert int(STEP.match(j.lines(STEP)[-1]).group(1)) == last_step
    wait_for(lambda: not tagged(j.tag), 10, "no worker outlives a crash")


def test_oom_message_has_pytorch_spacing(job):
    j = job(TRAIN_STEP_SECONDS=0.02, TRAIN_OOM_AT=1)
    assert j.exit_code() == 1
    assert j.err.rstrip("\n").endswith(
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_fail_fast_exits_3_before_anything(job):
    j = job(TRAIN_FAIL_FAST=1)
    assert j.exit_code() == 3
    assert j.out == "" and "TRAIN_FAIL_FAST" in j.err
    assert not tagged(j.tag), "no worker was started"


def test_bad_switch_value_is_named(job):
    j = job(TRAIN_STEPS="ten")
    assert j.exit_code() == 1
    assert "TRAIN_STEPS='ten'" in j.err


def test_nan_losses_from_step_n(job):
    j = job(TRAIN_STEP_SECONDS=0.02, TRAIN_STEPS=5, TRAIN_NAN_AT=3)
    assert j.exit_code() == 0
    losses = [m.group(2) for m in map(STEP.match, j.lines(STEP))]
    assert losses[2:] == ["nan"] * 3 and "nan" not in losses[:2]


def test_slow_after_step_n(job):
    j = job(TRAIN_STEP_SECONDS=0.02, TRAIN_STEPS=8, TRAIN_SLOW_AFTER=4, TRAIN_SLOW_FACTOR=0.5)
    assert j.exit_code() == 0
    rates = [float(m.group(3)) for m in map(STEP.match, j.lines(STEP))]
    assert all(r > 12000 for r in rates[:4]) and all(6000 < r < 8500 for r in rates[4:])


def test_stall_goes_silent_but_stays_alive_and_checkpoints(job):
    j = job(TRAIN_STEP_SECONDS=0.02, TRAIN_STALL_AT=3)
    j.wait_line(r"^step 2 ")
    time.sleep(0.5)  # the condition is an absence: 25 step periods without a line
    assert j.proc.poll() is None
    assert [int(STEP.match(l).group(1)) for l in j.lines(STEP)] == [1, 2]
    os.kill(j.proc.pid, signal.SIGTERM)
    assert j.exit_code() == 0
    assert "checkpoint saved step=2 " in j.out


def test_ready_line_can_be_switched_off(job):
    j = job(TRAIN_STEP_SECONDS=0.01, TRAIN_STEPS=2, TRAIN_READY_LINE=0)
    assert j.exit_code() == 0
    assert "ready" not in j.lines()


def test_term_ignoring_worker_outlives_main_until_killed(job):
    j = job(TRAIN_IGNORE_TERM=1, TRAIN_CHECKPOINT_SECONDS=0)
    j.wait_line("^ready$")
    main, (stubborn, other), escapee = j.tree()
    start = read_stat(stubborn)[1]
    os.killpg(main, signal.SIGTERM)
    assert j.exit_code() == 0
    assert f"warning: worker pid={stubborn} did not stop" in j.err
    wait_for(lambda: not alive(other) and not alive(escapee), 10, "the other workers gone")
    assert alive(stubborn, start), "the stubborn worker must outlive main and its TERM"
    os.kill(stubborn, signal.SIGTERM)
    time.sleep(0.3)  # an absence again: TERM must not end it
    assert alive(stubborn, start)
    kill_verified(stubborn, start)
    wait_for(lambda: not alive(stubborn, start), 10, "SIGKILL ends it")


def test_lingering_escapee_survives_sigkill_of_main(job):
    j = job(TRAIN_ESCAPEE_LINGER=1)
    j.wait_line("^ready$")
    main, workers, escapee = j.tree()
    start = read_stat(escapee)[1]
    os.kill(main, signal.SIGKILL)
    assert j.exit_code() == -signal.SIGKILL
    wait_for(lambda: not any(alive(w) for w in workers), 10, "the plain workers gone")
    assert tagged(j.tag) == {escapee: start}, "found through its environment, start time intact"
    assert proc_fields(escapee)[1] != main
    kill_verified(escapee, start)
    wait_for(lambda: not alive(escapee, start), 10, "the escapee killed")


def test_gpu_memory_of_a_real_job_on_the_fake_gpu(job, tmp_path):
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=8)
    j = job(TRAIN_GPU_MIB=4096, TRAIN_GPU_RELEASE_SECONDS=0.5, CUDA_VISIBLE_DEVICES=3,
            **{k: v for k, v in fakegpu.env_with_standin(state).items()
               if k in ("PATH", "RUNWARD_FAKE_SMI_STATE")})
    j.wait_line(r"^gpu: pid=\d+ holds 4096 MiB on GPU 3 ")
    gpus = fakegpu.query_gpus(state)
    assert [g["used"] for g in gpus] == ["0", "0", "0", "4096", "0", "0", "0", "0"]
    assert fakegpu.query_apps(state) == [
        {"gpu_uuid": gpus[3]["uuid"], "pid": str(j.proc.pid), "used": "4096"}]
    os.kill(j.proc.pid, signal.SIGTERM)
    assert j.exit_code() == 0
    exited = time.monotonic()
    assert fakegpu.query_apps(state) == []
    wait_for(lambda: fakegpu.query_gpus(state)[3]["used"] == "0", 10, "memory released")
    assert time.monotonic() - exited >= 0.45


def test_escapee_keeps_its_gpu_memory_after_main_is_killed(job, tmp_path):
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    j = job(TRAIN_ESCAPEE_GPU_MIB=70000, TRAIN_ESCAPEE_LINGER=1,
            **{k: v for k, v in fakegpu.env_with_standin(state).items()
               if k in ("PATH", "RUNWARD_FAKE_SMI_STATE")})
    j.wait_line(r"^gpu: pid=\d+ holds 70000 MiB on GPU 0 ")
    main, _, escapee = j.tree()
    os.kill(main, signal.SIGKILL)
    j.exit_code()
    # the failure this project exists for: main is gone, GPU 0 still holds 70 GB
    assert fakegpu.query_apps(state) == [
        {"gpu_uuid": fakegpu.gpu_uuid(0), "pid": str(escapee), "used": "70000"}]
    kill_verified(escapee, read_stat(escapee)[1])
    wait_for(lambda: fakegpu.query_gpus(state)[0]["used"] == "0", 10, "released once it dies")
