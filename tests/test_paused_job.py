"""A job paused by SIGSTOP (Ctrl-Z, a debugger's stop): status says it is paused, and stop
resumes it after its signal so that its TERM handler runs and checkpoints (as systemd does)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path

from conftest import marked, read_stat, wait_for


def _name() -> str:
    """A run name of this test's own: marked() sees every home's runs on this machine."""
    return "pz" + uuid.uuid4().hex[:8]

PY = sys.executable

# a job and one worker of its group; TERM makes the job write its checkpoint and exit 0
SAVER = r"""
import os, signal, sys, time
ckpt = sys.argv[1]
def on_term(*_):
    with open(ckpt, "w") as f:
        f.write("step 7\n")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
if os.fork() == 0:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(0.05)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _pause_group(pid: int, name: str) -> list[int]:
    """Ctrl-Z: SIGSTOP to the job's whole process group; waits until /proc shows each
    member stopped (state T) and returns their pids."""
    os.killpg(pid, signal.SIGSTOP)
    members = marked(name + ".")
    wait_for(lambda: all((read_stat(p) or ("?",))[0] == "T" for p in members), what="the group stopped")
    return sorted(members)


def test_a_paused_job_reads_paused_and_its_stop_lets_it_checkpoint(cli, tmp_path):
    pz = _name()
    ckpt = tmp_path / "ckpt"
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", SAVER, str(ckpt))
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    wait_for(lambda: len(marked(pz + ".")) == 2, what="the job and its worker")
    paused = _pause_group(pid, pz)

    st = cli.status(pz)
    assert st["state"] == "running", st  # alive: its shim and job live
    assert st["paused"]["job"] is True and st["paused"]["pids"] == paused, st
    text = cli.run("status", pz)
    assert text.returncode == 0, text.stderr
    head = text.stdout.splitlines()[0].split()
    assert head[:2] == [pz, "paused"], text.stdout
    assert "paused: 2 of 2 processes" in text.stdout and "runward stop" in text.stdout, text.stdout

    # a grace far longer than the job needs: before, the TERM waited the grace out, then KILL
    rc, doc = cli.json("stop", pz, "--grace", "20", timeout=60)
    assert rc == 0, doc
    res = doc["result"]
    assert res["verified_dead"], res
    fates = {p["pid"]: p for p in res["processes"]}
    assert fates[pid]["fate"] == "exited_after_SIGTERM" and fates[pid]["signals"] == ["SIGTERM"], fates
    assert all(fates[p].get("resumed") == "SIGCONT" for p in paused), fates
    assert res["stop_s"] < 15, res
    assert ckpt.read_text() == "step 7\n"  # the handler ran
    assert not marked(pz + ".")
    st = cli.status(pz)
    assert st["state"] == "exited" and st["exit"]["code"] == 0, st


def test_a_running_job_is_not_said_paused_nor_sent_sigcont(cli, tmp_path):
    pz = _name()
    ckpt = tmp_path / "ckpt"
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", SAVER, str(ckpt))
    assert rc == 0, doc
    st = cli.status(pz)
    assert st["state"] == "running" and "paused" not in st, st
    rc, doc = cli.json("stop", pz, "--grace", "20", timeout=60)
    assert rc == 0, doc
    assert not any(p.get("resumed") for p in doc["result"]["processes"]), doc
    assert Path(ckpt).read_text() == "step 7\n"


# the job saves on USR1 (the checkpoint signal), says so in its log, and goes on
USR1_SAVER = r"""
import signal, sys, time
def on_usr1(*_):
    print("saved checkpoint step-7", flush=True)
signal.signal(signal.SIGUSR1, on_usr1)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_paused_jobs_checkpoint_signal_is_taken_before_its_stop(cli):
    pz = _name()
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", USR1_SAVER)
    assert rc == 0, doc
    pid, log = doc["result"]["pid"], Path(doc["result"]["log"])
    _pause_group(pid, pz)
    rc, doc = cli.json("stop", pz, "--grace", "5", "--checkpoint", "--checkpoint-wait-for",
                       r"saved checkpoint (\S+)", "--checkpoint-timeout", "20", timeout=60)
    assert rc == 0, doc
    ck = doc["result"]["checkpoint"]
    assert ck["sent_to"] == pid and ck.get("resumed") == "SIGCONT" and ck.get("saw_line"), ck
    assert "saved checkpoint step-7" in log.read_text()
    assert not marked(pz + ".")
