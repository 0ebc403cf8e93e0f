"""A fast pass over log bytes that are not parsed in full: every event (CUDA OOM, NCCL, a
traceback, the OOM killer) and every NaN or Inf anywhere in them is still found, so the first
read of a big log reports what a line-by-line read of all of it would.

How: a chunk without an upper-case N, A, I or F (torchrun's rank-prefixed training lines, say;
not a log with INFO on its lines) is searched as it is, by one regex (RAW_RE) and a memchr per
rare byte (RARE); any other chunk by two regexes (SKIM_RES) over a copy of it folded into a
smaller alphabet. Each regex starts with a literal that `re` looks for in C, and stops only
where the text is (nearly) an event or a NaN; a line is then handed to the feed, the full
parser, with the CONTEXT lines before it (so the end of a burst, or of a run of NaN, shows as
it would line by line) and, while a traceback is open, the lines after it. Lines are counted
(newlines()) so every alert keeps its number. The patterns cover every alternative of
patterns.EVENT_RE and every NaN/Inf value token: tests/test_health_window.py and
tests/test_skim_reference.py check that the skim and the full parse report the same alerts.
"""

import os
import re

from .reader import CARRY_MAX
from .tracebacks import TB_MAX_LINES

CHUNK = 4 << 20
CONTEXT = 2  # lines before a hit parsed with it
FORK_MIN = 32 << 20  # a skim this long may be searched by several processes (skimfork.py)
# Words of the lines that show training went on (a loss, a step, a throughput). The last such
# line between two hits is parsed too: it ends a burst of errors, or a run of NaN, as it
# would line by line.
PROGRESS = (b"loss", b"step", b"iter", b"/s")
# How far before a chunk's end its last progress line is looked for, while a burst or a run of
# NaN is open (Skim.before): a progress line further back, with neither progress nor a hit
# after it until the chunk's end, leaves the next chunk's first event a repeat of the burst.
PROGRESS_WINDOW = 256 << 10
# The needles are looked for in a copy of the chunk translated byte for byte (one pass;
# offsets stay those of the raw bytes) into a smaller alphabet, in two regex passes. A pass
# costs a scan of the chunk in C plus a try wherever its first bytes are, so what counts is
# how few passes there are and how rare their first bytes (bench/README.md, "skim"):
#   - "n", "a", "i" folded to lower case, "f" and "c" (either case) to "a", "w" to "n": a NaN
#     ("nan"), an Inf ("ina"), NCCL ("naal"), the watchdog ("natahdog") all hold "na", which
#     the engine looks for as a two-byte prefix;
#   - the letters of the other events that are rare in logs, in the case EVENT_RE has them,
#     folded into one byte, ZED: "Traceback", "Killed", "(SIGKILL)", "exitcode", "memory",
#     CUBLAS, DistBackendError, CUDA_ERROR_OUT_OF_MEMORY each hold one.
# A folded text can match where the raw one does not ("China", "Taiwan"): such a line is
# only parsed in full for nothing. Nothing the full parse calls an event or a NaN is missed.
ZED = b"\x01"
ZED_LETTERS = b"TKxyB"
FOLD = bytearray(range(256))
FOLD[ZED[0]] = ZED[0] + 1  # a raw \x01 is no ZED
for _src, _dst in ((b"nNwW", b"n"), (b"aA", b"a"), (b"iI", b"i"), (b"fF", b"a"), (b"cC", b"a"),
                   (ZED_LETTERS, ZED)):
    for _c in _src:
        FOLD[_c] = _dst[0]
FOLD = bytes(FOLD)


def _lit(text):
    """TEXT folded, as a regex literal."""
    return re.escape(text.translate(FOLD))


def _zed(text, tail=b""):
    """An alternative after ZED for the needle TEXT: the rest from its first ZED letter,
    then the whole needle as a look-behind (the ZED stood for any of ZED_LETTERS)."""
    folded = text.translate(FOLD)
    k = folded.index(ZED)
    behind = b"(?<=" + re.escape(folded) + b")" if k else b""
    return re.escape(folded[k + 1:]) + behind + tail


