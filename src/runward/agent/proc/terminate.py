"""Stop means verified dead: signal a set of processes (the group's leader and each ancestor
before its children, as a terminal's Ctrl-C reaches a whole group at once), wait for them with
pidfd, escalate to KILL, and report each one's fate."""

import os
import select
import time

try:
    # the C module under signal: signal.py wraps it in enums, which import enum, functools
    # and collections (about 9 ms, measured with -X importtime); plain ints serve every use
    import _signal as signal
except ImportError:
    import signal

from . import faults
from ..core.procfs import look_up, read_proc
from ..core.wire import bad_input

SIGNALS = {name: getattr(signal, name) for name in dir(signal)
           if name.startswith("SIG") and not name.startswith("SIG_") and isinstance(getattr(signal, name), int)}
# number -> name, the first name in alphabetical order where a number has two (SIGABRT, not
# SIGIOT), as signal.Signals names them
SIGNAL_NAMES = {}
for _n in sorted(SIGNALS):
    SIGNAL_NAMES.setdefault(SIGNALS[_n], _n)
EMFILE, ENFILE = 24, 23  # errno's, without importing it: Linux's numbers on every architecture
FD_RESERVE = 8  # descriptors a stop keeps free for its own /proc reads, scans and records
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
    """Wait for processes to exit: pidfd + poll where the kernel gives one (wakes at once on
    exit, reaped or not), else by polling each one's (pid, start time) in /proc with a
    backoff from 1 ms to 40 ms, the two interleaved. A process is reported gone only once it
    was seen gone: not in /proc, another start time there, or a zombie."""

    def __init__(self):
        self.fds = {}       # pid -> pidfd
        self.idents = {}    # pid -> start, every watched process
        self.polled = set()  # pids watched by /proc alone: no pidfd for them
        self.poller = select.poll() if hasattr(os, "pidfd_open") else None
        self.fds_short = False  # pidfd_open hit the descriptor limit: open no more

    def add(self, p):
        """Watch p; False only when p was seen gone (pidfd_open's ESRCH, or /proc)."""
        if p.pid in self.idents:
            return True
        fd = self._pidfd(p.pid) if self.poller is not None and not self.fds_short else None
        if fd is False:
            return False
        try:
            q = look_up(p.pid)  # the pidfd names a process: check it is the one we identified
        except OSError:
            q = p  # could not look: not seen gone, so watched (a later look decides)
        if q is None or q.start != p.start:
            if fd is not None:
                os.close(fd)
            return False
        if fd is not None:
            self.fds[p.pid] = fd
            self.poller.register(fd, select.POLLIN)
        else:
            self.polled.add(p.pid)
        self.idents[p.pid] = p.start
        return True

    def _pidfd(self, pid):
        """A pidfd for pid; False when the kernel says there is no such process (ESRCH, the
        only answer that means gone); None when it could not give one for another reason
        (EMFILE, ENFILE, ENOMEM, EPERM, ENOSYS...): that pid is then watched through /proc."""
        try:
            return os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError as e:
            if e.errno in (EMFILE, ENFILE):
                self._spare_fds()
            return None

    def _spare_fds(self):
        """Out of descriptors: give back a few pidfds (their pids go on by /proc) so the stop
        can still read /proc, scan and write its records, and open no more."""
        self.fds_short = True
        for pid in list(self.fds)[-FD_RESERVE:]:
            fd = self.fds.pop(pid)
            self.poller.unregister(fd)
            os.close(fd)
            self.polled.add(pid)

    def alive(self):
        return list(self.idents)

    def signal(self, pid, sig):
        fd = self.fds.get(pid)
        try:
            if fd is not None and hasattr(signal, "pidfd_send_signal"):
                signal.pidfd_send_signal(fd, sig)
            else:
                q = look_up(pid)
                if q is None or q.start != self.idents.get(pid):
                    return False
                os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return False  # could not look or signal: not sent, and its fate will say so

    def _forget(self, pid):
        fd = self.fds.pop(pid, None)
        if fd is not None:
            self.poller.unregister(fd)
            os.close(fd)
        self.polled.discard(pid)
        self.idents.pop(pid, None)

    def _reap_dead(self):
        gone = []
        for pid, start in list(self.idents.items()):
            try:
                q = look_up(pid)
            except OSError:
                continue  # not seen: still watched
            if q is None or q.start != start or q.dead:
                gone.append(pid)
        for pid in gone:
            self._forget(pid)
        return gone

    def wait(self, timeout):
        """Block until at least one watched process exits or timeout; return exited pids.
        The poll on the pidfds is capped at the /proc backoff while some pids have none."""
        if not self.idents:
            return []
        deadline = time.monotonic() + max(0.0, timeout)
        delay = 0.001
        while True:
            gone = []
            left = max(0.0, deadline - time.monotonic())
            if self.fds:
                fd2pid = {fd: pid for pid, fd in self.fds.items()}
                cap = min(left, delay) if self.polled else left
                events = self.poller.poll(int(cap * 1000 + 0.999))  # ms, rounded up: no busy loop
                gone = [fd2pid[fd] for fd, _ in events if fd in fd2pid]
                for pid in gone:
                    self._forget(pid)
            elif left > 0:
                time.sleep(min(delay, left))
            gone += self._reap_dead()
            if gone or time.monotonic() >= deadline:
                return gone
            delay = min(delay * 2, 0.04)

    def close(self):
        for pid in list(self.idents):
            self._forget(pid)


