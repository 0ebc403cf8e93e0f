"""A supervised run's status, exit facts and watchers are true (issue 25, items 12-14), with
real shims, jobs and CLI calls: the wait before a restart is the recorded delay and reads
`restarting`; uptime counts from the attempt's own job; `gave_up` comes with the last end;
an exit nobody saw is unknown in every view; an "exited" alert carries the exit's time; a
stop in the backoff says it cancelled the restart; and reading status while the run lives
(as a person or `top` does) never switches its health actions off."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import alive, marked, wait_for
from supervised import rec, records, shim_gone, sup  # noqa: F401  (sup: the fixture)
from helpers_supervise import PY, _example


def _status_all(c) -> dict:
    """`runward status --json` of every run of the home: the list view, which reads no log,
    so what it shows is the records and /proc alone."""
    rc, doc = c.json("status")
    assert rc == 0, doc
    return doc["result"]


def _until(cond, timeout: float, what: str, every: float = 0.05):
    """wait_for with a steady pace: a poll that samples states needs its reads spread out."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def test_a_health_restart_waits_its_delay_as_restarting_and_uptime_is_the_new_jobs(sup):
    """nan = "restart", backoff 2 s, max_restarts 1: attempt 1 NaNs, waits 2 s (state
    restarting, next_restart_at), attempt 2 runs with its own uptime, NaNs, and the run
    reads gave_up at once. Before: the health stop held the run lock 10 s waiting for its
    own parent (the shim) to end, so the run read `exited` ~10 s and restarted after ~12 s."""
    (sup.cwd / "runward.toml").write_text(_example(
        "hr", 'max_restarts = 1\nbackoff = "2s"\n[runs.hr.health]\ninterval = 0.3\n'
              'actions = { nan = "restart" }\n'))
    rc, doc = sup.json("start", "hr", "--env", "TRAIN_NAN_AT=40")
    assert rc == 0, doc
    reads = []  # (agent's time, the run's status)

    def sample():
        res = _status_all(sup)
        r = res["runs"][0]
        reads.append((res["time"], r))
        return r["state"] == "gave_up"
    _until(sample, 90, "gave_up")
    r1, r2 = records(sup.home, "hr")
    e1, s2, e2 = r1["exit"]["at"], r2["started_at"], r2["exit"]["at"]
    assert r2["restart"]["delay_s"] == 2.0 and r2["restart"]["reason"] == "health_action", r2["restart"]
    assert 2.0 <= s2 - e1 < 3.5, f"the wait was {s2 - e1:.2f}s where the record says 2.0"
    waiting = [r for t, r in reads if e1 + 0.5 < t < s2 - 0.05]
    assert waiting, "no read fell in the backoff"
    for r in waiting:
        assert r["state"] == "restarting" and r["attempt"] == 1, r
        assert abs(r["next_restart_at"] - (e1 + 2.0)) < 0.5, (r["next_restart_at"], e1)
    second = [(t, r) for t, r in reads if r["attempt"] == 2 and r["state"] == "running"]
    assert second, "no read of attempt 2 running"
    for t, r in second:
        up = r["tree"]["uptime_s"]
        assert up <= t - s2 + 0.3, f"uptime {up}s, {t - s2:.2f}s after attempt 2's job started"
    # the last attempt's end is the run's: gave_up at once, never a long `exited` before it
    assert reads[-1][0] - e2 < 2.0, f"gave_up read {reads[-1][0] - e2:.2f}s after the last exit"
    wait_for(lambda: shim_gone(sup.home, "hr") and not marked("hr."), what="nothing of the run left")


