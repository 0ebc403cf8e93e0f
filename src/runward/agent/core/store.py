"""The state on the target: ~/.runward (or $RUNWARD_HOME), mode 0700, one directory per
run (run.json, attempts/N.json, log), written atomically; and the small file helpers the
records and logs need."""

import errno
import fcntl
import os
import time

from .homeowner import check_readable, not_ours, nearest_dir, unreadable, user_of
from .wire import AgentFailure, bad_input, json_dumps, json_loads, json_pretty, notice

NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
NAME_CHARS = NAME_FIRST | frozenset("._-")
LOCK_WAIT_S = 30.0  # how long a verb waits for a run's lock unless the request says (lock_timeout)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def valid_name(n):
    """A run name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$, checked without importing re."""
    return (isinstance(n, str) and 0 < len(n) <= 64 and n[0] in NAME_FIRST
            and all(c in NAME_CHARS for c in n))


def check_name(name):
    if not valid_name(name):  # a str, and never "." or "..": it starts with a letter or digit
        raise bad_input("invalid run name %r" % (name,),
                        "a run name is 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def make_private_dirs(path):
    """path and each missing directory above it, made 0700: os.makedirs gives the parents
    it makes 0777 & ~umask, and ~/.runward would come out 0755 that way."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


class Home(object):
    def __init__(self, path=None):
        path = path or os.environ.get("RUNWARD_HOME") or os.path.join(os.path.expanduser("~"), ".runward")
        self.path = os.path.abspath(os.path.expanduser(path))

    @property
    def id(self):
        import hashlib
        return hashlib.sha1(("%d:%s" % (os.getuid(), self.path)).encode()).hexdigest()[:10]

    def not_a_directory(self):
        return AgentFailure("AgentError", "state directory %s is not a directory (or has a file for runs/)" % self.path,
                            "set RUNWARD_HOME to a directory, or move that file away")

    def check_ours(self, root_only=False):
        """Refuse a home not this user's (not_ours) before anything is written there. root_only:
        only when root, who alone could write into another user's home (a status writes its
        health and stall state into the run's directory)."""
        check_readable(self.path)
        other = None if root_only and os.getuid() != 0 else not_ours(self.path)
        if other is not None:
            where = "is" if other[1] == self.path else "would be made in %s, which is" % other[1]
            raise AgentFailure("AgentError", "state directory %s %s %s, not this user's (uid %d)" % (
                self.path, where, user_of(other[0]), os.getuid()),
                "run runward as that user (sudo -u USER, or sudo without -E), or set RUNWARD_HOME to a "
                "directory of your own; nothing was written there")

    def ensure(self):
        self.check_ours()
        try:
            make_private_dirs(os.path.join(self.path, "runs"))
        except NotADirectoryError:
            raise self.not_a_directory()
        except PermissionError:  # a missing home under a directory this user cannot write
            raise unreadable(self.path, nearest_dir(self.path))
        st = os.stat(self.path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            # nothing world-writable is trusted (docs/protocol.md; docs/guarantees.md)
            raise AgentFailure("AgentError", "state directory %s is writable by others or not ours" % self.path,
                               "chmod 700 %s, or set RUNWARD_HOME to a directory of your own" % self.path)
        if st.st_mode & 0o077:
            # ours, only readable by others (an older runward made it 0755): the promise is 0700
            os.chmod(self.path, 0o700)

    def run_dir(self, name):
        return os.path.join(self.path, "runs", name)

    def run_names(self):
        try:
            return sorted(n for n in os.listdir(os.path.join(self.path, "runs")) if valid_name(n))
        except FileNotFoundError:
            return []
        except NotADirectoryError:  # RUNWARD_HOME names a file
            raise self.not_a_directory()
        except PermissionError:  # another user's home (0700), or one made unreadable: not a bug
            raise unreadable(self.path)


    def first_starts_waiting(self):
        """Runs with no records yet whose first start holds the lock, waiting for its GPUs
        (RunStore.gpu_wait): their lock files (runs/.NAME.lock) are all there is of them."""
        try:
            locks = os.listdir(os.path.join(self.path, "runs"))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []  # run_names, called first, says why where it matters
        names = [f[1:-5] for f in locks if f.startswith(".") and f.endswith(".lock") and valid_name(f[1:-5])]
        return [n for n in names if not RunStore(self, n).exists() and RunStore(self, n).gpu_wait() is not None]


class RunStore(object):
    """One run's records: run.json (spec of the last attempt, attempt counter),
    attempts/N.json (one per start), log (appended, never truncated)."""

    def __init__(self, home, name):
        self.home = home
        self.name = check_name(name)
        self.dir = home.run_dir(name)

    @classmethod
    def existing(cls, home, name):
        """The run's store, or RunNotFound."""
        store = cls(home, name)
        if not store.exists():
            raise AgentFailure("RunNotFound", "no run named %s on this target" % store.name,
                               "`runward status` lists the runs here")
        return store

    def exists(self):
        return os.path.isfile(os.path.join(self.dir, "run.json"))

    def lock(self, verb, timeout=None, on_wait=None):
        """An exclusive lock per run, held for a start or stop: two starts at the same moment
        give one job; the second sees it alive. The lock lives beside the run directory and
        names its holder, so a verb that finds it held says at once who holds it (a notice
        event), calls on_wait(holder), and waits at most timeout seconds (default 30):
        silence and an unbounded wait read as a hang."""
        import fcntl
        self.home.ensure()
        fd = os.open(self.lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._wait_lock(fd, timeout, on_wait)
            write_holder(fd, verb)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def try_lock(self, verb):
        """The run's lock if it is free now (its holder VERB written), else None: for a verb
        that waits for no one (prune, a status adopting a job an engine started). unlock() releases it."""
        import fcntl
        self.home.ensure()
        fd = os.open(self.lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        write_holder(fd, verb)
        return fd

    def _wait_lock(self, fd, timeout, on_wait):
        holder = read_holder(fd)
        notice("waiting for run %s: %s" % (self.name, describe_holder(holder)))
        if on_wait is not None:
            on_wait(holder)
        timeout = LOCK_WAIT_S if timeout is None else float(timeout)
        if not flock_within(fd, timeout):
            raise AgentFailure("LockTimeout", "gave up waiting %gs for the lock of run %s: %s" % (
                timeout, self.name, describe_holder(read_holder(fd) or holder)),
                "wait for that verb to finish (`runward status %s`), or give --lock-timeout more "
                "seconds" % self.name, holder=holder)

    def unlock(self, fd):
        """Release the lock, its holder's name erased first: a name in the file means a
        holder now (or one that crashed, whose lock the kernel released)."""
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)

    def lock_path(self):
        return os.path.join(self.home.path, "runs", "." + self.name + ".lock")

    def holder(self):
        """Who holds the run's lock, read without taking it ({} when nobody says)."""
        try:
            fd = os.open(self.lock_path(), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return {}
        try:
            return read_holder(fd)
        finally:
            os.close(fd)

    # A stop that finds a start holding the lock (waiting for GPUs) leaves a cancel request
    # naming itself; the start checks it at each poll and gives the lock up. A request whose
    # stop is gone (timed out, killed) is stale and ignored.

    def cancel_path(self):
        return os.path.join(self.home.path, "runs", "." + self.name + ".cancel")

    def request_cancel(self, by="stop"):
        """BY: who asks, said by the start it cancels ("stop", "restart": a restart's stop step,
        "health:ACTION")."""
        from .procfs import read_proc
        me = read_proc(os.getpid())
        write_json(self.cancel_path(), {"pid": os.getpid(), "start": me.start if me else None, "by": by})

    def clear_cancel(self):
        try:
            os.unlink(self.cancel_path())
        except FileNotFoundError:
            pass

    def check_cancel(self):
        """Raise Cancelled when a living stop asked this run's start to give up."""
        from .procfs import read_proc
        try:
            req = read_json(self.cancel_path())
        except AgentFailure:
            return
        p = read_proc(req["pid"]) if isinstance(req, dict) and isinstance(req.get("pid"), int) else None
        if p is not None and p.start == req.get("start"):
            raise _cancelled(self.name, req.get("by"), p.pid)

    def next_attempt(self):
        """The number the next attempt gets (read under the run lock): past run.json's counter
        and every attempt record there is."""
        run = self.run() if self.exists() else None
        return max([(run or {}).get("attempt", 0)] + self.attempts()) + 1

    def note_gpu_wait(self, fd, gpus, timeout):
        """A start holding the lock waits for its GPUs before attempt N exists (lifecycle.start):
        said in the lock's holder name, so that status shows the wait and which attempt it
        will make (an MCP task names that attempt from the start)."""
        write_holder(fd, "start", gpu_wait={"attempt": self.next_attempt(), "gpus": list(gpus),
                                             "timeout_s": timeout, "since": time.time()})

    def gpu_wait(self):
        """The start waiting for GPUs under this run's lock ({"attempt", "gpus", "since",
        "timeout_s", "pid"}), or None: none said so, or its process is gone (a holder that
        crashed leaves its name; the kernel released its lock)."""
        return self._live_note("gpu_wait")

    def note_stopping(self, fd, attempt, signal, grace):
        """A stop holding the lock has just signalled attempt N and waits up to grace seconds
        before KILL (ops/stop.py): said in the lock's holder name, as note_gpu_wait, so that
        status shows a stop under way and when its KILL comes. SIGNAL None: its signalling is
        over (the processes ended, or KILL was sent and waited for), the note goes."""
        held = read_holder(fd).get("since")  # the lock's own since stays: "locked by stop ... since"
        doing = {} if signal is None else {"stopping": {"attempt": attempt, "signal": signal, "grace_s": grace,
                                                        "since": time.time()}}
        write_holder(fd, "stop", **doing, **({"since": held} if held else {}))

    def stopping(self):
        """The stop under way ({"attempt", "signal", "grace_s", "since", "pid"}), or None: no
        stop said so, or its process is gone."""
        return self._live_note("stopping")

    def _live_note(self, key):
        from .procfs import read_proc
        h = self.holder()
        w = h.get(key)
        if not isinstance(w, dict) or not isinstance(h.get("pid"), int):
            return None
        p = read_proc(h["pid"])
        return dict(w, pid=h["pid"]) if p is not None and p.start == h.get("start") else None

    def run(self):
        return read_json(os.path.join(self.dir, "run.json"))

    def attempt_path(self, n):
        return os.path.join(self.dir, "attempts", "%d.json" % n)

    def attempt(self, n):
        return read_json(self.attempt_path(n))

    def update_attempt(self, n, change):
        """Attempt N's record read, changed and written back under the run's record lock, so
        that two writers (the shim recording the exit, a stop marking its request, a peer's
        note, a health action) never lose each other's fields: each rewrites the whole file.
        CHANGE(att) edits att in place; it returns False to write nothing. Returns the record
        as it now is ({} when there is none). The lock is held only for this read and write,
        never across another lock (the run lock is taken before it, if at all)."""
        import fcntl
        fd = os.open(os.path.join(self.dir, "record.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            att = self.attempt(n) or {}
            if att and change(att) is not False:
                write_json(self.attempt_path(n), att)
            return att
        finally:
            os.close(fd)  # and the lock with it

    def keep_end(self, att, ex):
        """An engine's end of attempt ATT kept in its record, unless one is kept already (a
        status and a stop may both get here): the first end recorded stands. ATT's "exit"
        becomes the record's."""
        def keep(now):
            if (now.get("exit") or {}).get("state"):
                return False
            now["exit"] = ex
        att["exit"] = self.update_attempt(att["attempt"], keep).get("exit", ex)

    def latest(self):
        r = self.run()
        if not r or not r.get("attempt"):
            return None
        return self.attempt(r["attempt"])

    def attempts(self):
        try:
            ns = sorted(int(f[:-5]) for f in os.listdir(os.path.join(self.dir, "attempts")) if f.endswith(".json"))
        except FileNotFoundError:
            return []
        return ns


def _cancelled(name, by, pid):
    """The Cancelled a start waiting for GPUs answers, saying who cancelled it and what that
    one goes on to do: a restart's stop step (the restart then starts the run itself, from its
    last attempt's spec or runward.toml, not from this start's command) is said as such, not as "a stop"."""
    if by == "restart":
        return AgentFailure(
            "Cancelled", "start of %s cancelled while waiting for GPUs: `runward restart %s` took the run over "
            "(its stop step, pid %d); this start made no attempt, and the restart starts the run from its last "
            "attempt's spec (or runward.toml's definition), not from this start's command" % (name, name, pid),
            "`runward status %s` shows what the restart started; to run this command instead: "
            "runward start %s --replace ... -- COMMAND" % (name, name))
    if isinstance(by, str) and by.startswith("health:"):
        return AgentFailure("Cancelled", "start of %s cancelled by a health action (%s, pid %d) while waiting "
                            "for GPUs; this start made no attempt" % (name, by[len("health:"):], pid),
                            "`runward status %s` shows what the action did" % name)
    return AgentFailure("Cancelled", "start of %s cancelled by a stop while waiting for GPUs" % name,
                        "the stop (pid %d) goes on; start again when you want the run" % pid)


# --- the run lock's holder and a bounded wait for it

def write_holder(fd, verb, **extra):
    """Name the holder in the lock file, through the lock's own descriptor (a rename would
    make a new file nobody holds the lock on). extra: what the holder is doing, for status
    (a start's gpu_wait: RunStore.note_gpu_wait)."""
    from .procfs import read_proc
    me = read_proc(os.getpid())
    data = json_dumps(dict({"verb": verb, "pid": os.getpid(), "start": me.start if me else None,
                            "since": time.time()}, **extra)).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the name only informs a waiter; a full disk must not stop the verb here


def read_holder(fd):
    try:
        h = json_loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return {}
    return h if isinstance(h, dict) else {}


def describe_holder(h):
    if not h.get("verb"):
        return "locked by another runward verb"
    since = time.strftime("%H:%M:%S", time.localtime(h["since"])) if h.get("since") else "?"
    return "locked by %s (pid %s) since %s" % (h["verb"], h.get("pid"), since)


class _LockWaitOver(Exception):
    pass


def flock_within(fd, timeout):
    """A blocking flock bounded by a timer signal (setitimer): the kernel wakes us when the
    lock is free, no sleep loop. True when taken, False when timeout passed first."""
    import fcntl
    import signal
    if timeout <= 0:
        return False
    armed = [True]

    def expired(signum, frame):
        if armed[0]:  # a late tick after the lock was taken must not raise outside the try
            raise _LockWaitOver()

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    except _LockWaitOver:
        return False  # (taken in the same instant or not: the caller closes fd either way)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --- files: written atomically, read back whole or from an offset

def disk_full(path):
    return AgentFailure("DiskFull", "disk full on %s: could not write %s" % (os.uname().nodename, path),
                        "free space on the target (df -h %s), then run the verb again" % (os.path.dirname(path) or "."))


def write_all(fd, data, path):
    """os.write until every byte is written (a write may write less); ENOSPC/EDQUOT become
    DiskFull naming path."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        if e.errno in DISK_FULL:
            raise disk_full(path)
        raise


def remove_file(path):
    """unlink, what is already gone (or cannot go) left as it is."""
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path, data, mode=0o600, sync=True):
    """temp file, all bytes written, fsync, rename, fsync of the directory: a reader sees the
    old or the new file, never half of one, and after a crash the rename is on disk. On any
    failure the temp file goes and the old file stays whole. sync=False leaves both fsyncs to
    the caller (sync_file), who has something faster to do first (supervise/policy.py: a restart)."""
    if isinstance(data, str):
        data = data.encode()
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            write_all(fd, data, path)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException as e:
        remove_file(tmp)
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            raise disk_full(path)
        raise
    if sync:
        fsync_dir(d)


def sync_file(path):
    """The fsyncs a write_atomic(sync=False) left: the file's, then its directory's."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:  # a filesystem that cannot sync a directory says EINVAL
            raise
    finally:
        os.close(fd)


def trusted_dir(d):
    """Ours and writable by nobody else: nobody else can plant a name in it."""
    st = os.stat(d)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def open_log(path):
    """The log opened for appending (created 0600). In a directory that is not ours or that
    others may write (/tmp, a shared scratch directory), a symlink planted at the log's name
    would send the header and the job's output into any file we can write, /etc/passwd for
    root: there a symlink is refused (O_NOFOLLOW), as BadInput naming the path."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    if not trusted_dir(os.path.dirname(path) or "."):
        flags |= os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise bad_input("log path %s is a symbolic link in a directory that others can write or that is "
                            "not ours: not following it" % path,
                            "remove the link, or give --log a path in a directory of your own")
        if e.errno in DISK_FULL:
            raise disk_full(path)
        raise


def write_json(path, obj, sync=True):
    write_atomic(path, json_pretty(obj) + "\n", sync=sync)  # indented for people


def read_json(path, default=None):
    try:
        with open(path, "rb") as f:
            return json_loads(f.read().decode())
    except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: a file where a directory of the path is
        return default
    except ValueError:
        # A torn record cannot happen with write_atomic; a hand-edited one can.
        raise AgentFailure("AgentError", "record %s is not valid JSON" % path,
                           "inspect or remove the file by hand")


def tail_lines(path, n, max_bytes=1 << 20):
    """Last n lines of a file, reading backwards from the end in blocks."""
    if n <= 0:
        return []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        end = os.fstat(fd).st_size
        pos, buf = end, b""
        while pos > 0 and buf.count(b"\n") <= n and end - pos < max_bytes:
            step = min(65536, pos)
            pos -= step
            buf = os.pread(fd, step, pos) + buf
    finally:
        os.close(fd)
    lines = buf.decode("utf-8", "replace").splitlines()
    if pos > 0 and lines:
        lines = lines[1:]  # first line is probably partial
    return lines[-n:]


def read_from(path, pos):
    """(bytes from pos to the end, at most 1 MiB, new pos); from 0 if the file shrank."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b"", pos
    try:
        size = os.fstat(fd).st_size
        if size < pos:
            pos = 0
        data = os.pread(fd, min(size - pos, 1 << 20), pos) if size > pos else b""
    finally:
        os.close(fd)
    return data, pos + len(data)


def first_lines(path, pos, n):
    data, _ = read_from(path, pos)
    return data.decode("utf-8", "replace").splitlines()[:n]


def sha256_file(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_hashes(paths):
    out = {}
    for p in paths:
        try:
            out[p] = sha256_file(p)
        except OSError:
            out[p] = None
    return out
