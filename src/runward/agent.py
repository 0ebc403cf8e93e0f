"""runward agent: the side that runs where the job lives.

One stdlib-only file (Python >= 3.8, Linux), shipped through the hop chain on every
operation and executed by a fixed bootstrap (see BOOTSTRAP). The request travels on stdin,
never in argv, so no process we start ever carries a run name or a pattern in its command
line (design.md rule 1: `pkill -f` self-match).

Wire format, stdin:  <len(agent source)>\\n <agent source> <request JSON>\\n [binary payload]
Wire format, stdout: zero or more {"event": ...} lines, then exactly one reply line
                     {"v": 1, "ok": true, "result": {...}} or {"v": 1, "ok": false, "error": {...}}

The same file is the shim: started detached (new session) as the parent of the job, it
waits for the job and writes its exit status into the attempt record.
"""

import os
import sys
import time

# hashlib, socket, subprocess and traceback are imported where used, and re, json,
# collections, fcntl, math and select on first use (see _LazyModule): every operation pays
# for the agent's start-up, so it imports only what the common verbs need. json and re
# together were half of a bare agent's start-up; a status call needs neither (see
# json_dumps, json_loads, valid_name), nor signal's enums (see _signal below).

PROTOCOL = 1
# The bootstrap is the only code on the command line; it carries no request data. It reads
# "<length> <sha256>" and the zlib-compressed agent source from stdin (length 0: none, the
# caller believes it is cached here; if it is not, the one reply is AgentMissing and nothing
# ran, so the caller sends it again with the source), and hands the
# compressed source on (AGENT_SOURCE)
# so the shim is started the same way, with no agent file on disk. Compiling the source costs
# more than the rest of a status call, so the code object is cached by the source's hash in a
# 0700 directory of the user's own; a cache file that is not ours or is group/world-writable
# is ignored (design.md rule 10).
BOOTSTRAP = """import sys,os,marshal
b=sys.stdin.buffer;n,h=b.readline().split();z=b.read(int(n));h=h.decode()
d=os.path.join(os.environ.get('RUNWARD_HOME') or os.path.expanduser('~/.runward'),'cache')
p=os.path.join(d,'agent-%s.%s'%(h[:32],sys.implementation.cache_tag))
try:
 f=open(p,'rb');st=os.fstat(f.fileno())
 if st.st_uid!=os.getuid() or st.st_mode&0o22:raise OSError
 c=marshal.loads(f.read());f.close();k=1
except Exception:
 if not z:print('{"v": 1, "ok": false, "error": {"type": "AgentMissing", "message": "agent %s is not cached here"}}'%h[:12]);sys.exit(3)
 import zlib;c=compile(zlib.decompress(z),'runward-agent','exec');k=0
 try:
  os.makedirs(d,0o700,exist_ok=True);t='%s.%d'%(p,os.getpid());f=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600)
  os.write(f,marshal.dumps(c));os.close(f);os.rename(t,p);k=1
 except Exception:pass
exec(c,{'__name__':'__main__','AGENT_SOURCE':z,'AGENT_SHA':h,'AGENT_CACHED':k})"""
SHIM_ARG = "runward-shim"
MARKER = "RUNWARD_RUN"
# Which state directory the run belongs to: two homes on one machine (two users' tools, the
# testbed's hosts) may each have a run named "train", and a stop must only touch its own.
HOME_MARKER = "RUNWARD_HOME_ID"
NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
NAME_CHARS = NAME_FIRST | frozenset("._-")
# an environment variable whose name holds one of these (any case) is never printed
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
LOG_TAIL_LINES = 20
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _LazyModule(object):
    """A stdlib module imported on first use, which then takes its own place among the
    module's globals."""
    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        mod = __import__(self._name)
        globals()[self._name] = mod
        return getattr(mod, attr)


try:
    # the C module under signal: signal.py wraps it in enums, which import enum, functools
    # and collections (9 ms); plain ints serve every use here
    import _signal as signal
except ImportError:
    import signal
re = _LazyModule("re")
fcntl = _LazyModule("fcntl")
math = _LazyModule("math")
select = _LazyModule("select")
json = _LazyModule("json")
collections = _LazyModule("collections")


_JSON = []


def _json_codec():
    """(loads, dumps) through json's own C accelerator, driven directly: json's Python layer
    imports re, and re imports enum, which together cost more than the rest of a status call.
    Checked once on a sample; where _json is missing or behaves otherwise, plain json."""
    if _JSON:
        return _JSON
    try:
        import _json

        class Ctx(object):
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                              "-Infinity": float("-inf")}.__getitem__

        scan = _json.make_scanner(Ctx())

        def loads(s):
            if isinstance(s, bytes):
                s = s.decode()
            t = s.strip(" \t\n\r")  # JSON's whitespace, and only that
            try:
                obj, end = scan(t, 0)
            except StopIteration:
                raise ValueError("not JSON: expecting a value at the start")
            if end != len(t):
                raise ValueError("not JSON: extra data at character %d" % end)
            return obj

        def default(o):
            raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

        def dumps(obj, sort_keys=False):
            enc = _json.make_encoder({}, default, _json.encode_basestring_ascii, None,
                                     ": ", ", ", sort_keys, False, True)
            return "".join(enc(obj, 0))

        sample = {"a": [1, -2.5, None, True, False, "x\u00e9\n\"", {"1": {}}], "b": 1e300}
        text = dumps(sample)
        if loads(text) != sample or text != (
                '{"a": [1, -2.5, null, true, false, "x\\u00e9\\n\\"", {"1": {}}], "b": 1e+300}'):
            raise ValueError("_json differs")
        _JSON[:] = [loads, dumps]
    except Exception:
        import json as json_
        _JSON[:] = [json_.loads, json_.dumps]
    return _JSON


def json_loads(s):
    return _json_codec()[0](s)


def json_dumps(obj, sort_keys=False):
    """json.dumps(obj, sort_keys=sort_keys) with its defaults otherwise (ensure_ascii,
    ", " and ": ", NaN allowed)."""
    return _json_codec()[1](obj, sort_keys=sort_keys)


def valid_name(n):
    """A run name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$, checked without importing re."""
    return (isinstance(n, str) and 0 < len(n) <= 64 and n[0] in NAME_FIRST
            and all(c in NAME_CHARS for c in n))


def is_secret_name(k):
    u = k.upper()
    return any(w in u for w in SECRET_WORDS)


class _LazyRe(object):
    """A regular expression compiled on first use, which then takes its own place among the
    module's globals. Every operation pays for the agent's start-up, and compiling the log
    parser's patterns costs more than a whole status call's work that never uses them."""
    __slots__ = ("_name", "_args")

    def __init__(self, name, *args):
        self._name = name
        self._args = args

    def __getattr__(self, attr):
        import re
        rx = re.compile(*self._args)
        globals()[self._name] = rx
        return getattr(rx, attr)


def lazy_re(name, *args):
    return _LazyRe(name, *args)


class AgentFailure(Exception):
    """An error that becomes the reply: type maps to one exit code on the CLI side."""

    def __init__(self, type_, message, hint=None, **details):
        Exception.__init__(self, message)
        self.type = type_
        self.message = message
        self.hint = hint
        self.details = details

    def to_dict(self):
        d = {"type": self.type, "message": self.message}
        if self.hint:
            d["hint"] = self.hint
        if self.details:
            d["details"] = self.details
        return d


def bad_input(message, hint=None, **details):
    return AgentFailure("BadInput", message, hint, **details)


# ---------------------------------------------------------------------------------------
# Small file helpers
# ---------------------------------------------------------------------------------------

def write_atomic(path, data, mode=0o600):
    """temp file, fsync, rename: a reader sees the old or the new file, never half of one."""
    if isinstance(data, str):
        data = data.encode()
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path, default=None):
    try:
        with open(path, "rb") as f:
            return json_loads(f.read().decode())
    except FileNotFoundError:
        return default
    except ValueError:
        # A torn record cannot happen with write_atomic; a hand-edited one can.
        raise AgentFailure("AgentError", "record %s is not valid JSON" % path,
                           "inspect or remove the file by hand")


ENODEV = 19  # errno's, without importing it: Linux's number on every architecture


def read_text(path, default=None):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return default
    except OSError as e:
        # a cgroup removed between our open and our read (the shim removes a run's cgroup
        # the moment it empties, while a stop may be reading it) reads ENODEV: it is gone
        if e.errno == ENODEV:
            return default
        raise


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


