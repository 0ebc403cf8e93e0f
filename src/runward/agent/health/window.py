"""A watch's own rules over its window: floors, ceilings and drops judged by a
logmetrics scan whose state lives in memory for the one call, so nothing it finds is stored
or replayed. The window starts where the log stood when the watch began, or, with a look-back
(since_s), at the last place known to have been read before then (health.json's marks), at
most LOOKBACK_BYTES back; lines stamped before the look-back are passed over."""

import os

from .. import logmetrics
from ..logmetrics.kinds import RULE_KINDS  # what a watch's own rules say

LOOKBACK_BYTES = 32 << 20  # at most this much of the log is read again for a look-back

DEFAULTS = {"drop_fraction": 0.5, "drop_points": 3, "early_points": 10, "max_points": 0,
            "max_bytes": LOOKBACK_BYTES}


class Judge(object):
    def __init__(self, att, saved, rules, start, since_s):
        self.rules = dict(DEFAULTS)
        self.rules.update((k, v) for k, v in (rules or {}).items() if v is not None)
        self.start = start
        self.since = start - float(since_s) if since_s else None
        if self.since is not None:
            self.rules["not_before"] = self.since
        lm = saved.get("lm") or {}
        offset, lines = self._origin(att, saved)
        # The attempt's early median of each throughput is the drop rule's baseline: the
        # window compares with the run's own start, not with its own first values.
        tracked = {k: {"early": [], "med": tr["med"], "low": 0, "hit": False}
                   for k, tr in (lm.get("tracked") or {}).items() if tr.get("med") is not None}
        growth = max(lm.get("growth_t") or start, self.since or start)
        self.state = {"offset": offset, "lines": lines, "ino": lm.get("ino"),
                      "dev": lm.get("dev"), "growth_t": growth, "tracked": tracked,
                      "names": lm.get("names") or []}

    def _origin(self, att, saved):
        """(offset, lines before it): where the window's reading starts."""
        marks = saved.get("marks") or []
        if self.since is None:
            return tuple(marks[-1][1:]) if marks else (int(att.get("log_offset") or 0), 0)
        before = [m for m in marks if m[0] <= self.since]
        offset, lines = tuple(before[-1][1:]) if before else (int(att.get("log_offset") or 0), 0)
        try:
            size = os.path.getsize(att["log"])
        except OSError:
            return offset, lines
        if size - offset <= LOOKBACK_BYTES:
            return offset, lines
        return skip_to(att["log"], offset, lines, size - LOOKBACK_BYTES)

    def poll(self, att, alive, now):
        """The rule alerts of what the attempt's log gained since the last poll (the judge
        interface every health judge has: health/stall.py's, health/baseline.py's, health/idle.py's)."""
        rules = dict(self.rules, alive=alive)
        res = logmetrics.scan(att["log"], self.state, rules, now)
        self.state = res["state"]
        return [a for a in res["alerts"] if a["kind"] in RULE_KINDS]

    def window(self):
        return {"start": self.start, "since": self.since}


def skip_to(path, offset, lines, at):
    """(the first line start at or after AT, lines before it), counting from OFFSET where
    LINES lines were behind."""
    with open(path, "rb") as f:
        f.seek(offset)
        pos = offset
        while True:
            data = f.read(min(1 << 22, at - pos)) if pos < at else b""
            if not data:
                break
            lines += data.count(b"\n")
            pos += len(data)
        tail = f.read(1 << 16)
        nl = tail.find(b"\n")
        if nl < 0:
            return pos, lines
        return pos + nl + 1, lines + 1
