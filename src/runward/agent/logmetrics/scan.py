"""One call of the parser: the state unpacked into its collaborators, the new bytes read,
the rules that run after them, the answer."""

import os

from .alerts import cut, decode
from .clock import Clock
from .events import Events
from .feed import Feed
from .job import ExitWatch, stall_alert
from .points import materialize
from .reader import MAX_BYTES, Cursor, chain, changed, read_new, signature
from .rules import Rules
from .skim import Skim

VERSION = 1


class Scan(object):
    """The parts of one call that live in its state: lines and points (Feed), event alerts
    and tracebacks (Events), rules on values (Rules), the job's end (ExitWatch)."""

    def __init__(self, state, rules, now):
        self.now = now
        self.config = rules
        self.clock = Clock(now)
        self.alerts = []
        self.events = Events(state, self.alerts, self.clock)
        self.rules = Rules(rules, state, self.alerts, self.clock)
        self.feed = Feed(rules, state, self.rules, self.events, self.clock)
        self.growth_t = state.get("growth_t")
        self.exits = ExitWatch(state)
        self.skimmed = 0  # bytes read by the skim (rules["skim"]), not parsed in full

    def restart(self):
        """The log was replaced: count its lines from the start; nothing is in progress."""
        self.feed.lines, self.feed.last_line = 0, ""
        self.events.tracebacks.open.clear()
        self.events.quiet.clear()

    def read(self, f, cursor, budget):
        """Read the open log F on from CURSOR, BUDGET bytes at most. Returns (reset reason,
        bytes read, more)."""
        st = os.fstat(f.fileno())
        self.clock.written = min(self.now, st.st_mtime)  # its lines were written by then
        reset = changed(f, st, cursor)
        if reset:
            cursor.restart()
            self.restart()
        cursor.ident = (st.st_ino, st.st_dev)
        if self.config.get("skim") and st.st_size - cursor.offset > budget:
            # More than a call parses in full: the older part is skimmed for events and
            # NaNs (skim.py), the newest BUDGET bytes parsed line by line.
            self.skimmed += Skim(self.feed).run(f, cursor, st.st_size - budget)
        f.seek(cursor.offset)
        read = read_new(f, cursor, budget, self.feed)
        cursor.offset += read
        end = os.fstat(f.fileno()).st_size
        if read or self.skimmed:
            self.growth_t = min(self.now, st.st_mtime)
        elif self.growth_t is None and end:
            self.growth_t = min(self.now, st.st_mtime)
        if cursor.offset:
            cursor.sig = signature(f, cursor.offset)
        return reset, read, cursor.offset < end

    def finish(self, alive, exit_info):
        self.events.tracebacks.settle(alive)
        feed = self.feed
        if feed.last_line and feed.last_line_t is None:
            feed.last_line_t = self.clock.of(feed.last_line)
        stall = self.config.get("stall_seconds")
        if alive and stall:
            a = stall_alert(self.now, self.growth_t, stall)
            if a is not None:
                self.alerts.append(a)
        if exit_info:
            self.alerts.extend(self.exits.alerts(exit_info, self.now))

    def state(self, cursor):
        feed, rules = self.feed, self.rules
        state = {"lines": feed.lines, "last_line": feed.last_line,
                 "last_line_t": feed.last_line_t, "growth_t": self.growth_t,
                 "tbs": self.events.tracebacks.open, "tracked": rules.tracked,
                 "violating": rules.violating, "quiet": self.events.quiet,
                 "names": sorted(rules.names)[:256], "exit_seen": self.exits.exit_seen,
                 "sigkill_seen": self.exits.sigkill_seen, "v": VERSION}
        state.update(cursor.state())
        return state


def scan(log_path, state, rules, now):
    """Parse what LOG_PATH gained since STATE (see the package docstring).

    Returns {"state", "points", "points_dropped", "alerts", "last_line", "lines", "bytes",
    "bytes_read", "bytes_skimmed", "more", "reset", "exists", "units"}, and "tail" when
    rules["tail_lines"]; "units": {metric: unit} for the metrics of this call's lines that print
    one. With rules["skim"], what lies more than max_bytes before the end is skimmed (skim.py)
    rather than left for the next call; with rules["not_before"] (epoch seconds) the value
    rules pass over lines whose timestamps are older.
    """
    state = dict(state or {})
    rules = rules or {}
    sc = Scan(state, rules, now)
    cursor = Cursor(state)
    reset, read, more = None, 0, False
    budget = int(rules.get("max_bytes", MAX_BYTES))
    files = chain(log_path, cursor)  # the rest of a file rotated away first: no line skipped
    if files is None:  # rotations moved the names at each try: read on from the cursor next call
        files, exists = [], True
    else:
        exists = bool(files) and os.fspath(files[-1].name) == os.fspath(log_path)
    try:
        for i, f in enumerate(files):
            if i:  # the next newer file, from its start, as a rotation always read it
                cursor.restart()
                cursor.ident, cursor.sig = (None, None), ""
                sc.restart()
                reset = "rotated"
            r_reset, r_read, more = sc.read(f, cursor, budget - read)
            reset, read = r_reset or reset, read + r_read
            if more:
                break  # the budget ran out in this file: the cursor stays in it
    finally:
        for f in files:
            f.close()
    sc.finish(bool(rules.get("alive")), rules.get("exit"))
    new_state = sc.state(cursor)
    feed = sc.feed
    points = materialize(feed.points, sc.clock)
    out = {"state": new_state, "points": points, "points_dropped": feed.npoints - len(points),
           "alerts": sc.alerts, "last_line": cut(feed.last_line), "lines": feed.lines,
           "bytes": cursor.offset, "bytes_read": read, "bytes_skimmed": sc.skimmed, "more": more, "reset": reset,
           "exists": exists, "units": feed.units}
    if feed.tail is not None:
        out["tail"] = [cut(decode(x.rstrip(b"\r"))) for x in feed.tail]
    return out
