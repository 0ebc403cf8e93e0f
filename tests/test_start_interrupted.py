"""Ctrl-C early in a start over ssh (issue 39, item 2): the far agent goes on without the CLI
(an ssh session's command gets no hangup), so "nothing was started" must never be said of a
start the far side then launches. The CLI waits, bounded, for the far side's own decision, or
says it does not know. Ground truth: the run's processes on the host (rw1 shares this /proc),
by their marker, seconds after the CLI has answered."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import testbed
from conftest import CLI, alive, marked, wait_for


def _far_cli(tmp_path) -> CLI:
    tb = testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    (c.cwd / "runward.toml").write_text(f'[targets.far]\non = "ssh://rw1"\nhome = "{tmp_path}/farhome"\n')
    return c


def _ssh_child(pid: int) -> bool:
    """The CLI has spawned its ssh (the request is on its way): a child of pid running ssh."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
                if int(stat[stat.rfind(")") + 2:].split()[1]) == pid and open(f"/proc/{d}/comm").read().strip() == "ssh":
                    return True
            except (OSError, ValueError, IndexError):
                pass
    return False


def test_ctrl_c_early_in_a_start_over_ssh_says_what_the_target_did(tmp_path):
    c = _far_cli(tmp_path)
    assert c.json("status", "--on", "far")[0] in (0, 4)  # the link and the far agent's cache warm
    names = []
    try:
        for delay in (0.0, 0.03, 0.06, 0.1, 0.15, 0.25):
            name = f"si{uuid.uuid4().hex[:6]}"
            names.append(name)
            p = c.popen("start", name, "--on", "far", "--json", "--settle", "30", "--", "sleep", "300",
                        start_new_session=True)
            wait_for(lambda: _ssh_child(p.pid), timeout=60, what="the CLI's ssh to the target")
            time.sleep(delay)
            os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
            out, err = p.communicate(timeout=60)
            assert p.returncode == 130, (delay, out, err)
            doc = json.loads(out)
            assert doc["error"]["type"] == "Interrupted", doc
            time.sleep(3)  # what the far side went on to do meanwhile
            jobs = {pid: st for pid, st in marked(f"{name}.").items() if alive(pid, st)}
            res = doc.get("result") or {}
            msg = doc["error"]["message"]
            if jobs:
                assert "nothing was started" not in msg and res.get("launched") is not False, (delay, doc, jobs)
                assert res.get("launched") is None or res.get("pid") in jobs, (delay, doc, jobs)
            elif res.get("pid"):
                raise AssertionError(f"said {name} runs (pid {res['pid']}) but no process of it lives: {doc}")
            if res.get("launched") is None and not res.get("pid"):
                assert "not known" in msg and f"runward status {name}" in doc["error"]["hint"], doc
    finally:
        for name in names:
            c.run("stop", name, "--on", "far", "--grace", "2")
    for name in names:
        wait_for(lambda: not marked(f"{name}."), what=f"{name} stopped")


def test_ctrl_c_while_the_target_waits_gives_its_refusal_as_its_own_word(cli, tmp_path):
    """The start waits on the target for the run's lock (a stop in its grace holds it); Ctrl-C
    comes; the target then refuses (lock timeout): the CLI says so, from the target's reply,
    and no attempt 2 exists. Ground truth: the attempt records on disk, /proc by marker."""
    import subprocess
    rc, doc = cli.json("start", "lr", "--settle", "0.2", "--sh", "trap '' TERM; exec sleep 300")
    assert rc == 0, doc
    record = cli.home / "runs" / "lr" / "attempts" / "1.json"
    stopper = cli.popen("stop", "lr", "--grace", "30")
    errfile = tmp_path / "start.err"
    try:
        wait_for(lambda: "stop_requested" in record.read_text(), what="the stop to hold the run")
        with open(errfile, "w") as err:
            proc = subprocess.Popen(cli.argv("start", "lr", "--json", "--replace", "--lock-timeout", "3", "--",
                                             "sleep", "300"), cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE,
                                    stderr=err, text=True, start_new_session=True)
        wait_for(lambda: "waiting for run lr" in errfile.read_text(), what="the start to wait for the lock")
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        doc = json.loads(out)
        assert proc.returncode == 130 and doc["error"]["type"] == "Interrupted", doc
        assert doc["result"] == {"name": "lr", "launched": False, "seen_by": "reply"}, doc
        assert "did not start lr" in doc["error"]["message"] and "nothing was started" in doc["error"]["message"], doc
    finally:
        for pid, st in marked("lr.").items():
            if alive(pid, st):
                os.kill(pid, signal.SIGKILL)
        stopper.communicate(timeout=60)
    assert not marked("lr.2") and not (cli.home / "runs" / "lr" / "attempts" / "2.json").exists()


