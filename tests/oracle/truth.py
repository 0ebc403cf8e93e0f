"""Ground truth, read without runward: the host's /proc (which sees every process of the
testbed: its ssh hosts share this machine's pids, its containers are pid namespaces of it) and
files through /proc/PID/root (the filesystem a process of that namespace sees, as the kernel
resolves it). Nothing here imports runward."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    pid: int          # on the host
    nspid: int        # in its own pid namespace (what a target's agent calls it)
    ppid: int
    start: int        # field 22 of /proc/PID/stat
    state: str
    pidns: str
    cmdline: str
    fds: tuple = ()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


HOST_PIDNS = os.readlink("/proc/self/ns/pid")


def _proc(pid: int, with_fds: bool) -> Proc | None:
    stat = _read("/proc/%d/stat" % pid)
    cmd = _read("/proc/%d/cmdline" % pid)
    if stat is None or cmd is None:
        return None
    rest = stat[stat.rfind(b")") + 2:].split()
    try:
        ns = os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None
    nspid = pid
    if ns != HOST_PIDNS:   # a container's process: its own pid there (status, the costliest read, only here)
        status = _read("/proc/%d/status" % pid)
        if status is None:
            return None
        for line in status.split(b"\n"):
            if line.startswith(b"NSpid:"):
                nspid = int(line.split()[-1])
    fds = ()
    if with_fds:
        try:
            fds = tuple(os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid))
        except OSError:
            fds = ()
    return Proc(pid, nspid, int(rest[1]), int(rest[19]), rest[0].decode(), ns,
                cmd.replace(b"\0", b" ").decode("utf-8", "replace"), fds)


def scan(needles: tuple = (), fds_for: tuple = ()) -> list[Proc]:
    """Every live process (zombies are not alive) whose command line holds one of `needles`
    (all when empty), with its descriptors when its command line holds one of `fds_for`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        cmd = _read("/proc/%s/cmdline" % d)
        if cmd is None or (needles and not any(n.encode() in cmd for n in needles)):
            continue
        p = _proc(int(d), any(n.encode() in cmd for n in fds_for))
        if p is not None and p.state not in ("Z", "X"):
            out.append(p)
    return out


def carries(cmdline: str, token: str) -> bool:
    """TOKEN in the command line as itself: run 1's ORCTOK-ID-1 is not in run 10's ORCTOK-ID-10
    (a substring test counted run 10's processes as run 1's, the user soak's seed 8200)."""
    return re.search(re.escape(token) + r"(?!\d)", cmdline) is not None


def tree(token: str, pidns: str, procs: list | None = None) -> dict[int, Proc]:
    """host pid -> Proc of every live process in `pidns` that carries `token` in its command
    line, or descends from one that does (the worker's and the escapees' sleep). `procs`: a
    scan() to reuse (one /proc walk for every run of a check)."""
    everything = [p for p in (scan() if procs is None else procs) if p.pidns == pidns]
    found = {p.pid: p for p in everything if carries(p.cmdline, token)}
    grew = True
    while grew:
        grew = False
        for p in everything:
            if p.pid not in found and p.ppid in found:
                found[p.pid] = p
                grew = True
    return found


def sha256(root: str, path: str) -> str | None:
    """sha256 of `path` as a process whose root is `root` sees it, or None when absent."""
    data = _read(os.path.join(root, path.lstrip("/")))
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_text(root: str, path: str) -> str | None:
    data = _read(os.path.join(root, path.lstrip("/")))
    return None if data is None else data.decode("utf-8", "replace")


def alive(p: Proc) -> bool:
    """The same process (pid and start time) still lives."""
    stat = _read("/proc/%d/stat" % p.pid)
    if stat is None:
        return False
    rest = stat[stat.rfind(b")") + 2:].split()
    return int(rest[19]) == p.start and rest[0] not in (b"Z", b"X")


def kill_tokens(tokens: list[str]):
    """SIGKILL every live process (any namespace) carrying one of `tokens`, and their
    descendants, each checked by pid and start time just before: the oracle's own cleanup."""
    if not tokens:
        return
    everything = scan()
    found = {p.pid: p for p in everything if any(carries(p.cmdline, t) for t in tokens)}
    grew = True
    while grew:
        grew = False
        for p in everything:
            if p.pid not in found and p.ppid in found:
                found[p.pid] = p
                grew = True
    kill_procs(list(found.values()))


def kill_procs(procs: list):
    """SIGKILL each of these still alive (pid and start time checked just before)."""
    import signal
    for p in procs:
        if alive(p):
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
