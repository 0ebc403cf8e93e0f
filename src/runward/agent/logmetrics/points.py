"""The kept points as the JSON-able dicts scan returns: built for the last `max_points` only."""

import math

from .alerts import decode, json_value
from .line import parse_line


def materialize(points, clock):
    """POINTS: (line number, match or raw line or None, template or metrics, time) as the
    feed kept them."""
    out = []
    for n, m, tpl, t in points:
        point = _point(n, m, tpl, t, clock)
        if point is not None:
            out.append(point)
    return out


def _point(n, m, tpl, t, clock):
    if m is None:
        metrics = tpl  # the slow path stored the dict itself
    else:
        if isinstance(m, bytes):  # a lazy line: matched only now
            seg, m = m, tpl.match(m)
            if m is None:  # same skeleton, other shape: the general parser
                return _reparsed(n, seg, clock)
        metrics = tpl.values(m)
        t = clock.of(decode(m.string[:128])) if tpl.ts else clock.written
    for k, v in metrics.items():
        if v != v or v in (math.inf, -math.inf):
            metrics[k] = json_value(v)
    return {"line": n, "t": t, "metrics": metrics}


def _reparsed(n, seg, clock):
    line = decode(seg)
    t, tend = clock.parse(line)
    metrics = parse_line(line[tend:])
    if not metrics:
        return None
    return {"line": n, "t": clock.written if t is None else t,
            "metrics": {k: json_value(v) for k, v in metrics.items()}}