def _watch(c, name: str, every: float, stop: threading.Event, out: list) -> threading.Thread:
    """Read `status NAME` (with its health, as a person does, and `top` every 2 s) every
    EVERY seconds until STOP."""
    def loop():
        while not stop.is_set():
            p = c.run("status", name, "--json")
            out.append((time.time(), p.returncode))
            stop.wait(every)
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("action", ["stop", "restart", "notify"])
def test_reading_status_never_switches_a_health_action_off(sup, tmp_path, action):
    """A NaN line with nan = ACTION, while status is read every 0.2 s and every 2 s: the shim
    still acts within its interval. Before: the reads stored the NaN fact first, the shim's
    judge saw no new fact, and nothing ever fired."""
    name = f"w{action}"
    interval = 1.0
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    got = tmp_path / "events.jsonl"
    (sup.cwd / "runward.toml").write_text(_example(
        name, f'max_restarts = 1\nbackoff = "0"\nnotify = ["{PY} {recorder} {got}"]\n[runs.{name}.health]\n'
              f'interval = {interval}\nactions = {{ nan = "{action}" }}\n'))
    # the NaN comes ~3 s in: after the shim's first look at the log (its judge set up then)
    rc, doc = sup.json("start", name, "--env", "TRAIN_NAN_AT=60")
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    stop, fast, slow = threading.Event(), [], []
    readers = [_watch(sup, name, 0.2, stop, fast), _watch(sup, name, 2.0, stop, slow)]
    try:
        seen = wait_for(lambda: "loss nan" in log.read_text() and time.time(), what="the NaN line")
        acts = wait_for(lambda: rec(sup.home, name, 1).get("actions"), timeout=interval + 8,
                        what=f"the {action} on nan while status is read")
    finally:
        stop.set()
        for th in readers:
            th.join(30)
    # the reads raced the NaN: one ended after it was in the log (a count of reads is the load's,
    # not the race's: at load 9 a status takes ~1 s)
    assert fast and slow and all(rc == 0 for _, rc in fast + slow), (fast, slow)
    assert any(t >= seen for t, _ in fast), (seen, fast)
    assert (acts[0]["kind"], acts[0]["action"]) == ("nan", action), acts
    assert acts[0]["at"] - seen <= interval + 2.0, acts[0]["at"] - seen
    if action == "stop":
        r = wait_for(lambda: (lambda a: a if a.get("exit") else None)(rec(sup.home, name, 1)), what="the stop")
        assert r["stop_requested"]["by"] == "health:stop"
    elif action == "restart":
        r2 = wait_for(lambda: rec(sup.home, name, 2).get("restart"), what="attempt 2")
        assert r2["reason"] == "health_action", r2
    else:
        events = wait_for(lambda: [e for e in map(json.loads, got.read_text().splitlines()) if e["event"] == "alert"]
                          if got.exists() else None, what="the alert's notification")
        assert events[0]["alert"]["kind"] == "nan" and events[0]["action"] == "notify", events
        assert rec(sup.home, name, 1)["job"] and not rec(sup.home, name, 1).get("exit")  # notify only
    sup.json("stop", name, "--grace", "5")
    wait_for(lambda: shim_gone(sup.home, name) and not marked(name + "."), what="nothing of the run left")


