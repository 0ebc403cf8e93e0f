"""Supervision on the target (issue 14), with real processes: the shim restarts by the policy
(backoff, max_restarts, min_uptime, exit codes), a stop always wins (also racing a crash, made
to race with the RUNWARD_FAULT pause points), health actions stop or restart from the
incremental parser, notifications reach a command and a webhook, and all of it goes on with
the CLI killed and the ssh connection gone (over the testbed)."""

from __future__ import annotations

import http.server
import json
import os
import select
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import CLI, alive, gate, marked, wait_for
from supervised import end_shims, rec, records, shim_gone, shims_of, sup  # noqa: F401 (sup: the fixture)
from helpers_supervise import PY, _example

# attempt n of the run, from the marker RUNWARD_RUN=<run>.<attempt>
N = 'n=${RUNWARD_RUN##*.}; '


def start(c: CLI, name: str, *args: str) -> tuple[int, dict]:
    return c.json("start", name, "--settle", "0", *args)


def test_crash_twice_then_runs_restarted_with_growing_delays_then_stays(sup):
    rc, doc = start(sup, "c2", "--restart", "on-failure", "--backoff", "0.3s..10s", "--min-uptime", "30",
                    "--sh", N + '[ "$n" -le 2 ] && exit 3; exec sleep 600')
    assert rc in (0, 1), doc  # the first attempt may already be gone when the settle of 0 ends
    a3 = wait_for(lambda: rec(sup.home, "c2", 3).get("job"), what="attempt 3 running")
    r = records(sup.home, "c2")
    assert [x["exit"]["code"] for x in r[:2]] == [3, 3]
    d2, d3 = r[1]["restart"]["delay_s"], r[2]["restart"]["delay_s"]
    assert (d2, d3) == (0.3, 0.6), (d2, d3)  # failed starts: the delay doubles
    # the delays were really waited: exit of one attempt to the start of the next
    assert r[1]["started_at"] - r[0]["exit"]["at"] >= 0.3
    assert r[2]["started_at"] - r[1]["exit"]["at"] >= 0.6
    assert "restart 1 of attempt 1" in Path(r[0]["log"]).read_text()  # each attempt's own header
    st = sup.status("c2")
    assert st["state"] == "running" and st["attempt"] == 3 and st["pid"] == a3["pid"] and st["restarts"] == 2, st
    assert st["policy"]["restart"] == "on-failure" and "next_restart_at" not in st
    text = sup.run("status", "c2").stdout
    assert "restarts so far: 2" in text, text
    rc, doc = sup.json("stop", "c2", "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    wait_for(lambda: shim_gone(sup.home, "c2"), what="the shim to end with the stop")
    assert len(records(sup.home, "c2")) == 3 and sup.status("c2")["state"] == "exited"
    # the process forked in advance for attempt 4 went with the shim, and its cgroups
    wait_for(lambda: not shims_of(sup.home), what="no shim or zygote of this home left")
    home_id = r[0]["home_id"]
    assert not list(Path("/sys/fs/cgroup").glob(f"*/runward/{home_id}-c2.*")), "a cgroup of the run was left"


class _Hook(http.server.BaseHTTPRequestHandler):
    got: list = []
    fail_first = [1]  # the first POST gets a 503: the agent must try again

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.fail_first and self.fail_first.pop():
            self.send_response(503)
            self.end_headers()
            return
        self.got.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_always_crashing_gives_up_with_each_exit_code_and_notifies(sup, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    got = tmp_path / "events.jsonl"
    (sup.cwd / "runward.toml").write_text(
        '[runs.ac]\nsh = \'n=${RUNWARD_RUN##*.}; exit $((10 + n))\'\nrestart = "on-failure"\n'
        'max_restarts = 2\nbackoff = "0"\n'
        f'notify = ["{PY} {recorder} {got}", "http://127.0.0.1:{server.server_address[1]}/hook"]\n')
    try:
        start(sup, "ac")
        st = wait_for(lambda: (lambda s: s if s["state"] == "gave_up" else None)(sup.status("ac")),
                      what="state gave_up")
        assert st["attempt"] == 3 and st["restarts"] == 2, st
        assert [e["code"] for e in st["gave_up"]["exits"]] == [11, 12, 13], st["gave_up"]
        assert "gave up after 2 restarts" in sup.run("status", "ac").stdout
        wait_for(lambda: shim_gone(sup.home, "ac"), what="the shim to end")
        kinds = ["exited", "restarted", "exited", "restarted", "exited", "gave_up"]
        # each event reached the command (JSON on stdin) and the webhook (after a 503, retried)
        cmd_events = [json.loads(ln) for ln in got.read_text().splitlines()]
        assert sorted(e["event"] for e in cmd_events) == sorted(kinds), cmd_events
        wait_for(lambda: len(_Hook.got) == len(kinds), what="every webhook POST")
        assert sorted(e["event"] for e in _Hook.got) == sorted(kinds)
        gave = next(e for e in _Hook.got if e["event"] == "gave_up")
        assert gave["run"] == "ac" and [x["code"] for x in gave["exits"]] == [11, 12, 13]
    finally:
        server.shutdown()


def test_min_uptime_keeps_the_first_delay_for_attempts_that_stayed_up(sup):
    start(sup, "mu", "--restart", "always", "--backoff", "0.2s..10s", "--min-uptime", "0.5",
          "--sh", N + '[ "$n" -le 2 ] && { sleep 0.8; exit 1; }; exec sleep 600')
    wait_for(lambda: rec(sup.home, "mu", 3).get("job"), timeout=30, what="attempt 3 running")
    r = records(sup.home, "mu")
    # each attempt lived past min_uptime: no failed start, no growth
    assert [x["restart"]["delay_s"] for x in r[1:]] == [0.2, 0.2], [x["restart"] for x in r[1:]]
    sup.json("stop", "mu", "--grace", "2")


def test_stop_during_the_backoff_ends_the_supervision(sup):
    start(sup, "sb", "--restart", "always", "--backoff", "60s", "--sh", "exit 1")
    st = wait_for(lambda: (lambda s: s if s["state"] == "restarting" else None)(sup.status("sb")),
                  what="state restarting")
    assert st["next_restart_at"] > time.time() + 30, st
    t0 = time.monotonic()
    rc, doc = sup.json("stop", "sb")
    assert rc == 0 and doc["result"]["restart_cancelled"], doc
    wait_for(lambda: shim_gone(sup.home, "sb"), what="the shim woken and ended")
    assert time.monotonic() - t0 < 30  # woken, not waited out
    assert len(records(sup.home, "sb")) == 1 and sup.status("sb")["state"] == "exited"


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) member of process group PGID."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            rest = stat[stat.rfind(")") + 2:].split()
            if int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
                return True
    return False


