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

import fcntl
import json
import os
import re
import select
import signal
import sys
import time

# hashlib, socket, subprocess and traceback are imported where used: every operation pays
# for the agent's start-up, so it imports only what the common verbs need.

PROTOCOL = 1
# The bootstrap is the only code on the command line; it carries no request data. It reads
# "<length> <sha256>" and the zlib-compressed agent source from stdin, and hands the
# compressed source on (AGENT_SOURCE)
# so the shim is started the same way, with no agent file on disk. Compiling the source costs
# more than the rest of a status call, so the code object is cached by the source's hash in a
# 0700 directory of the user's own; a cache file that is not ours or is group/world-writable
# is ignored (design.md rule 10).
BOOTSTRAP = """import sys,os,marshal,zlib
b=sys.stdin.buffer;n,h=b.readline().split();z=b.read(int(n));h=h.decode()
d=os.path.join(os.environ.get('RUNWARD_HOME') or os.path.expanduser('~/.runward'),'cache')
p=os.path.join(d,'agent-%s.%s'%(h[:32],sys.implementation.cache_tag))
try:
 f=open(p,'rb');st=os.fstat(f.fileno())
 if st.st_uid!=os.getuid() or st.st_mode&0o22:raise OSError
 c=marshal.loads(f.read());f.close()
except Exception:
 c=compile(zlib.decompress(z),'runward-agent','exec')
 try:
  os.makedirs(d,0o700,exist_ok=True);t='%s.%d'%(p,os.getpid());f=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600)
  os.write(f,marshal.dumps(c));os.close(f);os.rename(t,p)
 except Exception:pass
exec(c,{'__name__':'__main__','AGENT_SOURCE':z,'AGENT_SHA':h})"""
SHIM_ARG = "runward-shim"
MARKER = "RUNWARD_RUN"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SECRET_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
LOG_TAIL_LINES = 20
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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
            return json.loads(f.read().decode())
    except FileNotFoundError:
        return default
    except ValueError:
        # A torn record cannot happen with write_atomic; a hand-edited one can.
        raise AgentFailure("AgentError", "record %s is not valid JSON" % path,
                           "inspect or remove the file by hand")


def read_text(path, default=None):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return default


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
    return {k: ("[secret]" if SECRET_RE.search(k) else v) for k, v in (env or {}).items()}


# ---------------------------------------------------------------------------------------
# Processes: identity is (boot id, pid, start time); a pid alone is never signalled.
# ---------------------------------------------------------------------------------------

class Proc(object):
    __slots__ = ("pid", "ppid", "pgrp", "sid", "state", "start", "utime", "stime",
                 "rss", "comm", "uid", "_env", "_cmd")

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
        self._cmd = None

    @property
    def dead(self):
        return self.state in ("Z", "X")

    def env(self, name):
        if self._env is None:
            try:
                with open("/proc/%d/environ" % self.pid, "rb") as f:
                    self._env = f.read()
            except OSError:
                self._env = b""
        key = b"\0" + name.encode() + b"="
        data = b"\0" + self._env
        i = data.find(key)
        if i < 0:
            return None
        j = data.find(b"\0", i + len(key))
        return data[i + len(key): j if j >= 0 else len(data)].decode("utf-8", "replace")

    def cmdline(self):
        if self._cmd is None:
            try:
                with open("/proc/%d/cmdline" % self.pid, "rb") as f:
                    raw = f.read()
            except OSError:
                raw = b""
            self._cmd = [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] if raw else []
        return self._cmd

    def ident(self):
        return {"pid": self.pid, "start": self.start}

    def describe(self):
        cmd = self.cmdline()
        return {"pid": self.pid, "start": self.start, "state": self.state,
                "cmd": " ".join(cmd) if cmd else "[%s]" % self.comm}


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


def scan_procs():
    procs = {}
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


def is_shim(p):
    cmd = p.cmdline()
    return SHIM_ARG in cmd and BOOTSTRAP in cmd


def descendants(roots, procs):
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


def signal_name(num):
    try:
        return signal.Signals(num).name
    except (ValueError, TypeError):
        return "SIG%s" % num


def terminate(members, procs, sig, grace, find_more=None, kill_rounds=3, kill_wait=5.0, group=None):
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
            return sorted(n for n in os.listdir(os.path.join(self.path, "runs")) if NAME_RE.match(n))
        except FileNotFoundError:
            return []


