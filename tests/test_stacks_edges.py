"""Edges of `stacks` not covered by tests/test_stacks.py: a process that ends between the
member scan and py-spy's attach is said per process ("gone"), not a failure of the capture;
runward.toml's `[stacks] bring = true` brings py-spy without the flag, and a bad value there is
bad input naming the section (exit 2). Real processes, real py-spy, a real ssh host."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers_stacks import SPY, _remote, _stop, needs_spy


@needs_spy
def test_a_process_gone_mid_capture_is_said_per_process():
    from runward.agent.health import stacks
    from runward.agent.core.procfs import ProcTable, scan
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)\n"])
    try:
        proc = ProcTable(scan())[p.pid]  # a member as capture() found it
    finally:
        p.kill()
        p.wait()
    out = stacks._dump_one(SPY, proc, False, 10.0)  # it ended before py-spy attached
    assert out["error"] == "gone" and out["hint"] == "the process ended during the capture", out
    assert out["pid"] == p.pid and "frame" not in out, out


@needs_spy
def test_a_stopped_process_is_said_stopped_not_ptrace_denied():
    """py-spy cannot attach a process in state T: it read "ptrace denied" with a hint about
    permissions, while status said the job was paused (a black-box review, run as root)."""
    import signal
    from runward.agent.health import stacks
    from runward.agent.core.procfs import ProcTable, scan
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)\n"])
    try:
        os.kill(p.pid, signal.SIGSTOP)
        os.waitpid(p.pid, os.WUNTRACED)  # it is stopped now (ground truth: the kernel says so)
        out = stacks._dump_one(SPY, ProcTable(scan())[p.pid], False, 10.0)
        assert out["error"] == "stopped" and f"kill -CONT {p.pid}" in out["hint"], out
    finally:
        p.kill()
        p.wait()


@needs_spy
def test_stacks_bring_in_runward_toml_brings_without_the_flag(cli, tmp_path):
    name = _remote(cli, tmp_path, "ssh", "ssh://rw1", "cfg")
    toml = cli.cwd / "runward.toml"
    plain = toml.read_text()  # restored before the stop: a runward that refuses [stacks] still stops it
    try:
        toml.write_text(toml.read_text() + '\n[stacks]\nbring = "yes"\n')
        p = cli.run("stacks", name, "--on", "t")
        assert p.returncode == 2 and "[stacks]" in p.stderr and "bring = true" in p.stderr, (p.stdout, p.stderr)
        toml.write_text(toml.read_text().replace('bring = "yes"', "bring = true"))
        rc, doc = cli.json("stacks", name, "--on", "t")
        assert rc == 0, doc
        assert doc["result"]["brought"] == f"/tmp/rwstk-cfg-{os.getpid()}/tools/py-spy", doc["result"]
        assert "wait_for_the_lock_forever (<string>:5)" in doc["result"]["summary"], doc["result"]
    finally:
        toml.write_text(plain)
        _stop(cli, name, "ssh://rw1")