def _paused(home: Path) -> bool:
    return (home / "fault-pause").exists()


def test_stop_racing_a_crash_before_the_decision_wins(sup):
    """The shim has planned the restart (next_restart_at written) and is held there; the stop
    comes then: no next attempt, ever."""
    sup.env["RUNWARD_FAULT"] = "pause:supervise:backoff"
    start(sup, "r1", "--restart", "always", "--backoff", "0.1s", "--sh", "exit 1")
    sup.env.pop("RUNWARD_FAULT")
    wait_for(lambda: _paused(sup.home), what="the shim paused before its backoff")
    rc, doc = sup.json("stop", "r1", "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"] and doc["result"]["restart_cancelled"], doc
    (sup.home / "fault-pause").unlink()
    wait_for(lambda: shim_gone(sup.home, "r1"), what="the shim to end")
    assert len(records(sup.home, "r1")) == 1 and not marked("r1.")


def test_stop_racing_a_crash_while_the_next_attempt_spawns_stops_that_attempt(sup):
    """The shim holds the run lock and is about to spawn attempt 2; the stop waits for the
    lock, then finds attempt 2 and stops it, verified: the stop still wins."""
    sup.env["RUNWARD_FAULT"] = "pause:supervise:decided"
    start(sup, "r2", "--restart", "always", "--backoff", "0", "--sh", N + '[ "$n" = 1 ] && exit 1; exec sleep 600')
    sup.env.pop("RUNWARD_FAULT")
    wait_for(lambda: _paused(sup.home), what="the shim paused holding the lock")
    stop = sup.popen("stop", "r2", "--grace", "5", "--json")
    assert select.select([stop.stderr], [], [], 60)[0], "the stop said nothing"
    line = stop.stderr.readline()  # the stop says at once that it waits for the lock, and who holds it
    assert "waiting for run r2" in line and "supervise" in line, line
    (sup.home / "fault-pause").unlink()
    out, err = stop.communicate(timeout=60)
    doc = json.loads(out)
    assert stop.returncode == 0 and doc["result"]["attempt"] == 2 and doc["result"]["verified_dead"], doc
    assert doc["result"]["processes"], doc  # attempt 2's job was alive, and it was stopped
    wait_for(lambda: shim_gone(sup.home, "r2"), what="the shim to end")
    assert len(records(sup.home, "r2")) == 2 and not marked("r2.")
    assert sup.status("r2")["state"] == "exited"


