"""What `logs --attempt N`, `--since` and `--grep` select from a run's log, read here so only
the selected lines travel.

An attempt's section: from its header line (`=== runward: NAME attempt N started ...`, just
before its record's log_offset) to the header of the next attempt that writes to the same
file, or the end. --since: a line's time is the timestamp the log parser reads at its start
(logmetrics.clock: ISO dates, `[2024-05-01 12:00:00,123]`, `INFO 05-01 12:00:00`...); a line
without one takes the time of the last line above it in the same attempt that had one, or
else its attempt's start time. --grep: a Python regex, searched in each line."""

import collections
import os
import time

from .wire import AgentFailure, bad_input

MAX_LINES = 100000  # the most lines one reply carries when no -n is given
BLOCK = 1 << 20


def pick(store, att, req):
    """The selection for logs (att: the latest attempt), with "emit": the filter that -f's
    lines go through."""
    if req.get("follow") and req.get("attempt") not in (None, att.get("attempt")):
        raise bad_input("attempt %s of %s is over: -f follows the latest (%s)" % (
            req["attempt"], store.name, att.get("attempt")), "drop -f, or --attempt")
    match = matcher(req)
    return dict(select(store, att, req, match), emit=lambda e: grep_emit(e, match))


def matcher(req):
    """The --grep regex's search, or None."""
    if not req.get("grep"):
        return None
    import re
    try:
        return re.compile(req["grep"]).search
    except re.error as e:
        raise bad_input("invalid --grep regex %r: %s" % (req["grep"], e), "use a Python regular expression")


def grep_emit(emit, match):
    """emit, passing on only the {"line"} events whose line matches (logs -f --grep)."""
    if match is None:
        return emit
    return lambda ev: emit(ev) if "line" not in ev or match(ev["line"]) else None


def select(store, latest, req, match):
    """{"log", "lines", "attempt", "range", "truncated", "since_by"} for the request."""
    n = req.get("lines")
    keep = (20 if req.get("follow") else MAX_LINES) if n is None else max(0, int(n))
    if req.get("attempt") is not None:
        att = attempt_of(store, req["attempt"])
        lo, hi = section(store, att)
    else:
        att = latest
        lo, hi = 0, _size(att.get("log"))
    out = {"log": att.get("log"), "attempt": att.get("attempt") if req.get("attempt") is not None else None,
           "range": [lo, hi]}
    if req.get("since_s") is not None:
        cutoff = time.time() - float(req["since_s"])
        parts = [(lo, hi, att)] if req.get("attempt") is not None else _live_sections(store, att, cutoff)
        lines, out["truncated"], out["since_by"] = _since(att.get("log"), parts, cutoff, match, keep)
        out["range"] = [parts[0][0] if parts else hi, hi]
    else:
        lines, out["truncated"] = _tail(att.get("log"), lo, hi, match, keep)
    out["lines"] = lines
    return out


def attempt_of(store, n):
    try:
        n = int(n)
    except (TypeError, ValueError):
        raise bad_input("invalid --attempt %r" % (n,), "give an attempt number, e.g. --attempt 2")
    att = store.attempt(n) if n > 0 else None
    if att is None:
        have = store.attempts()
        raise AgentFailure("RunNotFound", "run %s has no attempt %d (attempts: %s)" % (
            store.name, n, "%d-%d" % (have[0], have[-1]) if have else "none"), "`runward status %s`" % store.name)
    return att


def _size(path):
    try:
        return os.stat(path).st_size
    except (OSError, TypeError):
        return 0


def header_start(store, att):
    """Where att's header line begins in its log (its output begins at log_offset)."""
    off = att.get("log_offset")
    if not isinstance(off, int):
        return 0
    want = ("=== runward: %s attempt %d started " % (store.name, att["attempt"])).encode()
    back = min(off, 1 << 16)  # the header holds the command line: a long one, 64 KiB at most
    try:
        with open(att["log"], "rb") as f:
            f.seek(off - back)
            i = f.read(back).rfind(want)
    except OSError:
        return off
    return off - back + i if i >= 0 else off


def section(store, att):
    """(start, end) of att's section of its log."""
    lo = header_start(store, att)
    for m in store.attempts():
        if m > att["attempt"]:
            nxt = store.attempt(m) or {}
            if nxt.get("log") == att.get("log"):
                return lo, max(lo, header_start(store, nxt))
    return lo, _size(att.get("log"))


def _live_sections(store, att, cutoff):
    """[(start, end, attempt record)] of the attempts in att's log that had not ended by
    cutoff: what came before cannot have been written since (and is not read at all)."""
    out = []
    for m in store.attempts():
        a = store.attempt(m) or {}
        if a.get("log") == att.get("log") and not ((a.get("exit") or {}).get("at", cutoff) < cutoff):
            out.append((header_start(store, a), a))
    ends = [lo for lo, _ in out[1:]] + [_size(att.get("log"))]
    return [(lo, max(lo, hi), a) for (lo, a), hi in zip(out, ends)]


def _tail(path, lo, hi, match, keep):
    """The last `keep` lines of [lo, hi) that match, read backwards: a grep for the last 20
    hits reads no more of a large log than it must. (lines, truncated)."""
    got = []
    for line in _backwards(path, lo, hi):
        if match is None or match(line):
            if len(got) == keep:
                got.reverse()
                return got, True
            got.append(line)
    got.reverse()
    return got, False


def _backwards(path, lo, hi):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, TypeError):
        return
    try:
        pos, rest = hi, b""
        while pos > lo:
            step = min(BLOCK, pos - lo)
            pos -= step
            parts = (os.pread(fd, step, pos) + rest).split(b"\n")
            rest = parts[0]
            if parts[-1] == b"" and pos + step == hi and len(parts) > 1:
                parts.pop()  # the file's last newline ends a line; it begins none
            for part in reversed(parts[1:]):
                yield part.decode("utf-8", "replace")
        if rest or hi > lo:
            yield rest.decode("utf-8", "replace")
    finally:
        os.close(fd)


def forwards(path, lo, hi):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, TypeError):
        return
    try:
        pos, pending = lo, b""
        while pos < hi:
            data = os.pread(fd, min(BLOCK, hi - pos), pos)
            if not data:
                break
            pos += len(data)
            *lines, pending = (pending + data).split(b"\n")
            for ln in lines:
                yield ln.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        os.close(fd)


def _since(path, parts, cutoff, match, keep):
    """Lines of the sections `parts` whose time is cutoff or later. (lines, truncated,
    since_by): "timestamps", "attempt_start" (no selected line had one) or "both"."""
    from ..logmetrics.clock import Clock
    clock = Clock(time.time())
    got = collections.deque(maxlen=keep or None)
    count, by = 0, set()
    for lo, hi, att in parts:
        t, how = att.get("started_at") or att.get("created_at"), "attempt_start"
        for line in forwards(path, lo, hi):
            stamp = clock.parse(line)[0]
            if stamp is not None:
                t, how = stamp, "timestamps"
            if t is not None and t >= cutoff and (match is None or match(line)):
                by.add(how)
                if keep:
                    got.append(line)
                count += 1
    how = "both" if len(by) == 2 else by.pop() if by else "attempt_start"
    return list(got), count > len(got), how
