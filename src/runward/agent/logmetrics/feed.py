"""The bytes of complete lines through templates, events and rules: the hot loop.

Only the values that rules look at (loss for NaN, the throughput) are converted per line;
a point is kept as the line's match (or the line itself, matched later), and the dicts of
the points returned are built for the last `max_points` only (points.py).
"""

import collections
import re

from .alerts import decode
from .line import parse_line, user_metrics
from .names import R_DROP, R_NANCOUNT, R_PROGRESS, norm_name
from .patterns import DIGITS, EVENT_HINTS, EVENT_RE, HEADER_START_RE_B, NAN_INF_RE_B
from .templates import template

MAX_POINTS = 2000
TEMPLATE_CACHE = 4096


def end_nan_runs(violating, nan_keys):
    """Finite values of these losses: their runs of NaN are over."""
    for nan_key in nan_keys:
        violating.pop(nan_key, None)


class Feed(object):
    """The lines of one call: their count, the last one, the kept points, the templates.
    CONFIG is the call's rules as given (metrics, max_points, tail_lines); RULES the Rules."""

    def __init__(self, config, state, rules, events, clock):
        self.rules = rules
        self.events = events
        self.clock = clock
        self.templates = {}  # line skeleton (digits deleted) -> Template or None
        self.plain = {}  # line without digits -> 0 nothing, 1 event, 2 a NaN/Inf maybe
        self.units = {}  # metric name -> unit, from the skeletons of this call's lines
        self.user = [(norm_name(k), re.compile(v)) for k, v in
                     sorted((config.get("metrics") or {}).items())]
        self.points = collections.deque(maxlen=max(0, int(config.get("max_points",
                                                                     MAX_POINTS))))
        self.npoints = 0
        tail_n = min(int(config.get("tail_lines") or 0), 1000)
        self.tail = collections.deque(maxlen=tail_n) if tail_n > 0 else None
        self.lines = int(state.get("lines", 0))
        self.last_line = state.get("last_line", "")
        self.last_line_t = state.get("last_line_t")

    def feed(self, buf):
        """Parse BUF, raw bytes of complete lines, each ending with a newline."""
        lines = buf.split(b"\n")
        lines.pop()  # after the last newline: empty
        get, append = self.templates.get, self.points.append
        rules, quiet = self.rules, self.events.quiet  # quiet: cleared, never replaced
        violating, tracked, frac = rules.violating, rules.tracked, rules.drop_fraction
        tbs, user, digits, kept = self.events.tracebacks.open, self.user, DIGITS, 0
        for n, seg in enumerate(lines, self.lines + 1):
            if tbs and self._pending(n, seg):
                continue  # a line of a traceback in progress
            if user or b"\r" in seg:
                self._line(n, seg)  # tqdm redraws, or the user's own regexes
                continue
            # What follows is _one() inlined: this loop is the hot path.
            key = seg.translate(None, digits)
            tpl = get(key)
            if tpl is None or not tpl.fast:  # a new skeleton, an event, values rules read
                if tpl is None or tpl.event:
                    tpl = self._known(n, seg, key, tpl)
                    if tpl is None:
                        continue  # used up, or numbers but none named
                if not tpl.lazy:
                    if violating and tpl.losses:
                        end_nan_runs(violating, tpl.losses)
                    m = tpl.match(seg)
                    if m is None:  # same skeleton, other shape (".5" where "0.5" was)
                        self._slow(n, seg)
                        continue
                    append((n, m, tpl, None))
                    kept += 1
                    if quiet and tpl.progress:
                        quiet.clear()  # training went on: the next error is a new burst
                    for g, name, role, conv, lo, hi in tpl.checks:
                        v = conv(m.group(g))
                        # All quiet, the usual case, decided here (else check()): a finite
                        # value within its limits, no alert condition open, no NaN count,
                        # the drop rule's median known and the value above its floor.
                        if (v - v == 0.0 and lo <= v <= hi and not violating
                                and (not role & R_NANCOUNT or v <= 0)):
                            if not role & R_DROP:
                                continue
                            tr = tracked.get(name)
                            if (tr is not None and not tr["low"] and tr["med"] is not None
                                    and v >= frac * tr["med"]):
                                continue
                        rules.check(n, seg, tpl.ts, name, v, role)
                    if rules.dirty:  # a median the drop rule ran for is known (rules.py)
                        self._refresh_roles()
                    continue
            # Every value finite, none to check (Template.fast): the line is matched only if
            # it is among the points kept, which most of a long scan is not.
            append((n, seg, tpl, None))
            kept += 1
            if violating and tpl.losses:
                end_nan_runs(violating, tpl.losses)  # a finite loss ends a run of NaN
            if quiet and tpl.progress:
                quiet.clear()
        self._count(lines, kept)

    def _known(self, n, seg, key, tpl):
        """The feed loop's rarer start: a skeleton not seen yet, or one whose lines were
        events. Returns the template to go on with, or None when SEG is used up or names no
        number."""
        if tpl is None:
            if key in self.templates:
                return None  # numbers, but none named
            if len(key) == len(seg):  # no digit: an event, "loss: nan", or nothing
                self._plain(n, seg)
                return None
            tpl = self._template(seg, key)
            if tpl is None:
                return None
        if tpl.event:  # this skeleton was an event line: is this one?
            if self._event_line(n, seg) or tpl.match is None:
                return None
        return tpl

    def _count(self, lines, kept):
        """After feed(): the line and point counts, the last line, the tail."""
        self.lines += len(lines)
        self.npoints += kept
        last = lines[-1].rstrip(b"\r").rsplit(b"\r", 1)[-1] if lines else b""
        if last:  # the last line with text (a CRLF split by a read leaves an empty one)
            self.last_line = decode(last)
            self.last_line_t = None  # worked out in finish(), for the last line only
        if lines:
            if self.tail is not None:
                self.tail.extend(lines[-self.tail.maxlen:])

    def feed_redraws(self, part):
        """PART: finished carriage-return segments of the line still being written."""
        if part.strip(b"\r"):
            self._line(self.lines + 1, part)
            self.last_line = decode(part.rstrip(b"\r").rsplit(b"\r", 1)[-1])
            self.last_line_t = None

    def _plain(self, n, seg):
        """A line without a digit. Most repeat ("Saving checkpoint..."), so what each is, an
        event, a NaN or nothing, is remembered (bounded)."""
        what = self.plain.get(seg)
        if what is None:
            if len(self.plain) >= TEMPLATE_CACHE:
                self.plain.clear()
            what = self.plain[seg] = (
                1 if EVENT_RE.search(seg) else 2 if NAN_INF_RE_B.search(seg) else 0)
        if what == 1:
            self._event_line(n, seg)
        elif what == 2:
            self._slow(n, seg)

    def _event_line(self, n, seg):
        """If SEG is an event line, handle it (metrics before it first) and say True."""
        m = EVENT_RE.search(seg)
        if m is None:
            return False
        start = m.start()
        if start > 0:
            # Training output and an error on one physical line (a progress bar without its
            # newline, then the watchdog's message): its metrics come first.
            head = seg[:start]
            h = HEADER_START_RE_B.search(head)
            self._line(n, head[:h.start()] if h else head)
        self.events.line(n, decode(seg).rstrip("\r"), m.lastgroup)
        return True

    def _pending(self, n, seg):
        """A line while tracebacks are in progress: True when it is used up."""
        m = EVENT_RE.search(seg)
        if m is not None:
            return self._event_line(n, seg)
        return self.events.line(n, decode(seg).rstrip("\r"), None)

    def _template(self, seg, key):
        if len(self.templates) >= TEMPLATE_CACHE:
            self.templates.clear()
        tpl = template(seg, decode(seg))
        self.templates[key] = tpl
        if tpl is not None:
            if tpl.units:
                self.units.update(tpl.units)
            for name in tpl.names:
                self.rules.role(name)
            self.rules.arm(tpl)
            self._refresh_roles()
        return tpl

    def _refresh_roles(self):
        """The main throughput metric changed (a new name): every template's checks again."""
        while self.rules.dirty:
            self.rules.dirty = False
            for tpl in self.templates.values():
                if tpl is not None:
                    self.rules.arm(tpl)

    def _line(self, n, raw):
        """A line by the general path: an event, or every carriage-return segment (tqdm
        redraws in place) for metrics."""
        if any([h in raw for h in EVENT_HINTS]) and self._event_line(n, raw):
            return
        for seg in raw.split(b"\r"):
            if seg:
                if self.user:
                    self._slow(n, seg)
                else:
                    self._one(n, seg)

    def _one(self, n, seg):
        """Metrics of one line segment by its template (feed() has this inlined)."""
        key = seg.translate(None, DIGITS)
        tpl = self.templates.get(key)
        if tpl is None:
            if key in self.templates:
                return
            if len(key) == len(seg):
                if NAN_INF_RE_B.search(seg):
                    self._slow(n, seg)
                return
            tpl = self._template(seg, key)
            if tpl is None:
                return
        if tpl.match is None:
            return
        if self.rules.violating and tpl.losses:
            end_nan_runs(self.rules.violating, tpl.losses)
        m = tpl.match(seg)
        if m is None:
            self._slow(n, seg)
            return
        self.points.append((n, m, tpl, None))
        self.npoints += 1
        if self.events.quiet and tpl.progress:
            self.events.quiet.clear()
        for g, name, role, conv, lo, hi in tpl.checks:
            self.rules.check(n, seg, tpl.ts, name, conv(m.group(g)), role)
        self._refresh_roles()

    def _slow(self, n, seg):
        """Metrics of one segment without a template (and with the user's regexes)."""
        line = decode(seg)
        t, tend = self.clock.parse(line)
        metrics = parse_line(line[tend:]) if tend else parse_line(line)
        if self.user:
            um = user_metrics(line, self.user)
            if um:
                metrics.update(um)
        if not metrics:
            return
        t = self.clock.written if t is None else t
        self.points.append((n, None, metrics, t))
        self.npoints += 1
        rules = self.rules
        for name, v in metrics.items():
            role = rules.roles.get(name)
            if role is None:
                role = rules.role(name)
            if role & R_PROGRESS and self.events.quiet:
                self.events.quiet.clear()
            if role & ~R_PROGRESS:
                rules.check(n, line, t, name, v, role)
        self._refresh_roles()
