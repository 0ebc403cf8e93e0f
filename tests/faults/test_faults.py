"""Faults, injected for real: after each, `status` is true (it matches /proc), nothing is lost
(every record reads, every attempt's log is there) and nothing is duplicated (one job at most).

README.md, "Faults", has the table of what each fault leaves. The agent and the shim are
SIGKILLed at named steps by RUNWARD_FAULT=STEP (agent/proc/faults.py: one getenv per step, unset
in normal use); the ssh connection is cut by a relay this test owns; the container is stopped
with podman; the disk is filled on a tmpfs home (tests/test_disk_full.py); a reboot is a record
from another boot id.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, marked, wait_for

PY = sys.executable
TERM_IGNORER = ["--sh", "trap '' TERM; while :; do sleep 0.1; done"]


def truth(name: str) -> dict[int, int]:
    return {p: s for p, s in marked(name + ".").items() if alive(p, s)}


def records_read(home: Path, name: str) -> list[dict]:
    """Every attempt record of the run parses (nothing torn), in attempt order."""
    d = home / "runs" / name / "attempts"
    recs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"), key=lambda p: int(p.stem))]
    json.loads((home / "runs" / name / "run.json").read_text())
    assert [r["attempt"] for r in recs] == list(range(1, len(recs) + 1)), "an attempt record is missing"
    return recs


def assert_status_true(cli: CLI, name: str, *args: str) -> dict:
    """status agrees with /proc: running-like states exactly when a job of the run lives, and
    never two jobs alive."""
    before = truth(name)
    rc, doc = cli.json("status", name, *args)
    after = truth(name)
    assert rc in (0, 5), doc
    st = doc["result"]["runs"][0]
    if bool(before) == bool(after):
        live = st["state"] in ("running", "orphaned", "starting", "stray")
        assert live == bool(after), (st, after)
    jobs = {p for p in after if p == st.get("pid")}
    assert len(jobs) <= 1
    return st


# --- the agent and the shim SIGKILLed at each step ----------------------------------------

@pytest.mark.parametrize("step", ["start:recorded", "start:spawned", "start:settled"])
def test_agent_killed_during_start(cli, step):
    cli.env["RUNWARD_FAULT"] = step
    rc, doc = cli.json("start", "fk", "--settle", "0.5", "--", "sleep", "600")
    assert rc == 3 and "the agent was killed by SIGKILL" in doc["error"]["message"], doc
    cli.env.pop("RUNWARD_FAULT")
    st = assert_status_true(cli, "fk")
    if step == "start:recorded":  # before the shim: nothing runs, and the record says so
        assert not truth("fk") and st["state"] in ("failed", "lost"), st
    else:
        assert len(truth("fk")) == 1 and st["state"] == "running", st
    # nothing duplicated: a second start refuses while the first job lives, else starts one
    rc, doc = cli.json("start", "fk", "--settle", "0.3", "--", "sleep", "600")
    assert len({p for p in truth("fk")}) == 1
    if st["state"] == "running":
        assert rc == 1 and doc["error"]["type"] == "AlreadyRunning", doc
    else:
        assert rc == 0, doc
    records_read(cli.home, "fk")
    rc, doc = cli.json("stop", "fk", "--grace", "3")
    assert rc == 0 and not truth("fk"), doc


@pytest.mark.parametrize("step", ["stop:signalled", "stop:dead"])
def test_agent_killed_mid_stop_then_status_is_true_and_stop_finishes(cli, step):
    """The CLI's agent is SIGKILLed inside the stop (after the stop signal; after the tree is
    dead): unlike a CLI killed alone, nothing finishes the stop behind the scenes."""
    rc, doc = cli.json("start", "fs", "--settle", "0.3", *TERM_IGNORER)
    assert rc == 0, doc
    cli.env["RUNWARD_FAULT"] = step
    # the job ignores TERM: stop:dead is reached after the grace and the KILL, so its grace is
    # short; at stop:signalled a long one keeps a KILL (from anyone) out of the check below
    rc, doc = cli.json("stop", "fs", "--grace", "30" if step == "stop:signalled" else "1")
    cli.env.pop("RUNWARD_FAULT")
    assert rc == 3 and "the agent was killed by SIGKILL" in doc["error"]["message"], doc
    st = assert_status_true(cli, "fs")
    if step == "stop:signalled":  # TERM is ignored, and the KILL never came
        assert st["state"] == "running" and truth("fs"), st
    else:
        assert not truth("fs") and st["state"] in ("exited", "stray", "lost"), st
    rc, doc = cli.json("stop", "fs", "--grace", "1")
    assert rc == 0 and doc["result"]["verified_dead"] and not truth("fs"), doc
    assert cli.status("fs")["state"] == "exited"
    records_read(cli.home, "fs")


def test_shim_killed_before_it_records_the_exit(cli):
    cli.env["RUNWARD_FAULT"] = "shim:exited"
    rc, doc = cli.json("start", "fx", "--settle", "0.2", "--sh", "sleep 1; exit 7")
    assert rc == 0, doc
    cli.env.pop("RUNWARD_FAULT")
    wait_for(lambda: not truth("fx") and not alive(doc["result"]["pid"]), what="the job's exit")
    st = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(cli.status("fx")),
                  what="status to see the job gone")
    # the exit code died with the shim: said as such, never invented
    assert st["state"] == "lost" and "exit" not in st and "shim" in st["note"], st
    rc, doc = cli.json("start", "fx", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0 and doc["result"]["attempt"] == 2, doc
    records_read(cli.home, "fx")
    cli.json("stop", "fx", "--grace", "2")


def test_shim_killed_between_recording_the_job_and_saying_so_is_an_orphan(cli):
    # the job is in the record, but the agent never heard of it on the pipe: still an orphan
    # (exit 5, the job alive and findable), never "could not start" (exit 1) with a job running
    cli.env["RUNWARD_FAULT"] = "shim:job-recorded"
    rc, doc = cli.json("start", "fj", "--settle", "0.5", "--", "sleep", "600")
    cli.env.pop("RUNWARD_FAULT")
    assert rc == 5 and doc["error"]["type"] == "Orphaned", doc
    job = records_read(cli.home, "fj")[0]["job"]
    assert alive(job["pid"], job["start"]) and truth("fj")
    st = assert_status_true(cli, "fj")
    assert st["state"] == "orphaned" and st["pid"] == job["pid"], st
    rc, doc = cli.json("stop", "fj", "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"] and not truth("fj"), doc
    records_read(cli.home, "fj")


# --- twenty verbs at once on one run ------------------------------------------------------

def test_twenty_concurrent_verbs_on_one_run_leave_one_truth(cli):
    rng = random.Random(1234)
    verbs = [rng.choice(["start", "stop", "restart"]) for _ in range(20)]
    procs = []
    for v in verbs:
        args = {"start": ["start", "cc", "--json", "--settle", "0.3", "--", "sleep", "600"],
                "stop": ["stop", "cc", "--json", "--grace", "3"],
                "restart": ["restart", "cc", "--json", "--settle", "0.3"]}[v]
        procs.append(cli.popen(*args))
    codes = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        codes.append(p.returncode)
        doc = json.loads(out)  # one JSON document each, whatever happened
        assert "Traceback" not in err, err
        assert p.returncode in (0, 1, 4, 5), (p.returncode, doc)
    assert len(truth("cc")) <= 1, truth("cc")
    if (cli.home / "runs" / "cc" / "run.json").exists():
        recs = records_read(cli.home, "cc")
        st = assert_status_true(cli, "cc")
        alive_attempts = [r["attempt"] for r in recs if r.get("job") and alive(r["job"]["pid"], r["job"]["start"])]
        assert len(alive_attempts) <= 1 and (not alive_attempts or st["attempt"] == alive_attempts[0]), (st, alive_attempts)
        rc, doc = cli.json("stop", "cc", "--grace", "3")
        assert rc == 0 and not truth("cc"), doc


# --- a reboot -----------------------------------------------------------------------------

def test_a_record_from_another_boot_is_lost_and_never_signalled(cli):
    rc, doc = cli.json("start", "rb", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    os.kill(job, signal.SIGKILL)  # the machine "went down" with its processes
    wait_for(lambda: not truth("rb"), what="the job gone")
    path = cli.home / "runs" / "rb" / "attempts" / "1.json"
    # the shim writes the exit into this record after the job is reaped: editing it before
    # then races that write (seen in CI: the shim's write put the exit back)
    wait_for(lambda: json.loads(path.read_text()).get("exit"), what="the shim's exit record")
    rec = json.loads(path.read_text())
    rec["boot_id"] = "00000000-0000-0000-0000-000000000000"
    rec.pop("exit", None)
    path.write_text(json.dumps(rec))
    # a new process now holds the old pid's place in the records' eyes: same pid is not
    # reproducible, so a live process is planted under the record's shim identity instead
    st = cli.status("rb")
    assert st["state"] == "lost" and "rebooted" in st["note"], st
    rc, doc = cli.json("stop", "rb")
    assert rc == 0 and doc["result"]["already_stopped"], doc
    rc, doc = cli.json("start", "rb", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0 and doc["result"]["attempt"] == 2, doc
    assert len(records_read(cli.home, "rb")) == 2
    cli.json("stop", "rb", "--grace", "2")


# --- the ssh connection cut ---------------------------------------------------------------

class CuttableRelay:
    """A TCP relay from 127.0.0.1 to a testbed sshd that can drop every connection at once,
    as a lost link does (the far side sees the connection go; nothing is said)."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream, timeout=5)
            u.settimeout(None)
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        # close() alone sends nothing while a pump thread is blocked in recv() on the socket:
        # the kernel keeps the file until that call returns, and on an upload sshd may send
        # nothing for long, so it never saw the cut (seen in CI: the far agent waited on). A
        # read shutdown wakes the reader first; the last close then sends the RST (linger 0).
        with self.lock:
            for s in self.conns:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")  # RST
                    s.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass
            self.conns.clear()

    def close(self):
        self.closed = True
        self.cut()
        self.srv.close()


