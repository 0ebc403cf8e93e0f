"""compare: two attempts of a run side by side -- what changed between them (files, env,
command, cwd; ledger.changes) and what it did: throughput and loss at the steps both reached,
with a one-line verdict. Worked out here, in one round trip: the env values and the log stay
on the target, only the comparison travels."""

from ..logmetrics.rules import median
from ..logselect import _attempt
from ..snapshots import text_of
from ..store import RunStore
from .history import changes, facts

DIFF_LINES = 400  # lines of one file's unified diff sent back at most
MIN_POINTS = 3  # fewer throughput points than this on either side: no number, "too few points"
ROWS = 10  # steps shown side by side at most


def compare(req, home):
    store = RunStore.existing(home, req.get("name"))
    a, b = _pair(store, req.get("a"), req.get("b"))
    fa, fb = (facts(store, att, "", True) for att in (a, b))
    sa, sb = fa.pop("series"), fb.pop("series")
    out = {"name": store.name, "a": a["attempt"], "b": b["attempt"], "changed": changes(a, b)}
    out["diffs"] = {p: file_diff(store, a, b, p) for p in out["changed"].get("files") or {}}
    for f in (fa, fb):
        f.pop("state", None)
    out["attempts"] = [fa, fb]
    out.update(side_by_side(sa, sb))
    return out


def file_diff(store, a, b, path):
    """{"diff", "truncated"}: the unified diff of PATH from attempt A's text to B's, when both
    were kept (snapshots.py); else {"why"}: which side's text is not there, and why."""
    texts = [text_of(store, att, path) for att in (a, b)]
    if None in texts:
        why = []
        for att, t in zip((a, b), texts):
            if t is None:
                had = ((att.get("snapshots") or {}).get("skipped") or {}).get(path)
                why.append("attempt %d: %s" % (att["attempt"], had or (
                    "no file" if path not in (att.get("hashes") or {}) or not att["hashes"][path]
                    else "its text was not kept (an older runward, or beyond the attempts kept)")))
        return {"why": "; ".join(why)}
    import difflib
    lines = list(difflib.unified_diff(texts[0].splitlines(True), texts[1].splitlines(True),
                                      "%s (attempt %d)" % (path, a["attempt"]), "%s (attempt %d)" % (path, b["attempt"])))
    return {"diff": "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines[:DIFF_LINES]),
            "truncated": len(lines) > DIFF_LINES}


def _pair(store, a, b):
    """The two attempt records: A and B as asked, else the last two."""
    if a is None and b is None:
        have = store.attempts()
        if len(have) < 2:
            from ..wire import bad_input
            raise bad_input("run %s has %d attempt%s: nothing to compare" % (
                store.name, len(have), "" if len(have) == 1 else "s"),
                "restart it first, or name two attempts: `runward compare %s A B`" % store.name)
        a, b = have[-2], have[-1]
    return _attempt(store, a), _attempt(store, b)


def side_by_side(sa, sb):
    """{"metric", "steps": [lo, hi], "rows", "throughput": [a, b], "loss": {...}, "verdict"}."""
    tp = sa["throughput"] if sa["throughput"] == sb["throughput"] else None
    pa, pb = _by_step(sa), _by_step(sb)
    # comparable steps: those both reached, each side past its warm-up
    lo = max(_after_warmup(sa), _after_warmup(sb))
    hi = min(max(pa) if pa else -1, max(pb) if pb else -1)
    common = sorted(s for s in pa if s in pb and lo <= s <= hi)
    out = {"metric": tp, "steps": [_n(common[0]), _n(common[-1])] if common else None}
    every = max(1, -(-len(common) // ROWS))
    out["rows"] = [[_n(s), pa[s][0], pb[s][0], pa[s][1], pb[s][1]] for s in common[::every]]
    ta = [pa[s][0] for s in common if pa[s][0] is not None]
    tb = [pb[s][0] for s in common if pb[s][0] is not None]
    words = []
    if tp is None:
        words.append("no throughput metric both attempts print" if (sa["throughput"] or sb["throughput"])
                     else "no throughput in either log")
    elif min(len(ta), len(tb)) < MIN_POINTS:
        words.append("%s: too few points at common steps (%d and %d; %d needed)" % (tp, len(ta), len(tb), MIN_POINTS))
    else:
        ma, mb = median(ta), median(tb)
        out["throughput"] = [ma, mb]
        words.append("%s %s -> %s (%s) over steps %s-%s" % (tp, si(ma), si(mb), pct(ma, mb), _n(lo), _n(hi)))
    losses = [s for s in common if pa[s][1] is not None and pb[s][1] is not None]
    if losses:
        s = losses[-1]
        out["loss"] = {"metric": sa["loss"], "step": s, "a": pa[s][1], "b": pb[s][1]}
        words.append("loss at step %s %s -> %s" % (_n(s), pa[s][1], pb[s][1]))
    out["verdict"] = "; ".join(words)
    return out


def _by_step(series):
    """{step: (throughput, loss)}: the last line that gave a step wins (a re-printed step)."""
    return {p[0]: (p[1], p[2]) for p in series["points"] if p[0] is not None}


def _after_warmup(series):
    """The first step past the warm-up points (ledger.WARMUP_*) of the throughput."""
    seen = 0
    for step, tp, _ in series["points"]:
        if tp is not None and step is not None:
            seen += 1
            if seen > series["warmup_points"]:
                return step
    return float("inf")


def _n(v):
    return int(v) if v == int(v) else v


def pct(a, b):
    return "%+.1f%%" % ((b - a) / a * 100.0) if a else "n/a"


def si(v):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return ("%.2f" % (v / div)).rstrip("0").rstrip(".") + suffix
    return "%.4g" % v