class _Stopping(object):
    """One terminate(): the processes watched, and each one's fate and signals so far. Each
    process gets the stop signal at most once: to torchrun, Lightning and the HF Trainer a
    second SIGTERM or SIGINT means "abort now", mid-checkpoint. KILL is the only second."""

    def __init__(self, members, procs, group, find_more, thaw=None):
        self.procs, self.group, self.find_more = procs, group, find_more
        self.thaw, self.thawed = thaw, []
        self.watch = PidWatch()
        self.fates = {}
        self.settled = False  # graceful ended with every member dead and a scan finding no other
        for p in members.values():
            self.fates[p.pid] = dict(p.describe(), fate="gone", signals=[])
            if not self.watch.add(p):
                self.fates[p.pid]["fate"] = "gone_before_signal"
        self.t0 = time.monotonic()

    def _order(self, pids):
        """The group's leader first, then each process after its ancestors (by depth in the
        tree, then pid): a supervisor hears the stop before its workers, as with Ctrl-C."""
        def depth(pid):
            seen, p = 0, self.procs.get(pid)
            while p is not None and seen < 64:
                p, seen = self.procs.get(p.ppid), seen + 1
            return seen
        return sorted(pids, key=lambda pid: (pid != self.group, depth(pid), pid))

    def send(self, sig, pids):
        """Give each of pids sig unless it has it already, each by its own pidfd (by pid and
        start time where it has none), the group's leader first. Not a killpg: that cannot say
        whom it reached, and a child a TERM handler forks just after it (while this process
        was still busy with the signal, or waiting for a CPU) would be counted as reached when
        it never was. A process forked after its parent was sent the signal is not in pids:
        it is found by the next scan and gets the signal then, once."""
        name = signal_name(sig)
        sent = []
        for pid in self._order([pid for pid in pids if name not in self.fates[pid]["signals"]]):
            if self.watch.signal(pid, sig):
                self.fates[pid]["signals"].append(name)
                sent.append(pid)
        if sig not in (signal.SIGKILL, signal.SIGCONT):
            self.resume(sent)

    def resume(self, pids):
        """SIGCONT to each of pids that is paused (SIGSTOP, Ctrl-Z: state T), after the stop
        signal, as systemd does: a paused process only takes a caught signal once resumed, so
        without it a TERM handler never runs, its checkpoint is lost and KILL comes at the
        grace's end. Only the paused get it: a running job's own SIGCONT handler (a shell, a
        curses view) is not woken for nothing."""
        for pid in pids:
            q = read_proc(pid)
            if q is not None and q.state == "T" and self.watch.signal(pid, signal.SIGCONT):
                self.fates[pid]["resumed"] = "SIGCONT"

    def absorb(self):
        """Take in members that appeared since (children forked during shutdown); returns
        their pids."""
        if self.find_more is None:
            return []
        new = []
        for pid, p in self.find_more().items():
            if pid not in self.fates and self.watch.add(p):
                self.procs[pid] = p
                self.fates[pid] = dict(p.describe(), fate="gone", signals=[])
                new.append(pid)
        return new

    def wait(self, timeout):
        for pid in self.watch.wait(timeout):
            self.fates[pid]["exited_after"] = round(time.monotonic() - self.t0, 4)

    def graceful(self, sig, grace):
        """SIG to every member, and to each one found later, all within GRACE. Ends when
        every member seen is dead and a scan after that found no other (then self.settled:
        any member left would have had to be forked by a live one, which that scan would
        have seen), or when the grace is over."""
        self.send(sig, self.watch.alive())
        if self.thaw is not None:
            # a frozen cgroup (cgroup.freeze) holds its members as SIGSTOP does, but they read
            # S, not T: thawed right after the signal, as systemd thaws a frozen unit it stops,
            # so the pending signal's handler is the first thing they run
            self.thawed = self.thaw() or []
        faults.point("stop:signalled")
        deadline = self.t0 + grace
        while True:
            while self.watch.alive() and time.monotonic() < deadline:
                self.wait(min(0.25, deadline - time.monotonic()))
                if self.watch.alive():
                    self.send(sig, self.absorb())
            if self.watch.alive():
                return  # the grace is over: kill() goes on
            new = self.absorb()
            if not new:
                self.settled = True
                return
            self.send(sig, new)
            if time.monotonic() >= deadline:
                self.wait(0)  # the grace is over: take in those already gone, kill() the rest
                return

    def kill(self, rounds, kill_wait):
        for i in range(rounds):
            if not self.watch.alive() and not (i == 0 and self.settled):
                self.absorb()  # graceful's last scan found no other member: not again at once
            if not self.watch.alive():
                break
            self.send(signal.SIGKILL, self.watch.alive())  # once each: a second KILL adds nothing
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


def terminate(members, procs, sig, grace, find_more=None, kill_rounds=2, kill_wait=3.0, group=None, thaw=None):
    """Signal a set of processes, wait (pidfd) up to grace, escalate to KILL, verify.

    members: {pid: Proc}. find_more(): rescans and returns {pid: Proc} of current members
    (new children forked during shutdown are caught). group: the job's pgid; its leader is
    signalled first and every process after its ancestors, so supervisors (torchrun's agent)
    hear the stop before their workers and stop them in order instead of restarting them.
    thaw(): called once, right after the first signal (stop thaws the run's frozen cgroups).
    Returns fates: one entry per process ever seen."""
    stopping = _Stopping(members, procs, group, find_more, thaw)
    stopping.graceful(sig, grace)
    stopping.kill(kill_rounds, kill_wait)
    return stopping.result()


def reap_ended():
    """Reap the children that have ended by now, without waiting: the shim's adopted orphans
    (it is a child subreaper) are its to reap once dead."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return
        except InterruptedError:
            continue