@pytest.fixture
def cut_cli(tmp_path):
    tb = testbed.require("ssh")
    relay = CuttableRelay((tb["addresses"]["rw1"], 22))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host rwcut\n  HostName 127.0.0.1\n  Port {relay.port}\n  HostKeyAlias rw1\n  User root\n"
                   f"  IdentityFile {tb['client_key']}\n\nInclude {tb['ssh_config']}\n")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = str(cfg)
    c.env["RUNWARD_RESIDENT"] = "0"
    c.remote_home = f"/tmp/rw-fault-{uuid.uuid4().hex[:8]}"
    (tmp_path / "work" / "runward.toml").write_text(f'[targets.cut]\non = "ssh://rwcut"\nhome = "{c.remote_home}"\n')
    c.relay = relay
    yield c
    relay.close()
    for n in ("sc", "ss"):
        for pid in truth(n):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", c.remote_home])


def test_ssh_cut_mid_start(cut_cli):
    c = cut_cli
    p = c.popen("start", "sc", "--on", "cut", "--settle", "4", "--json", "--", "sleep", "600")
    rec = Path(c.remote_home) / "runs" / "sc" / "attempts" / "1.json"
    wait_for(lambda: rec.exists() and json.loads(rec.read_text()).get("job"), what="the job started on the host")
    c.relay.cut()
    out, err = p.communicate(timeout=60)
    doc = json.loads(out)
    assert p.returncode == 3 and doc["error"]["hop"] == "ssh://rwcut", doc
    st = assert_status_true(c, "sc", "--on", "cut")  # a new connection through the relay
    assert st["state"] == "running" and len(truth("sc")) == 1, (st.get("exit"), st.get("log"))
    rc, doc = c.json("start", "sc", "--on", "cut", "--settle", "0.3", "--", "sleep", "600")
    assert rc == 1 and doc["error"]["type"] == "AlreadyRunning" and len(truth("sc")) == 1, doc
    records_read(Path(c.remote_home), "sc")
    rc, doc = c.json("stop", "sc", "--on", "cut", "--grace", "2")
    assert rc == 0 and not truth("sc"), doc


