"""The state on the target: ~/.runward (or $RUNWARD_HOME), mode 0700, one directory per
run (run.json, attempts/N.json, log), written atomically; and the small file helpers the
records and logs need."""

import os

from .wire import AgentFailure, bad_input, json_loads

NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
NAME_CHARS = NAME_FIRST | frozenset("._-")


def valid_name(n):
    """A run name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$, checked without importing re."""
    return (isinstance(n, str) and 0 < len(n) <= 64 and n[0] in NAME_FIRST
            and all(c in NAME_CHARS for c in n))


def check_name(name):
    if not valid_name(name):  # a str, and never "." or "..": it starts with a letter or digit
        raise bad_input("invalid run name %r" % (name,),
                        "a run name is 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


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
            # nothing world-writable is trusted (docs/protocol.md, README on state)
            raise AgentFailure("AgentError", "state directory %s is writable by others or not ours" % self.path,
                               "chmod 700 %s, or set RUNWARD_HOME to a directory of your own" % self.path)

    def run_dir(self, name):
        return os.path.join(self.path, "runs", name)

    def run_names(self):
        try:
            return sorted(n for n in os.listdir(os.path.join(self.path, "runs")) if valid_name(n))
        except FileNotFoundError:
            return []


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

    def lock(self):
        """An exclusive lock per run, held for a start or stop: two starts at the same moment
        give one job; the second sees it alive. The lock lives beside the run directory."""
        import fcntl
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


# --- files: written atomically, read back whole or from an offset

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
    import json  # records are indented for people; only the verbs that write pay for json
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