def _flock_waiter(path: Path) -> bool:
    """Some process waits (blocked) for a flock of PATH: /proc/locks lists it with "->"."""
    try:
        ino = path.stat().st_ino
    except OSError:
        return False
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) > 6 and f[1] == "->" and f[2] == "FLOCK" and f[6].rsplit(":", 1)[-1] == str(ino):
            return True
    return False


def test_stop_racing_the_jobs_own_failing_exit_loses_nothing_and_starts_nothing(sup):
    """The job failed by itself; its shim holds the record, writing the exit, when a stop
    comes. The stop waits for the record (its mark and the exit never write over each
    other), then tells the shim to start no next attempt: the stop answered is the last word."""
    sup.env["RUNWARD_FAULT"] = "pause:shim:recording-exit"
    rc, doc = start(sup, "r0", "--restart", "on-failure", "--backoff", "0", "--sh", gate(sup.cwd / "go") + "; exit 3")
    sup.env.pop("RUNWARD_FAULT")
    assert rc == 0, doc
    (sup.cwd / "go").touch()
    wait_for(lambda: _paused(sup.home), what="the shim paused recording the exit")
    stop = sup.popen("stop", "r0", "--grace", "2", "--json")
    lock = sup.home / "runs" / "r0" / "record.lock"
    wait_for(lambda: stop.poll() is not None or _flock_waiter(lock), what="the stop at the record lock")
    (sup.home / "fault-pause").unlink()
    out, _ = stop.communicate(timeout=60)
    doc = json.loads(out)
    assert stop.returncode == 0 and doc["result"]["verified_dead"], doc
    wait_for(lambda: shim_gone(sup.home, "r0"), what="the shim to end")
    r = records(sup.home, "r0")
    assert len(r) == 1, "the stop was answered, and then the run restarted"
    assert r[0]["exit"]["code"] == 3 and r[0]["stop_requested"]["by"] == "cli", r[0]
    assert sup.status("r0")["state"] == "exited" and not marked("r0.")


def test_nan_stops_the_run_within_one_parse_interval(sup, tmp_path):
    interval = 0.5
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    got = tmp_path / "events.jsonl"
    (sup.cwd / "runward.toml").write_text(_example(
        "nanr", f'restart = "always"\nnotify = ["{PY} {recorder} {got}"]\n[runs.nanr.health]\n'
                f'interval = {interval}\nactions = {{ nan = "stop" }}\n'))
    rc, doc = sup.json("start", "nanr", "--env", "TRAIN_NAN_AT=20")
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    seen = wait_for(lambda: "loss nan" in log.read_text() and time.time(), what="the NaN line")
    r = wait_for(lambda: (lambda a: a if a.get("exit") else None)(rec(sup.home, "nanr", 1)), what="the stop")
    act = r["actions"][0]
    assert act["kind"] == "nan" and act["action"] == "stop" and "nan" in act["line"], act
    assert r["stop_requested"]["by"] == "health:stop"
    # acted on within one interval of the line (plus the scan's own time, on a loaded machine),
    # and the verified stop (a child of the shim) marked the record right after
    assert act["at"] - seen <= interval + 1.0, act["at"] - seen
    assert r["stop_requested"]["at"] - act["at"] <= 10.0
    wait_for(lambda: shim_gone(sup.home, "nanr"), what="the shim to end")
    st = sup.status("nanr")
    assert st["state"] == "exited" and len(records(sup.home, "nanr")) == 1, st  # a stop beats restart=always
    assert st["actions"][0]["action"] == "stop" and not marked("nanr.")
    assert "health action: stop on nan" in sup.run("status", "nanr").stdout
    rc, doc = sup.json("watch", "nanr", "--for", "1")  # watch shows the action too
    assert doc["result"]["actions"][0]["kind"] == "nan", doc
    # the alert was notified with its action and the metric values at the time
    alerts = wait_for(lambda: [e for e in map(json.loads, got.read_text().splitlines()) if e["event"] == "alert"]
                      if got.exists() else None, what="the alert's notification")
    assert alerts[0]["alert"]["kind"] == "nan" and alerts[0]["action"] == "stop" and "loss" in alerts[0]["metrics"]


