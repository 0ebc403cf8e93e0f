"""Python tracebacks in a log, followed line by line until their exception line comes.

A traceback is its header, indented frames, then one unindented exception line. The text
before "Traceback" (`[rank1]: `, a logger header; digits aside) marks its lines when ranks
interleave, so each prefix has its own traceback in progress. "During handling of the above
exception..." chains the next traceback to it; the alert carries the last exception line, the
one that ended the program. The tracebacks in progress live in the scan's state, so one may
span calls.
"""

import re

from .alerts import cut
from .kinds import EVENT_DETAIL, TRACEBACK_KINDS

TB_HEAD = "Traceback (most recent call last):"
TB_CHAIN = ("During handling of the above exception", "The above exception was the direct")
TB_MAX_LINES = 400  # a traceback whose exception line has not come after this many lines
MAX_TRACEBACKS = 16  # tracebacks in progress at once (one per rank prefix)
# A traceback's prefix, as a key: digits of times and counters vary line to line and are
# zeroed; those naming a rank or a process ("[rank3]:", "pid=4009") tell tracebacks apart.
PREFIX_DIGITS_RE = re.compile(r"((?:[Rr]ank|pid)[ =:]?)?\d+")


def prefix_key(prefix):
    return PREFIX_DIGITS_RE.sub(lambda m: m.group(0) if m.group(1) else "0", prefix)


def prefix_pattern(prefix):
    """A regex matching PREFIX with its zeroed digit runs of any length."""
    out, pos = [], 0
    for m in PREFIX_DIGITS_RE.finditer(prefix):
        out.append(re.escape(prefix[pos:m.start()]))
        out.append(re.escape(m.group(0)) if m.group(1) else r"\d+")
        pos = m.end()
    out.append(re.escape(prefix[pos:]))
    return "".join(out)


class Tracebacks(object):
    """The tracebacks in progress, by prefix; each reported through EMIT once it ends:
    emit(kind, line_no, t, line, detail=..., traceback_line_no=...)."""

    def __init__(self, open_, emit):
        self.open = open_  # prefix (digits as 0) -> traceback in progress (JSON-able)
        self.emit = emit
        self.prefix_rx = {}  # a traceback's prefix pattern -> compiled

    def start(self, n, t, line):
        """LINE (number N, time T) holds a traceback's header."""
        i = line.find(TB_HEAD)
        prefix = prefix_key(line[:i])
        old = self.open.pop(prefix, None)
        if old is not None:  # a new traceback before this prefix's last one ended
            self._report(old)
        if len(self.open) >= MAX_TRACEBACKS:
            self._report(self.open.pop(next(iter(self.open))))
        self.open[prefix] = {"line_no": n, "t": t, "prefix": prefix, "seen": 0,
                             "rx": prefix_pattern(line[:i]),
                             "final": None, "final_no": None, "kind": None, "chain": False}

    def offer(self, n, line, kind):
        """Offer LINE (an event of KIND, or None) to the tracebacks in progress; True when
        one of them takes it."""
        taken = False
        for prefix, tb in list(self.open.items()):
            rx = self.prefix_rx.get(tb["rx"])
            if rx is None:
                rx = self.prefix_rx[tb["rx"]] = re.compile(tb["rx"])
            m = None if taken else rx.match(line)
            if m is None:
                self._stranger(tb)
                continue
            body = line[m.end():]
            if not body.strip():
                tb["seen"] += 1
                taken = True  # blank: inside a traceback, or before "During handling..."
            elif body.startswith(TB_CHAIN):
                tb["chain"] = taken = True
            elif body.startswith(TB_HEAD):
                if tb["chain"] or tb["final"] is None:
                    tb["chain"], tb["final"] = False, None
                    taken = True  # the next link of a chain
                else:
                    self._report(self.open.pop(prefix))  # the caller starts the new one
            elif tb["final"] is not None:
                self._report(self.open.pop(prefix))
            elif body[:1] in " \t":
                tb["seen"] += 1
                taken = True  # a frame, its source line, carets
            else:
                # The exception line: "ValueError: ...", "torch.OutOfMemoryError: CUDA ...".
                tb["final"], tb["final_no"] = cut(body.strip()), n
                if kind in TRACEBACK_KINDS and tb["kind"] is None:
                    tb["kind"] = kind
                taken = True
        return taken

    def settle(self, alive):
        """At the end of a call: a traceback whose exception line is known is reported now,
        even if a chained one might follow (that one then counts as a repeat); one still
        missing its exception line waits for the next call, unless the job is gone and
        nothing more will come."""
        for prefix, tb in list(self.open.items()):
            if tb["final"] is not None or not alive:
                self._report(self.open.pop(prefix))

    def _stranger(self, tb):
        """A line that is not TB's: the exception line is settled once one passes, and a
        traceback that never gets one is reported after TB_MAX_LINES lines."""
        tb["seen"] += 1
        if tb["final"] is not None or tb["seen"] > TB_MAX_LINES:
            self._report(self.open.pop(tb["prefix"]))

    def _report(self, tb):
        final = tb["final"]
        if final is None:
            detail = "Python traceback (its exception line has not appeared)"
            self.emit("traceback", tb["line_no"], tb["t"], TB_HEAD, detail=detail,
                      traceback_line_no=tb["line_no"])
            return
        kind = tb["kind"] or "traceback"
        what = EVENT_DETAIL[kind]
        detail = "%s: %s (traceback from line %d)" % (what, final, tb["line_no"])
        self.emit(kind, tb["final_no"], tb["t"], final, detail=detail,
                  traceback_line_no=tb["line_no"])
