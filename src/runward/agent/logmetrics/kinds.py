"""Every alert kind, once: its label, what its alert says, how it is judged, whether a health
action may answer it, how the root cause of a failed attempt ranks it, how a plot marks it.

Both sides read this table: the agent (this package's events and tracebacks, the health op,
a watch's window, attribution) and the CLI (health.py's lines and plot, spec/supervision.py's
actions), which imports the log parser already (tests/test_layout.py's AGENT_ALLOWED). A new
log event is its pattern (a named group of patterns.py's EVENT_RE) and its row here.
"""

FACT = "fact"  # the attempt's own: found by the incremental scan, kept in health.json
RULE = "rule"  # a watch's own rules over its window: never stored (health/window.py)
OWN = "own"  # judged by its own judge at each poll (health/stall.py's straggler, health/baseline.py)


class Kind(object):
    """One alert kind's row.

    root: how a line of this kind ranks as a failed attempt's root cause (health/attribution.py), as
    (rank, the attribution's kind, what it says; {line} the line's text): rank 0 even where
    the line reads as a cascade (an OOM that mentions a timeout is still an OOM), 1 before
    the line's Xid, torchrun exit or exception, 2 after them; None: never a root cause.
    names_traceback: a traceback whose exception line holds it is said as of this kind."""

    __slots__ = ("name", "label", "judged", "color", "detail", "actionable", "alias", "quotes_line", "root",
                 "names_traceback")

    def __init__(self, name, label, judged, color="black", detail=None, actionable=True, alias=None,
                 quotes_line=False, root=None, names_traceback=False):
        self.name, self.label, self.judged, self.color = name, label, judged, color
        self.detail = detail  # a log event's words, before its line's
        self.actionable = actionable  # [health] actions may name it (spec/supervision.py)
        self.alias = alias  # its short name in [health] actions
        self.quotes_line = quotes_line  # its one-line alert quotes the log line (a metric's value)
        self.root, self.names_traceback = root, names_traceback


# In the order [health] actions lists the kinds it takes.
KINDS = dict((k.name, k) for k in (
    Kind("nan", "NaN", FACT, "red", quotes_line=True),
    Kind("inf", "Inf", FACT, "red", quotes_line=True),
    Kind("cuda_oom", "CUDA OOM", FACT, "purple", "CUDA out of memory", alias="oom",
         root=(0, "cuda_oom", "CUDA out of memory"), names_traceback=True),
    Kind("traceback", "traceback", FACT, "black", "Python traceback"),
    Kind("nccl", "NCCL", FACT, "brown", "NCCL error or collective timeout",
         root=(2, "nccl", "NCCL error: {line}"), names_traceback=True),
    Kind("oom_killed", "OOM-killed?", FACT, "purple",
         "killed by SIGKILL, most often the kernel OOM killer (the agent checks dmesg)",
         root=(1, "killed", "killed by SIGKILL (most often the OOM killer)")),
    Kind("stall", "stall", RULE, "gray"),
    Kind("straggler", "straggler", OWN),
    Kind("below_min", "below floor", RULE, "orange", alias="min", quotes_line=True),
    Kind("above_max", "above ceiling", RULE, "orange", alias="max", quotes_line=True),
    Kind("drop", "throughput drop", RULE, "orange", quotes_line=True),
    Kind("idle", "idle", FACT),
    Kind("below_baseline", "below_baseline", OWN, alias="baseline"),
    Kind("exited", "exited", FACT, actionable=False),
))

EVENT_DETAIL = dict((k, r.detail) for k, r in KINDS.items() if r.detail)
FACT_KINDS = frozenset(k for k, r in KINDS.items() if r.judged == FACT)
RULE_KINDS = frozenset(k for k, r in KINDS.items() if r.judged == RULE)
ACTION_KINDS = tuple(k for k, r in KINDS.items() if r.actionable)
ACTION_ALIASES = dict((r.alias, k) for k, r in KINDS.items() if r.alias)
TRACEBACK_KINDS = frozenset(k for k, r in KINDS.items() if r.names_traceback)


def label(kind):
    """How people read KIND: its label, the kind itself where the table has none."""
    row = KINDS.get(kind)
    return row.label if row else kind


def color(kind):
    row = KINDS.get(kind)
    return row.color if row else "black"
