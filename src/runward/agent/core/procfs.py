"""Processes as /proc shows them. A process is (boot id, pid, start time), the start time
from field 22 of /proc/PID/stat: a pid alone is never signalled, pids are reused."""

import os

from .boot import BOOTSTRAP_HEAD, SHIM_ARG

# The job's environment carries MARKER=<run name>.<attempt>: descendants inherit it, so
# children that escaped with setsid or a double fork are still found.
MARKER = "RUNWARD_RUN"
# Which state directory the run belongs to: two homes on one machine (two users' tools, the
# testbed's hosts) may each have a run named "train", and a stop must only touch its own.
HOME_MARKER = "RUNWARD_HOME_ID"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
ENODEV = 19  # errno's, without importing it: Linux's number on every architecture


def read_all(path):
    """The bytes of path, read to EOF with plain system calls: a /proc scan reads a file per
    process, and open()'s buffered file object costs more than the read itself. To EOF,
    not one read: an environ can be larger than any one buffer."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while True:  # a short read is not EOF everywhere: only an empty one is
            data = os.read(fd, 65536)
            if not data:
                return b"".join(parts)
            parts.append(data)
    finally:
        os.close(fd)


def read_text(path, default=None):
    try:
        return read_all(path).decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return default
    except OSError as e:
        # a cgroup removed between our open and our read (the shim removes a run's cgroup
        # the moment it empties, while a stop may be reading it) reads ENODEV: it is gone
        if e.errno == ENODEV:
            return default
        raise


class Proc(object):
    __slots__ = ("pid", "ppid", "pgrp", "sid", "state", "start", "utime", "stime", "cutime", "cstime",
                 "rss", "comm", "uid", "_env", "_cmd", "_raw_cmd")

    def __init__(self, pid, fields, comm):
        self.pid = pid
        self.comm = comm
        self.state = fields[0]
        self.ppid = int(fields[1])
        self.pgrp = int(fields[2])
        self.sid = int(fields[3])
        self.utime = int(fields[11])
        self.stime = int(fields[12])
        self.cutime = int(fields[13])  # the CPU of its children it reaped (gone from /proc)
        self.cstime = int(fields[14])
        self.start = int(fields[19])
        self.rss = int(fields[21]) * PAGE_SIZE
        self.uid = None
        self._env = None
        self._cmd = self._raw_cmd = None

    @property
    def dead(self):
        return self.state in ("Z", "X")

    def env(self, name):
        if self._env is None:
            self._env = leaf_bytes(self.pid, "environ")
        key = b"\0" + name.encode() + b"="
        data = b"\0" + self._env
        i = data.find(key)
        if i < 0:
            return None
        j = data.find(b"\0", i + len(key))
        return data[i + len(key): j if j >= 0 else len(data)].decode("utf-8", "replace")

    def cmdline_raw(self):
        """/proc/PID/cmdline as it is: each argument followed by a NUL."""
        if self._raw_cmd is None:
            self._raw_cmd = leaf_bytes(self.pid, "cmdline")
        return self._raw_cmd

    def cmdline(self):
        if self._cmd is None:
            raw = self.cmdline_raw()
            self._cmd = [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] if raw else []
        return self._cmd

    def ident(self):
        return {"pid": self.pid, "start": self.start}

    def describe(self):
        cmd = self.cmdline()
        return {"pid": self.pid, "start": self.start, "state": self.state,
                "cmd": " ".join(cmd) if cmd else "[%s]" % self.comm}


def leaf_bytes(pid, leaf):
    """/proc/PID/LEAF as it is, or b"" when the process is gone or not ours to read."""
    try:
        return read_all("/proc/%d/%s" % (pid, leaf))
    except OSError:
        return b""


def pss(pid):
    """Proportional set size in bytes (/proc/PID/smaps_rollup's Pss: shared pages divided
    among their sharers), or None where it cannot be read: another user's process, a kernel
    before 4.14, a process gone meanwhile."""
    text = read_text("/proc/%d/smaps_rollup" % pid)
    if text:
        for line in text.splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return None


def read_proc(pid):
    try:
        return look_up(pid)
    except OSError:
        return None


def look_up(pid):
    """The process at pid as /proc shows it, or None only when /proc says there is none
    (ENOENT, ESRCH). Any other failure (EMFILE, ENFILE, ENOMEM, ...) raises: a verdict of
    death must come from seeing the process gone, never from failing to look."""
    try:
        data = read_all("/proc/%d/stat" % pid).decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may contain spaces and parentheses: split at the LAST ')'
    lp, rp = data.find("("), data.rfind(")")
    if lp < 0 or rp < 0:
        return None
    return Proc(pid, data[rp + 2:].split(), data[lp + 1:rp])


class ProcTable(dict):
    """pid -> Proc, with indexes built once, on first use: a status of 1,000 runs looks
    processes up by session, group, marker and parent instead of walking /proc per run."""

    _groups = _markers = _children = None

    def groups(self):
        if self._groups is None:
            self._groups = {}
            for p in self.values():
                self._groups.setdefault(p.sid, set()).add(p.pid)
                self._groups.setdefault(p.pgrp, set()).add(p.pid)
        return self._groups

    def markers(self):
        """run name -> [(pid, home id)] for RUNWARD_RUN=<name>.<attempt> (environ read once each)."""
        if self._markers is None:
            self._markers = {}
            for p in self.values():
                if p.dead or p.ppid == 2 or p.pid == 2:
                    continue
                name, _ = marker_run(p.env(MARKER))
                if name is not None:
                    self._markers.setdefault(name, []).append((p.pid, p.env(HOME_MARKER)))
        return self._markers

    def children(self):
        if self._children is None:
            self._children = {}
            for p in self.values():
                self._children.setdefault(p.ppid, []).append(p.pid)
        return self._children


def scan():
    """Every process of this pid namespace, as a ProcTable."""
    procs = ProcTable()
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = read_proc(int(name))
            if p is not None:
                procs[p.pid] = p
    return procs


def live(ident):
    """The live, non-zombie process with this identity ({"pid", "start"}), or None."""
    if not ident or not ident.get("pid"):
        return None
    p = read_proc(int(ident["pid"]))
    if p is None or p.start != int(ident["start"]) or p.dead:
        return None
    return p


def alive_in(procs, ident):
    p = procs.get(ident["pid"])
    return p is not None and p.start == ident["start"] and not p.dead


def marker_run(marker):
    """"name.N" -> (name, N), else (None, None)."""
    name, _, n = (marker or "").rpartition(".")
    return (name, int(n)) if name and n.isdigit() else (None, None)


def ancestors(pid, procs):
    out = set()
    while pid and pid not in out:
        out.add(pid)
        p = procs.get(pid) or read_proc(pid)
        if p is None:
            break
        pid = p.ppid
    return out


def protected(procs):
    """Never signal ourselves, our ancestors (the shell that ran us: pkill -f self-kill),
    pid 1, kernel threads, or any runward shim: `pid in protected(procs)`."""
    return Protected(procs)


class Protected(object):
    """protected()'s pids, each decided when first asked about: a stop or a status asks
    about its runs' few processes, and reading the command line of every session leader on
    the machine (is_shim) was a third of each scan. all() lists them, for ps and kill."""

    def __init__(self, procs):
        self.procs = procs
        self.always = ancestors(os.getpid(), procs)
        self.always.add(1)
        self.seen = {}

    def __contains__(self, pid):
        if pid in self.always:
            return True
        if pid not in self.seen:
            p = self.procs.get(pid)
            # shims lead their own session: a cheap filter before the command line
            self.seen[pid] = p is not None and (p.pid == 2 or p.ppid == 2 or (p.pid == p.sid and is_shim(p)))
        return self.seen[pid]

    def all(self):
        """Every protected pid of procs, as a set."""
        return {pid for pid in self.procs if pid in self} | self.always


_SHIM_ARG_Z = ("\0" + SHIM_ARG + "\0").encode()
_BOOTSTRAP_Z = ("\0" + BOOTSTRAP_HEAD).encode()


def is_shim(p):
    """SHIM_ARG is a whole argument of its command line and another begins with the
    bootstrap's first line (any runward version's: a shim outlives an upgrade), checked on the
    raw bytes: a status call asks this of every session leader on the machine."""
    raw = b"\0" + p.cmdline_raw()
    return _SHIM_ARG_Z in raw and _BOOTSTRAP_Z in raw


def descendants(roots, procs):
    if isinstance(procs, ProcTable):
        children = procs.children()
    else:
        children = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
    out, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        for c in children.get(pid, ()):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


# --- the machine: boot id, clocks, namespaces

def boot_id():
    return (read_text("/proc/sys/kernel/random/boot_id", "") or "").strip()


def uptime():
    try:
        return float(read_text("/proc/uptime").split()[0])
    except (AttributeError, ValueError, IndexError):
        return 0.0


def boot_time():
    for ln in (read_text("/proc/stat", "") or "").splitlines():
        if ln.startswith("btime "):
            return int(ln.split()[1])
    return 0


def age(p, up):
    """Seconds since process p started, given the machine's uptime up."""
    return max(0.0, up - p.start / float(CLK_TCK))


def owner_uid(pid):
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


def in_host_pidns():
    """True when this /proc shows the machine's first pid namespace (kthreadd, pid 2, is
    visible there and in no container's): only then are nvidia-smi's pids ours to read."""
    return "(kthreadd)" in (read_text("/proc/2/stat", "") or "")


def pid_namespace(pid="self"):
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def in_container():
    """In a container when its marker files exist, or when this /proc is not the machine's
    first pid namespace (kthreadd is not pid 2). /proc/1/environ's container= is not used:
    some VM inits set it on the host itself."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    return not in_host_pidns()


def close_all_but(keep):
    """In a fork that waits before its exec: every descriptor the shim had at the fork goes
    but KEEP. A notify hook's stdin pipe open then (close-on-exec, but the zygote waits, it
    does not exec) kept the hook's `cat` from ever reading EOF: the hook never ran."""
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
