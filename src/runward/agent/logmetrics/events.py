"""Event lines (CUDA OOM, NCCL, the OOM killer, tracebacks) to alerts, one per burst."""

from .alerts import alert
from .kinds import EVENT_DETAIL
from .tracebacks import Tracebacks


class Events(object):
    """The alerts of event lines. One failure prints the same message once per rank and per
    retry: the first line of a burst is reported and the rest counted (`repeats`), until a
    metric line shows that training went on (whoever sees one clears `quiet`)."""

    def __init__(self, state, alerts, clock):
        self.alerts = alerts  # shared with the rules: the call's alerts in order
        self.clock = clock
        self.quiet = state.get("quiet") or {}  # event kind -> line of its alert (a burst)
        self.tracebacks = Tracebacks(state.get("tbs") or {}, self.event)

    def line(self, n, line, kind):
        """LINE (number N), an event of KIND or None, offered to the tracebacks in progress
        first; True when LINE is used up."""
        if self.tracebacks.open and self.tracebacks.offer(n, line, kind):
            return True
        if kind is None:
            return False
        t = self.clock.of(line)
        if kind == "traceback":
            self.tracebacks.start(n, t, line)
            return True
        self.event(kind, n, t, line)
        return True

    def event(self, kind, n, t, line, **extra):
        first = self.quiet.get(kind)
        if first is not None:
            for a in reversed(self.alerts):
                if a["kind"] == kind and a["line_no"] == first:
                    a["repeats"] = a.get("repeats", 0) + 1
                    break
            return
        self.quiet[kind] = n
        detail = extra.pop("detail", None) or EVENT_DETAIL[kind] + ": " + line.strip()[:200]
        if kind == "oom_killed":
            extra.setdefault("evidence", "log line: " + line.strip()[:120])
        self.alerts.append(alert(kind, t, detail, n, line, **extra))
