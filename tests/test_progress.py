"""Restarts that make progress (issue 29), with real processes (examples/train.py): each
attempt's furthest step and newest complete checkpoint are recorded; a crash loop that gains
nothing gives up after max_no_progress attempts (and says so with the numbers), one that
gains goes on; {last_checkpoint} resolves to the newest *complete* checkpoint, never to a
newer one still being written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fakegpu
from conftest import CLI, EXAMPLE, alive, wait_for
from supervised import rec, records, shim_gone, sup  # noqa: F401 (sup: the fixture)
from helpers_progress import FAST, _events

PY = sys.executable


def start(c: CLI, name: str, *args: str) -> tuple[int, dict]:
    return c.json("start", name, "--settle", "0", "--cwd", str(c.cwd), *args)


def judged(c: CLI, name: str, n: int):
    """Attempt N's record once its own progress is in it (a restart's record carries the
    history of the attempts before it from the start)."""
    def cond():
        a = rec(c.home, name, n)
        return a if any(h["attempt"] == n for h in (a.get("progress") or {}).get("attempts") or []) else None
    return cond


def state_is(c: CLI, name: str, want: str):
    return lambda: (lambda s: s if s["state"] == want else None)(c.status(name))


def test_crash_loop_without_progress_gives_up_after_n_with_the_numbers(sup, tmp_path):
    got = tmp_path / "events.jsonl"
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    # every attempt dies at step 4 from step 0: the first gains steps, the next ones nothing
    start(sup, "np", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "10",
          "--max-no-progress", "2", "--notify", f"{PY} {recorder} {got}", *FAST, "--env", "TRAIN_CRASH_AT=4",
          "--", PY, str(EXAMPLE))
    st = wait_for(state_is(sup, "np", "gave_up"), timeout=60, what="state gave_up")
    assert st["attempt"] == 3 and st["restarts"] == 2, st  # 1 gained, 2 and 3 did not: max 2 reached
    g = st["gave_up"]
    assert g["reason"] == "no_progress", g
    assert g["no_progress"] == {"no_progress": 2, "max_no_progress": 2, "best_step": 3, "last_checkpoint": None}, g
    p = st["progress"]
    assert [(a["attempt"], a["step"], a["progressed"]) for a in p["attempts"]] == \
        [(1, 3, True), (2, 3, False), (3, 3, False)], p
    text = sup.run("status", "np").stdout
    assert "gave up: 2 attempts in a row without progress (max_no_progress 2; best step 3" in text, text
    wait_for(lambda: shim_gone(sup.home, "np"), what="the shim to end")
    gave = wait_for(lambda: [e for e in map(json.loads, got.read_text().splitlines()) if e["event"] == "gave_up"]
                    if got.exists() else None, what="the gave_up notification")[0]
    assert gave["reason"] == "no_progress" and gave["no_progress"]["best_step"] == 3, gave


def test_crash_loop_that_resumes_and_gains_goes_on(sup):
    # each attempt resumes from the newest complete checkpoint and dies 5 steps later: every
    # attempt passes the best step, so max_no_progress 1 never ends it; max_restarts does
    start(sup, "gp", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "3", "--max-no-progress", "1",
          "--checkpoint", "ckpt/step_*", "--checkpoint-marker", "COMPLETE", *FAST,
          "--env", "TRAIN_CKPT_EVERY=2", "--env", "TRAIN_CRASH_AFTER=5", "--env", "TRAIN_RESUME={last_checkpoint}",
          "--", PY, str(EXAMPLE), "--resume={last_checkpoint}")
    st = wait_for(state_is(sup, "gp", "gave_up"), timeout=60, what="state gave_up")
    assert st["gave_up"]["reason"] == "gave_up" and st["attempt"] == 4, st["gave_up"]
    hist = st["progress"]["attempts"]
    # resumed at 0, 4, 8, 12 (the last even step before each crash): steps 4, 8, 12, 16
    assert [(a["step"], a["progressed"]) for a in hist] == [(4, True), (8, True), (12, True), (16, True)], hist
    ck = sup.cwd / "ckpt"
    assert [a["checkpoint"] for a in hist] == [str(ck / f"step_{s}") for s in (4, 8, 12, 16)], hist
    r = records(sup.home, "gp")
    assert [x.get("resume_from") for x in r] == [None] + [str(ck / f"step_{s}") for s in (4, 8, 12)]
    assert r[2]["argv"][-1] == f"--resume={ck / 'step_8'}" and r[0]["argv"][-1] == "--resume=", r[2]["argv"]
    log = Path(r[0]["log"]).read_text()
    assert f"resumed from {ck / 'step_8'} step 8" in log, log[-2000:]
    assert st["progress"]["best_step"] == 16 and st["progress"]["last_checkpoint"] == str(ck / "step_16")


def test_last_checkpoint_skips_a_newer_incomplete_one(sup):
    ck = sup.cwd / "ckpt"
    for s, done in ((2, True), (7, True), (9, False), (12, False)):  # 9, 12: still being written
        (ck / f"step_{s}").mkdir(parents=True)
        (ck / f"step_{s}" / "state.json").write_text(json.dumps({"step": s}))
        if done:
            (ck / f"step_{s}" / "COMPLETE").write_text("")
    rc, doc = start(sup, "sk", "--checkpoint", "ckpt/step_*", "--checkpoint-marker", "COMPLETE", *FAST,
                    "--env", "TRAIN_RESUME={last_checkpoint}", "--env", "TRAIN_STEPS=3",
                    "--", PY, str(EXAMPLE), "{last_checkpoint}")
    assert rc in (0, 1), doc
    wait_for(judged(sup, "sk", 1), what="the job to end, its progress recorded")
    a = rec(sup.home, "sk", 1)
    assert a["resume_from"] == str(ck / "step_7") and a["argv"][-1] == str(ck / "step_7"), a
    assert f"resumed from {ck / 'step_7'} step 7" in Path(a["log"]).read_text()
    # TRAIN_STEPS=3: done at the first step past it, one on from the resume
    assert a["progress"]["attempts"][0]["step"] == 8 and a["progress"]["last_checkpoint"] == str(ck / "step_7")


def test_checkpoint_saved_regex_names_the_complete_one(sup):
    # no marker files: a directory counts once a log line names it; a newer unnamed one never
    start(sup, "rx", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "1",
          "--checkpoint", "ckpt/step_*", "--checkpoint-saved", r"saved checkpoint (?P<path>\S+)", *FAST,
          "--env", "TRAIN_CKPT_MARKER=", "--env", "TRAIN_CKPT_EVERY=3", "--env", "TRAIN_CRASH_AFTER=7",
          "--env", "TRAIN_RESUME={last_checkpoint}", "--", "/bin/sh", "-c",
          f'mkdir -p ckpt/step_99; exec {PY} {EXAMPLE}')
    wait_for(judged(sup, "rx", 2), timeout=60, what="attempt 2 to end, its progress recorded")
    r = records(sup.home, "rx")
    assert r[1]["resume_from"] == str(sup.cwd / "ckpt" / "step_6"), r[1].get("resume_from")
    assert r[1]["progress"]["attempts"][-1]["step"] == 12, r[1]["progress"]


@pytest.mark.parametrize("args, says", [
    (["--checkpoint", "ckpt/*"], "checkpoint_marker"),
    (["--max-no-progress", "0"], "max_no_progress"),
    (["--checkpoint", "ckpt/*", "--checkpoint-saved", "saved ("], "checkpoint_saved"),
    (["--env", "R={last_checkpoint}"], "--checkpoint"),
])
def test_bad_progress_input_is_refused_before_anything_starts(sup, args, says):
    rc, doc = start(sup, "bad", "--restart", "on-failure", *args, "--", PY, str(EXAMPLE))
    assert rc == 2, doc
    err = doc["error"]
    assert says in err["message"] + err.get("hint", ""), err
    assert not (sup.home / "runs" / "bad" / "attempts").exists() or not records(sup.home, "bad")


# --------------------------------------------------------------------------- the GPU gate

@pytest.fixture
def gsup(sup, tmp_path):
    """sup with the nvidia-smi stand-in first on PATH and a fresh 2-GPU fake driver."""
    sup.state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    sup.env = fakegpu.env_with_standin(sup.state, sup.env)
    return sup


def test_gpu_gate_blocks_while_another_process_holds_the_gpu_then_starts_by_itself(gsup, tmp_path):
    got = tmp_path / "events.jsonl"
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')\n")
    holder = subprocess.Popen(["sleep", "300"])
    try:
        fakegpu.attach(gsup.state, 1, holder.pid, 2000)
        start(gsup, "gb", "--gpus", "1", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "1",
              "--gpu-release-timeout", "0.5", "--notify", f"{PY} {recorder} {got}", *FAST,
              "--env", "TRAIN_CRASH_AT=3", "--", PY, str(EXAMPLE))
        st = wait_for(state_is(gsup, "gb", "blocked"), timeout=30, what="state blocked")
        held = st["blocked"]["holders"]
        assert [(h["pid"], h["used_mib"], h["gpu"]) for h in held] == [(holder.pid, 2000, 1)], st["blocked"]
        assert "sleep 300" in held[0]["cmd"] and "GPU 1" in st["blocked"]["why"], st["blocked"]
        assert f"blocked: the next attempt starts once the GPUs are released: GPU 1" in gsup.run("status", "gb").stdout
        ev = wait_for(lambda: [e for e in _events(got) if e["event"] == "blocked"], what="the blocked notification")[0]
        assert ev["holders"][0]["pid"] == holder.pid, ev
        assert not rec(gsup.home, "gb", 2), "the next attempt started while the GPU was held"
        holder.kill()
        holder.wait()
        freed = time.time()
        a2 = wait_for(lambda: rec(gsup.home, "gb", 2).get("started_at") and rec(gsup.home, "gb", 2),
                      what="the next attempt to start by itself")
        assert a2["started_at"] >= freed and a2["gpu_gate"]["blocked"], a2.get("gpu_gate")
        assert rec(gsup.home, "gb", 1)["blocked"]["released_at"] >= freed
    finally:
        holder.kill()
        holder.wait()


def test_gpu_gate_ends_the_old_attempts_leftover_and_waits_for_its_memory(gsup):
    # attempt 1 crashes (at 2 s: its escapee has attached by then) and leaves its escapee (own
    # session, reparented) holding 3000 MiB, which the fake driver frees 1.5 s after it dies
    start(gsup, "gl", "--gpus", "1", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "1",
          "--gpu-release-timeout", "20", "--env", "TRAIN_STEP_SECONDS=0.02", "--env", "TRAIN_WORKERS=0",
          "--env", "TRAIN_ESCAPEE=1", "--env", "TRAIN_ESCAPEE_LINGER=1", "--env", "TRAIN_ESCAPEE_GPU_MIB=3000",
          "--env", "TRAIN_GPU_RELEASE_SECONDS=1.5", "--env", "TRAIN_CRASH_AT=100", "--", PY, str(EXAMPLE))
    a2 = wait_for(lambda: rec(gsup.home, "gl", 2).get("started_at") and rec(gsup.home, "gl", 2), timeout=40,
                  what="attempt 2 started")
    a1 = rec(gsup.home, "gl", 1)
    ended = a2["gpu_gate"]["ended"]
    held = [p for p in fakegpu.read_state(gsup.state)["procs"] if p["pid"] == ended[0]["pid"]]
    assert held and held[0]["mib"] == 3000, "the escapee never held the GPU: the scenario did not happen"
    assert len(ended) == 1 and "--escapee" in ended[0]["cmd"], ended
    assert not alive(ended[0]["pid"]), "the old attempt's escapee outlived the restart"
    assert a2["started_at"] - a1["exit"]["at"] >= 1.5, "started before the driver freed the memory"
    assert a2["gpu_gate"]["gpus"]["polls"] >= 2 and "blocked" not in a1, a2["gpu_gate"]


def test_gpu_gate_costs_one_nvidia_smi_read_when_the_gpus_are_free(gsup):
    start(gsup, "gf", "--gpus", "0", "--restart", "on-failure", "--backoff", "0", "--max-restarts", "1", *FAST,
          "--env", "TRAIN_CRASH_AT=2", "--", PY, str(EXAMPLE))
    a2 = wait_for(lambda: rec(gsup.home, "gf", 2).get("started_at") and rec(gsup.home, "gf", 2),
                  what="attempt 2 started")
    assert a2["gpu_gate"]["gpus"] == {"checked": True, "polls": 1, "max_used_mib": 1024.0}, a2["gpu_gate"]


def test_stop_while_blocked_ends_the_supervision_without_a_next_attempt(gsup):
    holder = subprocess.Popen(["sleep", "300"])
    try:
        fakegpu.attach(gsup.state, 0, holder.pid, 1500)
        start(gsup, "gs", "--gpus", "0", "--restart", "on-failure", "--backoff", "0",
              "--gpu-release-timeout", "0.3", *FAST, "--env", "TRAIN_CRASH_AT=2", "--", PY, str(EXAMPLE))
        wait_for(state_is(gsup, "gs", "blocked"), timeout=30, what="state blocked")
        # the GPU is still held by another process: the stop says so (exit 5), but the pending
        # restart is cancelled all the same
        rc, doc = gsup.json("stop", "gs", "--gpu-release-timeout", "0.3")
        assert rc == 5 and doc["result"]["restart_cancelled"], doc
        wait_for(lambda: shim_gone(gsup.home, "gs"), what="the blocked shim woken and ended")
        assert len(records(gsup.home, "gs")) == 1 and gsup.status("gs")["state"] == "exited"
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- stop --checkpoint

def test_stop_checkpoint_waits_for_the_saved_line_then_stops(sup):
    rc, doc = start(sup, "sc", "--settle", "0.3", *FAST, "--env", "TRAIN_CKPT_SIGNAL=USR1",
                    "--env", "TRAIN_CHECKPOINT_SECONDS=1.0", "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    rc, doc = sup.json("stop", "sc", "--checkpoint", "--checkpoint-wait-for", r"saved checkpoint (\S+)")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    c = doc["result"]["checkpoint"]
    assert c["signal"] == "SIGUSR1" and c["saw_line"].startswith("saved checkpoint "), c
    assert c["waited_s"] >= 1.0, c  # the save took 1 s: the stop waited for it
    path = Path(c["saw_line"].split()[-1])
    assert (path / "COMPLETE").exists()  # the marker came before the stop's TERM
    text = sup.run("status", "sc").stdout
    assert "exited" in text, text


def test_stop_checkpoint_from_runward_toml_waits_for_a_new_complete_checkpoint(sup):
    (sup.cwd / "runward.toml").write_text(
        f'[runs.st]\ncommand = ["{PY}", "{EXAMPLE}"]\ncwd = "{sup.cwd}"\nsettle = 0.3\n'
        'env = { TRAIN_STEP_SECONDS = "0.02", TRAIN_WORKERS = "0", TRAIN_ESCAPEE = "0", TRAIN_CKPT_SIGNAL = "USR1",'
        ' TRAIN_CHECKPOINT_SECONDS = "0.8" }\n'
        'checkpoint = "ckpt/step_*"\ncheckpoint_marker = "COMPLETE"\n'
        'stop_checkpoint = { signal = "USR1", timeout = 30 }\n')
    rc, doc = sup.json("start", "st")
    assert rc == 0, doc
    rc, doc = sup.json("stop", "st")
    assert rc == 0, doc
    c = doc["result"]["checkpoint"]
    assert c["checkpoint"].startswith(str(sup.cwd / "ckpt" / "step_")) and c["waited_s"] >= 0.8, c
    assert (Path(c["checkpoint"]) / "COMPLETE").exists()
    human = sup.run("stop", "st").stdout  # already stopped: the job is gone, nothing to checkpoint
    assert "checkpoint: the job is not running" in human, human


def test_restart_checkpoints_first_and_the_new_attempt_resumes_from_that_checkpoint(sup):
    # runward.toml's stop_checkpoint makes a restart's stop checkpoint too: the old attempt saves
    # on the signal (no periodic checkpoint at all), and {last_checkpoint} of the new attempt is
    # the very checkpoint it saved, complete (the marker written before the stop's TERM)
    (sup.cwd / "runward.toml").write_text(
        f'[runs.rc]\ncommand = ["{PY}", "{EXAMPLE}"]\ncwd = "{sup.cwd}"\nsettle = 0.3\n'
        'env = { TRAIN_STEP_SECONDS = "0.02", TRAIN_WORKERS = "0", TRAIN_ESCAPEE = "0", TRAIN_CKPT_SIGNAL = "USR1",'
        ' TRAIN_CHECKPOINT_SECONDS = "0.5", TRAIN_RESUME = "{last_checkpoint}" }\n'
        'checkpoint = "ckpt/step_*"\ncheckpoint_marker = "COMPLETE"\n'
        'stop_checkpoint = { signal = "USR1", timeout = 30 }\n')
    rc, doc = sup.json("start", "rc")
    assert rc == 0, doc
    assert not (sup.cwd / "ckpt").exists()  # nothing saved yet: the first attempt starts from 0
    rc, doc = sup.json("restart", "rc")
    assert rc == 0, doc
    c = doc["result"]["steps"][0]["result"]["checkpoint"]
    saved = Path(c["checkpoint"])
    assert saved.parent == sup.cwd / "ckpt" and (saved / "COMPLETE").exists() and c["waited_s"] >= 0.5, c
    assert rec(sup.home, "rc", 2).get("resume_from") == str(saved), rec(sup.home, "rc", 2)
    log = sup.home / "runs" / "rc" / "log"
    wait_for(lambda: f"resumed from {saved} step" in log.read_text(), what="attempt 2 resuming from the saved checkpoint")
    text = sup.run("restart", "rc", "--no-checkpoint").stdout  # at once: no signal, no wait
    assert "checkpoint:" not in text and "attempt 3" in text, text
    rc, doc = sup.json("restart", "rc", "--checkpoint-timeout", "0")
    assert rc == 0, doc  # not waited for: said so, then the stop and the start as usual
    c = doc["result"]["steps"][0]["result"]["checkpoint"]
    assert c["timed_out"] and c["note"] == "no checkpoint seen within 0s: stopping as usual", c


def test_stop_checkpoint_with_nothing_to_wait_for_is_refused_before_any_signal(sup):
    rc, doc = start(sup, "sn", "--settle", "0.3", *FAST, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    rc, doc = sup.json("stop", "sn", "--checkpoint")
    assert rc == 2 and "nothing to wait for" in doc["error"]["message"], doc
    assert sup.status("sn")["state"] == "running"
    assert sup.json("stop", "sn")[0] == 0


# --------------------------------------------------------------------------- idle

def _idle_toml(c: CLI, name: str, window: str, interval: str = "0.3", action: str = "stop") -> None:
    (c.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["{PY}", "{EXAMPLE}"]\ncwd = "{c.cwd}"\nsettle = 0.3\ngpus = [1]\n'
        'env = { TRAIN_STEP_SECONDS = "0.05", TRAIN_WORKERS = "0", TRAIN_ESCAPEE = "0" }\n'
        f'[runs.{name}.health]\ninterval = {interval}\nidle = {{ gpu_util_below = 5, for = "{window}" }}\n'
        f'actions = {{ idle = "{action}" }}\n')


def test_idle_gpus_for_the_window_alert_and_act_busy_ones_do_not(gsup):
    fakegpu.update(gsup.state, lambda s: s["gpus"][1].update(util=60))  # busy at first
    _idle_toml(gsup, "id", "1s")
    rc, doc = gsup.json("start", "id")
    assert rc == 0, doc
    wait_for(lambda: json.loads((gsup.home / "runs" / "id" / "health.json").read_text()).get("points")
             if (gsup.home / "runs" / "id" / "health.json").exists() else None, what="the shim's health ticks")
    went_idle = time.time()
    fakegpu.update(gsup.state, lambda s: s["gpus"][1].update(util=2))
    st = wait_for(state_is(gsup, "id", "exited"), timeout=30, what="the idle action's stop")
    acts = st["actions"]
    assert [(a["kind"], a["action"]) for a in acts] == [("idle", "stop")], acts
    # never while the GPU was busy: only a full window after it went idle
    assert acts[0]["at"] - went_idle >= 1.0, (acts[0]["at"] - went_idle, acts[0]["detail"])
    assert "under 5% utilization" in acts[0]["detail"] and "GPU 1 2%" in acts[0]["detail"], acts[0]


def test_an_idle_alert_fails_watch_and_is_shown_with_every_alert(gsup):
    """The shim's idle alert fired and its action ran, yet `watch --json` said healthy, exit 0:
    now it is kept with the run's facts, so watch fails on it and status shows it."""
    fakegpu.update(gsup.state, lambda s: s["gpus"][1].update(util=0))  # the driver says 0% on GPU 1
    _idle_toml(gsup, "iq", "1s", action="notify")
    rc, doc = gsup.json("start", "iq")
    assert rc == 0, doc
    acts = wait_for(lambda: rec(gsup.home, "iq", 1).get("actions"), timeout=30, what="the idle alert's action")
    assert [(a["kind"], a["action"]) for a in acts] == [("idle", "notify")], acts
    job = rec(gsup.home, "iq", 1)["job"]
    assert alive(job["pid"], job["start"])  # notify only: the job runs on, and watch still judges it
    st = gsup.status("iq")
    assert [a["kind"] for a in st["health"]["alerts"]] == ["idle"], st["health"]
    assert "GPU 1 0%" in st["health"]["alerts"][0]["detail"]
    assert "idle: every GPU of the run (1) under 5%" in gsup.run("status", "iq").stdout
    rc, doc = gsup.json("watch", "iq", "--for", "14")
    assert rc == 1 and doc["result"]["healthy"] is False and doc["result"]["alert"]["kind"] == "idle", doc
    assert doc["error"]["type"] == "Alert" and alive(job["pid"], job["start"]), doc


