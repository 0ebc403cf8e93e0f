"""A log line's training step, as the general parser (logmetrics.line.parse_line) reads it,
learned once per shape of line: stall.py reads each rank's last step from the newest 4 MiB of
a log on every status, and a training log prints a few shapes over and over."""

import re

STEP_KEYS = ("step", "global_step", "iteration", "iter", "num_updates", "train_step")
_DIGIT_RUN = re.compile(r"[0-9]+")

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
    from .logmetrics.line import parse_line
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
