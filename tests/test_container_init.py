"""Containers as people start them, made fresh for each test from the testbed's image with
scripts/testbed's options (label runward-testbed=1), and removed after (issue 20):

- pid 1 that never reaps (`sleep infinity` without --init, stumble 13): the shim reaps the
  job's orphans, and doctor says pid 1 does not reap and how to fix it;
- a fresh container's ~/.runward, made by the bootstrap over ssh, is 0700 (stumble 12);
- python3-minimal only (no json, no shutil, stumble 2), made the way apt leaves it: the full
  standard library's packages removed with dpkg: every verb works; and a module that python
  lacks (its file removed) is a HopFailed naming it, with no traceback, doctor saying so."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import testbed
from conftest import CLI
from helpers_container import IMAGE, OPTS

STDLIB_PACKAGES = ["python3", "python3.11", "libpython3-stdlib", "libpython3.11-stdlib"]


@pytest.fixture
def box(tmp_path):
    """make(init) -> (cli, container name): a fresh container, removed at the end."""
    tb = testbed.require("podman")
    testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    made = []

    def make(init: bool) -> str:
        name = f"rwtest-{uuid.uuid4().hex[:8]}"
        p = subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", name, *OPTS,
                            *(["--init"] if init else []), IMAGE, "sleep", "infinity"],
                           env=c.env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        made.append(name)
        return name
    c.make = make
    c.sh = lambda name, line: subprocess.run(["podman", "exec", name, "sh", "-c", line], env=c.env,
                                             capture_output=True, text=True, timeout=60)
    yield c
    for name in made:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=c.env, capture_output=True, timeout=120)


def _zombies(c, name: str) -> list[str]:
    out = c.sh(name, "ps -eo stat=,comm= | awk '$1 ~ /^Z/ {print $2}'").stdout.split()
    return out


def test_no_init_container_orphans_reaped_and_doctor_says_pid1_does_not_reap(box):
    name = box.make(init=False)
    on = f"ssh://rw1/podman:{name}"
    rc, doc = box.json("doctor", "--on", on)  # the first call there: the bootstrap makes ~/.runward
    assert rc == 0, doc
    pid1 = doc["result"]["hops"][-1]["checks"]["pid1"]
    assert pid1["comm"] == "sleep" and pid1["reaps"] is False and "--init" in pid1["hint"]
    assert "DOES NOT REAP" in box.run("doctor", "--on", on).stdout
    assert box.sh(name, "stat -c %a /root/.runward /root/.runward/cache").stdout.split() == ["700", "700"]
    # the job's orphans: a killed shell's child, and a double fork's grandchild
    rc, doc = box.json("start", "orph", "--on", on, "--settle", "0.3", "--",
                       "sh", "-c", "sleep 200 & (sleep 0.2 &); sleep 100")
    assert rc == 0, doc
    rc, doc = box.json("stop", "orph", "--on", on, "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert "sleep" not in _zombies(box, name), box.sh(name, "ps -eo pid,ppid,stat,args").stdout


def test_doctor_finds_that_an_init_reaps(box):
    name = box.make(init=True)
    rc, doc = box.json("doctor", "--on", f"podman:{name}")
    assert rc == 0, doc
    pid1 = doc["result"]["hops"][-1]["checks"]["pid1"]
    assert pid1["reaps"] is True and "hint" not in pid1, pid1


def _minimal_python(box) -> str:
    name = box.make(init=True)
    p = box.sh(name, "dpkg -r --force-depends %s" % " ".join(STDLIB_PACKAGES))
    assert p.returncode == 0, p.stderr
    # what python3-minimal alone is: no json, no _json, no shutil
    assert box.sh(name, "python3 -c 'import json'").returncode == 1
    assert box.sh(name, "python3 -c 'import _json'").returncode == 1
    assert box.sh(name, "python3 -c 'import shutil'").returncode == 1
    return name


def test_every_verb_works_with_python3_minimal(box, tmp_path):
    name = _minimal_python(box)
    on = f"ssh://rw1/podman:{name}"
    (tmp_path / "f.py").write_text("print('x')\n")
    steps = [("status",), ("start", "mp", "--settle", "0.3", "--ready", "^step 2", "--",
                           "sh", "-c", "for i in 1 2 3; do echo step $i loss 0.5; done; sleep 100"),
             ("status", "mp"), ("logs", "mp"), ("logs", "mp", "-f", "--for", "0.5"), ("watch", "mp", "--for", "0.5"),
             ("exec", "--", "echo", "hi"), ("ps", "sleep"), ("push", f"{tmp_path / 'f.py'}:/root/f.py"),
             ("gpus",), ("restart", "mp", "--settle", "0.3"), ("stop", "mp"), ("doctor",)]
    for step in steps:
        args = [*step[:1], *step[1:]]
        at = args.index("--") if "--" in args else len(args)
        p = box.run(*args[:at], "--on", on, *args[at:])
        assert p.returncode == 0 and "Traceback" not in p.stderr + p.stdout, (step, p.stdout, p.stderr)


def test_a_module_python_lacks_is_named_without_a_traceback(box):
    name = _minimal_python(box)
    assert box.sh(name, "rm -f /usr/lib/python3.11/subprocess.py /usr/lib/python3.11/__pycache__/subprocess.*"
                  ).returncode == 0
    on = f"ssh://rw1/podman:{name}"
    p = box.run("exec", "--on", on, "--", "true")
    assert p.returncode == 3 and "'subprocess'" in p.stderr and "apt-get install -y python3" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("subprocess") <= 3, p.stderr
    rc, doc = box.json("exec", "--on", on, "--", "true")
    assert rc == 3 and doc["error"]["type"] == "HopFailed" and doc["error"]["details"]["module"] == "subprocess"
    p = box.run("doctor", "--on", on)  # doctor's own agent needs it too: that hop is not reached, and says why
    assert p.returncode == 3 and "lacks the standard module 'subprocess'" in p.stdout, p.stdout
    assert "Traceback" not in p.stdout + p.stderr


def test_a_module_missing_before_the_agent_runs_is_diagnosed_from_stderr(box):
    """The bootstrap's own imports fail before the agent can answer: the CLI reads python's
    real message (from the container's python) and names the module, without the traceback."""
    from runward.targets import parse_target
    from runward.transport.agentcall import RawResult, diagnose
    name = box.make(init=True)
    p = box.sh(name, "python3 -c 'import zlib_is_not_here'")
    raw = RawResult(["ssh"], p.returncode, [], p.stderr, 0.1)
    e = diagnose(parse_target(f"ssh://rw1/podman:{name}"), raw)
    assert e.kind == "HopFailed" and "'zlib_is_not_here'" in e.message and e.details["module"] == "zlib_is_not_here"
    assert "Traceback" not in e.message + str(e.details) and "python3" in e.hint


def test_a_container_stopped_under_a_follower_is_named_not_blamed_on_a_pkill(box):
    """`logs -f` into a container that is then stopped: the agent in it dies by SIGKILL with
    everything else there; the answer names the container hop and says it stopped (before: "the
    agent was killed by SIGKILL ... OOM killer? a pkill -f matching it?")."""
    name = box.make(init=True)
    on = f"ssh://rw1/podman:{name}"
    rc, doc = box.json("start", "fol", "--on", on, "--settle", "0.3", "--",
                       "sh", "-c", "while :; do echo tick; sleep 0.2; done")
    assert rc == 0, doc
    follow = box.popen("logs", "fol", "--on", on, "-f")
    assert follow.stdout.readline(), "logs -f printed nothing"
    p = subprocess.run(["podman", "stop", "-t", "0", name], env=box.env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out, err = follow.communicate(timeout=60)
    assert follow.returncode == 3, (follow.returncode, out, err)  # HopFailed: a hop of the target failed
    assert f"podman:{name}" in err and "container stopped" in err, err
    assert "pkill" not in err and "OOM" not in err, err
