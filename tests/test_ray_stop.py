"""A Ray run's stop keeps runward's --stop-signal and --grace (Ray's own stop sends SIGTERM
and KILLs 3 s later), its fates are true, and it ends every process of the driver's session;
a Ray run's end, outliving processes, its times, watch and a request no node can hold read as
on every target (issue #41's review). Against the real cluster (scripts/ray-testbed up);
ground truth from /proc, the log file and Ray's /api/jobs."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from conftest import alive, marked, read_stat, wait_for
from helpers_ray import ray_job, rcli, tb  # noqa: F401 (rcli, tb: the fixtures)

# a driver whose TERM and INT handler saves for SAVE seconds, then exits 0; each signal is logged
SAVER = ("import signal, sys, time\n"
         "def h(s, f):\n"
         "    print('got', signal.Signals(s).name, flush=True); time.sleep(float(sys.argv[1]))\n"
         "    print('saved', flush=True); sys.exit(0)\n"
         "signal.signal(signal.SIGTERM, h); signal.signal(signal.SIGINT, h)\n"
         "print('ready', flush=True)\n"
         "while True: time.sleep(1)\n")


def _status_field(pid: int, field: str) -> str:
    for ln in open(f"/proc/{pid}/status"):
        if ln.startswith(field + ":"):
            return ln.split()[1]
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _died_at(pid: int, start: int) -> dict:
    """A thread that notes (monotonic) when PID dies, read from /proc: the ground truth of how
    long the stop let it live."""
    out: dict = {}

    def watch():
        while alive(pid, start):
            time.sleep(0.02)
        out["t"] = time.monotonic()
    th = threading.Thread(target=watch, daemon=True)
    th.start()
    out["thread"] = th
    return out


def test_stop_keeps_runwards_grace_and_signal_and_says_true_fates(rcli, tb, tmp_path):
    saver = tmp_path / "saver.py"
    saver.write_text(SAVER)
    # a TERM handler that saves for 5 s, past Ray's 3 s: runward's grace (20 s) lets it finish, once
    rc, doc = rcli.json("start", "s1", "--on", "ray://local", "--settle", "1", "--grace", "20", "--",
                        sys.executable, str(saver), "5")
    assert rc == 0, doc
    drv = doc["result"]["driver"]
    rc, doc = rcli.json("stop", "s1")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    log = (rcli.home / "runs" / "s1" / "log").read_text()
    assert log.count("got SIGTERM") == 1 and "saved" in log and "got SIGINT" not in log, log
    fate = next(p for p in doc["result"]["processes"] if p["pid"] == drv["pid"])
    assert fate["fate"] == "exited_after_SIGTERM" and fate["exited_after"] >= 4.5, fate
    assert ray_job(tb, doc["result"]["submission_id"])["status"] not in ("PENDING", "RUNNING")
    assert (doc["result"]["state"], doc["result"]["exit"]["stopped_by"]) == ("stopped", "runward"), doc["result"]

    # --stop-signal INT reaches the driver: its mask (inherited from Ray's worker) is cleared
    rc, doc = rcli.json("start", "s2", "--on", "ray://local", "--settle", "1", "--stop-signal", "INT", "--",
                        sys.executable, str(saver), "0")
    assert rc == 0, doc
    pid = doc["result"]["driver"]["pid"]
    assert int(_status_field(pid, "SigBlk"), 16) & 2 == 0, "SIGINT is not blocked in the driver"
    assert open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[1] == str(saver).encode(), "the command itself"
    rc, doc = rcli.json("stop", "s2")
    assert rc == 0, doc
    log = (rcli.home / "runs" / "s2" / "log").read_text()
    assert "got SIGINT" in log and "SIGTERM" not in log, log
    assert next(p for p in doc["result"]["processes"] if p["pid"] == pid)["fate"] == "exited_after_SIGINT"

    # a job that ignores TERM lives through the whole grace (6 s), not Ray's 3 s, and is said killed
    rc, doc = rcli.json("start", "s3", "--on", "ray://local", "--settle", "1", "--grace", "6", "--sh",
                        "trap '' TERM; exec sleep 300")
    assert rc == 0, doc
    drv = doc["result"]["driver"]
    died = _died_at(drv["pid"], drv["start"])
    t0 = time.monotonic()
    rc, doc = rcli.json("stop", "s3")
    died["thread"].join(5)
    assert rc == 0 and died["t"] - t0 >= 5.5, (died, doc)
    fate = next(p for p in doc["result"]["processes"] if p["pid"] == drv["pid"])
    assert fate["fate"] == "killed" and fate["signals"] == ["SIGTERM", "SIGKILL"], fate


def test_stop_ends_a_child_of_the_drivers_session_that_cleared_its_environment(rcli, tb):
    rc, doc = rcli.json("start", "s4", "--on", "ray://local", "--settle", "1", "--sh",
                        "(env -i sleep 921 &); exec sleep 300")
    assert rc == 0, doc
    drv = doc["result"]["driver"]

    def find():
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and open(f"/proc/{d}/cmdline", "rb").read() == b"sleep\x00921\x00":
                    # the session Ray made for the entry, the job's too (core/rayreaper.py)
                    if int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[3]) == drv["session"]["pid"]:
                        return int(d)
            except OSError:
                continue
    child = wait_for(find, timeout=20, what="the env -i child in the driver's session")
    assert child not in marked("s4.1"), "it carries no marker"
    start = read_stat(child)[1]
    rc, doc = rcli.json("stop", "s4")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(child, start), "the driver's session member is ended"
    from runward.agent.ops.ray import VERIFIED_BY
    assert doc["result"]["verified_by"] == VERIFIED_BY and "subreaper" in VERIFIED_BY and "RAY_JOB_ID" in VERIFIED_BY
    assert any(p["pid"] == child and p["fate"].startswith("exited_after_SIG") for p in doc["result"]["processes"])


def _escapee(tok: str) -> int:
    """The pid of the process whose argv is `sleep TOK` (ground truth from /proc)."""
    want = b"sleep\x00" + tok.encode() + b"\x00"

    def find():
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and open(f"/proc/{d}/cmdline", "rb").read() == want:
                    return int(d)
            except OSError:
                continue
    return wait_for(find, timeout=20, what=f"the escapee sleep {tok}")


def test_an_env_i_setsid_escapee_is_the_entrys_and_a_verified_stop_ends_it(rcli, tb):
    """A child that clears its environment and leaves the session carries nothing of the run;
    orphaned, it comes to the entry's subreaper (core/rayreaper.py), not pid 1: the stop ends it."""
    tok = "3600.%06d" % (os.getpid() % 1000000)
    rc, doc = rcli.json("start", "e1", "--on", "ray://local", "--settle", "1", "--sh",
                        f"env -i setsid sh -c '(sleep {tok} &)'; exec sleep 300")
    assert rc == 0, doc
    drv = doc["result"]["driver"]
    child = _escapee(tok)
    start = read_stat(child)[1]
    assert child not in marked("e1.1"), "it carries no marker"
    sid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[3])  # noqa: E731
    assert sid(child) != sid(drv["pid"]), "it left the job's session"
    entry = drv.get("session")
    rc, doc = rcli.json("stop", "e1")
    left = alive(child, start)
    if left:  # nothing of runward's would end it
        os.kill(child, 9)
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not left, "the env -i setsid escapee is ended"
    assert any(p["pid"] == child and p["fate"].startswith("exited_after_SIG") for p in doc["result"]["processes"])
    assert (doc["result"]["state"], doc["result"]["exit"]["stopped_by"]) == ("stopped", "runward"), doc["result"]
    # the driver runward reported is the job itself (stacks, gpus and paused read it), under the entry,
    # which leads the session Ray made
    assert entry["pid"] != drv["pid"] and entry["start"] <= drv["start"], drv


