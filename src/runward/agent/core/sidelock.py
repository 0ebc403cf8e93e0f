"""A run's side files' lock (store.py's split, by concern): status, watch and the shim read
and write a run's health and stall state (health.json, stall.json) in turn under
runs/.NAME.health.lock and runs/.NAME.stall.lock; a reader that must not hang (status)
bounds its wait and names the holder from /proc/locks."""

import fcntl
import os
import time


class SideLocked(OSError):
    """A side file's lock still held by another process after the wait a reader allows
    (status: SIDE_WAIT_S); holder: {"pid", "command"} from /proc/locks, or None."""

    def __init__(self, what, name, wait, holder):
        who = ("pid %d (%s)" % (holder["pid"], holder["command"]) if holder and holder.get("command")
               else "pid %d" % holder["pid"] if holder else "another process")
        OSError.__init__(self, "the %s state of run %s is locked by %s: still held after %gs; "
                         "not read this time" % (what, name, who, wait))
        self.holder = holder


SIDE_WAIT_S = 5.0  # how long status waits for a run's health or stall state (SideLocked after)


class side_lock(object):
    """An exclusive lock of one side file of a run (its health or stall state), apart from
    the run lock: status, watch and the shim read and write that state in turn. wait: None
    waits as long as it takes (the shim, watch); seconds: at most that long, then SideLocked
    (status: a stuck holder, or a `flock` on the file, must not hang it silently). A class,
    not contextlib.contextmanager: importing contextlib (with collections and functools)
    cost every agent call ~2 ms of its start-up, and this is its only user on that path."""

    def __init__(self, store, what, wait=None):
        self.path = os.path.join(store.home.path, "runs", ".%s.%s.lock" % (store.name, what))
        self.what, self.name, self.wait, self.fd = what, store.name, wait, None

    def __enter__(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if self.wait is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                self._bounded(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return None

    def _bounded(self, fd):
        # polled, not flock_within's SIGALRM: the resident and the shim call from threads
        deadline, pause = time.monotonic() + self.wait, 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SideLocked(self.what, self.name, self.wait, flock_holder(fd))
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def __exit__(self, *exc):
        os.close(self.fd)
        self.fd = None
        return False


def flock_holder(fd):
    """{"pid", "command" (its comm)} of the process /proc/locks says holds a flock on fd's
    file, or None."""
    st = os.fstat(fd)
    dev = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks") as f:
            rows = [ln.split() for ln in f if "->" not in ln]
    except OSError:
        return None
    for r in rows:
        if len(r) > 5 and r[1] == "FLOCK" and r[5] == dev and r[4].isdigit() and int(r[4]) > 0:
            pid = int(r[4])
            try:  # its name only: another process's argv may hold a secret
                with open("/proc/%d/comm" % pid) as f:
                    cmd = f.read().strip()
            except OSError:
                cmd = None
            return {"pid": pid, "command": cmd}
    return None
