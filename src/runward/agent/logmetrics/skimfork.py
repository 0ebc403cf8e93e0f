"""The skim's search spread over the machine's cores: a big log's first read on a host with
more than one core (a GPU host has many) searches its chunks in forked processes, and this
one feeds the lines that matter in the log's order, as one process would.

Exact by construction: the chunks are those Skim.run cuts (plan() finds each one's last
newline as run's loop does), and a process computes for each chunk only what depends on its
bytes alone, skim.hits and skim.newlines, taking chunks from a queue while it is free; every
step that carries state from one chunk to the next (line numbers, a traceback followed on,
a burst's context and progress line, the feed) runs here, in order, on the same offsets
(tests/test_skim_fork.py: the scan's answer field for field against one process). A log
whose chunks run's loop cuts otherwise (a line longer than CARRY_MAX, a carry from the last
call, a short read) is skimmed by that loop. Stdlib only.
"""

import marshal
import os
import sys

from .reader import CARRY_MAX

MAX_WORKERS = 8  # a training host's cores are the job's: a first read takes a few at most
MIN_CHUNKS = 4  # chunks a process searches at least: a fork costs ~1-2 ms
PROBE = 4096  # bytes read back from a chunk's end to find its last newline, doubled until found
TASK = 4  # bytes of a task's number, as the queue's pipe holds it
MAX_TASKS = 4096 // TASK  # the queue written in one write that any pipe holds (a page)


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


def search(fd, chunks, found, held=None):
    """[FOUND(body, length)] of each of CHUNKS ((hits, newlines): what depends on its bytes
    alone). Each is read whole, as run's loop reads it: reads of one size reuse the memory
    the last one freed, where a size that varies (each chunk's complete lines) has malloc
    map fresh pages for most (a page fault per 4 KiB, ~15% more CPU). Each is read while the
    one before is still held (HELD, a list: the last read is left there for the next call):
    a chunk freed first leaves the heap's free top over malloc's trim threshold, given back
    to the kernel, and every read faults fresh pages in again (~180K faults for the bench's
    log against ~5K: 2x the CPU)."""
    held = [None] if held is None else held
    out = []
    for off, n, cut in chunks:
        held[0] = body = os.pread(fd, n, off)
        if len(body) != n:
            raise OSError("the log is shorter than its skim's plan")
        out.append(found(body, cut))
    return out


def tasks(chunks):
    """CHUNKS as at most MAX_TASKS runs of consecutive chunks, [(first, end)]: the queue's
    tasks, taken one at a time by whichever process is free."""
    n = min(len(chunks), MAX_TASKS)
    return [(i * len(chunks) // n, (i + 1) * len(chunks) // n) for i in range(n)]


def queue(n):
    """A pipe holding the task numbers 0..N-1, its write end closed: its read end, where a
    read of TASK bytes takes one task (the records are written whole, in one write of
    at most a page, which any pipe holds: pipe(7)), and an empty queue reads as its end."""
    r, w = os.pipe()
    try:
        os.write(w, b"".join(k.to_bytes(TASK, "little") for k in range(n)))
    finally:
        os.close(w)
    return r


def work(fd, q, chunks, runs, found):
    """Search the tasks taken from queue Q until it is empty: {task: [FOUND of its chunks]}."""
    out, held = {}, [None]
    while True:
        rec = os.read(q, TASK)
        if len(rec) != TASK:
            return out
        k = int.from_bytes(rec, "little")
        lo, hi = runs[k]
        out[k] = search(fd, chunks[lo:hi], found, held)


def forked(fn):
    """FN() run in a forked process, its answer marshalled back to this one: (pid, read
    end) for answer(), or None where no process could be forked."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:
        code = 1
        try:
            os.close(r)
            view = memoryview(marshal.dumps(fn()))
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def answer(kid):
    """What forked()'s process answered, or None where it gave none whole (a truncated
    marshal does not load; its exit status may be reaped by a SIGCHLD ignored)."""
    pid, r = kid
    with os.fdopen(r, "rb") as pipe:
        data = pipe.read()
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    try:
        return marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None


def _collect(kid):
    """A process's answers ({task: [found]}), or {} where it gave none whole."""
    got = answer(kid)
    return got if isinstance(got, dict) else {}


def answers(fd, chunks, runs, done, found):
    """Every chunk's answer in CHUNKS' order from DONE ({task: [found]}); a task no process
    answered whole (one that died having taken it) is searched here."""
    out = []
    for k, (lo, hi) in enumerate(runs):
        got = done.get(k)
        if not isinstance(got, list) or len(got) != hi - lo:
            got = search(fd, chunks[lo:hi], found)
        out.extend(got)
    return out


def spread(fd, chunks, n, found):
    """search() of CHUNKS over N processes, this one included, in CHUNKS' order. The
    chunks are a queue each process takes from while it is free, not a fixed share: on a
    busy host a process the scheduler leaves waiting takes fewer, and the others do the
    rest (a fixed half left the caller idle for the slower one's, ~0.15 s of a first status
    here at load 1.5 on 2 cores)."""
    runs = tasks(chunks)
    q = queue(len(runs))
    kids = []
    try:
        for _ in range(n - 1):
            kid = forked(lambda: work(fd, q, chunks, runs, found))
            if kid is None:  # no process left: the others take its tasks
                break
            kids.append(kid)
        done = work(fd, q, chunks, runs, found)
        while kids:
            done.update(_collect(kids.pop(0)))
    finally:
        os.close(q)
        for pid, r in kids:  # an error here: each process reaped, none left behind
            os.close(r)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return answers(fd, chunks, runs, done, found)


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
