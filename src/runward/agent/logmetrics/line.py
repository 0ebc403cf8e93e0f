"""One line to metrics, without templates: how the numbers of a line get their names.

Every number in a line is a slot, named after the text just before it: `loss=2.31`,
`loss: 2.31`, `loss 2.31`, `'loss': 2.31`, `"loss": "2.31"`, `lm loss: 2.3E+00 |` (analyse).
parse_line is the reference; the templates (templates.py) do the same per line skeleton.
"""

import math

from .names import norm_name
from .patterns import (NAME_TAIL_RE, NUM_RE, PREFIX_RE, RATE_UNIT_RE, SOURCE_RE, SUFFIX,
                       SUFFIX_RE, UNIT_GLUED_RE)


def name_from_gap(gap, first):
    """The metric name that the text GAP (between two numbers) gives the number after it."""
    if not first:
        # A unit glued to the previous number ("123.45ms, mfu ", "5.42it/s, loss=") is not
        # the start of the next name.
        gap = UNIT_GLUED_RE.sub("", gap, count=1)
    m = NAME_TAIL_RE.search(gap)
    if not m:
        return None
    words = m.group(1).split()
    if not words:
        return None
    if len(words) > 5:  # prose: "saving checkpoint for the run at step 500" -> step
        words = words[-1:]
    name = " ".join(words)
    if SOURCE_RE.search(name):
        return None  # "ib_plugin.c:1615", "metrics.py:481": a source location, not data
    name = norm_name(name)
    if not name or len(name) > 64 or name[0].isdigit():
        return None
    return name


def name_from_unit(after):
    """(name, inverse) for a number no text names, from what follows it (a unit), or
    (None, False)."""
    if after.startswith("%|"):
        return "progress", False  # tqdm: "45%|####  | 450/1000"
    m = RATE_UNIT_RE.match(after)
    if not m:
        return None, False
    unit = m.group(1)
    if unit == "s/it":  # tqdm flips to seconds per iteration when slow
        return "it_s", True
    if unit.startswith("/"):
        return "rate", False  # timm: "Time: 0.512s,  500.12/s"
    return norm_name(unit), False


def analyse(parts, prefix_end):
    """Name the numbers of one line. PARTS is NUM_RE.split(line): text, number, text, ...

    Returns (index of the number, name, multiplier, inverse) for each named number.
    """
    if any("NCCL INFO" in p for p in parts[0::2]):
        return ()  # NCCL_DEBUG=INFO chatter: channels, ranks, ports; no training metric
    slots = []
    seen = set()
    pos = 0
    for i in range(len(parts) // 2):
        gap = parts[2 * i]
        pos += len(gap)
        start = pos
        pos += len(parts[2 * i + 1])
        if start < prefix_end:
            continue  # timestamps, [rank0], (pid=12), [file.py:69]: not data
        after = parts[2 * i + 2]
        name = name_from_gap(gap, i == 0 or start <= prefix_end)
        inv = False
        if name is None:
            name, inv = name_from_unit(after)
        if not name or name in seen:
            continue
        seen.add(name)
        m = SUFFIX_RE.match(after)
        slots.append((i, name, SUFFIX[m.group(1)] if m else 1.0, inv))
    return tuple(slots)


def number(token, mult=1.0, inv=False):
    """The float a number token (str or bytes) stands for: separators, K/M/G, s/it."""
    if isinstance(token, bytes):
        v = float(token.replace(b",", b"") if b"," in token else token)
    else:
        v = float(token.replace(",", "") if "," in token else token)
    if mult != 1.0:
        v *= mult
    if inv:
        v = 1.0 / v if v else math.inf
    return v


def prefix_end(line):
    m = PREFIX_RE.match(line)
    return m.end() if m else 0


def parse_line(line):
    """Metrics of one line as {name: float}, without configuration ({} when none).

    The reference for what scan's templates extract; scan's timestamp handling aside
    (a leading timestamp is a prefix here, so it gives no metric either way).
    """
    parts = NUM_RE.split(line)
    if len(parts) == 1:
        return {}
    return {name: number(parts[2 * i + 1], mult, inv)
            for i, name, mult, inv in analyse(parts, prefix_end(line))}


def value_of(raw):
    """A user regex's capture as a number (K/M/G suffix, separators), or None."""
    parts = NUM_RE.split(raw.strip())
    if len(parts) < 3:
        return None
    m = SUFFIX_RE.match(parts[2])
    return number(parts[1], SUFFIX[m.group(1)] if m else 1.0)


def user_metrics(line, user):
    """Metrics from the user's named regexes (runward.toml), [(name, compiled regex)]: one
    group names the metric after the regex; named groups name it after themselves."""
    out = {}
    for name, rx in user:
        m = rx.search(line)
        if not m:
            continue
        groups = m.groupdict()
        if groups:
            for g, raw in groups.items():
                v = None if raw is None else value_of(raw)
                if v is not None:
                    out[norm_name(g)] = v
        elif m.groups() and m.group(1) is not None:
            v = value_of(m.group(1))
            if v is not None:
                out[name] = v
    return out