WORD = rb"a-zA-Z_\x01"  # in a class: a letter, folded or not, or "_"
NOT_ZERO_NANS = rb"(?!iterations: *0(?![0-9.]))"  # the one count of NaN steps passed over
SKIM_RES = (
    # A NaN or Inf value token, or a count of NaN steps ("nan_iters: 2", names.NANCOUNT_RE,
    # in any case), but not Megatron's "number of nan iterations:   0", nor "nanotron", nor
    # "info"/"INFO"/"informative"; NCCL's words (NCCL WARN, ncclInternalError, ...).
    re.compile(b"na(?:n(?:(?![a-zA-Z\x01 ])| " + NOT_ZERO_NANS + b")"
               b"|(?<=ina)(?:" + _lit(b"inity") + b")?(?![" + WORD + b"])"
               b"|a[lL]|" + _lit(b"tchdog ") + b"(?:" + _lit(b"got stuck") + b"|"
               + _lit(b"caught collective") + b"))"),
    re.compile(ZED + b"(?:" + b"|".join((
        _zed(b"Traceback (most recent call last):"),
        _zed(b"Killed"), _zed(b"(SIGKILL)"), _zed(b"exitcode", rb" *: -9"),
        _zed(b"CUBLAS_STATUS_ALLOC_FAILED"), _zed(b"CUDA_ERROR_OUT_OF_MEMORY"),
        _zed(b"cudaErrorMemoryAllocation"), _zed(b"DistBackendError"),
        _zed(b"ut of memory"),  # CUDA, HIP, XLA's "Out of memory": a look-behind, last
    )) + b")"),
)
KILLED_ZH = u"\u5df2\u6740\u6b7b".encode("utf-8")  # only looked for where a \xe5 byte is


# A chunk without an upper-case N, A, I or F (four memchr) can hold no NaN or Inf but in lower
# case, nor an event with one of them (every CUDA OOM text, NCCL in capitals, ncclInternal-
# Error, SIGKILL): the rest is found in the raw bytes, with no folded copy (bench/README.md,
# "first status"). Each needle left with an "n" is one alternative of RAW_RE, matched from its
# "n" on (the one literal `re` scans for) with the text before it as a look-behind; the needles
# without one (RARE) are looked for only in a chunk that holds each of their bytes, the rarest
# first: a memchr each, and where a byte is missing no search at all.
UPPER = (b"N", b"A", b"I", b"F")
RAW_RE = re.compile(
    b"n(?:an(?:(?![a-zA-Z ])| " + NOT_ZERO_NANS + b")"  # as in SKIM_RES, in lower case
    b"|f(?<=inf)(?:inity)?(?![a-zA-Z_])"
    b"|ccl"  # ncclSystemError, ncclUnhandledCudaError, ncclRemoteError
    b"|t call last\\):(?<=Traceback \\(most recent call last\\):)"
    b"|dError(?<=DistBackendError)"
    b"| timeout(?<=Watchdog caught collective operation timeout))")
RARE = tuple((needle, tuple(bytes((c,)) for c in dict.fromkeys(rarest + needle)))
             for needle, rarest in ((b"Killed", b"K"), (b"exitcode", b"x"),
                                    (b"watchdog got stuck", b"hkw")))


def _raw_hits(body, end, out):
    """RAW_RE and RARE over BODY[:END], a chunk without UPPER, into the set OUT."""
    out.update(m.start() for m in RAW_RE.finditer(body, 0, end))
    for needle, letters in RARE:
        if all(body.find(c, 0, end) >= 0 for c in letters):
            i = body.find(needle, 0, end)
            while i >= 0:
                out.add(i)
                i = body.find(needle, i + 1, end)


def hits(body, end=None):
    """Offsets in BODY[:END] where a needle matched, in order."""
    end = len(body) if end is None else end
    out = set()
    if any(body.find(c, 0, end) >= 0 for c in UPPER):
        folded = body.translate(FOLD)
        for rx in SKIM_RES:
            out.update(m.start() for m in rx.finditer(folded, 0, end))
    else:
        _raw_hits(body, end, out)
    if body.find(b"\xe5", 0, end) >= 0:  # memchr: free for a log without CJK text
        i = body.find(KILLED_ZH, 0, end)
        while i >= 0:
            out.add(i)
            i = body.find(KILLED_ZH, i + 1, end)
    return sorted(out)


def newlines(body, end):
    """The newlines in BODY[:END]. Where none follows END, counted by bytes.replace, which
    finds them with memchr (a call per line, each a vector scan), at twice the speed of
    bytes.count's test of every byte (bench/README.md, "first status")."""
    if end == len(body) or body.find(b"\n", end) < 0:
        return len(body) - len(body.replace(b"\n", b""))
    return body.count(b"\n", 0, end)


def cores():
    """The cores this process may run on: its CPU affinity, or its cgroup's CPU quota where
    that is lower (a container's --cpus: more processes than it allows only add CPU)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
    return min(n, quota_cores(_cpu_max()) or n)


def _cpu_max():
    """This process's cgroup v2 cpu.max ("QUOTA PERIOD", or "max PERIOD"), or ""."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((x[3:].strip() for x in f if x.startswith("0::")), None)
        if path is None:
            return ""
        with open("/sys/fs/cgroup" + path.rstrip("/") + "/cpu.max") as f:
            return f.read()
    except (OSError, ValueError):
        return ""


