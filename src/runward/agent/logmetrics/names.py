"""What a metric's name says it is: a loss, a throughput (and which one is the main one), a
count of NaN steps, a step counter; and the roles that tell which rules read it."""

import re

from .patterns import NORM_RE

# Throughput names, best first: the main one is the first class that has a match. Tokens
# (tok/s, tokens_per_second, torchtitan's tps, Axolotl's tokens/train_per_sec_per_gpu), samples and images, words, anything called
# throughput, iterations or batches, a bare rate; last, a time per step (see INVERSE_PAT).
THROUGHPUT_PATS = (
    r"(^|_)(tok|toks|tokens?)(_per)?_s(ec(ond)?)?($|_)|(^|_)(tgs|tps)($|_)|tokens?_?per_?sec"
    r"|(^|_)tokens?_train(ing|able)?_per_s(ec(ond)?)?($|_)",  # Axolotl's tokens/train_per_sec_per_gpu
    r"samples?_(per_)?s(ec(ond)?)?($|_)|samplespersec"
    r"|(^|_)(img|imgs|images?)_(per_)?s(ec(ond)?)?($|_)",
    r"(^|_)(wps|words_s|words_per_s(ec(ond)?)?)($|_)",
    r"throughput",
    r"(^|_)(it_s|ups|steps?_per_s(ec(ond)?)?|batch(es)?_per_s(ec(ond)?)?)($|_)",
    r"^rate$",  # timm's "500.12/s"; not learning_rate, dropout_rate
)
# A time per iteration or step: a throughput upside down. Megatron's "elapsed time per
# iteration (ms)", NeMo's "train_step_timing in s", LitGPT's "iter time: 412.30 ms",
# "step_time", "time/iter", Keras' "15ms/step". Not "time" alone (nanoGPT's, timm's, a wall
# clock), nor Composer's "time/batch", which counts batches.
INVERSE_PAT = (r"(^|_)(elapsed_time_per_(iter|iteration|step)|time_per_(iter|iteration|step|batch)"
               r"|(iter|iteration|step|batch)_tim(e|ing)|time_(iter|step)"
               r")($|_)|^(s|ms|us|sec)_(per_)?(it|iter|iteration|step)$")
INVERSE_RE = re.compile(INVERSE_PAT)
# The unit of an inverse metric, from its name (else seconds): "..._ms", "ms_step", "us_step".
INVERSE_MS_RE = re.compile(r"(^|_)ms($|_)")
INVERSE_US_RE = re.compile(r"(^|_)us($|_)")
THROUGHPUT_CLASSES = tuple(re.compile(p) for p in THROUGHPUT_PATS + (INVERSE_PAT,))
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


def is_inverse(name):
    """A time per step (Megatron's elapsed_time_per_iteration_ms): lower is faster. The rules
    that read a throughput read it as the rate it stands for (inverse_rate)."""
    return INVERSE_RE.search(name) is not None and throughput_class(name) == len(THROUGHPUT_PATS)


def seconds_per_unit(name):
    """What one unit of inverse metric NAME is in seconds: ms, us or else s."""
    if INVERSE_MS_RE.search(name):
        return 1e-3
    if INVERSE_US_RE.search(name):
        return 1e-6
    return 1.0


def inverse_rate(name, v):
    """Steps per second that a time per step V (in NAME's unit) stands for; inf for 0, NaN for
    NaN."""
    if v != v:
        return v
    return 1.0 / (v * seconds_per_unit(name)) if v else float("inf")


def throughput_metric(names):
    """The main throughput metric among NAMES, or None.

    Tokens per second beat samples, words, anything called throughput, iterations, bare
    rates and, last, a time per step (is_inverse); among equals, a current value beats a running average, generation beats prompt
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