def test_an_env_i_setsid_escapee_outliving_the_driver_is_stray_and_stop_ends_it(rcli, tb):
    """The shim's rule: what the subreaper adopted and nothing else finds keeps it alive past the
    job's end, so status says stray and stop ends it; Ray records the job's own exit at once."""
    tok = "3601.%06d" % (os.getpid() % 1000000)
    rc, doc = rcli.json("start", "e2", "--on", "ray://local", "--settle", "1", "--sh",
                        f"env -i setsid sh -c '(sleep {tok} &)'; exit 3")
    child = _escapee(tok)
    start = read_stat(child)[1]
    assert rc == 5 and doc["result"]["state"] == "stray", doc
    assert f"pid {child} sleep {tok}" in doc["error"]["message"], doc
    assert ray_job(tb, doc["result"]["submission_id"])["driver_exit_code"] == 3
    st = rcli.status("e2")
    assert st["state"] == "stray" and child in st["stray_processes"], st
    rc, doc = rcli.json("stop", "e2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(child, start) and marked("e2.1") == {}


def test_rays_driver_exit_code_is_the_jobs_through_the_entry(rcli, tb, tmp_path):
    """The entry exits as its job did: Ray's driver_exit_code for exits 0 and 1, a missing
    program (127) and a death by a signal (-15) reads as it did with the command exec'd."""
    cases = [("x0", ["--", "true"], 0), ("x1", ["--", "false"], 1),
             ("x127", ["--sh", f"exec {tmp_path}/no-such-program"], 127), ("xsig", ["--sh", "kill -TERM $$"], -15)]
    for name, cmd, code in cases:
        rc, doc = rcli.json("start", name, "--on", "ray://local", "--settle", "1", *cmd)
        assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc
        info = ray_job(tb, doc["result"]["submission_id"])
        assert info["driver_exit_code"] == code and doc["result"]["exit"]["exit_code"] == code, (name, info, doc)


def test_processes_outliving_the_driver_are_stray_named_exit_5_as_on_every_target(rcli, tb):
    rc, doc = rcli.json("start", "s5", "--on", "ray://local", "--settle", "1", "--sh",
                        "setsid sleep 907 & (sleep 908 &); exit 0")
    left = marked("s5.1")
    assert rc == 5 and doc["error"]["type"] == "NotVerified" and doc["result"]["state"] == "stray", doc
    assert len(left) == 2 and all(f"pid {p} sleep 90" in doc["error"]["message"] for p in left), (left, doc)
    assert "`runward stop s5` ends them" in doc["error"]["hint"], doc
    st = rcli.status("s5")
    assert (st["state"], st["stray_processes"]) == ("stray", sorted(left)), st
    rc, doc = rcli.json("stop", "s5")
    assert rc == 0 and marked("s5.1") == {}, doc


def test_watch_and_history_say_a_ray_runs_end_as_ray_dated_it(rcli, tb, tmp_path):
    gate = tmp_path / "go"
    rc, doc = rcli.json("start", "s6", "--on", "ray://local", "--settle", "1", "--sh",
                        f"until [ -e '{gate}' ]; do sleep 0.05; done; echo done")
    assert rc == 0, doc
    sid = doc["result"]["submission_id"]
    gate.touch()
    info = wait_for(lambda: (lambda j: j if j["status"] == "SUCCEEDED" else None)(ray_job(tb, sid)),
                    timeout=30, what="Ray's SUCCEEDED")
    # watch is the first to look after the end: it asks the launcher, as status does
    rc, doc = rcli.json("watch", "s6", "--for", "5")
    assert doc["result"]["ended"] and doc["result"]["alert"]["detail"] == "the job exited with code 0", doc
    # without --on, status names the attempt's target, as with it
    said = [rcli.json("status", "s6", *on) for on in ((), ("--on", "ray://local"))]
    assert [(rc, doc["target"]) for rc, doc in said] == [(0, "ray://local")] * 2, said
    rc, doc = rcli.json("history", "s6")
    row = doc["result"]["attempts"][0]
    # Ray's own times (ms), which history keeps to 0.01 s and rounds to 0.1 s: at a .x5 the two
    # roundings may part by one tenth, never more
    assert abs(row["ran_s"] - (info["end_time"] - info["start_time"]) / 1000) <= 0.05 + 0.011, (row, info)
    assert row["exit"]["at"] == info["end_time"] / 1000, row


def test_a_paused_driver_is_said_paused_and_its_stop_resumes_it_so_its_handler_runs(rcli, tb, tmp_path):
    """Ctrl-Z or a debugger's SIGSTOP on a Ray driver: status says paused, naming it, as on
    every target; the stop resumes it after its signal, so the TERM handler saves (the log)."""
    saver = tmp_path / "saver.py"
    saver.write_text(SAVER)
    rc, doc = rcli.json("start", "p1", "--on", "ray://local", "--settle", "1", "--grace", "20", "--",
                        sys.executable, str(saver), "1")
    assert rc == 0, doc
    drv = doc["result"]["driver"]
    os.kill(drv["pid"], 19)  # SIGSTOP
    wait_for(lambda: read_stat(drv["pid"])[0] == "T", timeout=10, what="the driver stopped (state T)")
    st = rcli.status("p1")
    assert st["state"] == "running" and drv["pid"] in st["paused"]["pids"] and st["paused"]["job"], st
    rc, doc = rcli.json("stop", "p1")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(drv["pid"], drv["start"])
    log = (rcli.home / "runs" / "p1" / "log").read_text()
    assert "got SIGTERM" in log and "saved" in log, log


def _driver_seen(rcli, name: str):
    """The driver's pid once the start has recorded it (and said so to the CLI)."""
    def seen():
        try:
            att = json.loads((rcli.home / "runs" / name / "attempts" / "1.json").read_text())
        except (OSError, ValueError):
            return None
        return ((att.get("ray") or {}).get("driver") or {}).get("pid")
    return wait_for(seen, timeout=60, what=f"{name}'s driver recorded")


def test_a_stop_during_the_starts_settle_is_said_as_the_stops_as_on_local(rcli, tb):
    """`runward stop` lands while the start watches its settle: the start says so in local's
    words (exit 1, Cancelled), and status and history say stopped by runward, as they do of
    the same stop after the settle. Ground truth: /proc, Ray's record."""
    p = rcli.popen("start", "s7", "--on", "ray://local", "--settle", "60", "--json", "--", "sleep", "300")
    try:
        drv = _driver_seen(rcli, "s7")
        rc, doc = rcli.json("stop", "s7")
        assert rc == 0 and doc["result"]["verified_dead"] and not alive(drv), doc
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    start = json.loads(out)
    assert (p.returncode, start["error"]["type"]) == (1, "Cancelled"), (out, err)
    assert start["error"]["message"].startswith(
        "start of s7 cancelled: stopped by `runward stop` during the settle period ("), start
    assert ray_job(tb, start["result"]["submission_id"])["status"] not in ("PENDING", "RUNNING")
    st = rcli.status("s7")
    assert (st["state"], st["stopped_by"]) == ("stopped", "runward"), st
    rc, doc = rcli.json("history", "s7")
    row = doc["result"]["attempts"][0]
    assert (row["state"], row["ray"]["stopped_by"]) == ("stopped", "runward"), row


def test_ctrl_c_of_a_start_mid_settle_names_the_job_its_driver_and_how_to_stop_it(rcli, tb):
    """A real SIGINT to the CLI's process group while the start watches the settle: the job
    goes on (its agent has a session of its own), and the CLI says it was submitted, its
    submission id, the driver's pid, and how to check and stop it (tests/test_start_interrupted.py)."""
    p = rcli.popen("start", "s8", "--on", "ray://local", "--settle", "60", "--json", "--", "sleep", "300",
                   start_new_session=True)
    try:
        drv = _driver_seen(rcli, "s8")
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
        out, err = p.communicate(timeout=60)
        doc = json.loads(out)
        assert (p.returncode, doc["error"]["type"]) == (130, "Interrupted"), (out, err)
        msg, hint = doc["error"]["message"], doc["error"]["hint"]
        sid = doc["result"]["submission_id"]
        assert doc["result"]["pid"] == drv and f"pid {drv}" in msg and sid in msg, doc
        assert "no process of it seen yet" not in msg and "running" in msg, doc
        assert "runward status s8" in hint and "runward stop s8" in hint, doc
        assert alive(drv) and ray_job(tb, sid)["status"] == "RUNNING", "the job goes on without the CLI"
    finally:
        p.kill()
        rc, doc = rcli.json("stop", "s8")
    assert rc == 0 and marked("s8.1") == {}, doc


def _submitted(rcli, name: str) -> str:
    """The job's submission id once the start has recorded it (before Ray runs the job)."""
    def seen():
        try:
            att = json.loads((rcli.home / "runs" / name / "attempts" / "1.json").read_text())
        except (OSError, ValueError):
            return None
        return (att.get("ray") or {}).get("submission_id")
    return wait_for(seen, timeout=60, what=f"{name}'s submission recorded")


def test_a_stop_before_ray_ran_the_job_is_said_in_rays_words(rcli, tb):
    """A stop as soon as the job is submitted: Ray says STOPPED with no driver_exit_code, and
    the cancelled start says so in Ray's words, not "exit code None"."""
    p = rcli.popen("start", "s10", "--on", "ray://local", "--settle", "60", "--json", "--", "sleep", "300")
    try:
        sid = _submitted(rcli, "s10")
        rc, doc = rcli.json("stop", "s10")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    info = ray_job(tb, sid)
    assert (info["status"], info.get("driver_exit_code")) == ("STOPPED", None), info  # the case itself
    start = json.loads(out)
    assert (p.returncode, start["error"]["type"]) == (1, "Cancelled"), (out, err)
    assert start["error"]["message"] == ("start of s10 cancelled: stopped by `runward stop` during the settle "
                                         "period (Ray: STOPPED, no exit code)"), start


def test_a_start_interrupted_before_it_saw_the_driver_has_it_found_by_status(rcli, tb):
    """Ctrl-C as soon as the job is submitted, before any process of it was seen: the job goes
    on; status finds its driver as start does, keeps it in the attempt once, and says a running
    run with its pid and Ray's start time (the stall clock runs from it), no survivors; stacks
    names the driver. Ground truth: /proc, Ray's record."""
    tok = "3602.%06d" % (os.getpid() % 1000000)
    p = rcli.popen("start", "s9", "--on", "ray://local", "--settle", "60", "--json", "--", "sleep", tok,
                   start_new_session=True)
    try:
        sid = _submitted(rcli, "s9")
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        out, err = p.communicate(timeout=60)
        doc = json.loads(out)
        assert (p.returncode, doc["result"]["pid"]) == (130, None), (out, err)
        assert "no process of it seen yet" in doc["error"]["message"], doc  # the case itself
        pid = _escapee(tok)  # the job's process, once Ray runs it
        start = read_stat(pid)[1]
        st = rcli.status("s9")
        assert (st["state"], st["pid"]) == ("running", pid) and not st.get("survivors"), st
        assert st["started_at"] == ray_job(tb, sid)["start_time"] / 1000, st
        att = json.loads((rcli.home / "runs" / "s9" / "attempts" / "1.json").read_text())
        assert (att["pid"], att["ray"]["driver"]["start"], att["ray"]["driver"]["adopted"]) == (pid, start, True), att
        assert st["ray"]["driver"]["session"]["pid"] != pid, st  # the entry leads the job's session
        again = rcli.status("s9")
        assert (again["pid"], again["started_at"]) == (pid, st["started_at"]), again
        assert again["stall"]["no_step_yet"]["for_s"] > 0, again  # the run's clock runs from Ray's start
        rc, doc = rcli.json("stacks", "s9")
        assert doc["result"].get("ray_driver") == pid and f"the job's driver: pid {pid}" in doc["result"]["summary"], doc
        assert next(q for q in doc["result"]["procs"] if q["pid"] == pid)["ray"] == {"kind": "driver"}, doc
    finally:
        p.kill()
        rc, doc = rcli.json("stop", "s9")
    assert rc == 0 and doc["result"]["verified_dead"] and not alive(pid, start), doc