def test_sigterm_or_sighup_in_a_start_says_what_the_target_did_as_ctrl_c_does(tmp_path):
    """`timeout` or a process manager (SIGTERM) and a closed terminal (SIGHUP) ended the CLI
    at once: no word, no --json document, exit 143/129, while the far side launched the job.
    Each is now taken as a Ctrl-C: exit 130 and the target's word. Ground truth: the run's
    processes by marker, seconds later."""
    c = _far_cli(tmp_path)
    assert c.json("status", "--on", "far")[0] in (0, 4)
    names = []
    try:
        for sig, delay in ((signal.SIGTERM, 0.0), (signal.SIGHUP, 0.1), (signal.SIGTERM, 0.6)):
            name = f"sg{uuid.uuid4().hex[:6]}"
            names.append(name)
            p = c.popen("start", name, "--on", "far", "--json", "--settle", "30", "--", "sleep", "300",
                        start_new_session=True)
            wait_for(lambda: _ssh_child(p.pid), timeout=60, what="the CLI's ssh to the target")
            time.sleep(delay)
            os.kill(p.pid, sig)  # the CLI alone, as `timeout` or a manager sends it
            out, err = p.communicate(timeout=60)
            assert p.returncode == 130 and out, (sig, delay, p.returncode, out, err)
            doc = json.loads(out)
            assert doc["error"]["type"] == "Interrupted", doc
            time.sleep(3)
            jobs = {pid: st for pid, st in marked(f"{name}.").items() if alive(pid, st)}
            res = doc.get("result") or {}
            if jobs:
                assert "nothing was started" not in doc["error"]["message"] and res.get("launched") is not False, doc
                assert res.get("launched") is None or res.get("pid") in jobs, (doc, jobs)
            else:
                assert not res.get("pid"), (doc, jobs)
    finally:
        for name in names:
            c.run("stop", name, "--on", "far", "--grace", "2")
    for name in names:
        wait_for(lambda: not marked(f"{name}."), what=f"{name} stopped")


def test_a_link_that_ends_during_the_wait_for_the_targets_word_is_not_its_agents_end(tmp_path):
    """Ctrl-C while the far agent waits on the run's lock; then the CLI's ssh ends (a dropped
    link, a killed client) before the far side has said anything. The CLI read that EOF as
    its agent's end and said 'the target's agent ended without launching it, and nothing of
    it runs there'; the far agent went on, and once the lock was free launched the job. Now
    an ssh that ended by its own failure or a signal is the link's end: not known
    (launched: null). Ground truth: the job's process by marker after the lock is let go."""
    import fcntl
    c = _far_cli(tmp_path)
    assert c.json("status", "--on", "far")[0] in (0, 4)
    name = f"sl{uuid.uuid4().hex[:6]}"
    runs = tmp_path / "farhome" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp_path / "farhome", 0o700)
    fd = os.open(runs / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another verb holding the run: the far start waits
    try:
        p = c.popen("start", name, "--on", "far", "--json", "--lock-timeout", "60", "--settle", "1", "--",
                    "sleep", "300", start_new_session=True)
        wait_for(lambda: _ssh_child(p.pid), timeout=60, what="the CLI's ssh to the target")
        time.sleep(3)  # the far agent is waiting for the lock
        ssh = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(int(d)) == p.pid]
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.5)
        for pid in ssh:
            os.kill(pid, signal.SIGKILL)  # the link ends before the far side says a word
        out, err = p.communicate(timeout=60)
        doc = json.loads(out)
        assert p.returncode == 130 and doc["error"]["type"] == "Interrupted", (doc, err)
    finally:
        os.close(fd)  # the lock is free: the far agent goes on
    try:
        time.sleep(5)
        jobs = {pid: st for pid, st in marked(f"{name}.").items() if alive(pid, st)}
        msg, res = doc["error"]["message"], doc.get("result") or {}
        assert jobs, "the far agent, left waiting for the lock, launched nothing"  # what is to be said
        assert "nothing of it runs" not in msg and "nothing was started" not in msg, (doc, jobs)
        assert res.get("launched", False) is None or res.get("pid") in jobs, (doc, jobs)
    finally:
        c.run("stop", name, "--on", "far", "--grace", "2")
    wait_for(lambda: not marked(f"{name}."), what=f"{name} stopped")


def _parent(pid: int) -> int | None:
    try:
        stat = open(f"/proc/{pid}/stat").read()
        return int(stat[stat.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_the_wait_for_the_targets_word_survives_a_gone_terminal_and_a_second_ctrl_c_at_its_start(monkeypatch):
    """The wait's first lines (its notice on stderr) ran outside its guard: a second Ctrl-C
    there escaped as a bare KeyboardInterrupt (no decision: the start then asked status and
    could say 'nothing of it runs' of a launch still to come), and a terminal gone by SIGHUP
    (stderr's write: EIO) was an OSError traceback. Now the first is 'gave up' (not known)
    and the second waits on for the target's word. A real child stands for the far side."""
    import errno
    import sys as _sys
    from runward.transport import exchange

    class Gone:
        def __init__(self, exc):
            self.exc = exc

        def write(self, _):
            raise self.exc

        def flush(self):
            pass

    line = json.dumps({"event": {"started": {"attempt": 1, "pid": 42}}})
    for exc, want in ((OSError(errno.EIO, "Input/output error"), {"event": {"started": {"attempt": 1, "pid": 42}}}),
                      (KeyboardInterrupt(), {"gave_up": True})):
        proc = exchange.Spawned(["sh", "-c", f"sleep 0.3; echo '{line}'; exec sleep 30"])
        seen: list[dict] = []
        got = exchange.Replies(lambda ev: seen.append(ev) if "started" in ev else None)
        monkeypatch.setattr(_sys, "stderr", Gone(exc))
        try:
            assert exchange._await_decision(proc, got, seen) == want
        finally:
            monkeypatch.undo()
            proc.kill()
            proc.wait()
