"""A run's log as files: the logger that rotates it by size (log -> log.1 -> log.2 ...),
and the readers that follow it across a rotation (`logs`, `logs -f`).

Why a logger process (docs/protocol.md, "Log rotation"): the job writes to an O_APPEND fd.
Renaming the log under it sends every later line to log.1; copying then truncating loses
what the job writes between the copy and the truncate; the shim in the output path breaks
the rule that its death never touches the job's output. So for a run with log_max (only
then) the job's stdout and stderr are a pipe, read by a small process of its own — forked
from the shim before the job, in a session of its own, not a member of the run — which
appends what it reads to the log and rotates the log at a line boundary once it passes
log_max. It ends at EOF, when the job and every child holding the pipe are gone, so a stop
loses no line either: the shim waits for it before it exits, and stop waits for the shim.
"""

import os
import sys

from ..core.store import open_log, tail_lines, write_all
from ..core.wire import bad_input

PIPE_BYTES = 1 << 20  # the pipe's capacity: the job blocks only when the logger is this far behind
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, which Python 3.8's fcntl does not name
READ_BYTES = 1 << 16


# --- the logger

def rotation(req):
    """(log_max, log_keep) of a start request, checked; (None, None) when not asked."""
    lmax, keep = req.get("log_max"), req.get("log_keep")
    if lmax is None:
        return None, None
    if not isinstance(lmax, int) or isinstance(lmax, bool) or lmax < 1024:
        raise bad_input("invalid log_max %r" % (lmax,), "give a size of at least 1K, e.g. --log-max 2G")
    keep = 3 if keep is None else keep
    if not isinstance(keep, int) or isinstance(keep, bool) or not 1 <= keep <= 100:
        raise bad_input("invalid log_keep %r" % (keep,), "keep between 1 and 100 rotated files")
    return lmax, keep


class RotatingLog(object):
    """Appends to PATH; once it would pass MAX_BYTES, ends the current line in it, renames
    PATH.(KEEP-1) -> PATH.KEEP ... PATH -> PATH.1 (the oldest beyond KEEP is replaced) and
    goes on in a new PATH. A line longer than MAX_BYTES overshoots rather than being cut."""

    def __init__(self, path, max_bytes, keep):
        self.path, self.max, self.keep = path, max(1, int(max_bytes)), max(1, int(keep))
        self._open()

    def _open(self):
        self.fd = open_log(self.path)
        self.size = os.fstat(self.fd).st_size
        self.at_line_start = self.size == 0 or _last_byte(self.path, self.size) == b"\n"

    def write(self, data):
        while data:
            room = self.max - self.size
            if len(data) <= room:
                self._append(data)
                return
            nl = data.rfind(b"\n", 0, max(room, 0))
            if nl < 0 and self.at_line_start and self.size > 0:
                self.rotate()  # the file ends with a whole line: the next one starts the new file
                continue
            if nl < 0:
                nl = data.find(b"\n")  # the line in progress ends here, past max if it must
                if nl < 0:
                    self._append(data)
                    return
            self._append(data[:nl + 1])
            data = data[nl + 1:]
            self.rotate()

    def _append(self, data):
        write_all(self.fd, data, self.path)
        self.size += len(data)
        self.at_line_start = data.endswith(b"\n")

    def rotate(self):
        # the new name of each file first, oldest first, so no rename replaces a file that
        # has not moved on yet
        for i in range(self.keep, 1, -1):
            try:
                os.rename("%s.%d" % (self.path, i - 1), "%s.%d" % (self.path, i))
            except FileNotFoundError:
                pass
        self._replace_current()
        extra = self.keep + 1
        while os.path.exists("%s.%d" % (self.path, extra)):  # kept by an earlier, larger log_keep
            os.unlink("%s.%d" % (self.path, extra))
            extra += 1

    def _replace_current(self):
        """PATH -> PATH.1 with PATH never missing: link the full file as PATH.1, then rename a
        new empty file over PATH. A reader (`logs`, the parser, a user's `tail -F`) that opens
        PATH at any moment finds the old file or the new one, never none. Where hard links
        are refused (some FUSE or FAT mounts) it falls back to a rename and a short gap."""
        head, base = os.path.split(self.path)
        fresh = os.path.join(head, ".%s.rotating" % base)  # not PATH.*: no reader takes it for a rotated file
        try:
            os.unlink(self.path + ".1")  # log_keep = 1: the oldest, replaced (else moved on to .2)
        except FileNotFoundError:
            pass
        try:
            os.link(self.path, self.path + ".1")
        except OSError:
            os.rename(self.path, self.path + ".1")
            os.close(self.fd)
            self._open()
            return
        try:
            os.unlink(fresh)  # left by a logger killed mid-rotation
        except FileNotFoundError:
            pass
        fd = open_log(fresh)
        os.rename(fresh, self.path)
        os.close(self.fd)
        self.fd, self.size, self.at_line_start = fd, 0, True

    def close(self):
        os.close(self.fd)


def _last_byte(path, size):
    """The log's last byte (our fd is write-only): does it end with a whole line?"""
    fd = _open(path)
    if fd is None:
        return b"\n"
    try:
        return os.pread(fd, 1, size - 1)
    finally:
        os.close(fd)


