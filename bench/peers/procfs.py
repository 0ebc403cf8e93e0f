"""Ground truth from /proc, independent of every tool under test (runward included).

A process is (pid, start time): start time is field 22 of /proc/PID/stat, in clock ticks
since boot. A process is dead when /proc/PID is gone, its start time differs (the pid was
reused), or its state is Z (zombie) or X: PID 1 on these machines reaps late.
Signals go through a pidfd opened after the start time was checked, so a reused pid is never
signalled.
"""
from __future__ import annotations

import os
import select
import signal
import time

SELF = os.getpid()


class Proc:
    __slots__ = ("pid", "ppid", "pgrp", "sid", "state", "start", "comm")

    def __init__(self, pid, ppid, pgrp, sid, state, start, comm):
        self.pid, self.ppid, self.pgrp, self.sid = pid, ppid, pgrp, sid
        self.state, self.start, self.comm = state, start, comm

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")

    @property
    def ident(self) -> tuple[int, int]:
        return (self.pid, self.start)

    def __repr__(self):
        return f"Proc({self.pid}, {self.state}, {self.comm})"


def stat(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    lp, rp = raw.find("("), raw.rfind(")")  # comm may contain spaces and ')'
    rest = raw[rp + 2:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    return Proc(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]), raw[lp + 1:rp])


def snapshot() -> dict[int, Proc]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = stat(int(name))
            if p is not None:
                out[p.pid] = p
    return out


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def alive(ident: tuple[int, int]) -> bool:
    p = stat(ident[0])
    return p is not None and p.start == ident[1] and not p.dead


def ancestors(pid: int = SELF) -> set[int]:
    out = set()
    while pid > 1:
        out.add(pid)
        p = stat(pid)
        if p is None:
            break
        pid = p.ppid
    return out


def tagged(tag: str) -> list[Proc]:
    """Live processes whose environment holds PEERBENCH_TAG=<tag> exactly."""
    want = b"PEERBENCH_TAG=" + tag.encode()
    out = []
    for p in snapshot().values():
        if not p.dead and want in environ(p.pid):
            out.append(p)
    return out


def mentioning(text: str) -> list[Proc]:
    """Live processes whose command line or environment mentions TEXT (a scratch path)."""
    needle = text.encode()
    mine = ancestors()
    out = []
    for p in snapshot().values():
        if p.dead or p.pid in mine:
            continue
        try:
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if needle in cmd or any(needle in e for e in environ(p.pid)):
            out.append(p)
    return out


def signal_ident(ident: tuple[int, int], sig: int) -> bool:
    """Signal (pid, start) through a pidfd: never a reused pid. True if sent."""
    pid, start = ident
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        p = stat(pid)
        if p is None or p.start != start or p.dead:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_pidfds(idents) -> dict:
    """{pidfd: ident} for the idents (pid, start time) still alive; a pid whose start time no
    longer matches (reused) is left out, its pidfd closed."""
    fds = {}
    for ident in idents:
        try:
            fd = os.pidfd_open(ident[0])
        except OSError:
            continue
        p = stat(ident[0])
        if p is None or p.start != ident[1]:
            os.close(fd)
            continue
        fds[fd] = ident
    return fds


def wait_dead(idents, timeout: float) -> list[tuple[int, int]]:
    """Wait (pidfd poll, no sleep loop) until every ident is dead or TIMEOUT passes.
    Returns the idents still alive. Exit counts at once (zombie = dead)."""
    fds = open_pidfds(idents)
    deadline = time.monotonic() + timeout
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                os.close(fd)
                fds.pop(fd, None)
        return [ident for ident in fds.values() if alive(ident)]
    finally:
        for fd in fds:
            os.close(fd)


def wait_until(cond, timeout: float, interval: float = 0.02):
    """Poll COND (a real condition, read from /proc or a file) until truthy or TIMEOUT.
    Returns its last value. The interval only spaces the polls; it is never the verdict."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def sweep(text: str, timeout: float = 10.0, shim_grace: float = 5.0) -> list[str]:
    """KILL every live process mentioning TEXT (cmdline or environ), by pid + start time,
    until none is left. Returns descriptions of what was killed.
    runward's shims are spared for SHIM_GRACE s after their jobs die: a shim records the exit and
    removes the run's cgroups, and a clean-up must not stand in the way of what is measured."""
    killed = []
    first = [p for p in mentioning(text) if "runward-shim" not in cmdline(p.pid)]
    shims = [p for p in mentioning(text) if "runward-shim" in cmdline(p.pid)]
    if shims:
        for p in first:
            desc = f"{p.pid} {' '.join(cmdline(p.pid))[:80] or p.comm}"
            if signal_ident(p.ident, signal.SIGKILL):
                killed.append(desc)
        wait_dead([p.ident for p in first], 5.0)
        wait_dead([p.ident for p in shims], shim_grace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = mentioning(text)
        if not found:
            break
        for p in found:
            desc = f"{p.pid} {' '.join(cmdline(p.pid))[:80] or p.comm}"
            if signal_ident(p.ident, signal.SIGKILL):
                killed.append(desc)
        wait_dead([p.ident for p in found], 2.0)
    return killed
