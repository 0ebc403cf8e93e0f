"""Training health read from a log file: metrics per line, alerts, incremental from an offset.

Stdlib only, Python >= 3.8, relative imports only among its own modules: it runs in-tree as
runward.agent.logmetrics and on targets, inside the shipped agent, as
runward_agent.logmetrics. The agent imports it only for the verbs that read a log.

One entry point, `scan(log_path, state, rules, now)`: parse only the bytes written since the
last call (the offset lives in `state`, which the caller keeps and hands back) and answer with
the points (metrics per line), the alerts and the new state.

How a line becomes metrics: line.py names the numbers of a line after the text before each;
templates.py does that once per line skeleton (the line with its digits deleted) and keeps a
regex of it; feed.py runs each line through its template, events.py and tracebacks.py turn
event lines into alerts, rules.py checks the values the rules read, reader.py reads the new
bytes, scan.py puts one call together.
"""

from .line import parse_line
from .names import (inverse_rate, is_inverse, is_loss, is_throughput, norm_name,
                    throughput_metric)
from .alerts import json_value
from .patterns import EVENT_RE, TS_RE
from .scan import scan

__all__ = ["scan", "is_loss", "is_throughput", "is_inverse", "inverse_rate", "throughput_metric",
           "norm_name", "parse_line", "json_value", "EVENT_RE", "TS_RE"]