def sha256_file(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def boot_id():
    return (read_text("/proc/sys/kernel/random/boot_id", "") or "").strip()


def redact_env(env):
    """Secret-looking values are kept on disk (mode 0600) but never sent back or printed."""
    return {k: ("[secret]" if is_secret_name(k) else v) for k, v in (env or {}).items()}


# ---------------------------------------------------------------------------------------
# Processes: identity is (boot id, pid, start time); a pid alone is never signalled.
# ---------------------------------------------------------------------------------------

class Proc(object):
    __slots__ = ("pid", "ppid", "pgrp", "sid", "state", "start", "utime", "stime",
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
            self._env = proc_bytes(self.pid, "environ")
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
            self._raw_cmd = proc_bytes(self.pid, "cmdline")
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


def proc_bytes(pid, leaf):
    """/proc/PID/LEAF as it is, or b"" when the process is gone or not ours to read."""
    try:
        with open("/proc/%d/%s" % (pid, leaf), "rb") as f:
            return f.read()
    except OSError:
        return b""


def read_proc(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
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
                m = p.env(MARKER)
                if m:
                    name, _, n = m.rpartition(".")
                    if n.isdigit():
                        self._markers.setdefault(name, []).append((p.pid, p.env(HOME_MARKER)))
        return self._markers

    def children(self):
        if self._children is None:
            self._children = {}
            for p in self.values():
                self._children.setdefault(p.ppid, []).append(p.pid)
        return self._children


def scan_procs():
    procs = ProcTable()
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = read_proc(int(name))
            if p is not None:
                procs[p.pid] = p
    return procs


def proc_matches(ident):
    """The live, non-zombie process with this identity, or None."""
    if not ident or not ident.get("pid"):
        return None
    p = read_proc(int(ident["pid"]))
    if p is None or p.start != int(ident["start"]) or p.dead:
        return None
    return p


def ancestors_of(pid, procs):
    out = set()
    while pid and pid not in out:
        out.add(pid)
        p = procs.get(pid) or read_proc(pid)
        if p is None:
            break
        pid = p.ppid
    return out


def protected_pids(procs):
    """Never signal ourselves, our ancestors (the shell that ran us: pkill -f self-kill),
    pid 1, kernel threads, or any runward shim."""
    prot = ancestors_of(os.getpid(), procs)
    prot.add(1)
    for p in procs.values():
        if p.pid == 2 or p.ppid == 2:
            prot.add(p.pid)
        elif p.pid == p.sid and is_shim(p):  # shims lead their own session: cheap pre-filter
            prot.add(p.pid)
    return prot


_SHIM_ARG_Z = ("\0" + SHIM_ARG + "\0").encode()
_BOOTSTRAP_Z = ("\0" + BOOTSTRAP + "\0").encode()


def is_shim(p):
    """SHIM_ARG and BOOTSTRAP are both whole arguments of its command line (checked on the
    raw bytes: a status call asks this of every session leader on the machine)."""
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


SIGNALS = {name: getattr(signal, name) for name in dir(signal)
           if name.startswith("SIG") and not name.startswith("SIG_") and isinstance(getattr(signal, name), int)}


def parse_signal(s):
    s = str(s).strip().upper()
    if s.isdigit() and 0 < int(s) < 65:
        return int(s)
    if not s.startswith("SIG"):
        s = "SIG" + s
    if s in SIGNALS:
        return SIGNALS[s]
    raise bad_input("unknown signal %r" % s, "use a name such as TERM, INT, KILL, USR1 or a number")


# number -> name, the first name in alphabetical order where a number has two (SIGABRT, not
# SIGIOT), as signal.Signals names them
SIGNAL_NAMES = {}
for _n in sorted(SIGNALS):
    SIGNAL_NAMES.setdefault(SIGNALS[_n], _n)


def signal_name(num):
    return SIGNAL_NAMES.get(num, "SIG%s" % num)


def terminate(members, procs, sig, grace, find_more=None, kill_rounds=2, kill_wait=3.0, group=None):
    """Signal a set of processes, wait (pidfd) up to grace, escalate to KILL, verify.

    members: {pid: Proc}. find_more(): rescans and returns {pid: Proc} of current members
    (new children forked during shutdown are caught). group: a pgid to signal as a whole
    first, the way a terminal's Ctrl-C does, so supervisors stop their workers in order.
    Returns fates: one entry per process ever seen."""
    watch = PidWatch()
    fates = {}
    for p in members.values():
        fates[p.pid] = dict(p.describe(), fate="gone", signals=[])
        if not watch.add(p):
            fates[p.pid]["fate"] = "gone_before_signal"

    def send(sig_):
        sent = set()
        if group and any(procs.get(pid) and procs[pid].pgrp == group for pid in watch.alive()):
            try:
                os.killpg(group, sig_)
                for pid in watch.alive():
                    if procs.get(pid) and procs[pid].pgrp == group:
                        sent.add(pid)
            except ProcessLookupError:
                pass
        for pid in watch.alive():
            if pid not in sent and watch.signal(pid, sig_):
                sent.add(pid)
        for pid in sent:
            fates[pid]["signals"].append(signal_name(sig_))

    def absorb():
        if find_more is None:
            return False
        new = False
        for pid, p in find_more().items():
            if pid not in fates and watch.add(p):
                procs[pid] = p
                fates[pid] = dict(p.describe(), fate="gone", signals=[])
                new = True
        return new

    t0 = time.monotonic()
    send(sig)
    deadline = t0 + grace
    while watch.alive() and time.monotonic() < deadline:
        for pid in watch.wait(min(0.25, deadline - time.monotonic())):
            fates[pid]["exited_after"] = round(time.monotonic() - t0, 4)
        if absorb():
            send(sig)
    if not watch.alive() and absorb():
        send(sig)
        for pid in watch.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            fates[pid]["exited_after"] = round(time.monotonic() - t0, 4)
    for _ in range(kill_rounds):
        if not watch.alive():
            absorb()
        if not watch.alive():
            break
        send(signal.SIGKILL)
        kdeadline = time.monotonic() + kill_wait
        while watch.alive() and time.monotonic() < kdeadline:
            for pid in watch.wait(kdeadline - time.monotonic()):
                fates[pid]["exited_after"] = round(time.monotonic() - t0, 4)
    for pid in watch.alive():
        q = read_proc(pid)
        fates[pid]["fate"] = "survived"
        fates[pid]["state"] = q.state if q else "?"
        if q is not None and q.state == "D":
            fates[pid]["note"] = "uninterruptible sleep (D state): stuck in the kernel, often a GPU driver or NFS call"
    for f in fates.values():
        if f["fate"] == "gone" and f["signals"]:
            f["fate"] = "killed" if f["signals"][-1] == "SIGKILL" else "exited_after_" + f["signals"][-1]
    watch.close()
    return sorted(fates.values(), key=lambda f: f["pid"])


# ---------------------------------------------------------------------------------------
# State: ~/.runward (or $RUNWARD_HOME), mode 0700
# ---------------------------------------------------------------------------------------

class Home(object):
    def __init__(self, path=None):
        path = path or os.environ.get("RUNWARD_HOME") or os.path.join(os.path.expanduser("~"), ".runward")
        self.path = os.path.abspath(os.path.expanduser(path))

    @property
    def id(self):
        import hashlib
        return hashlib.sha1(("%d:%s" % (os.getuid(), self.path)).encode()).hexdigest()[:10]

    def ensure(self):
        os.makedirs(self.path, 0o700, exist_ok=True)
        try:
            os.mkdir(os.path.join(self.path, "runs"), 0o700)
        except FileExistsError:
            pass
        st = os.stat(self.path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            # design.md rule 10: nothing world-writable is trusted
            raise AgentFailure("AgentError", "state directory %s is writable by others or not ours" % self.path,
                               "chmod 700 %s, or set RUNWARD_HOME to a directory of your own" % self.path)

    def run_dir(self, name):
        return os.path.join(self.path, "runs", name)

    def run_names(self):
        try:
            return sorted(n for n in os.listdir(os.path.join(self.path, "runs")) if valid_name(n))
        except FileNotFoundError:
            return []


def check_name(name):
    if not valid_name(name):  # a str, and never "." or "..": it starts with a letter or digit
        raise bad_input("invalid run name %r" % (name,),
                        "a run name is 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def existing_run(home, name):
    store = RunStore(home, name)
    if not store.exists():
        raise AgentFailure("RunNotFound", "no run named %s on this target" % store.name,
                           "`runward status` lists the runs here")
    return store


class RunStore(object):
    """One run's records: run.json (spec of the last attempt, attempt counter),
    attempts/N.json (one per start), log (appended, never truncated)."""

    def __init__(self, home, name):
        self.home = home
        self.name = check_name(name)
        self.dir = home.run_dir(name)

    def exists(self):
        return os.path.isfile(os.path.join(self.dir, "run.json"))

    def lock(self):
        """An exclusive lock per run, held for a start or stop: two starts at the same moment
        give one job; the second sees it alive. The lock lives beside the run directory."""
        self.home.ensure()
        fd = os.open(os.path.join(self.home.path, "runs", "." + self.name + ".lock"),
                     os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def run(self):
        return read_json(os.path.join(self.dir, "run.json"))

    def attempt_path(self, n):
        return os.path.join(self.dir, "attempts", "%d.json" % n)

    def attempt(self, n):
        return read_json(self.attempt_path(n))

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


# ---------------------------------------------------------------------------------------
# cgroups: the one container a double-forking child that clears its environment cannot leave
# ---------------------------------------------------------------------------------------

def cgroup_roots():
    """Writable cgroup hierarchies: v2 (unified) if we can create under it, else v1 pids/memory."""
    out = []
    cands = []
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        cands.append(("v2", "/sys/fs/cgroup"))
    else:
        for c in ("pids", "memory", "unified"):
            p = "/sys/fs/cgroup/" + c
            if os.path.isfile(os.path.join(p, "cgroup.procs")):
                cands.append(("v2" if c == "unified" else "v1", p))
    for kind, p in cands:
        if os.access(p, os.W_OK):
            out.append((kind, p))
    return out


def cgroup_create(name, attempt, home_id=""):
    """Try to make runward/<home id>-<name>.<attempt> in each writable hierarchy; return the
    paths made."""
    made = []
    leaf = "%s-%s.%d" % (home_id, name, attempt) if home_id else "%s.%d" % (name, attempt)
    for kind, root in cgroup_roots():
        base = os.path.join(root, "runward")
        try:
            os.makedirs(os.path.join(base, leaf), exist_ok=True)
            made.append(os.path.join(base, leaf))
        except OSError:
            continue
    return made


def cgroup_pids(paths):
    pids = set()
    for p in paths or ():
        txt = read_text(os.path.join(p, "cgroup.procs"), "") or ""
        pids.update(int(x) for x in txt.split() if x.isdigit())
    return pids


def cgroup_remove(paths):
    for p in paths or ():
        try:
            os.rmdir(p)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# Run state: what is true now, from the records and /proc
# ---------------------------------------------------------------------------------------

def run_members(name, att, procs, prot):
    """Every live process of a run: the job, its session and group, descendants, every
    process carrying the marker (any attempt of this run), members of its cgroups."""
    if not isinstance(procs, ProcTable):
        procs = ProcTable(procs)
    members = {}
    job = att.get("job") if att else None
    jp = procs.get(job["pid"]) if job else None
    if jp is not None and jp.start == job["start"] and not jp.dead:
        members[jp.pid] = jp
        for pid in procs.groups().get(jp.pid, ()):
            members[pid] = procs[pid]  # its session and its process group (both are its pid)
    hid = att.get("home_id") if att else None
    for pid, phid in procs.markers().get(name, ()):
        # a record or a process from before home ids were kept matches on the name alone
        if pid not in prot and (hid is None or phid is None or phid == hid):
            members[pid] = procs[pid]
    for pid in cgroup_pids(att.get("cgroups") if att else ()):
        p = procs.get(pid)
        if p is not None:
            members[pid] = p
    for pid in descendants(list(members), procs):
        members[pid] = procs[pid]
    return {pid: p for pid, p in members.items() if pid not in prot and not p.dead}


def attempt_state(att, procs, bid):
    """running | exited | failed | lost | orphaned | starting"""
    if att is None:
        return "none"
    if att.get("boot_id") and att["boot_id"] != bid:
        return "lost"
    job = att.get("job")
    shim = att.get("shim")
    job_alive = bool(job) and _alive_in(procs, job)
    shim_alive = bool(shim) and _alive_in(procs, shim)
    if att.get("exit"):
        return "exited" if job else "failed"
    if job_alive:
        return "running" if shim_alive else "orphaned"
    if shim_alive:
        return "starting"
    if att.get("error"):
        return "failed"
    return "lost"


def own_procs(att):
    """The attempt's job and shim as a procs table: all attempt_state needs, without a scan
    of the whole of /proc."""
    out = {}
    for ident in ((att or {}).get("job"), (att or {}).get("shim")):
        if ident and ident.get("pid"):
            p = read_proc(int(ident["pid"]))
            if p is not None:
                out[p.pid] = p
    return out


def _alive_in(procs, ident):
    p = procs.get(ident["pid"])
    return p is not None and p.start == ident["start"] and not p.dead


def uptime_seconds():
    try:
        return float(read_text("/proc/uptime").split()[0])
    except (AttributeError, ValueError, IndexError):
        return 0.0


def proc_age(p, up):
    return max(0.0, up - p.start / float(CLK_TCK))


def summarize_tree(members, up, job_pid=None):
    cpu = sum(p.utime + p.stime for p in members.values()) / float(CLK_TCK)
    rss = sum(p.rss for p in members.values())
    jp = members.get(job_pid)
    return {"processes": len(members), "cpu_seconds": round(cpu, 2), "rss_bytes": rss,
            "uptime_s": round(proc_age(jp, up), 1) if jp else None}


def log_info(path):
    try:
        st = os.stat(path)
    except OSError:
        return {"path": path, "exists": False}
    last = tail_lines(path, 1)
    return {"path": path, "exists": True, "size": st.st_size, "mtime": st.st_mtime,
            "last_line": last[-1] if last else ""}


def public_attempt(att):
    """An attempt record as it may leave the target: secrets redacted."""
    if att is None:
        return None
    out = dict(att)
    out["env"] = redact_env(att.get("env"))
    return out


def file_hashes(paths):
    out = {}
    for p in paths:
        try:
            out[p] = sha256_file(p)
        except OSError:
            out[p] = None
    return out


def drift(att):
    """Files whose bytes on disk differ from those the attempt started with."""
    changed = []
    for path, h in sorted((att or {}).get("hashes", {}).items()):
        try:
            now = sha256_file(path)
        except OSError:
            now = None
        if now != h:
            changed.append({"path": path, "started_with": h, "on_disk": now})
    return changed


def status_of(store, procs, prot, bid, up, with_drift=True):
    att = store.latest()
    state = attempt_state(att, procs, bid)
    out = {"name": store.name, "state": state, "attempt": att.get("attempt") if att else None}
    if att is None:
        return out
    out.update({"argv": att.get("argv"), "cwd": att.get("cwd"), "started_at": att.get("started_at"),
                "log": log_info(att.get("log")), "gpus": att.get("gpus")})
    if att.get("job"):
        out["pid"] = att["job"]["pid"]
        out["start_time"] = att["job"]["start"]
    members = run_members(store.name, att, procs, prot) if state != "lost" else {}
    if members:
        out["tree"] = summarize_tree(members, up, att["job"]["pid"] if att.get("job") else None)
        out["tree"]["pids"] = sorted(members)
    if att.get("gpus") and state in ("running", "orphaned"):
        out.update(gpu_status(att, members))
    if state in ("exited", "failed") and members:
        out["stray_processes"] = sorted(members)
    if att.get("exit"):
        ex = att["exit"]
        out["exit"] = ex
        if att.get("started_at") and ex.get("at"):
            out["duration_s"] = round(ex["at"] - att["started_at"], 3)
    if att.get("error"):
        out["error"] = att["error"]
    if state == "lost":
        out["note"] = ("the machine rebooted since this attempt started (boot id changed)"
                       if att.get("boot_id") != bid else
                       "the shim died and the job is gone without an exit record")
    if state == "orphaned":
        out["note"] = "the shim is gone but the job lives: still tracked and stoppable"
    if with_drift and state in ("running", "orphaned"):
        d = drift(att)
        if d:
            out["drift"] = d
    if with_drift:
        dep = read_json(os.path.join(store.dir, "deployed.json"))
        if dep:
            out["deployed"] = dep
        if att.get("log") and state != "lost":
            try:
                saved, _, _ = health_scan(store, att, None)
                out["health"] = health_summary(saved)
            except (OSError, ValueError) as e:
                out["health"] = {"error": "could not read the log: %s" % e}
    return out


# ---------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------

def resolve_command(argv, env, cwd):
    prog = argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) else os.path.join(cwd, prog)
        if not os.path.exists(path):
            raise bad_input("command not found: %s (looked at %s)" % (prog, path),
                            "check the path; relative paths are taken from the run's cwd %s" % cwd)
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise bad_input("command is not executable: %s" % path, "chmod +x it, or run it through an interpreter")
        return path
    for d in (env.get("PATH") or os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", prog)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise bad_input("command not found: %s (not on PATH of the target)" % prog,
                    "install it on the target, give an absolute path, or set PATH with --env")


def build_env(req_env, inherit=True):
    env = dict(os.environ) if inherit else {}
    for k in ("RUNWARD_HOME",):
        env.pop(k, None)
    for k, v in (req_env or {}).items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k or "\0" in str(v):
            raise bad_input("invalid environment entry %r" % (k,), "use --env NAME=VALUE")
        env[k] = str(v)
    return env


def op_start(req, home):
    store = RunStore(home, req.get("name"))
    argv = req.get("argv") or []
    sh = req.get("sh")
    if sh is not None:
        if not isinstance(sh, str) or not sh.strip():
            raise bad_input("empty shell command", "give --sh 'COMMAND LINE'")
        argv = ["/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh", "-c", sh]
    if not argv or not all(isinstance(a, str) for a in argv):
        raise bad_input("no command given", "put the command after --, e.g. runward start NAME -- python train.py")
    cwd = req.get("cwd") or os.path.expanduser("~")
    cwd = os.path.expanduser(cwd)
    if not os.path.isdir(cwd):
        raise bad_input("working directory does not exist on the target: %s" % cwd,
                        "create it, or pass an existing --cwd")
    req_env = dict(req.get("env") or {})
    if req.get("reuse_env") and RunStore(home, req.get("name")).exists():
        last = RunStore(home, req.get("name")).latest() or {}
        merged = dict(last.get("env") or {})
        merged.update({k: v for k, v in req_env.items() if v != "[secret]"})
        req_env = merged
    req["env"] = req_env
    env = build_env(req_env)
    settle = float(req.get("settle", 3.0))
    ready = req.get("ready")
    ready_re = None
    if ready:
        try:
            ready_re = re.compile(ready)
        except re.error as e:
            raise bad_input("invalid --ready regex %r: %s" % (ready, e), "use a Python regular expression")
    stop_sig = parse_signal(req.get("stop_signal", "TERM"))
    exe = resolve_command(argv, env, cwd)
    log = os.path.expanduser(req.get("log") or os.path.join(store.dir, "log"))
    if not os.path.isabs(log):
        log = os.path.join(cwd, log)
    if os.path.isdir(log) or not os.path.isdir(os.path.dirname(log)) and req.get("log"):
        raise bad_input("log path is not usable: %s" % log, "give a file path whose directory exists")

    fd = store.lock()
    try:
        procs = scan_procs()
        prot = protected_pids(procs)
        bid = boot_id()
        prev = store.latest()
        state = attempt_state(prev, procs, bid)
        replaced = None
        if state in ("running", "orphaned", "starting"):
            if not req.get("replace"):
                raise AgentFailure("AlreadyRunning", "run %s is already running (attempt %s, pid %s)" % (
                    store.name, prev.get("attempt"), (prev.get("job") or {}).get("pid")),
                    "use `runward restart %s`, or start with --replace" % store.name,
                    attempt=prev.get("attempt"), pid=(prev.get("job") or {}).get("pid"))
            replaced = stop_locked(store, prev, procs, prot, req.get("replace_signal") or prev.get("stop_signal", "TERM"),
                                   float(req.get("grace", prev.get("grace", 30.0))), req.get("gpu_timeout"))
            if not replaced["verified_dead"]:
                raise AgentFailure("NotVerified", "could not verify the old attempt dead; not starting",
                                   "see the survivors below", stop=replaced)
            if (replaced.get("gpu_release") or {}).get("checked") and not replaced["gpu_release"]["verified"]:
                raise AgentFailure("NotVerified", "the old attempt's GPUs are not released; not starting: %s"
                                   % replaced["gpu_release"].get("message"), "see `runward gpus`", result=replaced)
        gpu_wait = gpu_wait_free(req["gpus"], req["wait_gpus_free"], home) \
            if req.get("wait_gpus_free") and req.get("gpus") else None
        if not os.path.isdir(os.path.dirname(log)):
            os.makedirs(os.path.dirname(log), 0o700)
        for d in (store.dir, os.path.join(store.dir, "attempts")):
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
        run = store.run() or {"name": store.name, "attempt": 0, "created": time.time()}
        n = max([run.get("attempt", 0)] + store.attempts()) + 1
        marker = "%s.%d" % (store.name, n)
        env[MARKER] = marker
        env[HOME_MARKER] = home.id
        if req.get("gpus") is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req["gpus"])
            # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi (and so the
            # wait and release checks) by PCI bus id: make --gpus mean the same GPUs to both
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        hashed = [p if os.path.isabs(p) else os.path.join(cwd, p) for p in req.get("hash_files") or []]
        script = next((a for a in argv[1:] if not a.startswith("-") and os.path.isfile(os.path.join(cwd, a))), None)
        if script:
            hashed.append(os.path.join(cwd, script))
        att = {
            "v": PROTOCOL, "run": store.name, "attempt": n, "argv": argv, "exe": exe, "sh": sh,
            "cwd": cwd, "env": req.get("env") or {}, "log": log, "marker": marker,
            "boot_id": bid, "created_at": time.time(), "started_at": None,
            "stop_signal": signal_name(stop_sig), "grace": float(req.get("grace", 30.0)),
            "gpus": req.get("gpus"), "hashes": file_hashes(hashed), "files": req.get("files") or [],
            "cgroups": cgroup_create(store.name, n, home.id) if req.get("cgroup", True) else [],
            "home_id": home.id,
            "settle": settle, "ready": ready,
        }
        write_json(store.attempt_path(n), att)
        run.update({"attempt": n, "spec": {k: req.get(k) for k in (
            "argv", "sh", "cwd", "env", "log", "settle", "ready", "ready_timeout", "gpus", "wait_gpus_free",
            "stop_signal", "grace", "files", "hash_files")}})
        write_json(os.path.join(store.dir, "run.json"), run)
        header = "=== runward: %s attempt %d started %s: %s ===\n" % (
            store.name, n, time.strftime("%Y-%m-%dT%H:%M:%S%z"), sh if sh is not None else " ".join(argv))
        lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        log_start = os.fstat(lfd).st_size
        os.write(lfd, header.encode())
        os.close(lfd)
        att["log_offset"] = log_start + len(header.encode())  # where this attempt's output begins
        write_json(store.attempt_path(n), att)
        shim, pipe = spawn_shim(home, store.name, n, env)
        msg = read_msg(pipe, 30.0)
        if msg is None or "error" in msg:
            att = store.attempt(n)
            err = (msg or {}).get("error") or "the shim did not report the job started"
            raise AgentFailure("StartFailed", "could not start %s: %s" % (store.name, err),
                               "check the command and its cwd on the target", attempt=n)
        job = msg["job"]
    finally:
        os.close(fd)
    res = watch_settle(store, n, job, pipe, log, log_start + len(header.encode()), settle, ready_re,
                       float(req.get("ready_timeout", 600.0)), replaced)
    if gpu_wait is not None:
        res["gpu_wait"] = gpu_wait
    return res


def spawn_shim(home, name, attempt, env):
    """Start the shim detached (new session): the job's parent, never in its output path."""
    import subprocess
    src = AGENT_SOURCE_BYTES()
    r, w = os.pipe()
    errlog = os.open(os.path.join(home.run_dir(name), "attempts", "%d.shim.log" % attempt),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    shim_env = dict(env)
    shim_env.pop(MARKER, None)  # the shim itself must never be found as a member of the run
    shim_env["RUNWARD_SHIM_ENV"] = json_dumps(env)
    # the run's name goes on stdin like every request: a `pkill -f NAME` must not find the shim
    p = subprocess.Popen([sys.executable, "-S", "-c", BOOTSTRAP, SHIM_ARG],
                         stdin=subprocess.PIPE, stdout=w, stderr=errlog, close_fds=True,
                         start_new_session=True, env=shim_env)
    os.close(w)
    os.close(errlog)
    params = json_dumps({"home": home.path, "name": name, "attempt": attempt}).encode()
    p.stdin.write(b"%d %s\n" % (len(src), AGENT_SHA_HEX().encode()) + src + params + b"\n")
    p.stdin.close()
    # We never wait() the shim: it outlives us. Popen's __del__ would not reap it either.
    p.returncode = 0
    return p, r


def read_msg(fd, timeout, buf=None):
    """One JSON line from the shim's status pipe, or None on EOF/timeout."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return json_loads(data.split(b"\n", 1)[0].decode())


def watch_settle(store, n, job, pipe, log, log_from, settle, ready_re, ready_timeout, replaced):
    """Start means verified alive: watch the job for the settle period. An early exit is
    reported the moment it happens (the shim writes it to our pipe), not after the settle."""
    t0 = time.monotonic()
    ready_line = None
    ready_deadline = t0 + ready_timeout if ready_re else None
    read_pos = log_from
    pending = b""
    exit_msg = None
    while True:
        now = time.monotonic()
        settle_left = settle - (now - t0)
        if settle_left <= 0 and (ready_re is None or ready_line is not None):
            break
        if ready_re is not None and ready_line is None and now >= ready_deadline:
            break
        wait = settle_left if ready_re is None else min(0.05, max(settle_left, 0.05))
        r, _, _ = select.select([pipe], [], [], max(0.0, wait))
        if r:
            exit_msg = read_msg(pipe, 5.0) or {"exit": None}
            break
        if ready_re is not None and ready_line is None:
            # no inotify in the stdlib: read what the log gained every 50 ms
            chunk, read_pos = read_from(log, read_pos)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                s = ln.decode("utf-8", "replace")
                if ready_re.search(s):
                    ready_line = s
                    break
    os.close(pipe)
    att = store.attempt(n)
    first = first_lines(log, log_from, 10)
    res = {"name": store.name, "attempt": n, "pid": job["pid"], "start_time": job["start"],
           "log": log, "first_lines": first, "settle_s": settle, "replaced": replaced,
           "waited_s": round(time.monotonic() - t0, 3), "gpus": att.get("gpus"),
           "env": redact_env(att.get("env")), "cgroups": att.get("cgroups")}
    if exit_msg is not None:
        ex = (store.attempt(n) or {}).get("exit") or exit_msg.get("exit") or {}
        res.update({"alive_after_settle": False, "exit": ex, "last_lines": tail_lines(log, LOG_TAIL_LINES)})
        raise AgentFailure("ExitedEarly", "%s exited during the settle period (%s)" % (store.name, describe_exit(ex)),
                           "see the last log lines; `runward logs %s`" % store.name, result=res)
    if proc_matches(job) is None:
        res.update({"alive_after_settle": False, "last_lines": tail_lines(log, LOG_TAIL_LINES)})
        raise AgentFailure("ExitedEarly", "%s is gone after the settle period" % store.name, result=res)
    res["alive_after_settle"] = True
    res["verified"] = ["alive_after_settle"]
    if ready_re is not None:
        if ready_line is None:
            res["ready"] = False
            raise AgentFailure("NotVerified", "%s is alive but printed no line matching --ready within %ss" % (
                store.name, ready_timeout), "raise --ready-timeout or check the regex", result=res)
        res["ready"] = True
        res["ready_line"] = ready_line
        res["verified"].append("ready_line")
    return res


def describe_exit(ex):
    if not ex:
        return "exit status unknown"
    if ex.get("signal"):
        return "killed by %s" % ex["signal"]
    return "exit code %s" % ex.get("code")


def read_from(path, pos):
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


def op_stop(req, home):
    store = existing_run(home, req.get("name"))
    sig = req.get("signal")
    grace = req.get("grace")
    fd = store.lock()
    try:
        att = store.latest()
        procs = scan_procs()
        prot = protected_pids(procs)
        sig = sig or (att or {}).get("stop_signal", "TERM")
        grace = float(grace if grace is not None else (att or {}).get("grace", 30.0))
        return stop_locked(store, att, procs, prot, sig, grace, req.get("gpu_timeout"))
    finally:
        os.close(fd)


def stop_locked(store, att, procs, prot, sig, grace, gpu_timeout=None):
    signum = parse_signal(sig)
    members = run_members(store.name, att, procs, prot)
    res = {"name": store.name, "attempt": att.get("attempt") if att else None, "signal": signal_name(signum),
           "grace_s": grace}
    if not members:
        res.update({"already_stopped": True, "verified_dead": True, "processes": [],
                    "state": attempt_state(att, procs, boot_id())})
        res["verified"] = ["no_process_of_run_alive"]
        return stop_gpu_check(res, store, att, [], gpu_timeout)
    job = (att or {}).get("job")
    group = job["pid"] if job and job["pid"] in members else None

    def find_more():
        ps = scan_procs()
        return run_members(store.name, att, ps, protected_pids(ps))

    t0 = time.monotonic()
    fates = terminate(members, procs, signum, grace, find_more=find_more, group=group)
    left = find_more()
    survivors = [f for f in fates if f["fate"] == "survived"]
    for pid, p in left.items():
        if not any(f["pid"] == pid for f in survivors):
            survivors.append(dict(p.describe(), fate="survived"))
    res.update({"already_stopped": False, "processes": fates, "survivors": survivors,
                "verified_dead": not survivors, "stop_s": round(time.monotonic() - t0, 4)})
    if not survivors:
        res["verified"] = ["no_process_of_run_alive"]
        # let the shim record the exit before we answer, so `status` right after is true
        shim = (att or {}).get("shim")
        sp = proc_matches(shim) if shim else None
        if sp is not None:
            w = PidWatch()
            if w.add(sp):
                w.wait(2.0)
            w.close()
        cgroup_remove((att or {}).get("cgroups"))
        stop_gpu_check(res, store, att, fates, gpu_timeout)
    latest = store.latest()
    res["state"] = attempt_state(latest, own_procs(latest), boot_id())
    return res


def op_status(req, home):
    names = req.get("names")
    if names:
        for nm in names:
            check_name(nm)
    all_names = home.run_names()
    if names:
        missing = [nm for nm in names if nm not in all_names or not RunStore(home, nm).exists()]
        if missing:
            raise AgentFailure("RunNotFound", "no run named %s on this target" % ", ".join(missing),
                               "`runward status` lists the runs here")
    bid = boot_id()
    if not (names or all_names):
        return {"runs": [], "boot_id": bid, "time": time.time(), "host": os.uname().nodename}
    procs = scan_procs()
    prot = protected_pids(procs)
    up = uptime_seconds()
    runs = []
    for nm in names or all_names:
        store = RunStore(home, nm)
        if store.exists():
            runs.append(status_of(store, procs, prot, bid, up, with_drift=bool(names)))
    return {"runs": runs, "boot_id": bid, "time": time.time(), "host": os.uname().nodename}


def op_logs(req, home, emit):
    store = existing_run(home, req.get("name"))
    att = store.latest()
    log = att.get("log")
    n = int(req.get("lines", 20))
    lines = tail_lines(log, n)
    if not req.get("follow"):
        return {"name": store.name, "log": log, "lines": lines}
    for ln in lines:
        emit({"line": ln})
    try:
        pos = os.stat(log).st_size
    except OSError:
        pos = 0
    pending = b""
    deadline = time.monotonic() + float(req["for_s"]) if req.get("for_s") else None
    last_check = 0.0
    while deadline is None or time.monotonic() < deadline:
        # no inotify in the stdlib: poll the file every 100 ms; a restart appends to the same
        # log (or switches it: re-read the latest attempt once a second)
        if time.monotonic() - last_check > 1.0:
            last_check = time.monotonic()
            latest = store.latest() or att
            if latest.get("log") != log:
                log, pos, pending = latest["log"], 0, b""
                emit({"switch": log})
        data, pos = read_from(log, pos)
        if data:
            pending += data
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                emit({"line": ln.decode("utf-8", "replace")})
        else:
            time.sleep(0.1)
    return {"name": store.name, "log": log, "followed": True}


def op_spec(req, home):
    """The last attempt's spec, for restart. Secret values stay on the target: a start with
    reuse_env takes them from the attempt record there."""
    store = existing_run(home, req.get("name"))
    run = store.run()
    sp = dict(run.get("spec") or {})
    sp["env"] = redact_env(sp.get("env"))
    return {"name": store.name, "attempt": run.get("attempt"), "spec": sp}


def op_ping(req, home):
    return {"python": sys.version.split()[0], "pid": os.getpid(), "boot_id": boot_id(), "time": time.time()}


def op_exec(req, home):
    """Run a command where the job lives; return code, signal, output, duration. The command
    is our child: if it kills its own shell (pkill -f matching it), we survive to say so."""
    import subprocess
    argv = req.get("argv")
    sh = req.get("sh")
    if sh is not None:
        argv = ["/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh", "-c", sh]
    if not argv or not all(isinstance(a, str) for a in argv):
        raise bad_input("no command given", "runward exec --on TARGET -- COMMAND [ARG]...")
    cwd = os.path.expanduser(req.get("cwd") or "~")
    if not os.path.isdir(cwd):
        raise bad_input("working directory does not exist on the target: %s" % cwd, "pass an existing --cwd")
    env = build_env(req.get("env"))
    limit = int(req.get("max_output", 16 << 20))
    timeout = req.get("timeout")
    t0 = time.time()
    try:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise bad_input("command not found on the target: %s" % argv[0], "install it, or give an absolute path")
    except PermissionError:
        raise bad_input("command is not executable on the target: %s" % argv[0], "chmod +x it")
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    rc = p.returncode
    res = {"argv": argv, "sh": sh, "duration_s": round(time.time() - t0, 4), "timed_out": timed_out,
           "stdout": out[:limit].decode("utf-8", "replace"), "stderr": err[:limit].decode("utf-8", "replace"),
           "truncated": len(out) > limit or len(err) > limit}
    if rc < 0:
        res.update({"code": None, "signal": signal_name(-rc)})
    else:
        res.update({"code": rc, "signal": None})
    res["diagnosis"] = diagnose_exit(res, sh is not None or os.path.basename(argv[0]) in ("bash", "sh", "dash", "zsh"))
    return res


def diagnose_exit(res, is_shell):
    sig = res.get("signal")
    code = res.get("code")
    if res.get("timed_out"):
        return "timed out; the command's process group was killed"
    if sig is None and code is not None and code > 128 and code - 128 in (9, 15):
        sig = signal_name(code - 128)
    if sig in ("SIGKILL", "SIGTERM") and is_shell:
        return ("the shell was killed by %s: the command may have killed its own shell "
                "(pkill -f / pgrep -f | xargs kill match the shell's command line); "
                "use `runward kill PATTERN` or `runward stop NAME` instead" % sig)
    if sig:
        return "killed by %s" % sig
    if code == 127:
        return "command not found (exit 127)"
    if code == 126:
        return "found but not executable (exit 126)"
    return None


def op_doctor(req, home):
    """What works here and what does not."""
    import shutil
    import subprocess
    checks = {"python": sys.version.split()[0], "python_ok": sys.version_info >= (3, 8),
              "executable": sys.executable, "user": os.getuid(), "host": os.uname().nodename,
              "kernel": os.uname().release, "boot_id": boot_id(), "time": time.time(),
              "pidfd": hasattr(os, "pidfd_open")}
    try:
        home.ensure()
        probe = os.path.join(home.path, ".doctor.%d" % os.getpid())
        write_atomic(probe, b"ok")
        os.unlink(probe)
        checks["state_dir"] = {"path": home.path, "writable": True}
    except (OSError, AgentFailure) as e:
        checks["state_dir"] = {"path": home.path, "writable": False, "error": str(e)}
    smi = shutil.which("nvidia-smi")
    checks["nvidia_smi"] = {"path": smi}
    if smi:
        try:
            p = subprocess.run([smi, "-L"], capture_output=True, timeout=20)
            checks["nvidia_smi"].update({"exit": p.returncode,
                                         "output": (p.stdout + p.stderr).decode("utf-8", "replace")[:2000]})
        except (OSError, subprocess.TimeoutExpired) as e:
            checks["nvidia_smi"]["error"] = str(e)
    name = "doctor-%d" % os.getpid()
    made = cgroup_create(name, 0)
    checks["cgroups"] = {"can_create": bool(made), "roots": [r for _, r in cgroup_roots()]}
    cgroup_remove(made)
    if made:
        for p in made:
            try:
                os.rmdir(os.path.dirname(p)) if not os.listdir(os.path.dirname(p)) else None
            except OSError:
                pass
    checks["in_container"] = in_container()
    checks["resident"] = resident_state(home)
    return checks


def in_container():
    """In a container when its marker files exist, or when this /proc is not the machine's
    first pid namespace (kthreadd is not pid 2). /proc/1/environ's container= is not used:
    some VM inits set it on the host itself."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    return not in_host_pidns()


def read_exact(stdin, n, h):
    """Read exactly n bytes from stdin in chunks, feeding hash h; yield the chunks."""
    left = n
    while left > 0:
        chunk = stdin.read(min(left, 1 << 20))
        if not chunk:
            raise AgentFailure("Failed", "the byte stream ended early (%d bytes missing)" % left,
                               "the connection dropped or the local file shrank; push again")
        h.update(chunk)
        left -= len(chunk)
        yield chunk


def op_push(req, home, emit, stdin):
    """Write files sent after the request: each one to a temp file beside its destination,
    fsync, sha256 checked against the sender's, then renamed into place (atomic), mode kept."""
    import hashlib
    done = []
    for ent in req.get("files") or []:
        dest = os.path.expanduser(ent["remote"])
        if not os.path.isabs(dest):
            dest = os.path.join(os.path.expanduser("~"), dest)
        if ent.get("type") == "dir":
            os.makedirs(dest, exist_ok=True)
            os.chmod(dest, int(ent.get("mode", 0o755)))
            done.append({"remote": dest, "type": "dir"})
            continue
        d = os.path.dirname(dest)
        if not os.path.isdir(d):
            os.makedirs(d)
        tmp = os.path.join(d, ".%s.runward-tmp.%d" % (os.path.basename(dest), os.getpid()))
        h = hashlib.sha256()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for chunk in read_exact(stdin, int(ent["size"]), h):
                os.write(fd, chunk)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        sent = stdin.read(65).decode("ascii", "replace").strip()
        got = h.hexdigest()
        if sent != got:
            os.unlink(tmp)
            raise AgentFailure("Failed", "sha256 mismatch for %s: sent %s, received %s" % (dest, sent[:16], got[:16]),
                               "the bytes changed in transit or the local file changed while being read; push again")
        os.chmod(tmp, int(ent.get("mode", 0o644)) & 0o7777)
        os.rename(tmp, dest)
        # verify what is now at the destination, read back from the filesystem the job sees
        on_disk = sha256_file(dest)
        if on_disk != got:
            raise AgentFailure("Failed", "%s reads back with another sha256 after rename" % dest, "check the disk")
        done.append({"remote": dest, "sha256": on_disk, "size": int(ent["size"]), "mode": oct(ent.get("mode", 0o644))})
        emit({"pushed": dest})
    if req.get("run"):
        store = RunStore(home, req["run"])
        store.home.ensure()
        try:
            os.mkdir(store.dir, 0o700)
        except FileExistsError:
            pass
        dep = read_json(os.path.join(store.dir, "deployed.json"), {}) or {}
        for f in done:
            if f.get("sha256"):
                dep[f["remote"]] = {"sha256": f["sha256"], "at": time.time()}
        write_json(os.path.join(store.dir, "deployed.json"), dep)
    return {"files": done, "verified": ["sha256_on_target"], "host": os.uname().nodename,
            "in_container": in_container()}


def op_hash(req, home):
    return {"hashes": file_hashes([os.path.expanduser(p) for p in req.get("paths") or []])}



# --- Pattern search and kill: a safe pgrep/pkill

def caller_pids(req, procs):
    """The CLI and its ancestors when they live on this very machine (same boot id): the
    CLI's argv carries the pattern, and a pkill -f would find it."""
    c = req.get("caller") or {}
    if c.get("boot_id") != boot_id():
        return set()
    out = set()
    for ident in c.get("procs") or []:
        p = procs.get(ident.get("pid"))
        if p is not None and p.start == ident.get("start"):
            out.add(p.pid)
    return out


def search_exclusions(req, procs):
    """What ps/kill never show or signal: ourselves and our ancestors up to pid 1, every
    process of our own session (the shells and sshd that ran us), other runward agents and
    shims, kernel threads, and the calling CLI when it is on this machine."""
    prot = protected_pids(procs)
    me = os.getsid(0)
    for p in procs.values():
        if p.sid == me and p.comm in SHELLS:
            prot.add(p.pid)  # a subshell of the command line that runs us carries its text too
        elif BOOTSTRAP in p.cmdline():
            prot.add(p.pid)
    return prot | caller_pids(req, procs)


SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "sshd", "su", "sudo", "runuser"))


def compile_pattern(pattern):
    if not isinstance(pattern, str) or not pattern:
        raise bad_input("empty pattern", "give an extended regular expression, as for pgrep -f")
    # POSIX ERE as pgrep evaluates it; Python's re agrees on the common subset. Bracket
    # classes like [[:digit:]] are translated.
    py = re.sub(r"\[:(alpha|digit|alnum|space|upper|lower|punct|xdigit):\]",
                lambda m: {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "space": r"\s",
                           "upper": "A-Z", "lower": "a-z", "punct": r"!-/:-@\[-`{-~", "xdigit": "0-9A-Fa-f"}[m.group(1)],
                pattern)
    try:
        return re.compile(py)
    except re.error as e:
        raise bad_input("invalid pattern %r: %s" % (pattern, e), "use an extended regular expression")


def boot_time():
    for ln in (read_text("/proc/stat", "") or "").splitlines():
        if ln.startswith("btime "):
            return int(ln.split()[1])
    return 0


def user_name(uid, cache={}):
    if uid not in cache:
        try:
            import pwd
            cache[uid] = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            cache[uid] = str(uid)
    return cache[uid]


def proc_uid(pid):
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


def find_matching(req, procs):
    rx = compile_pattern(req.get("pattern"))
    prot = search_exclusions(req, procs)
    found = {}
    for p in procs.values():
        if p.pid in prot or p.dead:
            continue
        cmd = p.cmdline()
        if not cmd:
            continue  # kernel threads and zombies have no command line
        if rx.search(" ".join(cmd)):
            found[p.pid] = p
    if req.get("tree"):
        for pid in descendants(list(found), procs):
            if pid not in prot and not procs[pid].dead:
                found[pid] = procs[pid]
    return found, prot


def describe_match(p, bt):
    uid = proc_uid(p.pid)
    marker = p.env(MARKER)
    return {"pid": p.pid, "start": p.start, "started_at": round(bt + p.start / float(CLK_TCK), 2),
            "user": user_name(uid) if uid is not None else "?", "run": marker,
            "cmd": " ".join(p.cmdline()), "state": p.state}


def op_ps(req, home):
    procs = scan_procs()
    found, _ = find_matching(req, procs)
    bt = boot_time()
    return {"pattern": req.get("pattern"), "processes": [describe_match(found[pid], bt) for pid in sorted(found)]}


def op_kill(req, home):
    procs = scan_procs()
    found, prot = find_matching(req, procs)
    limit = int(req.get("max") or 32)
    bt = boot_time()
    listing = [describe_match(found[pid], bt) for pid in sorted(found)]
    sig = parse_signal(req.get("signal") or "TERM")
    res = {"pattern": req.get("pattern"), "matched": listing, "signal": signal_name(sig)}
    if len(found) > limit:
        raise bad_input("pattern %r matches %d processes, more than --max %d" % (req.get("pattern"), len(found), limit),
                        "narrow the pattern, or raise --max if you mean it", result=res)
    if not req.get("yes"):
        res.update({"dry_run": True, "verified_dead": None})
        return res
    if not found:
        res.update({"dry_run": False, "processes": [], "verified_dead": True, "survivors": []})
        return res

    def find_more():
        ps = scan_procs()
        more, _ = find_matching(req, ps)
        # only descendants of what we matched may join later (a respawn under a supervisor)
        return {pid: q for pid, q in more.items() if pid in found or req.get("tree")}

    fates = terminate(found, procs, sig, float(req.get("grace", 10.0)), find_more=find_more)
    survivors = [f for f in fates if f["fate"] == "survived"]
    res.update({"dry_run": False, "processes": fates, "survivors": survivors, "verified_dead": not survivors})
    return res


# --- GPUs: who holds which GPU (nvidia-smi), wait until free before a start, verified release
# after a stop. nvidia-smi has no event API we can use from the stdlib: NVML's event sets
# (reachable only through ctypes on libnvidia-ml) report Xid errors and clock changes, never
# a process exit or memory being freed. So every wait below polls nvidia-smi every
# GPU_POLL_S, bounded by its timeout, and ends with an answer, never a hang.

SMI_GPU_QUERY = "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu"
SMI_APP_QUERY = "--query-compute-apps=gpu_uuid,pid,used_memory"
SMI_FORMAT = "--format=csv,noheader,nounits"
SMI_GPU_COLS = ("index", "uuid", "name", "memory.used", "memory.total", "utilization.gpu")
SMI_APP_COLS = ("gpu_uuid", "pid", "used_memory")
SMI_ALIASES = {"used_gpu_memory": "used_memory", "gpu_name": "name"}
SMI_TIMEOUT = 15.0
GPU_POLL_S = 0.5
GPU_MAX_USED_MIB = 1024.0     # at most this much used, and no compute process: the GPU is free
GPU_RELEASE_TIMEOUT = 60.0
_SMI_CACHE = []               # one snapshot per agent process, for status (many runs, one call)


def smi_failure(code, text, exe):
    text = (text or "").strip() or "(no output)"
    if code == 9 or "couldn't communicate with the NVIDIA driver" in text:
        hint = ("the NVIDIA driver is not loaded or not reachable: check `lsmod | grep nvidia` and dmesg "
                "on the host; inside a container, check that the GPUs are passed through")
    elif "version mismatch" in text:
        hint = "the driver was upgraded without a reboot: reboot the host, or reload the nvidia kernel modules"
    elif "Failed to initialize NVML" in text:
        hint = ("NVML could not start: check dmesg; inside a container the device nodes or the driver "
                "libraries may be missing (nvidia-container-toolkit)")
    else:
        hint = "run nvidia-smi by hand on the target: runward exec --on TARGET -- nvidia-smi"
    return AgentFailure("GpuUnavailable", "nvidia-smi failed (exit %s): %s" % (code, text), hint,
                        nvidia_smi=exe, exit_status=code, output=text[:2000])


def smi_run(args, timeout=SMI_TIMEOUT):
    """(path, exit status, stdout, stderr) of one nvidia-smi call; path None if there is none."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None, "", ""
    try:
        p = subprocess.run([exe] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AgentFailure("GpuUnavailable", "nvidia-smi did not answer within %gs" % timeout,
                           "a hung driver or a GPU in a bad state: check dmesg for Xid errors, run nvidia-smi by hand",
                           nvidia_smi=exe)
    except OSError as e:
        raise AgentFailure("GpuUnavailable", "nvidia-smi could not be run: %s" % e,
                           "check that %s is an executable nvidia-smi" % exe, nvidia_smi=exe)
    return exe, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def smi_cell(text, number=True):
    """One CSV cell -> (value, raw). The sentinels [N/A], [Not Supported] and [Insufficient
    Permissions] (printed with their brackets whatever the format) become None, raw kept."""
    t = (text or "").strip()
    if t.startswith("[") and t.endswith("]"):
        return None, t
    if not number:
        return t, None
    try:
        f = float(t.split()[0])  # "81559 MiB" when units are on, "81559" with nounits
    except (ValueError, IndexError):
        return None, t
    return (int(f) if f == int(f) else f), None


def smi_rows(text, cols):
    """CSV lines -> dicts keyed by column. A header line (a replayed capture queried with
    --format=csv) gives the columns by name; without one they are in query order. Cells are
    split on ", " (nvidia-smi never quotes); a name holding ", " is joined back."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    names = list(cols)
    if lines:
        head = [c.strip().split(" [")[0] for c in lines[0].split(", ")]
        head = [SMI_ALIASES.get(c, c) for c in head]
        if cols[0] in head:
            names, lines = head, lines[1:]
    rows = []
    for ln in lines:
        cells = ln.split(", ")
        if len(cells) > len(names) and "name" in names:
            i, extra = names.index("name"), len(cells) - len(names)
            cells[i:i + extra + 1] = [", ".join(cells[i:i + extra + 1])]
        if len(cells) != len(names) or any(c not in names for c in cols):
            raise AgentFailure("GpuUnavailable", "unexpected nvidia-smi output line: %r" % ln[:200],
                               "run nvidia-smi by hand on the target and report its output")
        rows.append(dict(zip(names, cells)))
    return rows


def smi_snapshot(cached=False):
    """What nvidia-smi says now: {"nvidia_smi": path or None, "gpus": [...], "apps": [...],
    "note"}. No nvidia-smi, or no devices (exit 6), is an answer with a note; any other
    failure raises GpuUnavailable with the tool's own message."""
    if cached and _SMI_CACHE:
        return _SMI_CACHE[0]
    exe, code, out, err = smi_run([SMI_GPU_QUERY, SMI_FORMAT])
    snap = {"nvidia_smi": exe, "gpus": [], "apps": [], "at": time.time()}
    if exe is None:
        snap["note"] = "no nvidia-smi on this target"
    elif code == 6 or (code != 0 and "No devices were found" in out):
        snap["note"] = "nvidia-smi found no GPU here: %s" % (out.strip() or "No devices were found")
    elif code != 0:
        raise smi_failure(code, out + err, exe)
    else:
        for r in smi_rows(out, SMI_GPU_COLS):
            g, raw = {}, {}
            for key, col, num in (("index", "index", True), ("uuid", "uuid", False), ("name", "name", False),
                                  ("used_mib", "memory.used", True), ("total_mib", "memory.total", True),
                                  ("utilization_pct", "utilization.gpu", True)):
                g[key], r_ = smi_cell(r[col], num)
                if r_ is not None:
                    raw[key] = r_
            if raw:
                g["raw"] = raw
            snap["gpus"].append(g)
        exe, code, out, err = smi_run([SMI_APP_QUERY, SMI_FORMAT])
        if code != 0:
            raise smi_failure(code, out + err, exe)
        for r in smi_rows(out, SMI_APP_COLS):
            a, raw = {"gpu_uuid": r["gpu_uuid"].strip()}, {}
            for key, col in (("pid", "pid"), ("used_mib", "used_memory")):
                a[key], r_ = smi_cell(r[col])
                if r_ is not None:
                    raw[key] = r_
            if raw:
                a["raw"] = raw
            snap["apps"].append(a)
    if cached:
        _SMI_CACHE.append(snap)
    return snap


def in_host_pidns():
    """True when this /proc shows the machine's first pid namespace (kthreadd, pid 2, is
    visible there and in no container's): only then are nvidia-smi's pids ours to read."""
    return "(kthreadd)" in (read_text("/proc/2/stat", "") or "")


def pid_namespace(pid="self"):
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def marker_run(marker):
    """"name.N" -> (name, N), else (None, None)."""
    name, _, n = (marker or "").rpartition(".")
    return (name, int(n)) if name and n.isdigit() else (None, None)


def fmt_mib(v):
    return "{:,}".format(int(v)) if isinstance(v, (int, float)) else str(v)


class GpuView(object):
    """nvidia-smi's processes, mapped to runs. Direct where its pids are ours (read the marker
    in /proc/PID/environ, else membership of a running run); inside a container the pids are
    the host's, so a process is attributed by memory: to the one running run here recorded on
    that GPU (the CLI then maps host pids exactly, through the host's NSpid lines)."""

    def __init__(self, home):
        self.home = home
        self.direct = in_host_pidns()
        self._procs = None
        self._members = None
        self._claims = None

    def procs(self):
        if self._procs is None:
            self._procs = scan_procs()
        return self._procs

    def _runs(self):
        """[(name, attempt record, state)] of the runs here whose latest attempt is alive."""
        out = []
        if self.home is None:
            return out
        procs, bid = self.procs(), boot_id()
        for nm in self.home.run_names():
            store = RunStore(self.home, nm)
            att = store.latest() if store.exists() else None
            if att and attempt_state(att, procs, bid) in ("running", "orphaned", "starting"):
                out.append((nm, att))
        return out

    def member_of(self, pid):
        if self._members is None:
            self._members = {}
            procs = self.procs()
            prot = protected_pids(procs)
            for nm, att in self._runs():
                for m in run_members(nm, att, procs, prot):
                    self._members[m] = (nm, att.get("attempt"))
        return self._members.get(pid, (None, None))

    def claims(self, index):
        """Running runs here whose attempt records GPU index."""
        if self._claims is None:
            self._claims = [(nm, att.get("attempt"), att.get("gpus") or []) for nm, att in self._runs()]
        return [(nm, n) for nm, n, gs in self._claims if index in gs]

    def holder(self, app, index):
        h = {"pid": app.get("pid"), "used_mib": app.get("used_mib"), "run": None, "attempt": None}
        if app.get("raw"):
            h["raw"] = app["raw"]
        pid = app.get("pid")
        if not self.direct:
            h["pid_is_host_pid"] = True
            cl = self.claims(index)
            if len(cl) == 1:
                h.update(run=cl[0][0], attempt=cl[0][1], mapped_by="memory")
            elif cl:
                h["candidates"] = ["%s.%s" % c for c in cl]
            return h
        if pid is None:
            return h
        p = self.procs().get(pid) or read_proc(pid)
        if p is None or p.dead:
            h.update(state="gone", note="listed by nvidia-smi but gone from /proc")
            return h
        h["state"] = p.state
        h["cmd"] = p.describe()["cmd"][:200]
        name, n = marker_run(p.env(MARKER))
        phid = p.env(HOME_MARKER) if name is not None else None
        if phid and self.home is not None and phid != self.home.id:
            # a run of the same name may live in another runward home on this machine
            h.update(other_home_run="%s.%s" % (name, n),
                     note="a run of another runward home on this machine (RUNWARD_HOME_ID %s)" % phid)
            return h
        if name is None:
            name, n = self.member_of(pid)
        if name is not None:
            h.update(run=name, attempt=n, mapped_by="direct")
        return h

    def table(self, snap):
        """Each GPU with its processes; processes on a uuid nvidia-smi did not list as a GPU
        (a MIG device uuid, on drivers that print one) are kept apart, not dropped."""
        gpus, by_uuid = [], {}
        for g in snap["gpus"]:
            g = dict(g, processes=[])
            gpus.append(g)
            by_uuid[g["uuid"]] = g
        stray = []
        for a in snap["apps"]:
            g = by_uuid.get(a["gpu_uuid"])
            if g is None:
                stray.append(dict(self.holder(a, None), gpu_uuid=a["gpu_uuid"]))
            else:
                g["processes"].append(self.holder(a, g["index"]))
        return gpus, stray


def holder_text(h, with_mib=True):
    if h.get("pid") is None and h.get("host_pid") is not None:
        parts = ["host pid %s" % h["host_pid"]]
    else:
        parts = ["pid %s" % (h.get("pid") if h.get("pid") is not None else (h.get("raw") or {}).get("pid", "?"))]
        if h.get("host_pid") is not None and h["host_pid"] != h.get("pid"):
            parts[0] += " (host pid %s)" % h["host_pid"]
    if h.get("state"):
        parts.append("state %s" % h["state"])
    if h.get("used_mib") is not None and with_mib:
        parts.append("%s MiB" % fmt_mib(h["used_mib"]))
    if h.get("run"):
        parts.append("run %s attempt %s%s" % (h["run"], h.get("attempt"),
                                              " (inferred from memory)" if h.get("mapped_by") == "memory" else ""))
    if h.get("other_home_run"):
        parts.append("run %s of another runward home" % h["other_home_run"])
    if h.get("outside_target"):
        parts.append("outside this target")
    return ", ".join(parts)


def held_message(g, verb="still holds"):
    """"GPU 3 still holds 71,302 MiB (pid 4242, state D, 70,000 MiB)"."""
    if g.get("missing"):
        return "GPU %s is not listed by nvidia-smi" % g["index"]
    used = g.get("used_mib")
    amount = ("%s MiB" % fmt_mib(used) if used is not None else
              "an unreadable amount of memory (memory.used reads %s)" % (g.get("raw") or {}).get("used_mib", "?"))
    hs = g.get("holders") or []
    who = "; ".join(holder_text(h, len(hs) > 1 or h.get("used_mib") != used) for h in hs) or \
        "no process listed: the driver has not freed the memory yet"
    return "GPU %s %s %s (%s)" % (g["index"], verb, amount, who)


def gpu_states(snap, indices, max_used, view):
    """Per requested GPU: memory, holders, and whether it is free (memory.used readable and
    <= max_used, and no compute process on it)."""
    gpus, _ = view.table(snap)
    by_index = {g["index"]: g for g in gpus}
    out = []
    for i in indices:
        g = by_index.get(i)
        if g is None:
            out.append({"index": i, "missing": True, "free": False, "holders": []})
            continue
        st = {"index": i, "uuid": g["uuid"], "used_mib": g["used_mib"], "total_mib": g["total_mib"],
              "holders": g["processes"]}
        if (g.get("raw") or {}).get("used_mib"):
            st["raw"] = {"used_mib": g["raw"]["used_mib"]}
        st["free"] = g["used_mib"] is not None and g["used_mib"] <= max_used and not g["processes"]
        out.append(st)
    return out


def gpu_poll(indices, max_used, timeout, home):
    """Poll nvidia-smi until every GPU in indices is free or timeout passes (see the section
    comment for why it polls). Returns (states, snapshot, waited_s, polls)."""
    t0 = time.monotonic()
    deadline = t0 + max(0.0, timeout)
    polls = 0
    while True:
        snap = smi_snapshot()
        polls += 1
        if snap["nvidia_smi"] is None:
            return None, snap, round(time.monotonic() - t0, 3), polls
        states = gpu_states(snap, indices, max_used, GpuView(home))
        left = deadline - time.monotonic()
        if all(s["free"] for s in states) or left <= 0:
            return states, snap, round(time.monotonic() - t0, 3), polls
        time.sleep(min(GPU_POLL_S, left))


def gpu_wait_free(gpus, spec, home):
    """start --wait-gpus-free: before any record is made, wait until GPUS are free, else
    refuse naming who holds them."""
    spec = spec if isinstance(spec, dict) else {}
    timeout = float(spec.get("timeout") if spec.get("timeout") is not None else 300.0)
    max_used = float(spec.get("max_used_mib") if spec.get("max_used_mib") is not None else GPU_MAX_USED_MIB)
    if timeout < 0 or max_used < 0:
        raise bad_input("invalid --timeout/--max-used for --wait-gpus-free", "give numbers >= 0")
    snap = smi_snapshot()
    if snap["nvidia_smi"] is None or not snap["gpus"]:
        raise AgentFailure("GpuUnavailable", "cannot wait for GPUs %s to be free: %s" % (
            ",".join(map(str, gpus)), snap.get("note")),
            "start without --wait-gpus-free, or install the NVIDIA driver utilities on the target")
    have = sorted(g["index"] for g in snap["gpus"] if g["index"] is not None)
    missing = [i for i in gpus if i not in have]
    if missing:
        raise bad_input("GPU %s is not on this target (nvidia-smi lists %s)" % (
            ",".join(map(str, missing)), ",".join(map(str, have)) or "none"), "pick --gpus from that list")
    states, snap, waited, polls = gpu_poll(gpus, max_used, timeout, home)
    res = {"gpus": states, "waited_s": waited, "polls": polls, "max_used_mib": max_used, "timeout_s": timeout,
           "pids_are_local": in_host_pidns(), "pidns": pid_namespace(),
           "home_id": home.id if home is not None else None}
    busy = [s for s in states if not s["free"]]
    if busy:
        held = [held_message(s, "holds") for s in busy]
        runs = sorted({h["run"] for s in busy for h in s["holders"] if h.get("run")})
        raise AgentFailure("GpusBusy", "GPUs not free after %gs: %s" % (timeout, "; ".join(held)),
                           "wait longer (--timeout), raise --max-used, or free them" +
                           (": runward stop %s" % " ".join(runs) if runs else " (see `runward gpus`)"),
                           result=dict(res, gpus_held=held))
    return res


def gpu_release(att, fates, timeout, max_used, home=None):
    """After a verified stop: wait until the attempt's GPUs hold no compute process and
    their memory.used is back under max_used; a distinct, bounded answer when not."""
    gpus = list(att.get("gpus") or [])
    timeout = GPU_RELEASE_TIMEOUT if timeout is None else float(timeout)
    max_used = GPU_MAX_USED_MIB if max_used is None else float(max_used)
    direct = in_host_pidns()
    out = {"checked": True, "method": "direct" if direct else "memory", "timeout_s": timeout,
           "max_used_mib": max_used, "pids_are_local": direct, "pidns": pid_namespace(),
           "home_id": home.id if home is not None else None}
    try:
        states, snap, waited, polls = gpu_poll(gpus, max_used, timeout, home)
    except AgentFailure as e:
        out.update({"checked": True, "verified": False, "error": e.message, "hint": e.hint,
                    "message": "GPU release not verified: %s" % e.message})
        return out
    if states is None:
        return {"checked": False, "verified": False, "note": "GPU release not checked: no nvidia-smi"}
    ours = set(f["pid"] for f in fates or ())
    for s in states:
        for h in s["holders"]:
            if direct and h.get("pid") in ours:
                h["of_this_run"] = True
        s["released"] = s.pop("free")
    out.update({"verified": all(s["released"] for s in states), "waited_s": waited, "polls": polls, "gpus": states})
    if not out["verified"]:
        out["message"] = "; ".join(held_message(s) for s in states if not s["released"]) + \
            " after %gs" % timeout
    return out


def stop_gpu_check(res, store, att, fates, gpu_timeout, max_used=None):
    """The stop result's GPU part: only for an attempt that recorded GPUs (no nvidia-smi call
    otherwise)."""
    if not (att or {}).get("gpus"):
        return res
    rel = gpu_release(att, fates, gpu_timeout, max_used, store.home)
    res["gpu_release"] = rel
    if rel.get("verified"):
        res.setdefault("verified", []).append("gpu_released")
    elif rel.get("checked"):
        res["gpus_held"] = [held_message(s) for s in rel.get("gpus") or () if not s["released"]] or [rel["message"]]
    return res


def gpu_status(att, members):
    """status: the GPUs of a running attempt, their memory and the run's share of it."""
    try:
        snap = smi_snapshot(cached=True)
    except AgentFailure as e:
        return {"gpu_usage": [], "gpu_note": e.message}
    if snap["nvidia_smi"] is None:
        return {"gpu_usage": [], "gpu_note": snap["note"]}
    direct = in_host_pidns()
    by_index = {g["index"]: g for g in snap["gpus"]}
    rows = []
    for i in att.get("gpus") or ():
        g = by_index.get(i)
        if g is None:
            rows.append({"index": i, "used_mib": None, "total_mib": None, "run_mib": None,
                         "note": "not listed by nvidia-smi"})
            continue
        apps = [a for a in snap["apps"] if a["gpu_uuid"] == g["uuid"]]
        mine = [a for a in apps if direct and a.get("pid") in members]
        rows.append({"index": i, "used_mib": g["used_mib"], "total_mib": g["total_mib"],
                     "run_mib": sum(a["used_mib"] for a in mine if isinstance(a.get("used_mib"), (int, float)))
                     if direct else None, "processes": len(apps)})
    out = {"gpu_usage": rows}
    if not direct:
        out["gpu_note"] = "pids here are the host's: per-run memory is in `runward gpus`"
    return out


def op_gpus(req, home):
    snap = smi_snapshot()
    view = GpuView(home)
    gpus, stray = view.table(snap)
    res = {"host": os.uname().nodename, "nvidia_smi": snap["nvidia_smi"], "in_container": in_container(),
           "pids_are_local": view.direct, "pidns": pid_namespace(), "gpus": gpus,
           "home_id": home.id if home is not None else None,
           "mapping": "direct" if view.direct else "memory", "time": snap["at"]}
    if stray:
        res["unattributed_processes"] = stray
    if snap.get("note"):
        res["note"] = snap["note"]
    return res


def op_nspid(req, home):
    """On a container's host: for host pids nvidia-smi reported inside the container, the
    NSpid line of /proc/PID/status (the pid in each nested namespace, innermost last), the
    pid namespace, and the run marker. The CLI matches them to the container's namespace."""
    out = {}
    for pid in req.get("pids") or ():
        if not isinstance(pid, int) or pid <= 0:
            continue
        p = read_proc(pid)
        if p is None or p.dead:
            out[str(pid)] = None
            continue
        nspid = None
        for ln in (read_text("/proc/%d/status" % pid, "") or "").splitlines():
            if ln.startswith("NSpid:"):
                nspid = [int(x) for x in ln.split()[1:] if x.isdigit()]
        name, n = marker_run(p.env(MARKER))
        out[str(pid)] = {"nspid": nspid, "pidns": pid_namespace(pid), "state": p.state, "start": p.start,
                         "run": name, "attempt": n, "home_id": p.env(HOME_MARKER) if name else None,
                         "cmd": p.describe()["cmd"][:200]}
    return {"host": os.uname().nodename, "pids": out, "pids_are_local": in_host_pidns()}



# ---------------------------------------------------------------------------------------
# Training health: metrics and alerts read from the log (lm_*), incrementally.
# Training health read from a log file: metrics per line, alerts, incremental from an offset.
#
# This file is written to be moved verbatim into the agent (src/runward/agent.py), which is
# shipped to the target on every call: stdlib only, Python >= 3.8, every top-level name
# prefixed `lm_`/`Lm` (constants `LM_`) so none collides with the agent's own, and no work at
# import beyond compiling regexes.
#
# One entry point, `lm_scan(log_path, state, rules, now)`: parse only the bytes written since
# the last call (the offset lives in `state`, which the caller keeps and hands back) and answer
# with the points (metrics per line), the alerts and the new state.
#
# How a line becomes metrics. Every number in a line is a slot, named after the text just
# before it: `loss=2.31`, `loss: 2.31`, `loss 2.31`, `'loss': 2.31`, `"loss": "2.31"`,
# `lm loss: 2.3E+00 |` (lm_analyse). Lines that one program prints share a skeleton, the line
# with its digits deleted; the naming is worked out once per skeleton and kept as a template: a
# regex of the line with every digit run as `\\d+` whose groups are the named numbers. A line
# then costs a `bytes.translate`, a dict look-up and one `fullmatch`, all in C, on the raw bytes
# (never decoded). Only the values that rules look at (loss for NaN, the throughput) are
# converted per line; the dicts of the points returned are built for the last `max_points` only.
# ---------------------------------------------------------------------------------------


LM_VERSION = 1
LM_CHUNK = 1 << 20  # bytes per read
LM_MAX_BYTES = 64 << 20  # default cap on bytes parsed per call (rules["max_bytes"])
LM_CARRY_MAX = 64 << 10  # a line longer than this is cut there; the rest of it is skipped
LM_LINE_MAX = 500  # characters of a line kept in an alert
LM_MAX_POINTS = 2000
LM_TEMPLATE_CACHE = 4096
LM_MAX_TRACKED = 64  # metrics whose early median is kept in the state
LM_TB_MAX_LINES = 400  # a traceback whose exception line has not come after this many lines
LM_MAX_TRACEBACKS = 16  # tracebacks in progress at once (one per rank prefix)
LM_SIG_BYTES = 64  # bytes before the offset remembered to notice a log rewritten in place
LM_DIGITS = b"0123456789"

# A number: 14512, 14,512, 2.31, .5, 1.5E-04, -3, nan, NaN, inf, -inf, Infinity. Not one
# glued to a word (acc1, fp16, E0321, v1.2): those stay part of the surrounding text. Nor a
# "nan" that more words and a colon follow: Megatron's "number of nan iterations:   0".
LM_NUM_PAT = (
    r"(?<![\w.])("
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|[-+]?\.\d+(?:[eE][-+]?\d+)?"
    r"|[-+]?(?:[nN][aA][nN]|[iI][nN][fF](?:inity)?)(?!\w)(?![ \t]+[A-Za-z][A-Za-z_ ]*[:=])"
    r")"
)
LM_NUM_RE = lazy_re("LM_NUM_RE", "(?a)" + LM_NUM_PAT)
LM_NUM_RE_B = lazy_re("LM_NUM_RE_B", LM_NUM_PAT.encode())
LM_NAN_INF_RE_B = lazy_re("LM_NAN_INF_RE_B", rb"(?i)nan|inf")
# A NaN or Inf value leaves its letters in a line's skeleton: without this, none can be there.
# (A value token has no word character after it, so "INFO" is no such word.)
LM_NAN_WORD_RE_B = lazy_re("LM_NAN_WORD_RE_B", rb"(?i)(?<![a-z_])(?:nan|inf(?:inity)?)(?![a-z_])")
# The name before a number: the longest run of name characters that ends the gap, then an
# optional `=` or `:` and an opening quote or bracket. `,` `|` `;` `:` `=` end a name.
LM_NAME_TAIL_RE = lazy_re("LM_NAME_TAIL_RE", 
    r"(?<![A-Za-z0-9_])([A-Za-z_](?:[A-Za-z0-9_ /.%()#\-]*?[A-Za-z0-9_)%#])?)"
    r"['\"]?\s*(?:[=:]\s*)?['\"]?\[*\s*$"
)
LM_UNIT_GLUED_RE = lazy_re("LM_UNIT_GLUED_RE", r"^[A-Za-z%/]+")
LM_SUFFIX_RE = lazy_re("LM_SUFFIX_RE", r"^([kKMGT])(?:i?B)?(?![A-Za-z0-9])")
LM_SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
LM_RATE_UNIT_RE = lazy_re("LM_RATE_UNIT_RE", r"^ ?([A-Za-z]*/[A-Za-z]+)(?![A-Za-z])")
LM_SOURCE_RE = lazy_re("LM_SOURCE_RE", r"\.(?:py|c|cc|cpp|cu|h|hpp|rs|go)$")
LM_NORM_RE = lazy_re("LM_NORM_RE", r"[^a-z0-9]+")
LM_DIGIT_RUN_B = lazy_re("LM_DIGIT_RUN_B", rb"\d+")
# What comes before the message on a log line and is not data: timestamps, [bracketed]
# headers ([INFO], [rank0]:, [logging.py:69:log_dist]), (APIServer pid=1), glog headers
# (E0321 02:07:08.408271257 123 ProcessGroupNCCL.cpp:607]), vLLM's `INFO 03-18 09:04:46`.
LM_PREFIX_RE = lazy_re("LM_PREFIX_RE", 
    r"^(?:\s*(?:"
    r"\[[^\]\n]{0,120}\]:?"
    r"|\([A-Za-z][^)\n]{0,80}\)"
    r"|\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? [\w./-]+:\d+\]"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b:?"
    r"|[\w./-]+\.(?:py|cc|cpp|h|hpp):\d+(?::\w+)?\]"
    r"|>>|\||-|:"
    r")\s*)+"
)
# Where a log header starts inside a line (after a progress bar that had no newline).
LM_HEADER_START_RE_B = lazy_re("LM_HEADER_START_RE_B", rb"\[(?:rank\d+\]|[EWIF]\d{4} |[EWIF] )")
# A timestamp that starts the line: ISO 8601, `[2024-05-01 12:00:00,123]`, vLLM `INFO 03-18 ...`;
# also after one logger header (`[INFO|trainer.py:398] 2021-01-15 10:28:50,371 >> ...`).
LM_TS_RE = lazy_re("LM_TS_RE", 
    r"(?:\[[A-Za-z][^\]\n]{0,60}\] ?|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):? )?"
    r"\[?(\d{4})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d\d:?\d\d)?\]?"
)
LM_TS_MD_RE = lazy_re("LM_TS_MD_RE", r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")

# Lines that are events, found over a whole chunk at once (they are rare; the scan is C).
# Texts checked against real logs: PyTorch's caching allocator ("torch.OutOfMemoryError:
# CUDA out of memory. Tried to allocate ..."; before 2.5 "torch.cuda.OutOfMemoryError", before
# 1.13 "RuntimeError: CUDA out of memory"), the CUDA runtime ("CUDA error: out of memory",
# cudaErrorMemoryAllocation), the driver API (CUDA_ERROR_OUT_OF_MEMORY), cuBLAS handle creation
# ("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), ROCm ("HIP out of
# memory"), XLA ("RESOURCE_EXHAUSTED: Out of memory"); ProcessGroupNCCL ("Watchdog caught
# collective operation timeout: WorkNCCL(...)", "watchdog got stuck", "NCCL error in: ...",
# DistBackendError, ncclInternalError/ncclSystemError/...), NCCL_DEBUG=WARN output ("NCCL WARN
# NET/IB : Got completion ..."); the shell's "Killed" after the kernel OOM killer sent SIGKILL
# (or its zh_CN "已杀死"), and torchrun's "exitcode  : -9" / "Signal 9 (SIGKILL) received by PID".
# Triton's "OutOfResources: out of resource: shared memory" during autotuning is not one: the
# autotuner skips that config and goes on.
LM_EVENT_RE = lazy_re("LM_EVENT_RE",
    "(?m)(?P<traceback>Traceback \\(most recent call last\\):)"
    "|(?P<cuda_oom>CUDA out of memory|CUDA error: out of memory|HIP out of memory"
    "|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    "|RESOURCE_EXHAUSTED: Out of memory)"
    "|(?P<nccl>NCCL WARN|NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError"
    "|ncclRemoteError|ncclInvalidUsage|ncclInvalidArgument|DistBackendError"
    "|Watchdog caught collective operation timeout|watchdog got stuck"
    "|NCCL communicator was aborted|Some NCCL operations have failed or timed out)"
    "|(?P<oom_killed>^[ \\t]*(?:Killed|\u5df2\u6740\u6b7b)[ \\t\\r]*$|: line \\d+: +\\d+ Killed "
    "|Signal 9 \\(SIGKILL\\) received by PID|exitcode *: -9\\b|\\(exitcode: -9\\))"
    .encode("utf-8"),
)
LM_EVENT_HINTS = tuple(s.encode("utf-8") for s in (
    "Traceback", "memory", "MEMORY", "ALLOC_FAILED", "NCCL", "nccl", "Killed", "SIGKILL",
    "exitcode", "\u5df2\u6740\u6b7b"))  # every event pattern holds one: checked in C first
LM_TB_HEAD = "Traceback (most recent call last):"
LM_TB_CHAIN = ("During handling of the above exception", "The above exception was the direct")
# A traceback's prefix, as a key: digits of times and counters vary line to line and are
# zeroed; those naming a rank or a process ("[rank3]:", "pid=4009") tell tracebacks apart.
LM_PREFIX_DIGITS_RE = lazy_re("LM_PREFIX_DIGITS_RE", r"((?:[Rr]ank|pid)[ =:]?)?\d+")


def lm_prefix_key(prefix):
    return LM_PREFIX_DIGITS_RE.sub(lambda m: m.group(0) if m.group(1) else "0", prefix)


def lm_prefix_pattern(prefix):
    """A regex matching PREFIX with its zeroed digit runs of any length."""
    out, pos = [], 0
    for m in LM_PREFIX_DIGITS_RE.finditer(prefix):
        out.append(re.escape(prefix[pos:m.start()]))
        out.append(re.escape(m.group(0)) if m.group(1) else r"\d+")
        pos = m.end()
    out.append(re.escape(prefix[pos:]))
    return "".join(out)

LM_EVENT_DETAIL = {
    "cuda_oom": "CUDA out of memory",
    "nccl": "NCCL error or collective timeout",
    "oom_killed": "killed by SIGKILL, most often the kernel OOM killer (the agent checks dmesg)",
    "traceback": "Python traceback",
}

# Throughput names, best first: the main one is the first class that has a match.
LM_THROUGHPUT_PATS = (
    r"(^|_)(tok|toks|tokens?)(_per)?_s(ec(ond)?)?($|_)|(^|_)tgs($|_)|tokens?_?per_?sec",
    r"samples?_(per_)?s(ec(ond)?)?($|_)|samplespersec",
    r"(^|_)(wps|words_s|words_per_s(ec(ond)?)?)($|_)",
    r"throughput",
    r"(^|_)(it_s|ups|steps?_per_s(ec(ond)?)?)($|_)",
    r"(^|_)rate$",
)
LM_THROUGHPUT_CLASSES = []  # compiled on first use
# a counter of NaN steps (Megatron's "number of nan iterations"), not any name with "nan" in
# it: an echoed setting like TRAIN_NAN_AT=10 is no NaN
LM_NANCOUNT_RE = lazy_re("LM_NANCOUNT_RE", r"(^|_)nan_(iter|iters|iterations|steps|count|skipped)($|_)|"
                            r"(^|_)(number_of|num|n|count)_nan(_|$)")
LM_R_LOSS, LM_R_NANCOUNT, LM_R_BOUND, LM_R_DROP, LM_R_PROGRESS = 1, 2, 4, 8, 16  # roles
LM_STEP_NAMES = frozenset(("step", "iter", "iteration", "global_step", "num_updates"))


# --------------------------------------------------------------------------- names


def lm_norm_name(name):
    """`tok/s` -> `tok_s`, `lm loss` -> `lm_loss`, `elapsed time (ms)` -> `elapsed_time_ms`."""
    return LM_NORM_RE.sub("_", name.lower()).strip("_")


def lm_is_loss(name):
    """Loss-like: the name says loss (but a loss *scale* is not a loss)."""
    return "loss" in name and "scale" not in name


def lm_throughput_class(name):
    """Index of the throughput class NAME falls in (0 best), or None if it is no throughput."""
    if not LM_THROUGHPUT_CLASSES:
        LM_THROUGHPUT_CLASSES[:] = [re.compile(p) for p in LM_THROUGHPUT_PATS]
    for i, rx in enumerate(LM_THROUGHPUT_CLASSES):
        if rx.search(name):
            return i
    return None


def lm_is_throughput(name):
    return lm_throughput_class(name) is not None


def lm_throughput_metric(names):
    """The main throughput metric among NAMES, or None.

    Tokens per second beat samples, words, anything called throughput, iterations and bare
    rates; among equals, a current value beats a running average, generation beats prompt
    (vLLM), then the shorter name.
    """
    best = None
    for n in names:
        c = lm_throughput_class(n)
        if c is None:
            continue
        key = (c, "prompt" in n, any(w in n for w in ("avg", "running", "mean")), len(n), n)
        if best is None or key < best[0]:
            best = (key, n)
    return best[1] if best else None


# --------------------------------------------------------------------------- one line


def lm_name_from_gap(gap, first):
    """The metric name that the text GAP (between two numbers) gives the number after it."""
    if not first:
        # A unit glued to the previous number ("123.45ms, mfu ", "5.42it/s, loss=") is not
        # the start of the next name.
        gap = LM_UNIT_GLUED_RE.sub("", gap, count=1)
    m = LM_NAME_TAIL_RE.search(gap)
    if not m:
        return None
    words = m.group(1).split()
    if not words:
        return None
    if len(words) > 5:  # prose: "saving checkpoint for the run at step 500" -> step
        words = words[-1:]
    name = " ".join(words)
    if LM_SOURCE_RE.search(name):
        return None  # "ib_plugin.c:1615", "metrics.py:481": a source location, not data
    name = lm_norm_name(name)
    if not name or len(name) > 64 or name[0].isdigit():
        return None
    return name


def lm_analyse(parts, prefix_end):
    """Name the numbers of one line. PARTS is LM_NUM_RE.split(line): text, number, text, ...

    Returns (index of the number, name, multiplier, inverse) for each named number.
    """
    if any("NCCL INFO" in p for p in parts[0::2]):
        return ()  # NCCL_DEBUG=INFO chatter: channels, ranks, ports; no training metric
    slots = []
    seen = set()
    pos = 0
    for i in range(len(parts) // 2):
        gap = parts[2 * i]
        pos += len(gap)
        start = pos
        pos += len(parts[2 * i + 1])
        if start < prefix_end:
            continue  # timestamps, [rank0], (pid=12), [file.py:69]: not data
        after = parts[2 * i + 2]
        name = lm_name_from_gap(gap, i == 0 or start <= prefix_end)
        inv = False
        if name is None:
            if after.startswith("%|"):
                name = "progress"  # tqdm: "45%|####  | 450/1000"
            else:
                m = LM_RATE_UNIT_RE.match(after)
                if m:
                    unit = m.group(1)
                    if unit == "s/it":  # tqdm flips to seconds per iteration when slow
                        name, inv = "it_s", True
                    elif unit.startswith("/"):
                        name = "rate"  # timm: "Time: 0.512s,  500.12/s"
                    else:
                        name = lm_norm_name(unit)
        if not name or name in seen:
            continue
        seen.add(name)
        m = LM_SUFFIX_RE.match(after)
        slots.append((i, name, LM_SUFFIX[m.group(1)] if m else 1.0, inv))
    return tuple(slots)


def lm_number(token, mult=1.0, inv=False):
    """The float a number token (str or bytes) stands for: separators, K/M/G, s/it."""
    if isinstance(token, bytes):
        v = float(token.replace(b",", b"") if b"," in token else token)
    else:
        v = float(token.replace(",", "") if "," in token else token)
    if mult != 1.0:
        v *= mult
    if inv:
        v = 1.0 / v if v else math.inf
    return v


def lm_prefix_end(line):
    m = LM_PREFIX_RE.match(line)
    return m.end() if m else 0


def lm_parse_line(line):
    """Metrics of one line as {name: float}, without configuration ({} when none).

    The reference for what lm_scan's templates extract; lm_scan's timestamp handling aside
    (a leading timestamp is a prefix here, so it gives no metric either way).
    """
    parts = LM_NUM_RE.split(line)
    if len(parts) == 1:
        return {}
    return {name: lm_number(parts[2 * i + 1], mult, inv)
            for i, name, mult, inv in lm_analyse(parts, lm_prefix_end(line))}


def lm_value_of(raw):
    """A user regex's capture as a number (K/M/G suffix, separators), or None."""
    parts = LM_NUM_RE.split(raw.strip())
    if len(parts) < 3:
        return None
    m = LM_SUFFIX_RE.match(parts[2])
    return lm_number(parts[1], LM_SUFFIX[m.group(1)] if m else 1.0)


def lm_user_metrics(line, user):
    """Metrics from the user's named regexes (runward.toml), [(name, compiled regex)]: one
    group names the metric after the regex; named groups name it after themselves."""
    out = {}
    for name, rx in user:
        m = rx.search(line)
        if not m:
            continue
        groups = m.groupdict()
        if groups:
            for g, raw in groups.items():
                v = None if raw is None else lm_value_of(raw)
                if v is not None:
                    out[lm_norm_name(g)] = v
        elif m.groups() and m.group(1) is not None:
            v = lm_value_of(m.group(1))
            if v is not None:
                out[name] = v
    return out


def lm_unsep(token):
    """A number token with thousands separators (14,512) as a float."""
    return float(token.replace(b",", b""))


def lm_converter(mult, inv, comma):
    """The function turning one slot's token (bytes) into its float: `float` itself when
    the skeleton says the token is a plain number, which is nearly always."""
    if mult == 1.0 and not inv:
        return lm_unsep if comma else float
    return lambda token: lm_number(token, mult, inv)


class LmTemplate(object):
    """A line skeleton's regex and what its groups are."""

    __slots__ = ("match", "names", "convs", "ts", "checks", "progress", "event", "finite",
                 "losses", "lazy", "fast")

    def __init__(self, match, names, convs, ts, event=False):
        self.match = match  # compiled fullmatch over the raw line bytes
        self.names = names  # metric name of each group
        self.convs = convs  # converter of each group, or None when every one is `float`
        self.ts = ts  # the line starts with a timestamp the clock reads
        self.checks = ()  # (group, name, roles, converter, floor, ceiling): what rules read
        self.progress = False  # a metric that shows training going on (loss, step, tok/s)
        self.event = event  # lines of this skeleton were events (checked again per line)
        self.finite = False  # the skeleton has no nan/inf word: every value is finite
        self.losses = ()  # NaN keys of loss slots whose finite values need no check
        self.lazy = False  # finite and nothing to check: match only if kept as a point
        self.fast = False  # lazy and no event: the hot loop's first test

    def values(self, m):
        groups = m.groups()
        if self.convs is None:
            return dict(zip(self.names, map(float, groups)))
        return {name: conv(g) for name, g, conv in zip(self.names, groups, self.convs)}


def lm_template(line_b, line):
    """The template of raw line LINE_B (LINE decoded), or None if it is no event and names
    no number."""
    event = LM_EVENT_RE.search(line_b) is not None
    parts_b = LM_NUM_RE_B.split(line_b)
    parts = [p.decode("utf-8", "replace") for p in parts_b]
    slots = lm_analyse(parts, lm_prefix_end(line))
    if not slots:
        return LmTemplate(None, (), None, False, True) if event else None
    named = {}
    for gi, (i, name, mult, inv) in enumerate(slots):
        named[i] = gi
    pieces = []
    for j, p in enumerate(parts_b):
        rx = LM_DIGIT_RUN_B.sub(rb"\\d+", re.escape(p))
        if j % 2 and (j // 2) in named:
            rx = b"(" + rx + b")"
        pieces.append(rx)
    convs = tuple(lm_converter(mult, inv, b"," in parts_b[2 * i + 1])
                  for i, name, mult, inv in slots)
    if all(c is float for c in convs):
        convs = None
    ts = bool(LM_TS_RE.match(line) or LM_TS_MD_RE.match(line))
    tpl = LmTemplate(re.compile(b"".join(pieces), re.S).fullmatch,
                     tuple(s[1] for s in slots), convs, ts, event)
    tpl.finite = not LM_NAN_WORD_RE_B.search(line_b.translate(None, LM_DIGITS))
    return tpl


# --------------------------------------------------------------------------- time


class LmClock(object):
    """Line timestamps to epoch seconds; the date part of each is converted once."""

    def __init__(self, now):
        self.now = now
        self.year = time.localtime(now).tm_year
        self.hours = {}

    def parse(self, line):
        """(epoch seconds or None, end of the timestamp in LINE)."""
        m = LM_TS_RE.match(line)
        if m:
            y, mo, d, h, mi, s, frac, tz = m.groups()
            key = (y, mo, d, h, tz)
            base = self.hours.get(key)
            if base is None:
                try:
                    base = self._hour(int(y), int(mo), int(d), int(h), tz)
                except (ValueError, OverflowError):
                    return None, 0
                self.hours[key] = base
            t = base + int(mi) * 60 + int(s)
            if frac:
                t += int(frac) / (10.0 ** len(frac))
            return t, m.end()
        m = LM_TS_MD_RE.match(line)
        if m:
            mo, d, h, mi, s = (int(x) for x in m.groups())
            try:
                t = self._hour(self.year, mo, d, h, None) + mi * 60 + s
                if t > self.now + 86400:  # no year in the log: December's lines in January
                    t = self._hour(self.year - 1, mo, d, h, None) + mi * 60 + s
            except (ValueError, OverflowError):
                return None, 0
            return t, 0
        return None, 0

    def of(self, line):
        """Time of LINE: its timestamp, else the time of this scan."""
        t = self.parse(line)[0]
        return self.now if t is None else t

    @staticmethod
    def _hour(y, mo, d, h, tz):
        if tz is None:  # the log's local time is the target's, where this code runs
            return time.mktime((y, mo, d, h, 0, 0, 0, 0, -1))
        t = __import__("calendar").timegm((y, mo, d, h, 0, 0, 0, 0, 0))
        if tz != "Z":
            sign = -1 if tz[0] == "+" else 1
            tz = tz[1:].replace(":", "")
            t += sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
        return t


# --------------------------------------------------------------------------- alerts


def lm_cut(line):
    return line if len(line) <= LM_LINE_MAX else line[: LM_LINE_MAX - 3] + "..."


def lm_json_value(v):
    """JSON has no NaN or Infinity: say them as strings so any parser reads the answer."""
    if isinstance(v, float) and (v != v or v in (math.inf, -math.inf)):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


def lm_alert(kind, t, detail, line_no=None, line=None, metric=None, value=None, **extra):
    a = {"kind": kind, "line_no": line_no, "line": None if line is None else lm_cut(line),
         "t": t, "metric": metric, "value": lm_json_value(value), "detail": detail}
    a.update(extra)
    return a


def lm_median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def lm_decode(b):
    return b.decode("utf-8", "replace")


# --------------------------------------------------------------------------- the scan


class LmScan(object):
    """One call of lm_scan: the state unpacked into attributes, the hot loop, the rules."""

    def __init__(self, state, rules, now):
        self.now = now
        self.rules = rules
        self.clock = LmClock(now)
        self.templates = {}  # line skeleton (digits deleted) -> LmTemplate or None
        self.plain = {}  # line without digits -> 0 nothing, 1 event, 2 a NaN/Inf maybe
        self.user = [(lm_norm_name(k), re.compile(v)) for k, v in
                     sorted((rules.get("metrics") or {}).items())]
        self.points = collections.deque(maxlen=max(0, int(rules.get("max_points",
                                                                    LM_MAX_POINTS))))
        self.npoints = 0
        self.alerts = []
        tail_n = min(int(rules.get("tail_lines") or 0), 1000)
        self.tail = collections.deque(maxlen=tail_n) if tail_n > 0 else None
        self.mins = {self._rule_name(k): float(v) for k, v in (rules.get("min") or {}).items()}
        self.maxs = {self._rule_name(k): float(v) for k, v in (rules.get("max") or {}).items()}
        self.drop_fraction = rules.get("drop_fraction", 0.5)
        self.drop_points = int(rules.get("drop_points") or 3)
        self.early_points = int(rules.get("early_points") or 10)
        dm = rules.get("drop_metrics")
        self.drop_metrics = None if dm is None else set(self._rule_name(k) for k in dm)

        self.lines = int(state.get("lines", 0))
        self.last_line = state.get("last_line", "")
        self.last_line_t = state.get("last_line_t")
        self.growth_t = state.get("growth_t")
        self.tbs = state.get("tbs") or {}  # prefix (digits as 0) -> traceback in progress
        self.prefix_rx = {}  # a traceback's prefix pattern -> compiled
        self.tracked = state.get("tracked") or {}  # name -> {"early", "med", "low", "hit"}
        self.violating = dict(state.get("violating") or {})  # "min:tok_s" -> points back OK
        self.quiet = state.get("quiet") or {}  # event kind -> line of its alert (a burst)
        self.names = set(state.get("names") or ())
        self.main_tp = lm_throughput_metric(self.names)
        self.roles = {}
        self.roles_dirty = False
        self.exit_seen = state.get("exit_seen")
        self.sigkill_seen = state.get("sigkill_seen", False)

    @staticmethod
    def _rule_name(k):
        return "throughput" if k == "throughput" else lm_norm_name(k)

    def state(self):
        return {"lines": self.lines, "last_line": self.last_line, "last_line_t": self.last_line_t,
                "growth_t": self.growth_t, "tbs": self.tbs, "tracked": self.tracked,
                "violating": self.violating, "quiet": self.quiet,
                "names": sorted(self.names)[:256], "exit_seen": self.exit_seen,
                "sigkill_seen": self.sigkill_seen}

    # ---------------------------------------------------------------- lines

    def feed(self, buf):
        """Parse BUF, raw bytes of complete lines, each ending with a newline."""
        lines = buf.split(b"\n")
        lines.pop()  # after the last newline: empty
        templates = self.templates
        get = templates.get
        append = self.points.append
        violating = self.violating  # these three are changed in place only
        tracked = self.tracked
        frac = self.drop_fraction
        tbs = self.tbs
        quiet = self.quiet  # cleared, never replaced
        user = self.user
        digits = LM_DIGITS
        slow = self._slow
        check = self._check
        kept = 0
        for n, seg in enumerate(lines, self.lines + 1):
            if tbs and self._pending(n, seg):
                continue  # a line of a traceback in progress
            if user or b"\r" in seg:
                self._line(n, seg)  # tqdm redraws, or the user's own regexes
                continue
            # What follows is _one() inlined: this loop is the hot path.
            key = seg.translate(None, digits)
            tpl = get(key)
            if tpl is not None and tpl.fast:
                # Nothing to check and every value finite (see LmTemplate): the line is
                # matched only if it is among the points kept, which most of a long scan
                # is not.
                append((n, seg, tpl, None))
                kept += 1
                if violating and tpl.losses:
                    for nan_key in tpl.losses:  # a finite loss ends a run of NaN
                        violating.pop(nan_key, None)
                if quiet and tpl.progress:
                    quiet.clear()  # training went on: the next error is a new burst
                continue
            if tpl is None:
                if key not in templates:
                    if len(key) == len(seg):  # no digit: an event, "loss: nan", or nothing
                        self._plain(n, seg)
                        continue
                    tpl = self._template(seg, key)
                if tpl is None:
                    continue  # numbers, but none named
            if tpl.event:  # this skeleton was an event line: is this one?
                if self._event_line(n, seg):
                    continue
                if tpl.match is None:
                    continue
            if violating and tpl.losses:
                for nan_key in tpl.losses:
                    violating.pop(nan_key, None)
            if tpl.lazy:
                append((n, seg, tpl, None))
                kept += 1
                if quiet and tpl.progress:
                    quiet.clear()
                continue
            m = tpl.match(seg)
            if m is None:  # same skeleton, other shape (".5" where "0.5" was)
                slow(n, seg)
                continue
            append((n, m, tpl, None))
            kept += 1
            if quiet and tpl.progress:
                quiet.clear()  # training went on: the next error is a new burst
            for g, name, role, conv, lo, hi in tpl.checks:
                v = conv(m.group(g))
                # All quiet, the usual case, decided here: a finite value within its limits,
                # no alert condition open, no NaN count, the drop rule's median known and
                # the value above its floor. Anything else goes to _check.
                if (v - v == 0.0 and lo <= v <= hi and not violating
                        and (not role & LM_R_NANCOUNT or v <= 0)):
                    if not role & LM_R_DROP:
                        continue
                    tr = tracked.get(name)
                    if (tr is not None and not tr["low"] and tr["med"] is not None
                            and v >= frac * tr["med"]):
                        continue
                check(n, seg, tpl.ts, name, v, role)
        self.npoints += kept
        self.lines += len(lines)
        last = lines[-1].rstrip(b"\r").rsplit(b"\r", 1)[-1] if lines else b""
        if last:  # the last line with text (a CRLF split by a read leaves an empty one)
            self.last_line = lm_decode(last)
            self.last_line_t = None  # worked out in finish(), for the last line only
        if lines:
            if self.tail is not None:
                self.tail.extend(lines[-self.tail.maxlen:])

    def feed_redraws(self, part):
        """PART: finished carriage-return segments of the line still being written."""
        if part.strip(b"\r"):
            self._line(self.lines + 1, part)
            self.last_line = lm_decode(part.rstrip(b"\r").rsplit(b"\r", 1)[-1])
            self.last_line_t = None

    def _plain(self, n, seg):
        """A line without a digit. Most repeat ("Saving checkpoint..."), so what each is, an
        event, a NaN or nothing, is remembered (bounded)."""
        what = self.plain.get(seg)
        if what is None:
            if len(self.plain) >= LM_TEMPLATE_CACHE:
                self.plain.clear()
            what = self.plain[seg] = (
                1 if LM_EVENT_RE.search(seg) else 2 if LM_NAN_INF_RE_B.search(seg) else 0)
        if what == 1:
            self._event_line(n, seg)
        elif what == 2:
            self._slow(n, seg)

    def _event_line(self, n, seg):
        """If SEG is an event line, handle it (metrics before it first) and say True."""
        m = LM_EVENT_RE.search(seg)
        if m is None:
            return False
        start = m.start()
        if start > 0:
            # Training output and an error on one physical line (a progress bar without its
            # newline, then the watchdog's message): its metrics come first.
            head = seg[:start]
            h = LM_HEADER_START_RE_B.search(head)
            self._line(n, head[:h.start()] if h else head)
        self._special(n, lm_decode(seg).rstrip("\r"), m.lastgroup)
        return True

    def _pending(self, n, seg):
        """A line while tracebacks are in progress: True when it is used up."""
        m = LM_EVENT_RE.search(seg)
        if m is not None:
            return self._event_line(n, seg)
        return self._special(n, lm_decode(seg).rstrip("\r"), None)

    def _template(self, seg, key):
        if len(self.templates) >= LM_TEMPLATE_CACHE:
            self.templates.clear()
        tpl = lm_template(seg, lm_decode(seg))
        self.templates[key] = tpl
        if tpl is not None:
            for name in tpl.names:
                self._role(name)
            self._checks_of(tpl)
            self._refresh_roles()
        return tpl

    def _checks_of(self, tpl):
        checks = []
        losses = []
        progress = False
        for gi, name in enumerate(tpl.names):
            role = self.roles.get(name)
            if role is None:
                role = self._role(name)
            if tpl.finite and role & ~LM_R_PROGRESS == LM_R_LOSS:
                losses.append("nan:" + name)  # finite by its skeleton: only a NaN run ends
                progress = True
                continue
            if role & ~LM_R_PROGRESS:
                conv = float if tpl.convs is None else tpl.convs[gi]
                rnames = (name, "throughput") if name == self.main_tp else (name,)
                los = [self.mins[r] for r in rnames if r in self.mins]
                his = [self.maxs[r] for r in rnames if r in self.maxs]
                checks.append((gi + 1, name, role & ~LM_R_PROGRESS, conv,
                               max(los) if los else -math.inf, min(his) if his else math.inf))
            progress = progress or bool(role & LM_R_PROGRESS)
        tpl.progress = progress
        tpl.checks = tuple(checks)
        tpl.losses = tuple(losses)
        tpl.lazy = tpl.finite and not checks and tpl.match is not None
        tpl.fast = tpl.lazy and not tpl.event

    def _refresh_roles(self):
        """The main throughput metric changed (a new name): every template's checks again."""
        while self.roles_dirty:
            self.roles_dirty = False
            for tpl in self.templates.values():
                if tpl is not None:
                    self._checks_of(tpl)

    def _line(self, n, raw):
        """A line by the general path: an event, or every carriage-return segment (tqdm
        redraws in place) for metrics."""
        if any([h in raw for h in LM_EVENT_HINTS]) and self._event_line(n, raw):
            return
        for seg in raw.split(b"\r"):
            if seg:
                if self.user:
                    self._slow(n, seg)
                else:
                    self._one(n, seg)

    def _one(self, n, seg):
        """Metrics of one line segment by its template (feed() has this inlined)."""
        key = seg.translate(None, LM_DIGITS)
        tpl = self.templates.get(key)
        if tpl is None:
            if key in self.templates:
                return
            if len(key) == len(seg):
                if LM_NAN_INF_RE_B.search(seg):
                    self._slow(n, seg)
                return
            tpl = self._template(seg, key)
            if tpl is None:
                return
        if tpl.match is None:
            return
        if self.violating and tpl.losses:
            for key in tpl.losses:
                self.violating.pop(key, None)
        m = tpl.match(seg)
        if m is None:
            self._slow(n, seg)
            return
        self.points.append((n, m, tpl, None))
        self.npoints += 1
        if self.quiet and tpl.progress:
            self.quiet.clear()
        for g, name, role, conv, lo, hi in tpl.checks:
            self._check(n, seg, tpl.ts, name, conv(m.group(g)), role)

    def _slow(self, n, seg):
        """Metrics of one segment without a template (and with the user's regexes)."""
        line = lm_decode(seg)
        t, tend = self.clock.parse(line)
        metrics = lm_parse_line(line[tend:]) if tend else lm_parse_line(line)
        if self.user:
            um = lm_user_metrics(line, self.user)
            if um:
                metrics.update(um)
        if not metrics:
            return
        t = self.now if t is None else t
        self.points.append((n, None, metrics, t))
        self.npoints += 1
        for name, v in metrics.items():
            role = self.roles.get(name)
            if role is None:
                role = self._role(name)
            if role & LM_R_PROGRESS and self.quiet:
                self.quiet.clear()
            if role & ~LM_R_PROGRESS:
                self._check(n, line, t, name, v, role)
        self._refresh_roles()

    def materialize(self):
        """The kept points as the JSON-able dicts lm_scan returns."""
        out = []
        for n, m, tpl, t in self.points:
            if m is None:
                metrics = tpl  # the slow path stored the dict itself
            else:
                if isinstance(m, bytes):  # a lazy line: matched only now
                    seg = m
                    m = tpl.match(seg)
                    if m is None:  # same skeleton, other shape: the general parser
                        line = lm_decode(seg)
                        t, tend = self.clock.parse(line)
                        metrics = lm_parse_line(line[tend:])
                        if metrics:
                            out.append({"line": n, "t": self.now if t is None else t,
                                        "metrics": {k: lm_json_value(v)
                                                    for k, v in metrics.items()}})
                        continue
                metrics = tpl.values(m)
                t = self.clock.of(lm_decode(m.string[:128])) if tpl.ts else self.now
            for k, v in metrics.items():
                if v != v or v in (math.inf, -math.inf):
                    metrics[k] = lm_json_value(v)
            out.append({"line": n, "t": t, "metrics": metrics})
        return out

    # ---------------------------------------------------------------- events

    def _special(self, n, line, kind):
        """Tracebacks in progress and event lines; True when LINE is used up by them."""
        if self.tbs and self._traceback_line(n, line, kind):
            return True
        if kind is None:
            return False
        t = self.clock.of(line)
        if kind == "traceback":
            i = line.find(LM_TB_HEAD)
            prefix = lm_prefix_key(line[:i])
            old = self.tbs.pop(prefix, None)
            if old is not None:  # a new traceback before this prefix's last one ended
                self._emit_traceback(old)
            if len(self.tbs) >= LM_MAX_TRACEBACKS:
                self._emit_traceback(self.tbs.pop(next(iter(self.tbs))))
            self.tbs[prefix] = {"line_no": n, "t": t, "prefix": prefix, "seen": 0,
                                "rx": lm_prefix_pattern(line[:i]),
                                "final": None, "final_no": None, "kind": None, "chain": False}
            return True
        self._event(kind, n, t, line)
        return True

    def _event(self, kind, n, t, line, **extra):
        # One failure prints the same message once per rank and per retry: report the first
        # line of a burst and count the rest, until a metric line shows training went on.
        first = self.quiet.get(kind)
        if first is not None:
            for a in reversed(self.alerts):
                if a["kind"] == kind and a["line_no"] == first:
                    a["repeats"] = a.get("repeats", 0) + 1
                    break
            return
        self.quiet[kind] = n
        detail = extra.pop("detail", None) or LM_EVENT_DETAIL[kind] + ": " + line.strip()[:200]
        if kind == "oom_killed":
            extra.setdefault("evidence", "log line: " + line.strip()[:120])
        self.alerts.append(lm_alert(kind, t, detail, n, line, **extra))

    def _traceback_line(self, n, line, kind):
        """Offer LINE to the tracebacks in progress; True when one of them takes it.

        A traceback is its header, indented frames, then one unindented exception line. The
        text before "Traceback" (`[rank1]: `, a logger header; digits aside) marks its lines
        when ranks interleave, so each prefix has its own traceback in progress. "During
        handling of the above exception..." chains the next traceback to it; the alert
        carries the last exception line, the one that ended the program.
        """
        taken = False
        for prefix, tb in list(self.tbs.items()):
            rx = self.prefix_rx.get(tb["rx"])
            if rx is None:
                rx = self.prefix_rx[tb["rx"]] = re.compile(tb["rx"])
            m = None if taken else rx.match(line)
            if m is None:
                self._traceback_stranger(tb)
                continue
            body = line[m.end():]
            if not body.strip():
                tb["seen"] += 1
                taken = True  # blank: inside a traceback, or before "During handling..."
            elif body.startswith(LM_TB_CHAIN):
                tb["chain"] = taken = True
            elif body.startswith(LM_TB_HEAD):
                if tb["chain"] or tb["final"] is None:
                    tb["chain"], tb["final"] = False, None
                    taken = True  # the next link of a chain
                else:
                    self._emit_traceback(self.tbs.pop(prefix))  # _special starts the new one
            elif tb["final"] is not None:
                self._emit_traceback(self.tbs.pop(prefix))
            elif body[:1] in " \t":
                tb["seen"] += 1
                taken = True  # a frame, its source line, carets
            else:
                # The exception line: "ValueError: ...", "torch.OutOfMemoryError: CUDA ...".
                tb["final"], tb["final_no"] = lm_cut(body.strip()), n
                if kind in ("cuda_oom", "nccl") and tb["kind"] is None:
                    tb["kind"] = kind
                taken = True
        return taken

    def _traceback_stranger(self, tb):
        """A line that is not TB's: the exception line is settled once one passes, and a
        traceback that never gets one is reported after LM_TB_MAX_LINES lines."""
        tb["seen"] += 1
        if tb["final"] is not None or tb["seen"] > LM_TB_MAX_LINES:
            self._emit_traceback(self.tbs.pop(tb["prefix"]))

    def _emit_traceback(self, tb):
        final = tb["final"]
        if final is None:
            detail = "Python traceback (its exception line has not appeared)"
            self._event("traceback", tb["line_no"], tb["t"], LM_TB_HEAD, detail=detail,
                        traceback_line_no=tb["line_no"])
            return
        kind = tb["kind"] or "traceback"
        what = "Python traceback" if kind == "traceback" else LM_EVENT_DETAIL[kind]
        detail = "%s: %s (traceback from line %d)" % (what, final, tb["line_no"])
        self._event(kind, tb["final_no"], tb["t"], final, detail=detail,
                    traceback_line_no=tb["line_no"])

    # ---------------------------------------------------------------- rules on points

    def _role(self, name):
        """Which rules look at metric NAME (bits LM_R_*); redone for every name when the
        main throughput metric changes."""
        if name not in self.names:
            self.names.add(name)
            if lm_is_throughput(name):
                main = lm_throughput_metric(self.names)
                if main != self.main_tp:
                    self.main_tp = main
                    self.roles = {}
                    self.roles_dirty = True
        is_main = name == self.main_tp
        role = 0
        if lm_is_loss(name) or lm_is_throughput(name) or name in LM_STEP_NAMES:
            role |= LM_R_PROGRESS
        if lm_is_loss(name):
            role |= LM_R_LOSS
        elif LM_NANCOUNT_RE.search(name):
            role |= LM_R_NANCOUNT
        if name in self.mins or name in self.maxs or (is_main and (
                "throughput" in self.mins or "throughput" in self.maxs)):
            role |= LM_R_BOUND
        if self.drop_fraction and (is_main if self.drop_metrics is None else (
                name in self.drop_metrics or (is_main and "throughput" in self.drop_metrics))):
            role |= LM_R_DROP
        self.roles[name] = role
        return role

    def _check(self, n, line, t, name, v, role):
        """Rules on one value. LINE is str or the raw bytes; T a time or, with raw bytes,
        whether the line has a timestamp (both are worked out only for an alert)."""
        if role & LM_R_LOSS:
            key = "nan:" + name
            if v != v or v == math.inf or v == -math.inf:
                if key not in self.violating:
                    self.violating[key] = 0
                    line, t = self._where(line, t)
                    what = "NaN" if v != v else "Inf"
                    self.alerts.append(lm_alert("nan" if v != v else "inf", t,
                                                "%s is %s" % (name, what), n, line, name, v))
            elif key in self.violating:
                del self.violating[key]
        elif role & LM_R_NANCOUNT:
            key = "nancount:" + name
            if v > 0:
                if key not in self.violating:  # Megatron: "number of nan iterations: 3"
                    self.violating[key] = 0
                    line, t = self._where(line, t)
                    self.alerts.append(lm_alert("nan", t, "%s = %g: the framework counts "
                                                "NaN steps" % (name, v), n, line, name, v))
            elif key in self.violating:
                del self.violating[key]
        if role & LM_R_BOUND:
            for rname in ((name, "throughput") if name == self.main_tp else (name,)):
                lo = self.mins.get(rname)
                if lo is not None:
                    self._bound("below_min", name, v, v < lo, lo, n, line, t)
                hi = self.maxs.get(rname)
                if hi is not None:
                    self._bound("above_max", name, v, v > hi, hi, n, line, t)
        if role & LM_R_DROP:
            self._drop(name, v, n, line, t)

    def _where(self, line, t):
        """(line text, time) for an alert, from what _check was given."""
        if isinstance(line, bytes):
            line = lm_decode(line)
            t = self.clock.of(line) if t else self.now
        return line, t

    def _bound(self, kind, name, v, bad, limit, n, line, t):
        # Alert when the value crosses the limit; again only after it was back within it for
        # drop_points values in a row (a value that hovers at the limit would alert each line).
        key = kind + ":" + name
        if bad:
            if key not in self.violating:
                line, t = self._where(line, t)
                word = "below the floor" if kind == "below_min" else "above the ceiling"
                self.alerts.append(lm_alert(kind, t, "%s = %g, %s %g" % (name, v, word, limit),
                                            n, line, name, v, limit=limit))
            self.violating[key] = 0
        elif v == v and key in self.violating:
            self.violating[key] += 1
            if self.violating[key] >= self.drop_points:
                del self.violating[key]

    def _drop(self, name, v, n, line, t):
        if v != v:
            return
        tr = self.tracked.get(name)
        if tr is None:
            if len(self.tracked) >= LM_MAX_TRACKED:
                return
            tr = self.tracked[name] = {"early": [], "med": None, "low": 0, "hit": False}
        if tr["med"] is None:
            tr["early"].append(v)
            if len(tr["early"]) >= self.early_points:
                tr["med"] = lm_median(tr["early"])
                tr["early"] = []
            return
        if v < self.drop_fraction * tr["med"]:
            tr["low"] += 1
            if tr["low"] >= self.drop_points and not tr["hit"]:
                tr["hit"] = True
                line, t = self._where(line, t)
                self.alerts.append(lm_alert(
                    "drop", t, "%s = %g for %d points in a row, below %g x its early median %g"
                    % (name, v, tr["low"], self.drop_fraction, tr["med"]), n, line, name, v,
                    median=tr["med"]))
        else:
            tr["low"] = 0
            tr["hit"] = False

    # ---------------------------------------------------------------- after the bytes

    def finish(self, alive, exit_info):
        # A traceback whose exception line is known is reported now, even if a chained one
        # might follow (that one then counts as a repeat); one still missing its exception
        # line waits for the next call, unless the job is gone and nothing more will come.
        for prefix, tb in list(self.tbs.items()):
            if tb["final"] is not None or not alive:
                self._emit_traceback(self.tbs.pop(prefix))
        if self.last_line and self.last_line_t is None:
            self.last_line_t = self.clock.of(self.last_line)
        stall = self.rules.get("stall_seconds")
        if alive and stall and self.growth_t is not None and self.now - self.growth_t > stall:
            quiet = self.now - self.growth_t
            self.alerts.append(lm_alert(
                "stall", self.now, "no new log output for %d s (stall limit %g s) while the job "
                "is alive" % (quiet, stall), value=round(quiet, 1), since=self.growth_t))
        if exit_info:
            code, sig = exit_info.get("code"), exit_info.get("signal")
            seen = [code, sig]
            if self.exit_seen != seen:
                self.exit_seen = seen
                if sig:
                    detail = "the job was killed by %s" % sig
                else:
                    detail = "the job exited with code %s" % code
                self.alerts.append(lm_alert("exited", self.now, detail, code=code, signal=sig))
            sigkill = (str(sig or "").upper().replace("SIG", "") in ("KILL", "9")
                       or code in (137, -9))
            if sigkill and not self.sigkill_seen:
                self.sigkill_seen = True
                self.alerts.append(lm_alert(
                    "oom_killed", self.now, "possibly OOM-killed: the job ended by SIGKILL (the "
                    "kernel OOM killer sends it; dmesg tells)", evidence="exit by SIGKILL",
                    certain=False))


def lm_scan(log_path, state, rules, now):
    """Parse what LOG_PATH gained since STATE (see the module docstring).

    Returns {"state", "points", "points_dropped", "alerts", "last_line", "lines", "bytes",
    "bytes_read", "more", "reset", "exists"}, and "tail" when rules["tail_lines"].
    """
    state = dict(state or {})
    rules = rules or {}
    scan = LmScan(state, rules, now)
    offset = int(state.get("offset", 0))
    carry = state.get("carry", "").encode("latin-1")
    skip_long = bool(state.get("skip_long", False))
    sig = state.get("sig", "")
    ident = (state.get("ino"), state.get("dev"))
    max_bytes = int(rules.get("max_bytes", LM_MAX_BYTES))
    reset = None
    read = 0
    more = False
    try:
        f = open(log_path, "rb")
    except FileNotFoundError:
        f = None
    if f is not None:
        with f:
            st = os.fstat(f.fileno())
            if ident[0] is not None and ident != (st.st_ino, st.st_dev):
                reset = "rotated"  # another file under the name (logrotate, re-created)
            elif st.st_size < offset:
                reset = "truncated"
            elif sig and offset:
                # Same file, not shorter: are the bytes before our offset still the ones we
                # read? (copytruncate, or `> log` and a rewrite, would pass the size test.)
                n = len(sig) // 2
                f.seek(offset - n)
                if f.read(n).hex() != sig:
                    reset = "rewritten"
            if reset:
                offset, carry, skip_long = 0, b"", False
                scan.lines, scan.last_line = 0, ""
                scan.tbs.clear()
                scan.quiet.clear()
            ident = (st.st_ino, st.st_dev)
            f.seek(offset)
            while read < max_bytes:
                data = f.read(min(LM_CHUNK, max_bytes - read))
                if not data:
                    break
                read += len(data)
                if skip_long:  # the rest of a line already cut at LM_CARRY_MAX
                    nl = data.find(b"\n")
                    if nl < 0:
                        continue
                    data = data[nl + 1:]
                    skip_long = False
                buf = carry + data if carry else data
                nl = buf.rfind(b"\n")
                if nl < 0:
                    carry = buf
                else:
                    carry = buf[nl + 1:]
                    scan.feed(buf[: nl + 1])
                cr = carry.rfind(b"\r")
                if cr >= 0:
                    # A progress bar redrawn in place (tqdm, Lightning) ends its line only
                    # when the epoch ends: its finished redraws are read now, not 64 KiB on.
                    scan.feed_redraws(carry[:cr])
                    carry = carry[cr + 1:]
                if len(carry) > LM_CARRY_MAX:
                    scan.feed(carry[:LM_CARRY_MAX] + b"\n")
                    carry, skip_long = b"", True
            offset += read
            end = os.fstat(f.fileno()).st_size
            more = offset < end
            if read:
                scan.growth_t = min(now, st.st_mtime)
            elif scan.growth_t is None and end:
                scan.growth_t = min(now, st.st_mtime)
            if offset:
                n = min(offset, LM_SIG_BYTES)
                f.seek(offset - n)
                sig = f.read(n).hex()
    scan.finish(bool(rules.get("alive")), rules.get("exit"))
    new_state = scan.state()
    new_state.update({"v": LM_VERSION, "offset": offset, "carry": carry.decode("latin-1"),
                      "skip_long": skip_long, "sig": sig, "ino": ident[0], "dev": ident[1]})
    points = scan.materialize()
    out = {"state": new_state, "points": points, "points_dropped": scan.npoints - len(points),
           "alerts": scan.alerts, "last_line": lm_cut(scan.last_line), "lines": scan.lines,
           "bytes": offset, "bytes_read": read, "more": more, "reset": reset,
           "exists": f is not None}
    if scan.tail is not None:
        out["tail"] = [lm_cut(lm_decode(x.rstrip(b"\r"))) for x in scan.tail]
    return out

# ---------------------------------------------------------------------------------------
# Health: the run's log scanned where it lives, incrementally (lm_scan above), with the
# parser's state, a bounded series of points and the alerts kept beside the run's records.
# ---------------------------------------------------------------------------------------

HEALTH_POINTS = 2000
HEALTH_ALERTS = 200


def health_rules(req_rules, att, procs):
    rules = {"drop_fraction": 0.5, "drop_points": 3, "early_points": 10, "stall_seconds": None,
             "max_bytes": 32 << 20, "max_points": HEALTH_POINTS}
    for k, v in (req_rules or {}).items():
        if v is not None:
            rules[k] = v
    job = att.get("job")
    rules["alive"] = bool(job) and proc_matches(job) is not None
    rules["exit"] = att.get("exit") if att.get("exit") else None
    return rules


def health_scan(store, att, req_rules):
    """One incremental scan of the current attempt's part of the log; returns
    (saved record, new alerts, new points)."""
    path = os.path.join(store.dir, "health.json")
    lock = os.open(os.path.join(store.home.path, "runs", "." + store.name + ".health.lock"),
                   os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        saved = read_json(path) or {}
        if saved.get("attempt") != att.get("attempt"):
            # a new attempt: its part of the (appended) log starts after its header
            saved = {"attempt": att.get("attempt"), "lm": {"offset": int(att.get("log_offset") or 0)},
                     "points": [], "alerts": []}
        before = json_dumps(saved, sort_keys=True)
        rules = health_rules(req_rules, att, None)
        res = lm_scan(att["log"], saved.get("lm") or {}, rules, time.time())
        saved["lm"] = res["state"]
        saved["points"] = (saved.get("points", []) + res["points"])[-HEALTH_POINTS:]
        saved["alerts"] = (saved.get("alerts", []) + res["alerts"])[-HEALTH_ALERTS:]
        saved["last_line"] = res.get("last_line") or saved.get("last_line", "")
        saved["alive"] = rules["alive"]
        if json_dumps(saved, sort_keys=True) != before:  # a quiet log changes nothing: no write, no fsync
            write_json(path, saved)
        return saved, res["alerts"], res["points"]
    finally:
        os.close(lock)


def health_summary(saved, series_len=60):
    points = saved.get("points") or []
    names = []
    for p in points:
        for k in p.get("metrics", {}):
            if k not in names:
                names.append(k)
    tp = lm_throughput_metric(names)
    last = {}
    for p in points:
        last.update(p.get("metrics", {}))
    main = [n for n in names if n in ("step", "iteration", "iter", "epoch") or lm_is_loss(n) or n == tp][:6]
    series = [p["metrics"][tp] for p in points if tp and tp in p.get("metrics", {})][-series_len:]
    return {"metrics": {k: last[k] for k in main if k in last}, "throughput_metric": tp,
            "throughput_series": series, "alerts": (saved.get("alerts") or [])[-5:],
            "points": len(points)}


def _health_store(req, home):
    store = existing_run(home, req.get("name"))
    att = store.latest()
    if not att or not att.get("log"):
        raise AgentFailure("RunNotFound", "run %s has no attempt yet" % store.name, "start it first")
    return store, att


def op_health(req, home):
    store, att = _health_store(req, home)
    saved, new_alerts, _ = health_scan(store, att, req.get("rules"))
    out = health_summary(saved)
    out.update({"name": store.name, "attempt": att.get("attempt"), "new_alerts": new_alerts})
    if req.get("points"):
        out["series"] = saved.get("points") or []
        out["all_alerts"] = saved.get("alerts") or []
    return out


def op_watch(req, home, emit):
    """Follow health for for_s seconds: return at the first alert, or healthy at the end.
    The log is polled every 0.5 s (no inotify in the stdlib); each poll reads only new bytes."""
    store, att = _health_store(req, home)
    window = float(req.get("for_s") or 60.0)
    t0 = time.monotonic()
    seen_before = None
    while True:
        att = store.latest() or att
        saved, new_alerts, new_points = health_scan(store, att, req.get("rules"))
        if seen_before is None:
            # alerts raised before this watch began still count: the run is not healthy now
            new_alerts = [a for a in saved.get("alerts") or [] if a.get("kind") != "stall"] or new_alerts
            seen_before = True
        if new_points:
            emit({"points": new_points[-20:]})
        if new_alerts:
            out = health_summary(saved)
            out.update({"name": store.name, "attempt": att.get("attempt"), "healthy": False,
                        "alert": new_alerts[0], "alerts": new_alerts, "watched_s": round(time.monotonic() - t0, 2)})
            return out
        if time.monotonic() - t0 >= window:
            out = health_summary(saved)
            out.update({"name": store.name, "attempt": att.get("attempt"), "healthy": True,
                        "watched_s": round(time.monotonic() - t0, 2)})
            return out
        time.sleep(min(0.5, max(0.0, window - (time.monotonic() - t0))))


OPS = {
    "start": op_start,
    "health": op_health,
    "ps": op_ps,
    "kill": op_kill,
    "exec": op_exec,
    "doctor": op_doctor,
    "hash": op_hash,
    "stop": op_stop,
    "status": op_status,
    "spec": op_spec,
    "ping": op_ping,
    "gpus": op_gpus,
    "nspid": op_nspid,
}
STREAM_OPS = {
    "logs": op_logs,
    "watch": op_watch,
}
IO_OPS = {
    "push": op_push,
}


def AGENT_SHA_HEX():
    g = globals()
    if g.get("AGENT_SHA"):
        return g["AGENT_SHA"]
    import hashlib
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def AGENT_SOURCE_BYTES():
    """The agent as the bootstrap reads it: zlib-compressed source."""
    g = globals()
    if g.get("AGENT_SOURCE"):
        return g["AGENT_SOURCE"]
    if g.get("AGENT_SHA"):  # started by the bootstrap from its cache, without the source
        raise AgentFailure("AgentMissing", "this operation needs the agent's source, and the "
                           "request came without it", "a runward bug: the CLI sends the source "
                           "with every operation that starts a shim")
    import zlib
    with open(os.path.abspath(__file__), "rb") as f:
        return zlib.compress(f.read(), 9)


# ---------------------------------------------------------------------------------------
# The resident: this agent kept running on an ssh target, for the read-only verbs
# ---------------------------------------------------------------------------------------
#
# Over ssh, a command that reads its stdin gets its first byte one round trip after it
# starts (sshd opens the session's window only once the exec request is done), and each call
# pays a shell's and a Python's start-up there. The resident removes all three from the
# verbs that only read: it listens on a unix socket in the home's 0700 cache directory, and
# the CLI reaches it through its ssh control master (a streamlocal forward), so a status is
# one channel opening plus one exchange. It is started by an ordinary call that asks for it
# ("resident" in the request), serves each connection in a forked child exactly as an
# agent started over ssh would (same request and reply bytes), and exits after `idle`
# seconds without a connection, or once its socket is removed or replaced. Its command line
# is the bootstrap and RESIDENT_ARG, like the shim's: no request data. Every operation that
# changes something (start, stop, kill, exec, push) still runs in a fresh agent.

RESIDENT_ARG = "runward-resident"
RESIDENT_OPS = frozenset(("status", "gpus", "ps", "spec", "health", "hash", "ping", "logs", "nspid"))
RESIDENT_PATH_MAX = 100  # sun_path holds 108 bytes; the resident binds "<path>.<pid>" first


def resident_path(home):
    return os.path.join(home.path, "cache", "resident-%s.sock" % AGENT_SHA_HEX()[:16])


def resident_wanted(req):
    want = req.get("resident")
    return (isinstance(want, dict) and req.get("op") in RESIDENT_OPS and not req.get("follow")
            and globals().get("AGENT_CACHED") == 1)


def resident_ensure(req, home):
    """{"path", "alive"} for the caller's reply: the resident serving this home, started
    now unless one holds its lock. None where there can be none: an agent the bootstrap
    could not cache (the resident starts from that cache), a path too long for a socket, or
    a cache directory that is not ours alone (design.md rule 10)."""
    path = resident_path(home)
    if len(path) + 8 > RESIDENT_PATH_MAX:
        return None
    try:
        home.ensure()  # 0700, ours (its parents' modes are not ours to set)
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        st = os.lstat(os.path.dirname(path))
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or (st.st_mode & 0o170000) != 0o040000:
            return None
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except (OSError, AgentFailure):
        return None
    if resident_lock_held(fd):
        return {"path": path, "alive": True}
    try:
        idle = min(max(float(req["resident"].get("idle", 600)), 1.0), 86400.0)
    except (TypeError, ValueError):
        idle = 600.0
    import subprocess
    log = None
    try:
        log = os.open(path[:-len(".sock")] + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        p = subprocess.Popen([sys.executable, "-S", "-c", BOOTSTRAP, RESIDENT_ARG],
                             stdin=subprocess.PIPE, stdout=log, stderr=log, close_fds=True,
                             start_new_session=True)
        p.returncode = 0  # never waited for: it outlives us
        # from the code cache (AGENT_CACHED): the header carries the hash alone
        p.stdin.write(b"0 %s\n" % AGENT_SHA_HEX().encode() + json_dumps({"path": path, "idle": idle}).encode() + b"\n")
        p.stdin.close()
    except OSError:  # no resident this time: the call itself is unaffected
        return None
    finally:
        if log is not None:
            os.close(log)
    return {"path": path, "alive": False}


def resident_lock_held(fd):
    """Whether a resident holds the lock open on fd (it does for as long as it lives).
    Closes fd, releasing our own try: the resident takes the lock itself."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def resident_state(home):
    """For doctor: the resident of this agent version and home, looked at, not started."""
    path = resident_path(home)
    try:
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return {"path": path, "alive": False}
    return {"path": path, "alive": resident_lock_held(fd)}


def resident_main(params):
    import socket
    path, idle = params["path"], float(params["idle"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another one serves this home
    os.umask(0o077)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = "%s.%d" % (path, os.getpid())
    try:
        os.unlink(tmp)
    except OSError:
        pass
    srv.bind(tmp)
    srv.listen(64)
    os.rename(tmp, path)  # a connect never finds the path bound but not yet listening
    ino = os.stat(path).st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    last = time.monotonic()
    try:
        while True:
            left = last + idle - time.monotonic()
            if left <= 0:
                return 0
            if not select.select([srv], [], [], min(left, 5.0))[0]:
                try:
                    if os.stat(path).st_ino != ino:
                        return 0  # replaced
                except OSError:
                    return 0  # removed
                continue
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            last = time.monotonic()
            pid = os.fork()
            if pid == 0:
                rc = 1
                try:
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the ops wait for their own children
                    srv.close()
                    os.close(lock)
                    rc = resident_serve(conn)
                finally:
                    os._exit(rc)
            conn.close()
    finally:
        try:
            if os.stat(path).st_ino == ino:
                os.unlink(path)
        except OSError:
            pass


def resident_serve(conn):
    """One connection, as the agent serves its stdin and stdout: "<length> <sha256>", the
    source if any (we run it already), the request line; events and one reply back."""
    rf, wf = conn.makefile("rb"), conn.makefile("wb")
    head = rf.readline().split()
    if len(head) != 2 or not head[0].isdigit():
        return 2
    if int(head[0]) and len(rf.read(int(head[0]))) != int(head[0]):
        return 2
    if head[1].decode("ascii", "replace") != AGENT_SHA_HEX():
        reply(wf, {"v": PROTOCOL, "ok": False, "error": {
            "type": "AgentMissing", "message": "the resident runs agent %s" % AGENT_SHA_HEX()[:12]}})
        return 3
    try:
        return serve(rf, wf)
    finally:
        try:
            wf.close()
            conn.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# The shim
# ---------------------------------------------------------------------------------------

def shim_main(home_path, name, attempt):
    """Parent of the job. Detached in its own session by spawn_shim. Forks the job into a
    new session of its own (so stop can signal its process group), joins it to the run's
    cgroups, waits for it, records exit code or signal atomically."""
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    home = Home(home_path)
    store = RunStore(home, name)
    n = int(attempt)
    att = store.attempt(n)
    env = json_loads(os.environ.get("RUNWARD_SHIM_ENV", "{}"))
    status_fd = 1
    me = read_proc(os.getpid())
    att["shim"] = {"pid": me.pid, "start": me.start}
    write_json(store.attempt_path(n), att)

    err_r, err_w = os.pipe()
    fcntl.fcntl(err_w, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the job
        try:
            os.close(err_r)
            os.setsid()
            for cg in att.get("cgroups") or ():
                try:
                    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                        f.write(str(os.getpid()))
                except OSError:
                    pass
            os.chdir(att["cwd"])
            lfd = os.open(att["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.dup2(lfd, 1)
            os.dup2(lfd, 2)
            os.dup2(devnull, 0)
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 65536)
            for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            os.execve(att["exe"], att["argv"], env)
        except BaseException as e:  # exec failed: tell the shim through the CLOEXEC pipe
            try:
                os.write(err_w, ("%s: %s" % (type(e).__name__, e)).encode())
            finally:
                os._exit(127)
    os.close(err_w)
    err = b""
    while True:
        chunk = os.read(err_r, 4096)
        if not chunk:
            break
        err += chunk
    os.close(err_r)
    if err:
        os.waitpid(pid, 0)
        att["error"] = err.decode("utf-8", "replace")
        att["exit"] = None
        write_json(store.attempt_path(n), att)
        _say(status_fd, {"error": att["error"]})
        return
    jp = read_proc(pid)
    att["job"] = {"pid": pid, "start": jp.start if jp else None}
    att["started_at"] = time.time()
    write_json(store.attempt_path(n), att)
    _say(status_fd, {"job": att["job"]})
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    ex = {"at": time.time()}
    if os.WIFSIGNALED(status):
        ex.update({"code": None, "signal": signal_name(os.WTERMSIG(status)), "signum": os.WTERMSIG(status)})
    else:
        ex.update({"code": os.WEXITSTATUS(status), "signal": None})
    att = store.attempt(n)
    att["exit"] = ex
    write_json(store.attempt_path(n), att)
    _say(status_fd, {"exit": ex})
    # an empty cgroup is removed now (rmdir fails while an escaped process is still in it,
    # and then `stop` still finds that process there)
    cgroup_remove(att.get("cgroups"))


def _say(fd, obj):
    try:
        os.write(fd, (json_dumps(obj) + "\n").encode())
    except OSError:
        pass  # nobody is listening any more: the record is the truth


# ---------------------------------------------------------------------------------------
# Entry
# ---------------------------------------------------------------------------------------

RESIDENT_REPLY = None  # where this call found or started the resident, for the caller


def reply(out, obj):
    if "ok" in obj and RESIDENT_REPLY is not None:
        obj["resident"] = RESIDENT_REPLY
    if "ok" in obj and globals().get("AGENT_CACHED") == 0:
        # the bootstrap could not cache the agent here (a read-only home): the caller must
        # keep sending the source instead of its hash alone
        obj["uncached"] = True
    out.write((json_dumps(obj) + "\n").encode())
    out.flush()


def serve(stdin, stdout):
    line = stdin.readline()
    try:
        req = json_loads(line.decode())
    except ValueError:
        reply(stdout, {"v": PROTOCOL, "ok": False, "error": {
            "type": "AgentError", "message": "request is not valid JSON: %r" % line[:80]}})
        return 2
    if not isinstance(req, dict) or req.get("v") != PROTOCOL:
        reply(stdout, {"v": PROTOCOL, "ok": False, "error": {
            "type": "AgentError", "message": "protocol version mismatch: agent speaks %d, request %r" % (
                PROTOCOL, req.get("v") if isinstance(req, dict) else None)}})
        return 2
    op = req.get("op")
    global RESIDENT_REPLY
    try:
        home = Home(req.get("home"))
        if resident_wanted(req):
            RESIDENT_REPLY = resident_ensure(req, home)
        if op in OPS:
            result = OPS[op](req, home)
        elif op in STREAM_OPS:
            result = STREAM_OPS[op](req, home, lambda ev: reply(stdout, {"event": ev}))
        elif op in IO_OPS:
            result = IO_OPS[op](req, home, lambda ev: reply(stdout, {"event": ev}), stdin)
        else:
            raise bad_input("unknown operation %r" % op)
        reply(stdout, {"v": PROTOCOL, "ok": True, "result": result})
        return 0
    except AgentFailure as e:
        reply(stdout, {"v": PROTOCOL, "ok": False, "error": e.to_dict()})
        return 1
    except BrokenPipeError:
        return 1
    except Exception as e:  # a bug: send it home with its traceback (rebuilt locally)
        import traceback
        reply(stdout, {"v": PROTOCOL, "ok": False, "error": {
            "type": "AgentError", "message": "%s: %s" % (type(e).__name__, e),
            "traceback": traceback.format_exc()}})
        return 1


CACHE_KEEP_S = 7 * 86400


def prune_cache():
    """The code cache keeps one compiled agent per version (~250 KB), and each version's
    resident leaves a lock and a log: when this version has just been compiled here (its
    cache file is under a minute old; a cache hit never gets here with a fresh file), the
    other versions' files older than a week go. Called after the reply; rare by nature."""
    sha = globals().get("AGENT_SHA")
    if not sha or not globals().get("AGENT_SOURCE") or globals().get("AGENT_CACHED") != 1:
        return
    d = os.path.join(Home().path, "cache")  # the bootstrap's: by RUNWARD_HOME, not the request
    own = ("agent-%s." % sha[:32], "resident-%s." % sha[:16])
    try:
        names = os.listdir(d)
        mine = [n for n in names if n.startswith(own[0])]
        now = time.time()
        if not mine or now - os.stat(os.path.join(d, mine[0])).st_mtime > 60:
            return
        for n in names:
            if n.startswith(("agent-", "resident-")) and not n.startswith(own):
                p = os.path.join(d, n)
                if now - os.lstat(p).st_mtime > CACHE_KEEP_S:
                    os.unlink(p)
    except OSError:
        pass


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == SHIM_ARG:
        params = json_loads(sys.stdin.buffer.readline().decode())
        shim_main(params["home"], params["name"], params["attempt"])
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == RESIDENT_ARG:
        return resident_main(json_loads(sys.stdin.buffer.readline().decode()))
    rc = serve(sys.stdin.buffer, sys.stdout.buffer)
    prune_cache()
    return rc


if __name__ == "__main__":
    sys.exit(main())
