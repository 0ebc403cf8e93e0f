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


def test_a_stop_resumes_the_runs_own_paused_shim_so_the_exit_is_recorded(cli, tmp_path):
    pz = _name()
    """The shim paused (SIGSTOP to it, a debugger on it): the job takes its TERM and ends, but
    only its parent, the shim, can reap it and record how it ended. Before, stop waited 10 s
    for that record, answered with the run "starting", and status went on saying "starting"
    (of a job that had ended, a zombie under a shim paused for good). Now stop resumes the
    run's own paused shim, which records the exit: the run reads exited with the job's code."""
    ckpt = tmp_path / "ckpt"
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", SAVER, str(ckpt))
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    shim = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # the job's parent
    assert "runward-shim" in Path(f"/proc/{shim}/cmdline").read_text()
    os.kill(shim, signal.SIGSTOP)
    wait_for(lambda: (read_stat(shim) or ("?",))[0] == "T", what="the shim stopped")

    rc, doc = cli.json("stop", pz, "--grace", "20", timeout=60)
    assert rc == 0, doc
    res = doc["result"]
    assert res["verified_dead"] and res["stop_s"] < 15, res
    assert ckpt.read_text() == "step 7\n"  # the job's handler ran
    wait_for(lambda: not os.path.exists(f"/proc/{shim}"), what="the resumed shim's end")
    assert not os.path.exists(f"/proc/{pid}")  # reaped: no zombie left under a paused shim
    assert res["state"] == "exited", res
    st = cli.status(pz)
    assert st["state"] == "exited" and st["exit"]["code"] == 0, st


# USR1 makes the job save and say so in its log; TERM ends it
SAVE_ON_USR1 = r"""
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print("saved step 7", flush=True))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_paused_shim_is_said_in_status(cli, tmp_path):
    pz = _name()
    """The shim paused (SIGSTOP to it) while its job runs: nothing records the job's end nor
    decides a restart until it is resumed. Before, status said a plain "running", and once the
    job ended, "starting" with no word why, for good. Now `paused` names the shim, and the
    ended job is said as such."""
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", SAVE_ON_USR1)
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    shim = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(shim, signal.SIGSTOP)
    wait_for(lambda: (read_stat(shim) or ("?",))[0] == "T", what="the shim stopped")
    st = cli.status(pz)
    assert st["state"] == "running" and st["paused"]["shim"] == shim and st["paused"]["pids"] == [], st
    assert not st["paused"]["job"], st
    text = cli.run("status", pz).stdout
    assert f"shim (pid {shim}) is paused" in text, text

    os.kill(pid, signal.SIGTERM)  # the job ends by itself: a zombie its paused shim cannot reap
    wait_for(lambda: (read_stat(pid) or ("Z",))[0] == "Z", what="the job's end")
    st = cli.status(pz)
    assert st["paused"]["shim"] == shim and "the job has ended" in st["note"], st
    text = cli.run("status", pz).stdout
    assert "the job has ended" in text and f"shim (pid {shim}) is paused" in text, text

    rc, doc = cli.json("stop", pz, "--grace", "5", timeout=60)
    assert rc == 0 and doc["result"]["state"] == "exited", doc  # the shim resumed, the end recorded
    wait_for(lambda: not os.path.exists(f"/proc/{shim}"), what="the resumed shim's end")
    assert not os.path.exists(f"/proc/{pid}")  # reaped
    st = cli.status(pz)
    assert st["state"] == "exited" and st["exit"]["code"] == 0 and "paused" not in st, st


def test_a_frozen_run_reads_paused_and_its_stop_thaws_it(cli, tmp_path):
    pz = _name()
    """The run's cgroup frozen (cgroup v2's cgroup.freeze: `systemctl freeze`, a container
    runtime's pause): its processes read S in /proc, not T, yet run nothing, a TERM handler
    included. Before, status said a plain running and stop's TERM waited the grace out for
    KILL, the checkpoint lost. Now status says paused (frozen: the cgroup), and stop thaws the
    run's own frozen cgroups right after its signal, as systemd thaws a frozen unit it stops."""
    import pytest
    ckpt = tmp_path / "ckpt"
    rc, doc = cli.json("start", pz, "--settle", "0.3", "--", PY, "-c", SAVER, str(ckpt))
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    v2 = [c for c in doc["result"].get("cgroups") or () if os.path.exists(os.path.join(c, "cgroup.freeze"))]
    if not v2:
        cli.run("stop", pz)
        pytest.skip("no cgroup v2 of the run's own here (cgroup.freeze)")
    wait_for(lambda: len(marked(pz + ".")) == 2, what="the job and its worker")
    cg = Path(v2[0])
    (cg / "cgroup.freeze").write_text("1")
    wait_for(lambda: "frozen 1" in (cg / "cgroup.events").read_text(), what="the cgroup frozen")
    assert (read_stat(pid) or ("?",))[0] != "T"  # frozen reads as sleeping: no T to see

    st = cli.status(pz)
    assert st["state"] == "running" and st["paused"]["job"] is True, st
    assert st["paused"]["frozen"] == [str(cg)] and sorted(st["paused"]["pids"]) == sorted(marked(pz + ".")), st
    text = cli.run("status", pz).stdout
    assert text.splitlines()[0].split()[:2] == [pz, "paused"] and "frozen" in text, text

    rc, doc = cli.json("stop", pz, "--grace", "20", timeout=60)
    assert rc == 0, doc
    res = doc["result"]
    assert res["verified_dead"] and res["stop_s"] < 15, res
    assert res["thawed"] == [str(cg)], res
    fates = {p["pid"]: p for p in res["processes"]}
    assert fates[pid]["fate"] == "exited_after_SIGTERM", fates
    assert ckpt.read_text() == "step 7\n"  # the handler ran
    st = cli.status(pz)
    assert st["state"] == "exited" and st["exit"]["code"] == 0, st