def test_stall_restarts_the_run_then_gives_up_at_the_limit(sup):
    (sup.cwd / "runward.toml").write_text(_example(
        "st", 'max_restarts = 1\nbackoff = "0"\n[runs.st.health]\ninterval = 0.3\nstall = 1\n'
              'actions = { stall = "restart" }\n'))
    rc, doc = sup.json("start", "st", "--env", "TRAIN_STALL_AT=3")
    assert rc == 0, doc
    st = wait_for(lambda: (lambda s: s if s["state"] == "gave_up" else None)(sup.status("st")),
                  timeout=60, what="restart on stall, then gave_up")
    r = records(sup.home, "st")
    assert len(r) == 2 and r[1]["restart"]["reason"] == "health_action", r[1].get("restart")
    acts = r[0]["actions"]  # the first alert acts; any later one is evidence and a notification only
    assert (acts[0]["kind"], acts[0]["action"]) == ("stall", "restart") and {a["action"] for a in acts[1:]} <= {"notify"}
    assert st["actions"][0]["kind"] == "stall"
    wait_for(lambda: shim_gone(sup.home, "st") and not marked("st."), what="nothing of the run left")


def test_bad_policy_is_refused_before_anything_starts(sup):
    rc, doc = sup.json("start", "bad", "--restart", "always", "--backoff", "5m..5s", "--", "sleep", "60")
    assert rc == 2 and "backoff" in doc["error"]["message"], doc
    (sup.cwd / "runward.toml").write_text('[runs.bad]\ncommand = ["sleep", "60"]\n[runs.bad.health]\n'
                                          'actions = { nan = "reboot" }\n')
    rc, doc = sup.json("start", "bad")
    assert rc == 2 and "nan=reboot" in doc["error"]["message"], doc
    assert not (sup.home / "runs" / "bad").exists()


@pytest.mark.parametrize("rule, named", [
    ('min = { tok_s = "14.5K" }', "min.tok_s"),      # --min tok_s=14.5K is refused: so is the file's
    ("max = { loss = true }", "max.loss"),
    ("interval = 0", "interval"),                    # 0: the shim's wait never judged a rule
    ('actions = "stop"', "actions"),
    ('metrics = { lr = "lr=([" }', "metrics.lr"),   # compiled by every scan of the shim's: re.error
    ("stall_after = nan", "stall_after"),            # TOML floats: --stall-after nan/inf is refused,
    ("stall_after = inf", "stall_after"),            # and a stall_after of either never called a stall
    ('stall_after = "1e309"', "stall_after"),        # float() reads it as inf
    ('interval = "1e309"', "interval"),              # inf: the shim's first wait raised OverflowError
    ("stall_afer = 300", "stall_afer (did you mean stall_after?)"),  # ignored: stall_after derived as unset
    ('actons = { nan = "stop" }', "actons (did you mean actions?)"),  # was "a baseline rule has min_ratio"
])
def test_a_health_rule_the_flag_refuses_is_refused_from_runward_toml(sup, rule, named):
    """Today's `min = { tok_s = "14.5K" }` beside an action started (exit 0), then the shim died at
    its first health check: now refused when runward.toml is read, naming file, table and key."""
    acts = "" if "actions" in rule else 'actions = { nan = "stop" }\n'
    (sup.cwd / "runward.toml").write_text(_example("hr", f'[runs.hr.health]\n{rule}\n{acts}'))
    rc, doc = sup.json("start", "hr")
    msg = doc["error"]["message"]
    assert rc == 2 and "runward.toml" in msg and "[runs.hr.health]" in msg and named in msg, doc
    assert not (sup.home / "runs" / "hr").exists() and not marked("hr.")  # nothing started
    rc, doc = sup.json("start", "hr2", "--min", "tok_s=14.5K", "--", "sleep", "60")  # the flag's own refusal
    assert rc == 2 and not (sup.home / "runs" / "hr2").exists(), doc


