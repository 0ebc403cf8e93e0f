"""What an alert looks like, and the values and lines it carries made fit for JSON."""

import math

LINE_MAX = 500  # characters of a line kept in an alert

def cut(line):
    return line if len(line) <= LINE_MAX else line[: LINE_MAX - 3] + "..."


def decode(b):
    return b.decode("utf-8", "replace")


def json_value(v):
    """JSON has no NaN or Infinity: say them as strings so any parser reads the answer."""
    if isinstance(v, float) and (v != v or v in (math.inf, -math.inf)):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


def alert(kind, t, detail, line_no=None, line=None, metric=None, value=None, **extra):
    a = {"kind": kind, "line_no": line_no, "line": None if line is None else cut(line),
         "t": t, "metric": metric, "value": json_value(value), "detail": detail}
    a.update(extra)
    return a
