"""What a metric's name says it is: a loss, a throughput (and which one is the main one), a
count of NaN steps, a step counter; and the roles that tell which rules read it."""

import re

from .patterns import NORM_RE

# Throughput names, best first: the main one is the first class that has a match.
THROUGHPUT_PATS = (
    r"(^|_)(tok|toks|tokens?)(_per)?_s(ec(ond)?)?($|_)|(^|_)tgs($|_)|tokens?_?per_?sec",
    r"samples?_(per_)?s(ec(ond)?)?($|_)|samplespersec",
    r"(^|_)(wps|words_s|words_per_s(ec(ond)?)?)($|_)",
    r"throughput",
    r"(^|_)(it_s|ups|steps?_per_s(ec(ond)?)?)($|_)",
    r"(^|_)rate$",
)
THROUGHPUT_CLASSES = tuple(re.compile(p) for p in THROUGHPUT_PATS)
# a counter of NaN steps (Megatron's "number of nan iterations"), not any name with "nan" in
# it: an echoed setting like TRAIN_NAN_AT=10 is no NaN
NANCOUNT_RE = re.compile(r"(^|_)nan_(iter|iters|iterations|steps|count|skipped)($|_)|"
                         r"(^|_)(number_of|num|n|count)_nan(_|$)")
# Roles, bits: which rules read a metric (R_PROGRESS: it shows training going on).
R_LOSS, R_NANCOUNT, R_BOUND, R_DROP, R_PROGRESS = 1, 2, 4, 8, 16
STEP_NAMES = frozenset(("step", "iter", "iteration", "global_step", "num_updates"))


def norm_name(name):
    """`tok/s` -> `tok_s`, `lm loss` -> `lm_loss`, `elapsed time (ms)` -> `elapsed_time_ms`."""
    return NORM_RE.sub("_", name.lower()).strip("_")


def is_loss(name):
    """Loss-like: the name says loss (but a loss *scale* is not a loss)."""
    return "loss" in name and "scale" not in name


def throughput_class(name):
    """Index of the throughput class NAME falls in (0 best), or None if it is no throughput."""
    for i, rx in enumerate(THROUGHPUT_CLASSES):
        if rx.search(name):
            return i
    return None


def is_throughput(name):
    return throughput_class(name) is not None


def throughput_metric(names):
    """The main throughput metric among NAMES, or None.

    Tokens per second beat samples, words, anything called throughput, iterations and bare
    rates; among equals, a current value beats a running average, generation beats prompt
    (vLLM), then the shorter name.
    """
    best = None
    for n in names:
        c = throughput_class(n)
        if c is None:
            continue
        key = (c, "prompt" in n, any(w in n for w in ("avg", "running", "mean")), len(n), n)
        if best is None or key < best[0]:
            best = (key, n)
    return best[1] if best else None