def check_name(name):
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise bad_input("invalid run name %r" % (name,),
                        "a run name is 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


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


def cgroup_create(name, attempt):
    """Try to make runward/<name>.<attempt> in each writable hierarchy; return the paths made."""
    made = []
    for kind, root in cgroup_roots():
        base = os.path.join(root, "runward")
        try:
            os.makedirs(os.path.join(base, "%s.%d" % (name, attempt)), exist_ok=True)
            made.append(os.path.join(base, "%s.%d" % (name, attempt)))
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
    members = {}
    job = att.get("job") if att else None
    jp = procs.get(job["pid"]) if job else None
    if jp is not None and jp.start == job["start"] and not jp.dead:
        members[jp.pid] = jp
        for p in procs.values():
            if p.sid == jp.pid or p.pgrp == jp.pid:
                members[p.pid] = p
    prefix = name + "."
    for p in procs.values():
        if p.pid in prot or p.dead or p.pid in members:
            continue
        m = p.env(MARKER)
        if m is not None and m.startswith(prefix) and m[len(prefix):].isdigit():
            members[p.pid] = p
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
                                   float(req.get("grace", prev.get("grace", 30.0))))
            if not replaced["verified_dead"]:
                raise AgentFailure("NotVerified", "could not verify the old attempt dead; not starting",
                                   "see the survivors below", stop=replaced)
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
        if req.get("gpus") is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req["gpus"])
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
            "cgroups": cgroup_create(store.name, n) if req.get("cgroup", True) else [],
            "settle": settle, "ready": ready,
        }
        write_json(store.attempt_path(n), att)
        run.update({"attempt": n, "spec": {k: req.get(k) for k in (
            "argv", "sh", "cwd", "env", "log", "settle", "ready", "gpus", "stop_signal", "grace", "files")}})
        write_json(os.path.join(store.dir, "run.json"), run)
        header = "=== runward: %s attempt %d started %s: %s ===\n" % (
            store.name, n, time.strftime("%Y-%m-%dT%H:%M:%S%z"), sh if sh is not None else " ".join(argv))
        lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        log_start = os.fstat(lfd).st_size
        os.write(lfd, header.encode())
        os.close(lfd)
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
    return watch_settle(store, n, job, pipe, log, log_start + len(header.encode()), settle, ready_re,
                        float(req.get("ready_timeout", 600.0)), replaced)


def spawn_shim(home, name, attempt, env):
    """Start the shim detached (new session): the job's parent, never in its output path."""
    import subprocess
    src = AGENT_SOURCE_BYTES()
    r, w = os.pipe()
    errlog = os.open(os.path.join(home.run_dir(name), "attempts", "%d.shim.log" % attempt),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    shim_env = dict(env)
    shim_env.pop(MARKER, None)  # the shim itself must never be found as a member of the run
    shim_env["RUNWARD_SHIM_ENV"] = json.dumps(env)
    p = subprocess.Popen([sys.executable, "-S", "-c", BOOTSTRAP, SHIM_ARG, home.path, name, str(attempt)],
                         stdin=subprocess.PIPE, stdout=w, stderr=errlog, close_fds=True,
                         start_new_session=True, env=shim_env)
    os.close(w)
    os.close(errlog)
    p.stdin.write(b"%d %s\n" % (len(src), AGENT_SHA_HEX().encode()) + src)
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
    return json.loads(data.split(b"\n", 1)[0].decode())


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
    store = RunStore(home, req.get("name"))
    if not store.exists():
        raise AgentFailure("RunNotFound", "no run named %s on this target" % store.name,
                           "`runward status` lists the runs here")
    sig = req.get("signal")
    grace = req.get("grace")
    fd = store.lock()
    try:
        att = store.latest()
        procs = scan_procs()
        prot = protected_pids(procs)
        sig = sig or (att or {}).get("stop_signal", "TERM")
        grace = float(grace if grace is not None else (att or {}).get("grace", 30.0))
        return stop_locked(store, att, procs, prot, sig, grace)
    finally:
        os.close(fd)


def stop_locked(store, att, procs, prot, sig, grace):
    signum = parse_signal(sig)
    members = run_members(store.name, att, procs, prot)
    res = {"name": store.name, "attempt": att.get("attempt") if att else None, "signal": signal_name(signum),
           "grace_s": grace}
    if not members:
        res.update({"already_stopped": True, "verified_dead": True, "processes": [],
                    "state": attempt_state(att, procs, boot_id())})
        res["verified"] = ["no_process_of_run_alive"]
        return res
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
    res["state"] = attempt_state(store.latest(), scan_procs(), boot_id())
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
    procs = scan_procs()
    prot = protected_pids(procs)
    bid = boot_id()
    up = uptime_seconds()
    runs = []
    for nm in names or all_names:
        store = RunStore(home, nm)
        if store.exists():
            runs.append(status_of(store, procs, prot, bid, up, with_drift=bool(names)))
    return {"runs": runs, "boot_id": bid, "time": time.time(), "host": os.uname().nodename}


def op_logs(req, home, emit):
    store = RunStore(home, req.get("name"))
    if not store.exists():
        raise AgentFailure("RunNotFound", "no run named %s on this target" % store.name,
                           "`runward status` lists the runs here")
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
    store = RunStore(home, req.get("name"))
    if not store.exists():
        raise AgentFailure("RunNotFound", "no run named %s on this target" % store.name,
                           "`runward status` lists the runs here")
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
    return checks


def in_container():
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    env1 = read_text("/proc/1/environ", "") or ""
    return "container=" in env1


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


OPS = {
    "start": op_start,
    "ps": op_ps,
    "kill": op_kill,
    "exec": op_exec,
    "doctor": op_doctor,
    "hash": op_hash,
    "stop": op_stop,
    "status": op_status,
    "spec": op_spec,
    "ping": op_ping,
}
STREAM_OPS = {
    "logs": op_logs,
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
    import zlib
    with open(os.path.abspath(__file__), "rb") as f:
        return zlib.compress(f.read(), 9)


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
    env = json.loads(os.environ.get("RUNWARD_SHIM_ENV", "{}"))
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


def _say(fd, obj):
    try:
        os.write(fd, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass  # nobody is listening any more: the record is the truth


# ---------------------------------------------------------------------------------------
# Entry
# ---------------------------------------------------------------------------------------

def reply(out, obj):
    out.write((json.dumps(obj) + "\n").encode())
    out.flush()


def serve(stdin, stdout):
    line = stdin.readline()
    try:
        req = json.loads(line.decode())
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
    try:
        home = Home(req.get("home"))
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


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == SHIM_ARG:
        shim_main(*sys.argv[2:5])
        return 0
    return serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
