"""Line skeletons as templates: the naming of a line's numbers worked out once per shape.

Lines that one program prints share a skeleton, the line with its digits deleted. A template
is a regex of the line with every digit run as `\\d+`, whose groups are the named numbers:
a line then costs a `bytes.translate`, a dict look-up and one `fullmatch`, all in C, on the
raw bytes (never decoded).
"""

import re

from .line import analyse, number, prefix_end
from .patterns import (DIGIT_RUN_B, DIGITS, EVENT_RE, NAN_WORD_RE_B, NUM_RE_B, TS_MD_RE,
                       TS_RE)


def unsep(token):
    """A number token with thousands separators (14,512) as a float."""
    return float(token.replace(b",", b""))


def converter(mult, inv, comma):
    """The function turning one slot's token (bytes) into its float: `float` itself when
    the skeleton says the token is a plain number, which is nearly always."""
    if mult == 1.0 and not inv:
        return unsep if comma else float
    return lambda token: number(token, mult, inv)


class Template(object):
    """A line skeleton's regex and what its groups are."""

    __slots__ = ("match", "names", "convs", "ts", "checks", "progress", "event", "finite",
                 "losses", "lazy", "fast", "units")

    def __init__(self, match, names, convs, ts, event=False):
        self.match = match  # compiled fullmatch over the raw line bytes
        self.names = names  # metric name of each group
        self.convs = convs  # converter of each group, or None when every one is `float`
        self.ts = ts  # the line starts with a timestamp the clock reads
        self.checks = ()  # (group, name, roles, converter, floor, ceiling): what rules read
        self.progress = False  # a metric that shows training going on (loss, step, tok/s)
        self.event = event  # lines of this skeleton were events (checked again per line)
        self.finite = False  # the skeleton has no nan/inf word: every value is finite
        self.losses = ()  # NaN keys of loss slots whose finite values need no check
        self.lazy = False  # finite and nothing to check: match only if kept as a point
        self.fast = False  # lazy and no event: the hot loop's first test
        self.units = {}  # metric name -> unit ("GiB", "%", "ms"), for those that have one

    def values(self, m):
        groups = m.groups()
        if self.convs is None:
            return dict(zip(self.names, map(float, groups)))
        return {name: conv(g) for name, g, conv in zip(self.names, groups, self.convs)}


def template(line_b, line):
    """The template of raw line LINE_B (LINE decoded), or None if it is no event and names
    no number."""
    event = EVENT_RE.search(line_b) is not None
    parts_b = NUM_RE_B.split(line_b)
    parts = [p.decode("utf-8", "replace") for p in parts_b]
    slots = analyse(parts, prefix_end(line))
    if not slots:
        return Template(None, (), None, False, True) if event else None
    named = {}
    for gi, (i, name, mult, inv, unit) in enumerate(slots):
        named[i] = gi
    pieces = []
    for j, p in enumerate(parts_b):
        rx = DIGIT_RUN_B.sub(rb"\\d+", re.escape(p))
        if j % 2 and (j // 2) in named:
            rx = b"(" + rx + b")"
        pieces.append(rx)
    convs = tuple(converter(mult, inv, b"," in parts_b[2 * i + 1])
                  for i, name, mult, inv, unit in slots)
    if all(c is float for c in convs):
        convs = None
    ts = bool(TS_RE.match(line) or TS_MD_RE.match(line))
    tpl = Template(re.compile(b"".join(pieces), re.S).fullmatch,
                   tuple(s[1] for s in slots), convs, ts, event)
    tpl.finite = not NAN_WORD_RE_B.search(line_b.translate(None, DIGITS))
    tpl.units = {s[1]: s[4] for s in slots if s[4]}
    return tpl
