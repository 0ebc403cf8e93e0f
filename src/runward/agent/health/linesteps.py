"""A log line's training step, as the general parser (logmetrics.line.parse_line) reads it,
learned once per shape of line: health/stall.py reads each rank's last step from the newest 4 MiB of
a log on every status, and a training log prints a few shapes over and over."""

import re

STEP_KEYS = ("step", "global_step", "iteration", "iter", "num_updates", "train_step")
_DIGIT_RUN = re.compile(r"[0-9]+")
# A line's rank prefix: `[rank3]:` (torch.distributed's stderr prefix), `[default3]:` (torchrun
# --tee/--redirects: the role name and the *local* rank), each maybe repeated by nesting.
# Kept here, where stall.py reads a running run's ranks on each status, rather than in
# attribution.py (which uses it too): importing that module compiles its regexes (2 ms).
RANK_PREFIX_RE = re.compile(r"^\[(rank|[A-Za-z_][A-Za-z_]*?)(\d+)\]:\s?")

# A line's shape (its text with every digit made 0) -> how its step is read: None (lines of
# that shape show no step), SLOW (parse_line each time), or (K, type): the step is the K-th
# run of digits. A training log prints a few shapes over and over (the ranks' step lines
# differ only in their numbers); parse_line, the general parser, cost ~250 us a line, which
# made a first status of a big rank-prefixed log read 4 MiB of them at ~40K lines a second.
_SHAPES = {}
_SHAPES_MAX = 4096
SLOW = "slow"
_ZEROS = {ord(c): "0" for c in "123456789"}


def step_of(text):
    """The step TEXT (a line, its rank prefixes gone) shows, as parse_line reads it; None."""
    if "step" not in text and "iter" not in text and "update" not in text:
        return None  # most lines: no parse at all
    shape = text.translate(_ZEROS)
    how = _SHAPES.get(shape, SLOW)
    if how is None:
        return None
    if how is not SLOW:
        v = how[1](_DIGIT_RUN.findall(text)[how[0]])
        return v if abs(v) < 1e18 else None
    v = parsed_step(text)
    if shape not in _SHAPES and len(_SHAPES) < _SHAPES_MAX:
        learned = _how(text, v)
        if learned is not SLOW or v is None:
            _SHAPES[shape] = learned
    return v


def parsed_step(text):
    from ..logmetrics.line import parse_line
    m = parse_line(text)
    for k in STEP_KEYS:
        v = m.get(k)
        if isinstance(v, (int, float)) and v == v and abs(v) < 1e18:
            return v
    return None


def _how(text, v):
    """How the step V of TEXT is read from a line of its shape: None where it has none; (K,
    type) where V is the only run of digits equal to it; else SLOW (a step that is no plain
    run of digits, or one two runs could be: learned from a later line of that shape)."""
    if v is None:
        return None
    if isinstance(v, bool) or v != int(v) or v < 0:
        return SLOW
    at = [k for k, run in enumerate(_DIGIT_RUN.findall(text)) if int(run) == v]
    return (at[0], type(v)) if len(at) == 1 else SLOW


# A whole line's shape (bytes, every digit made 0) -> where its rank and step are: (the rank
# key's word or None, the rank's digits' span, the step's span or None, the step's type), or
# SLOW. health/stall.py reads the newest 4 MiB of a log on the first status, ~43K lines of a
# rank-prefixed log: the shapes of the whole block in one bytes.translate, then a line costs
# a dict look-up and two slices (the decode, the rank prefix's regex and str.translate per
# line cost 0.2 s of that status; bench/README.md, "first status").
_LINES = {}
_B_ZEROS = bytes.maketrans(b"123456789", b"000000000")


def line_facts(block, rank_of):
    """(rank key or None, step or None) of each line of BLOCK (bytes, lines split by "\\n"),
    as rank_of(line decoded, its "\\r" gone) and step_of(the rest) say."""
    get = _LINES.get
    for line, shape in zip(block.split(b"\n"), block.translate(_B_ZEROS).split(b"\n")):
        how = get(shape)
        if how is None:
            how = _learn(line, shape, rank_of)
        if how is SLOW:
            key, rest = rank_of(line.decode("utf-8", "replace").replace("\r", ""))
            yield key, step_of(rest)
            continue
        word, ra, rb, sa, sb, kind = how
        step = None
        if sa is not None:
            step = kind(line[sa:sb])
            step = step if abs(step) < 1e18 else None
        yield (word + line[ra:rb].decode() if word else None), step


def _learn(line, shape, rank_of):
    """How lines of SHAPE show their rank and step, from LINE (step_of's own learning: a
    line where the step could be two runs of digits teaches nothing)."""
    if b"\r" in line or not line.isascii():
        how = SLOW  # the decode's replacements, the "\r" dropped: read as a whole each time
    else:
        text = line.decode("ascii")
        key, rest = rank_of(text)
        at = len(text) - len(rest)
        how = _step_span(rest, step_of(rest), [(a + at, b + at) for a, b in
                                               (m.span() for m in _DIGIT_RUN.finditer(rest))])
        if how is not SLOW and key is not None:
            ra, rb = [m.span() for m in _DIGIT_RUN.finditer(text, 0, at)][-1]  # the innermost prefix's
            word = key[:key.rindex(" ") + 1]
            how = SLOW if word + text[ra:rb] != key else (word, ra, rb) + how
        elif how is not SLOW:
            how = (None, 0, 0) + how
    if how is not SLOW and len(_LINES) < _SHAPES_MAX:
        _LINES[shape] = how
    return how


def _step_span(rest, v, spans):
    """(start, end, type) of the step V among SPANS (the digit runs of the line's REST), or
    (None, None, None) where it shows none; SLOW as _how says."""
    how = _how(rest, v)
    if how is None or how is SLOW:
        return (None, None, None) if how is None else SLOW
    return spans[how[0]] + (how[1],)
