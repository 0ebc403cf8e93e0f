"""What Slurm says now wins over what runward recorded (docs/slurm.md): a job requeued after
its recorded end is live again for status, stop and rm; a stop that cannot read Slurm says
so with exit 3. The real single-node Slurm of the testbed; the controller made unreachable
through a slurm.conf copy, never by touching the shared slurmctld."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import testbed
from conftest import marked, wait_for
from helpers_slurm import in_queue, sb, slurm_testbed  # noqa: F401 (sb: the Slurm testbed fixture)


def _squeue(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def _silent_conf(sb, listener: socket.socket) -> str:
    """The testbed's slurm.conf with its controller port moved to LISTENER, which takes
    connections and never answers: the real squeue says `slurm_load_jobs error: Socket timed
    out on send/recv operation` after MessageTimeout (1 s), as with a controller that hangs."""
    text = Path(sb["conf"]).read_text()
    text = "\n".join(ln for ln in text.splitlines() if not re.match(r"(?i)(SlurmctldPort|MessageTimeout)=", ln))
    return text + f"\nSlurmctldPort={listener.getsockname()[1]}\nMessageTimeout=1\n"


def _status(cli, name: str, on: str) -> dict:
    rc, doc = cli.json("status", name, "--on", on)
    assert rc == 0, doc
    return doc["result"]["runs"][0]


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("0.0.0.0", 0))  # the controller's address (SlurmctldHost) is this machine's
    s.listen(64)
    return s


def _with_conf(cli, path: Path):
    old = cli.env.get("SLURM_CONF")
    cli.env["SLURM_CONF"] = str(path)
    return lambda: cli.env.__setitem__("SLURM_CONF", old) if old is not None else cli.env.pop("SLURM_CONF")


def test_a_stop_that_cannot_read_slurm_exits_3_and_the_job_runs_on(cli, sb, tmp_path):  # noqa: F811
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-stop3", "--on", on, "--settle", "1", "--", "/bin/sleep", "300")
    assert rc == 0 and doc["result"]["slurm_state"] == "RUNNING", doc
    job_id = doc["result"]["job_id"]
    restore = _with_conf(cli, testbed.unreachable_slurm_conf(sb, tmp_path))
    rc, doc = cli.json("stop", "sl-stop3", "--on", on, "--grace", "2")  # no controller: connect failure
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert "Unable to contact slurm controller" in doc["error"]["message"], doc
    listener = _listener()
    try:
        silent = tmp_path / "silent.conf"
        silent.write_text(_silent_conf(sb, listener))
        cli.env["SLURM_CONF"] = str(silent)
        rc, doc = cli.json("stop", "sl-stop3", "--on", on, "--grace", "2")  # one that never answers
    finally:
        listener.close()
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert "Socket timed out" in doc["error"]["message"], doc
    assert _squeue(job_id) == "RUNNING" and marked("sl-stop3.1"), "nothing was stopped"
    restore()
    assert cli.json("stop", "sl-stop3", "--on", on, "--grace", "2")[0] == 0
    assert not in_queue(job_id)


def test_slurm_silent_in_the_middle_of_a_stop_exits_3_saying_the_scancel_was_sent(cli, sb, tmp_path):  # noqa: F811
    """The job ignores TERM; once it has had the stop's TERM, the controller (as this call's
    slurm.conf names it) stops answering: exit 3, saying what was sent, no verdict."""
    on = "slurm://local/" + sb["partition"]
    conf = tmp_path / "slurm.conf"
    conf.write_text(Path(sb["conf"]).read_text())
    restore = _with_conf(cli, conf)
    rc, doc = cli.json("start", "sl-mid3", "--on", on, "--settle", "1",
                       "--sh", "trap 'echo caught' TERM; while :; do sleep 0.2; done")
    assert rc == 0 and doc["result"]["slurm_state"] == "RUNNING", doc
    job_id, log = doc["result"]["job_id"], Path(doc["result"]["log"])
    listener = _listener()
    silent = _silent_conf(sb, listener)

    def flip():  # squeue reads its slurm.conf at each call
        wait_for(lambda: "caught" in log.read_text().splitlines(), timeout=30, what="the stop's TERM")
        tmp = conf.with_suffix(".new")  # whole, by a rename: squeue never reads a half-written file
        tmp.write_text(silent)
        tmp.rename(conf)
    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        t0 = time.monotonic()
        rc, doc = cli.json("stop", "sl-mid3", "--on", on, "--grace", "20")
        flipper.join(5)
    finally:
        listener.close()
    assert time.monotonic() - t0 < 60, "an answer, not a hang"
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert re.search(r"scancel --signal=(SIG)?TERM had been sent", doc["error"]["message"]), json.dumps(doc)
    assert "Socket timed out" in doc["error"]["message"], doc
    assert _squeue(job_id) == "RUNNING", "TERM is trapped: the job runs on, and no verdict was given"
    restore()
    rc, doc = cli.json("stop", "sl-mid3", "--on", on, "--grace", "1")
    assert rc == 0 and not in_queue(job_id), doc


# squeue's states of a job put back in the queue: PENDING once the controller has it back, and
# REQUEUED (or REQUEUE_HOLD) while its last run's end is still being cleaned up
_REQUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD")


def _requeue(job_id: str) -> None:
    """`scontrol requeue JOB`, once the controller takes it (a job still completing its last
    run is refused for a moment), then in the queue again as squeue says."""
    said = []

    def done():
        p = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
        said.append((p.returncode, p.stderr.strip(), _squeue(job_id)))
        return p.returncode == 0
    try:
        wait_for(done, timeout=30, what=f"scontrol requeue {job_id} to be taken")
        wait_for(lambda: said.append(_squeue(job_id)) or said[-1] in _REQUEUED, timeout=30,
                 what=f"job {job_id} in the queue again")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last answers (rc, stderr, squeue): {said[-3:]}") from None


def test_a_requeued_job_is_live_again_for_status_rm_and_stop(cli, sb, tmp_path):  # noqa: F811
    """The job fails (exit 3) and runward records FAILED 3:0; `scontrol requeue` brings the
    same job id back, PENDING, then RUNNING (its second run finds the flag and sleeps):
    status follows Slurm, rm refuses while Slurm holds it, stop reports the end it caused."""
    on = "slurm://local/" + sb["partition"]
    flag = tmp_path / "ran-once"
    rc, doc = cli.json("start", "sl-rq", "--on", on, "--settle", "0.3",
                       "--sh", f"if [ -e {flag} ]; then exec sleep 300; fi; touch {flag}; sleep 2; exit 3")
    assert rc == 0, doc
    job_id = doc["result"]["job_id"]
    wait_for(lambda: _status(cli, "sl-rq", on).get("state") == "exited", timeout=60, what="the first end")
    st = _status(cli, "sl-rq", on)
    assert (st["slurm_state"], st["exit"]["exit_code"]) == ("FAILED", "3:0"), st
    _requeue(job_id)
    st = _status(cli, "sl-rq", on)
    assert st["state"] == "pending" and st["slurm_state"] in _REQUEUED and "exit" not in st, st
    assert st["requeued"][0]["exit_code"] == "3:0", st  # the recorded end is kept as history
    rc, doc = cli.json("rm", "sl-rq", "--on", on)
    assert rc == 1 and doc["error"]["type"] == "RunAlive", doc
    assert (cli.home / "runs" / "sl-rq" / "run.json").is_file() and _squeue(job_id) in _REQUEUED
    # Slurm holds a requeued job back (BeginTime); let it run now
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True, capture_output=True)
    wait_for(lambda: _squeue(job_id) == "RUNNING", timeout=60, what="the requeued job to run")
    wait_for(lambda: marked("sl-rq.1"), timeout=30, what="its process, by the marker in /proc")
    st = _status(cli, "sl-rq", on)
    assert (st["state"], st["slurm_state"]) == ("running", "RUNNING") and st["node_pids"], st
    assert set(st["node_pids"]) <= set(marked("sl-rq.1")), st
    rc, doc = cli.json("stop", "sl-rq", "--on", on, "--grace", "5")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert doc["result"]["exit"]["exit_code"] == "0:15" and doc["result"]["exit"]["signal"] == "TERM", doc
    assert not in_queue(job_id) and not marked("sl-rq.1")
    fields = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    assert "ExitCode=0:15" in fields, fields  # Slurm's own word agrees
    rc, doc = cli.json("rm", "sl-rq", "--on", on)
    assert rc == 0, doc


def test_a_job_id_that_names_another_job_now_is_not_our_requeued_job(cli, tmp_path):
    """A run's job ended (FAILED 3:0, recorded); its id now names another job (a controller
    that started again without its saved state numbers jobs from FirstJobId again): here a
    job of another name and script, submitted by hand, put under the record's id. status
    keeps the recorded end, stop cancels nothing (squeue: the other job runs on), rm removes
    the records. On the old code status said running, 'requeued by Slurm', rm refused, and
    stop scancelled the other job. Only this test's own jobs are cancelled, by id."""
    sb = slurm_testbed()  # not the sb fixture: its teardown cancels every job of the user
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-reuse", "--on", on, "--settle", "0.3", "--sh", "sleep 1; exit 3")
    assert rc in (0, 1), doc
    ours = doc["result"]["job_id"] if rc == 0 else None
    other = subprocess.run(["sbatch", "--parsable", "-p", sb["partition"], "-J", "someone-else", "-o", "/dev/null",
                            "--wrap", "sleep 300"], capture_output=True, text=True, check=True).stdout
    other = other.strip().split(";")[0]
    try:
        wait_for(lambda: _status(cli, "sl-reuse", on).get("state") == "exited", timeout=90, what="the run's end")
        wait_for(lambda: _squeue(other) == "RUNNING", timeout=90, what="the other job to run")
        rec = cli.home / "runs" / "sl-reuse" / "attempts" / "1.json"
        att = json.loads(rec.read_text())
        ours = att["slurm"]["job_id"]
        att["slurm"]["job_id"] = other  # the id, reused
        rec.write_text(json.dumps(att))
        st = _status(cli, "sl-reuse", on)
        assert st["state"] == "exited" and st["exit"]["exit_code"] == "3:0" and not st.get("requeued"), st
        rc, doc = cli.json("stop", "sl-reuse", "--on", on, "--grace", "2")
        assert rc == 0 and doc["result"]["already_stopped"], doc
        assert _squeue(other) == "RUNNING", "the other job was not cancelled in our name (squeue)"
        rc, doc = cli.json("rm", "sl-reuse", "--on", on)
        assert rc == 0, doc
        assert _squeue(other) == "RUNNING"
    finally:
        subprocess.run(["scancel", other] + ([str(ours)] if ours else []), capture_output=True)
