"""The skim's search spread over the machine's cores: a big log's first read on a host with
more than one core (a GPU host has many) searches its chunks in forked processes, and this
one feeds the lines that matter in the log's order, as one process would.

Exact by construction: the chunks are those Skim.run cuts (plan() finds each one's last
newline as run's loop does), and a process computes for each chunk only what depends on its
bytes alone, skim.hits and skim.newlines; every step that carries state from one chunk to the
next (line numbers, a traceback followed on, a burst's context and progress line, the feed)
runs here, in order, on the same offsets (tests/test_skim_fork.py: the scan's answer field
for field against one process). A log whose chunks run's loop cuts otherwise (a line longer
than CARRY_MAX, a carry from the last call, a short read) is skimmed by that loop. Stdlib only.
"""

import marshal
import os
import sys

from .reader import CARRY_MAX

MAX_WORKERS = 8  # a training host's cores are the job's: a first read takes a few at most
MIN_CHUNKS = 4  # chunks a process searches at least: a fork costs ~1-2 ms
PROBE = 4096  # bytes read back from a chunk's end to find its last newline, doubled until found


def threaded():
    """Whether this process runs other threads: a fork copies only the calling thread, so a
    lock another one holds stays held in the child."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def workers(size, chunk, cores):
    """Processes that skim SIZE bytes in CHUNK-byte reads on CORES cores: 1 on one core, for a
    small skim, or where this process runs threads (threaded())."""
    if threaded():
        return 1
    return max(1, min(cores, MAX_WORKERS, size // (chunk * MIN_CHUNKS)))


def _cut(fd, pos, n):
    """Where the complete lines of the N bytes at POS end (after the last newline), 0 where
    none of them is a newline, or None where the unfinished line after it would be longer
    than CARRY_MAX (run's loop cuts it) or the file is shorter."""
    k = min(n, PROBE)
    while True:
        tail = os.pread(fd, k, pos + n - k)
        if len(tail) != k:
            return None
        j = tail.rfind(b"\n")
        if j >= 0:
            return n - k + j + 1 if k - j - 1 <= CARRY_MAX else None
        if k >= min(n, CARRY_MAX + 1):
            return 0 if n <= CARRY_MAX else None
        k = min(n, k * 2)


def plan(fd, pos, stop, chunk):
    """The chunks Skim.run reads (CHUNK bytes each) from POS to STOP with no carry:
    ([(offset, bytes read, length of its complete lines)], where the last one's unfinished
    line begins), or None where run's loop would cut them otherwise."""
    chunks = []
    while pos < stop:
        n = min(chunk, stop - pos)
        cut = _cut(fd, pos, n)
        if cut is None or (not cut and pos + n < stop):
            return None  # a line carried to the next chunk: run's loop reads it
        if cut:
            chunks.append((pos, n, cut))
        if pos + n >= stop:
            return chunks, pos + cut
        pos += cut
    return chunks, pos


def search(fd, chunks, found):
    """[FOUND(body, length)] of each of CHUNKS ((hits, newlines): what depends on its bytes
    alone). Each is read whole, as run's loop reads it: reads of one size reuse the memory
    the last one freed, where a size that varies (each chunk's complete lines) has malloc
    map fresh pages for most (a page fault per 4 KiB, ~15% more CPU)."""
    out = []
    for off, n, cut in chunks:
        body = os.pread(fd, n, off)
        if len(body) != n:
            raise OSError("the log is shorter than its skim's plan")
        out.append(found(body, cut))
    return out


def _child(r, w, fd, part, found):
    """In a forked process: search PART, write its marshalled answer to W, exit."""
    code = 1
    try:
        os.close(r)
        view = memoryview(marshal.dumps(search(fd, part, found)))
        while view:
            view = view[os.write(w, view):]
        code = 0
    finally:
        os._exit(code)


def _collect(fd, kid, found):
    """A process's answer for its part; the part searched here where it gave none whole (a
    truncated marshal does not load; its exit status may be reaped by a SIGCHLD ignored)."""
    pid, r, part = kid
    data = b""
    if r is not None:
        with os.fdopen(r, "rb") as pipe:
            data = pipe.read()
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    try:
        found = marshal.loads(data)
        if isinstance(found, list) and len(found) == len(part):
            return found
    except (EOFError, ValueError, TypeError):
        pass
    return search(fd, part, found)


def spread(fd, chunks, n, found):
    """search() of CHUNKS over N processes, this one included, in CHUNKS' order."""
    parts = [chunks[i * len(chunks) // n:(i + 1) * len(chunks) // n] for i in range(n)]
    kids = []
    try:
        for part in parts[1:]:
            r, w = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no process left: searched here
                os.close(r)
                os.close(w)
                kids.append((None, None, part))
                continue
            if pid == 0:
                _child(r, w, fd, part, found)
            os.close(w)
            kids.append((pid, r, part))
        out = search(fd, parts[0], found)
        while kids:
            out.extend(_collect(fd, kids.pop(0), found))
        return out
    finally:
        for pid, r, _ in kids:  # an error here: each process reaped, none left behind
            if r is not None:
                os.close(r)
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def run(sk, f, cursor, stop, chunk, cores):
    """Skim.run (its reads CHUNK bytes) over up to CORES processes; None where one is as
    quick, or the chunks are not plan()'s (run's loop reads them)."""
    n = workers(stop - cursor.offset, chunk, cores)
    if n < 2 or cursor.carry or cursor.skip_long:
        return None
    fd = f.fileno()
    planned = plan(fd, cursor.offset, stop, chunk)
    if planned is None or len(planned[0]) < 2 * MIN_CHUNKS:
        return None
    chunks, rest = planned
    found = spread(fd, chunks, min(n, len(chunks) // MIN_CHUNKS), sk.found)
    feed, start = sk.feed, cursor.offset
    for (off, size, cut), (hits, lines) in zip(chunks, found):
        if hits or sk.follow or sk.before or feed.events.quiet or feed.rules.violating:
            sk.chunk(os.pread(fd, size, off), cut, (hits, lines))
        else:  # what chunk() does with no hit and nothing open: count the lines
            feed.lines += lines
    sk.end()
    cursor.offset, cursor.carry, cursor.skip_long = stop, os.pread(fd, stop - rest, rest), False
    return stop - start