def test_a_huge_health_interval_leaves_the_shim_alive_and_supervising(sup):
    """interval = 1e300 (finite, so taken) killed the shim at its first wait (sigtimedwait's
    OverflowError): the start failed with the job left running unsupervised. The shim now waits
    in bounded pieces: it lives (/proc), its record has no shim_failed, and stop ends the job."""
    (sup.cwd / "runward.toml").write_text(_example("hi", '[runs.hi.health]\ninterval = 1e300\n'
                                                         'actions = { nan = "stop" }\n'))
    rc, doc = sup.json("start", "hi", "--settle", "2")
    assert rc == 0, doc
    r = rec(sup.home, "hi", 1)
    assert "shim_failed" not in r and alive(r["shim"]["pid"], r["shim"]["start"]), r
    assert alive(r["job"]["pid"], r["job"]["start"])
    rc, doc = sup.json("stop", "hi", "--grace", "2")
    assert rc == 0 and not alive(r["job"]["pid"], r["job"]["start"]), doc
    assert "shim_failed" not in rec(sup.home, "hi", 1)


def test_a_shim_that_fails_is_said_failed_and_fails_its_start(sup):
    """A shim that fails (an exception of its own, here raised at its first health check) was
    said "killed"/orphaned (exit 5); its start now fails (exit 1, ShimFailed) with the error,
    the record keeps it, and status says the shim failed while /proc shows the job alive."""
    (sup.cwd / "runward.toml").write_text(_example("sf", '[runs.sf.health]\ninterval = 0.3\n'
                                                         'actions = { nan = "stop" }\n'))
    sup.env["RUNWARD_FAULT"] = "raise:health:tick"
    rc, doc = sup.json("start", "sf", "--settle", "5")
    del sup.env["RUNWARD_FAULT"]
    assert rc == 1 and doc["error"]["type"] == "ShimFailed", doc
    assert "the shim failed" in doc["error"]["message"] and "raised at health:tick" in doc["error"]["message"], doc
    r = rec(sup.home, "sf", 1)
    assert "RuntimeError" in r["shim_failed"]["error"] and not alive(r["shim"]["pid"], r["shim"]["start"]), r
    assert "health:tick" in Path(r["shim_failed"]["log"]).read_text()  # its traceback, in its own log
    assert alive(r["job"]["pid"], r["job"]["start"])  # the job lives on, unsupervised
    st = sup.status("sf")
    assert st["state"] == "orphaned" and "the shim failed (RuntimeError" in st["note"], st
    text = sup.run("status", "sf").stdout
    assert "shim failed" in text and "killed" not in text, text
    rc, doc = sup.json("stop", "sf", "--grace", "2")
    assert rc == 0 and not alive(r["job"]["pid"], r["job"]["start"]), doc


def test_a_shim_that_fails_after_the_settle_is_said_by_watch_too(sup):
    """A shim failing after its start was verified left the job unsupervised: status said so,
    but `watch` answered "healthy", exit 0, with no word that nothing acts on its rules now."""
    (sup.cwd / "runward.toml").write_text(_example("sw", '[runs.sw.health]\ninterval = 2\n'
                                                         'actions = { nan = "stop" }\n'))
    sup.env["RUNWARD_FAULT"] = "raise:health:tick"
    rc, doc = sup.json("start", "sw", "--settle", "0.3")  # the first tick comes after the settle
    del sup.env["RUNWARD_FAULT"]
    assert rc == 0, doc
    r = wait_for(lambda: (lambda a: a if a.get("shim_failed") else None)(rec(sup.home, "sw", 1)), timeout=30,
                 what="the shim's failure recorded")
    wait_for(lambda: not alive(r["shim"]["pid"], r["shim"]["start"]), what="the shim gone (/proc)")
    assert alive(r["job"]["pid"], r["job"]["start"])  # the job runs on
    rc, w = sup.json("watch", "sw", "--for", "2")
    assert "RuntimeError" in w["result"]["shim_failed"]["error"], w
    text = sup.run("watch", "sw", "--for", "1").stdout
    assert "the shim failed (RuntimeError" in text and "unsupervised" in text, text
    rc, doc = sup.json("stop", "sw", "--grace", "2")
    assert rc == 0 and not alive(r["job"]["pid"], r["job"]["start"]), doc