def test_an_orphans_stop_leaves_its_exit_unknown_in_every_view(cli):
    """The shim is killed; the job (which saves and exits 0 on TERM) is stopped. Nobody saw
    its exit status: status --json, the human view and the health facts all say unknown.
    Before: the human view said "killed by SIGTERM"."""
    from conftest import EXAMPLE
    rc, doc = cli.json("start", "orx", "--settle", "0.2", "--env", "TRAIN_STEP_SECONDS=0.1", "--",
                       PY, str(EXAMPLE))
    assert rc == 0, doc
    a = rec(cli.home, "orx", 1)
    os.kill(a["shim"]["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(a["shim"]["pid"], a["shim"]["start"]), what="the shim gone")
    rc, st_doc = cli.json("status", "orx")
    assert rc == 0 and st_doc["result"]["runs"][0]["state"] == "orphaned", st_doc  # README: status exits 0
    rc, doc = cli.json("stop", "orx", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    st = cli.status("orx")
    ex = st["exit"]
    assert st["state"] == "exited" and ex["code"] is None and ex["signal"] is None and ex["unknown"], ex
    assert ex["signals_sent"] == ["SIGTERM"] and ex["by"] == "stop", ex
    text = cli.run("status", "orx").stdout
    head = text.splitlines()[0]
    assert "exit status unknown" in head and "SIGTERM" not in head and "killed" not in head, text
    ends = [f for f in st["health"]["alerts"] if f["kind"] == "exited"]
    assert ends and "unknown" in ends[-1]["detail"] and "killed" not in ends[-1]["detail"], ends
    assert not [f for f in st["health"]["alerts"] if f["kind"] == "oom_killed"]


def test_an_exited_alert_carries_the_exits_time_not_the_reads(cli):
    rc, doc = cli.json("start", "ext", "--settle", "0", "--sh", "exit 3")
    assert rc in (0, 1), doc
    ex = wait_for(lambda: rec(cli.home, "ext", 1).get("exit"), what="the exit record")
    # the first read comes well after the exit, as it would for a run nobody looked at
    wait_for(lambda: time.time() > ex["at"] + 1.5, what="a read later than the exit")
    st = cli.status("ext")
    ends = [f for f in st["health"]["alerts"] if f["kind"] == "exited"]
    assert ends and abs(ends[0]["t"] - ex["at"]) < 0.01, (ends, ex)


def test_a_stop_in_the_backoff_says_it_cancelled_the_restart(sup):
    sup.json("start", "bk", "--settle", "0", "--restart", "always", "--backoff", "60s", "--sh", "exit 1")
    wait_for(lambda: sup.status("bk")["state"] == "restarting", what="state restarting")
    p = sup.run("stop", "bk")
    assert p.returncode == 0, p.stderr
    assert "cancelled the pending restart" in p.stdout and "already stopped" not in p.stdout, p.stdout
    wait_for(lambda: shim_gone(sup.home, "bk"), what="the shim woken and ended")


def test_a_run_that_gave_up_with_a_stray_reads_gave_up_and_its_stop_cancels_no_restart(sup):
    """gave_up wins over stray (README's states table), the strays named; the shim lingers as
    their parent; a stop ends them and does not claim to cancel a restart there is none of
    (found by the oracle's supervised escapees: start; escape; job_ends; job_ends)."""
    pidf = sup.cwd / "esc.pid"
    sup.json("start", "gs", "--settle", "0", "--restart", "on-failure", "--max-restarts", "0",
             "--sh", f"setsid sleep 300 & echo $! > {pidf}.tmp && mv {pidf}.tmp {pidf}; exit 3")
    doc = wait_for(lambda: (lambda d: d if d["state"] == "gave_up" else None)(sup.status("gs")),
                   what="gave_up")
    esc = int(wait_for(lambda: pidf.exists() and pidf.read_text().strip(), what="esc.pid"))
    assert alive(esc) and esc in doc.get("stray_processes", []), doc
    p = sup.run("stop", "gs")
    assert p.returncode == 0, p.stderr
    assert "cancelled the pending restart" not in p.stdout, p.stdout
    wait_for(lambda: not alive(esc), what="the stray ended")
    wait_for(lambda: shim_gone(sup.home, "gs"), what="the lingering shim ended")
    assert sup.status("gs")["state"] == "gave_up"


def test_a_stop_of_a_supervised_run_answers_without_waiting_out_its_shim(sup):
    """The shim ends with the stop; before, it waited for the run lock the stop held while
    the stop waited (10 s at most) for the shim to end."""
    rc, doc = sup.json("start", "bs", "--restart", "always", "--settle", "0", "--", "sleep", "600")
    assert rc == 0, doc
    t0 = time.monotonic()
    rc, doc = sup.json("stop", "bs", "--grace", "5")
    took = time.monotonic() - t0
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert took < 5.0, f"the stop took {took:.1f}s"
    assert shim_gone(sup.home, "bs") and sup.status("bs")["state"] == "exited"