def test_an_idle_rule_the_shim_cannot_judge_is_said_not_judged(gsup):
    """nvidia-smi failing (the driver lost) left the idle rule silent: the shim read no
    utilization, never fired, and status and watch said nothing of a rule that could not be
    judged (watch: healthy, exit 0). The record now keeps idle_unjudged while it lasts, and
    status and watch say it; once nvidia-smi answers again, it is gone."""
    fakegpu.update(gsup.state, lambda s: s.update(scenario="driver-failure"))
    _idle_toml(gsup, "iu", "1s", action="notify")
    rc, doc = gsup.json("start", "iu")
    assert rc == 0, doc
    u = wait_for(lambda: rec(gsup.home, "iu", 1).get("idle_unjudged"), timeout=30, what="idle said unjudged")
    assert "GPU 1" in u["why"] and "couldn't communicate with the" in u["why"], u
    job = rec(gsup.home, "iu", 1)["job"]
    assert alive(job["pid"], job["start"]) and not rec(gsup.home, "iu", 1).get("actions")  # nothing fired
    assert gsup.status("iu")["idle_unjudged"]["why"] == u["why"]
    assert "idle: not judged: GPU 1" in gsup.run("status", "iu").stdout
    rc, w = gsup.json("watch", "iu", "--for", "1")
    assert w["result"]["idle_unjudged"]["why"] == u["why"], w
    assert "idle: not judged by the shim" in gsup.run("watch", "iu", "--for", "1").stdout
    fakegpu.update(gsup.state, lambda s: s.update(scenario="ok") or s["gpus"][1].update(util=60))
    wait_for(lambda: "idle_unjudged" not in rec(gsup.home, "iu", 1), timeout=30, what="judged again")
    assert "idle_unjudged" not in gsup.status("iu")
    assert gsup.run("stop", "iu").returncode == 0


def test_an_idle_rule_on_a_run_without_gpus_is_refused(gsup):
    """It judges the run's own GPUs: without any it could never fire, and passed every watch."""
    (gsup.cwd / "runward.toml").write_text(
        f'[runs.ig]\ncommand = ["sleep", "60"]\n[runs.ig.health]\nidle = {{ gpu_util_below = 5, for = "10m" }}\n')
    rc, doc = gsup.json("start", "ig")
    assert rc == 2 and "idle on a run without gpus" in doc["error"]["message"], doc
    assert "gpus = [0, 1]" in doc["error"]["hint"] and not (gsup.home / "runs" / "ig").exists()
    rc, doc = gsup.json("start", "ig", "--gpus", "1", "--settle", "0.2")  # given its GPU, it starts
    assert rc == 0, doc


def test_an_idle_window_shorter_than_the_interval_is_refused(gsup):
    _idle_toml(gsup, "iw", "2s", interval="5")
    rc, doc = gsup.json("start", "iw")
    assert rc == 2, doc
    assert "shorter than the sampling interval" in doc["error"]["message"], doc["error"]
    assert not (gsup.home / "runs" / "iw").exists()