def rotations(path):
    """The rotated files of the log PATH that exist (PATH.1, PATH.2 ...), newest first: every
    name PATH.<number> in its directory, gaps included (a larger log_keep of an earlier
    attempt, a rotation cut short), for rm and prune, which keep or remove them with PATH."""
    head, base = os.path.split(path)
    try:
        names = os.listdir(head or ".")
    except OSError:
        return []
    tails = (n[len(base) + 1:] for n in names if n.startswith(base + "."))
    nums = sorted(int(t) for t in tails if t and t[0] != "0" and t.strip("0123456789") == "")
    return ["%s.%d" % (path, i) for i in nums if os.path.isfile("%s.%d" % (path, i))]


def spawn_logger(att):
    """Fork the logger of ATT's log; returns (its pid, the pipe's write end for the job).
    Called by the shim, before the job is forked."""
    r, w = os.pipe()
    try:
        import fcntl
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # the default 64 KiB: the job may block sooner, nothing is lost
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(w)
            # a session of its own, with the shim's command line: `runward kill` and stop's
            # search treat it as they treat a shim (procfs.protected), never as the job's
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)  # not the shim's status pipe: its EOF tells start the shim died
            for lo, hi in ((3, r), (r + 1, 65536)):
                os.closerange(lo, hi)
            run_logger(r, att["log"], att["log_max"], att.get("log_keep") or 3)
            code = 0
        except BaseException as e:
            import traceback
            sys.stderr.write("runward logger: %s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()))
        finally:
            os._exit(code)
    os.close(r)
    return pid, w


def run_logger(rfd, path, max_bytes, keep):
    """Copy the pipe RFD into the rotating log until EOF. A write that fails (a full disk)
    is told in the shim's log and the logger reads on: the job must never block on us."""
    log = RotatingLog(path, max_bytes, keep)
    while True:
        try:
            data = os.read(rfd, READ_BYTES)
        except InterruptedError:
            continue
        if not data:
            break
        try:
            log.write(data)
        except Exception as e:
            sys.stderr.write("runward logger: %d bytes not logged: %s\n" % (len(data), e))
    log.close()


def reap(pid):
    """Wait for the logger (it ends when the last writer of its pipe is gone)."""
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


# --- reading across the rotation

def tail(path, n):
    """The last N lines of the log, taken from PATH.1 (and older) when PATH alone has fewer."""
    lines = tail_lines(path, n)
    if len(lines) >= n:
        return lines
    from ..logmetrics.reader import rotated  # the parser's package: only when it is needed
    seen = {_stat_ident(path)}  # mid-rotation PATH and PATH.1 are one file for a moment
    for older in reversed(rotated(path)):  # newest first
        if len(lines) >= n:
            break
        ident = _stat_ident(older)
        if ident in seen:
            continue
        seen.add(ident)
        lines = tail_lines(older, n - len(lines)) + lines
    return lines


def _stat_ident(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def end_of(path):
    """A position at the end of the log now, for read_on."""
    fd = _open(path)
    if fd is None:
        return 0
    try:
        return _position(fd, os.fstat(fd), os.fstat(fd).st_size)
    finally:
        os.close(fd)


def read_on(path, pos):
    """(bytes, new position): what the log gained since POS (an int offset in whatever file
    is PATH, or a position this returned: inode, device, offset and the bytes before it).
    When PATH was rotated since, the rest of the file POS was in is read first, under its
    rotated name, then each newer file: a follower misses no line the rotation kept
    (log_keep). A file rotated out of reach: from the oldest still there."""
    if not isinstance(pos, tuple):
        fd = _open(path)
        if fd is None:
            return b"", pos
        try:
            return _read_fd(fd, pos, os.fstat(fd))
        finally:
            os.close(fd)
    fd = _open(path)
    if fd is not None:  # not rotated since (the usual case): read on, the parser's package unloaded
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_dev) == (pos[0], pos[1]) and _sig(fd, pos[2]) == pos[3]:
                return _read_fd(fd, pos[2], st)
        finally:
            os.close(fd)
    from ..logmetrics.reader import chain
    files = chain(path, _At(pos), from_oldest=True)
    try:
        offset = 0
        if files and _ident(files[0]) == (pos[0], pos[1]):
            if _sig(files[0].fileno(), pos[2]) == pos[3]:
                offset = pos[2]
            else:  # its inode reused by a newer file: ours was rotated out of reach
                for f in files:
                    f.close()
                files = chain(path, _At((-1, -1)), from_oldest=True)
        for f in files or ():  # None: the names moved at each try; read on from POS next time
            data, new = _read_fd(f.fileno(), offset, os.fstat(f.fileno()))
            if data or f is files[-1]:
                return data, new
            offset = 0
        return b"", pos
    finally:
        for f in files or ():
            f.close()


class _At(object):
    """A read_on position as the cursor logmetrics.reader.chain looks for."""

    def __init__(self, pos):
        self.ident = (pos[0], pos[1])


def _ident(f):
    st = os.fstat(f.fileno())
    return (st.st_ino, st.st_dev)


def first_lines(path, pos, n):
    """The first N lines from POS (read_on's position), in the file it was in."""
    data, _ = read_on(path, pos)
    return data.decode("utf-8", "replace").splitlines()[:n]


def _read_fd(fd, offset, st):
    if st.st_size < offset:
        offset = 0  # truncated or rewritten: start again
    data = os.pread(fd, min(st.st_size - offset, 1 << 20), offset) if st.st_size > offset else b""
    return data, _position(fd, st, offset + len(data))


def _position(fd, st, offset):
    return (st.st_ino, st.st_dev, offset, _sig(fd, offset))


def _sig(fd, offset):
    """The bytes just before OFFSET: a file under a reused inode number does not have them."""
    n = min(offset, 32)
    return os.pread(fd, n, offset - n)


def _open(path):
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None
