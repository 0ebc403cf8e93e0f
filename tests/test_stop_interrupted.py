"""A stop whose CLI is interrupted (Ctrl-C to its process group, a dropped link) still goes on to
its verified end on the target, locally and over ssh, and says so; status during and after a
stop's grace says what the stop is doing (issue 25). Real processes; ground truth from /proc and
the records."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from conftest import fresh_name, wait_for

GRACE = 3.0
TERM_IGNORING = 'trap "" TERM; exec sleep 600'  # sleep inherits TERM ignored: only KILL ends it


def _record(home: Path, name: str, n: int = 1) -> dict:
    try:
        return json.loads((home / "runs" / name / "attempts" / f"{n}.json").read_text())
    except (OSError, ValueError):
        return {}


def _interrupt_stop(c, name: str, far_home: Path, *where: str, json_mode: bool = False):
    """`runward stop NAME` in a process group of its own, SIGINT to that whole group (a
    terminal's Ctrl-C) once the record shows stop_requested; (rc, stdout, stderr)."""
    import signal
    import subprocess
    args = ["stop", name, *where, "--grace", str(GRACE)] + (["--json"] if json_mode else [])
    p = subprocess.Popen(c.argv(*args), cwd=c.cwd, env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        wait_for(lambda: _record(far_home, name).get("stop_requested") or p.poll() is not None,
                 what="the stop to mark stop_requested")
        assert p.poll() is None, "the stop ended before it could be interrupted: %s" % (p.communicate(),)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, err


def _check_stop_went_on(c, name: str, far_home: Path, job: dict, *where: str) -> None:
    from conftest import alive
    # TERM is ignored: only the agent's KILL after the grace ends it, with nobody waiting
    wait_for(lambda: not alive(job["pid"], job["start"]), timeout=GRACE + 15,
             what="the TERM-ignoring job dead after its grace, the CLI gone")
    rec = wait_for(lambda: (_record(far_home, name).get("stopped") or {}).get("verified_dead") and
                   _record(far_home, name), timeout=15, what="the stop's verified end in the run's record")
    assert rec["exit"] and rec["stopped"]["survivors"] == 0, rec
    rc, doc = c.json("status", name, *where)
    assert rc == 0, doc
    st = doc["result"]["runs"][0]
    assert st["state"] == "exited" and st["stopped"]["verified_dead"], st
    assert "stopped" in c.run("status", name, *where).stdout


def _start_term_ignoring(c, name: str, *where: str) -> dict:
    rc, doc = c.json("start", name, *where, "--settle", "0.3", "--sh", TERM_IGNORING)
    assert rc == 0, doc
    return {"pid": doc["result"]["pid"], "start": doc["result"]["start_time"]}


def test_ctrl_c_during_a_local_stop_lets_the_stop_reach_its_verified_end(cli):
    name = fresh_name("is")
    job = _start_term_ignoring(cli, name)
    rc, out, err = _interrupt_stop(cli, name, cli.home)
    assert rc == 130, (out, err)
    assert "the stop goes on on the target" in err and f"runward status {name}" in err, err
    _check_stop_went_on(cli, name, cli.home, job)


def test_ctrl_c_during_a_stop_over_ssh_says_so_in_one_json_document_and_the_stop_goes_on(tmp_path):
    import shutil
    import testbed
    from conftest import CLI
    tb = testbed.require("ssh")
    (tmp_path / "work").mkdir()
    c = CLI(tmp_path / "home", tmp_path / "work")
    c.env = testbed.env(tb, c.env)
    c.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"], RUNWARD_RESIDENT="0")
    name = fresh_name("iss")
    far_home = Path(f"/tmp/rw-istop-{uuid.uuid4().hex[:8]}")  # the hosts share this machine's files and pids
    (tmp_path / "work" / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{far_home}"\n')
    try:
        job = _start_term_ignoring(c, name, "--on", "h")
        rc, out, err = _interrupt_stop(c, name, far_home, "--on", "h", json_mode=True)
        assert rc == 130, (out, err)
        doc = json.loads(out)  # exactly one document
        assert doc["ok"] is False and doc["error"]["type"] == "Interrupted", doc
        assert "the stop goes on on the target" in doc["error"]["message"], doc
        assert f"runward status {name}" in doc["error"]["message"] + doc["error"].get("hint", ""), doc
        _check_stop_went_on(c, name, far_home, job, "--on", "h")
    finally:
        from conftest import marked
        import signal
        for pid in marked(name + "."):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(far_home, ignore_errors=True)


def stop_agent(holder: dict) -> int | None:
    """The holder's pid if /proc shows it alive with the start time it wrote (the stop's agent)."""
    from conftest import alive
    return holder["pid"] if alive(holder["pid"], holder["start"]) else None


def test_status_during_a_stops_grace_says_the_stop_is_under_way_and_when_its_kill_comes(cli):
    """A stop waiting out its grace for a TERM-ignoring job: status said only "running" (the
    JSON had stop_requested, the text nothing). The stop notes its signal and grace in the
    run lock's holder (as a start's gpu_wait); status's `stopping` and its text line say it
    while that stop lives, and nothing once it has ended."""
    import subprocess
    name = fresh_name("sg")
    job = _start_term_ignoring(cli, name)
    stop = subprocess.Popen(cli.argv("stop", name, "--grace", "10"), cwd=cli.cwd, env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = cli.home / "runs" / f".{name}.lock"  # the holder record, read as it is
        holder = wait_for(lambda: (lambda h: h if h.get("stopping") else None)(json.loads(lock.read_text() or "{}")),
                          what="the stop to signal")
        from conftest import alive
        assert alive(job["pid"], job["start"]), "TERM is ignored: the job lives through the grace"
        rc, doc = cli.json("status", name)
        st = doc["result"]["runs"][0]
        assert st["state"] == "running" and st["stopping"]["signal"] == "SIGTERM", st
        assert st["stopping"]["grace_s"] == 10 and st["stopping"]["pid"] == holder["pid"] == stop_agent(holder), st
        assert st["stopping"]["attempt"] == st["attempt"], st
        text = cli.run("status", name).stdout
        assert "  stopping: SIGTERM sent " in text and "; SIGKILL at 10s if still alive" in text, text
        out, err = stop.communicate(timeout=60)
        assert stop.returncode == 0, (out, err)
    finally:
        if stop.poll() is None:
            stop.kill()
            stop.wait()
    st = cli.status(name)
    assert "stopping" not in st and st["stopped"]["verified_dead"], st
    assert "stopping:" not in cli.run("status", name).stdout


def test_status_after_a_stops_signalling_says_no_stop_under_way_while_the_stop_finishes(cli):
    """The job ended at TERM, but the stop still held the lock (waiting up to 10 s for the
    shim's record, or for the GPUs' release): status said `stopping: SIGTERM sent 6s ago ...;
    its 2s grace is over: SIGKILL sent, waiting for the processes to end` of a job that got
    no KILL and was dead. Here the stop's agent is held at its `stop:dead` fault point (after
    its signalling, the lock still held) while status is asked."""
    import subprocess
    name = fresh_name("sd")
    rc, doc = cli.json("start", name, "--settle", "0.3", "--", "sleep", "600")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    gate = cli.home / "fault-pause"
    stop = subprocess.Popen(cli.argv("stop", name, "--grace", "1", "--json"), cwd=cli.cwd,
                            env=dict(cli.env, RUNWARD_FAULT="pause:stop:dead"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(gate.exists, what="the stop held after its signalling")
        assert not os.path.exists(f"/proc/{job}") or open(f"/proc/{job}/stat").read().split(") ")[1][0] == "Z"
        assert stop.poll() is None, stop.communicate()
        rc, doc = cli.json("status", name)
        st = doc["result"]["runs"][0]
        assert "stopping" not in st, st
        assert "SIGKILL sent" not in cli.run("status", name).stdout
    finally:
        gate.unlink(missing_ok=True)
        out, err = stop.communicate(timeout=60)
    res = json.loads(out)["result"]
    assert res["verified_dead"] and res["processes"][0]["signals"] == ["SIGTERM"], res


def test_a_local_stop_killed_mid_grace_is_not_said_to_go_on(cli):
    """The local agent is the stop: killed -9 in its grace, the CLI said 'the stop had begun on
    the target and goes on there to its verified end ..., which it records' while /proc showed
    no stop left and the TERM-ignoring job alive (no KILL would come, no end recorded)."""
    import signal
    import subprocess
    from conftest import alive
    name = fresh_name("sk")
    job = _start_term_ignoring(cli, name)
    stop = subprocess.Popen(cli.argv("stop", name, "--grace", "30", "--json"), cwd=cli.cwd, env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = cli.home / "runs" / f".{name}.lock"
        holder = wait_for(lambda: (lambda h: h if h.get("stopping") else None)(json.loads(lock.read_text() or "{}")),
                          what="the stop to signal")
        os.kill(holder["pid"], signal.SIGKILL)
        out, err = stop.communicate(timeout=30)
        assert alive(job["pid"], job["start"]), "TERM ignored, the stop gone: the job lives"
        doc = json.loads(out)
        assert stop.returncode == 3 and not doc["error"]["details"].get("stop_goes_on"), doc
        assert "goes on there" not in doc["error"]["message"], doc
        assert f"runward stop {name}" in doc["error"]["hint"], doc
    finally:
        if stop.poll() is None:
            stop.kill()
            stop.wait()
        cli.run("stop", name, "--grace", "0")
