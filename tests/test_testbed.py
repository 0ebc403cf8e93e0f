"""The testbed is real: real sshd hosts in their own network namespaces, a real added delay,
containers with their own filesystems and pid namespaces, and the failures the transport must
diagnose. Each test skips with a reason when `scripts/testbed up` has not run (or not as root).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

try:
    from . import testbed
except ImportError:
    import testbed


def run(argv, tb=None, timeout=60, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=testbed.env(tb), **kw)


def ssh(tb, host, cmdline, *opts, timeout=60):
    """ssh HOST CMDLINE: `cmdline` is read by the remote shell."""
    return run(["ssh", "-F", tb["ssh_config"], *opts, host, cmdline], tb, timeout=timeout)


def unique(prefix="rwtb"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


# ----------------------------------------------------------------------------- ssh hosts

def test_every_host_and_slow_host_runs_true():
    tb = testbed.require("ssh")
    hosts = tb["hosts"] + tb.get("slow_hosts", [])
    assert len(tb["hosts"]) == 8
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda h: (h, ssh(tb, h, "true")), hosts))
    bad = ["%s: exit %d %s" % (h, p.returncode, p.stderr.strip()) for h, p in results if p.returncode]
    assert not bad, bad


def test_hosts_are_separate_network_namespaces_with_their_own_address():
    tb = testbed.require("ssh")
    mine = os.readlink("/proc/self/ns/net")
    seen = {}
    for host in tb["hosts"][:3]:
        p = ssh(tb, host, "readlink /proc/self/ns/net; ip -o -4 addr show dev eth0")
        assert p.returncode == 0, p.stderr
        ns, addr_line = p.stdout.splitlines()[:2]
        assert ns != mine, "%s's session runs in this process's network namespace" % host
        assert tb["addresses"][host] + "/30" in addr_line
        seen[host] = ns
    assert len(set(seen.values())) == len(seen), seen


def test_sessions_share_the_hosts_pids_and_files():
    """The fake hosts differ from this machine only by network: a process they start is
    visible here with the same pid, and a file written there is here too."""
    tb = testbed.require("ssh")
    name = os.path.join(tempfile.gettempdir(), unique())
    tag = "%d.%04d" % (3000 + os.getpid() % 1000, uuid.uuid4().int % 10000)
    p = ssh(tb, "rw2", "echo $$ > %s; sleep %s >/dev/null 2>&1 & echo $!" % (shlex.quote(name), tag))
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout)
    try:
        want = b"sleep\0" + tag.encode() + b"\0"

        def cmdline():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                return f.read()
        # `echo $!` prints the pid as the child forks: its exec of sleep may not be done yet
        # (the cmdline reads the shell's, or nothing mid-exec)
        deadline = time.monotonic() + 10
        while cmdline() != want and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cmdline() == want
        assert os.readlink("/proc/%d/ns/net" % pid) != os.readlink("/proc/self/ns/net")
        assert os.readlink("/proc/%d/ns/pid" % pid) == os.readlink("/proc/self/ns/pid")
        with open(name) as f:
            assert int(f.read()) > 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)
        if os.path.exists(name):
            os.unlink(name)


def test_session_path_has_the_testbed_bin():
    tb = testbed.require("pct")
    p = ssh(tb, "rw1", "sh -c 'echo $PATH'")
    assert p.returncode == 0, p.stderr
    assert tb["bin"] in p.stdout.strip().split(":")


def _echo_rtts(tb, host, n):
    """Round trips over one open ssh session: send a line to a remote `cat`, wait for it to
    come back. No process is spawned per sample, so load on this machine barely shows."""
    p = subprocess.Popen(["ssh", "-F", tb["ssh_config"], host, "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=testbed.env(tb),
                         bufsize=0)
    fd = p.stdout.fileno()

    def echo(line):
        t = time.monotonic()
        p.stdin.write(line)
        got = b""
        while not got.endswith(b"\n"):
            r, _, _ = select.select([fd], [], [], 15)
            assert r, "no echo from %s within 15 s" % host
            chunk = os.read(fd, 4096)
            assert chunk, "ssh %s cat ended: %s" % (host, p.stderr.read())
            got += chunk
        assert got == line
        return time.monotonic() - t

    try:
        echo(b"warm-up\n")  # the first answer waits for the session to be set up
        return [echo(b"%d\n" % i) for i in range(n)]
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_slow_host_adds_round_trip_delay():
    """20 ms each way through the relay: one round trip on an open session gets >= 40 ms
    longer. Medians; assert >= 30 ms. Behaviour of the relay, not a timing of our code."""
    tb = testbed.require("slow")
    slow = tb["slow_hosts"][0]
    direct = tb["slow_of"][slow]
    d_rtt = statistics.median(_echo_rtts(tb, direct, 9))
    s_rtt = statistics.median(_echo_rtts(tb, slow, 9))
    assert s_rtt - d_rtt >= 0.030, "RTT %s %.1f ms vs %s %.1f ms" % (
        slow, s_rtt * 1000, direct, d_rtt * 1000)
    assert s_rtt >= 2 * tb["delay_ms_each_way"] / 1000.0 * 0.95


def test_every_slow_host_is_delayed():
    tb = testbed.require("slow")
    with ThreadPoolExecutor(4) as ex:
        rtts = dict(ex.map(lambda h: (h, statistics.median(_echo_rtts(tb, h, 3))), tb["slow_hosts"]))
    fast = {h: r for h, r in rtts.items() if r < 0.030}
    assert not fast, fast


def test_slow_host_presents_the_same_host_key():
    """rwN-slow is rwN behind the relay: one known_hosts entry (HostKeyAlias) serves both, so
    StrictHostKeyChecking=yes passes on both."""
    tb = testbed.require("slow")
    for host in ("rw1", "rw1-slow"):
        p = ssh(tb, host, "true", "-o", "StrictHostKeyChecking=yes")
        assert p.returncode == 0, (host, p.stderr)


# ----------------------------------------------------------------------------- failures

@pytest.mark.parametrize("feature,key,expect,at_most", [
    ("unreachable", "unreachable_host", r"port 22: Connection refused", 10),
    ("timeout", "timeout_host", r"port 22: Connection timed out", 15),
    ("badkey", "badkey_host", r"Permission denied \(publickey\)", 15),
    ("badhostkey", "badhostkey_host", r"Host key verification failed", 15),
])
def test_failing_hosts_exit_255_with_their_reason(feature, key, expect, at_most):
    tb = testbed.require(feature)
    t = time.monotonic()
    p = ssh(tb, tb[key], "true")
    took = time.monotonic() - t
    assert p.returncode == 255, (p.returncode, p.stderr)
    assert re.search(expect, p.stderr), p.stderr
    assert took < at_most


# ----------------------------------------------------------------------------- podman

def test_podman_container_has_its_own_filesystem():
    tb = testbed.require("podman")
    pod = tb["podman"]
    inside = "/root/" + unique("inside")
    outside = "/root/" + unique("outside")
    try:
        p = run(["podman", "exec", "-i", pod, "sh", "-c", "echo in > " + inside], tb)
        assert p.returncode == 0, p.stderr
        p = run(["podman", "exec", "-i", pod, "cat", inside], tb)
        assert p.stdout == "in\n"
        assert not os.path.exists(inside), "a file written in the container appeared on the host"

        with open(outside, "w") as f:
            f.write("out\n")
        p = run(["podman", "exec", "-i", pod, "test", "-e", outside], tb)
        assert p.returncode == 1, "a file written on the host is visible in the container"
    finally:
        run(["podman", "exec", "-i", pod, "rm", "-f", inside], tb)
        if os.path.exists(outside):
            os.unlink(outside)


def test_podman_and_docker_work_inside_ssh_sessions():
    tb = testbed.require("podman")
    pod = tb["podman"]
    p = ssh(tb, "rw1", "podman exec -i %s python3 -c 'print(1)'" % pod)
    assert (p.returncode, p.stdout) == (0, "1\n"), p.stderr
    p = ssh(tb, "rw5", "docker exec -i %s cat /proc/sys/kernel/hostname" % pod)
    assert (p.returncode, p.stdout) == (0, pod + "\n"), p.stderr


def test_podman_nopy_lacks_python3_and_stopped_refuses_exec():
    tb = testbed.require("podman_nopy")
    p = run(["podman", "exec", "-i", tb["podman_nopy"], "python3", "-c", "1"], tb)
    assert p.returncode == 127, (p.returncode, p.stderr)
    p = run(["podman", "exec", "-i", tb["podman_nopy"], "sh", "-c", "python3 -c 1"], tb)
    assert p.returncode == 127, (p.returncode, p.stderr)
    assert "not found" in p.stderr
    p = run(["podman", "exec", "-i", tb["podman"], "python3", "-c", "1"], tb)
    assert p.returncode == 0, "the image itself lost python3: %s" % p.stderr

    p = run(["podman", "exec", "-i", tb["podman_stopped"], "true"], tb)
    # podman answers 255 here -- the code ssh uses for its own failures
    assert p.returncode != 0
    assert "container state improper" in p.stderr


# ----------------------------------------------------------------------------- LXC and pct

def test_pct_exec_lands_in_rwlxc_filesystem():
    tb = testbed.require("pct")
    lxc = tb["pct_ids"]["200"]
    name = "/root/" + unique("pct")
    try:
        p = run(["pct", "exec", "200", "--", "sh", "-c", "echo pct > %s; cat /proc/sys/kernel/hostname" % name], tb)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == lxc
        assert not os.path.exists(name), "pct exec wrote to the host's filesystem"
        p = run(["lxc-attach", "-n", lxc, "--", "cat", name], tb)
        assert p.stdout == "pct\n", p.stderr
        # and from an ssh session on a test host, the ssh://rw1/pct:200 shape
        p = ssh(tb, "rw1", "pct exec 200 -- cat %s" % name)
        assert p.stdout == "pct\n", p.stderr
        p = ssh(tb, "rw1", "pct exec 200 -- python3 -c 'print(1)'")
        assert p.stdout == "1\n", p.stderr
    finally:
        run(["pct", "exec", "200", "--", "rm", "-f", name], tb)


def test_lxc_has_its_own_pid_namespace():
    tb = testbed.require("lxc")
    tag = "%d.%03d" % (3000 + os.getpid() % 1000, int(uuid.uuid4().int % 1000))  # unique sleep arg
    p = run(["lxc-attach", "-n", tb["lxc"], "--", "sh", "-c",
             "sleep %s >/dev/null 2>&1 & echo $!" % tag], tb)
    assert p.returncode == 0, p.stderr
    inner = int(p.stdout)
    try:
        host_pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if f.read() != b"sleep\0" + tag.encode() + b"\0":
                        continue
                with open("/proc/%s/status" % d) as f:
                    nspid = [l.split()[1:] for l in f if l.startswith("NSpid:")][0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            host_pids.append((int(d), [int(x) for x in nspid]))
        assert len(host_pids) == 1, host_pids
        host_pid, nspid = host_pids[0]
        assert nspid == [host_pid, inner], nspid
        assert host_pid != inner
    finally:
        run(["lxc-attach", "-n", tb["lxc"], "--", "kill", str(inner)], tb)


def test_pct_status_and_errors_are_proxmox_like():
    tb = testbed.require("pct")
    p = run(["pct", "status", "200"], tb)
    assert (p.returncode, p.stdout) == (0, "status: running\n")
    p = run(["pct", "status", "201"], tb)
    assert (p.returncode, p.stdout) == (0, "status: stopped\n")
    p = run(["pct", "exec", "999", "--", "true"], tb)
    assert p.returncode == 2
    assert re.fullmatch(r"Configuration file 'nodes/[^/]+/lxc/999\.conf' does not exist\n", p.stderr)
    # a stopped CT: pct hands over to lxc-attach, which fails with its own words
    p = run(["pct", "exec", "201", "--", "true"], tb)
    assert p.returncode != 0
    assert "Failed to get init pid" in p.stderr