def test_ssh_cut_mid_stop(cut_cli):
    c = cut_cli
    rc, doc = c.json("start", "ss", "--on", "cut", "--settle", "0.3", *TERM_IGNORER)
    assert rc == 0, doc
    p = c.popen("stop", "ss", "--on", "cut", "--grace", "3", "--json")
    lock = Path(c.remote_home) / "runs" / ".ss.lock"
    wait_for(lambda: lock.exists() and lock.stat().st_size > 0, what="the stop holding the run")
    c.relay.cut()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, out
    st = assert_status_true(c, "ss", "--on", "cut")
    assert st["state"] in ("running", "exited"), st
    rc, doc = c.json("stop", "ss", "--on", "cut", "--grace", "1")
    assert rc == 0 and doc["result"]["verified_dead"] and not truth("ss"), doc
    records_read(Path(c.remote_home), "ss")


# --- the container stopped mid-operation --------------------------------------------------

@pytest.fixture
def fault_pod(tmp_path):
    tb = testbed.require("podman")
    env = testbed.env(tb)
    name = f"rwfault-{uuid.uuid4().hex[:6]}"
    image = "localhost/runward-testbed:bookworm"  # scripts/testbed's IMAGE; its label lets `down` remove it
    r = subprocess.run(["podman", "run", "-d", "--name", name, "--init", "--network", "none",
                        "--ulimit", "nofile=1024:4096", "--ulimit", "nproc=4096:4096",
                        "--label", "runward-testbed=1", image, "sleep", "infinity"],
                       env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"cannot create a podman container here: {r.stderr.strip()[-300:]}")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = env | {"RUNWARD_HOME": str(tmp_path / "home"), "PYTHONPATH": c.env["PYTHONPATH"]}
    c.pod, c.podenv = name, env
    yield c
    subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True, timeout=120)