def test_a_shim_that_fails_in_its_backoff_is_said_failed_and_no_restart_is_promised(sup):
    """The job exited 3, the shim recorded it and failed in its backoff (raise:supervise:backoff):
    status said "exited ... policy: restart on-failure ... restarts so far: 0" without a word
    of the shim's failure, while no restart could come. Now the failure and its consequence
    are said, with the exit as recorded."""
    sup.env["RUNWARD_FAULT"] = "raise:supervise:backoff"
    rc, doc = sup.json("start", "sb", "--settle", "0.3", "--restart", "on-failure", "--backoff", "20s..60s",
                       "--sh", "sleep 1; exit 3")
    del sup.env["RUNWARD_FAULT"]
    assert rc == 0, doc
    r = wait_for(lambda: (lambda a: a if a.get("shim_failed") else None)(rec(sup.home, "sb", 1)), timeout=30,
                 what="the shim's failure recorded")
    wait_for(lambda: not alive(r["shim"]["pid"], r["shim"]["start"]), what="the shim gone (/proc)")
    assert r["exit"]["code"] == 3 and not (sup.home / "runs" / "sb" / "attempts" / "2.json").exists(), r
    st = sup.status("sb")
    assert st["state"] == "exited" and st["exit"]["code"] == 3, st
    assert "supervise:backoff" in st["shim_failed"]["error"] and "no restart" in st["note"], st
    text = sup.run("status", "sb").stdout
    assert "the shim failed (RuntimeError" in text and "no restart" in text, text


def test_restarts_go_on_with_the_cli_killed_and_the_ssh_connection_gone(tmp_path):
    import testbed
    tb = testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"], RUNWARD_RESIDENT="0", RUNWARD_CONTROL_PERSIST="no")
    name = f"sg{uuid.uuid4().hex[:6]}"  # its marker is this test's alone
    home = Path(f"/tmp/rw-sup-{uuid.uuid4().hex[:8]}")  # the hosts share this machine's files and pids
    (tmp_path / "work" / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{home}"\n')
    try:
        p = subprocess.Popen(c.argv("start", name, "--on", "h", "--settle", "30", "--restart", "on-failure",
                                    "--backoff", "1s..10s", "--sh", N + 'sleep 0.5; [ "$n" -le 2 ] && exit 5; '
                                    'exec sleep 600'),
                             cwd=c.cwd, env=c.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        wait_for(lambda: rec(home, name, 1).get("job"), what="attempt 1 running on rw1")
        os.killpg(p.pid, signal.SIGKILL)  # the CLI and its ssh client (no master: ControlPersist=no)
        p.wait()
        wait_for(lambda: not _group_alive(p.pid), what="the CLI's ssh client gone too")
        a3 = wait_for(lambda: rec(home, name, 3).get("job"), timeout=60, what="attempt 3, started by the shim")
        r = records(home, name)
        assert [x["exit"]["code"] for x in r[:2]] == [5, 5] and alive(a3["pid"], a3["start"])
        rc, doc = c.json("stop", name, "--on", "h", "--grace", "3")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        wait_for(lambda: shim_gone(home, name), what="the shim to end")
        assert len(records(home, name)) == 3 and not marked(name + ".")
    finally:
        end_shims(home)
        for pid, s in marked(name + ".").items():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["rm", "-rf", str(home)])


def test_the_policy_decides_by_exit_code_signal_and_window():
    from runward.agent.supervise.policy import DEFAULTS, backoff_delay, decide
    pol = dict(DEFAULTS, restart="on-failure", max_restarts=2, restart_window=60.0,
               no_restart_exit_codes=[3], restart_exit_codes=[1, 137])
    now = 1000.0
    assert decide(pol, {"code": 1}, None, [], now) == (True, "exit code 1")
    assert decide(pol, {"code": None, "signum": 9}, None, [], now)[0]  # SIGKILL counts as 137
    assert decide(pol, {"code": 2}, None, [], now) == (False, "not_a_restart_exit_code")
    assert decide(pol, {"code": 3}, None, [], now) == (False, "no_restart_exit_code")
    assert decide(pol, {"code": 0}, None, [], now) == (False, "succeeded")
    assert decide(pol, {"code": 1}, None, [990.0, 995.0], now) == (False, "gave_up")
    assert decide(pol, {"code": 1}, None, [900.0, 995.0], now)[0]  # one of them is out of the window
    assert decide(pol, {"code": 1}, {"by": "cli"}, [], now) == (False, "stopped")
    assert decide(dict(pol, restart="never"), {"code": 0}, {"by": "health:restart"}, [], now)[0]
    assert [backoff_delay(dict(pol, backoff=[5, 300]), k) for k in (0, 1, 2, 3, 7)] == [5, 5, 10, 20, 300]
