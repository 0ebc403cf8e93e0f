"""Stop means verified dead: signal a set of processes (their group first, as a terminal's
Ctrl-C would), wait for them with pidfd, escalate to KILL, and report each one's fate."""

import os
import select
import time

try:
    # the C module under signal: signal.py wraps it in enums, which import enum, functools
    # and collections (about 9 ms, measured with -X importtime); plain ints serve every use
    import _signal as signal
except ImportError:
    import signal

from .procfs import read_proc
from .wire import bad_input

SIGNALS = {name: getattr(signal, name) for name in dir(signal)
           if name.startswith("SIG") and not name.startswith("SIG_") and isinstance(getattr(signal, name), int)}
# number -> name, the first name in alphabetical order where a number has two (SIGABRT, not
# SIGIOT), as signal.Signals names them
SIGNAL_NAMES = {}
for _n in sorted(SIGNALS):
    SIGNAL_NAMES.setdefault(SIGNALS[_n], _n)
D_STATE_NOTE = "uninterruptible sleep (D state): stuck in the kernel, often a GPU driver or NFS call"


def parse_signal(s):
    s = str(s).strip().upper()
    if s.isdigit() and 0 < int(s) < 65:
        return int(s)
    if not s.startswith("SIG"):
        s = "SIG" + s
    if s in SIGNALS:
        return SIGNALS[s]
    raise bad_input("unknown signal %r" % s, "use a name such as TERM, INT, KILL, USR1 or a number")


def signal_name(num):
    return SIGNAL_NAMES.get(num, "SIG%s" % num)


class PidWatch(object):
    """Wait for processes to exit: pidfd + poll where the kernel has it (wakes at once on
    exit, reaped or not), else a kill(0)+/proc state loop backing off from 1 ms to 40 ms."""

    def __init__(self):
        self.fds = {}       # pid -> pidfd
        self.idents = {}    # pid -> start
        self.poller = select.poll() if hasattr(os, "pidfd_open") else None

    def add(self, p):
        if p.pid in self.idents:
            return True
        if self.poller is not None:
            try:
                fd = os.pidfd_open(p.pid)
            except OSError:
                return False
            # the pidfd names a process; check it is still the one we identified
            q = read_proc(p.pid)
            if q is None or q.start != p.start:
                os.close(fd)
                return False
            self.fds[p.pid] = fd
            self.poller.register(fd, select.POLLIN)
        self.idents[p.pid] = p.start
        return True

    def alive(self):
        return list(self.idents)

    def signal(self, pid, sig):
        fd = self.fds.get(pid)
        try:
            if fd is not None and hasattr(signal, "pidfd_send_signal"):
                signal.pidfd_send_signal(fd, sig)
            else:
                q = read_proc(pid)
                if q is None or q.start != self.idents.get(pid):
                    return False
                os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def _forget(self, pid):
        fd = self.fds.pop(pid, None)
        if fd is not None:
            self.poller.unregister(fd)
            os.close(fd)
        self.idents.pop(pid, None)

    def _reap_dead(self):
        gone = []
        for pid, start in list(self.idents.items()):
            q = read_proc(pid)
            if q is None or q.start != start or q.dead:
                gone.append(pid)
        for pid in gone:
            self._forget(pid)
        return gone

    def wait(self, timeout):
        """Block until at least one watched process exits or timeout; return exited pids."""
        if not self.idents:
            return []
        deadline = time.monotonic() + max(0.0, timeout)
        if self.poller is not None:
            fd2pid = {fd: pid for pid, fd in self.fds.items()}
            ms = int(max(0.0, timeout) * 1000)
            events = self.poller.poll(ms)
            gone = [fd2pid[fd] for fd, _ in events if fd in fd2pid]
            for pid in gone:
                self._forget(pid)
            return gone + self._reap_dead() if gone else self._reap_dead()
        delay = 0.001
        while True:
            gone = self._reap_dead()
            if gone or time.monotonic() >= deadline:
                return gone
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.04)

    def close(self):
        for pid in list(self.idents):
            self._forget(pid)


class _Stopping(object):
    """One terminate(): the processes watched, and each one's fate so far."""

    def __init__(self, members, procs, group, find_more):
        self.procs, self.group, self.find_more = procs, group, find_more
        self.watch = PidWatch()
        self.fates = {}
        for p in members.values():
            self.fates[p.pid] = dict(p.describe(), fate="gone", signals=[])
            if not self.watch.add(p):
                self.fates[p.pid]["fate"] = "gone_before_signal"
        self.t0 = time.monotonic()

    def _in_group(self, pid):
        return self.procs.get(pid) and self.procs[pid].pgrp == self.group

    def send(self, sig):
        sent = set()
        if self.group and any(self._in_group(pid) for pid in self.watch.alive()):
            try:
                os.killpg(self.group, sig)
                sent.update(pid for pid in self.watch.alive() if self._in_group(pid))
            except ProcessLookupError:
                pass
        for pid in self.watch.alive():
            if pid not in sent and self.watch.signal(pid, sig):
                sent.add(pid)
        for pid in sent:
            self.fates[pid]["signals"].append(signal_name(sig))

    def absorb(self):
        """Take in members that appeared since (children forked during shutdown)."""
        if self.find_more is None:
            return False
        new = False
        for pid, p in self.find_more().items():
            if pid not in self.fates and self.watch.add(p):
                self.procs[pid] = p
                self.fates[pid] = dict(p.describe(), fate="gone", signals=[])
                new = True
        return new

    def wait(self, timeout):
        for pid in self.watch.wait(timeout):
            self.fates[pid]["exited_after"] = round(time.monotonic() - self.t0, 4)

    def graceful(self, sig, grace):
        self.send(sig)
        deadline = self.t0 + grace
        while self.watch.alive() and time.monotonic() < deadline:
            self.wait(min(0.25, deadline - time.monotonic()))
            if self.absorb():
                self.send(sig)
        if not self.watch.alive() and self.absorb():
            self.send(sig)
            self.wait(min(1.0, max(0.0, deadline - time.monotonic())))

    def kill(self, rounds, kill_wait):
        for _ in range(rounds):
            if not self.watch.alive():
                self.absorb()
            if not self.watch.alive():
                break
            self.send(signal.SIGKILL)
            deadline = time.monotonic() + kill_wait
            while self.watch.alive() and time.monotonic() < deadline:
                self.wait(deadline - time.monotonic())

    def result(self):
        for pid in self.watch.alive():
            q = read_proc(pid)
            self.fates[pid]["fate"] = "survived"
            self.fates[pid]["state"] = q.state if q else "?"
            if q is not None and q.state == "D":
                self.fates[pid]["note"] = D_STATE_NOTE
        for f in self.fates.values():
            if f["fate"] == "gone" and f["signals"]:
                f["fate"] = "killed" if f["signals"][-1] == "SIGKILL" else "exited_after_" + f["signals"][-1]
        self.watch.close()
        return sorted(self.fates.values(), key=lambda f: f["pid"])


def terminate(members, procs, sig, grace, find_more=None, kill_rounds=2, kill_wait=3.0, group=None):
    """Signal a set of processes, wait (pidfd) up to grace, escalate to KILL, verify.

    members: {pid: Proc}. find_more(): rescans and returns {pid: Proc} of current members
    (new children forked during shutdown are caught). group: a pgid to signal as a whole
    first, the way a terminal's Ctrl-C does, so supervisors stop their workers in order.
    Returns fates: one entry per process ever seen."""
    stopping = _Stopping(members, procs, group, find_more)
    stopping.graceful(sig, grace)
    stopping.kill(kill_rounds, kill_wait)
    return stopping.result()