def test_container_stopped_mid_start(fault_pod):
    c = fault_pod
    on = f"podman:{c.pod}"
    p = c.popen("start", "cs", "--on", on, "--settle", "5", "--json", "--", "sleep", "600")
    wait_for(lambda: subprocess.run(["podman", "exec", c.pod, "pgrep", "-x", "sleep"], env=c.podenv,
                                    capture_output=True).stdout.count(b"\n") >= 2, what="the job in the container")
    subprocess.run(["podman", "stop", "-t", "0", c.pod], env=c.podenv, capture_output=True, timeout=60)
    out, _ = p.communicate(timeout=60)
    doc = json.loads(out)
    assert p.returncode in (1, 3) and doc["ok"] is False, doc  # the agent or the job died with it: said
    rc, doc = c.json("status", "cs", "--on", on)
    assert rc == 3 and doc["error"]["hop"] == on and "not running" in doc["error"]["message"], doc
    subprocess.run(["podman", "start", c.pod], env=c.podenv, capture_output=True, timeout=60)
    rc, doc = c.json("status", "cs", "--on", on)
    assert rc == 0, doc
    st = doc["result"]["runs"][0]
    assert st["state"] in ("lost", "exited", "failed") and st["state"] != "running", st
    rc, doc = c.json("start", "cs", "--on", on, "--settle", "0.3", "--", "sleep", "600")
    assert rc == 0, doc
    rc, doc = c.json("stop", "cs", "--on", on, "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
