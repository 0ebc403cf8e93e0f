"""One line to metrics, without templates: how the numbers of a line get their names.

Every number in a line is a slot, named after the text just before it: `loss=2.31`,
`loss: 2.31`, `loss 2.31`, `'loss': 2.31`, `"loss": "2.31"`, `lm loss: 2.3E+00 |` (analyse).
parse_line is the reference; the templates (templates.py) do the same per line skeleton.
A number's unit comes from what follows it (`31.72GiB`, `30.49%`, `412.30 ms`, `tok/s`) or
from its name (`memory(GiB)`, `..._ms`); units() gives them per name.
"""

import math

from .names import is_inverse, norm_name, seconds_per_unit
from .patterns import (ANSI_RE, CSI_OPEN_RE, NAME_TAIL_RE, NAME_UNIT, NAME_UNIT_RE, NUM_RE,
                       PREFIX_RE, RATE_UNIT_RE, SHARE_GAP_RE, SOURCE_RE, SUFFIX, SUFFIX_RE,
                       TIME_UNIT_RE, TOOL_LINE_RE, UNIT_GLUED_RE)


def name_from_gap(gap, first):
    """The metric name that the text GAP (between two numbers) gives the number after it."""
    if not first:
        # A unit glued to the previous number ("123.45ms, mfu ", "5.42it/s, loss=") is not
        # the start of the next name.
        gap = UNIT_GLUED_RE.sub("", gap, count=1)
    m = NAME_TAIL_RE.search(gap)
    if not m:
        return None
    text = m.group(1)
    if ") " in text:  # "412.30 ms (step) remaining time": the name is what follows ")"
        text = text.rsplit(") ", 1)[1]
    words = text.split()
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


def suffix(after):
    """(multiplier, unit) that the text AFTER a number gives it: K/M/G/T/B multiply, decimal
    bytes (GB) are scaled to bytes, binary bytes (GiB) are kept as printed with their unit."""
    m = SUFFIX_RE.match(after)
    if not m:
        return 1.0, None
    s = m.group(1)
    if s.endswith("iB"):
        return 1.0, s
    return SUFFIX[s[0]], ("B" if len(s) > 1 else None)


def unit_of(name, after, unit):
    """The unit of a number named NAME followed by AFTER (UNIT: the one suffix() found)."""
    if unit:
        return unit
    if after.startswith("%"):
        return "%"
    m = TIME_UNIT_RE.match(after) or RATE_UNIT_RE.match(after)
    if m:
        return m.group(1)
    m = NAME_UNIT_RE.search(name)
    if m:
        return NAME_UNIT[m.group(1)]
    if is_inverse(name):
        return {1e-3: "ms", 1e-6: "us"}.get(seconds_per_unit(name), "s")
    return None


def _named(gap, after, first, prev):
    """(name, inverse) of the number between GAP and AFTER; PREV: the last slot's name."""
    name = name_from_gap(gap, first)
    if name is None:
        if prev and after.startswith("%") and SHARE_GAP_RE.match(gap):
            return prev + "_pct", False  # torchtitan's "memory: 31.72GiB(40.04%)"
        return name_from_unit(after)
    if is_inverse(name) and seconds_per_unit(name) == 1.0:
        m = TIME_UNIT_RE.match(after)
        if m and m.group(1) != "s":
            name += "_" + m.group(1)  # LitGPT's "iter time: 412.30 ms": iter_time_ms
    return name, False


def analyse(parts, prefix_end):
    """Name the numbers of one line. PARTS is NUM_RE.split(line): text, number, text, ...

    Returns (index of the number, name, multiplier, inverse, unit) for each named number.
    """
    if any("NCCL INFO" in p for p in parts[0::2]):
        return ()  # NCCL_DEBUG=INFO chatter: channels, ranks, ports; no training metric
    if TOOL_LINE_RE.match("".join(parts)):
        return ()  # a batch system's own lines ("*** STEP 42.0 ... CANCELLED", TOOL_LINE_RE): not the job's
    esc = any("\x1b" in p for p in parts[0::2])
    slots = []
    seen = set()
    pos = 0
    carry = ""  # an ANSI escape's digits and the text before them, folded into the next gap
    prev = None
    for i in range(len(parts) // 2):
        gap = parts[2 * i]
        pos += len(gap)
        start = pos
        pos += len(parts[2 * i + 1])
        if start < prefix_end:
            continue  # timestamps, [rank0], (pid=12), [file.py:69]: not data
        first = i == 0 or start <= prefix_end
        if start - len(gap) < prefix_end:  # the name is in the message, not in the prefix
            gap = gap[prefix_end - start + len(gap):]
            first = True
        if esc:
            gap = carry + gap
            if CSI_OPEN_RE.search(gap):
                carry = gap + parts[2 * i + 1]  # "\x1b[38;2;54;..m": a colour, no number
                continue
            carry = ""
            # Nothing is glued to the last number when an escape follows it.
            first = first or gap.startswith("\x1b")
            gap = ANSI_RE.sub("", gap)
        after = parts[2 * i + 2]
        name, inv = _named(gap, after, first, prev)
        if not name or name in seen:
            continue
        seen.add(name)
        prev = name
        mult, unit = suffix(after)
        slots.append((i, name, mult, inv, unit_of(name, after, unit)))
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
            for i, name, mult, inv, unit in analyse(parts, prefix_end(line))}


def units(line):
    """{name: unit} of the numbers of LINE that have one ("GiB", "%", "ms", "tok/s")."""
    parts = NUM_RE.split(line)
    return {name: unit for i, name, mult, inv, unit in analyse(parts, prefix_end(line)) if unit}


def value_of(raw):
    """A user regex's capture as a number (K/M/G suffix, separators), or None."""
    parts = NUM_RE.split(raw.strip())
    if len(parts) < 3:
        return None
    return number(parts[1], suffix(parts[2])[0])


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
