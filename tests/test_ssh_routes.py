"""Routes to an ssh host kept by what ssh resolves the target to now (design rule 14): an
alias re-pointed to another machine, or given another HostName by a second project's
[ssh] config, is answered by the machine it names now, never through the resident's
forward, relay or agent cache made for the other.

The testbed's hosts share this machine's files and pids; only the network namespace
differs. Each host here gets a home of its own: the target's python is a wrapper that sets
HOME (and so the agent's ~/.runward and a push's relative paths) by the netns it runs in.
Ground truth: /proc/PID/ns/net of the job, and the files in each host's home."""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, wait_for
from runward.transport import agentcall as transport
from helpers_ssh_control import _end_masters


def _netns(pid_or_path) -> int:
    if isinstance(pid_or_path, int):
        return int(os.readlink(f"/proc/{pid_or_path}/ns/net").strip("net:[]"))
    return os.stat(pid_or_path).st_ino


def _point(cfg: Path, tb: dict, host: str) -> None:
    """The alias `box` in cfg made to name testbed host `host` (rewritten in place, as a
    person edits it: same inode, same size)."""
    cfg.write_text(f"Host box\n  HostName {tb['addresses'][host]}\n  HostKeyAlias {host}\n  User root\n"
                   f"  IdentityFile {tb['client_key']}\n"
                   f"Host *\n  IdentitiesOnly yes\n  UserKnownHostsFile {tb['known_hosts']}\n"
                   f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n")


@pytest.fixture
def box(tmp_path, monkeypatch):
    tb = testbed.require("ssh")
    base = Path(f"/tmp/rw-routes-{uuid.uuid4().hex[:8]}")
    base.mkdir()
    wrapper = base / "python3"
    wrapper.write_text('#!/bin/sh\nHOME=%s/home-$(readlink /proc/self/ns/net | tr -dc 0-9)\nexport HOME\n'
                       'mkdir -p "$HOME"\nexec /usr/bin/python3 "$@"\n' % base)
    wrapper.chmod(0o755)
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RUNWARD_SSH_CONFIG", raising=False)
    monkeypatch.delenv("RUNWARD_RESIDENT", raising=False)
    monkeypatch.delenv("RUNWARD_RELAY", raising=False)
    projects = {}
    for p in ("a", "b"):
        d = tmp_path / p
        d.mkdir()
        (d / "runward.toml").write_text(f'[ssh]\nconfig = "ssh_config"\n\n[targets.box]\non = "ssh://box"\n'
                                        f'python = "{wrapper}"\n')
        c = CLI(tmp_path / "home", d)
        c.env.pop("RUNWARD_SSH_CONFIG", None)
        c.env["RUNWARD_RESIDENT_IDLE"] = "60"
        projects[p] = c

    class Box:
        def home(self, host: str) -> Path:
            return base / f"home-{_netns('/run/netns/runward-' + host)}"

        def point(self, project: str, host: str) -> None:
            _point(projects[project].cwd / "ssh_config", tb, host)

        def warm(self, project: str, name: str) -> None:
            """Status until it goes through the resident's relay (its forward recorded)."""
            c = projects[project]
            for _ in range(2):
                assert c.run("status", name, "--on", "box").returncode == 0
                wait_for(lambda: list(Path(base).glob("home-*/.runward/cache/resident-*.sock")),
                         what="a resident")
            control = transport.control_dir()
            wait_for(lambda: [n for n in os.listdir(control) if n.startswith("p-") and "." not in n],
                     what="a relay")
            assert c.run("status", name, "--on", "box").returncode == 0

    b = Box()
    b.cli = projects
    yield b
    for c in projects.values():
        c.run("stop", "routed", "--on", "box")
    _end_masters(transport.control_dir())
    for d in base.glob("home-*/.runward/cache"):
        pid = _lock_holder(d)
        if pid:
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(base, ignore_errors=True)


def _lock_holder(cache: Path) -> int | None:
    from helpers_resident import _lock_holder as holder
    return holder(cache)


def test_a_re_pointed_alias_is_answered_by_the_host_it_names_now(box, tmp_path):
    a = box.cli["a"]
    box.point("a", "rw1")
    rc, doc = a.json("start", "routed", "--on", "box", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    assert _netns(job) == _netns("/run/netns/runward-rw1")
    assert (box.home("rw1") / ".runward" / "runs" / "routed").is_dir()
    src = tmp_path / "f.txt"
    src.write_text("payload\n")
    assert a.run("push", "--on", "box", f"{src}:f.txt").returncode == 0
    assert (box.home("rw1") / "f.txt").read_text() == "payload\n"
    box.warm("a", "routed")

    box.point("a", "rw2")  # the machine was replaced: same alias, another host
    rc, doc = a.json("status", "routed", "--on", "box")
    assert rc == 4, doc  # rw2 has no such run
    assert (box.home("rw2") / ".runward").is_dir() and not (box.home("rw2") / ".runward" / "runs" / "routed").exists()
    assert a.run("logs", "routed", "--on", "box").returncode == 4
    rc, doc = a.json("push", "--on", "box", f"{src}:f.txt")
    assert rc == 0, doc
    assert (box.home("rw2") / "f.txt").read_text() == "payload\n"  # sent: rw2 did not have it

    box.point("a", "rw1")  # and back: rw1's run, still there
    rc, doc = a.json("status", "routed", "--on", "box")
    assert rc == 0 and doc["result"]["runs"][0]["pid"] == job, doc


def test_two_projects_that_give_one_alias_two_hosts_each_reach_their_own(box):
    a, b = box.cli["a"], box.cli["b"]
    box.point("a", "rw1")
    box.point("b", "rw2")
    rc, doc = a.json("start", "routed", "--on", "box", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    assert _netns(job) == _netns("/run/netns/runward-rw1")
    box.warm("a", "routed")
    for _ in range(2):
        rc, doc = b.json("status", "routed", "--on", "box")
        assert rc == 4, doc
        assert (box.home("rw2") / ".runward").is_dir()
        rc, doc = a.json("status", "routed", "--on", "box")
        assert rc == 0 and doc["result"]["runs"][0]["pid"] == job, doc
    assert not (box.home("rw2") / ".runward" / "runs" / "routed").exists()


def _ssh_says(cfg: Path, dest: str) -> str:
    import subprocess
    out = subprocess.run(["ssh", "-G", "-F", str(cfg), dest], capture_output=True, text=True, check=True).stdout
    said = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return f"{said['user']}@{said['hostname']}:{said['port']}"


def test_the_kept_resolution_follows_every_config_file_ssh_reads(tmp_path, monkeypatch):
    """What ssh -G says is kept (cache/ssh-resolved) while none of the files it read changed:
    the config, an Included file edited in place, a new file matching an Include's glob."""
    from runward.targets import sshresolve
    from runward.targets.sshresolve import resolved
    from runward.targets import parse_target
    monkeypatch.setattr(sshresolve, "RACY_S", 0)  # files written just now are kept (the rule below has its test)
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
    inc = tmp_path / "inc"
    inc.mkdir()
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Include {inc}/*.conf\n")
    (inc / "m.conf").write_text("Host box\n  HostName 10.9.0.1\n  Port 2201\n")
    monkeypatch.setenv("RUNWARD_SSH_CONFIG", str(cfg))
    hop = parse_target("ssh://box").hops[0]
    assert resolved(hop) == _ssh_says(cfg, "box") and ":2201" in resolved(hop)
    kept = json.loads((tmp_path / "home" / "cache" / "ssh-resolved").read_text())
    assert list(kept.values())[0][1] == resolved(hop)
    (inc / "m.conf").write_text("Host box\n  HostName 10.9.0.2\n  Port 2201\n")  # same size, in place
    assert resolved(hop) == _ssh_says(cfg, "box") and "@10.9.0.2:" in resolved(hop)
    (inc / "a.conf").write_text("Host box\n  HostName 10.9.0.3\n")  # read first: its value wins
    assert resolved(hop) == _ssh_says(cfg, "box") and "@10.9.0.3:" in resolved(hop)
    assert parse_target("ssh://box:2222").hops[0] and ":2222" in resolved(parse_target("ssh://box:2222").hops[0])
    # a config whose answer no file holds (Match exec) is asked each time, never kept
    cfg.write_text("Match exec true\n  HostName 10.9.0.4\n")
    assert "@10.9.0.4:" in resolved(hop)
    kept = json.loads((tmp_path / "home" / "cache" / "ssh-resolved").read_text())
    assert not any(json.loads(k)[2] == "box" and json.loads(k)[3] == 0 for k in kept)


def _point_through(cfg: Path, tb: dict, host: str) -> None:
    """The alias `box` re-pointed through another proxy only (ProxyCommand ssh -W, ProxyJump's
    own mechanism): same HostName, port and user, so OpenSSH's %C is the same for both."""
    cfg.write_text(f"Host box\n  HostName box.internal\n  HostKeyAlias {host}\n  User root\n"
                   f"  IdentityFile {tb['client_key']}\n"
                   f"  ProxyCommand ssh -F {tb['ssh_config']} -W {tb['addresses'][host]}:22 {host}\n"
                   f"Host *\n  IdentitiesOnly yes\n  UserKnownHostsFile {tb['known_hosts']}\n"
                   f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n")


def test_an_alias_re_pointed_through_another_proxy_is_answered_by_the_host_it_names_now(box):
    """The alias keeps its HostName and goes through another proxy (another bastion, another
    cluster with the same private address): OpenSSH's %C hashes host, port and user only, so
    the live control master to the old host must not carry the new resolution's calls."""
    import testbed as tbmod
    tb = tbmod.require("ssh")
    a = box.cli["a"]
    cfg = a.cwd / "ssh_config"
    _point_through(cfg, tb, "rw1")
    rc, doc = a.json("start", "routed", "--on", "box", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    assert _netns(job) == _netns("/run/netns/runward-rw1")
    box.warm("a", "routed")

    _point_through(cfg, tb, "rw2")  # through rw2 now: the master to rw1 is still up
    rc, doc = a.json("status", "routed", "--on", "box")
    assert rc == 4, doc  # rw2 has no such run
    assert (box.home("rw2") / ".runward").is_dir() and not (box.home("rw2") / ".runward" / "runs" / "routed").exists()

    _point_through(cfg, tb, "rw1")
    rc, doc = a.json("status", "routed", "--on", "box")
    assert rc == 0 and doc["result"]["runs"][0]["pid"] == job, doc


def _our_ssh_peers(home: Path) -> set[str]:
    """The IPv4 address:port that the ssh processes runward started with this home are
    connected to now (a ProxyJump's `ssh -W`, outliving the call beside its master: its
    environment names the home): /proc/PID/fd's sockets in /proc/PID/net/tcp, established."""
    import socket
    import struct
    out = set()
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit() or b"ssh" not in (d / "cmdline").read_bytes().split(b"\0")[0]:
                continue
            if f"RUNWARD_HOME={home}".encode() not in (d / "environ").read_bytes().split(b"\0"):
                continue
            inodes = {os.readlink(f).strip("socket:[]") for f in (d / "fd").iterdir()
                      if os.readlink(f).startswith("socket:[")}
            rows = (d / "net" / "tcp").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[9] in inodes and f[3] == "01":  # established
                addr, port = f[2].split(":")
                out.add(f"{socket.inet_ntoa(struct.pack('<I', int(addr, 16)))}:{int(port, 16)}")
    return out


def test_a_re_pointed_jump_host_is_gone_through_now(box, tmp_path):
    """box goes through ProxyJump bastion; bastion alone is re-pointed (box's own lines
    unchanged: ssh -G box still says `proxyjump bastion`). What ssh resolves the route to is
    the bastion's resolution too, so the next call connects through the bastion named now,
    never through the master still open by the old one. Ground truth: the TCP peers of the
    ssh processes runward started (rw1's then rw2's sshd), the job on rw3 both times."""
    import testbed as tbmod
    tb = tbmod.require("ssh")
    a = box.cli["a"]
    cfg = a.cwd / "ssh_config"

    def point(bastion: str) -> None:
        cfg.write_text(f"Host bastion\n  HostName {tb['addresses'][bastion]}\n  HostKeyAlias {bastion}\n"
                       f"Host box\n  HostName {tb['addresses']['rw3']}\n  HostKeyAlias rw3\n  ProxyJump bastion\n"
                       f"Host *\n  User root\n  IdentityFile {tb['client_key']}\n  IdentitiesOnly yes\n"
                       f"  UserKnownHostsFile {tb['known_hosts']}\n  GlobalKnownHostsFile /dev/null\n"
                       f"  StrictHostKeyChecking accept-new\n  BatchMode yes\n")
    point("rw1")
    rc, doc = a.json("start", "routed", "--on", "box", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    assert _netns(job) == _netns("/run/netns/runward-rw3")
    home = Path(a.env["RUNWARD_HOME"])
    assert f"{tb['addresses']['rw1']}:22" in _our_ssh_peers(home)

    point("rw2")
    rc, doc = a.json("status", "routed", "--on", "box")
    assert rc == 0 and doc["result"]["runs"][0]["pid"] == job, doc
    assert f"{tb['addresses']['rw2']}:22" in _our_ssh_peers(home), _our_ssh_peers(home)


def test_an_edit_in_the_same_second_as_the_last_ask_is_seen(tmp_path, monkeypatch):
    """On a file system whose timestamps count whole seconds (ext4 with 128-byte inodes, NFS
    and FAT ones), an in-place edit of the same size within the second ssh -G was last asked
    leaves every field of the file's identity as it was (inode, size, mtime, ctime): the kept
    answer was the old host's for good. An answer is kept only once its files are older than
    any timestamp's granule (as git's racy-clean check)."""
    import shutil
    import subprocess
    import time
    from runward.targets.sshresolve import resolved
    from runward.targets import parse_target
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4 for a file system of whole-second timestamps")
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(4 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-I", "128", str(img)], check=True, capture_output=True)
    if subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a loop device here")
    try:
        monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
        cfg = mnt / "ssh_config"
        monkeypatch.setenv("RUNWARD_SSH_CONFIG", str(cfg))
        hop = parse_target("ssh://box").hops[0]
        for _ in range(10):
            while time.time() % 1 > 0.2:  # at a second's start: both writes and the ask within it
                time.sleep(0.01)
            cfg.write_text("Host box\n  HostName 10.9.0.1\n")
            before = os.stat(cfg)
            assert "@10.9.0.1:" in resolved(hop)
            cfg.write_text("Host box\n  HostName 10.9.0.2\n")  # in place, same size
            after = os.stat(cfg)
            if after.st_mtime_ns == before.st_mtime_ns:  # the same second (a loaded machine may miss it)
                break
        # ground truth: nothing in the file's identity says it changed
        assert (before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns) == \
            (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
        assert resolved(hop) == _ssh_says(cfg, "box") and "@10.9.0.2:" in resolved(hop)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