def quota_cores(cpu_max):
    """Whole cores a cgroup's cpu.max text allows (1.5 CPUs: 1), or None where unlimited."""
    parts = cpu_max.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit() or not int(parts[1]):
        return None
    return max(1, int(parts[0]) // int(parts[1]))


class Skim(object):
    """One pass over [offset, stop) of a log, feeding the lines that matter to FEED."""

    def __init__(self, feed):
        self.feed = feed
        self.follow = 0  # lines fed after a traceback's start, while it is open
        # The last chunks' lines not fed, while a burst or a run of NaN is open (which the
        # next progress line ends): ([(number, line)] of the last CONTEXT, (number, line) of
        # the last progress line before them or None). A hit early in the next chunk, or the
        # skim's end, takes its context and progress line from them, as one chunk would.
        self.before = None

    def run(self, f, cursor, stop):
        """Read F from CURSOR's offset to STOP; the unfinished line there is left in
        CURSOR's carry for the full read. Returns the bytes read."""
        n = cores() if stop - cursor.offset >= FORK_MIN else 1
        if n > 1:  # a big first read: its search over the cores
            from .skimfork import run as spread
            done = spread(self, f, cursor, stop, CHUNK, n)
            if done is not None:
                return done
        f.seek(cursor.offset)
        pending, skip = cursor.carry, cursor.skip_long
        pos = start = cursor.offset
        while pos < stop:
            data = f.read(min(CHUNK, stop - pos))
            if not data:
                break
            pos += len(data)
            if skip:  # the rest of a line already cut at CARRY_MAX
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data, skip = data[nl + 1:], False
            buf = pending + data if pending else data  # a carry: only the first chunk
            pending = b""
            cut = buf.rfind(b"\n") + 1
            tail = len(buf) - cut
            long_line = b""
            if tail > CARRY_MAX:  # a line this long is cut, as the full read does: it is
                skip = True  # one line, its first CARRY_MAX bytes parsed
                long_line = buf[cut:cut + CARRY_MAX] + b"\n"
            elif cut and pos < stop:
                # The unfinished line is read again at the head of the next chunk: no copy
                # of a whole chunk (pending + data, buf[:cut]) for a few bytes.
                pos -= tail
                f.seek(pos)
            else:
                pending = buf[cut:]
            if cut:
                self.chunk(buf, cut)
            if long_line:
                self.chunk(long_line)
        self.end()
        cursor.offset, cursor.carry, cursor.skip_long = pos, pending, skip
        return pos - start

    def end(self):
        """After the last chunk: the full read goes on from here, so a burst open ends where
        line by line it does."""
        if self.before:
            lines = self.feed.lines
            for x in self._progress_lines(*self.before):
                self._feed_at(x)
            self.feed.lines = lines
        self.before = None

    @staticmethod
    def found(body, end):
        """What a chunk's search finds in BODY[:END] from its bytes alone: (hits, newlines)."""
        return hits(body, end), newlines(body, end)

    def chunk(self, body, end=None, found=None):
        """BODY[:END]: complete lines, the first numbered feed.lines + 1; all are counted.
        FOUND: (hits, newlines) of BODY[:END], where another process searched it."""
        feed = self.feed
        end = len(body) if end is None else end
        base = feed.lines  # lines before BODY
        done = 0  # BODY's bytes already fed, or passed by
        if self.follow:  # a traceback still open at the end of the last chunk
            done = self._follow(body, 0, base, end)
        if done:
            self.before = None  # fed on from the last chunk: none of it is left unfed
        count = [0, base]  # a line start and the lines before it, moved forward only
        found = found or self.found(body, end)
        for i in found[0]:
            ls = body.rfind(b"\n", 0, i) + 1
            if ls < done:
                continue  # in a line already fed
            cs, k = ls, 0  # context: up to CONTEXT lines before, none fed yet
            for k in range(CONTEXT):
                if cs <= done:
                    break
                j = body.rfind(b"\n", done, cs - 1)
                cs = j + 1 if j >= 0 else done
            else:
                k = CONTEXT
            if self.before:  # the first hit: the unfed lines before it begin in the last chunk
                self._before(body, cs, count, 0 if cs else CONTEXT - k)
            elif cs > done:
                self._progress(body, done, cs, count)
            le = body.find(b"\n", i) + 1
            feed.lines = self._number(body, cs, count)
            feed.feed(body[cs:le])
            done = le
            if feed.events.tracebacks.open:
                self.follow = 1
                done = self._follow(body, le, self._number(body, le, count), end)
        feed.lines = base + found[1]
        if done < end and (feed.events.quiet or feed.rules.violating):
            self.before = self._unfed(body, done, end, feed.lines)
        else:
            self.before = None  # nothing open that a progress line would end

    @staticmethod
    def _number(body, pos, count):
        """Lines of BODY before POS (a line start at or after the last one asked) + base."""
        count[1] += body.count(b"\n", count[0], pos)
        count[0] = pos
        return count[1]

    def _progress(self, body, lo, hi, count):
        """Feed the last line in BODY[lo:hi] that may show progress (see PROGRESS)."""
        p = max(body.rfind(w, lo, hi) for w in PROGRESS)
        if p < 0:
            return False
        j = body.rfind(b"\n", lo, p)
        ps = j + 1 if j >= 0 else lo
        self.feed.lines = self._number(body, ps, count)
        self.feed.feed(body[ps:body.find(b"\n", p) + 1])
        return True

    def _before(self, body, cs, count, want):
        """The chunk's first hit, its context from BODY[CS:] and WANT lines of the last
        chunk's (self.before): the last progress line before those, BODY[:CS]'s or else the
        last chunk's, then those lines, fed."""
        ctx, prog = self.before
        self.before = None
        used = ctx[len(ctx) - want:] if want else []
        if not (cs and self._progress(body, 0, cs, count)):
            for x in self._progress_lines(ctx[:len(ctx) - len(used)], prog):
                self._feed_at(x)
        for x in used:
            self._feed_at(x)

    def _unfed(self, body, lo, end, total):
        """self.before after a chunk whose lines BODY[LO:END] (the last numbered TOTAL) were
        not fed, with the last chunk's where LO is BODY's start."""
        ctx, hi = [], end
        while len(ctx) < CONTEXT and hi > lo:
            j = body.rfind(b"\n", lo, hi - 1)
            s = j + 1 if j >= 0 else lo
            ctx.insert(0, body[s:hi])
            hi = s
        first = total - len(ctx) + 1
        ctx = [(first + k, x) for k, x in enumerate(ctx)]
        # The progress line is looked for in the region's last PROGRESS_WINDOW bytes only: a
        # log without progress words (and a burst open) would cost four scans of every byte
        prog, wlo = None, max(lo, hi - PROGRESS_WINDOW)
        p = max(body.rfind(w, wlo, hi) for w in PROGRESS) if hi > lo else -1
        if p >= 0:
            j = body.rfind(b"\n", lo, p)
            ps = j + 1 if j >= 0 else lo
            pe = body.find(b"\n", p) + 1
            prog = (first - body.count(b"\n", ps, hi), body[ps:pe])
        if lo == 0 and self.before:  # nothing fed in this chunk: the last one's lines come first
            old_ctx, old_prog = self.before
            ctx = old_ctx + ctx
            ctx, older = ctx[-CONTEXT:], ctx[:-CONTEXT]
            if prog is None:
                prog = self._last_progress(older, old_prog)
        return ctx, prog

    @staticmethod
    def _progress_lines(lines, prog):
        """PROG and each of LINES ((number, line), after PROG) that may show progress, in order:
        a word is not the parser's progress ("val_loss=na" has "loss", no value), so a later
        such line does not stand for an earlier one that ends the burst; a few lines at most."""
        return ([prog] if prog is not None else []) + [x for x in lines if any(w in x[1] for w in PROGRESS)]

    @staticmethod
    def _last_progress(lines, prog):
        """The last of LINES ((number, line)) that may show progress, else PROG."""
        for x in reversed(lines):
            if any(w in x[1] for w in PROGRESS):
                return x
        return prog

    def _feed_at(self, numbered):
        n, line = numbered
        self.feed.lines = n - 1
        self.feed.feed(line)

    def _follow(self, body, at, n, end):
        """Feed the lines of BODY[:END] from AT (line N + 1 there) while a traceback is open,
        up to TB_MAX_LINES after its start. Returns where it stopped."""
        feed, tbs = self.feed, self.feed.events.tracebacks
        while tbs.open and self.follow <= TB_MAX_LINES + 1 and at < end:
            le = body.find(b"\n", at) + 1
            feed.lines = n
            feed.feed(body[at:le])
            at, n = le, n + 1
            self.follow += 1
        if not tbs.open or self.follow > TB_MAX_LINES + 1:
            self.follow = 0
        return at
